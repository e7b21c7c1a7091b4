// Internal: the pieces every differentiable op uses to record its node.
//
// Pattern (see elementwise.cpp):
//   if (!should_record({&a, &b})) return raw::op(a, b);
//   auto node = make_node<OpBackward>({&a, &b}, ...);
//   Tensor out = run_raw([&] { return raw::op(a, b); });
//   save what the needed gradients use (node->needs_input_grad(i));
//   return finish(out, node);
#pragma once

#include <initializer_list>
#include <memory>
#include <vector>

#include <tapegrad/autograd/autograd_meta.h>
#include <tapegrad/autograd/grad_mode.h>
#include <tapegrad/autograd/saved_variable.h>
#include <tapegrad/tensor/ops.h>
#include <tapegrad/tensor/raw.h>

namespace tg::autograd::ops_detail {

inline bool should_record(std::initializer_list<const Tensor*> inputs) {
  if (!is_grad_enabled()) return false;
  for (const Tensor* t : inputs)
    if (impl::requires_grad(*t)) return true;
  return false;
}

inline bool should_record(const std::vector<Tensor>& inputs) {
  if (!is_grad_enabled()) return false;
  for (const Tensor& t : inputs)
    if (impl::requires_grad(t)) return true;
  return false;
}

template <class N, class... Args>
std::shared_ptr<N> make_node(std::initializer_list<const Tensor*> inputs, Args&&... args) {
  auto node = std::make_shared<N>(std::forward<Args>(args)...);
  edge_list edges;
  edges.reserve(inputs.size());
  for (const Tensor* t : inputs) edges.push_back(impl::gradient_edge(*t));
  node->set_next_edges(std::move(edges));
  return node;
}

template <class N, class... Args>
std::shared_ptr<N> make_node(const std::vector<Tensor>& inputs, Args&&... args) {
  auto node = std::make_shared<N>(std::forward<Args>(args)...);
  edge_list edges;
  edges.reserve(inputs.size());
  for (const Tensor& t : inputs) edges.push_back(impl::gradient_edge(t));
  node->set_next_edges(std::move(edges));
  return node;
}

// Runs the raw op with grad mode off, so that method calls inside the raw
// layer (views, casts) on inputs that require grad do not record.
template <class F>
Tensor run_raw(F&& f) {
  AutoGradMode no_grad(false);
  return f();
}

// Makes `out` the output of `node`; integer/bool outputs never require grad.
inline Tensor finish(Tensor out, const std::shared_ptr<Node>& node) {
  if (out.is_floating_point()) impl::set_history(out, node);
  return out;
}

// A node whose name is "<Op>Backward" and whose forward op is `op`.
class OpNode : public Node {
 public:
  explicit OpNode(const char* op, const char* name) : op_(op), name_(name) {}
  std::string name() const override { return name_; }
  std::string forward_op() const override { return op_; }

 private:
  const char* op_;
  const char* name_;
};

}  // namespace tg::autograd::ops_detail

namespace tg::autograd::impl {
// Differentiable sparse pieces (autograd/ops/sparse.cpp): sparse_coo_tensor
// without the index checks (for gradients built on indices known to be
// valid), and the sparse forms that sum, mm and matmul route to.
Tensor sparse_coo_unchecked(const Tensor& indices, const Tensor& values, const IntList& sizes,
                            bool coalesced = false);
Tensor sparse_sum(const Tensor& s);
Tensor sparse_mm(const Tensor& s, const Tensor& dense, const char* op = "mm");
}  // namespace tg::autograd::impl
