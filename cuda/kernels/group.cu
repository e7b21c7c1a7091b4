// CUDA backend: the group primitives of the normalizations (grid.def's
// _group_sum, _group_center, _group_affine; the grid family's kernel table,
// tensor/grid_kernels.h). Each is one pass (the sums: one pass and a small
// combine of per-block partials, in a fixed order: deterministic), where the
// composites of reductions and broadcast elementwise ops they replace
// materialized a product or a broadcast per step. Float32 and Float64 on
// contiguous operands; anything else answers false (the op layer's
// reductions and broadcasts serve it).
#include <cstdint>

#include <cub/block/block_reduce.cuh>

#include <tapegrad/tensor/tensor.h>

#include "cuda/kernels/group.h"
#include "cuda/launch.h"
#include "loops.cuh"
#include "tensor/env.h"
#include "tensor/kernels.h"

namespace tg::cuda {
namespace {

template <class T> struct GroupAcc { using type = double; };  // float sums in double, as reduce_kernel's

// partial[row * splits + s] := the sum of a * b (b null: a) over
// [s * chunk, min(run, (s + 1) * chunk)) of row `row` (rows `run` apart);
// four loads in flight per thread, combined in a fixed order.
template <class T, class A, class Out, bool kTwo>
__global__ void group_sum_kernel(const T* a, const T* b, int64_t run, int64_t chunk, int64_t splits, Out* partial) {
  using BlockReduce = cub::BlockReduce<A, kBlock>;
  __shared__ typename BlockReduce::TempStorage tmp;
  const int64_t row = blockIdx.x, s = blockIdx.y;
  const int64_t begin = s * chunk, end = begin + chunk < run ? begin + chunk : run;
  const T* pa = a + row * run;
  const T* pb = kTwo ? b + row * run : nullptr;
  auto at = [&](int64_t i) {
    if constexpr (kTwo) return A(pa[i]) * A(pb[i]);
    else return A(pa[i]);
  };
  A acc = 0;
  int64_t i = begin + threadIdx.x;
  for (; i + 3 * kBlock < end; i += 4 * kBlock) {
    const A v0 = at(i), v1 = at(i + kBlock), v2 = at(i + 2 * kBlock), v3 = at(i + 3 * kBlock);
    acc += (v0 + v1) + (v2 + v3);
  }
  for (; i < end; i += kBlock)
    acc += at(i);
  const A total = BlockReduce(tmp).Sum(acc);
  if (threadIdx.x == 0) partial[row * splits + s] = Out(total);
}

// out[row] := the sum of partial[row * splits ...] (one thread per row, in order).
template <class A, class Out>
__global__ void combine_partials_kernel(const A* partial, int64_t rows, int64_t splits, Out* out) {
  const int64_t row = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  A acc = 0;
  for (int64_t s = 0; s < splits; ++s)
    acc += partial[row * splits + s];
  out[row] = Out(acc);
}

// The sums of rows [rows, run] of a (* b) into out[rows] (type Out). Blocks:
// enough to fill the device (few rows: each split into chunks of at least
// 4096 elements), written straight to out when a row is one block's, else
// as partials combined in order by a second kernel.
template <class T, class Out>
void row_sums(const T* a, const T* b, int64_t rows, int64_t run, Out* out, const Tensor& like, LaunchEncoder& access,
              cudaStream_t s) {
  using A = typename GroupAcc<T>::type;
  TG_CHECK(rows <= int64_t(INT32_MAX), "_group_sum: too many groups for one CUDA launch");
  int64_t splits = std::min<int64_t>((264 + rows - 1) / rows, std::max<int64_t>(run / 4096, 1));
  splits = std::max<int64_t>(1, std::min<int64_t>(splits, 1024));
  const int64_t chunk = (run + splits - 1) / splits;
  splits = (run + chunk - 1) / chunk;
  auto sum_into = [&](auto* dst, int64_t sp) {
    using D = std::remove_pointer_t<decltype(dst)>;
    const dim3 grid{unsigned(rows), unsigned(sp), 1};
    if (b) group_sum_kernel<T, A, D, true><<<grid, kBlock, 0, s>>>(a, b, run, chunk, sp, dst);
    else group_sum_kernel<T, A, D, false><<<grid, kBlock, 0, s>>>(a, b, run, chunk, sp, dst);
    TG_CUDA_CHECK(cudaGetLastError(), "_group_sum");
  };
  if (splits == 1) return sum_into(out, 1);
  Tensor partial = tg::empty({rows, splits}, TensorOptions().dtype(ScalarType::Float64).device(like.device()));
  access.write(partial);
  A* pp = static_cast<A*>(partial.data_ptr());
  sum_into(pp, splits);
  combine_partials_kernel<A, Out><<<unsigned((rows + kBlock - 1) / kBlock), kBlock, 0, s>>>(pp, rows, splits, out);
  TG_CUDA_CHECK(cudaGetLastError(), "_group_sum");
}

// out[i] := x[i] - sum[i / run] / run.
template <class T, class I>
__global__ void center_kernel(T* out, const T* x, const double* sum, I n, I run, double inv_run) {
  for (I i = I(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += I(blockDim.x) * gridDim.x)
    out[i] = T(double(x[i]) - sum[i / run] * inv_run);
}

// The row-wise passes: rows of `run` contiguous elements with one
// coefficient set each. A block takes kRowChunk elements of one row (the
// row from the task index: integer division once per block, none per
// element, where the flat kernels above divide per element), in 16-byte
// vectors when rows and pointers allow. For rows of at least kRowsFrom
// elements; shorter rows would leave most of a block idle.
constexpr int64_t kRowChunk = 4096, kRowsFrom = 1024;

template <class T, class F>
__device__ void row_pass(T* out, const T* in, int64_t row, int64_t part, int64_t run, bool vec, const F& f) {
  const int64_t begin = part * kRowChunk, end = begin + kRowChunk < run ? begin + kRowChunk : run;
  const T* src = in + row * run;
  T* dst = out + row * run;
  if (vec) {  // run and kRowChunk are whole vectors
    constexpr int V = Vec16<T>::kN;
    const Vec16<T>* vs = reinterpret_cast<const Vec16<T>*>(src);
    Vec16<T>* vd = reinterpret_cast<Vec16<T>*>(dst);
    for (int64_t i = begin / V + threadIdx.x; i < end / V; i += blockDim.x) {
      Vec16<T> w = vs[i];
#pragma unroll
      for (int k = 0; k < V; ++k)
        w.v[k] = f(w.v[k]);
      vd[i] = w;
    }
  } else {
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x)
      dst[i] = f(src[i]);
  }
}

template <class T> struct CenterFn {
  double mean;
  __device__ T operator()(T v) const { return T(double(v) - mean); }
};
template <class T> struct AffineFn {
  T a, b;
  bool scaled, biased;
  __device__ T operator()(T v) const {
    if (scaled) v *= a;
    if (biased) v += b;
    return v;
  }
};

template <class T>
__global__ void center_rows_kernel(T* out, const T* x, const double* sum, int64_t rows, int64_t run, int64_t parts,
                                   double inv_run, bool vec) {
  for (int64_t task = blockIdx.x; task < rows * parts; task += gridDim.x) {
    const int64_t row = task / parts;
    row_pass(out, x, row, task % parts, run, vec, CenterFn<T>{sum[row] * inv_run});
  }
}

// out[i] := scale[n, c / (C / Ks)] * t[i] + bias[n, c / (C / Kb)] for i =
// (n C + c) S + j; a coefficient's rows `rows_stride` apart (0: shared by
// every sample), undefined: 1 (scale) or 0 (bias).
struct Coef {
  const void* p = nullptr;
  int64_t row_stride = 0, col_stride = 0, per = 1;  // per: channels per coefficient
};
template <class T, class I> __global__ void affine_kernel(T* out, const T* t, Coef sc, Coef bi, I n, I S, I C) {
  const T* sp = static_cast<const T*>(sc.p);
  const T* bp = static_cast<const T*>(bi.p);
  for (I i = I(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += I(blockDim.x) * gridDim.x) {
    const I q = i / S, c = q % C, m = q / C;
    T v = t[i];
    if (sp) v *= sp[int64_t(m) * sc.row_stride + int64_t(c / I(sc.per)) * sc.col_stride];
    if (bp) v += bp[int64_t(m) * bi.row_stride + int64_t(c / I(bi.per)) * bi.col_stride];
    out[i] = v;
  }
}

// affine_kernel by rows of S (one row per (n, c)).
template <class T>
__global__ void affine_rows_kernel(T* out, const T* t, Coef sc, Coef bi, int64_t rows, int64_t S, int64_t C,
                                   int64_t parts, bool vec) {
  const T* sp = static_cast<const T*>(sc.p);
  const T* bp = static_cast<const T*>(bi.p);
  for (int64_t task = blockIdx.x; task < rows * parts; task += gridDim.x) {
    const int64_t row = task / parts, c = row % C, m = row / C;
    AffineFn<T> f{T(1), T(0), sp != nullptr, bp != nullptr};
    if (sp) f.a = sp[m * sc.row_stride + (c / sc.per) * sc.col_stride];
    if (bp) f.b = bp[m * bi.row_stride + (c / bi.per) * bi.col_stride];
    row_pass(out, t, row, task % parts, S, vec, f);
  }
}

// The launch of a row-wise pass over rows x run elements: its task count
// and whether it moves whole vectors.
struct RowLaunch {
  int64_t parts;
  unsigned grid;
  bool vec;
};
template <class T> RowLaunch row_launch(int64_t rows, int64_t run, const void* a, const void* b) {
  RowLaunch l;
  l.parts = (run + kRowChunk - 1) / kRowChunk;
  l.grid = unsigned(std::min<int64_t>(rows * l.parts, int64_t(1) << 20));
  l.vec =
      run % Vec16<T>::kN == 0 && reinterpret_cast<uintptr_t>(a) % 16 == 0 && reinterpret_cast<uintptr_t>(b) % 16 == 0;
  return l;
}

Coef coef_of(const Tensor& v, int64_t C) {
  Coef c;
  if (!v.defined()) return c;
  c.p = v.data_ptr();
  c.row_stride = v.size(0) == 1 ? 0 : v.stride(0);
  c.col_stride = v.stride(1);
  c.per = C / v.size(1);
  return c;
}

bool on() { return tg::detail::switched_on<tg::detail::OffSwitch::kGroupKernels>(); }

}  // namespace

bool group_sum(const Tensor& out, const Tensor& a, const Tensor& b, int64_t groups) {
  if (!on() || !dense_float(a) || (b.defined() && !dense_float(b))) return false;
  const int64_t rows = a.size(0) * groups, run = a.numel() / rows;
  DeviceGuard g(out.device().index());
  cudaStream_t s = stream_of(out);
  LaunchEncoder access(s);
  access.read(a);
  access.read(b);
  access.write(out);
  kernels::dispatch_floating(a.dtype(), "_group_sum", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>)
      row_sums<T, T>(static_cast<const T*>(a.data_ptr()), b.defined() ? static_cast<const T*>(b.data_ptr()) : nullptr,
                     rows, run, static_cast<T*>(out.data_ptr()), out, access, s);
  });
  return true;
}

