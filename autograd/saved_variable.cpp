#include <tapegrad/autograd/saved_variable.h>

#include <vector>

#include "autograd/overwritten_saved.h"
#include "autograd/thread_state.h"
#include <tapegrad/autograd/autograd_meta.h>
#include <tapegrad/autograd/forward_ad.h>
#include <tapegrad/autograd/grad_mode.h>
#include <tapegrad/cuda/stream.h>
#include <tapegrad/tensor/error.h>
#include <tapegrad/tensor/raw.h>

namespace tg::autograd {

// ---- default hooks stack (the thread's ThreadStorage) ----------------------------

SavedTensorHooksGuard::SavedTensorHooksGuard(PackHook pack, UnpackHook unpack)
    : SavedTensorHooksGuard(SavedTensorHooks{std::move(pack), std::move(unpack)}) {}

SavedTensorHooksGuard::SavedTensorHooksGuard(SavedTensorHooks hooks) { push_saved_tensor_hooks(std::move(hooks)); }

SavedTensorHooksGuard::~SavedTensorHooksGuard() { pop_saved_tensor_hooks(); }

void push_saved_tensor_hooks(SavedTensorHooks hooks) {
  TG_CHECK(hooks.pack && hooks.unpack, "saved-tensor hooks: both a pack and an unpack hook are required");
  detail::thread_storage().hooks.push_back(std::make_shared<const SavedTensorHooks>(std::move(hooks)));
}

void pop_saved_tensor_hooks() {
  detail::ThreadStorage* s = detail::thread_state().storage;
  if (s && !s->hooks.empty()) s->hooks.pop_back();
}

std::shared_ptr<const SavedTensorHooks> current_saved_tensor_hooks() {
  const detail::ThreadStorage* s = detail::thread_state().storage;
  return s && !s->hooks.empty() ? s->hooks.back() : nullptr;
}

namespace hooks {

SavedTensorHooks cast(ScalarType dtype) {
  TG_CHECK(dtype == kBFloat16 || dtype == kFloat16, "hooks::cast: expected BFloat16 or Float16, got ", dtype);
  struct Packed {
    Tensor data;
    ScalarType original;
  };
  return {[dtype](const Tensor& t) -> std::any {
            if (!t.is_floating_point() || t.dtype() == dtype) return Packed{t, t.dtype()};
            return Packed{raw::to(t, dtype), t.dtype()};
          },
          [](const std::any& p) -> Tensor {
            const auto& packed = std::any_cast<const Packed&>(p);
            return raw::to(packed.data, packed.original);
          }};
}

SavedTensorHooks offload_to_cpu() {
  struct Packed {
    Tensor data;
    Device original;
    cuda::Stream stream;  // where the copy to the host was queued
  };
  // Both copies are asynchronous, through pinned memory: no host sync
  // eagerly, and under capture they are nodes of the graph, which then owns
  // the pinned buffer (docs/GRAPHS.md "Saved-tensor hooks").
  return {[](const Tensor& t) -> std::any {
            if (!t.is_cuda()) return Packed{t, t.device(), {}};
            return Packed{raw::to(t, Device(kCPU), /*non_blocking=*/true), t.device(),
                          cuda::current_stream(t.device().index())};
          },
          [](const std::any& p) -> Tensor {
            const auto& packed = std::any_cast<const Packed&>(p);
            if (!packed.stream.is_valid()) return packed.data;
            const cuda::Stream now = cuda::current_stream(packed.original.index());
            now.wait_stream(packed.stream);  // the copy to the host is queued there
            return raw::to(packed.data, packed.original, /*non_blocking=*/true);
          }};
}

}  // namespace hooks

// ---- SavedVariable -------------------------------------------------------------------

SavedVariable::SavedVariable(const Tensor& t, bool is_output) {
  if (!t.defined()) return;
  state_ = State::Saved;
  is_output_ = is_output;
  requires_grad_ = t.requires_grad();
  output_nr_ = t.output_nr();
  saved_version_ = t.version();
  if (t.is_sparse()) {
    indices_version_ = raw::sparse_indices(t).version();
    values_version_ = raw::sparse_values(t).version();
  }
  dtype_ = t.dtype();
  hooks_ = current_saved_tensor_hooks();
  // Forward over reverse: an output's tangent is set after the node saves
  // it, so keep the slot (shared with t) rather than the tangent.
  if ((is_output || hooks_) && forward_ad::is_active()) fw_ = impl::fw_slot(t);
  if (!hooks_) {
    // An output keeps an alias without autograd metadata (no cycle through
    // the owning node); an input or leaf keeps the tensor itself.
    data_ = is_output ? raw::detach(t) : t;
    return;
  }
  sizes_ = t.sizes();
  if (!is_output) {
    if (auto* m = impl::meta(t)) {
      if (m->grad_fn) grad_fn_ = m->grad_fn;
      else if (requires_grad_) accumulator_ = impl::grad_accumulator(t);
    }
  }
  Tensor alias = raw::detach(t);
  NoGradGuard no_grad;
  payload_ = hooks_->pack(alias);
  TG_CHECK(t.version() == saved_version_,
           "saved tensor pack hook: the pack "
           "hook modified its input in place (version ",
           saved_version_, " -> ", t.version(), "); pack hooks must not modify the tensor they save");
}

Tensor SavedVariable::unpack(const Node* owner, const char* slot) const {
  if (state_ == State::Empty) return Tensor();
  TG_CHECK(state_ == State::Saved, owner ? owner->name() : std::string("autograd"),
           ": trying to backward through the graph a second time (or to access "
           "saved tensors after they have been freed): saved tensor '",
           slot,
           "' was freed after the previous backward. Saved intermediate values "
           "of the graph are freed when you call backward() or grad(); pass "
           "retain_graph=true to the first call if you need to backward through "
           "the graph again");
  Tensor data;
  if (hooks_) {
    data = hooks_->unpack(payload_);
    TG_CHECK(data.defined(), owner ? owner->name() : std::string("autograd"), ": the unpack hook of saved tensor '",
             slot, "' returned an undefined tensor");
    TG_CHECK(data.sizes() == sizes_, owner ? owner->name() : std::string("autograd"),
             ": the unpack hook of saved tensor '", slot, "' returned shape ", shape_str(data.sizes()), " but ",
             shape_str(sizes_), " was saved");
  } else {
    uint32_t now = data_.version();
    if (now == saved_version_ && data_.is_sparse() && detail::thread_state().accept_overwritten == 0) {
      const uint32_t iv = raw::sparse_indices(data_).version(), vv = raw::sparse_values(data_).version();
      std::string who = owner ? owner->name() : std::string("autograd");
      TG_CHECK(iv == indices_version_ && vv == values_version_, who,
               ": one of the tensors needed for gradient computation has been modified by an in-place operation: "
               "the ",
               iv != indices_version_ ? "indices" : "values", " of saved sparse tensor '", slot, "' (", data_.dtype(),
               " ", shape_str(data_.sizes()), ", nnz ", data_.nnz(), ") are at version ",
               iv != indices_version_ ? iv : vv, "; expected version ",
               iv != indices_version_ ? indices_version_ : values_version_,
               " instead. Hint: clone the indices or values before building the sparse tensor, or modify them only "
               "after backward");
    }
    if (now != saved_version_ && detail::thread_state().accept_overwritten == 0) {
      std::string who = owner ? owner->name() : std::string("autograd");
      std::string role = is_output_ ? "output " + std::to_string(output_nr_) + " of " + who : "an input of " + who;
      TG_ERROR(who,
               ": one of the tensors needed for gradient computation has "
               "been modified by an in-place operation: saved tensor '",
               slot, "' (", data_.dtype(), " ", shape_str(data_.sizes()), ", ", role, ") is at version ", now,
               "; expected version ", saved_version_,
               " instead. Hint: clone the tensor before modifying it in place, "
               "or modify it only after backward");
    }
    if (!is_output_) return data_;
    data = data_;
  }
  const bool tangent = fw_ && fw_->tangent.defined() && fw_->level == forward_ad::detail::current_level();
  // Without grad mode (no create_graph) the formula does not record, so the
  // tensor needs no history; with it, re-attach the edge it had.
  if ((!is_grad_enabled() || !requires_grad_) && !tangent) return data;
  Tensor out = raw::detach(data);
  if (tangent) impl::set_fw_grad(out, fw_->tangent);
  if (!is_grad_enabled() || !requires_grad_) return out;
  if (is_output_) {
    TG_INTERNAL_ASSERT(owner != nullptr, "unpacking a saved output needs its node");
    impl::set_gradient_edge(out, Edge(const_cast<Node*>(owner)->shared_from_this(), output_nr_));
  } else if (grad_fn_) {
    impl::set_gradient_edge(out, Edge(grad_fn_, output_nr_));
  } else if (accumulator_) {
    impl::set_gradient_edge(out, Edge(accumulator_, 0));
  }
  return out;
}

void SavedVariable::release() {
  if (state_ != State::Saved) return;
  state_ = State::Released;
  data_ = Tensor();
  payload_.reset();
  grad_fn_.reset();
  accumulator_.reset();
  fw_.reset();
}

detail::AcceptOverwrittenSaved::AcceptOverwrittenSaved() { ++detail::thread_state().accept_overwritten; }
detail::AcceptOverwrittenSaved::~AcceptOverwrittenSaved() { --detail::thread_state().accept_overwritten; }

}  // namespace tg::autograd
