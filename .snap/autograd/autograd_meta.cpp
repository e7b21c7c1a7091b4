// Autograd metadata on tensors and the Tensor methods that use it.
#include <tapegrad/autograd/autograd_meta.h>
#include "autograd/ops/ops.h"

#include <algorithm>

#include "autograd/accumulate_grad.h"
#include <tapegrad/autograd/engine.h>
#include <tapegrad/autograd/forward_ad.h>
#include <tapegrad/tensor/error.h>

namespace tg::autograd {

struct AutogradMeta::LeafHooks {
  struct Pre {
    uint64_t id;
    std::function<Tensor(const Tensor&)> fn;
  };
  struct Post {
    uint64_t id;
    std::function<void(const Tensor&)> fn;
  };
  std::vector<Pre> pre;
  std::vector<Post> post;
  uint64_t next_id = 0;
  std::mutex m;
};

namespace impl {

AutogradMeta& materialize_meta(const Tensor& t) {
  TG_CHECK(t.defined(), "autograd: undefined tensor");
  if (!t.impl()->autograd_meta()) t.impl()->set_autograd_meta(std::make_unique<AutogradMeta>());
  return *meta(t);
}

std::shared_ptr<Node> grad_accumulator(const Tensor& t) {
  AutogradMeta* m = meta(t);
  if (!m || m->grad_fn || !m->requires_grad) return nullptr;
  std::lock_guard<std::mutex> lock(m->mutex);
  if (auto acc = m->grad_accumulator.lock()) return acc;
  auto acc = std::make_shared<AccumulateGrad>(t);
  m->grad_accumulator = acc;
  return acc;
}

Edge gradient_edge(const Tensor& t) {
  AutogradMeta* m = meta(t);
  if (!m) return {};
  if (m->grad_fn) return Edge(m->grad_fn, m->output_nr);
  return Edge(grad_accumulator(t), 0);
}

void set_history(const Tensor& t, const std::shared_ptr<Node>& fn) {
  AutogradMeta& m = materialize_meta(t);
  m.output_nr = fn->add_input_metadata(t);
  m.grad_fn = fn;
}

void set_gradient_edge(const Tensor& t, Edge e) {
  AutogradMeta& m = materialize_meta(t);
  if (!e.is_valid()) return;
  if (dynamic_cast<AccumulateGrad*>(e.function.get())) {
    m.requires_grad = true;
    m.grad_accumulator = e.function;
  } else {
    m.grad_fn = std::move(e.function);
    m.output_nr = e.input_nr;
  }
}

static std::shared_ptr<AutogradMeta::LeafHooks> leaf_hooks_of(const Tensor& t, bool create) {
  AutogradMeta* m = meta(t);
  if (!m) return nullptr;
  std::lock_guard<std::mutex> lock(m->mutex);
  if (!m->leaf_hooks && create) m->leaf_hooks = std::make_shared<AutogradMeta::LeafHooks>();
  return m->leaf_hooks;
}

bool has_leaf_pre_hooks(const Tensor& leaf) {
  auto h = leaf_hooks_of(leaf, false);
  if (!h) return false;
  std::lock_guard<std::mutex> lock(h->m);
  return !h->pre.empty();
}

void call_leaf_pre_hooks(const Tensor& leaf, Tensor& grad) {
  auto h = leaf_hooks_of(leaf, false);
  if (!h || !grad.defined()) return;
  std::vector<AutogradMeta::LeafHooks::Pre> pre;
  {
    std::lock_guard<std::mutex> lock(h->m);
    pre = h->pre;
  }
  for (auto& p : pre) {
    Tensor r = p.fn(grad);
    if (!r.defined()) continue;
    check_hook_result(r, grad, "AccumulateGrad: a tensor hook on the leaf");
    grad = std::move(r);
  }
}

void check_hook_result(const Tensor& r, const Tensor& g, const std::string& who) {
  // A hook may change the values, not what the gradient is: a leaf's .grad
  // of another shape would reach the optimizer.
  TG_CHECK(r.sizes() == g.sizes() && r.dtype() == g.dtype() && r.device() == g.device(), who, " returned a ", r.dtype(),
           " ", shape_str(r.sizes()), " on ", r.device(), " gradient for a ", g.dtype(), " ", shape_str(g.sizes()),
           " on ", g.device(),
           " one; a hook must return a tensor of the gradient's shape, "
           "dtype and device (or nothing)");
}

void call_post_accumulate_hooks(const Tensor& leaf) {
  auto h = leaf_hooks_of(leaf, false);
  if (!h) return;
  std::vector<AutogradMeta::LeafHooks::Post> post;
  {
    std::lock_guard<std::mutex> lock(h->m);
    post = h->post;
  }
  for (auto& p : post)
    p.fn(leaf);
}

}  // namespace impl
}  // namespace tg::autograd

