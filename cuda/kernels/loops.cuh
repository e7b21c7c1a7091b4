// Internal: the CUDA loop machinery shared by the kernel files: one offset
// calculator (Indexer) for every strided, broadcast or contiguous operand
// set, a grid-stride launcher on the current stream, and dtype dispatch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>

#include "cuda/runtime/check.h"
#include "cuda/kernels/dtypes.cuh"
#include "cuda/kernels/fused_steps.cuh"
#include "cuda/launch.h"
#include <tapegrad/cuda/stream.h>
#include "tensor/kernels.h"
#include <tapegrad/tensor/tensor.h>

namespace tg::cuda {

// ---- programmatic dependent launch ---------------------------------------------------
// On Hopper and later, the elementwise kernels are launched with programmatic
// stream serialization: the next kernel's launch overlaps the tail of the one
// before it, and every such kernel waits (griddepcontrol.wait) for its
// predecessors' completion and memory before it touches memory. The order of
// results is the stream's; what is saved is the launch gap between dependent
// tiny kernels (in a CUDA graph too: capture records programmatic edges).
// Every kernel launched through launch_pdl must call wait_for_predecessors()
// before its first memory access.
__device__ __forceinline__ void wait_for_predecessors() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Whether `device` supports programmatic dependent launch (compute
// capability 9.0 or later); TG_CUDA_PDL=0 turns it off.
bool pdl_enabled(int device);

template <class... KArgs, class... Args>
void launch_pdl(void (*kernel)(KArgs...), dim3 blocks, dim3 threads, cudaStream_t s, int device, const char* op,
                Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = blocks;
  cfg.blockDim = threads;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl_enabled(device) ? 1 : 0;
  TG_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...), op);
}

constexpr int kMaxDims = 16;
constexpr int kMaxOps = 4;

// Byte offsets of every operand for a linear (row-major) element index.
struct Indexer {
  int ndim = 0;
  int nops = 0;
  int64_t sizes[kMaxDims];
  int64_t strides[kMaxOps][kMaxDims];  // bytes
  int64_t elem[kMaxOps];               // element sizes
  char* ptrs[kMaxOps];
  // At most one dim left and every operand either dense along it or
  // broadcast (stride 0): the vectorized path may apply. Also two dims with
  // the output dense and every input dense, broadcast, or dense along the
  // inner dim and broadcast along the outer ("periodic": a batch of
  // tangents against its primal, a bias against rows).
  // Or three dims with the output and every input dense, broadcast, or
  // varying along the middle dim only (a per-channel bias against
  // [batch, channels, points]: "divided").
  bool linear = true;
  bool broadcast[kMaxOps];
  int64_t period[kMaxOps];  // elements; 0: not periodic
  int64_t divide[kMaxOps];  // elements; > 1: element (i / divide) % period

  // Loops over operands run to kMaxOps with a guard, so that `off` is
  // indexed by constants after unrolling and stays in registers. I is
  // uint32_t for element counts below 2^32 (32-bit division is several times
  // cheaper on the GPU), else int64_t.
  template <class I> __device__ void offsets(I i, int64_t* off) const {
#pragma unroll
    for (int o = 0; o < kMaxOps; ++o)
      off[o] = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      const I size = I(sizes[d]);
      const I idx = i % size;
      i /= size;
#pragma unroll
      for (int o = 0; o < kMaxOps; ++o)
        if (o < nops) off[o] += int64_t(idx) * strides[o][d];
    }
  }
};

