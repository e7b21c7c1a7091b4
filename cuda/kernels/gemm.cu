// CUDA backend: batched GEMM through cuBLAS (strided batched, column-major
// view of our row-major operands; either operand may be transposed in memory
// without a copy), and a plain kernel for Int64, which cuBLAS lacks.
#include <cublas_v2.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <tapegrad/cuda/device.h>
#include "tensor/kernels.h"
#include <tapegrad/tensor/raw.h>

#include "loops.cuh"
#include "register.h"

namespace tg::cuda {

namespace {

std::atomic<bool> g_allow_tf32{false};

const char* cublas_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_(other)";
  }
}

#define TG_CUBLAS_CHECK(call, op)                                                     \
  do {                                                                                \
    cublasStatus_t st_ = (call);                                                      \
    TG_CHECK(st_ == CUBLAS_STATUS_SUCCESS, op, ": cuBLAS call ", #call, " failed: ", \
             cublas_name(st_));                                                       \
  } while (0)

// cuBLAS handles: one per (thread, device), taken from a pool and returned
// when the thread ends (a handle is not safe to share between threads).
struct HandlePool {
  std::mutex mu;
  std::vector<std::pair<int, cublasHandle_t>> free;
};
HandlePool& pool() {
  static HandlePool* p = new HandlePool();  // never destroyed (outlives threads)
  return *p;
}

struct ThreadHandles {
  cublasHandle_t h[64] = {};
  ~ThreadHandles() {
    std::lock_guard<std::mutex> lock(pool().mu);
    for (int d = 0; d < 64; ++d)
      if (h[d]) pool().free.emplace_back(d, h[d]);
  }
};

// Bytes of cuBLAS workspace per stream. CUBLAS_WORKSPACE_CONFIG, when set,
// decides as it does for cuBLAS itself (":KiB:count" pairs, summed); else 32
// MiB on Hopper and later, 4 MiB before (cuBLAS's recommended sizes). The
// size matters beyond memory: cuBLAS's heuristics pick deeper split-K for
// the long, thin products of weight gradients when the workspace allows it.
size_t workspace_bytes(int device) {
  static size_t sizes[64] = {};
  static std::once_flag once[64];
  std::call_once(once[device], [device] {
    size_t bytes = 0;
    if (const char* cfg = std::getenv("CUBLAS_WORKSPACE_CONFIG")) {
      const char* p = cfg;
      while (*p == ':') {
        char* end = nullptr;
        unsigned long long kib = std::strtoull(p + 1, &end, 10);
        if (end == p + 1 || *end != ':') break;
        p = end;
        unsigned long long count = std::strtoull(p + 1, &end, 10);
        if (end == p + 1) break;
        bytes += size_t(kib) * 1024 * size_t(count);
        p = end;
      }
    }
    if (bytes == 0) bytes = size_t(get_device_properties(device).major >= 9 ? 32 : 4) << 20;
    sizes[device] = bytes;
  });
  return sizes[device];
}

cublasHandle_t handle(int device, cudaStream_t stream) {
  thread_local ThreadHandles mine;
  TG_CHECK(device < 64, "bmm: device index ", device, " too large");
  if (!mine.h[device]) {
    {
      std::lock_guard<std::mutex> lock(pool().mu);
      auto& f = pool().free;
      for (size_t i = 0; i < f.size(); ++i)
        if (f[i].first == device) {
          mine.h[device] = f[i].second;
          f.erase(f.begin() + long(i));
          break;
        }
    }
    if (!mine.h[device]) {  // may allocate: allowed while a capture is underway
      detail::RelaxedCaptureMode relaxed;
      TG_CUBLAS_CHECK(cublasCreate(&mine.h[device]), "bmm");
    }
  }
  TG_CUBLAS_CHECK(cublasSetStream(mine.h[device], stream), "bmm");
  // cuBLAS gets a workspace of ours for each stream this thread uses (as
  // PyTorch does): it then never allocates, also under graph capture, and
  // picks the same algorithms captured and eager. Setting the stream resets
  // the workspace, so it is set again every time.
  const size_t bytes = workspace_bytes(device);
  thread_local std::unordered_map<cudaStream_t, void*> workspace[64];
  void*& ws = workspace[device][stream];
  if (!ws) {
    detail::RelaxedCaptureMode relaxed;
    TG_CUDA_CHECK(cudaMalloc(&ws, bytes), "bmm (cuBLAS workspace)");  // kept for the thread's life
  }
  TG_CUBLAS_CHECK(cublasSetWorkspace(mine.h[device], ws, bytes), "bmm");
  return mine.h[device];
}

// A [B, r, c] operand as cuBLAS sees it: column-major with a leading
// dimension, transposed or not, and a batch stride (elements).
struct Operand {
  Tensor t;  // kept alive (may be a contiguous copy)
  bool row_major;
  int64_t ld, batch_stride;
};

