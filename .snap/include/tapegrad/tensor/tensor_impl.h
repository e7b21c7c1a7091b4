// TensorImpl: storage + sizes/strides/offset (in elements) + dtype, device,
// layout, the shared version counter and an opaque autograd slot that
// tensor/ never looks into (autograd/ owns what is behind it).
#pragma once

#include <atomic>
#include <iosfwd>
#include <memory>
#include <vector>

#include <tapegrad/tensor/device.h>
#include <tapegrad/tensor/intrusive_ptr.h>
#include <tapegrad/tensor/scalar_type.h>
#include <tapegrad/tensor/storage.h>

namespace tg {

/// Sizes, strides, dims: a std::vector<int64_t> that is a type of tg's own,
/// so `std::cout << t.sizes()` finds tg's operator<< (as with LibTorch).
class IntList : public std::vector<int64_t> {
 public:
  using std::vector<int64_t>::vector;
  IntList() = default;
  /// From a std::vector<int64_t>.
  IntList(std::vector<int64_t> v) : std::vector<int64_t>(std::move(v)) {}  // NOLINT: implicit
};
/// Prints [2, 3] (as shape_str).
std::ostream& operator<<(std::ostream& os, const IntList& l);

/// The slot the autograd layer fills (tensor/ never looks inside).
struct AutogradMetaInterface {
  virtual ~AutogradMetaInterface() = default;
};

class TensorImpl;
class StaticMark;  // tensor/static_mark.h

/// The two dense tensors behind a sparse COO tensor (layout SparseCoo):
/// indices Int64 [sparse_dim, nnz] and values [nnz, dense sizes...], with the
/// flag saying the indices are sorted (row-major) and unique.
struct SparseCooParts {
  IntrusivePtr<TensorImpl> indices;  ///< Int64 [sparse_dim, nnz]
  IntrusivePtr<TensorImpl> values;   ///< [nnz, dense sizes...]
  bool coalesced = false;            ///< indices sorted row-major and unique
};

/// The tensor behind a Tensor handle: storage, sizes, strides, offset (in elements), dtype, layout, the version counter
/// shared with its views, and the autograd slot.
class TensorImpl final : public IntrusiveTarget {
 public:
  /// A strided tensor viewing `storage`.
  TensorImpl(IntrusivePtr<StorageImpl> storage, IntList sizes, IntList strides, int64_t offset, ScalarType dtype,
             IntrusivePtr<VersionCounter> version);

  /// A sparse COO tensor of logical shape `sizes` (sparse dims first, then
  /// values' trailing dims). It has no strides and a zero-byte storage on the
  /// values' device: all its data is in the two parts. Not checked here
  /// (tg::sparse_coo_tensor validates).
  static IntrusivePtr<TensorImpl> make_sparse_coo(IntList sizes, SparseCooParts parts,
                                                  IntrusivePtr<VersionCounter> version = {});

  /// Sizes, strides, offset, element count, rank, dtype, device, layout and contiguity (as on Tensor).
  const IntList& sizes() const { return sizes_; }
  const IntList& strides() const { return strides_; }     ///< strides in elements
  int64_t offset() const { return offset_; }              ///< offset into the storage, in elements
  int64_t numel() const { return numel_; }                ///< element count
  int64_t dim() const { return int64_t(sizes_.size()); }  ///< rank
  ScalarType dtype() const { return dtype_; }             ///< element type
  Device device() const { return storage_->device(); }    ///< the storage's device
  Layout layout() const { return layout_; }               ///< strided or sparse COO
  bool is_contiguous() const { return contiguous_; }      ///< row-major without gaps

  /// The storage and the version counter (shared with the views).
  const IntrusivePtr<StorageImpl>& storage() const { return storage_; }
  /// The version counter shared with the views.
  const IntrusivePtr<VersionCounter>& version_counter() const { return version_; }
  /// The address of the first element.
  void* data() const { return static_cast<char*>(storage_->data()) + offset_ * int64_t(element_size(dtype_)); }

  /// Layout SparseCoo only (asserted).
  const SparseCooParts& sparse_parts() const;
  /// Replaces the parts in place (sparse add_): same sizes, dtype and device.
  void set_sparse_parts(SparseCooParts parts);

  /// Takes `src`'s data (storage, sizes, strides, offset, dtype; strided
  /// tensors only) and keeps its own version counter and autograd slot: the
  /// handles to this tensor see the new data (Module::to moves parameters so).
  void set_data(const TensorImpl& src);
  /// The autograd slot (null until the autograd layer fills it) and its setter.
  AutogradMetaInterface* autograd_meta() const { return autograd_meta_.get(); }
  /// Fills the autograd slot (the autograd layer does).
  void set_autograd_meta(std::unique_ptr<AutogradMetaInterface> m) { autograd_meta_ = std::move(m); }
  /// The static-tensor mark of CUDA graphs (register_static in
  /// <tapegrad/cuda/graph.h>; null until the tensor is first registered),
  /// and its maker (created once, kept until the tensor dies).
  StaticMark* static_mark() const { return static_mark_.load(std::memory_order_acquire); }
  /// Creates the mark on first use (see static_mark).
  StaticMark& ensure_static_mark();
  ~TensorImpl();
  TensorImpl(const TensorImpl&) = delete;
  TensorImpl& operator=(const TensorImpl&) = delete;

 private:
  IntrusivePtr<StorageImpl> storage_;
  IntList sizes_;
  IntList strides_;
  int64_t offset_;
  int64_t numel_;
  ScalarType dtype_;
  Layout layout_ = Layout::Strided;
  bool contiguous_;
  IntrusivePtr<VersionCounter> version_;
  std::unique_ptr<AutogradMetaInterface> autograd_meta_;
  std::unique_ptr<SparseCooParts> sparse_;
  std::atomic<StaticMark*> static_mark_{nullptr};
};

/// Row-major strides of `sizes`.
IntList contiguous_strides(const IntList& sizes);
/// The product of `sizes` (1 for none).
int64_t shape_numel(const IntList& sizes);

}  // namespace tg
