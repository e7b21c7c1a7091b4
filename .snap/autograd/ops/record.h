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
#include <tapegrad/autograd/forward_ad.h>
#include <tapegrad/autograd/grad_mode.h>
#include <tapegrad/autograd/saved_variable.h>
#include <tapegrad/tensor/error.h>
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
  for (const Tensor* t : inputs)
    edges.push_back(impl::gradient_edge(*t));
  node->set_next_edges(std::move(edges));
  return node;
}

template <class N, class... Args> std::shared_ptr<N> make_node(const std::vector<Tensor>& inputs, Args&&... args) {
  auto node = std::make_shared<N>(std::forward<Args>(args)...);
  edge_list edges;
  edges.reserve(inputs.size());
  for (const Tensor& t : inputs)
    edges.push_back(impl::gradient_edge(t));
  node->set_next_edges(std::move(edges));
  return node;
}

// Runs the raw op with grad mode and forward mode off, so that method calls
// inside the raw layer (views, casts) on inputs that require grad or carry
// tangents neither record nor push tangents.
template <class F> auto run_raw(F&& f) -> decltype(f()) {
  AutoGradMode no_grad(false);
  forward_ad::detail::Suspend no_tangents;
  return f();
}

// Makes `out` the output of `node`; integer/bool outputs never require grad.
inline Tensor finish(Tensor out, const std::shared_ptr<Node>& node) {
  if (is_differentiable(out.dtype())) impl::set_history(out, node);
  return out;
}

// ---- forward mode (tangent rules) ----
// Whether forward mode is on and one of `inputs` has a tangent.
inline bool fw_any(std::initializer_list<const Tensor*> inputs) {
  if (!forward_ad::is_active()) return false;
  for (const Tensor* t : inputs)
    if (impl::has_fw_grad(*t)) return true;
  return false;
}
inline bool fw_any(const std::vector<Tensor>& inputs) {
  if (!forward_ad::is_active()) return false;
  for (const Tensor& t : inputs)
    if (impl::has_fw_grad(t)) return true;
  return false;
}
// The tangent of t at the current level (undefined: zero).
inline Tensor fw_t(const Tensor& t) { return impl::fw_grad(t); }
// Batched tangents (forward_ad::dual_level(batch)): a tangent has the
// batch as a leading dimension. Rules use these to address it:
// the batch (0: unbatched; readable while a rule runs paused);
inline int64_t fw_batch() { return forward_ad::detail::current_batch(); }
// dim d of a rank-`ndim` tensor as a dim of its tangent;
inline int64_t fw_dim(int64_t d, int64_t ndim) {
  if (fw_batch() == 0) return d;
  return (d < 0 ? d + ndim : d) + 1;
}
// a primal shape as its tangent's shape;
inline IntList fw_shape(IntList s) {
  if (fw_batch() > 0) s.insert(s.begin(), fw_batch());
  return s;
}
// a tangent with singleton dims after the batch dim up to primal rank
// `ndim`, so that it broadcasts (right-aligned) against primal-shaped
// tensors of rank <= ndim; unbatched: unchanged;
inline Tensor fw_pad(const Tensor& t, int64_t ndim) {
  if (fw_batch() == 0 || !t.defined() || t.dim() - 1 >= ndim) return t;
  IntList s = t.sizes();
  s.insert(s.begin() + 1, size_t(ndim - (t.dim() - 1)), 1);
  return t.reshape(s);
}
// a zero tangent for `like`.
inline Tensor fw_zeros(const Tensor& like) { return zeros(fw_shape(like.sizes()), like.options()); }

// Sets out's tangent to `tangent` (a sum of per-input contributions, any of
// them undefined), at out's shape (a broadcast contribution is expanded).
inline void fw_set(const Tensor& out, Tensor tangent) {
  if (!tangent.defined()) return;
  if (!is_differentiable(out.dtype())) return;
  const IntList want = fw_shape(out.sizes());
  if (tangent.sizes() != want) tangent = fw_pad(tangent, out.dim()).expand(want).contiguous();
  if (tangent.dtype() != out.dtype()) tangent = tangent.to(out.dtype());
  impl::set_fw_grad(out, tangent);
}
// a + b where either may be undefined (a missing tangent is zero).
inline Tensor fw_add(const Tensor& a, const Tensor& b) {
  if (!a.defined()) return b;
  if (!b.defined()) return a;
  return add(a, b);
}
// Sets out's tangent to rule(), run with forward mode paused (the rule's own
// ops push no tangents; read the inputs' tangents before).
template <class F> void fw_rule(const Tensor& out, F&& rule) {
  Tensor t;
  {
    forward_ad::detail::Suspend pause;
    t = rule();
  }
  fw_set(out, t);
}
// For an op linear in `self` (views, copies, sums): out's tangent is the op
// applied to self's tangent (`op` is the differentiable op).
template <class F> Tensor fw_linear(Tensor out, const Tensor& self, F&& op) {
  if (forward_ad::is_active())
    if (Tensor t = fw_t(self); t.defined()) fw_rule(out, [&] { return op(t); });
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

// An OpNode that saves its input `self` and its output `result` (either may
// stay empty) and releases both after backward.
class SelfResultNode : public OpNode {
 public:
  using OpNode::OpNode;
  void release_variables() override {
    self_.release();
    result_.release();
  }
  SavedVariable self_, result_;
};

}  // namespace tg::autograd::ops_detail

namespace tg::autograd::impl {
// Differentiable sparse pieces (autograd/ops/sparse.cpp): sparse_coo_tensor
// without the index checks (for gradients built on indices known to be
// valid), and the sparse forms that sum, mm and matmul route to.
Tensor sparse_coo_unchecked(const Tensor& indices, const Tensor& values, const IntList& sizes, bool coalesced = false);
Tensor sparse_sum(const Tensor& s);
Tensor sparse_mm(const Tensor& s, const Tensor& dense, const char* op = "mm");
}  // namespace tg::autograd::impl
