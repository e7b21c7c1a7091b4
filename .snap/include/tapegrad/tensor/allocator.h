// Allocators hand out raw byte buffers for Storage. The CPU allocator is
// 64-byte aligned and keeps live/peak byte counts that tests and the
// saved-tensor offload hooks read.
#pragma once

#include <cstddef>
#include <cstdint>

#include <tapegrad/tensor/device.h>

namespace tg {

/// Where storage memory comes from: one per device kind (CPU, each GPU, pinned host).
class Allocator {
 public:
  virtual ~Allocator() = default;
  /// Memory for `nbytes` (throws a tg::Error naming the size when out of memory).
  virtual void* allocate(size_t nbytes) = 0;
  /// Returns memory from allocate() (with the same size).
  virtual void deallocate(void* ptr, size_t nbytes) = 0;
  /// The device the memory lives on.
  virtual Device device() const = 0;
};

/// Counters of the CPU allocator (cpu_allocator_stats()).
struct AllocatorStats {
  int64_t live_bytes = 0;    ///< in live allocations
  int64_t peak_bytes = 0;    ///< largest live_bytes since start or reset_cpu_peak_bytes()
  int64_t num_allocs = 0;    ///< allocations made since start
  int64_t live_allocs = 0;   ///< allocations not yet freed
  int64_t cached_bytes = 0;  ///< freed large blocks kept for reuse (CPU)
};

/// The CPU allocator (aligned, caching large blocks).
Allocator* cpu_allocator();
/// Its counters.
AllocatorStats cpu_allocator_stats();
void reset_cpu_peak_bytes();  ///< peak := live
/// Returns the cached free blocks (>= 1 MiB, up to 2 GiB) to the system.
void cpu_empty_cache();

/// The allocator of a device: the CPU's, or the CUDA backend's caching
/// allocator of that device (throws in a build without CUDA).
Allocator* allocator_for(Device d);

/// Page-locked host memory for fast and asynchronous host<->device copies,
/// from the CUDA backend. Without one, pinned_allocator() throws.
Allocator* pinned_allocator();
Allocator* registered_pinned_allocator();  ///< nullptr when none

}  // namespace tg