Operand as_operand(const Tensor& x) {
  int64_t r = x.sizes()[1], c = x.sizes()[2];
  int64_t sb = x.sizes()[0] == 1 ? 0 : x.strides()[0];
  int64_t sr = x.strides()[1], sc = x.strides()[2];
  if ((sc == 1 || c == 1) && (r == 1 || sr >= std::max<int64_t>(c, 1)))
    return {x, true, r == 1 ? std::max<int64_t>(c, 1) : sr, sb};
  if ((sr == 1 || r == 1) && (c == 1 || sc >= std::max<int64_t>(r, 1)))
    return {x, false, c == 1 ? std::max<int64_t>(r, 1) : sc, sb};
  Tensor cx = raw::contiguous(x);
  return {cx, true, std::max<int64_t>(c, 1), r * c};
}

template <class T>
__global__ void gemm_int64_k(T* out, const T* a, const T* b, int64_t B, int64_t n, int64_t k,
                             int64_t m, int64_t sab, int64_t sar, int64_t sac, int64_t sbb,
                             int64_t sbr, int64_t sbc) {
  int64_t total = B * n * m, stride = int64_t(blockDim.x) * gridDim.x;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += stride) {
    int64_t j = t % m, i = (t / m) % n, bi = t / (n * m);
    T acc = 0;
    for (int64_t p = 0; p < k; ++p)
      acc += a[bi * sab + i * sar + p * sac] * b[bi * sbb + p * sbr + j * sbc];
    out[t] = acc;
  }
}

void bmm_kernel(const Tensor& out, const Tensor& a, const Tensor& b) {
  int64_t B = out.sizes()[0], n = out.sizes()[1], m = out.sizes()[2], k = a.sizes()[2];
  if (out.numel() == 0) return;
  TG_CHECK(a.is_cuda() && b.is_cuda(), "bmm: expected both operands on ", out.device());
  DeviceGuard g(out.device().index());
  cudaStream_t s = stream_of(out);
  if (out.dtype() == kInt64) {
    int64_t blocks = std::min<int64_t>((out.numel() + 255) / 256, 65536);
    gemm_int64_k<int64_t><<<unsigned(blocks), 256, 0, s>>>(
        static_cast<int64_t*>(out.data_ptr()), static_cast<const int64_t*>(a.data_ptr()),
        static_cast<const int64_t*>(b.data_ptr()), B, n, k, m, a.strides()[0], a.strides()[1],
        a.strides()[2], b.strides()[0], b.strides()[1], b.strides()[2]);
    TG_CUDA_CHECK(cudaGetLastError(), "bmm");
    return;
  }
  // Row-major C[n, m] = A B is column-major C^T[m, n] = B^T A^T.
  Operand ob = as_operand(b), oa = as_operand(a);
  bool f64 = out.dtype() == kFloat64;
  cudaDataType_t type = f64 ? CUDA_R_64F : CUDA_R_32F;
  cublasComputeType_t compute = f64 ? CUBLAS_COMPUTE_64F
                                : g_allow_tf32.load() ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                      : CUBLAS_COMPUTE_32F;
  double one64 = 1, zero64 = 0;
  float one32 = 1, zero32 = 0;
  const void* alpha = f64 ? static_cast<const void*>(&one64) : &one32;
  const void* beta = f64 ? static_cast<const void*>(&zero64) : &zero32;
  cublasHandle_t h = handle(out.device().index(), s);
  cublasOperation_t opb = ob.row_major ? CUBLAS_OP_N : CUBLAS_OP_T;
  cublasOperation_t opa = oa.row_major ? CUBLAS_OP_N : CUBLAS_OP_T;
  if (B == 1) {
    // A single product goes through cublasGemmEx: cuBLAS's heuristics for the
    // non-batched call pick split-K for the long, thin products of weight
    // gradients (k = batch), which the batched entry with one batch does not.
    TG_CUBLAS_CHECK(cublasGemmEx(h, opb, opa, int(m), int(n), int(k), alpha, ob.t.data_ptr(), type,
                                 int(ob.ld), oa.t.data_ptr(), type, int(oa.ld), beta, out.data_ptr(),
                                 type, int(m), compute, CUBLAS_GEMM_DEFAULT),
                    "bmm");
    return;
  }
  TG_CUBLAS_CHECK(
      cublasGemmStridedBatchedEx(
          h, opb, opa, int(m), int(n), int(k), alpha,
          ob.t.data_ptr(), type, int(ob.ld), ob.batch_stride, oa.t.data_ptr(), type, int(oa.ld),
          oa.batch_stride, beta, out.data_ptr(), type, int(m), n * m, int(B), compute,
          CUBLAS_GEMM_DEFAULT),
      "bmm");
}

}  // namespace

void set_allow_tf32(bool allow) { g_allow_tf32.store(allow); }
bool allow_tf32() { return g_allow_tf32.load(); }

void register_gemm(kernels::Backend& b) { b.bmm = bmm_kernel; }

}  // namespace tg::cuda
