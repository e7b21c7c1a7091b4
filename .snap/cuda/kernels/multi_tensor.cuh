// Internal: multi-tensor launches. One launch covers up to kListSize
// tensors: the kernel's argument holds every tensor's pointers and sizes,
// and each block finds its tensor and chunk from the block offsets, so an
// update over P tensors is ceil(P / kListSize) launches, not one per tensor
// per op. Used by multi_tensor_zero (multi_tensor.cu) and the optimizers'
// updates (optim/multi_tensor.cu).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "cuda/kernels/loops.cuh"
#include <tapegrad/cuda/device.h>

namespace tg::cuda::multi_tensor {

constexpr int kListSize = 48;
constexpr int kThreads = 256;
constexpr int64_t kChunk = 2 * 1024;  // elements per block (8 per thread: enough blocks to hide latency)

struct ListArgs {
  void* ptr[5][kListSize];
  int64_t n[kListSize];
  int64_t arg[kListSize];  // per tensor: its step-count index (updates), word size (zero)
  int64_t block_start[kListSize + 1];
  int ntensors;
};

// This block's tensor and the range of its chunk.
__device__ inline int find_tensor(const ListArgs& a, int64_t* begin, int64_t* end) {
  int t = 0;
  while (t + 1 < a.ntensors && a.block_start[t + 1] <= int64_t(blockIdx.x))
    ++t;
  *begin = (int64_t(blockIdx.x) - a.block_start[t]) * kChunk;
  *end = ::min(*begin + kChunk, a.n[t]);
  return t;
}

// Launches `kernel(args)` over the entries of `ptrs` (up to five lists) with
// element counts `n` and per-tensor arguments `arg`, kListSize at a time, on
// the current stream of `dev`.
template <class Launch>
inline void for_each_launch(Device dev, const std::vector<std::array<void*, 5>>& ptrs, const std::vector<int64_t>& n,
                            const std::vector<int64_t>& arg, const char* op, Launch launch) {
  DeviceGuard guard(dev.index());
  cudaStream_t s = static_cast<cudaStream_t>(current_stream(dev.index()).handle());
  size_t i = 0;
  while (i < ptrs.size()) {
    ListArgs a{};
    int64_t blocks = 0;
    int k = 0;
    for (; i < ptrs.size() && k < kListSize; ++i) {
      if (n[i] == 0) continue;
      for (int l = 0; l < 5; ++l)
        a.ptr[l][k] = ptrs[i][l];
      a.n[k] = n[i];
      a.arg[k] = arg[i];
      a.block_start[k] = blocks;
      blocks += (n[i] + kChunk - 1) / kChunk;
      ++k;
    }
    if (k == 0) break;
    a.block_start[k] = blocks;
    a.ntensors = k;
    TG_CHECK(blocks <= INT32_MAX, op, ": too many elements for one launch");
    launch(a, unsigned(blocks), s);
    TG_CUDA_CHECK(cudaGetLastError(), op);
  }
}

}  // namespace tg::cuda::multi_tensor
