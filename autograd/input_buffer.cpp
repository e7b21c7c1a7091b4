#include <tapegrad/autograd/input_buffer.h>

#include <tapegrad/autograd/autograd_meta.h>
#include <tapegrad/autograd/grad_mode.h>
#include <tapegrad/autograd/stream_rules.h>
#include <tapegrad/cuda/allocator.h>
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

namespace {
// Keeps the allocator from reusing t's memory before the work queued on `s`
// so far is done (a GPU tensor used on a stream other than its own).
void record_stream(const Tensor& t, const cuda::Stream& s) {
  void* p = t.impl()->storage()->data();
  if (p && t.device().index() == s.device_index()) cuda::record_stream(p, s);
}
}  // namespace

void InputBuffer::add(size_t pos, Tensor&& var, const cuda::Stream& producer,
                      const cuda::Stream& consumer) {
  if (!var.defined()) return;
  Slot& slot = slots_[pos];
  if (!var.is_cuda()) {  // (Cpu): no streams, no events
    if (!slot.grad.defined()) slot.grad = std::move(var);
    else accumulate_into_buffer(slot.grad, std::move(var));
    return;
  }
  cuda::Stream current = cuda::current_stream(var.device().index());
  cuda::Stream P = resolve_stream(producer, current);
  cuda::Stream C = resolve_stream(consumer, current);
  if (!slot.grad.defined()) {  // first producer: pick the accumulation stream
    StreamDecision d = choose_accumulation_stream(var.device(), P, C, current);
    slot.accumulate = d.stream;
    // (A): the consumer will read var on C; protect it in case no
    // accumulation follows.
    if (d.rule == AccumulateOn::ConsumerStream && C != P) record_stream(var, C);
    slot.grad = std::move(var);
    slot.ready_stream = P;
    if (first_producer_needs_event(P, C, slot.accumulate)) {
      slot.ready = std::make_unique<cuda::Event>();
      slot.ready->record(P);
    }
    return;
  }
  // Nth producer: accumulate on A after waiting for this producer and for
  // the slot's last writer.
  const cuda::Stream A = slot.accumulate;
  if (A != P) {
    cuda::Event e;
    e.record(P);
    e.block(A);
    record_stream(var, A);
  }
  if (A != slot.ready_stream) {
    if (slot.ready) slot.ready->block(A);
    record_stream(slot.grad, A);
  }
  {
    cuda::StreamGuard on_a(A);
    accumulate_into_buffer(slot.grad, std::move(var));
  }
  slot.ready_stream = A;
  slot.ready.reset();
  if (C != A) {
    slot.ready = std::make_unique<cuda::Event>();
    slot.ready->record(A);
  }
}

void InputBuffer::wait_for_consumer(const cuda::Stream& consumer) const {
  if (!consumer.is_valid()) return;
  for (const Slot& slot : slots_)
    if (slot.grad.defined() && slot.grad.is_cuda() && slot.ready_stream != consumer && slot.ready)
      slot.ready->block(consumer);
}

variable_list InputBuffer::release() {
  variable_list out;
  out.reserve(slots_.size());
  for (Slot& slot : slots_) out.push_back(std::move(slot.grad));
  return out;
}

}  // namespace tg::autograd
