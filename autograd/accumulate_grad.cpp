#include <tapegrad/autograd/accumulate_grad.h>

#include <tapegrad/autograd/autograd_meta.h>
#include <tapegrad/autograd/grad_mode.h>
#include <tapegrad/autograd/input_buffer.h>
#include <tapegrad/tensor/error.h>
#include <tapegrad/tensor/ops.h>
#include <tapegrad/tensor/raw.h>

namespace tg::autograd {

AccumulateGrad::AccumulateGrad(Tensor variable)
    : Node(UINT64_MAX), variable_(std::move(variable)) {
  add_input_metadata(variable_);
}

void AccumulateGrad::call_tensor_pre_hooks(variable_list& grads) {
  Node::call_tensor_pre_hooks(grads);
  impl::call_leaf_pre_hooks(variable_, grads[0]);
}

variable_list AccumulateGrad::apply(variable_list&& grads) {
  Tensor g = std::move(grads[0]);
  grads.clear();
  if (!g.defined()) return {};
  AutogradMeta* m = impl::meta(variable_);
  TG_CHECK(m && !m->grad_fn, "AccumulateGrad: the leaf tensor (shape ",
           shape_str(variable_.sizes()), ") has been moved into the graph "
           "interior (it got a grad_fn after its accumulator was created)");
  if (!m->requires_grad) return {};
  accumulate_grad(variable_, m->grad, std::move(g), 1);
  impl::call_post_accumulate_hooks(variable_);
  return {};
}

void accumulate_grad(const Tensor& variable, Tensor& variable_grad,
                     Tensor&& incoming, size_t expected_refs) {
  // Layout pairs: dense .grad + dense incoming below; sparse .grad or sparse
  // incoming (either way round) arrive with the sparse issue.
  if (variable_grad.defined()) check_dense_pair(variable_grad, incoming, "AccumulateGrad");
  else check_dense_pair(variable, incoming, "AccumulateGrad");
  if (!variable_grad.defined()) {
    if (is_grad_enabled()) {
      variable_grad = incoming.clone();  // create_graph: keep the history
      return;
    }
    bool layout_ok = incoming.is_contiguous() || incoming.strides() == variable.strides();
    if (layout_ok && uniquely_owned(incoming, expected_refs)) {
      // Steal: no copy. A tensor with autograd metadata is aliased without it.
      variable_grad = impl::meta(incoming) ? raw::detach(incoming) : std::move(incoming);
      return;
    }
    variable_grad = raw::clone(incoming);
    return;
  }
  if (is_grad_enabled()) {
    variable_grad = tg::add(variable_grad, incoming);  // out of place, has history
    return;
  }
  if (variable_grad.is_contiguous() && variable_grad.impl()->storage().use_count() == 1 &&
      !impl::requires_grad(variable_grad)) {
    raw::add_(variable_grad, incoming);  // .grad keeps its identity
    return;
  }
  variable_grad = raw::add(variable_grad, incoming);
}

}  // namespace tg::autograd