// ops[0] is the output; inputs have the output's sizes (expanded views).
inline Indexer make_indexer(const Tensor* ops, int nops, const char* op) {
  Indexer ix;
  ix.nops = nops;
  const Tensor& out = ops[0];
  int nd = int(out.dim());
  // Drop size-1 dims, then merge dim d into d-1 when every operand allows.
  int64_t sz[64];
  int64_t st[kMaxOps][64];
  int n = 0;
  for (int d = 0; d < nd; ++d) {
    if (out.sizes()[size_t(d)] == 1) continue;
    sz[n] = out.sizes()[size_t(d)];
    for (int o = 0; o < nops; ++o)
      st[o][n] = ops[o].strides()[size_t(d)] * int64_t(element_size(ops[o].dtype()));
    if (n > 0) {
      bool merge = true;
      for (int o = 0; o < nops; ++o)
        merge &= st[o][n - 1] == st[o][n] * sz[n];
      if (merge) {
        sz[n - 1] *= sz[n];
        for (int o = 0; o < nops; ++o)
          st[o][n - 1] = st[o][n];
        continue;
      }
    }
    ++n;
  }
  TG_CHECK(n <= kMaxDims, op, ": CUDA kernels support at most ", kMaxDims, " non-mergeable dims, got ", n, " (shape ",
           shape_str(out.sizes()), ")");
  ix.ndim = n;
  for (int o = 0; o < nops; ++o) {
    ix.ptrs[o] = static_cast<char*>(ops[o].data_ptr());
    ix.elem[o] = int64_t(element_size(ops[o].dtype()));
  }
  for (int d = 0; d < n; ++d) {
    ix.sizes[d] = sz[d];
    for (int o = 0; o < nops; ++o)
      ix.strides[o][d] = st[o][d];
  }
  ix.linear = n <= 1;
  for (int o = 0; o < nops; ++o) {
    ix.period[o] = 0;
    ix.divide[o] = 1;
    ix.broadcast[o] = n == 1 && st[o][0] == 0 && o > 0;
    ix.linear &= n == 0 || st[o][0] == ix.elem[o] || ix.broadcast[o];
  }
  if (n == 2 && st[0][1] == ix.elem[0] && st[0][0] == sz[1] * ix.elem[0]) {
    bool ok = true;
    for (int o = 1; o < nops; ++o) {
      const bool dense = st[o][1] == ix.elem[o] && st[o][0] == sz[1] * ix.elem[o];
      const bool periodic = st[o][0] == 0 && st[o][1] == ix.elem[o];
      const bool scalar = st[o][0] == 0 && st[o][1] == 0;
      ok &= dense || periodic || scalar;
    }
    if (ok) {
      ix.linear = true;
      for (int o = 1; o < nops; ++o) {
        ix.broadcast[o] = st[o][0] == 0 && st[o][1] == 0;
        ix.period[o] = st[o][0] == 0 && st[o][1] == ix.elem[o] ? sz[1] : 0;
      }
    }
  }
  // Divided: [outer, channels, inner] (or [channels, inner]) with the output
  // dense and each input dense, a scalar, one value per channel, or one row
  // of inner values for every channel (periodic: with a per-channel one, an
  // outer product, [C, 1] * [1, N]).
  const int c = n - 2;  // the channel dim
  if (!ix.linear && (n == 2 || n == 3) && st[0][n - 1] == ix.elem[0] && st[0][c] == sz[n - 1] * ix.elem[0] &&
      (n == 2 || st[0][0] == sz[1] * sz[2] * ix.elem[0])) {
    bool ok = true, any = false;
    for (int o = 1; o < nops; ++o) {
      const bool dense = st[o][n - 1] == ix.elem[o] && st[o][c] == sz[n - 1] * ix.elem[o] &&
                         (n == 2 || st[o][0] == sz[1] * sz[2] * ix.elem[o]);
      const bool scalar = st[o][n - 1] == 0 && st[o][c] == 0 && (n == 2 || st[o][0] == 0);
      const bool channel = st[o][n - 1] == 0 && st[o][c] == ix.elem[o] && (n == 2 || st[o][0] == 0);
      const bool row = st[o][n - 1] == ix.elem[o] && st[o][c] == 0 && (n == 2 || st[o][0] == 0);
      ok &= dense || scalar || channel || row;
      any |= channel;
    }
    if (ok && any) {
      ix.linear = true;
      for (int o = 1; o < nops; ++o) {
        ix.broadcast[o] = st[o][n - 1] == 0 && st[o][c] == 0;
        if (st[o][n - 1] == 0 && st[o][c] == ix.elem[o]) {
          ix.period[o] = sz[c];
          ix.divide[o] = sz[n - 1];
        } else if (st[o][n - 1] == ix.elem[o] && st[o][c] == 0) {
          ix.period[o] = sz[n - 1];
        }
      }
    }
  }
  return ix;
}

