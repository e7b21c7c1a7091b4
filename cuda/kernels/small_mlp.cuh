// Internal: the small-MLP kernel's body (cuda/kernels/linalg.cu), shared with
// the fused kernel (cuda/kernels/fused.cu), which runs a captured graph's
// elementwise steps after it in the same launch (fusion::Head): a neural
// ODE's Runge-Kutta stage sum after its right-hand side.
#pragma once

#include <cstdint>

#include "cuda/runtime/launch.h"

#include "tensor/element_math.h"

namespace tg::cuda {

// A block takes kMlpRows rows through every layer; each of its threads
// computes at most one output of each layer (so at most one of the last).
constexpr int kMlpRows = 4, kMlpMaxWidth = 64, kMlpMaxLayers = 8, kMlpThreads = 256;
static_assert(kMlpRows * kMlpMaxWidth <= kMlpThreads, "one output per thread and layer");

// The kernel's one argument (also a fused head's arguments, as bytes).
template <class T> struct MlpOperands {
  T* out;
  const T* x;
  const T* w[kMlpMaxLayers];
  const T* b[kMlpMaxLayers];
  // A recorded forward (for mlp_backward_k; else null): each layer's
  // pre-activation into z[l] where the activation follows it, each hidden
  // layer's output into h[l].
  T* z[kMlpMaxLayers];
  T* h[kMlpMaxLayers];
  int64_t rows;
  int width[kMlpMaxLayers + 1];
  int layers;
  Activation act;
  bool last_act;
};
static_assert(sizeof(MlpOperands<double>) <= fusion::kHeadArgBytes,
              "a fused head's arguments are at most kHeadArgBytes");

template <class T> __device__ inline T mlp_activation(Activation act, T x) {
  const tg::kernels::UnaryArgs<T> p{T(0), T(0), false, false};
  switch (act) {
    case Activation::Tanh: return tg::kernels::unary_fn<tg::kernels::UnaryOp::Tanh>(x, p);
    case Activation::Sigmoid: return tg::kernels::unary_fn<tg::kernels::UnaryOp::Sigmoid>(x, p);
    case Activation::Silu: return tg::kernels::unary_fn<tg::kernels::UnaryOp::Silu>(x, p);
    default: return tg::kernels::unary_fn<tg::kernels::UnaryOp::Relu>(x, p);  // (the host refuses other kinds)
  }
}

// One block (kMlpThreads threads) per kMlpRows rows, their activations in
// shared memory, each layer's weights staged there transposed (a warp's
// threads read consecutive outputs' weights: no bank conflicts, no
// scattered global loads); each output sums its products in order and then
// adds the bias, as small_gemm_k does, and the activation is the op's own
// element formula. Returns whether the thread stored an element of out (the
// last layer's), and which in *lin. Every thread of the block must call it
// (it synchronizes the block).
template <class T> __device__ inline bool mlp_at(const MlpOperands<T>& g, int64_t* lin) {
  __shared__ T h[2][kMlpRows][kMlpMaxWidth];
  // wt[q * (wout + 1) + j] = w[j][q]: the padding makes the transposing
  // stores (consecutive q) as conflict-free as the reads (consecutive j).
  __shared__ T wt[kMlpMaxWidth * (kMlpMaxWidth + 1)];
  const int64_t row0 = int64_t(blockIdx.x) * kMlpRows;
  const int nr = g.rows - row0 < kMlpRows ? int(g.rows - row0) : kMlpRows;
  const int w0 = g.width[0];
  for (int e = threadIdx.x; e < nr * w0; e += blockDim.x)
    h[0][e / w0][e % w0] = g.x[row0 * w0 + e];
  int cur = 0;
  bool stored = false;
  for (int l = 0; l < g.layers; ++l) {
    const int win = g.width[l], wout = g.width[l + 1];
    const bool last = l == g.layers - 1;
    const T* w = g.w[l];
    const T* b = g.b[l];
    for (int e = threadIdx.x; e < win * wout; e += blockDim.x)  // coalesced reads of w
      wt[(e % win) * (wout + 1) + e / win] = w[e];
    __syncthreads();
    const int e = threadIdx.x;  // kMlpRows * kMlpMaxWidth <= kMlpThreads: one output at most
    if (e < nr * wout) {
      const int r = e / wout, j = e % wout;
      T acc = 0;
#pragma unroll 8
      for (int q = 0; q < win; ++q)
        acc += h[cur][r][q] * wt[q * (wout + 1) + j];
      if (b) acc = acc + b[j];
      if (!last || g.last_act) {
        if (g.z[l]) g.z[l][row0 * wout + e] = acc;
        acc = mlp_activation(g.act, acc);
      }
      if (g.h[l]) g.h[l][row0 * wout + e] = acc;
      if (last) {
        *lin = row0 * wout + e;
        g.out[*lin] = acc;
        stored = true;
      } else {
        h[cur ^ 1][r][j] = acc;
      }
    }
    __syncthreads();
    cur ^= 1;
  }
  return stored;
}

}  // namespace tg::cuda
