// CUDA backend: batched GEMM through cuBLAS (strided batched, column-major
// view of our row-major operands; either operand may be transposed in memory
// without a copy), and a plain kernel for Int64, which cuBLAS lacks.
#include <cublasLt.h>
#include <cublas_v2.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <tapegrad/cuda/device.h>
#include "tensor/kernels.h"
#include <tapegrad/tensor/raw.h>

#include "cuda/launch.h"
#include "cuda/libraries.h"
#include "loops.cuh"
#include "register.h"

namespace tg::cuda {

namespace {

std::atomic<bool> g_allow_tf32{false};

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
__global__ void gemm_int64_k(T* out, const T* a, const T* b, int64_t B, int64_t n, int64_t k, int64_t m, int64_t sab,
                             int64_t sar, int64_t sac, int64_t sbb, int64_t sbr, int64_t sbc) {
  int64_t total = B * n * m, stride = int64_t(blockDim.x) * gridDim.x;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += stride) {
    int64_t j = t % m, i = (t / m) % n, bi = t / (n * m);
    T acc = 0;
    for (int64_t p = 0; p < k; ++p)
      acc += a[bi * sab + i * sar + p * sac] * b[bi * sbb + p * sbr + j * sbc];
    out[t] = acc;
  }
}

// ---- cuBLASLt --------------------------------------------------------------------------
// Float products go through cublasLtMatmul with the algorithm its heuristic
// ranks first for the shape, layouts and pointer alignments (cached: the
// query costs more than a small product). The heuristic also says how much
// workspace that algorithm uses, which is what graph capture needs: the
// launch encoder's workspace request gives a captured product exactly that
// size of the graph's own memory, so that captured products touch disjoint
// memory and the graph's dependency relaxation may run them concurrently
// (docs/GRAPHS.md). Eager products share the stream's cuBLAS workspace. Both run the same algorithm: captured and eager
// results are equal bit for bit. TG_CUBLASLT=0 goes back to cublasGemmEx (whose captured products share the workspace,
// and so stay ordered).
bool lt_enabled() { return tg::detail::switched_on<tg::detail::OffSwitch::kCublasLt>(); }

struct LtKey {
  int64_t v[16];  // device is enough for the workspace size: fixed per device
  bool operator==(const LtKey& o) const { return std::memcmp(v, o.v, sizeof(v)) == 0; }
};
struct LtKeyHash {
  size_t operator()(const LtKey& k) const {
    size_t h = 1469598103934665603ull;
    for (int64_t x : k.v)
      h = (h ^ size_t(x)) * 1099511628211ull;
    return h;
  }
};

struct LtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;
  bool ok = false;  // false: the heuristic found nothing; use cublasGemmEx
  ~LtPlan() {
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

uint32_t alignment_of(const void* p) {
  uint32_t a = 256;
  while (a > 1 && reinterpret_cast<uintptr_t>(p) % a)
    a /= 2;
  return a;
}

// The plan for C (m x n, column-major, ld m) = op(A) op(B), batched.
std::shared_ptr<LtPlan> lt_plan(int device, bool f64, cublasComputeType_t compute, cublasOperation_t opa,
                                cublasOperation_t opb, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t sa,
                                int64_t ldb, int64_t sb, int64_t batch, uint32_t align_a, uint32_t align_b,
                                uint32_t align_c) {
  const LtKey key{{device, f64, int64_t(compute), int64_t(opa), int64_t(opb), m, n, k, lda, sa, ldb, sb, batch, align_a,
                   align_b, align_c}};
  static std::mutex mu;
  static std::unordered_map<LtKey, std::shared_ptr<LtPlan>, LtKeyHash> cache;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  auto p = std::make_shared<LtPlan>();
  const cudaDataType_t type = f64 ? CUDA_R_64F : CUDA_R_32F;
  auto layout = [&](cublasLtMatrixLayout_t* l, int64_t rows, int64_t cols, int64_t ld, int64_t stride) {
    if (cublasLtMatrixLayoutCreate(l, type, uint64_t(rows), uint64_t(cols), ld) != CUBLAS_STATUS_SUCCESS) return false;
    if (batch > 1) {
      int32_t count = int32_t(batch);
      cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count));
      cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride));
    }
    return true;
  };
  bool made = cublasLtMatmulDescCreate(&p->desc, compute, type) == CUBLAS_STATUS_SUCCESS;
  if (made) {
    cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa));
    cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb));
    made = layout(&p->a, opa == CUBLAS_OP_N ? m : k, opa == CUBLAS_OP_N ? k : m, lda, sa) &&
           layout(&p->b, opb == CUBLAS_OP_N ? k : n, opb == CUBLAS_OP_N ? n : k, ldb, sb) &&
           layout(&p->c, m, n, m, m * n);
  }
  if (made) {
    cublasLtMatmulPreference_t pref = nullptr;
    if (cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS) {
      const uint64_t ws = lib::cublas_workspace_bytes(device);
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof(align_a));
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof(align_b));
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c, sizeof(align_c));
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c, sizeof(align_c));
      cublasLtMatmulHeuristicResult_t result{};
      int found = 0;
      detail::RelaxedCaptureMode relaxed;  // a host-side query, allowed under capture
      if (cublasLtMatmulAlgoGetHeuristic(lib::cublaslt(device, "bmm"), p->desc, p->a, p->b, p->c, p->c, pref, 1,
                                         &result, &found) == CUBLAS_STATUS_SUCCESS &&
          found > 0 && result.state == CUBLAS_STATUS_SUCCESS) {
        p->algo = result.algo;
        p->workspace = result.workspaceSize;
        p->ok = true;
      }
      cublasLtMatmulPreferenceDestroy(pref);
    }
  }
  (void)cudaGetLastError();
  std::lock_guard<std::mutex> lock(mu);
  return cache.emplace(key, p).first->second;
}

