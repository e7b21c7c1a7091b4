// CUDA backend: reductions (CUB block reduce; split across blocks when few
// outputs reduce many elements), index_select, gather, scatter_add (atomics),
// and Philox random numbers with the CPU's element mapping (tensor/random.h).
#include <cstdint>

#include <cub/block/block_reduce.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_segmented_sort.cuh>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include "tensor/element_math.h"
#include "tensor/kernels.h"
#include "tensor/op_util.h"
#include <tapegrad/tensor/ops.h>
#include <tapegrad/tensor/random.h>
#include <tapegrad/tensor/raw.h>

#include "loops.cuh"
#include "register.h"

namespace tg::cuda {
namespace {

using kernels::ReduceOp;
using kernels::wrap_add;

// ---- reductions ----------------------------------------------------------------------

struct Dims {  // a row-major walk over some dims of x (element strides)
  int n = 0;
  int64_t sizes[kMaxDims];
  int64_t strides[kMaxDims];
  __device__ int64_t offset(int64_t i) const {
    int64_t off = 0;
    for (int d = n - 1; d >= 0; --d) {
      off += (i % sizes[d]) * strides[d];
      i /= sizes[d];
    }
    return off;
  }
};

// A walk over one dim of `size` elements `stride` apart (the partials).
Dims walk(int64_t size, int64_t stride) {
  Dims d;
  d.n = 1;
  d.sizes[0] = size;
  d.strides[0] = stride;
  return d;
}

template <class T> struct Acc { using type = std::conditional_t<std::is_same_v<T, float>, double, T>; };

template <class A> __device__ A combine(ReduceOp op, A a, A b) {
  switch (op) {
    case ReduceOp::Sum: return a + b;
    case ReduceOp::Max:
      if constexpr (!std::is_integral_v<A>)
        if (a != a || b != b) return a != a ? a : b;
      return a > b ? a : b;
    case ReduceOp::Min:
      if constexpr (!std::is_integral_v<A>)
        if (a != a || b != b) return a != a ? a : b;
      return a < b ? a : b;
  }
  return a;
}

template <class A> struct Combine {
  ReduceOp op;
  __device__ A operator()(A a, A b) const { return combine(op, a, b); }
};

constexpr int kBlock = 256;

// One block per (output, split): partial[o * splits + s] over its share of
// the reduced elements (Out = A); with splits = 1 the result itself (Out = T,
// into the output: one kernel, no second pass).
// Every split's range [s * chunk, min(inner, (s + 1) * chunk)) is non-empty.
// Contiguous rows (`packed`: one reduced dim of stride 1, every row start
// and chunk 16-byte aligned) are read 16 bytes per load, two loads in
// flight: a bias gradient's [32, 327680] sum ran at a quarter of the
// memory bandwidth one element per load.
template <class T> struct alignas(16) Pack {
  static constexpr int N = sizeof(T) >= 16 ? 1 : int(16 / sizeof(T));
  T v[N];
};

template <class T, class A, class Out>
__global__ void reduce_block_kernel(const T* x, Dims kept, Dims red, int64_t inner, int64_t chunk, int64_t splits,
                                    ReduceOp op, Out* partial, bool packed = false) {
  using BlockReduce = cub::BlockReduce<A, kBlock>;
  __shared__ typename BlockReduce::TempStorage tmp;
  int64_t o = blockIdx.x, s = blockIdx.y;
  int64_t base = kept.offset(o);
  int64_t begin = s * chunk, end = begin + chunk < inner ? begin + chunk : inner;
  bool any = false;
  A acc{};
  int64_t r = begin + threadIdx.x;
  if (packed) {  // begin is a multiple of N; the tail past the last whole pack below
    constexpr int N = Pack<T>::N;
    const Pack<T>* p = reinterpret_cast<const Pack<T>*>(x + base + begin);
    const int64_t packs = (end - begin) / N;
    int64_t q = threadIdx.x;
    auto add = [&](const Pack<T>& v) {
      for (int i = 0; i < N; ++i) {
        acc = any ? combine(op, acc, A(v.v[i])) : A(v.v[i]);
        any = true;
      }
    };
    for (; q + kBlock < packs; q += 2 * kBlock) {
      const Pack<T> v0 = p[q], v1 = p[q + kBlock];
      add(v0);
      add(v1);
    }
    if (q < packs) add(p[q]);
    r = begin + packs * N + threadIdx.x;
  } else if (red.n == 1) {  // one reduced dim (a row sum): four loads in flight, combined in order
    const T* p = x + base;
    const int64_t st = red.strides[0];
    if (r < end) {
      acc = A(p[r * st]);
      any = true;
      r += kBlock;
    }
    for (; r + 3 * kBlock < end; r += 4 * kBlock) {
      const A v0 = A(p[r * st]), v1 = A(p[(r + kBlock) * st]), v2 = A(p[(r + 2 * kBlock) * st]),
              v3 = A(p[(r + 3 * kBlock) * st]);
      acc = combine(op, combine(op, combine(op, combine(op, acc, v0), v1), v2), v3);
    }
  }
  for (; r < end; r += kBlock) {
    A v = A(x[base + red.offset(r)]);
    acc = any ? combine(op, acc, v) : v;
    any = true;
  }
  // Threads without elements contribute 0 to a sum and the range's first
  // element to max/min (neutral for both).
  if (!any) acc = op == ReduceOp::Sum ? A(0) : A(x[base + red.offset(begin)]);
  A total = BlockReduce(tmp).Reduce(acc, Combine<A>{op});
  if (threadIdx.x == 0) partial[o * splits + s] = Out(total);
}

// Outputs contiguous in x (the innermost kept dim has stride 1, the reduced
// dims are outer: a bias gradient, [B, W] summed over B): a warp covers 32
// adjacent outputs, so its loads are coalesced; the block's kColRows rows of
// threads share the split's reduced range and combine in shared memory.
// Writes out[s * outer + o] (with one split: the result itself). One
// reduced dim (the common case) walks by its stride, four loads in flight.
constexpr int kColRows = 8;
template <class T, class A, class Out>
__global__ void reduce_columns_kernel(const T* x, Dims kept, Dims red, int64_t outer, int64_t inner, int64_t chunk,
                                      ReduceOp op, Out* out) {
  __shared__ A sh[kColRows][33];
  const int64_t o = int64_t(blockIdx.x) * 32 + threadIdx.x, s = blockIdx.y;
  const int64_t begin = s * chunk, end = begin + chunk < inner ? begin + chunk : inner;
  A acc{};
  if (o < outer) {
    const T* p = x + kept.offset(o);
    // Rows past the range start from the range's first element: neutral for
    // max/min; a sum starts from 0.
    acc = op == ReduceOp::Sum ? A(0) : A(p[red.offset(begin)]);
    int64_t r = begin + threadIdx.y;
    if (red.n == 1) {
      const int64_t st = red.strides[0];
      for (; r + 3 * kColRows < end; r += 4 * kColRows) {
        const A v0 = A(p[r * st]), v1 = A(p[(r + kColRows) * st]), v2 = A(p[(r + 2 * kColRows) * st]),
                v3 = A(p[(r + 3 * kColRows) * st]);
        acc = combine(op, combine(op, acc, combine(op, v0, v1)), combine(op, v2, v3));
      }
      for (; r < end; r += kColRows)
        acc = combine(op, acc, A(p[r * st]));
    } else {
      for (; r < end; r += kColRows)
        acc = combine(op, acc, A(p[red.offset(r)]));
    }
  }
  sh[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && o < outer) {
    for (int y = 1; y < kColRows; ++y)
      acc = combine(op, acc, sh[y][threadIdx.x]);
    out[s * outer + o] = Out(acc);
  }
}

// One thread per output over `inner` elements (few elements per output).
template <class T, class A, class In>
__global__ void reduce_thread_kernel(const In* x, Dims kept, Dims red, int64_t outer, int64_t inner, ReduceOp op,
                                     T* out) {
  int64_t stride = int64_t(blockDim.x) * gridDim.x;
  for (int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; o < outer; o += stride) {
    int64_t base = kept.offset(o);
    A acc = inner > 0 ? A(x[base + red.offset(0)]) : A(0);
    for (int64_t r = 1; r < inner; ++r)
      acc = combine(op, acc, A(x[base + red.offset(r)]));
    out[o] = T(acc);
  }
}

// Merges each dim into the one before it in the walk when together they are
// one run of memory (stride[d - 1] == size[d] * stride[d]): the same
// elements in the same row-major order, so the same results. A group norm's
// [N, G, C/G, HW] reduced over its last two dims becomes one dense row,
// read 16 bytes per load instead of through a division per element.
void merge_dense(Dims& d) {
  int n = 0;
  for (int i = 0; i < d.n; ++i) {
    if (n > 0 && d.strides[n - 1] == d.sizes[i] * d.strides[i]) {
      d.sizes[n - 1] *= d.sizes[i];
      d.strides[n - 1] = d.strides[i];
      continue;
    }
    d.sizes[n] = d.sizes[i];
    d.strides[n] = d.strides[i];
    ++n;
  }
  d.n = n;
}

void reduce_kernel(ReduceOp op, const Tensor& out, const Tensor& x) {
  int64_t outer = out.numel();
  if (outer == 0) return;
  Dims kept, red;
  int64_t inner = 1;
  for (int64_t d = 0; d < x.dim(); ++d) {
    int64_t xs = x.sizes()[size_t(d)];
    Dims& dims = out.sizes()[size_t(d)] == 1 && xs != 1 ? red : kept;
    if (xs == 1) continue;
    TG_CHECK(dims.n < kMaxDims, "reduce: CUDA reductions support at most ", kMaxDims, " dims");
    dims.sizes[dims.n] = xs;
    dims.strides[dims.n] = x.strides()[size_t(d)];
    ++dims.n;
    if (&dims == &red) inner *= xs;
  }
  merge_dense(kept);
  merge_dense(red);
  DeviceGuard g(out.device().index());
  cudaStream_t s = stream_of(out);
  LaunchEncoder access(s);  // the partials too
  access.read(x);
  access.write(out);
  dispatch_compute(out.dtype(), "reduce", [&](auto tag) {
    using T = decltype(tag);
    using A = typename Acc<T>::type;
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* op_ = static_cast<T*>(out.data_ptr());
    if (inner < 128) {
      int64_t blocks = std::min<int64_t>((outer + kBlock - 1) / kBlock, 65536);
      reduce_thread_kernel<T, A, T><<<unsigned(blocks), kBlock, 0, s>>>(xp, kept, red, outer, inner, op, op_);
      TG_CUDA_CHECK(cudaGetLastError(), "reduce");
      return;
    }
    // Outputs contiguous: 32 per block, the reduced range split so that
    // there are enough blocks and each thread sums >= 16 elements.
    const bool columns = kept.n > 0 && kept.strides[kept.n - 1] == 1;
    const int64_t col_blocks = (outer + 31) / 32;
    int64_t splits = 1;
    if (columns)
      splits = std::max<int64_t>(1, std::min<int64_t>((512 + col_blocks - 1) / col_blocks, inner / (kColRows * 16)));
    else if (outer < 1024)  // few outputs: split each reduction across blocks, then combine partials
      splits = std::min<int64_t>((inner + kBlock * 16 - 1) / (kBlock * 16), 1024);
    splits = std::min<int64_t>(splits, 65535);
    int64_t chunk = (inner + splits - 1) / splits;
    // Contiguous rows 16-byte aligned: chunks a whole number of packs.
    constexpr int N = Pack<T>::N;
    bool packed = !columns && red.n == 1 && red.strides[0] == 1 && N > 1 && reinterpret_cast<uintptr_t>(xp) % 16 == 0;
    for (int d = 0; packed && d < kept.n; ++d)
      packed = kept.strides[d] % N == 0;
    if (packed) chunk = (chunk + N - 1) / N * N;
    splits = (inner + chunk - 1) / chunk;
    TG_CHECK(outer <= int64_t(INT32_MAX), "reduce: too many outputs for one CUDA launch");
    if (splits == 1) {  // the blocks write the outputs: a single pass
      if (columns)
        reduce_columns_kernel<T, A, T><<<dim3{unsigned(col_blocks), 1, 1}, dim3{32, kColRows, 1}, 0, s>>>(
            xp, kept, red, outer, inner, chunk, op, op_);
      else
        reduce_block_kernel<T, A, T>
            <<<dim3{unsigned(outer), 1, 1}, kBlock, 0, s>>>(xp, kept, red, inner, chunk, 1, op, op_, packed);
      TG_CUDA_CHECK(cudaGetLastError(), "reduce");
      return;
    }
    Tensor partial =
        tg::empty({outer, splits}, TensorOptions().dtype(kernels::scalar_type_of<A>()).device(out.device()));
    A* pp = static_cast<A*>(partial.data_ptr());
    access.write(partial);
    if (columns) {  // partials [splits, outer]: a column reduction again, one split
      reduce_columns_kernel<T, A, A><<<dim3{unsigned(col_blocks), unsigned(splits), 1}, dim3{32, kColRows, 1}, 0, s>>>(
          xp, kept, red, outer, inner, chunk, op, pp);
      TG_CUDA_CHECK(cudaGetLastError(), "reduce");
      reduce_columns_kernel<A, A, T><<<dim3{unsigned(col_blocks), 1, 1}, dim3{32, kColRows, 1}, 0, s>>>(
          pp, walk(outer, 1), walk(splits, outer), outer, splits, splits, op, op_);
      TG_CUDA_CHECK(cudaGetLastError(), "reduce");
      return;
    }
    reduce_block_kernel<T, A, A><<<dim3{unsigned(outer), unsigned(splits), 1}, kBlock, 0, s>>>(
        xp, kept, red, inner, chunk, splits, op, pp, packed);
    TG_CUDA_CHECK(cudaGetLastError(), "reduce");
    // The partials (outer < 1024 here): a block per output. One thread per
    // output walked up to 1024 partials one dependent load at a time
    // (0.3 ms for a full sum on an H200).
    reduce_block_kernel<A, A, T><<<dim3{unsigned(outer), 1, 1}, kBlock, 0, s>>>(
        pp, walk(outer, splits), walk(splits, 1), splits, splits, 1, op, op_);
    TG_CUDA_CHECK(cudaGetLastError(), "reduce");
  });
}

// ---- indexing --------------------------------------------------------------------------

// An index out of range (cuda/runtime/check.h, detail::BadIndex): the element is
// skipped and the host told at its next synchronization.
__device__ inline bool index_ok(int64_t j, int64_t size, detail::BadIndex* bad, int op) {
  if (j >= 0 && j < size) return true;
  bad->value = j;
  bad->size = size;
  __threadfence_system();
  bad->op = op;
  return false;
}

template <class U>
__global__ void index_select_k(U* out, const U* x, const int64_t* idx, int64_t istride, int64_t total, int64_t m,
                               int64_t n, int64_t inner, detail::BadIndex* bad) {
  int64_t stride = int64_t(blockDim.x) * gridDim.x;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += stride) {
    int64_t k = t % inner, j = (t / inner) % m, o = t / (inner * m);
    const int64_t i = idx[j * istride];
    out[t] = index_ok(i, n, bad, detail::kBadIndexSelect) ? x[(o * n + i) * inner + k] : U{};
  }
}

void index_select_kernel(const Tensor& out, const Tensor& x, const Tensor& index) {
  int64_t total = out.numel();
  if (total == 0) return;
  TG_CHECK(index.is_cuda(), "index_select: index must be on ", x.device(), ", got ", index.device());
  DeviceGuard g(out.device().index());
  int64_t outer = x.sizes()[0], n = x.sizes()[1], inner = x.sizes()[2], m = index.numel();
  (void)outer;
  int64_t istride = index.dim() == 0 ? 0 : index.strides()[0];
  int64_t blocks = std::min<int64_t>((total + kBlock - 1) / kBlock, 65536);
  const int64_t* ip = static_cast<const int64_t*>(index.data_ptr());
  detail::BadIndex* bad = detail::bad_index_record();
  LaunchEncoder access(stream_of(out));  // x is read by index, anywhere in its storage
  access.write(out);
  access.read(index);
  access.add(fusion::storage_of(x, false));
  auto run = [&](auto tag) {
    using U = decltype(tag);
    index_select_k<U><<<unsigned(blocks), kBlock, 0, stream_of(out)>>>(
        static_cast<U*>(out.data_ptr()), static_cast<const U*>(x.data_ptr()), ip, istride, total, m, n, inner, bad);
  };
  dispatch_bytes(element_size(out.dtype()), run);
  TG_CUDA_CHECK(cudaGetLastError(), "index_select");
}

template <class U> struct GatherFn {
  int64_t step;  // bytes per index step along dim
  int64_t size;  // x's size along dim
  detail::BadIndex* bad;
  __device__ void operator()(char* const* p, const int64_t* off) const {
    int64_t j = *reinterpret_cast<const int64_t*>(p[1] + off[1]);
    *reinterpret_cast<U*>(p[0] + off[0]) =
        index_ok(j, size, bad, detail::kBadGather) ? *reinterpret_cast<const U*>(p[2] + off[2] + j * step) : U{};
  }
};

void gather_kernel(const Tensor& out, const Tensor& x, const Tensor& index, int64_t dim_size, int64_t dim_stride) {
  Tensor ops[3] = {out, index, x};
  int64_t esz = int64_t(element_size(out.dtype()));
  LaunchEncoder access(stream_of(out));  // x is read by index, anywhere in its storage
  access.add(fusion::storage_of(x, false));
  dispatch_bytes(size_t(esz), [&](auto u) {
    launch(ops, 3, "gather", GatherFn<decltype(u)>{dim_stride * esz, dim_size, detail::bad_index_record()});
  });
}

__global__ void report_bad_indices_k(const int64_t* idx, int64_t istride, int64_t n, int64_t size,
                                     detail::BadIndex* bad) {
  int64_t stride = int64_t(blockDim.x) * gridDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    (void)index_ok(idx[i * istride], size, bad, detail::kBadSparseIndex);
}

void report_bad_indices_kernel(const Tensor& index, int64_t size) {
  const int64_t n = index.numel();
  if (n == 0) return;
  DeviceGuard g(index.device().index());
  LaunchEncoder access(stream_of(index));  // reads the index; writes only host memory
  access.read(index);
  const int64_t blocks = std::min<int64_t>((n + kBlock - 1) / kBlock, 65536);
  report_bad_indices_k<<<unsigned(blocks), kBlock, 0, stream_of(index)>>>(static_cast<const int64_t*>(index.data_ptr()),
                                                                          index.dim() == 0 ? 0 : index.strides()[0], n,
                                                                          size, detail::bad_index_record());
  TG_CUDA_CHECK(cudaGetLastError(), "sparse tensor indices");
}

__device__ inline void atomic_add(float* p, float v) { atomicAdd(p, v); }
__device__ inline void atomic_add(double* p, double v) { atomicAdd(p, v); }
__device__ inline void atomic_add(int64_t* p, int64_t v) {
  atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
}

template <class T> struct ScatterAddFn {
  int64_t step;
  int64_t size;  // out's size along dim
  detail::BadIndex* bad;
  __device__ void operator()(char* const* p, const int64_t* off) const {
    int64_t j = *reinterpret_cast<const int64_t*>(p[1] + off[1]);
    if (!index_ok(j, size, bad, detail::kBadScatterAdd)) return;
    atomic_add(reinterpret_cast<T*>(p[0] + off[0] + j * step), *reinterpret_cast<const T*>(p[2] + off[2]));
  }
};

void scatter_add_kernel(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  IntList st = out.strides();
  st[size_t(dim)] = 0;
  Tensor target = raw::as_strided(out, index.sizes(), st);
  Tensor src_view = raw::as_strided(src, index.sizes(), src.strides());
  Tensor ops[3] = {target, index, src_view};
  LaunchEncoder access(stream_of(out));  // out is written by index, anywhere in its storage
  access.add(fusion::storage_of(out, true));
  dispatch_compute(out.dtype(), "scatter_add", [&](auto tag) {
    using T = decltype(tag);
    int64_t step = out.strides()[size_t(dim)] * int64_t(sizeof(T));
    launch(ops, 3, "scatter_add", ScatterAddFn<T>{step, out.sizes()[size_t(dim)], detail::bad_index_record()});
  });
}

// ---- random --------------------------------------------------------------------------------

__device__ inline double box_muller(PhiloxBlock b) {
  double u1 = philox_u53(b.w[0], b.w[1]), u2 = philox_u53(b.w[2], b.w[3]);
  return ::sqrt(-2.0 * ::log1p(-u1)) * ::cos(2.0 * 3.14159265358979323846 * u2);
}

template <class T, bool kNormal>
__global__ void random_k(T* out, int64_t n, uint64_t seed, uint64_t offset, const int64_t* state) {
  if (state) {  // a captured draw: where the replay moved the generator
    seed = uint64_t(state[0]);
    offset += uint64_t(state[1]);
  }
  int64_t stride = int64_t(blockDim.x) * gridDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    PhiloxBlock b = philox4x32_10(seed, offset + uint64_t(i));
    if constexpr (kNormal) out[i] = T(box_muller(b));
    else if constexpr (std::is_same_v<T, double>) out[i] = philox_u53(b.w[0], b.w[1]);
    else out[i] = philox_u24(b.w[0]);
  }
}

