// Storage: a reference-counted byte buffer from an Allocator. Views share one.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include <tapegrad/tensor/allocator.h>
#include <tapegrad/tensor/intrusive_ptr.h>

namespace tg {

class StorageImpl final : public IntrusiveTarget {
 public:
  StorageImpl(size_t nbytes, Allocator* alloc)
      : data_(alloc->allocate(nbytes)),
        nbytes_(nbytes),
        allocator_(alloc),
        device_(alloc->device()) {}
  ~StorageImpl() override { allocator_->deallocate(data_, nbytes_); }

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  Allocator* allocator() const { return allocator_; }

 private:
  void* data_;
  size_t nbytes_;
  Allocator* allocator_;
  Device device_;
};

// Shared by a tensor and all its views; every in-place op bumps it, and saved
// tensors compare it at unpack time.
class VersionCounter final : public IntrusiveTarget {
 public:
  uint32_t current() const { return v_.load(std::memory_order_acquire); }
  void bump() { v_.fetch_add(1, std::memory_order_acq_rel); }

 private:
  std::atomic<uint32_t> v_{0};
};

}  // namespace tg
