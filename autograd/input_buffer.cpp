#include "autograd/input_buffer.h"

#include <tapegrad/autograd/autograd_meta.h>
#include <tapegrad/autograd/forward_ad.h>
#include <tapegrad/autograd/grad_mode.h>
#include "autograd/stream_rules.h"
#include <tapegrad/cuda/allocator.h>
#include <tapegrad/tensor/error.h>
#include <tapegrad/tensor/ops.h>
#include <tapegrad/tensor/raw.h>
#include "tensor/env.h"
#include "tensor/kernels.h"

#include <atomic>
#include <optional>

namespace tg::autograd {

namespace detail {
namespace {
std::atomic<int64_t> g_merged{0};    // sums of two or more products formed
std::atomic<int64_t> g_in_place{0};  // products formed into an existing .grad
std::pair<Tensor, Tensor> concatenated(const std::vector<std::pair<Tensor, Tensor>>& products);
}  // namespace
}  // namespace detail

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
// Contributions up to this size are held for one add_n (at most
// kMaxAddN of them per slot: 4 MiB).
constexpr int64_t kDeferBytes = 256 << 10;

// `incoming` may wait in old's slot for add_n: dense, contiguous, one shape
// and compute dtype, small, on a device whose backend has add_n, and no
// graph of the sum to record (create_graph, forward-mode tangents).
bool deferrable(const Tensor& old, const Tensor& incoming) {
  if (is_grad_enabled() || forward_ad::is_active()) return false;
  if (old.is_sparse() || incoming.is_sparse() || old.dtype() != incoming.dtype() || old.device() != incoming.device() ||
      old.sizes() != incoming.sizes())
    return false;
  const ScalarType t = old.dtype();
  if (t != kFloat32 && t != kFloat64) return false;
  if (!old.is_contiguous() || !incoming.is_contiguous() || incoming.numel() * int64_t(element_size(t)) > kDeferBytes)
    return false;
  return kernels::backend(old.device(), "backward").add_n != nullptr;
}
}  // namespace

std::vector<std::pair<Tensor, Tensor>> InputBuffer::take_products(Slot& slot) {
  std::vector<std::pair<Tensor, Tensor>> products = std::move(slot.products);
  slot.products.clear();
  slot.product_bytes = 0;
  return products;
}

void InputBuffer::flush(Slot& slot) {
  if (slot.pending.empty() && slot.products.empty()) return;
  Tensor& old = slot.grad;
  // In place when old is ours alone (as accumulate_into_buffer's case 4).
  auto sum = [&] {
    if (slot.pending.empty()) return;
    std::vector<Tensor> summands = std::move(slot.pending);
    slot.pending.clear();
    Tensor out = uniquely_owned(old) ? old : empty_like(old);
    kernels::backend(old.device(), "backward").add_n(out, old, summands);
    old = std::move(out);
  };
  auto work = [&] {
    if (!slot.products.empty()) {
      std::vector<std::pair<Tensor, Tensor>> products = take_products(slot);
      Tensor s = detail::sum_of_products(products);
      products.clear();
      if (!old.defined()) {
        old = std::move(s);
      } else if (deferrable(old, s)) {
        slot.pending.push_back(std::move(s));
        if (slot.pending.size() == kernels::kMaxAddN) sum();
      } else {
        sum();
        accumulate_into_buffer(old, std::move(s));
      }
    }
    sum();
  };
  if (!(old.defined() ? old : slot.products.front().first).is_cuda()) return work();
  const cuda::Stream A = slot.accumulate;
  if (old.defined() && slot.ready_stream != A) {  // grad's last writer is elsewhere
    if (slot.ready) slot.ready->block(A);
    record_stream(old, A);
  }
  {
    cuda::StreamGuard on_a(A);
    work();
  }
  // As after an accumulation in add(): the slot's last writer is A.
  slot.ready_stream = A;
  slot.ready.reset();
  if (slot.consumer != A) {
    slot.ready = std::make_unique<cuda::Event>();
    slot.ready->record(A);
  }
}