// ---- the linear and vectorized path ------------------------------------------------
// Operands that are dense along one dim (or broadcast scalars) take a kernel
// whose arguments are a few pointers (launching the Indexer's ~700 bytes of
// arguments costs the host and the device time that tiny tensors feel).
// A functor whose operands all have one element size E declares
// `static constexpr int kElemSize = E;`. When its dense operands are also
// 16-byte aligned, each thread moves 16 bytes per operand with one load or
// store: 16 / E elements, run through the functor in registers.
struct LinearArgs {
  char* ptrs[kMaxOps];
  int64_t elem[kMaxOps];
  int nops;
  bool broadcast[kMaxOps];
  int64_t period[kMaxOps];  // elements (0: not periodic): operand o's element i is (i / divide) % period
  int64_t divide[kMaxOps];  // 1, or > 1 (divided: one value per run of `divide` elements)
  bool divided;             // some operand is
  bool gather[kMaxOps];     // periodic, gathered element by element into the vector (a period of
                            // other than whole vectors, or a misaligned one)
  bool aligned;             // every dense operand 16-byte aligned (E > 0 only)
};

// i % p, in 32 bits when both fit (several times cheaper on the GPU).
__device__ inline int64_t wrap_index(int64_t i, int64_t p) {
  return (uint64_t(i) | uint64_t(p)) <= UINT32_MAX ? int64_t(uint32_t(i) % uint32_t(p)) : i % p;
}

// Operand o's element for index i of a linear launch.
__device__ inline int64_t operand_index(const LinearArgs& a, int o, int64_t i) {
  if (a.period[o] == 0) return i;
  if (a.divide[o] > 1)
    i = (uint64_t(i) | uint64_t(a.divide[o])) <= UINT32_MAX ? int64_t(uint32_t(i) / uint32_t(a.divide[o]))
                                                            : i / a.divide[o];
  return wrap_index(i, a.period[o]);
}

template <class F, class = void> struct VecElemSize { static constexpr int value = 0; };
template <class F> struct VecElemSize<F, std::void_t<decltype(F::kElemSize)>> {
  static constexpr int value = F::kElemSize;
};

template <int E, class F> __global__ void linear_kernel(LinearArgs a, int64_t n, F f) {
  wait_for_predecessors();
  const int64_t stride = int64_t(blockDim.x) * gridDim.x;
  const int64_t tid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t done = 0;
  if constexpr (E > 0) {
    constexpr int V = 16 / E;
    if (a.aligned) {
      const int64_t nvec = n / V;
      for (int64_t v = tid; v < nvec; v += stride) {
        uint4 buf[kMaxOps];
#pragma unroll
        for (int o = 1; o < kMaxOps; ++o) {
          if (o >= a.nops) break;
          if (a.broadcast[o] || a.divide[o] > 1) {  // one value for the vector (divide % V == 0)
            const char* src = a.ptrs[o] + (a.broadcast[o] ? 0 : operand_index(a, o, v * V) * E);
            char* b = reinterpret_cast<char*>(&buf[o]);
#pragma unroll
            for (int j = 0; j < V; ++j)
              memcpy(b + j * E, src, E);
          } else if (a.gather[o]) {
            char* b = reinterpret_cast<char*>(&buf[o]);
#pragma unroll
            for (int j = 0; j < V; ++j)
              memcpy(b + j * E, a.ptrs[o] + operand_index(a, o, v * V + j) * E, E);
          } else if (a.period[o] > 0) {
            buf[o] = reinterpret_cast<const uint4*>(a.ptrs[o])[wrap_index(v, a.period[o] / V)];
          } else {
            buf[o] = reinterpret_cast<const uint4*>(a.ptrs[o])[v];
          }
        }
        char* local[kMaxOps];
#pragma unroll
        for (int o = 0; o < kMaxOps; ++o)
          local[o] = reinterpret_cast<char*>(&buf[o]);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          int64_t off[kMaxOps];
#pragma unroll
          for (int o = 0; o < kMaxOps; ++o)
            off[o] = int64_t(j) * E;
          f(local, off);
        }
        reinterpret_cast<uint4*>(a.ptrs[0])[v] = buf[0];
      }
      done = nvec * V;
    }
  }
  for (int64_t i = done + tid; i < n; i += stride) {  // unaligned, or the tail
    int64_t off[kMaxOps];
#pragma unroll
    for (int o = 0; o < kMaxOps; ++o)
      off[o] = (o < a.nops && !a.broadcast[o]) ? operand_index(a, o, i) * (E > 0 ? int64_t(E) : a.elem[o]) : 0;
    f(a.ptrs, off);
  }
}

