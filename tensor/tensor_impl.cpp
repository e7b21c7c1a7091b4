#include "tensor/checked.h"
#include <tapegrad/tensor/tensor_impl.h>

#include <tapegrad/tensor/error.h>

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

TensorImpl::TensorImpl(IntrusivePtr<StorageImpl> storage,
                       IntList sizes,
                       IntList strides,
                       int64_t offset,
                       ScalarType dtype,
                       IntrusivePtr<VersionCounter> version)
    : storage_(std::move(storage)),
      sizes_(std::move(sizes)),
      strides_(std::move(strides)),
      offset_(offset),
      numel_(shape_numel(sizes_)),
      dtype_(dtype),
      contiguous_(compute_contiguous(sizes_, strides_)),
      version_(version ? std::move(version)
                       : IntrusivePtr<VersionCounter>::make()) {
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
  auto impl = IntrusivePtr<TensorImpl>::make(IntrusivePtr<StorageImpl>::make(0, alloc), IntList{},
                                             IntList{}, 0, parts.values->dtype(),
                                             std::move(version));
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
