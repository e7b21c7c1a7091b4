// Internal: the caching allocator's side of graph capture (graphs/graph.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include <tapegrad/cuda/stream.h>

namespace tg::cuda::detail {
// Allocations made by the streams of capture `capture_id` (the capturing
// stream and those forked from it) on `device` come from pool `pool_id` until
// end_allocate_to_pool; the pool gains a user. A block freed meanwhile is
// reused only after `reuse_delay` more bytes of the pool have been freed
// (the oldest first), or when the device has no memory left.
void begin_allocate_to_pool(int device, uint64_t pool_id, uint64_t capture_id, size_t reuse_delay);
void end_allocate_to_pool(int device, uint64_t capture_id);
// A user of the pool is gone; with none left its free memory is returned.
void release_pool(int device, uint64_t pool_id);
}  // namespace tg::cuda::detail