inline LinearArgs linear_args(const Indexer& ix, int E) {
  LinearArgs a;
  a.nops = ix.nops;
  a.aligned = E > 0;
  a.divided = false;
  for (int o = 0; o < kMaxOps; ++o) {
    a.ptrs[o] = o < ix.nops ? ix.ptrs[o] : nullptr;
    a.elem[o] = o < ix.nops ? ix.elem[o] : 0;
    a.broadcast[o] = o < ix.nops && ix.broadcast[o];
    a.period[o] = o < ix.nops ? ix.period[o] : 0;
    a.divide[o] = o < ix.nops ? ix.divide[o] : 1;
    a.divided |= a.divide[o] > 1;
    a.gather[o] = false;
    if (o < ix.nops && !a.broadcast[o]) {
      if (a.divide[o] > 1) {  // one value per vector
        a.aligned &= E > 0 && (a.divide[o] * E) % 16 == 0;
      } else if (a.period[o] > 0 && ix.elem[o] == E &&
                 ((a.period[o] * E) % 16 != 0 || reinterpret_cast<uintptr_t>(ix.ptrs[o]) % 16 != 0)) {
        a.gather[o] = o > 0;  // the output is never periodic
        a.aligned &= o > 0;
      } else {
        a.aligned &=
            ix.elem[o] == E && reinterpret_cast<uintptr_t>(ix.ptrs[o]) % 16 == 0 && (a.period[o] * E) % 16 == 0;
      }
    }
  }
  return a;
}

template <class F> __global__ void elementwise_kernel(Indexer ix, int64_t n, F f) {
  wait_for_predecessors();
  int64_t stride = int64_t(blockDim.x) * gridDim.x;
  const bool small = n <= int64_t(UINT32_MAX);  // uniform across the grid
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    int64_t off[kMaxOps];
    if (small) ix.offsets(uint32_t(i), off);
    else ix.offsets(i, off);
    f(ix.ptrs, off);
  }
}

// ---- long rows ------------------------------------------------------------------------
// Strided operands whose last (merged) dim is long (a batch transposed
// whole rows at a time, [B, r, m] -> [r, B, m]; a row broadcast against
// [batch, channels, points]): each row's offsets are computed once, and the
// threads walk the row adding strides (the plain kernel's per-element
// division over every dim cost ~3x the memory time of a 42 MB copy on an
// H100).
constexpr int64_t kMinRowLength = 256;
template <class F> __global__ void rows_kernel(Indexer ix, int64_t rows, int64_t inner, F f) {
  wait_for_predecessors();
  const int last = ix.ndim - 1;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    int64_t base[kMaxOps];
    const int64_t i0 = r * inner;
    if (i0 + inner <= int64_t(UINT32_MAX)) ix.offsets(uint32_t(i0), base);
    else ix.offsets(i0, base);
    for (int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; j < inner; j += int64_t(blockDim.x) * gridDim.x) {
      int64_t off[kMaxOps];
#pragma unroll
      for (int o = 0; o < kMaxOps; ++o)
        off[o] = o < ix.nops ? base[o] + j * ix.strides[o][last] : 0;
      f(ix.ptrs, off);
    }
  }
}

// ---- inputs read across their dense dim ----------------------------------------------
// An input whose second-to-last dim is its dense one while the output is
// dense along the last (x + x.mT(), x.mT().contiguous(), where(m, x.mT(),
// y)): the plain kernel's neighbouring threads read one element per cache
// line of it. The tiled kernel stages kTile x kTile tiles of such inputs
// through shared memory, read along their dense dim, and every thread then
// runs the functor on one element of the tile with those operands pointing
// into shared memory (the functor sees only pointers and byte offsets).
constexpr int kTile = 32, kTileRows = 8, kTileMaxElem = 8, kTileMaxBatchBlocks = 1024;
constexpr int64_t kTileMinElems = 128 * 128;
struct TileArgs {
  Indexer ix;  // its ndim: the batch dims only; the last two are rows and cols
  int64_t rows, cols, batch;
  int64_t rs[kMaxOps], cs[kMaxOps];  // byte strides of the rows and cols dims
  unsigned staged;                   // bit o: input o is read through shared memory
};

__device__ __forceinline__ void copy_elem(char* dst, const char* src, int64_t e) {
  switch (e) {
    case 8: *reinterpret_cast<uint64_t*>(dst) = *reinterpret_cast<const uint64_t*>(src); break;
    case 4: *reinterpret_cast<uint32_t*>(dst) = *reinterpret_cast<const uint32_t*>(src); break;
    case 2: *reinterpret_cast<uint16_t*>(dst) = *reinterpret_cast<const uint16_t*>(src); break;
    default: *dst = *src; break;
  }
}

