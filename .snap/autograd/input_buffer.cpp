#include "autograd/input_buffer.h"

#include <tapegrad/autograd/autograd_meta.h>
#include <tapegrad/autograd/forward_ad.h>
#include <tapegrad/autograd/grad_mode.h>
#include "autograd/stream_rules.h"
#include <tapegrad/cuda/allocator.h>
#include <tapegrad/tensor/error.h>
#include <tapegrad/tensor/ops.h>
#include <tapegrad/tensor/raw.h>

#include <optional>

namespace tg::autograd {

bool uniquely_owned(const Tensor& t, size_t expected_refs) {
  return t.use_count() <= expected_refs && t.impl()->storage().use_count() == 1;
}

bool parts_uniquely_owned(const Tensor& s) {
  const SparseCooParts& p = s.impl()->sparse_parts();
  return p.indices.use_count() == 1 && p.indices->storage().use_count() == 1 && p.values.use_count() == 1 &&
         p.values->storage().use_count() == 1;
}

bool add_into_dense_side(Tensor& old, Tensor&& incoming) {
  TG_INTERNAL_ASSERT(old.is_sparse() != incoming.is_sparse(), "not a dense/sparse pair");
  Tensor& dense = old.is_sparse() ? incoming : old;
  const Tensor& sparse = old.is_sparse() ? old : incoming;
  if (dense.is_contiguous() && uniquely_owned(dense)) {
    raw::add_(dense, sparse);
    if (old.is_sparse()) old = std::move(incoming);
    return true;
  }
  Tensor sum = raw::add(dense, sparse);
  old = std::move(sum);
  return false;
}

bool accumulate_into_buffer(Tensor& old, Tensor&& incoming) {
  // (1) create_graph, or a summand carrying a forward-mode tangent
  // (forward over reverse): out of place through the public op, so the sum
  // is differentiable and its tangent is the sum of the tangents.
  if (is_grad_enabled() ||
      (forward_ad::is_active() && (impl::fw_grad(old).defined() || impl::fw_grad(incoming).defined()))) {
    old = tg::add(old, incoming);
    return false;
  }
  // (2) sparse + sparse: a new sparse tensor (indices and values
  // concatenated, uncoalesced); neither operand is changed.
  if (old.is_sparse() && incoming.is_sparse()) {
    old = raw::add(old, incoming);
    return false;
  }
  // (3) dense + sparse, sparse + dense: the sparse entries go into the dense
  // side in place when it is contiguous and ours alone, else out of place.
  if (old.is_sparse() || incoming.is_sparse()) return add_into_dense_side(old, std::move(incoming));
  // (4) dense + dense: old is ours alone (TensorImpl and storage) and
  // contiguous: in place.
  if (old.is_contiguous() && uniquely_owned(old)) {
    raw::add_(old, incoming);
    return true;
  }
  // (5) otherwise out of place.
  old = raw::add(old, incoming);
  return false;
}

namespace {
// Keeps the allocator from reusing t's memory before the work queued on `s`
// so far is done (a GPU tensor used on a stream other than its own).
// A sparse tensor's data is in its indices and values: both are protected.
void record_stream(const Tensor& t, const cuda::Stream& s) {
  if (t.is_sparse()) {
    record_stream(Tensor(t.impl()->sparse_parts().indices), s);
    record_stream(Tensor(t.impl()->sparse_parts().values), s);
    return;
  }
  // Memory tapegrad does not own (from DLPack) follows its producer's rules.
  void* p = t.impl()->storage()->data();
  if (p && t.impl()->storage()->allocator() && t.device().index() == s.device_index()) cuda::record_stream(p, s);
}
}  // namespace

void InputBuffer::flush(Slot& slot) {
  if (slot.held.empty()) return;
  if (!slot.held.first().is_cuda()) return slot.held.sum_into(slot.grad);
  const cuda::Stream A = slot.accumulate;
  if (slot.grad.defined() && slot.ready_stream != A) {  // grad's last writer is elsewhere
    if (slot.ready) slot.ready->block(A);
    record_stream(slot.grad, A);
  }
  {
    cuda::StreamGuard on_a(A);
    slot.held.sum_into(slot.grad);
  }
  // As after an accumulation in add(): the slot's last writer is A.
  slot.ready_stream = A;
  slot.ready.reset();
  if (slot.consumer != A) {
    slot.ready = std::make_unique<cuda::Event>();
    slot.ready->record(A);
  }
}

void InputBuffer::hold(Slot& slot, Contribution&& c, const cuda::Stream& P, const cuda::Stream& C,
                       const cuda::Stream& current) {
  // A summand is held only on the slot's accumulation stream, its last
  // writer: nothing to wait for. A product's GEMM runs on the accumulation
  // stream: it waits for the product's producer.
  if (c.is_product() && c.l.is_cuda()) {
    if (!slot.grad.defined() && slot.held.empty()) {  // first producer
      slot.accumulate = choose_accumulation_stream(c.l.device(), P, C, current).stream;
      slot.consumer = C;
      slot.ready_stream = slot.accumulate;
      slot.ready.reset();
    }
    const cuda::Stream A = slot.accumulate;
    if (A != P) {
      cuda::Event e;
      e.record(P);
      e.block(A);
      record_stream(c.l, A);
      record_stream(c.r, A);
    }
  }
  if (slot.held.hold(std::move(c))) flush(slot);
}

void InputBuffer::add(size_t pos, Contribution&& c, const cuda::Stream& producer, const cuda::Stream& consumer) {
  if (!c.defined()) return;
  Slot& slot = slots_[pos];
  const bool on_gpu = c.any().is_cuda();
  cuda::Stream current, P, C;
  if (on_gpu) {
    current = cuda::current_stream(c.any().device().index());
    P = resolve_stream(producer, current);
    C = resolve_stream(consumer, current);
  }
  // (H) The accumulation strategy decides: hold c back, form a product now,
  // or add now. A summand crosses streams unless the slot's accumulation
  // stream is its producer and the slot's last writer.
  const bool crosses = on_gpu && (!slot.grad.defined() || slot.accumulate != P || slot.ready_stream != P);
  switch (slot.held.decide(slot.grad, c, crosses)) {
    case HeldContributions::Decision::Hold: return hold(slot, std::move(c), P, C, current);
    case HeldContributions::Decision::Form: {  // formed now, where l and r were made
      std::optional<cuda::StreamGuard> on_p;
      if (on_gpu) on_p.emplace(P);
      c = Contribution(HeldContributions::form(c));
      break;
    }
    case HeldContributions::Decision::Add: break;
  }
  // Held products first become the slot's gradient (its streams are set).
  if (!slot.grad.defined() && !slot.held.empty()) flush(slot);
  Tensor var = std::move(c.grad);
  if (!on_gpu) {  // (Cpu): no streams, no events
    if (!slot.grad.defined()) {
      slot.grad = std::move(var);
    } else {
      flush(slot);
      accumulate_into_buffer(slot.grad, std::move(var));
    }
    return;
  }
  if (!slot.grad.defined()) {  // first producer: pick the accumulation stream
    StreamDecision d = choose_accumulation_stream(var.device(), P, C, current);
    slot.accumulate = d.stream;
    slot.consumer = C;
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
  flush(slot);
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

bool InputBuffer::form_products_into(size_t pos, const Tensor& target, const cuda::Stream& consumer) {
  Slot& slot = slots_[pos];
  if (slot.grad.defined() || !target.is_cuda() || !consumer.is_valid() || slot.accumulate != consumer) return false;
  {
    cuda::StreamGuard on_a(slot.accumulate);
    if (!slot.held.form_into(target)) return false;
  }
  slot.ready_stream = slot.accumulate;
  slot.ready.reset();
  return true;
}

void InputBuffer::wait_for_consumer(const cuda::Stream& consumer) {
  for (Slot& slot : slots_)
    flush(slot);
  if (!consumer.is_valid()) return;
  for (const Slot& slot : slots_)
    if (slot.grad.defined() && slot.grad.is_cuda() && slot.ready_stream != consumer && slot.ready)
      slot.ready->block(consumer);
}

variable_list InputBuffer::release() {
  variable_list out;
  out.reserve(slots_.size());
  for (Slot& slot : slots_) {
    flush(slot);
    out.push_back(std::move(slot.grad));
  }
  return out;
}

}  // namespace tg::autograd
