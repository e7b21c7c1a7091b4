#include "tensor/checked.h"
#include <tapegrad/tensor/tensor_impl.h>

#include <tapegrad/tensor/error.h>
#include <tapegrad/tensor/tensor.h>
#include <tapegrad/cuda/static_tensor.h>
#include "tensor/static_mark.h"

#include <exception>

namespace tg {

IntList contiguous_strides(const IntList& sizes) {
  IntList st(sizes.size());
  int64_t s = 1;
  for (int64_t i = int64_t(sizes.size()) - 1; i >= 0; --i) {
    st[i] = s;
    // The last product is not a stride: only those before it must fit.
    if (i > 0) s = detail::checked_mul(s, std::max<int64_t>(sizes[i], 1), "strides", sizes);
  }
  return st;
}

int64_t shape_numel(const IntList& sizes) { return detail::checked_numel(sizes, "numel"); }

static bool compute_contiguous(const IntList& sizes, const IntList& strides) {
  int64_t expected = 1;
  for (int64_t i = int64_t(sizes.size()) - 1; i >= 0; --i) {
    if (sizes[i] == 0) return true;
    if (sizes[i] == 1) continue;
    if (strides[i] != expected) return false;
    expected *= sizes[i];
  }
  return true;
}

TensorImpl::TensorImpl(IntrusivePtr<StorageImpl> storage, IntList sizes, IntList strides, int64_t offset,
                       ScalarType dtype, IntrusivePtr<VersionCounter> version)
    : storage_(std::move(storage)),
      sizes_(std::move(sizes)),
      strides_(std::move(strides)),
      offset_(offset),
      numel_(shape_numel(sizes_)),
      dtype_(dtype),
      contiguous_(compute_contiguous(sizes_, strides_)),
      version_(version ? std::move(version) : IntrusivePtr<VersionCounter>::make()) {
  TG_INTERNAL_ASSERT(sizes_.size() == strides_.size(), "rank mismatch");
}

void TensorImpl::set_data(const TensorImpl& src) {
  TG_CHECK(layout_ == Layout::Strided && src.layout_ == Layout::Strided,
           "set_data: only strided tensors can take another tensor's data");
  storage_ = src.storage_;
  sizes_ = src.sizes_;
  strides_ = src.strides_;
  offset_ = src.offset_;
  numel_ = src.numel_;
  dtype_ = src.dtype_;
  contiguous_ = src.contiguous_;
}

IntrusivePtr<TensorImpl> TensorImpl::make_sparse_coo(IntList sizes, SparseCooParts parts,
                                                     IntrusivePtr<VersionCounter> version) {
  TG_INTERNAL_ASSERT(parts.indices && parts.values, "sparse tensor without parts");
  Allocator* alloc = parts.values->storage()->allocator();
  if (!alloc) alloc = allocator_for(parts.values->device());  // values in memory tapegrad does not own
  auto impl = IntrusivePtr<TensorImpl>::make(IntrusivePtr<StorageImpl>::make(0, alloc), IntList{}, IntList{}, 0,
                                             parts.values->dtype(), std::move(version));
  impl->sizes_ = std::move(sizes);
  impl->numel_ = shape_numel(impl->sizes_);
  impl->layout_ = Layout::SparseCoo;
  impl->contiguous_ = false;
  impl->sparse_ = std::make_unique<SparseCooParts>(std::move(parts));
  return impl;
}

const SparseCooParts& TensorImpl::sparse_parts() const {
  TG_INTERNAL_ASSERT(sparse_, "sparse_parts() of a strided tensor");
  return *sparse_;
}

void TensorImpl::set_sparse_parts(SparseCooParts parts) {
  TG_INTERNAL_ASSERT(sparse_ && parts.values->dtype() == dtype_, "set_sparse_parts mismatch");
  *sparse_ = std::move(parts);
}

}  // namespace tg

namespace tg {

TensorImpl::~TensorImpl() { delete static_mark_.load(std::memory_order_acquire); }

StaticMark& TensorImpl::ensure_static_mark() {
  StaticMark* m = static_mark_.load(std::memory_order_acquire);
  if (m) return *m;
  auto* fresh = new StaticMark();
  if (static_mark_.compare_exchange_strong(m, fresh, std::memory_order_acq_rel)) return *fresh;
  delete fresh;  // another thread made it first
  return *m;
}

namespace cuda {

bool static_in_use(const Tensor& t) {
  if (!t.defined()) return false;
  const StaticMark* m = t.impl()->static_mark();
  return m && m->registered.load(std::memory_order_acquire) && m->graphs.load(std::memory_order_acquire) > 0;
}

namespace detail {
int tensor_layer_uncaught_exceptions() { return std::uncaught_exceptions(); }

void check_static_may_move(const Tensor& t, const char* op, const char* what) {
  if (!static_in_use(t)) return;
  TG_ERROR(op, ": ", what, " of the static tensor '", t.impl()->static_mark()->name(), "' (", t.dtype(), " ", t.sizes(),
           " on ", t.device(),
           ") would move, and a captured CUDA graph depends on its address; keep it in place "
           "(zero_grad(set_to_none=false), in-place updates), or reset the graphs that recorded it and "
           "capture again");
}
}  // namespace detail

}  // namespace cuda
}  // namespace tg
