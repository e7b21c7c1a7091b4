#include <tapegrad/autograd/input_buffer.h>

#include <tapegrad/autograd/autograd_meta.h>
#include <tapegrad/autograd/grad_mode.h>
#include <tapegrad/tensor/error.h>
#include <tapegrad/tensor/ops.h>
#include <tapegrad/tensor/raw.h>

namespace tg::autograd {

bool uniquely_owned(const Tensor& t, size_t expected_refs) {
  return t.use_count() <= expected_refs && t.impl()->storage().use_count() == 1;
}

void check_dense_pair(const Tensor& a, const Tensor& b, const char* where) {
  TG_CHECK(!a.is_sparse() && !b.is_sparse(), where,
           ": sparse gradients are not supported yet (the sparse COO issue "
           "adds the dense/sparse, sparse/dense and sparse/sparse cases)");
}

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

}  // namespace tg::autograd
