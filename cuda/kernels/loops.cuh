// Internal: the CUDA loop machinery shared by the kernel files: one offset
// calculator (Indexer) for every strided, broadcast or contiguous operand
// set, a grid-stride launcher on the current stream, and dtype dispatch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <type_traits>

#include <tapegrad/cuda/check.h>
#include <tapegrad/cuda/stream.h>
#include <tapegrad/tensor/kernels.h>
#include <tapegrad/tensor/tensor.h>

namespace tg::cuda {

constexpr int kMaxDims = 16;
constexpr int kMaxOps = 4;

// Byte offsets of every operand for a linear (row-major) element index.
struct Indexer {
  int ndim = 0;
  int nops = 0;
  bool contiguous = true;
  int64_t sizes[kMaxDims];
  int64_t strides[kMaxOps][kMaxDims];  // bytes
  int64_t elem[kMaxOps];               // element sizes (contiguous path)
  char* ptrs[kMaxOps];

  __device__ void offsets(int64_t i, int64_t* off) const {
    if (contiguous) {
      for (int o = 0; o < nops; ++o) off[o] = i * elem[o];
      return;
    }
    for (int o = 0; o < nops; ++o) off[o] = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      int64_t idx = i % sizes[d];
      i /= sizes[d];
      for (int o = 0; o < nops; ++o) off[o] += idx * strides[o][d];
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
      for (int o = 0; o < nops; ++o) merge &= st[o][n - 1] == st[o][n] * sz[n];
      if (merge) {
        sz[n - 1] *= sz[n];
        for (int o = 0; o < nops; ++o) st[o][n - 1] = st[o][n];
        continue;
      }
    }
    ++n;
  }
  TG_CHECK(n <= kMaxDims, op, ": CUDA kernels support at most ", kMaxDims,
           " non-mergeable dims, got ", n, " (shape ", shape_str(out.sizes()), ")");
  ix.ndim = n;
  for (int o = 0; o < nops; ++o) {
    ix.ptrs[o] = static_cast<char*>(ops[o].data_ptr());
    ix.elem[o] = int64_t(element_size(ops[o].dtype()));
  }
  for (int d = 0; d < n; ++d) {
    ix.sizes[d] = sz[d];
    for (int o = 0; o < nops; ++o) ix.strides[o][d] = st[o][d];
  }
  ix.contiguous = n <= 1;
  for (int o = 0; o < nops && ix.contiguous; ++o)
    ix.contiguous = n == 0 || st[o][0] == ix.elem[o];
  return ix;
}

template <class F>
__global__ void elementwise_kernel(Indexer ix, int64_t n, F f) {
  int64_t stride = int64_t(blockDim.x) * gridDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    int64_t off[kMaxOps];
    ix.offsets(i, off);
    f(ix.ptrs, off);
  }
}

inline cudaStream_t stream_of(const Tensor& t) {
  return static_cast<cudaStream_t>(current_stream(t.device().index()).handle());
}

template <class F>
void launch(const Tensor* ops, int nops, const char* op, F f) {
  int64_t n = ops[0].numel();
  if (n == 0) return;
  for (int o = 1; o < nops; ++o)
    TG_CHECK(ops[o].device() == ops[0].device(), op, ": expected all tensors on ",
             ops[0].device(), ", got ", ops[o].device());
  DeviceGuard g(ops[0].device().index());
  Indexer ix = make_indexer(ops, nops, op);
  constexpr int kThreads = 256;
  int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, 65536);
  cudaStream_t s = static_cast<cudaStream_t>(current_stream(ops[0].device().index()).handle());
  elementwise_kernel<<<unsigned(blocks), kThreads, 0, s>>>(ix, n, f);
  TG_CUDA_CHECK(cudaGetLastError(), op);
}

// ---- dtypes on the device ------------------------------------------------------------
template <class F>
void dispatch_all(ScalarType t, F&& f) {
  switch (t) {
    case ScalarType::Float32: f(float{}); return;
    case ScalarType::Float64: f(double{}); return;
    case ScalarType::BFloat16: f(__nv_bfloat16{}); return;
    case ScalarType::Float16: f(__half{}); return;
    case ScalarType::Int64: f(int64_t{}); return;
    case ScalarType::Bool: f(bool{}); return;
  }
}
using kernels::dispatch_bytes;
using kernels::dispatch_compute;

template <class T>
constexpr bool is_half_v = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;

template <class S>
__device__ float to_float(S s) {
  if constexpr (std::is_same_v<S, __half>) return __half2float(s);
  else if constexpr (std::is_same_v<S, __nv_bfloat16>) return __bfloat162float(s);
  else return float(s);
}

template <class D, class S>
__device__ D convert(S s) {
  if constexpr (std::is_same_v<D, S>) {
    return s;
  } else if constexpr (is_half_v<S>) {
    return convert<D>(to_float(s));
  } else if constexpr (std::is_same_v<D, __half>) {
    return __float2half_rn(float(s));
  } else if constexpr (std::is_same_v<D, __nv_bfloat16>) {
    return __float2bfloat16_rn(float(s));
  } else if constexpr (std::is_same_v<D, bool>) {
    return s != S(0);
  } else {
    return static_cast<D>(s);
  }
}

}  // namespace tg::cuda