template <bool kNormal> void random_kernel(const Tensor& out, uint64_t seed, uint64_t offset, const int64_t* state) {
  int64_t n = out.numel();
  if (n == 0) return;
  DeviceGuard g(out.device().index());
  int64_t blocks = std::min<int64_t>((n + kBlock - 1) / kBlock, 65536);
  LaunchEncoder access(stream_of(out));
  access.write(out);
  if (state) access.add({reinterpret_cast<const char*>(state), 2 * int64_t(sizeof(int64_t)), false});
  dispatch_floating(out.dtype(), kNormal ? "randn" : "rand", [&](auto tag) {
    using T = decltype(tag);
    random_k<T, kNormal>
        <<<unsigned(blocks), kBlock, 0, stream_of(out)>>>(static_cast<T*>(out.data_ptr()), n, seed, offset, state);
  });
  TG_CUDA_CHECK(cudaGetLastError(), kNormal ? "randn" : "rand");
}

// A floating key as an Int64 of the same order (CUB's segmented sort
// compares keys directly in its small-segment path, where NaN would break
// the order): the bits, negatives with their magnitude bits flipped; -0 as
// +0, NaN above +inf.
template <class T> __global__ void order_key_k(const T* x, int64_t* out, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const double v = double(x[i]);
  int64_t b = v != v ? INT64_MAX : __double_as_longlong(v == 0 ? 0.0 : v);
  out[i] = b >= 0 ? b : b ^ INT64_MAX;
}