void InputBuffer::hold(Slot& slot, Tensor&& var) {
  slot.pending.push_back(std::move(var));
  if (slot.pending.size() == kernels::kMaxAddN) flush(slot);
}

namespace {
// Products are held up to these bounds per slot (operands' bytes), each at
// most kHoldProductBytes; larger ones are multiplied at once.
constexpr int64_t kHoldProductBytes = 4 << 20;
constexpr int64_t kSlotProductBytes = 16 << 20;
constexpr size_t kMaxProducts = kernels::kMaxCopyN / 2;

int64_t nbytes(const Tensor& t) { return t.numel() * int64_t(element_size(t.dtype())); }
}  // namespace

void InputBuffer::add_product(size_t pos, Tensor&& l, Tensor&& r, const cuda::Stream& producer,
                              const cuda::Stream& consumer) {
  Slot& slot = slots_[pos];
  const int64_t bytes = nbytes(l) + nbytes(r);
  // Whether a product is held depends on its size alone, never on streams,
  // so a gradient's rounding is the same on one stream, on several and
  // under capture.
  if (bytes > kHoldProductBytes || (slot.grad.defined() && slot.grad.is_sparse())) {
    std::optional<cuda::StreamGuard> on_p;  // formed now, where l and r were made
    if (l.is_cuda()) on_p.emplace(resolve_stream(producer, cuda::current_stream(l.device().index())));
    Tensor g = raw::mm(l.t(), r);
    on_p.reset();
    return add(pos, std::move(g), producer, consumer);
  }
  if (l.is_cuda()) {
    cuda::Stream current = cuda::current_stream(l.device().index());
    cuda::Stream P = resolve_stream(producer, current);
    if (!slot.grad.defined() && slot.products.empty()) {  // first producer
      cuda::Stream C = resolve_stream(consumer, current);
      slot.accumulate = choose_accumulation_stream(l.device(), P, C, current).stream;
      slot.consumer = C;
      slot.ready_stream = slot.accumulate;
      slot.ready.reset();
    }
    // The GEMM runs on the accumulation stream: it waits for this producer.
    const cuda::Stream A = slot.accumulate;
    if (A != P) {
      cuda::Event e;
      e.record(P);
      e.block(A);
      record_stream(l, A);
      record_stream(r, A);
    }
  }
  slot.products.emplace_back(std::move(l), std::move(r));
  slot.product_bytes += bytes;
  if (slot.products.size() == kMaxProducts || slot.product_bytes > kSlotProductBytes) flush(slot);
}

bool InputBuffer::form_products_into(size_t pos, const Tensor& target, const cuda::Stream& consumer) {
  Slot& slot = slots_[pos];
  if (slot.grad.defined() || !slot.pending.empty() || slot.products.empty() || !target.is_cuda() ||
      !consumer.is_valid() || slot.accumulate != consumer)
    return false;
  const Tensor& l0 = slot.products.front().first;
  const auto mm_accumulate = kernels::backend(target.device(), "backward").mm_accumulate;
  if (!mm_accumulate || target.dtype() != l0.dtype() || target.device() != l0.device() ||
      target.sizes() != IntList{l0.size(1), slot.products.front().second.size(1)} || !target.is_contiguous())
    return false;
  std::vector<std::pair<Tensor, Tensor>> products = take_products(slot);
  {
    cuda::StreamGuard on_a(slot.accumulate);
    auto [L, R] = detail::concatenated(products);
    products.clear();
    mm_accumulate(target, L.t(), R);
  }
  target.impl()->version_counter()->bump();
  detail::g_in_place.fetch_add(1);
  slot.ready_stream = slot.accumulate;
  slot.ready.reset();
  return true;
}