bool group_center(const Tensor& out, const Tensor& x, int64_t groups) {
  if (!on() || !dense_float(x)) return false;
  const int64_t rows = x.size(0) * groups, run = x.numel() / rows, n = x.numel();
  DeviceGuard g(out.device().index());
  cudaStream_t s = stream_of(out);
  LaunchEncoder access(s);
  access.read(x);
  access.write(out);
  Tensor sums = tg::empty({rows}, TensorOptions().dtype(ScalarType::Float64).device(x.device()));
  access.write(sums);
  double* mp = static_cast<double*>(sums.data_ptr());
  const double inv = 1.0 / double(run);
  kernels::dispatch_floating(x.dtype(), "_group_center", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      const T* xp = static_cast<const T*>(x.data_ptr());
      row_sums<T, double>(xp, nullptr, rows, run, mp, x, access, s);
      T* op = static_cast<T*>(out.data_ptr());
      if (run >= kRowsFrom) {
        const RowLaunch l = row_launch<T>(rows, run, op, xp);
        center_rows_kernel<T><<<l.grid, kBlock, 0, s>>>(op, xp, mp, rows, run, l.parts, inv, l.vec);
      } else if (n <= int64_t(INT32_MAX))  // i + the grid stride stays below 2^32
        center_kernel<T, uint32_t><<<grid_for(n), kBlock, 0, s>>>(op, xp, mp, uint32_t(n), uint32_t(run), inv);
      else center_kernel<T, uint64_t><<<grid_for(n), kBlock, 0, s>>>(op, xp, mp, uint64_t(n), uint64_t(run), inv);
      TG_CUDA_CHECK(cudaGetLastError(), "_group_center");
    }
  });
  return true;
}

