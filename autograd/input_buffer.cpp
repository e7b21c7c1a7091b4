#include <tapegrad/autograd/input_buffer.h>

#include <tapegrad/autograd/accumulate_grad.h>
#include <tapegrad/autograd/autograd_meta.h>
#include <tapegrad/autograd/grad_mode.h>
#include <tapegrad/tensor/error.h>
#include <tapegrad/tensor/ops.h>
#include <tapegrad/tensor/raw.h>

namespace tg::autograd {

bool uniquely_owned(const Tensor& t, size_t expected_refs) {
  return t.use_count() <= expected_refs && t.impl()->storage().use_count() == 1;
}

namespace {
// A tensor somebody else may hold: a sparse layout would also go here.
void check_dense_pair(const Tensor& a, const Tensor& b, const char* where) {
  TG_CHECK(!a.is_sparse() && !b.is_sparse(), where,
           ": sparse gradients are not supported yet (the sparse COO issue "
           "adds the dense/sparse, sparse/dense and sparse/sparse cases)");
}
}  // namespace

bool accumulate_into_buffer(Tensor& old, Tensor&& incoming) {
  // Layout pairs:
  //   dense  + dense  -> below
  //   dense  + sparse -> (sparse issue) into the dense side when it may be
  //                      changed in place, else out of place
  //   sparse + dense  -> (sparse issue) the same, with the roles swapped
  //   sparse + sparse -> (sparse issue) concatenate indices/values
  check_dense_pair(old, incoming, "InputBuffer::add");
  // (1) create_graph: out of place, so the sum is differentiable.
  if (is_grad_enabled()) {
    old = tg::add(old, incoming);
    return false;
  }
  // (2) old is ours alone (TensorImpl and storage) and contiguous: in place.
  if (old.is_contiguous() && uniquely_owned(old)) {
    raw::add_(old, incoming);
    return true;
  }
  // (3) otherwise out of place.
  old = raw::add(old, incoming);
  return false;
}

void InputBuffer::add(size_t pos, Tensor&& grad) {
  if (!grad.defined()) return;
  Tensor& slot = buffer_[pos];
  if (!slot.defined()) {
    slot = std::move(grad);
    return;
  }
  accumulate_into_buffer(slot, std::move(grad));
}

// ---- AccumulateGrad ---------------------------------------------------------------

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
