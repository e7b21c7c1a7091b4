#include <tapegrad/autograd/node.h>

#include <algorithm>
#include <atomic>

#include <tapegrad/autograd/autograd_meta.h>
#include <tapegrad/autograd/grad_mode.h>
#include "tensor/deferred_release.h"
#include <tapegrad/tensor/ops.h>
#include <tapegrad/tensor/raw.h>

namespace tg::autograd {

namespace detail {
// One counter for the process, not per thread: nodes that a create_graph
// backward records on a device worker are ordered against the forward's nodes
// as when the backward runs on the caller's thread (inline, under CUDA graph
// capture), so both run a later backward in the same order and accumulate
// its gradients in the same order, bit for bit.
uint64_t next_sequence_nr() {
  static std::atomic<uint64_t> counter{0};
  return counter.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace detail

InputMetadata::InputMetadata(const Tensor& t) : sizes(t.sizes()), dtype(t.dtype()), device(t.device()) {
  if (device.is_cuda()) stream = cuda::current_stream(device.index());
}

cuda::Stream Node::stream() const {
  for (const InputMetadata& m : input_metadata_)
    if (m.stream.is_valid()) return m.stream;
  return cuda::Stream();
}

Tensor InputMetadata::zeros() const { return tg::zeros(sizes, TensorOptions().dtype(dtype).device(device)); }

struct Node::PreHooks {
  struct Entry {
    uint64_t id;
    uint32_t input_nr;
    TensorHook fn;
  };
  std::vector<Entry> hooks;
  std::vector<std::pair<uint32_t, std::weak_ptr<Tensor>>> retained;
  uint64_t next_id = 0;
  std::mutex m;
};

Node::Node() : Node(detail::next_sequence_nr()) {}

Node::~Node() {
  for (Edge& e : next_edges_)
    tg::detail::release_deferred(std::move(e.function));
}
Node::Node(uint64_t sequence_nr) : sequence_nr_(sequence_nr) {}

void Node::add_next_edge(Edge e) {
  if (e.is_valid()) {
    topological_nr_ = std::max(topological_nr_, e.function->topological_nr_ + 1);
  }
  next_edges_.push_back(std::move(e));
}

void Node::set_next_edges(edge_list edges) {
  next_edges_.clear();
  next_edges_.reserve(edges.size());
  for (Edge& e : edges)
    add_next_edge(std::move(e));
}

uint32_t Node::add_input_metadata(const Tensor& t) {
  input_metadata_.emplace_back(t);
  return uint32_t(input_metadata_.size() - 1);
}

bool Node::should_compute_output(size_t i) const {
  if (i >= next_edges_.size() || !next_edges_[i].is_valid()) return false;
  if (!edge_trimming_enabled()) return true;
  return detail::task_should_execute(next_edges_[i].function.get());
}

bool Node::should_compute_any_output() const {
  for (size_t i = 0; i < next_edges_.size(); ++i)
    if (should_compute_output(i)) return true;
  return false;
}

HookHandle Node::add_tensor_pre_hook(uint32_t input_nr, TensorHook hook) {
  if (!pre_hooks_) pre_hooks_ = std::make_shared<PreHooks>();
  std::lock_guard<std::mutex> lock(pre_hooks_->m);
  uint64_t id = pre_hooks_->next_id++;
  pre_hooks_->hooks.push_back({id, input_nr, std::move(hook)});
  std::weak_ptr<PreHooks> weak = pre_hooks_;
  return HookHandle([weak, id] {
    if (auto h = weak.lock()) {
      std::lock_guard<std::mutex> lock(h->m);
      auto& v = h->hooks;
      v.erase(std::remove_if(v.begin(), v.end(), [id](const PreHooks::Entry& e) { return e.id == id; }), v.end());
    }
  });
}

void Node::set_retained_grad(uint32_t input_nr, std::weak_ptr<Tensor> slot) {
  if (!pre_hooks_) pre_hooks_ = std::make_shared<PreHooks>();
  std::lock_guard<std::mutex> lock(pre_hooks_->m);
  pre_hooks_->retained.emplace_back(input_nr, std::move(slot));
}

bool Node::has_tensor_pre_hooks() const {
  if (!pre_hooks_) return false;
  std::lock_guard<std::mutex> lock(pre_hooks_->m);
  return !pre_hooks_->hooks.empty() || !pre_hooks_->retained.empty();
}

void Node::call_tensor_pre_hooks(variable_list& grads) {
  if (!pre_hooks_) return;
  std::vector<PreHooks::Entry> hooks;
  std::vector<std::pair<uint32_t, std::weak_ptr<Tensor>>> retained;
  {
    std::lock_guard<std::mutex> lock(pre_hooks_->m);
    hooks = pre_hooks_->hooks;
    retained = pre_hooks_->retained;
  }
  for (auto& h : hooks) {
    Tensor& g = grads[h.input_nr];
    if (!g.defined()) continue;
    Tensor r = h.fn(g);
    if (!r.defined()) continue;
    impl::check_hook_result(r, g, name() + ": a tensor hook on input " + std::to_string(h.input_nr));
    g = std::move(r);
  }
  // retain_grad: the gradient after every hook (PyTorch's retains_grad hook
  // runs last). Detached unless create_graph.
  for (auto& [nr, weak] : retained) {
    auto slot = weak.lock();
    const Tensor& g = grads[nr];
    if (!slot || !g.defined()) continue;
    if (is_grad_enabled()) *slot = slot->defined() ? tg::add(*slot, g) : g;
    else *slot = slot->defined() ? raw::add(*slot, g) : raw::clone(g);
  }
}

void Node::call_post_hooks(const variable_list& outputs, const variable_list& inputs) const {
  for (const auto& h : post_hooks_)
    h(outputs, inputs);
}

}  // namespace tg::autograd