// offsets[r] = r * n (r <= rows) and pos[r, c] = c.
__global__ void sort_positions_k(int64_t* offsets, int64_t* pos, int64_t rows, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < rows * n) pos[i] = i % n;
  if (i <= rows) offsets[i] = i * n;
}

// Each row's stable sorting permutation: one CUB segmented sort of (key,
// position) pairs over Int64 keys.
void argsort_kernel(const Tensor& out, const Tensor& x, bool descending) {
  const int64_t rows = x.size(0), n = x.size(1), total = rows * n;
  TG_CHECK(total < (int64_t(1) << 31), "argsort: ", total, " elements is more than one CUDA sort takes (2^31)");
  const Device dev = x.device();
  DeviceGuard g(dev.index());
  // The segments' offsets and each row's positions, made on the device (a
  // host arange copied over would refuse a CUDA graph capture).
  Tensor offsets = tg::detail::new_empty({rows + 1}, kInt64, dev);
  Tensor pos = tg::detail::new_empty({rows, n}, kInt64, dev);
  Tensor keys = x.dtype() == kInt64 ? x : tg::detail::new_empty(x.sizes(), kInt64, dev);
  Tensor sorted_keys = tg::detail::new_empty(x.sizes(), kInt64, dev);
  cudaStream_t s = stream_of(out);
  LaunchEncoder access(s);  // the sort's temporary storage too
  access.read(x);
  access.write(offsets);
  access.write(pos);
  sort_positions_k<<<unsigned((std::max(total, rows + 1) + 255) / 256), 256, 0, s>>>(offsets.data_ptr<int64_t>(),
                                                                                     pos.data_ptr<int64_t>(), rows, n);
  TG_CUDA_CHECK(cudaGetLastError(), "argsort");
  if (x.dtype() != kInt64) access.write(keys);  // x converted
  access.write(sorted_keys);
  access.write(out);
  if (x.dtype() != kInt64) {
    const unsigned blocks = unsigned((total + 255) / 256);
    dispatch_floating(x.dtype(), "argsort", [&](auto tag) {
      using T = decltype(tag);
      order_key_k<<<blocks, 256, 0, s>>>(static_cast<const T*>(x.data_ptr()), keys.data_ptr<int64_t>(), total);
    });
    TG_CUDA_CHECK(cudaGetLastError(), "argsort");
  }
  const int64_t* begin = offsets.data_ptr<int64_t>();
  auto run = [&](void* tmp, size_t& bytes) {
    const int64_t* k = keys.data_ptr<int64_t>();
    int64_t* ko = sorted_keys.data_ptr<int64_t>();
    const int64_t* v = pos.data_ptr<int64_t>();
    int64_t* vo = out.data_ptr<int64_t>();
    return descending ? cub::DeviceSegmentedSort::StableSortPairsDescending(tmp, bytes, k, ko, v, vo, int(total),
                                                                            int(rows), begin, begin + 1, s)
                      : cub::DeviceSegmentedSort::StableSortPairs(tmp, bytes, k, ko, v, vo, int(total), int(rows),
                                                                  begin, begin + 1, s);
  };
  size_t bytes = 0;
  TG_CUDA_CHECK(run(nullptr, bytes), "argsort");
  // Never null: CUB takes a null temporary storage for a size query.
  void* tmp = access.workspace(std::max<size_t>(bytes, 1));
  TG_CUDA_CHECK(run(tmp, bytes), "argsort");
}

