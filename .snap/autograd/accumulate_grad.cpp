#include "autograd/accumulate_grad.h"

#include <tapegrad/autograd/autograd_meta.h>
#include <tapegrad/autograd/forward_ad.h>
#include <tapegrad/autograd/grad_mode.h>
#include <tapegrad/cuda/static_tensor.h>
#include "autograd/input_buffer.h"
#include <tapegrad/tensor/error.h>
#include <tapegrad/tensor/ops.h>
#include <tapegrad/tensor/raw.h>

namespace tg::autograd {

AccumulateGrad::AccumulateGrad(Tensor variable) : Node(UINT64_MAX), variable_(std::move(variable)) {
  add_input_metadata(variable_);
}

void AccumulateGrad::call_tensor_pre_hooks(variable_list& grads) {
  Node::call_tensor_pre_hooks(grads);
  impl::call_leaf_pre_hooks(variable_, grads[0]);
}

namespace {
// A dense .grad that a gradient is added to in place, keeping its identity:
// contiguous, without history, and its storage not shared (or shared only
// by the gradients of a data-parallel bucket) — or a static .grad a
// captured graph reads (docs/AUTOGRAD.md "Accumulation", rule 7).
bool adds_in_place(const Tensor& variable, const Tensor& grad) {
  return !grad.is_sparse() && grad.is_contiguous() && !impl::requires_grad(grad) &&
         (grad.impl()->storage().use_count() == 1 || grad.impl()->storage()->gradient_bucket() ||
          cuda::static_in_use(variable));
}
}  // namespace

bool AccumulateGrad::accumulate_products_in_place(InputBuffer& buffer, const cuda::Stream& stream) {
  if (has_tensor_pre_hooks() || impl::has_leaf_pre_hooks(variable_)) return false;
  AutogradMeta* m = impl::meta(variable_);
  if (!m || m->grad_fn || !m->requires_grad) return false;
  const Tensor& g = m->grad;
  if (!g.defined() || !adds_in_place(variable_, g)) return false;
  if (!buffer.form_products_into(0, g, stream)) return false;
  impl::call_post_accumulate_hooks(variable_);
  return true;
}

variable_list AccumulateGrad::apply(variable_list&& grads) {
  Tensor g = std::move(grads[0]);
  grads.clear();
  if (!g.defined()) return {};
  AutogradMeta* m = impl::meta(variable_);
  TG_CHECK(m && !m->grad_fn, "AccumulateGrad: the leaf tensor (shape ", shape_str(variable_.sizes()),
           ") has been moved into the graph "
           "interior (it got a grad_fn after its accumulator was created)");
  if (!m->requires_grad) return {};
  // A .grad assigned through mutable_grad() must hold what the leaf's
  // gradients are (a complex .grad on a real leaf failed later in a kernel).
  TG_CHECK(!m->grad.defined() || m->grad.dtype() == variable_.dtype(), "AccumulateGrad: the leaf (", variable_.dtype(),
           " ", shape_str(variable_.sizes()), ") has a ", m->grad.dtype(),
           " .grad (assigned through mutable_grad()?); a gradient has the leaf's dtype: assign one of ",
           variable_.dtype(), ", or reset it with mutable_grad() = Tensor()");
  accumulate_grad(variable_, m->grad, std::move(g), 1);
  impl::call_post_accumulate_hooks(variable_);
  return {};
}

void accumulate_grad(const Tensor& variable, Tensor& variable_grad, Tensor&& incoming, size_t expected_refs) {
  // A gradient carrying a forward-mode tangent (forward over reverse): the
  // public ops keep the tangent on .grad.
  if (forward_ad::is_active() &&
      (impl::fw_grad(incoming).defined() || (variable_grad.defined() && impl::fw_grad(variable_grad).defined()))) {
    variable_grad = variable_grad.defined() ? tg::add(variable_grad, incoming) : incoming.clone();
    return;
  }
  if (!variable_grad.defined()) {
    // (1) create_graph: a differentiable copy (either layout), with history.
    if (is_grad_enabled()) {
      variable_grad = incoming.clone();
      return;
    }
    // (2) sparse: steal it when its handle, indices and values are ours
    // alone; else copy indices and values.
    if (incoming.is_sparse()) {
      if (uniquely_owned(incoming, expected_refs) && parts_uniquely_owned(incoming)) {
        variable_grad = impl::meta(incoming) ? raw::detach(incoming) : std::move(incoming);
        return;
      }
      variable_grad = raw::clone(incoming);
      return;
    }
    // (3) dense: steal (no copy) when uniquely owned and contiguous or with
    // the leaf's strides; a tensor with autograd metadata is aliased without it.
    bool layout_ok = incoming.is_contiguous() || (!variable.is_sparse() && incoming.strides() == variable.strides());
    if (layout_ok && uniquely_owned(incoming, expected_refs)) {
      variable_grad = impl::meta(incoming) ? raw::detach(incoming) : std::move(incoming);
      return;
    }
    variable_grad = raw::clone(incoming);
    return;
  }
  // A static .grad a captured graph depends on stays where it is: dense
  // accumulation in place, anything that would replace it is an error.
  if (cuda::static_in_use(variable)) {
    if (!is_grad_enabled() && adds_in_place(variable, variable_grad)) {
      raw::add_(variable_grad, incoming);
      return;
    }
    cuda::detail::check_static_may_move(variable, "AccumulateGrad",
                                        is_grad_enabled() ? "the .grad (create_graph accumulates out of place)"
                                                          : "the .grad (a sparse or strided accumulation)");
  }
  // (4) create_graph: out of place (any pair), .grad gets history.
  if (is_grad_enabled()) {
    variable_grad = tg::add(variable_grad, incoming);
    return;
  }
  // (5) sparse .grad + sparse: in place on the .grad handle (it keeps its
  // identity; its indices and values become the concatenation).
  if (variable_grad.is_sparse() && incoming.is_sparse()) {
    raw::add_(variable_grad, incoming);
    return;
  }
  // (6) sparse .grad + dense: .grad becomes dense: the incoming tensor with
  // the sparse entries added in place when it is contiguous and ours alone,
  // else a new tensor.
  if (variable_grad.is_sparse()) {
    add_into_dense_side(variable_grad, std::move(incoming));
    return;
  }
  // (7) dense .grad + sparse or dense: in place when .grad's storage is not
  // shared and .grad is contiguous (it keeps its identity), else out of place.
  // (static_in_use is false here: a static .grad was added to above or refused.)
  if (adds_in_place(variable, variable_grad)) {
    raw::add_(variable_grad, incoming);
    return;
  }
  variable_grad = raw::add(variable_grad, incoming);
}

}  // namespace tg::autograd