template <class F> __global__ void __launch_bounds__(kTile* kTileRows) tiled_kernel(TileArgs a, F f) {
  wait_for_predecessors();
  constexpr int kPitch = kTile + 1;  // one element of padding per tile row: no bank conflicts
  __shared__ __align__(16) char smem[kMaxOps - 1][kTile * kPitch * kTileMaxElem];
  const int tx = int(threadIdx.x), ty = int(threadIdx.y);
  const int64_t r0 = int64_t(blockIdx.y) * kTile, c0 = int64_t(blockIdx.x) * kTile;
  for (int64_t b = blockIdx.z; b < a.batch; b += gridDim.z) {
    int64_t base[kMaxOps];
    a.ix.offsets(b, base);
#pragma unroll
    for (int o = 1; o < kMaxOps; ++o) {
      if (o >= a.ix.nops || !(a.staged >> o & 1u)) continue;
      const int64_t e = a.ix.elem[o];
      for (int k = ty; k < kTile; k += kTileRows) {  // tile (col k, row tx): rows are the dense dim
        const int64_t r = r0 + tx, c = c0 + k;
        if (r < a.rows && c < a.cols)
          copy_elem(smem[o - 1] + (int64_t(k) * kPitch + tx) * e, a.ix.ptrs[o] + base[o] + r * a.rs[o] + c * a.cs[o],
                    e);
      }
    }
    __syncthreads();
    for (int k = ty; k < kTile; k += kTileRows) {
      const int64_t r = r0 + k, c = c0 + tx;
      if (r >= a.rows || c >= a.cols) continue;
      char* p[kMaxOps];
      int64_t off[kMaxOps];
#pragma unroll
      for (int o = 0; o < kMaxOps; ++o) {
        const bool staged = o < a.ix.nops && (a.staged >> o & 1u);
        p[o] = staged ? smem[o > 0 ? o - 1 : 0] : a.ix.ptrs[o];
        off[o] = staged ? (int64_t(tx) * kPitch + k) * a.ix.elem[o]
                        : (o < a.ix.nops ? base[o] + r * a.rs[o] + c * a.cs[o] : 0);
      }
      f(p, off);
    }
    __syncthreads();  // the next batch entry overwrites the tiles
  }
}

// The tiled launch's arguments when it applies: the output dense along the
// last dim, some input dense along the second-to-last and not the last,
// matrices of at least kTileMinElems elements.
inline bool tile_args(const Indexer& ix, TileArgs& a) {
  const int n = ix.ndim;
  if (n < 2 || ix.strides[0][n - 1] != ix.elem[0]) return false;
  a.staged = 0;
  for (int o = 1; o < ix.nops; ++o)
    if (ix.strides[o][n - 2] == ix.elem[o] && ix.strides[o][n - 1] != ix.elem[o] && ix.strides[o][n - 1] != 0 &&
        ix.elem[o] <= kTileMaxElem)
      a.staged |= 1u << o;
  a.rows = ix.sizes[n - 2];
  a.cols = ix.sizes[n - 1];
  // Matrices that fit a cache (10^4 64 x 64 ones: the plain kernel's
  // strided reads hit L1) gain nothing from the tiles: measured slower.
  if (a.staged == 0 || a.rows < kTile || a.cols < kTile || a.rows * a.cols < kTileMinElems ||
      (a.rows + kTile - 1) / kTile > 65535 || (a.cols + kTile - 1) / kTile > INT32_MAX)
    return false;
  a.ix = ix;
  a.ix.ndim = n - 2;
  a.batch = 1;
  for (int d = 0; d < n - 2; ++d)
    a.batch *= ix.sizes[d];
  for (int o = 0; o < kMaxOps; ++o) {
    a.rs[o] = o < ix.nops ? ix.strides[o][n - 2] : 0;
    a.cs[o] = o < ix.nops ? ix.strides[o][n - 1] : 0;
  }
  return true;
}

inline cudaStream_t stream_of(const Tensor& t) {
  return static_cast<cudaStream_t>(current_stream(t.device().index()).handle());
}

