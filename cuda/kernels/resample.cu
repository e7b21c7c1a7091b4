// CUDA backend: the linear resampling primitives (grid.def's
// _resample_linear and its adjoint; the grid family's kernel table,
// tensor/grid_kernels.h). One pass each, where interpolate's gathers, two
// weighted products and a sum (and their adjoint's scatter-adds) took five
// forward and more backward. The adjoint gathers each input point's run of
// outputs in order: deterministic, no atomics.
//
// Operands [outer, points, inner]: with rows of at least kRowMin elements
// (a resampled dim that is not the last), a warp takes one output row per
// task (the row's coordinates from the task index: one division per row),
// in 16-byte vectors when the rows allow; shorter rows (the last dim) one
// thread per element.
#include <cstdint>

#include <tapegrad/tensor/tensor.h>

#include "cuda/kernels/resample.h"
#include "cuda/launch.h"
#include "loops.cuh"
#include "tensor/kernels.h"

namespace tg::cuda {
namespace {

constexpr int64_t kRowMin = 64;
constexpr int kWarps = kBlock / 32;  // row tasks per block

struct Tables {
  const int64_t *i0, *i1, *off0, *off1;
  const double* w1;
  int64_t outer, in, out, inner;
};

Tables tables_of(const kernels::ResampleStencil& st) {
  return {static_cast<const int64_t*>(st.i0.data_ptr()),
          static_cast<const int64_t*>(st.i1.data_ptr()),
          static_cast<const int64_t*>(st.off0.data_ptr()),
          static_cast<const int64_t*>(st.off1.data_ptr()),
          static_cast<const double*>(st.w1.data_ptr()),
          st.outer,
          st.in,
          st.out,
          st.inner};
}

// The warp's row task and its lane.
__device__ inline int64_t warp_task() { return int64_t(blockIdx.x) * kWarps + threadIdx.x / 32; }
__device__ inline int64_t warp_tasks() { return int64_t(gridDim.x) * kWarps; }

// dst := wa a + wb b over `inner` elements, the lanes of one warp.
template <class T> __device__ void lerp_row(T* dst, const T* a, const T* b, T wa, T wb, int64_t inner, bool vec) {
  if (vec) {
    constexpr int V = Vec16<T>::kN;
    const auto* va = reinterpret_cast<const Vec16<T>*>(a);
    const auto* vb = reinterpret_cast<const Vec16<T>*>(b);
    auto* vd = reinterpret_cast<Vec16<T>*>(dst);
    for (int64_t i = threadIdx.x % 32; i < inner / V; i += 32) {
      const Vec16<T> x = va[i], y = vb[i];
      Vec16<T> r;
#pragma unroll
      for (int k = 0; k < V; ++k)
        r.v[k] = wa * x.v[k] + wb * y.v[k];
      vd[i] = r;
    }
  } else {
    for (int64_t i = threadIdx.x % 32; i < inner; i += 32)
      dst[i] = wa * a[i] + wb * b[i];
  }
}

template <class T> __global__ void resample_rows_kernel(T* out, const T* x, Tables t, bool vec) {
  const int64_t rows = t.outer * t.out;
  for (int64_t task = warp_task(); task < rows; task += warp_tasks()) {
    const int64_t m = task / t.out, j = task - m * t.out;
    const T* base = x + m * t.in * t.inner;
    const double w = t.w1[j];
    lerp_row(out + task * t.inner, base + t.i0[j] * t.inner, base + t.i1[j] * t.inner, T(1 - w), T(w), t.inner, vec);
  }
}

template <class T, class I> __global__ void resample_flat_kernel(T* out, const T* x, Tables t, I n) {
  const I inner = I(t.inner), out_pts = I(t.out), in_pts = I(t.in);
  for (I i = I(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += I(blockDim.x) * gridDim.x) {
    const I q = i / inner, k = i - q * inner, m = q / out_pts, j = q - m * out_pts;
    const T* base = x + (int64_t(m) * in_pts) * inner + k;
    const double w = t.w1[j];
    out[i] = T(1 - w) * base[t.i0[j] * inner] + T(w) * base[t.i1[j] * inner];
  }
}

// The adjoint's point i of row m: its outputs' weighted sum, in order.
template <class T> __device__ T adjoint_at(const T* g, const Tables& t, int64_t i, int64_t stride) {
  T acc = 0;
  for (int64_t j = t.off0[i]; j < t.off0[i + 1]; ++j)
    acc += T(1 - t.w1[j]) * g[j * stride];
  for (int64_t j = t.off1[i]; j < t.off1[i + 1]; ++j)
    acc += T(t.w1[j]) * g[j * stride];
  return acc;
}

template <class T> __global__ void adjoint_rows_kernel(T* out, const T* g, Tables t) {
  const int64_t rows = t.outer * t.in;
  for (int64_t task = warp_task(); task < rows; task += warp_tasks()) {
    const int64_t m = task / t.in, i = task - m * t.in;
    const T* base = g + m * t.out * t.inner;
    T* dst = out + task * t.inner;
    for (int64_t k = threadIdx.x % 32; k < t.inner; k += 32)
      dst[k] = adjoint_at(base + k, t, i, t.inner);
  }
}

template <class T, class I> __global__ void adjoint_flat_kernel(T* out, const T* g, Tables t, I n) {
  const I inner = I(t.inner), in_pts = I(t.in), out_pts = I(t.out);
  for (I e = I(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += I(blockDim.x) * gridDim.x) {
    const I q = e / inner, k = e - q * inner, m = q / in_pts, i = q - m * in_pts;
    out[e] = adjoint_at(g + (int64_t(m) * out_pts) * inner + k, t, i, t.inner);
  }
}

// One of the two passes: `rows` output rows of st.inner elements.
template <class Rows, class Flat>
bool launch(const char* op, const Tensor& out, const Tensor& src, const kernels::ResampleStencil& st, int64_t rows,
            Rows&& rows_kernel, Flat&& flat_kernel) {
  if (!dense_float(out) || !dense_float(src)) return false;
  DeviceGuard g(out.device().index());
  cudaStream_t s = stream_of(out);
  LaunchEncoder access(s);
  access.read(src);
  for (const Tensor* t : {&st.i0, &st.i1, &st.w1, &st.off0, &st.off1})
    access.read(*t);
  access.write(out);
  const Tables t = tables_of(st);
  const int64_t n = out.numel();
  kernels::dispatch_floating(src.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      T* op_ = static_cast<T*>(out.data_ptr());
      const T* sp = static_cast<const T*>(src.data_ptr());
      if (st.inner >= kRowMin) {
        const unsigned grid = unsigned(std::min<int64_t>((rows + kWarps - 1) / kWarps, int64_t(1) << 20));
        rows_kernel(grid, s, op_, sp, t);
      } else if (n <= int64_t(INT32_MAX)) {  // i + the grid stride stays below 2^32
        flat_kernel(grid_for(n), s, op_, sp, t, uint32_t(n));
      } else {
        flat_kernel(grid_for(n), s, op_, sp, t, uint64_t(n));
      }
      TG_CUDA_CHECK(cudaGetLastError(), op);
    }
  });
  return true;
}

}  // namespace

bool resample_linear(const Tensor& out, const Tensor& x, const kernels::ResampleStencil& st) {
  return launch(
      "_resample_linear", out, x, st, st.outer * st.out,
      [&](unsigned grid, cudaStream_t s, auto* o, const auto* xp, const Tables& t) {
        using T = std::remove_pointer_t<decltype(o)>;
        const bool vec = st.inner % Vec16<T>::kN == 0 && reinterpret_cast<uintptr_t>(o) % 16 == 0 &&
                         reinterpret_cast<uintptr_t>(xp) % 16 == 0;
        resample_rows_kernel<T><<<grid, kBlock, 0, s>>>(o, xp, t, vec);
      },
      [&](unsigned grid, cudaStream_t s, auto* o, const auto* xp, const Tables& t, auto n) {
        using T = std::remove_pointer_t<decltype(o)>;
        resample_flat_kernel<T, decltype(n)><<<grid, kBlock, 0, s>>>(o, xp, t, n);
      });
}

bool resample_linear_backward(const Tensor& out, const Tensor& g, const kernels::ResampleStencil& st) {
  return launch(
      "_resample_linear_backward", out, g, st, st.outer * st.in,
      [&](unsigned grid, cudaStream_t s, auto* o, const auto* gp, const Tables& t) {
        using T = std::remove_pointer_t<decltype(o)>;
        adjoint_rows_kernel<T><<<grid, kBlock, 0, s>>>(o, gp, t);
      },
      [&](unsigned grid, cudaStream_t s, auto* o, const auto* gp, const Tables& t, auto n) {
        using T = std::remove_pointer_t<decltype(o)>;
        adjoint_flat_kernel<T, decltype(n)><<<grid, kBlock, 0, s>>>(o, gp, t, n);
      });
}

}  // namespace tg::cuda
