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
      : data_(alloc->allocate(nbytes)),
        nbytes_(nbytes),
        allocator_(alloc),
        device_(alloc->device()) {}
  ~StorageImpl() override { allocator_->deallocate(data_, nbytes_); }

  /// The memory, its size in bytes, its device and its allocator.
  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }  ///< size in bytes
  Device device() const { return device_; }  ///< where the memory lives
  Allocator* allocator() const { return allocator_; }  ///< where it came from

 private:
  void* data_;
  size_t nbytes_;
  Allocator* allocator_;
  Device device_;
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