// Blocks of kBlock threads for a grid-stride loop over n elements.
constexpr int kBlock = 256;
inline unsigned grid_for(int64_t n) { return unsigned(std::min<int64_t>((n + kBlock - 1) / kBlock, 65536)); }

// Tells the encoder that a linear launch can run as a fused step when every
// operand is dense or one element and the dtype is a float one.
template <class F>
void describe_step(LaunchEncoder& enc, const void* func, const LinearArgs& a, ScalarType dtype, int64_t n, const F& f) {
  if (!enc.recording() || n > fusion::max_elements() || a.divided) return;
  if (dtype != ScalarType::Float32 && dtype != ScalarType::Float64) return;
  static_assert(sizeof(F) <= fusion::kFunctorBytes, "functor too large to fuse");
  fusion::Step st;
  st.kind = FusedStep<F>::kind;
  st.nops = int8_t(a.nops);
  for (int o = 0; o < a.nops; ++o) {
    if (a.elem[o] != int64_t(element_size(dtype))) return;
    st.ptr[o] = a.ptrs[o];
    if (a.broadcast[o] && n > 1) st.scalar |= 1u << o;
    if (a.period[o] > 0 && a.period[o] < n) {
      st.period[o] = int32_t(a.period[o]);
      st.periodic = true;
    }
  }
  memcpy(st.fn, &f, sizeof(F));
  enc.fusable(func, &a, sizeof(a), dtype, n, st);
}

template <class F> void launch(const Tensor* ops, int nops, const char* op, F f) {
  int64_t n = ops[0].numel();
  if (n == 0) return;
  for (int o = 1; o < nops; ++o)
    TG_CHECK(ops[o].device() == ops[0].device(), op, ": expected all tensors on ", ops[0].device(), ", got ",
             ops[o].device());
  DeviceGuard g(ops[0].device().index());
  Indexer ix = make_indexer(ops, nops, op);
  cudaStream_t s = static_cast<cudaStream_t>(current_stream(ops[0].device().index()).handle());
  LaunchEncoder access(s);  // operand 0 is written, the others read
  access.write(ops[0]);
  for (int o = 1; o < nops; ++o)
    access.read(ops[o]);
  constexpr int E = VecElemSize<F>::value;
  if (ix.linear) {
    LinearArgs a = linear_args(ix, E);
    int64_t work = a.aligned ? std::max<int64_t>(n / (16 / std::max(E, 1)), 1) : n;
    launch_pdl(&linear_kernel<E, F>, grid_for(work), kBlock, s, ops[0].device().index(), op, a, n, f);
    if constexpr (FusedStep<F>::kind != fusion::kNone)
      describe_step(access, reinterpret_cast<const void*>(&linear_kernel<E, F>), a, ops[0].dtype(), n, f);
    return;
  }
  TileArgs ta;
  if (tile_args(ix, ta)) {
    const dim3 grid(unsigned((ta.cols + kTile - 1) / kTile), unsigned((ta.rows + kTile - 1) / kTile),
                    unsigned(std::min<int64_t>(ta.batch, kTileMaxBatchBlocks)));
    launch_pdl(&tiled_kernel<F>, grid, dim3(kTile, kTileRows), s, ops[0].device().index(), op, ta, f);
    return;
  }
  if (ix.ndim >= 2 && ix.sizes[ix.ndim - 1] >= kMinRowLength) {
    const int64_t inner = ix.sizes[ix.ndim - 1], rows = n / inner;
    const dim3 grid(unsigned(std::min<int64_t>((inner + kBlock - 1) / kBlock, 64)),
                    unsigned(std::min<int64_t>(rows, 65535)));
    launch_pdl(&rows_kernel<F>, grid, kBlock, s, ops[0].device().index(), op, ix, rows, inner, f);
    return;
  }
  launch_pdl(&elementwise_kernel<F>, grid_for(n), kBlock, s, ops[0].device().index(), op, ix, n, f);
}

// Sixteen bytes of T, one load or store (the row passes of group.cu and
// resample.cu).
template <class T> struct alignas(16) Vec16 {
  static constexpr int kN = int(16 / sizeof(T));
  T v[kN];
};

// A contiguous Float32 or Float64 tensor: what the row passes take.
inline bool dense_float(const Tensor& t) {
  return t.is_contiguous() && (t.dtype() == ScalarType::Float32 || t.dtype() == ScalarType::Float64);
}

}  // namespace tg::cuda