// ---- cumulative sum ---------------------------------------------------------------------

template <class A> struct ScanAdd {  // Int64 wraps
  __host__ __device__ A operator()(A a, A b) const { return wrap_add(a, b); }
};
template <class T, class A> struct AsAcc {  // element i in the accumulator type
  const T* x;
  __host__ __device__ A operator()(int64_t i) const { return A(x[i]); }
};
struct RowOf {  // the row of element i: the scan restarts at each
  int64_t n;
  __host__ __device__ int64_t operator()(int64_t i) const { return i / n; }
};

// One thread per (outer, inner) column carries its sum down the dim;
// neighbouring threads read neighbouring columns.
template <class T, class A>
__global__ void cumsum_columns_k(const T* x, T* out, int64_t outer, int64_t n, int64_t inner) {
  const int64_t cols = outer * inner;
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < cols; c += int64_t(gridDim.x) * blockDim.x) {
    const int64_t base = (c / inner) * n * inner + c % inner;
    A acc = 0;
    for (int64_t i = 0; i < n; ++i) {
      acc = wrap_add(acc, A(x[base + i * inner]));
      out[base + i * inner] = T(acc);
    }
  }
}

// Rows (inner 1): one device-wide CUB scan by key (the row) over every
// element. Many columns: a thread each. Few long columns: transposed to
// rows and back.
void cumsum_kernel(const Tensor& out, const Tensor& x) {
  const int64_t outer = x.sizes()[0], n = x.sizes()[1], inner = x.sizes()[2], total = x.numel();
  if (inner > 1 && outer * inner <= 2048 && n >= 1024) {
    Tensor xt = raw::contiguous(raw::transpose(x, 1, 2));
    Tensor ot = tg::detail::new_empty(xt.sizes(), xt.dtype(), xt.device());
    cumsum_kernel(raw::view(ot, {outer * inner, n, 1}), raw::view(xt, {outer * inner, n, 1}));
    raw::copy_(out, raw::transpose(ot, 1, 2));
    return;
  }
  DeviceGuard g(out.device().index());
  cudaStream_t s = stream_of(out);
  LaunchEncoder access(s);  // the scan's temporary storage too
  access.read(x);
  access.write(out);
  dispatch_compute(x.dtype(), "cumsum", [&](auto tag) {
    using T = decltype(tag);
    using A = typename Acc<T>::type;
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* op = static_cast<T*>(out.data_ptr());
    if (inner > 1) {
      const int64_t blocks = std::min<int64_t>((outer * inner + kBlock - 1) / kBlock, 65536);
      cumsum_columns_k<T, A><<<unsigned(blocks), kBlock, 0, s>>>(xp, op, outer, n, inner);
      TG_CUDA_CHECK(cudaGetLastError(), "cumsum");
      return;
    }
    auto keys = thrust::make_transform_iterator(thrust::counting_iterator<int64_t>(0), RowOf{n});
    auto values = thrust::make_transform_iterator(thrust::counting_iterator<int64_t>(0), AsAcc<T, A>{xp});
    auto run = [&](void* tmp, size_t& bytes) {
      return cub::DeviceScan::InclusiveScanByKey(tmp, bytes, keys, values, op, ScanAdd<A>{}, total,
                                                 ::cuda::std::equal_to<>{}, s);
    };
    size_t bytes = 0;
    TG_CUDA_CHECK(run(nullptr, bytes), "cumsum");
    void* tmp = access.workspace(std::max<size_t>(bytes, 1));  // never null: null asks for the size
    TG_CUDA_CHECK(run(tmp, bytes), "cumsum");
  });
}

}  // namespace

void register_reduce_index_random(kernels::Backend& b) {
  b.argsort = argsort_kernel;
  b.cumsum = cumsum_kernel;
  b.reduce = reduce_kernel;
  b.index_select = index_select_kernel;
  b.gather = gather_kernel;
  b.report_bad_indices = report_bad_indices_kernel;
  b.scatter_add = scatter_add_kernel;
  b.uniform = [](const Tensor& out, uint64_t seed, uint64_t offset) {
    random_kernel<false>(out, seed, offset, nullptr);
  };
  b.normal = [](const Tensor& out, uint64_t seed, uint64_t offset) { random_kernel<true>(out, seed, offset, nullptr); };
  b.random_from_state = [](const Tensor& out, bool normal, const int64_t* state, uint64_t offset) {
    if (normal) random_kernel<true>(out, 0, offset, state);
    else random_kernel<false>(out, 0, offset, state);
  };
}

}  // namespace tg::cuda