void InputBuffer::add(size_t pos, Tensor&& var, const cuda::Stream& producer, const cuda::Stream& consumer) {
  if (!var.defined()) return;
  Slot& slot = slots_[pos];
  // Held products first become the slot's gradient (its streams are set).
  if (!slot.grad.defined() && !slot.products.empty()) flush(slot);
  if (!var.is_cuda()) {  // (Cpu): no streams, no events
    if (!slot.grad.defined()) {
      slot.grad = std::move(var);
    } else if (deferrable(slot.grad, var)) {
      hold(slot, std::move(var));
    } else {
      flush(slot);
      accumulate_into_buffer(slot.grad, std::move(var));
    }
    return;
  }
  cuda::Stream current = cuda::current_stream(var.device().index());
  cuda::Stream P = resolve_stream(producer, current);
  cuda::Stream C = resolve_stream(consumer, current);
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
  // Held for add_n when nothing crosses streams (A is the producer and the
  // slot's last writer: no event, no record_stream).
  if (A == P && A == slot.ready_stream && deferrable(slot.grad, var)) return hold(slot, std::move(var));
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

namespace detail {

namespace {
thread_local ProductSink* t_sink = nullptr;
}  // namespace

ProductSinkGuard::ProductSinkGuard(ProductSink* sink) : prev_(t_sink) { t_sink = sink; }
ProductSinkGuard::~ProductSinkGuard() { t_sink = prev_; }

bool products_enabled() { return tg::detail::switched_on<tg::detail::OffSwitch::kMergeWeightGrads>(); }

int64_t merged_product_sums() { return g_merged.load(); }
int64_t products_formed_in_place() { return g_in_place.load(); }

bool product_allowed(size_t output) {
  const ProductSink* sink = t_sink;
  return sink && output < 64 && (sink->allowed >> output & 1) && !is_grad_enabled() && !forward_ad::is_active();
}

Tensor product_grad(size_t output, const Tensor& l, const Tensor& r) {
  if (product_allowed(output) && l.dim() == 2 && r.dim() == 2 && !l.is_sparse() && !r.is_sparse() &&
      l.dtype() == r.dtype() && (l.dtype() == kFloat32 || l.dtype() == kFloat64) && l.device() == r.device() &&
      l.size(0) == r.size(0)) {
    t_sink->products.push_back({output, l, r});
    return Tensor();
  }
  return tg::mm(l.t(), r);
}

namespace {
// The operands of sum_i l_i^T r_i as one product L^T R: each l_i (r_i)
// into its rows of L (R), the contiguous ones in one copy_n launch, the
// rest one copy each; a single product is its own operands.
std::pair<Tensor, Tensor> concatenated(const std::vector<std::pair<Tensor, Tensor>>& products) {
  TG_INTERNAL_ASSERT(!products.empty(), "no products to sum");
  const Tensor& l0 = products[0].first;
  const Tensor& r0 = products[0].second;
  if (products.size() == 1) return {l0, r0};
  int64_t k = 0;
  for (const auto& [l, r] : products) {
    TG_INTERNAL_ASSERT(
        l.size(1) == l0.size(1) && r.size(1) == r0.size(1) && l.dtype() == l0.dtype() && r.dtype() == l0.dtype(),
        "products of one gradient differ in shape or dtype");
    k += l.size(0);
  }
  Tensor L = empty({k, l0.size(1)}, l0.options());
  Tensor R = empty({k, r0.size(1)}, l0.options());
  const auto copy_n = kernels::backend(l0.device(), "backward").copy_n;
  std::vector<Tensor> dst, src;
  int64_t at = 0;
  for (const auto& [l, r] : products) {
    const int64_t rows = l.size(0);
    for (auto [to, from] : {std::pair<Tensor, const Tensor*>{L.narrow(0, at, rows), &l},
                            std::pair<Tensor, const Tensor*>{R.narrow(0, at, rows), &r}}) {
      if (copy_n && from->is_contiguous()) {
        dst.push_back(std::move(to));
        src.push_back(*from);
      } else {
        raw::copy_(to, *from);
      }
    }
    at += rows;
  }
  if (!dst.empty()) copy_n(dst, src);
  g_merged.fetch_add(1);
  return {L, R};
}
}  // namespace

Tensor sum_of_products(const std::vector<std::pair<Tensor, Tensor>>& products) {
  auto [L, R] = concatenated(products);
  return raw::mm(L.t(), R);
}

}  // namespace detail

}  // namespace tg::autograd
