// Internal: the caching allocator's side of graph capture (cuda/graph.cpp).
#pragma once

#include <cstdint>

#include <tapegrad/cuda/stream.h>

namespace tg::cuda::detail {
// Allocations made by stream `s` of `device` come from pool `pool_id` until
// end_allocate_to_pool; the pool gains a user.
void begin_allocate_to_pool(int device, uint64_t pool_id, const Stream& s);
void end_allocate_to_pool(int device, const Stream& s);
// A user of the pool is gone; with none left its free memory is returned.
void release_pool(int device, uint64_t pool_id);
}  // namespace tg::cuda::detail
