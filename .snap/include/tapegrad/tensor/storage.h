// Storage: a reference-counted byte buffer from an Allocator. Views share one.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include <tapegrad/tensor/allocator.h>
#include <tapegrad/tensor/intrusive_ptr.h>

namespace tg {

/// Memory from an allocator, shared by a tensor and its views.
class StorageImpl final : public IntrusiveTarget {
 public:
  /// `nbytes` from `alloc` (returned to it when the storage dies).
  StorageImpl(size_t nbytes, Allocator* alloc)
      : data_(alloc->allocate(nbytes)), nbytes_(nbytes), allocator_(alloc), device_(alloc->device()) {}
  /// Memory the storage does not own (a DLPack producer's): `data`, `nbytes`
  /// on `device`; `release(context)` runs when the storage dies. Its
  /// allocator() is null.
  StorageImpl(void* data, size_t nbytes, Device device, void (*release)(void*), void* context)
      : data_(data), nbytes_(nbytes), allocator_(nullptr), device_(device), release_(release), context_(context) {}
  ~StorageImpl() override {
    if (allocator_) allocator_->deallocate(data_, nbytes_);
    else if (release_) release_(context_);
  }

  /// The memory, its size in bytes, its device and its allocator.
  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }  ///< size in bytes
  Device device() const { return device_; }  ///< where the memory lives
  /// Where it came from (null: memory the storage does not own).
  Allocator* allocator() const { return allocator_; }

  /// Int64 index data the library wrote from host values: the range of every
  /// element, recorded by the maker before the memory is shared, under the
  /// version counter `counter` (the writing tensor's, shared with its views)
  /// at `version`. Index ops on any view of it then read nothing back from
  /// the device (a host sync, refused under capture). Never computed from
  /// the data (a graph replay may rewrite memory without a version bump).
  void set_known_index_range(int64_t lo, int64_t hi, const void* counter, uint32_t version) {
    range_counter_ = counter;
    range_lo_ = lo;
    range_hi_ = hi;
    range_version_ = version;
  }
  /// Memory whose views are gradients meant to be accumulated in place even
  /// though they share it (a data-parallel bucket with
  /// gradient_as_bucket_view): AccumulateGrad adds into such a .grad in
  /// place, where shared memory would otherwise make it add out of place.
  void set_gradient_bucket(bool on) { gradient_bucket_ = on; }
  /// Whether set_gradient_bucket(true) was called.
  bool gradient_bucket() const { return gradient_bucket_; }
  /// Marks memory viewed as another dtype (view_as_real, view_as_complex):
  /// forward mode cannot follow a tangent across such views, so it refuses
  /// in-place writes to this memory in a dual level.
  void set_viewed_across_dtypes() { viewed_across_dtypes_ = true; }
  /// Whether set_viewed_across_dtypes() was called.
  bool viewed_across_dtypes() const { return viewed_across_dtypes_; }

  /// The range set above, if the reader's counter and version are the recorded ones.
  bool known_index_range(const void* counter, uint32_t version, int64_t* lo, int64_t* hi) const {
    if (!range_counter_ || counter != range_counter_ || version != range_version_) return false;
    *lo = range_lo_;
    *hi = range_hi_;
    return true;
  }

 private:
  void* data_;
  size_t nbytes_;
  Allocator* allocator_;
  Device device_;
  void (*release_)(void*) = nullptr;
  void* context_ = nullptr;
  const void* range_counter_ = nullptr;  // see set_known_index_range
  int64_t range_lo_ = 0, range_hi_ = 0;
  uint32_t range_version_ = 0;
  bool gradient_bucket_ = false;
  std::atomic<bool> viewed_across_dtypes_{
      false};  // views of several dtypes may be made on several threads  // see set_gradient_bucket
};

/// Shared by a tensor and all its views; every in-place op bumps it, and saved
/// tensors compare it at unpack time.
class VersionCounter final : public IntrusiveTarget {
 public:
  /// The current version; bump() increments it.
  uint32_t current() const { return v_.load(std::memory_order_acquire); }
  void bump() { v_.fetch_add(1, std::memory_order_acq_rel); }  ///< one more version

 private:
  std::atomic<uint32_t> v_{0};
};

}  // namespace tg
