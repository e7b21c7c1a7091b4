// Allocators hand out raw byte buffers for Storage. The CPU allocator is
// 64-byte aligned and keeps live/peak byte counts that tests and the
// saved-tensor offload hooks read.
#pragma once

#include <cstddef>
#include <cstdint>

#include <tapegrad/tensor/device.h>

namespace tg {

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr, size_t nbytes) = 0;
  virtual Device device() const = 0;
};

struct AllocatorStats {
  int64_t live_bytes = 0;
  int64_t peak_bytes = 0;
  int64_t num_allocs = 0;  // allocations made since start
  int64_t live_allocs = 0;
  int64_t cached_bytes = 0;  // freed large blocks kept for reuse (CPU)
};

Allocator* cpu_allocator();
AllocatorStats cpu_allocator_stats();
void reset_cpu_peak_bytes();  // peak := live
// Returns the cached free blocks (>= 1 MiB, up to 2 GiB) to the system.
void cpu_empty_cache();

// Devices register their allocators here (the CUDA backend does, when the
// library loads): `get(index)` returns the allocator of device `index`.
Allocator* allocator_for(Device d);
using DeviceAllocatorFn = Allocator* (*)(int index);
void set_allocator(DeviceType t, DeviceAllocatorFn get);

// Page-locked host memory for fast and asynchronous host<->device copies;
// the CUDA backend registers it. Without one, pinned_allocator() throws.
Allocator* pinned_allocator();
Allocator* registered_pinned_allocator();  // nullptr when none
void set_pinned_allocator(Allocator* a);

}  // namespace tg
