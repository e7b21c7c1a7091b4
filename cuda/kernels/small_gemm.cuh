// Internal: the small-product kernel's body (cuda/kernels/linalg.cu), shared
// with the fused kernel (cuda/kernels/fused.cu), which runs a captured
// graph's elementwise steps after it in the same launch (fusion::Head).
#pragma once

#include <cstdint>

#include "cuda/runtime/launch.h"

namespace tg::cuda {

constexpr int kSmallTile = 16;

struct SmallGemmArgs {
  int64_t n, m, k;
  int64_t sab, sar, sac, sbb, sbr, sbc;  // a [B, n, k] and b [B, k, m] strides; out contiguous [B, n, m]
  bool accumulate;
};

// The kernel's one argument (also a fused head's arguments, as bytes).
template <class T> struct SmallGemmOperands {
  T* out;
  const T* a;
  const T* b;
  const T* bias;  // null: none
  SmallGemmArgs g;
};
static_assert(sizeof(SmallGemmOperands<double>) <= fusion::kHeadArgBytes,
              "a fused head's arguments are at most kHeadArgBytes");

// One block of kSmallTile x kSmallTile threads per tile of outputs (grid
// (m, n tiles, B)): each thread sums its output's k products in order, then
// adds the bias or the old value (accumulate), and stores it. Returns
// whether the thread had an output, and its element of out in *lin. Every
// thread of the block must call it (it synchronizes the block).
template <class T> __device__ inline bool small_gemm_at(const SmallGemmOperands<T>& p, int64_t* lin) {
  __shared__ T as[kSmallTile][kSmallTile + 1], bs[kSmallTile][kSmallTile + 1];
  const SmallGemmArgs& g = p.g;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t bi = blockIdx.z, i = int64_t(blockIdx.y) * kSmallTile + ty, j = int64_t(blockIdx.x) * kSmallTile + tx;
  const T* ab = p.a + bi * g.sab;
  const T* bb = p.b + bi * g.sbb;
  T acc = 0;
  for (int64_t p0 = 0; p0 < g.k; p0 += kSmallTile) {
    // as[ty][tx] = a[i][p0 + tx]; bs[ty][tx] = b[p0 + ty][j]
    const int64_t ap = p0 + tx, bp = p0 + ty;
    as[ty][tx] = i < g.n && ap < g.k ? ab[i * g.sar + ap * g.sac] : T(0);
    bs[ty][tx] = bp < g.k && j < g.m ? bb[bp * g.sbr + j * g.sbc] : T(0);
    __syncthreads();
    const int64_t len = g.k - p0 < kSmallTile ? g.k - p0 : kSmallTile;
    for (int q = 0; q < len; ++q)
      acc += as[ty][q] * bs[q][tx];
    __syncthreads();
  }
  if (i >= g.n || j >= g.m) return false;
  *lin = (bi * g.n + i) * g.m + j;
  T* o = p.out + *lin;
  *o = g.accumulate ? *o + acc : p.bias ? acc + p.bias[j] : acc;
  return true;
}

}  // namespace tg::cuda