// out = a b, or out += a b (accumulate: beta 1; Float32/Float64).
void gemm(const Tensor& out, const Tensor& a, const Tensor& b, bool accumulate) {
  int64_t B = out.sizes()[0], n = out.sizes()[1], m = out.sizes()[2], k = a.sizes()[2];
  if (out.numel() == 0) return;
  TG_CHECK(a.is_cuda() && b.is_cuda(), "bmm: expected both operands on ", out.device());
  DeviceGuard g(out.device().index());
  cudaStream_t s = stream_of(out);
  if (out.dtype() == kInt64) {
    TG_INTERNAL_ASSERT(!accumulate, "bmm: no accumulating Int64 product");
    int64_t blocks = std::min<int64_t>((out.numel() + 255) / 256, 65536);
    LaunchEncoder access(s);
    access.write(out);
    access.read(a);
    access.read(b);
    gemm_int64_k<int64_t><<<unsigned(blocks), 256, 0, s>>>(
        static_cast<int64_t*>(out.data_ptr()), static_cast<const int64_t*>(a.data_ptr()),
        static_cast<const int64_t*>(b.data_ptr()), B, n, k, m, a.strides()[0], a.strides()[1], a.strides()[2],
        b.strides()[0], b.strides()[1], b.strides()[2]);
    TG_CUDA_CHECK(cudaGetLastError(), "bmm");
    return;
  }
  // Row-major C[n, m] = A B is column-major C^T[m, n] = B^T A^T.
  Operand ob = as_operand(b), oa = as_operand(a);
  bool f64 = out.dtype() == kFloat64;
  cudaDataType_t type = f64 ? CUDA_R_64F : CUDA_R_32F;
  cublasComputeType_t compute = f64                   ? CUBLAS_COMPUTE_64F
                                : g_allow_tf32.load() ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                      : CUBLAS_COMPUTE_32F;
  double one64 = 1, zero64 = 0;
  float one32 = 1, zero32 = 0;
  const void* alpha = f64 ? static_cast<const void*>(&one64) : &one32;
  const void* beta = f64 ? static_cast<const void*>(accumulate ? &one64 : &zero64) : accumulate ? &one32 : &zero32;
  const int device = out.device().index();
  cublasOperation_t opb = ob.row_major ? CUBLAS_OP_N : CUBLAS_OP_T;
  cublasOperation_t opa = oa.row_major ? CUBLAS_OP_N : CUBLAS_OP_T;
  LaunchEncoder access(s);  // a capture records what the product touches
  access.read(ob.t);
  access.read(oa.t);
  access.write(out);  // read too when accumulating: a write covers both
  if (lt_enabled()) {
    std::shared_ptr<LtPlan> plan = lt_plan(device, f64, compute, opb, opa, m, n, k, ob.ld, B == 1 ? 0 : ob.batch_stride,
                                           oa.ld, B == 1 ? 0 : oa.batch_stride, B, alignment_of(ob.t.data_ptr()),
                                           alignment_of(oa.t.data_ptr()), alignment_of(out.data_ptr()));
    if (plan->ok) {
      // Captured: the graph's own workspace of the plan's size; eager: the
      // stream's cuBLAS workspace.
      void* ws =
          plan->workspace > 0 ? access.workspace(plan->workspace, lib::cublas_workspace(device, s, "bmm")) : nullptr;
      TG_CUBLAS_CHECK(cublasLtMatmul(lib::cublaslt(device, "bmm"), plan->desc, alpha, ob.t.data_ptr(), plan->a,
                                     oa.t.data_ptr(), plan->b, beta, out.data_ptr(), plan->c, out.data_ptr(), plan->c,
                                     &plan->algo, ws, plan->workspace, s),
                      "bmm");
      return;
    }
  }
  cublasHandle_t h = lib::cublas(device, s, access, "bmm");
  if (B == 1) {
    // A single product goes through cublasGemmEx: cuBLAS's heuristics for the
    // non-batched call pick split-K for the long, thin products of weight
    // gradients (k = batch), which the batched entry with one batch does not.
    TG_CUBLAS_CHECK(
        cublasGemmEx(h, opb, opa, int(m), int(n), int(k), alpha, ob.t.data_ptr(), type, int(ob.ld), oa.t.data_ptr(),
                     type, int(oa.ld), beta, out.data_ptr(), type, int(m), compute, CUBLAS_GEMM_DEFAULT),
        "bmm");
    return;
  }
  TG_CUBLAS_CHECK(
      cublasGemmStridedBatchedEx(h, opb, opa, int(m), int(n), int(k), alpha, ob.t.data_ptr(), type, int(ob.ld),
                                 ob.batch_stride, oa.t.data_ptr(), type, int(oa.ld), oa.batch_stride, beta,
                                 out.data_ptr(), type, int(m), n * m, int(B), compute, CUBLAS_GEMM_DEFAULT),
      "bmm");
}

void bmm_kernel(const Tensor& out, const Tensor& a, const Tensor& b) { gemm(out, a, b, false); }

void mm_accumulate_kernel(const Tensor& out, const Tensor& a, const Tensor& b) {
  gemm(out.unsqueeze(0), a.unsqueeze(0), b.unsqueeze(0), true);
}

}  // namespace

void set_allow_tf32(bool allow) { g_allow_tf32.store(allow); }
bool allow_tf32() { return g_allow_tf32.load(); }

void register_gemm(kernels::Backend& b) {
  b.bmm = bmm_kernel;
  b.mm_accumulate = mm_accumulate_kernel;
}

}  // namespace tg::cuda
