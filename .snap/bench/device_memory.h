// The benchmarks' device helpers: wait for the device, and the allocator's
// live and peak bytes (the CUDA caching allocator's, or the CPU allocator's).
#pragma once

#include <cstdint>

#include <tapegrad/tapegrad.h>

namespace tgbench {

inline void sync(bool cuda) {
  if (cuda) tg::cuda::synchronize();
}
inline int64_t allocated(bool cuda) {
  return cuda ? tg::cuda::memory_stats().allocated_bytes : tg::cpu_allocator_stats().live_bytes;
}
inline int64_t peak(bool cuda) {
  return cuda ? tg::cuda::memory_stats().peak_allocated_bytes : tg::cpu_allocator_stats().peak_bytes;
}
inline void reset_peak(bool cuda) {
  if (cuda) tg::cuda::reset_peak_memory_stats();
  else tg::reset_cpu_peak_bytes();
}

}  // namespace tgbench