namespace tg {

using autograd::AutogradMeta;
namespace impl = autograd::impl;

bool autograd::ops::requires_grad(const Tensor& self) { return impl::requires_grad(self); }

const Tensor& autograd::ops::requires_grad_(const Tensor& self, bool r) {
  TG_CHECK(self.defined(), "requires_grad_: undefined tensor");
  AutogradMeta* m = impl::meta(self);
  TG_CHECK(!(m && m->grad_fn),
           "requires_grad_: you can only change the "
           "requires_grad flag of leaf tensors; this one was computed by ",
           m->grad_fn->forward_op(),
           ". Use .detach() to get a tensor that "
           "does not require grad");
  if (r)
    TG_CHECK(is_differentiable(self.dtype()),
             "requires_grad_: only floating-point tensors "
             "can require gradients, got a tensor of ",
             self.dtype(), " (shape ", shape_str(self.sizes()), "); convert it with .to(kFloat32) or .to(kFloat64)");
  if (!r && !m) return self;
  impl::materialize_meta(self).requires_grad = r;
  return self;
}

namespace {
const Tensor kUndefined;

// Adds `hook` to the leaf hooks of `self` (`list`: the pre or the post
// hooks); the handle removes it while the hooks live.
template <class Entry, class Hook>
HookHandle add_leaf_hook(const Tensor& self, std::vector<Entry> AutogradMeta::LeafHooks::*list, Hook hook) {
  auto h = impl::leaf_hooks_of(self, true);
  std::lock_guard<std::mutex> lock(h->m);
  uint64_t id = h->next_id++;
  ((*h).*list).push_back({id, std::move(hook)});
  std::weak_ptr<AutogradMeta::LeafHooks> weak = h;
  return HookHandle([weak, id, list] {
    if (auto s = weak.lock()) {
      std::lock_guard<std::mutex> l(s->m);
      auto& hooks = (*s).*list;
      hooks.erase(std::remove_if(hooks.begin(), hooks.end(), [id](const auto& e) { return e.id == id; }), hooks.end());
    }
  });
}
}  // namespace

const Tensor& autograd::ops::grad(const Tensor& self) {
  AutogradMeta* m = impl::meta(self);
  if (!m) return kUndefined;
  if (m->retained_grad) return *m->retained_grad;
  // backward() fills .grad() of leaves only (and of a non-leaf named in its
  // inputs): a non-leaf's would read as undefined, and the first use of it
  // fail far from here.
  TG_CHECK(!m->grad_fn || m->grad.defined(), "grad: this tensor (shape ", shape_str(self.sizes()), ", computed by ",
           m->grad_fn->forward_op(),
           ") is not a leaf, so backward() leaves nothing in its .grad(); call retain_grad() on it before "
           "backward(), or get its gradient with tg::autograd::grad({output}, {tensor})");
  return m->grad;
}

Tensor& autograd::ops::mutable_grad(const Tensor& self) {
  AutogradMeta& m = impl::materialize_meta(self);
  if (m.retained_grad) return *m.retained_grad;
  return m.grad;
}

std::shared_ptr<autograd::Node> autograd::ops::grad_fn(const Tensor& self) {
  AutogradMeta* m = impl::meta(self);
  return m ? m->grad_fn : nullptr;
}

bool autograd::ops::is_leaf(const Tensor& self) {
  AutogradMeta* m = impl::meta(self);
  return !m || !m->grad_fn;
}

bool autograd::ops::has_tangent(const Tensor& self) {
  return self.defined() && forward_ad::is_active() && impl::has_fw_grad(self);
}

uint32_t autograd::ops::output_nr(const Tensor& self) {
  AutogradMeta* m = impl::meta(self);
  return m ? m->output_nr : 0;
}

void autograd::ops::retain_grad(const Tensor& self) {
  TG_CHECK(self.requires_grad(),
           "retain_grad: can't retain_grad on a tensor that "
           "has requires_grad=false (shape ",
           shape_str(self.sizes()), ")");
  if (self.is_leaf()) return;  // leaves keep .grad anyway
  AutogradMeta& m = impl::materialize_meta(self);
  if (m.retained_grad) return;
  m.retained_grad = std::make_shared<Tensor>();
  m.grad_fn->set_retained_grad(m.output_nr, m.retained_grad);
}

bool autograd::ops::retains_grad(const Tensor& self) {
  AutogradMeta* m = impl::meta(self);
  return m && m->retained_grad;
}

void autograd::ops::backward(const Tensor& self, const Tensor& gradient, std::optional<bool> retain_graph,
                             bool create_graph, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> grads;
  if (gradient.defined()) grads.push_back(gradient);
  autograd::backward({self}, grads, retain_graph, create_graph, inputs);
}

HookHandle autograd::ops::register_hook(const Tensor& self, std::function<Tensor(const Tensor&)> hook) {
  TG_CHECK(self.requires_grad(),
           "register_hook: cannot register a hook on a tensor "
           "that doesn't require gradient (shape ",
           shape_str(self.sizes()), ")");
  AutogradMeta* m = impl::meta(self);
  if (m->grad_fn) return m->grad_fn->add_tensor_pre_hook(m->output_nr, std::move(hook));
  return add_leaf_hook(self, &AutogradMeta::LeafHooks::pre, std::move(hook));
}

HookHandle autograd::ops::register_post_accumulate_grad_hook(const Tensor& self,
                                                             std::function<void(const Tensor&)> hook) {
  TG_CHECK(self.requires_grad() && self.is_leaf(),
           "register_post_accumulate_grad_hook: "
           "post-accumulate-grad hooks can only be registered on leaf tensors "
           "that require grad (shape ",
           shape_str(self.sizes()), ")");
  return add_leaf_hook(self, &AutogradMeta::LeafHooks::post, std::move(hook));
}

}  // namespace tg
