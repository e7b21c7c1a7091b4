// The CUDA caching allocator (docs/STREAMS.md "Memory").
//
// - Requests are rounded to 512 bytes; those up to 1 MiB come from 2 MiB
//   segments ("small" pool), larger ones from their own segments rounded to
//   2 MiB ("large" pool). A free block of the right pool, the same device and
//   the same stream is reused (best fit) and split when much larger.
// - A block belongs to the stream that was current when it was allocated. If
//   it is used on other streams (record_stream), freeing it records an event
//   on each of them, and the block is not handed out again before those
//   events complete.
// - Out of memory: the allocator frees every cached, unsplit segment and
//   retries once; then it throws an error stating the requested, free and
//   total bytes, and stays usable.
// - Graph-private pools (docs/GRAPHS.md): a stream that captures a CUDA graph
//   allocates from the graph's pool; every block carries its pool id (0 for
//   the shared pool) and is reused only within that pool, which stays
//   reserved while a graph using it lives.
#pragma once

#include <cstdint>

#include <tapegrad/cuda/capture.h>
#include <tapegrad/cuda/stream.h>

namespace tg::cuda {

/// Counters of a device's caching allocator (memory_stats()).
struct MemoryStats {
  int64_t allocated_bytes = 0;       ///< in blocks handed out
  int64_t reserved_bytes = 0;        ///< in segments obtained with cudaMalloc
  int64_t peak_allocated_bytes = 0;  ///< largest allocated_bytes since reset_peak_memory_stats()
  int64_t peak_reserved_bytes = 0;   ///< largest reserved_bytes since then
  int64_t num_allocs = 0;            ///< allocate() calls served
  int64_t num_frees = 0;             ///< deallocate() calls
  int64_t num_segments = 0;          ///< live cudaMalloc segments
  int64_t num_cuda_mallocs = 0;      ///< since start
  int64_t num_ooms = 0;              ///< requests that failed even after the retry
  int64_t num_cache_flushes = 0;     ///< segments released to retry a failed cudaMalloc
  int64_t pending_event_blocks = 0;  ///< freed blocks waiting on other streams
};

/// The counters of a device (-1: the current one).
MemoryStats memory_stats(int device = -1);
/// Peaks := current values.
void reset_peak_memory_stats(int device = -1);
/// The allocated and reserved bytes and the segments of one graph pool.
MemoryStats memory_stats(MempoolId pool, int device = -1);
/// Returns every cached free segment to the driver (waits for pending events).
void empty_cache();
/// The block holding `ptr` (a storage's data pointer) is also used on `s`: it
/// is not reused after it is freed until the work queued on `s` by then is done.
void record_stream(const void* ptr, const Stream& s);

/// Page-locked host memory (Tensor::pin_memory, non_blocking copies): a
/// caching allocator by power-of-two size classes. A pinned block used by an
/// asynchronous copy (record_host_use, which `to` calls) is not reused after
/// it is freed until the copy has completed; no host sync is needed for that.
struct HostMemoryStats {
  int64_t allocated_bytes = 0;  ///< in blocks handed out (size classes)
  int64_t cached_bytes = 0;     ///< free blocks kept for reuse
  int64_t pending_blocks = 0;   ///< freed blocks whose copies are still queued
  int64_t num_host_allocs = 0;  ///< cudaHostAlloc calls since start
};
/// The pinned host allocator's counters.
HostMemoryStats host_memory_stats();
/// Returns the cached pinned blocks to the driver.
void empty_host_cache();
/// The pinned block starting at `ptr` (a storage's data pointer) is read or
/// written by work queued on `s` so far.
void record_host_use(const void* ptr, const Stream& s);

}  // namespace tg::cuda