bool group_affine(const Tensor& out, const Tensor& t, const Tensor& scale, const Tensor& bias) {
  if (!on() || !dense_float(t)) return false;
  const int64_t n = t.numel(), C = t.size(1), S = n / (t.size(0) * C);
  DeviceGuard g(out.device().index());
  cudaStream_t s = stream_of(out);
  LaunchEncoder access(s);
  access.read(t);
  access.read(scale);
  access.read(bias);
  access.write(out);
  const Coef sc = coef_of(scale, C), bi = coef_of(bias, C);
  kernels::dispatch_floating(t.dtype(), "_group_affine", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      T* op = static_cast<T*>(out.data_ptr());
      const T* tp = static_cast<const T*>(t.data_ptr());
      if (S >= kRowsFrom) {
        const RowLaunch l = row_launch<T>(n / S, S, op, tp);
        affine_rows_kernel<T><<<l.grid, kBlock, 0, s>>>(op, tp, sc, bi, n / S, S, C, l.parts, l.vec);
      } else if (n <= int64_t(INT32_MAX))  // i + the grid stride stays below 2^32
        affine_kernel<T, uint32_t>
            <<<grid_for(n), kBlock, 0, s>>>(op, tp, sc, bi, uint32_t(n), uint32_t(S), uint32_t(C));
      else
        affine_kernel<T, uint64_t>
            <<<grid_for(n), kBlock, 0, s>>>(op, tp, sc, bi, uint64_t(n), uint64_t(S), uint64_t(C));
      TG_CUDA_CHECK(cudaGetLastError(), "_group_affine");
    }
  });
  return true;
}

}  // namespace tg::cuda
