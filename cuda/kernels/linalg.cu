// CUDA backend of the linear algebra family: batched GEMM through cuBLAS
// (strided batched, column-major view of our row-major operands; either
// operand may be transposed in memory without a copy) and a plain kernel for
// Int64, which cuBLAS lacks; then the family's kernel table
// (tensor/linalg_kernels.h): factorizations and solves from cuSOLVER and
// cuBLAS's batched routines, their handles and workspaces from
// cuda/libraries.h.
#include <cublasLt.h>
#include <cublas_v2.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <algorithm>
#include <climits>

#include <tapegrad/cuda/capture.h>
#include <tapegrad/cuda/device.h>
#include "tensor/element_math.h"
#include "tensor/env.h"
#include "tensor/kernels.h"
#include "tensor/linalg_kernels.h"
#include "tensor/op_util.h"
#include <tapegrad/tensor/raw.h>

#include "cuda/runtime/check.h"
#include "cuda/launch.h"
#include "cuda/runtime/libraries.h"
#include "loops.cuh"
#include "small_gemm.cuh"
#include "small_mlp.cuh"
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
  int64_t v[17];  // device is enough for the workspace size: fixed per device
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
  bool ok = false;    // false: the heuristic found nothing; use cublasGemmEx
  bool bias = false;  // with the bias epilogue
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

// The plan for C (m x n, column-major, ld m) = op(A) op(B), batched; with
// `bias`, plus a vector of m broadcast along the columns (the epilogue
// adds it before the one rounding to C: PyTorch's addmm with a bias row
// does the same). A bias plan's descriptor takes the bias pointer at each
// call, so those plans are per thread (no two threads set it at once).
std::shared_ptr<LtPlan> lt_plan(int device, bool f64, cublasComputeType_t compute, cublasOperation_t opa,
                                cublasOperation_t opb, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t sa,
                                int64_t ldb, int64_t sb, int64_t batch, uint32_t align_a, uint32_t align_b,
                                uint32_t align_c, bool bias = false) {
  const LtKey key{{device, f64, int64_t(compute), int64_t(opa), int64_t(opb), m, n, k, lda, sa, ldb, sb, batch, align_a,
                   align_b, align_c, bias}};
  static std::mutex shared_mu;
  static std::unordered_map<LtKey, std::shared_ptr<LtPlan>, LtKeyHash> shared_cache;
  thread_local std::mutex own_mu;  // uncontended: this thread's bias plans
  thread_local std::unordered_map<LtKey, std::shared_ptr<LtPlan>, LtKeyHash> own_cache;
  std::mutex& mu = bias ? own_mu : shared_mu;
  auto& cache = bias ? own_cache : shared_cache;
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
    if (bias) {
      const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
      made = cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)) ==
             CUBLAS_STATUS_SUCCESS;
    }
    made = made && layout(&p->a, opa == CUBLAS_OP_N ? m : k, opa == CUBLAS_OP_N ? k : m, lda, sa) &&
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
        p->bias = bias;
      }
      cublasLtMatmulPreferenceDestroy(pref);
    }
  }
  (void)cudaGetLastError();
  std::lock_guard<std::mutex> lock(mu);
  return cache.emplace(key, p).first->second;
}

void gemm(const Tensor& out, const Tensor& a, const Tensor& b, bool accumulate, const Tensor& bias = {});
bool gemm_product(const Tensor& out, const Tensor& a, const Tensor& b, bool accumulate, const Tensor& bias);

// ---- long, thin products ----------------------------------------------------------------
// A weight gradient multiplies two [channels, batch x points] matrices along
// the points: C (n x m, both small) = A (n x k) B (k x m), k in the hundreds of
// thousands. cuBLAS's heuristic gives it one split-K SIMT kernel of one block
// per SM, bound by latency at a tenth of the memory bandwidth (0.16 ms for
// 32 x 32 x 327680 on an H200). Here k is cut into S slices of equal length
// (about eight per SM): one strided batched product writes the S partial
// products, and a kernel sums them into C; a remainder shorter than a slice
// is accumulated last. Float32/Float64, one product (B = 1).
bool long_thin(int64_t n, int64_t m, int64_t k) {
  return k >= 16384 && k >= 128 * std::max(n, m) && n * m <= 128 * 128;
}

int sm_count(int device) {
  static std::atomic<int> counts[64] = {};
  if (device < 0 || device >= 64) return 132;
  int c = counts[device].load();
  if (c == 0) {
    if (cudaDeviceGetAttribute(&c, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || c <= 0) {
      (void)cudaGetLastError();
      c = 132;
    }
    counts[device].store(c);
  }
  return c;
}

// out[j] (+)= sum over s < S of part[s * count + j]: a block of 32 outputs by
// 32 slices of s, its partial sums combined in shared memory.
template <class T> __global__ void sum_slices_k(T* out, const T* part, int64_t S, int64_t count, bool accumulate) {
  __shared__ T acc[32][33];
  const int64_t j = int64_t(blockIdx.x) * 32 + threadIdx.x;
  T v = 0;
  if (j < count)
    for (int64_t s = threadIdx.y; s < S; s += 32)
      v += part[s * count + j];
  acc[threadIdx.y][threadIdx.x] = v;
  __syncthreads();
  if (threadIdx.y == 0 && j < count) {
    T total = 0;
    for (int r = 0; r < 32; ++r)
      total += acc[r][threadIdx.x];
    out[j] = accumulate ? out[j] + total : total;
  }
}

void gemm_long_thin(const Tensor& out, const Tensor& a, const Tensor& b, bool accumulate) {
  const int64_t n = out.sizes()[1], m = out.sizes()[2], k = a.sizes()[2];
  const int device = out.device().index();
  DeviceGuard g(device);  // the sum's launch (the products guard themselves)
  // Slices a multiple of 8 long (aligned batch offsets), at least 512.
  const int64_t want = 8 * int64_t(sm_count(device));
  const int64_t len = std::max<int64_t>(512, ((k + want - 1) / want + 7) / 8 * 8);
  const int64_t S = k / len, rest = k - S * len;
  // The slices as batches: a [S, n, len] and b [S, len, m], strided views.
  const IntList sa = a.strides(), sb = b.strides();
  Tensor as = raw::as_strided(a, {S, n, len}, {len * sa[2], sa[1], sa[2]}, a.storage_offset());
  Tensor bs = raw::as_strided(b, {S, len, m}, {len * sb[1], sb[1], sb[2]}, b.storage_offset());
  Tensor part = tg::empty({S, n, m}, out.options());
  gemm(part, as, bs, false);
  cudaStream_t s = stream_of(out);
  {
    LaunchEncoder access(s);
    access.read(part);
    access.write(out);
    const unsigned blocks = unsigned((n * m + 31) / 32);
    if (out.dtype() == kFloat64)
      sum_slices_k<double><<<blocks, dim3{32, 32, 1}, 0, s>>>(
          static_cast<double*>(out.data_ptr()), static_cast<const double*>(part.data_ptr()), S, n * m, accumulate);
    else
      sum_slices_k<float><<<blocks, dim3{32, 32, 1}, 0, s>>>(
          static_cast<float*>(out.data_ptr()), static_cast<const float*>(part.data_ptr()), S, n * m, accumulate);
    TG_CUDA_CHECK(cudaGetLastError(), "bmm");
  }
  if (rest > 0) gemm(out, raw::narrow(a, 2, S * len, rest), raw::narrow(b, 1, S * len, rest), true);
}

// ---- small products ----------------------------------------------------------------------
// The layers of small MLPs (a neural ODE's 2 -> 64 -> 64 -> 2 over 256
// states; their weight and input gradients): products of at most 2^21
// multiply-adds. cuBLASLt's FP32 heuristic gives them SIMT kernels of 128 x
// 128 tiles, two blocks on a GPU of 132 SMs, most with a split-K reduction
// after them: 7-13 us per product on an H100 (ncu), where one block per 16 x
// 16 outputs finishes in a few. Each thread sums its output's k products in
// order (deterministic), then adds the bias or the old value (accumulate).
// TG_SMALL_GEMM_MAX_MACS (multiply-adds; read once), by default 2^21.
double small_gemm_max_macs() {
  static const double v = tg::detail::env_number("TG_SMALL_GEMM_MAX_MACS", 0x1p21);
  return v;
}

bool small_product(int64_t B, int64_t n, int64_t m, int64_t k) {
  return double(B) * double(n) * double(m) * double(k) <= small_gemm_max_macs() && k <= 4096 && B <= 65535 &&
         (n + kSmallTile - 1) / kSmallTile <= 65535 && tg::detail::switched_on<tg::detail::OffSwitch::kSmallGemm>();
}

template <class T> __global__ void small_gemm_k(const SmallGemmOperands<T> p) {
  int64_t lin;
  (void)small_gemm_at<T>(p, &lin);
}

// Launches the product; while the stream captures, also as a head that
// fused elementwise steps may follow (fusion::Head).
template <class T>
void launch_small_gemm(cudaStream_t s, LaunchEncoder& enc, const Tensor& out, const Tensor& a, const Tensor& b,
                       const Tensor& bias, const SmallGemmArgs& g, dim3 grid, dim3 block, int64_t B) {
  const SmallGemmOperands<T> p{static_cast<T*>(out.data_ptr()), static_cast<const T*>(a.data_ptr()),
                               static_cast<const T*>(b.data_ptr()),
                               bias.defined() ? static_cast<const T*>(bias.data_ptr()) : nullptr, g};
  if (enc.recording() && tg::detail::switched_on<tg::detail::OffSwitch::kGraphHeads>()) {
    fusion::Head h;
    h.kind = fusion::kSmallGemmHead;
    h.grid[0] = grid.x, h.grid[1] = grid.y, h.grid[2] = grid.z;
    h.block[0] = block.x, h.block[1] = block.y, h.block[2] = block.z;
    h.out = static_cast<char*>(out.data_ptr());
    for (const Tensor* t : {&a, &b, &bias})
      if (t->defined()) {
        const fusion::Access span = fusion::span_of(*t, false);
        h.read_begin[h.nreads] = span.begin;
        h.read_bytes[h.nreads++] = span.bytes;
      }
    std::memcpy(h.args, &p, sizeof(p));
    enc.fusable_head(reinterpret_cast<const void*>(&small_gemm_k<T>), &p, sizeof(p), out.dtype(), B * g.n * g.m, h);
  }
  small_gemm_k<T><<<grid, block, 0, s>>>(p);
}

void small_gemm(const Tensor& out, const Tensor& a, const Tensor& b, bool accumulate, const Tensor& bias) {
  const int64_t B = out.sizes()[0], n = out.sizes()[1], m = out.sizes()[2], k = a.sizes()[2];
  DeviceGuard dg(out.device().index());
  cudaStream_t s = stream_of(out);
  LaunchEncoder access(s);
  access.read(a);
  access.read(b);
  if (bias.defined()) access.read(bias);
  access.write(out);  // read too when accumulating: a write covers both
  const SmallGemmArgs g{n,
                        m,
                        k,
                        a.sizes()[0] == 1 ? 0 : a.strides()[0],
                        a.strides()[1],
                        a.strides()[2],
                        b.sizes()[0] == 1 ? 0 : b.strides()[0],
                        b.strides()[1],
                        b.strides()[2],
                        accumulate};
  const dim3 grid{unsigned((m + kSmallTile - 1) / kSmallTile), unsigned((n + kSmallTile - 1) / kSmallTile),
                  unsigned(B)};
  const dim3 block{kSmallTile, kSmallTile, 1};
  if (out.dtype() == kFloat64) launch_small_gemm<double>(s, access, out, a, b, bias, g, grid, block, B);
  else launch_small_gemm<float>(s, access, out, a, b, bias, g, grid, block, B);
  TG_CUDA_CHECK(cudaGetLastError(), "bmm");
}

// ---- small MLPs in one launch ------------------------------------------------------------
// nn::Sequential's Linear/activation chains where nothing is recorded (a
// neural ODE's right-hand side in a forward solve: 2 -> 64 -> 64 -> 2 over
// 256 states, five launches per evaluation otherwise): small_mlp.cuh's
// body; while the stream captures, also as a head that fused elementwise
// steps (a Runge-Kutta stage sum) may follow (fusion::Head).
template <class T> __global__ void __launch_bounds__(kMlpThreads) mlp_forward_k(const MlpOperands<T> g) {
  wait_for_predecessors();  // (launched with programmatic dependent launch under TG_MLP_PDL)
  int64_t lin;
  (void)mlp_at<T>(g, &lin);
}

// TG_MLP_PDL=1 (read once; an experiment, off by default until measured):
// the MLP kernels launched with programmatic dependent launch, as the
// elementwise kernels are, so that a launch overlaps the tail of the kernel
// before it (each waits for it before its first memory access).
bool mlp_pdl() {
  static const bool v = tg::detail::env_number("TG_MLP_PDL", 0) != 0;
  return v;
}

// The backward of a recorded forward: the gradients of each layer's
// pre-activation (gz[l], where it is asked for) and of the input (gx, where
// asked for), from the output's gradient g and the saved pre-activations z.
// A block takes kMlpRows rows back through every layer: gz = g act'(z) at
// each element (the activation's derivative formula of activation_grad),
// then the next gradient's element q sums gz[j] w[j][q] over j in order,
// the layer's weights staged in shared memory as they are laid out
// (consecutive q: consecutive banks).
template <class T> struct MlpBackOperands {
  const T* g;
  const T* z[kMlpMaxLayers];
  const T* w[kMlpMaxLayers];
  T* gz[kMlpMaxLayers];
  T* gx;
  int64_t rows;
  int width[kMlpMaxLayers + 1];
  int layers, lowest;
  Activation act;
  bool last_act;
};

template <class T>
__global__ void __launch_bounds__(kMlpThreads) mlp_backward_k(const __grid_constant__ MlpBackOperands<T> g) {
  wait_for_predecessors();  // (TG_MLP_PDL)
  __shared__ T gb[2][kMlpRows][kMlpMaxWidth];
  __shared__ T ws[kMlpMaxWidth * kMlpMaxWidth];
  const int64_t row0 = int64_t(blockIdx.x) * kMlpRows;
  const int nr = g.rows - row0 < kMlpRows ? int(g.rows - row0) : kMlpRows;
  const int e = threadIdx.x;  // one element per thread and layer (kMlpRows * kMlpMaxWidth <= kMlpThreads)
  int cur = 0;
  {
    const int wl = g.width[g.layers];
    if (e < nr * wl) gb[0][e / wl][e % wl] = g.g[row0 * wl + e];
  }
  for (int l = g.layers - 1; l >= g.lowest; --l) {
    const int win = g.width[l], wout = g.width[l + 1];
    const bool activated = l < g.layers - 1 || g.last_act;
    if (e < nr * wout) {
      T v = gb[cur][e / wout][e % wout];
      if (activated) v = v * kernels::activation_derivative<T>(g.act, 1, g.z[l][row0 * wout + e]);
      gb[cur][e / wout][e % wout] = v;
      if (g.gz[l]) g.gz[l][row0 * wout + e] = v;
    }
    if (l == g.lowest && !(l == 0 && g.gx)) break;
    const T* w = g.w[l];
    for (int k = e; k < win * wout; k += blockDim.x)
      ws[k] = w[k];
    __syncthreads();
    if (e < nr * win) {
      const int r = e / win, q = e % win;
      T acc = 0;
#pragma unroll 8
      for (int j = 0; j < wout; ++j)
        acc += gb[cur][r][j] * ws[j * win + q];
      if (l == 0) g.gx[row0 * win + e] = acc;
      else gb[cur ^ 1][r][q] = acc;
    }
    __syncthreads();
    cur ^= 1;
  }
}

template <class T>
void launch_mlp(cudaStream_t s, LaunchEncoder& enc, const Tensor& out, const Tensor& x,
                const std::vector<Tensor>& weights, const std::vector<Tensor>& biases, Activation act, bool last_act,
                int64_t rows, const std::vector<Tensor>& z, const std::vector<Tensor>& h) {
  MlpOperands<T> g{};
  g.out = static_cast<T*>(out.data_ptr());
  g.x = static_cast<const T*>(x.data_ptr());
  g.layers = int(weights.size());
  g.rows = rows;
  g.act = act;
  g.last_act = last_act;
  g.width[0] = int(x.sizes()[1]);
  for (size_t l = 0; l < weights.size(); ++l) {
    g.w[l] = static_cast<const T*>(weights[l].data_ptr());
    g.b[l] = biases[l].defined() ? static_cast<const T*>(biases[l].data_ptr()) : nullptr;
    g.width[l + 1] = int(weights[l].sizes()[0]);
  }
  // The saved tensors' span (one buffer in autograd's fused_mlp; else from
  // the lowest to the highest byte, which a head's group keeps out of).
  const char *lo = nullptr, *hi = nullptr;
  for (size_t l = 0; l < z.size(); ++l) {
    g.z[l] = z[l].defined() ? static_cast<T*>(z[l].data_ptr()) : nullptr;
    g.h[l] = h[l].defined() ? static_cast<T*>(h[l].data_ptr()) : nullptr;
    for (const Tensor* t : {&z[l], &h[l]})
      if (t->defined()) {
        const fusion::Access a = fusion::span_of(*t, true);
        lo = lo && lo < a.begin ? lo : a.begin;
        hi = hi && hi > a.begin + a.bytes ? hi : a.begin + a.bytes;
      }
  }
  const unsigned blocks = unsigned((rows + kMlpRows - 1) / kMlpRows);
  if (enc.recording() && tg::detail::switched_on<tg::detail::OffSwitch::kGraphHeads>()) {
    fusion::Head hd;
    hd.kind = fusion::kMlpHead;
    hd.grid[0] = blocks;
    hd.block[0] = kMlpThreads;
    hd.out = static_cast<char*>(out.data_ptr());
    auto read = [&](const Tensor& t) {
      const fusion::Access span = fusion::span_of(t, false);
      hd.read_begin[hd.nreads] = span.begin;
      hd.read_bytes[hd.nreads++] = span.bytes;
    };
    read(x);
    for (size_t l = 0; l < weights.size(); ++l) {
      read(weights[l]);
      if (biases[l].defined()) read(biases[l]);
    }
    if (lo) {
      hd.written_begin = lo;
      hd.written_bytes = hi - lo;
    }
    std::memcpy(hd.args, &g, sizeof(g));
    enc.fusable_head(reinterpret_cast<const void*>(&mlp_forward_k<T>), &g, sizeof(g), out.dtype(),
                     rows * g.width[g.layers], hd);
  }
  if (mlp_pdl())
    launch_pdl(&mlp_forward_k<T>, dim3(blocks), dim3(kMlpThreads), s, out.device().index(), "Sequential", g);
  else mlp_forward_k<T><<<blocks, kMlpThreads, 0, s>>>(g);
  TG_CUDA_CHECK(cudaGetLastError(), "Sequential");
}

// Whether the kernels take an MLP of these operands (mlp_forward's
// conditions); `out_width`: the last layer's width.
bool mlp_usable(const Tensor& x, const std::vector<Tensor>& weights, const std::vector<Tensor>& biases,
                int64_t* out_width) {
  if (weights.empty() || weights.size() > size_t(kMlpMaxLayers) || biases.size() != weights.size() || x.dim() != 2)
    return false;
  const int64_t rows = x.sizes()[0];
  if (rows <= 0 || x.sizes()[1] > kMlpMaxWidth || x.sizes()[1] <= 0) return false;
  const ScalarType dt = x.dtype();
  auto usable = [&](const Tensor& t) { return t.dtype() == dt && t.is_contiguous() && t.device() == x.device(); };
  if ((dt != kFloat32 && dt != kFloat64) || !usable(x)) return false;
  for (size_t l = 0; l < weights.size(); ++l)
    if (!weights[l].defined() || weights[l].dim() != 2 || !usable(weights[l]) ||
        (biases[l].defined() &&
         (!usable(biases[l]) || biases[l].dim() != 1 || biases[l].sizes()[0] != weights[l].sizes()[0])))
      return false;
  int64_t in = x.sizes()[1];
  for (size_t l = 0; l < weights.size(); ++l) {
    const Tensor& w = weights[l];
    const int64_t o = w.sizes()[0];
    // Where each layer's product would take the small-product kernel.
    if (w.sizes()[1] != in || o <= 0 || o > kMlpMaxWidth ||
        double(rows) * double(in) * double(o) > double(int64_t(1) << 21))
      return false;
    in = o;
  }
  *out_width = in;
  return true;
}

// A defined, contiguous [rows, cols] tensor of like's dtype and device.
bool mlp_operand(const Tensor& t, const Tensor& like, int64_t rows, int64_t cols) {
  return t.defined() && t.dim() == 2 && t.sizes()[0] == rows && t.sizes()[1] == cols && t.dtype() == like.dtype() &&
         t.device() == like.device() && t.is_contiguous();
}

bool mlp_forward_kernel(Activation act, bool last_act, const Tensor& out, const Tensor& x,
                        const std::vector<Tensor>& weights, const std::vector<Tensor>& biases,
                        const std::vector<Tensor>& z, const std::vector<Tensor>& h) {
  // mlp_activation's kinds only.
  if (act != Activation::Tanh && act != Activation::Sigmoid && act != Activation::Silu && act != Activation::Relu)
    return false;
  int64_t wl = 0;
  if (!mlp_usable(x, weights, biases, &wl)) return false;
  const int64_t rows = x.sizes()[0];
  if (!mlp_operand(out, x, rows, wl)) return false;
  const size_t L = weights.size();
  if (!z.empty()) {  // saved: z where the activation follows, h for the hidden layers
    if (z.size() != L || h.size() != L) return false;
    for (size_t l = 0; l < L; ++l) {
      const int64_t w = weights[l].sizes()[0];
      const bool activated = l + 1 < L || last_act, hidden = l + 1 < L;
      if ((activated ? !mlp_operand(z[l], x, rows, w) : z[l].defined()) ||
          (hidden ? !mlp_operand(h[l], x, rows, w) : h[l].defined()))
        return false;
    }
  }
  DeviceGuard dg(out.device().index());
  cudaStream_t s = stream_of(out);
  LaunchEncoder access(s);
  access.read(x);
  for (size_t l = 0; l < L; ++l) {
    access.read(weights[l]);
    if (biases[l].defined()) access.read(biases[l]);
    for (const Tensor* t : {z.empty() ? nullptr : &z[l], h.empty() ? nullptr : &h[l]})
      if (t && t->defined()) access.write(*t);
  }
  access.write(out);
  if (out.dtype() == kFloat64) launch_mlp<double>(s, access, out, x, weights, biases, act, last_act, rows, z, h);
  else launch_mlp<float>(s, access, out, x, weights, biases, act, last_act, rows, z, h);
  return true;
}

template <class T>
void launch_mlp_backward(cudaStream_t s, Activation act, bool last_act, const Tensor& g,
                         const std::vector<int64_t>& widths, const std::vector<Tensor>& z,
                         const std::vector<Tensor>& weights, const Tensor& gx, const std::vector<Tensor>& gz,
                         int lowest) {
  MlpBackOperands<T> o{};
  o.g = static_cast<const T*>(g.data_ptr());
  o.gx = gx.defined() ? static_cast<T*>(gx.data_ptr()) : nullptr;
  o.rows = g.sizes()[0];
  o.layers = int(weights.size());
  o.lowest = lowest;
  o.act = act;
  o.last_act = last_act;
  for (size_t l = 0; l <= weights.size(); ++l)
    o.width[l] = int(widths[l]);
  for (size_t l = 0; l < weights.size(); ++l) {
    o.w[l] = weights[l].defined() ? static_cast<const T*>(weights[l].data_ptr()) : nullptr;
    o.z[l] = z[l].defined() ? static_cast<const T*>(z[l].data_ptr()) : nullptr;
    o.gz[l] = gz[l].defined() ? static_cast<T*>(gz[l].data_ptr()) : nullptr;
  }
  const unsigned blocks = unsigned((o.rows + kMlpRows - 1) / kMlpRows);
  if (mlp_pdl())
    launch_pdl(&mlp_backward_k<T>, dim3(blocks), dim3(kMlpThreads), s, g.device().index(), "Sequential backward", o);
  else mlp_backward_k<T><<<blocks, kMlpThreads, 0, s>>>(o);
  TG_CUDA_CHECK(cudaGetLastError(), "Sequential backward");
}

bool mlp_backward_kernel(Activation act, bool last_act, const Tensor& g, const std::vector<int64_t>& widths,
                         const std::vector<Tensor>& z, const std::vector<Tensor>& weights, const Tensor& gx,
                         const std::vector<Tensor>& gz, int lowest) {
  const size_t L = weights.size();
  if (L == 0 || L > size_t(kMlpMaxLayers) || widths.size() != L + 1 || z.size() != L || gz.size() != L || lowest < 0 ||
      size_t(lowest) >= L || (gx.defined() && lowest != 0) || g.dim() != 2)
    return false;
  const ScalarType dt = g.dtype();
  const int64_t rows = g.sizes()[0];
  if ((dt != kFloat32 && dt != kFloat64) || rows <= 0 || !g.is_contiguous() || g.sizes()[1] != widths[L]) return false;
  for (int64_t w : widths)
    if (w <= 0 || w > kMlpMaxWidth) return false;
  if (gx.defined() && !mlp_operand(gx, g, rows, widths[0])) return false;
  for (size_t l = size_t(lowest); l < L; ++l) {
    const bool activated = l + 1 < L || last_act;
    const bool reads_w = l > size_t(lowest) || (l == 0 && gx.defined());
    if ((reads_w && !mlp_operand(weights[l], g, widths[l + 1], widths[l])) ||
        (activated && !mlp_operand(z[l], g, rows, widths[l + 1])) ||
        (gz[l].defined() && !mlp_operand(gz[l], g, rows, widths[l + 1])))
      return false;
  }
  DeviceGuard dg(g.device().index());
  cudaStream_t s = stream_of(g);
  LaunchEncoder access(s);
  access.read(g);
  for (size_t l = size_t(lowest); l < L; ++l) {
    if (weights[l].defined()) access.read(weights[l]);
    if (z[l].defined()) access.read(z[l]);
    if (gz[l].defined()) access.write(gz[l]);
  }
  if (gx.defined()) access.write(gx);
  if (dt == kFloat64) launch_mlp_backward<double>(s, act, last_act, g, widths, z, weights, gx, gz, lowest);
  else launch_mlp_backward<float>(s, act, last_act, g, widths, z, weights, gx, gz, lowest);
  return true;
}

// out = a b, or out += a b (accumulate: beta 1; Float32/Float64); with a
// bias (one product, no accumulate: the bias [m] contiguous, of out's
// dtype) out = a b + bias along the rows, in the product's epilogue where
// cuBLASLt has one for the shape, else by an add after it.
void gemm(const Tensor& out, const Tensor& a, const Tensor& b, bool accumulate, const Tensor& bias) {
  int64_t B = out.sizes()[0], n = out.sizes()[1], m = out.sizes()[2], k = a.sizes()[2];
  if (out.numel() == 0) return;
  const bool with_bias = bias.defined();
  TG_INTERNAL_ASSERT(!with_bias || (B == 1 && !accumulate && bias.is_contiguous() && bias.numel() == m),
                     "bmm: a bias takes one product of [", m, "] outputs, not accumulated");
  auto add_bias = [&] {
    if (with_bias) raw::add_(out, bias);
  };
  if ((out.dtype() == kFloat32 || out.dtype() == kFloat64) && out.is_contiguous() && a.is_cuda() && b.is_cuda() &&
      a.dtype() == out.dtype() && b.dtype() == out.dtype() && small_product(B, n, m, k)) {
    small_gemm(out, a, b, accumulate, bias);
    return;
  }
  if (B == 1 && (out.dtype() == kFloat32 || out.dtype() == kFloat64) && long_thin(n, m, k) && out.is_contiguous() &&
      a.is_cuda() && b.is_cuda()) {
    gemm_long_thin(out, a, b, accumulate);
    add_bias();
    return;
  }
  if (!gemm_product(out, a, b, accumulate, bias)) add_bias();  // (after the product's launch encoder closed)
}

// gemm's product (not long and thin); true when it added the bias.
bool gemm_product(const Tensor& out, const Tensor& a, const Tensor& b, bool accumulate, const Tensor& bias) {
  const int64_t B = out.sizes()[0], n = out.sizes()[1], m = out.sizes()[2], k = a.sizes()[2];
  const bool with_bias = bias.defined();
  TG_CHECK(a.is_cuda() && b.is_cuda(), "bmm: expected both operands on ", out.device());
  DeviceGuard g(out.device().index());
  cudaStream_t s = stream_of(out);
  if (out.dtype() == kInt64) {
    TG_INTERNAL_ASSERT(!accumulate && !with_bias, "bmm: no accumulating Int64 product, nor one with a bias");
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
    return false;
  }
  // Row-major C[n, m] = A B is column-major C^T[m, n] = B^T A^T.
  Operand ob = as_operand(b), oa = as_operand(a);
  // Complex: cuBLAS's complex GEMM (cuBLASLt's plans are for the real ones).
  const bool cx = is_complex(out.dtype());
  TG_CHECK(kernels::is_floating_compute(out.dtype()) || cx, "bmm: no CUDA GEMM for dtype ", out.dtype(),
           " (it takes Float32, Float64, Complex64, Complex128 or Int64)");
  bool f64 = out.dtype() == kFloat64 || out.dtype() == kComplex128;
  cudaDataType_t type = cuda_data_type(out.dtype());
  cublasComputeType_t compute = f64                          ? CUBLAS_COMPUTE_64F
                                : g_allow_tf32.load() && !cx ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                             : CUBLAS_COMPUTE_32F;
  // 1 and 0 (or 1 when accumulating) in the compute type, as complex numbers
  // (imaginary part 0) for the complex GEMMs.
  double one64[2] = {1, 0}, zero64[2] = {0, 0};
  float one32[2] = {1, 0}, zero32[2] = {0, 0};
  const void* alpha = f64 ? static_cast<const void*>(one64) : one32;
  const void* beta = f64 ? static_cast<const void*>(accumulate ? one64 : zero64) : accumulate ? one32 : zero32;
  const int device = out.device().index();
  cublasOperation_t opb = ob.row_major ? CUBLAS_OP_N : CUBLAS_OP_T;
  cublasOperation_t opa = oa.row_major ? CUBLAS_OP_N : CUBLAS_OP_T;
  LaunchEncoder access(s);  // a capture records what the product touches
  access.read(ob.t);
  access.read(oa.t);
  access.write(out);  // read too when accumulating: a write covers both
  // (The epilogue's bias read 16-byte aligned: a view at an odd offset adds
  // after the product.)
  const bool epilogue = with_bias && alignment_of(bias.data_ptr()) >= 16 &&
                        tg::detail::switched_on<tg::detail::OffSwitch::kBiasEpilogue>();
  if (lt_enabled() && !cx) {
    std::shared_ptr<LtPlan> plan = lt_plan(device, f64, compute, opb, opa, m, n, k, ob.ld, B == 1 ? 0 : ob.batch_stride,
                                           oa.ld, B == 1 ? 0 : oa.batch_stride, B, alignment_of(ob.t.data_ptr()),
                                           alignment_of(oa.t.data_ptr()), alignment_of(out.data_ptr()), epilogue);
    if (epilogue && !plan->ok)  // no algorithm with the epilogue: the plain product, then the add
      plan = lt_plan(device, f64, compute, opb, opa, m, n, k, ob.ld, B == 1 ? 0 : ob.batch_stride, oa.ld,
                     B == 1 ? 0 : oa.batch_stride, B, alignment_of(ob.t.data_ptr()), alignment_of(oa.t.data_ptr()),
                     alignment_of(out.data_ptr()));
    const bool fused = epilogue && plan->ok && plan->bias;
    if (fused) {
      access.read(bias);
      const void* bp = bias.data_ptr();
      TG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof(bp)),
                      "linear");
    }
    if (plan->ok) {
      // Captured: the graph's own workspace of the plan's size; eager: the
      // stream's cuBLAS workspace.
      void* ws =
          plan->workspace > 0 ? access.workspace(plan->workspace, lib::cublas_workspace(device, s, "bmm")) : nullptr;
      TG_CUBLAS_CHECK(cublasLtMatmul(lib::cublaslt(device, "bmm"), plan->desc, alpha, ob.t.data_ptr(), plan->a,
                                     oa.t.data_ptr(), plan->b, beta, out.data_ptr(), plan->c, out.data_ptr(), plan->c,
                                     &plan->algo, ws, plan->workspace, s),
                      "bmm");
      return fused;
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
    return false;
  }
  TG_CUBLAS_CHECK(
      cublasGemmStridedBatchedEx(h, opb, opa, int(m), int(n), int(k), alpha, ob.t.data_ptr(), type, int(ob.ld),
                                 ob.batch_stride, oa.t.data_ptr(), type, int(oa.ld), oa.batch_stride, beta,
                                 out.data_ptr(), type, int(m), n * m, int(B), compute, CUBLAS_GEMM_DEFAULT),
      "bmm");
  return false;
}

void bmm_kernel(const Tensor& out, const Tensor& a, const Tensor& b) { gemm(out, a, b, false); }

void mm_accumulate_kernel(const Tensor& out, const Tensor& a, const Tensor& b) {
  gemm(out.unsqueeze(0), a.unsqueeze(0), b.unsqueeze(0), true);
}

void mm_bias_kernel(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias) {
  gemm(out.unsqueeze(0), a.unsqueeze(0), b.unsqueeze(0), false, bias);
}

}  // namespace

void set_allow_tf32(bool allow) { g_allow_tf32.store(allow); }
bool allow_tf32() { return g_allow_tf32.load(); }

void register_gemm(kernels::Backend& b) {
  b.bmm = bmm_kernel;
  b.mm_accumulate = mm_accumulate_kernel;
  b.mm_bias = mm_bias_kernel;
  b.mlp_forward = mlp_forward_kernel;
  b.mlp_backward = mlp_backward_kernel;
}

}  // namespace tg::cuda

// ---- the linear algebra family's kernel table (tensor/linalg_kernels.h) ------------------
// Every matrix arrives in batched column-major layout ([B, r, c], strides
// {r c, 1, r}), as LAPACK, cuSOLVER and cuBLAS read it: no transposes. Each
// slot opens one launch encoder naming what it reads and writes; a
// library's workspace, the int32 pivots and infos the libraries write, and
// the device arrays of matrix pointers the batched routines take come from
// the encoder's workspace request (the graph's own memory under capture).
// Batches of small matrices go to the batched routines (one launch for the
// batch), larger ones to a loop of the one-matrix routines (which are the
// fast ones there).
namespace tg::cuda {
namespace {

constexpr int kThreads = 256;
unsigned blocks_for(int64_t n) {
  return unsigned(std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, 65536)));
}

// Sizes up to which a batch (B > 1) goes to the batched routines: cuSOLVER's
// potrfBatched, cuBLAS's trsmBatched and getrfBatched/getrsBatched are built
// for many small matrices, and lose to a loop of the one-matrix routines
// (blocked, one launch each) on large ones.
constexpr int64_t kBatchedCholeskyMax = 512;
constexpr int64_t kBatchedTrsmMax = 512;
constexpr int64_t kBatchedLuMax = 128;
// The Jacobi routines (syevjBatched, gesvdjBatched) take at most 32 x 32.
// They are used for every batch of such matrices (B = 1 too: eager and
// captured calls then run the same algorithm), and are capturable; syevd
// and gesvd, for larger matrices, synchronize with the host and refuse a
// capture.
constexpr int64_t kJacobiMax = 32;

// A batch of column-major matrices as the libraries take them: element
// (b, i, j) at p + b * bs + i + j * ld.
struct Mat {
  char* p = nullptr;
  int64_t B = 0, r = 0, c = 0, ld = 1, bs = 0;
  template <class T> T* at(int64_t b) const { return reinterpret_cast<T*>(p) + b * bs; }
  bool packed() const { return ld == std::max<int64_t>(r, 1) && (B == 1 || bs == ld * c); }
};

Mat mat(const Tensor& t, const char* op, const char* name) {
  TG_INTERNAL_ASSERT(t.defined() && t.dim() == 3 && t.is_cuda(), op, ": the CUDA kernel expected ", name,
                     " as a [B, r, c] CUDA tensor");
  Mat m;
  m.p = static_cast<char*>(t.data_ptr());
  m.B = t.sizes()[0];
  m.r = t.sizes()[1];
  m.c = t.sizes()[2];
  m.ld = m.c > 1 ? t.strides()[2] : std::max<int64_t>(m.r, 1);
  m.bs = m.B > 1 ? t.strides()[0] : m.ld * m.c;
  TG_INTERNAL_ASSERT((m.r <= 1 || t.strides()[1] == 1) && m.ld >= std::max<int64_t>(m.r, 1), op, ": ", name,
                     " is not in batched column-major layout (sizes ", shape_str(t.sizes()), ", strides ",
                     shape_str(t.strides()), ")");
  TG_CHECK(m.r <= INT_MAX && m.c <= INT_MAX && m.ld <= INT_MAX && m.B <= INT_MAX, op, ": ", name, " of shape ",
           shape_str(t.sizes()), " exceeds the 32-bit sizes that cuSOLVER and cuBLAS take");
  return m;
}

// The one packed layout the routines that take a whole batch at once
// (syevjBatched, gesvdjBatched) read.
void check_packed(const Mat& m, const char* op, const char* name) {
  TG_INTERNAL_ASSERT(m.packed(), op, ": ", name, " is not a packed batch of column-major matrices (ld ", m.ld,
                     ", batch stride ", m.bs, ")");
}

// cuSOLVER's and cuBLAS's routines by element type.
template <class T> struct Lib;
#define TG_LAPACK_ROUTINES(T, p)                                                              \
  template <> struct Lib<T> {                                                                 \
    static constexpr auto potrf_bufferSize = cusolverDn##p##potrf_bufferSize;                 \
    static constexpr auto potrf = cusolverDn##p##potrf;                                       \
    static constexpr auto potrfBatched = cusolverDn##p##potrfBatched;                         \
    static constexpr auto getrf_bufferSize = cusolverDn##p##getrf_bufferSize;                 \
    static constexpr auto getrf = cusolverDn##p##getrf;                                       \
    static constexpr auto getrs = cusolverDn##p##getrs;                                       \
    static constexpr auto syevd_bufferSize = cusolverDn##p##syevd_bufferSize;                 \
    static constexpr auto syevd = cusolverDn##p##syevd;                                       \
    static constexpr auto syevjBatched_bufferSize = cusolverDn##p##syevjBatched_bufferSize;   \
    static constexpr auto syevjBatched = cusolverDn##p##syevjBatched;                         \
    static constexpr auto geqrf_bufferSize = cusolverDn##p##geqrf_bufferSize;                 \
    static constexpr auto geqrf = cusolverDn##p##geqrf;                                       \
    static constexpr auto orgqr_bufferSize = cusolverDn##p##orgqr_bufferSize;                 \
    static constexpr auto orgqr = cusolverDn##p##orgqr;                                       \
    static constexpr auto gesvd_bufferSize = cusolverDn##p##gesvd_bufferSize;                 \
    static constexpr auto gesvd = cusolverDn##p##gesvd;                                       \
    static constexpr auto gesvdjBatched_bufferSize = cusolverDn##p##gesvdjBatched_bufferSize; \
    static constexpr auto gesvdjBatched = cusolverDn##p##gesvdjBatched;                       \
    static constexpr auto trsm = cublas##p##trsm_v2;                                          \
    static constexpr auto trsmBatched = cublas##p##trsmBatched;                               \
    static constexpr auto getrfBatched = cublas##p##getrfBatched;                             \
    static constexpr auto getrsBatched = cublas##p##getrsBatched;                             \
  };
TG_LAPACK_ROUTINES(float, S)
TG_LAPACK_ROUTINES(double, D)
#undef TG_LAPACK_ROUTINES

// The real floating dtypes (the dtype list's Floating category); another
// dtype is refused naming the op.
template <class F> void dispatch_float(ScalarType dtype, const char* op, F&& f) {
  kernels::dispatch_floating(dtype, op, std::forward<F>(f));
}

// The current device's current stream (the caller's DeviceGuard made the
// tensor's device current).
cudaStream_t stream_on(int device) { return static_cast<cudaStream_t>(current_stream(device).handle()); }

// A workspace size query: host-side only, allowed beside a capture.
template <class Query> int query_lwork(Query&& q) {
  detail::RelaxedCaptureMode relaxed;
  int lwork = 0;
  q(&lwork);
  return std::max(lwork, 1);
}

// ---- small kernels around the library calls -------------------------------------------

// ptrs[b] = base + b * stride: the device arrays of matrix pointers the
// batched routines take (made on the device: capturable, no host copy).
template <class T> __global__ void batch_pointers_k(T** ptrs, T* base, int64_t stride, int64_t B) {
  for (int64_t b = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; b < B; b += int64_t(gridDim.x) * blockDim.x)
    ptrs[b] = base + b * stride;
}

template <class T> T** batch_pointers(LaunchEncoder& enc, const Mat& m, cudaStream_t s, const char* op) {
  T** ptrs = enc.workspace_for<T*>(m.B);
  batch_pointers_k<T><<<blocks_for(m.B), kThreads, 0, s>>>(ptrs, m.at<T>(0), m.bs, m.B);
  TG_CUDA_CHECK(cudaGetLastError(), op);
  return ptrs;
}

// The libraries' int32 pivots and infos to the contract's Int64, and back.
__global__ void widen_k(const int* in, int64_t* out, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = in[i];
}

void widen(const int* in, const Tensor& out, int64_t n, cudaStream_t s, const char* op) {
  widen_k<<<blocks_for(n), kThreads, 0, s>>>(in, out.data_ptr<int64_t>(), n);
  TG_CUDA_CHECK(cudaGetLastError(), op);
}

// out[b * n + i] = in[b * in_stride + i] (in_stride 0: one row for every b).
__global__ void narrow_k(const int64_t* in, int64_t in_stride, int* out, int64_t B, int64_t n) {
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < B * n; t += int64_t(gridDim.x) * blockDim.x)
    out[t] = int(in[(t / n) * in_stride + t % n]);
}

// dst(b, i, j) for i < rows, j < cols of each matrix, from src:
enum MatrixFill : int {
  kCopy = 0,        // src(b, i, j)
  kTranspose = 1,   // src(b, j, i)
  kUpper = 2,       // src(b, i, j) on and above the diagonal, else 0 (R of a QR)
  kReflectors = 3,  // src(b, i, j) in the first k columns, else the identity's (orgqr's input)
};
template <class T> struct MatPtr {
  T* p;
  int64_t ld, bs;
  __device__ T& operator()(int64_t b, int64_t i, int64_t j) const { return p[b * bs + i + j * ld]; }
};
template <class T> MatPtr<T> ptr_of(const Mat& m) { return {m.at<T>(0), m.ld, m.bs}; }

template <class T>
__global__ void fill_matrix_k(MatPtr<T> dst, MatPtr<T> src, int64_t B, int64_t rows, int64_t cols, int mode,
                              int64_t k) {
  const int64_t total = B * rows * cols;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = t % rows, j = (t / rows) % cols, b = t / (rows * cols);
    T v;
    switch (mode) {
      case kTranspose: v = src(b, j, i); break;
      case kUpper: v = i <= j ? src(b, i, j) : T(0); break;
      case kReflectors: v = j < k ? src(b, i, j) : T(i == j ? 1 : 0); break;
      default: v = src(b, i, j); break;
    }
    dst(b, i, j) = v;
  }
}

// dst's [rows, cols] corner of every matrix from src (fill_matrix_k).
template <class T>
void fill_matrix(const Mat& dst, const Mat& src, int64_t rows, int64_t cols, MatrixFill mode, int64_t k, cudaStream_t s,
                 const char* op) {
  const int64_t total = dst.B * rows * cols;
  if (total == 0) return;
  fill_matrix_k<T>
      <<<blocks_for(total), kThreads, 0, s>>>(ptr_of<T>(dst), ptr_of<T>(src), dst.B, rows, cols, int(mode), k);
  TG_CUDA_CHECK(cudaGetLastError(), op);
}

// A fresh batched column-major [B, r, c] tensor (a temporary).
Tensor fortran_empty(int64_t B, int64_t r, int64_t c, const Tensor& like) {
  return raw::transpose(tg::detail::new_empty({B, c, r}, like.dtype(), like.device()), 1, 2);
}

// Host objects of the Jacobi routines (their tolerance, sweeps and order),
// read when the call is queued.
struct SyevjParams {
  syevjInfo_t p = nullptr;
  explicit SyevjParams(const char* op) {
    TG_CUSOLVER_CHECK(cusolverDnCreateSyevjInfo(&p), op);
    TG_CUSOLVER_CHECK(cusolverDnXsyevjSetSortEig(p, 1), op);  // ascending
  }
  ~SyevjParams() { cusolverDnDestroySyevjInfo(p); }
};
struct GesvdjParams {
  gesvdjInfo_t p = nullptr;
  explicit GesvdjParams(const char* op) {
    TG_CUSOLVER_CHECK(cusolverDnCreateGesvdjInfo(&p), op);
    TG_CUSOLVER_CHECK(cusolverDnXgesvdjSetSortEig(p, 1), op);  // descending
  }
  ~GesvdjParams() { cusolverDnDestroyGesvdjInfo(p); }
};

// One slot's call on t's device: the device guard, its current stream and
// the call's launch encoder (members in that order of construction).
struct Call {
  explicit Call(const Tensor& t) : device(t.device().index()), guard(device), s(stream_on(device)), enc(s) {}
  // The encoder names what the call reads and writes (undefined: skipped).
  Call(const Tensor& t, std::initializer_list<const Tensor*> reads, std::initializer_list<const Tensor*> writes)
      : Call(t) {
    for (const Tensor* r : reads)
      if (r->defined()) enc.read(*r);
    for (const Tensor* w : writes)
      if (w->defined()) enc.write(*w);
  }
  const int device;
  DeviceGuard guard;
  cudaStream_t s;
  LaunchEncoder enc;
};

// ---- the slots --------------------------------------------------------------------------

// Zeros where i > j (strict_lower: U's other triangle) or i < j in each
// matrix: a thread per element of one matrix, the batch along y.
template <class T> __global__ void zero_triangle_k(MatPtr<T> m, int64_t B, int n, bool strict_lower) {
  const int t = int(blockIdx.x) * int(blockDim.x) + int(threadIdx.x);
  if (t >= n * n) return;
  const int i = t % n, j = t / n;
  if (strict_lower ? i <= j : i >= j) return;
  for (int64_t b = blockIdx.y; b < B; b += gridDim.y)
    m(b, i, j) = T(0);
}

// tril/triu after a copy: m [B, r, c] row-major := 0 where j - i > k
// (keep_lower) or j - i < k; U: an unsigned type of the element's size.
// I: the index type, uint32_t when every index fits (64-bit division is
// several times dearer).
template <class U, class I>
__global__ void zero_rowmajor_triangle_k(U* m, I total, I r, I c, int64_t k, bool keep_lower) {
  for (I t = I(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += I(gridDim.x) * blockDim.x) {
    const int64_t j = int64_t(t % c), i = int64_t((t / c) % r);
    if (keep_lower ? j - i > k : j - i < k) m[t] = U(0);
  }
}
void zero_triangle(const Tensor& m, int64_t k, bool keep_lower) {
  const char* op = keep_lower ? "tril" : "triu";
  TG_INTERNAL_ASSERT(m.dim() == 3 && m.is_contiguous(), op, ": the CUDA kernel expected a contiguous [B, r, c]");
  Call call(m, {}, {&m});
  const int64_t total = m.numel(), r = m.size(1), c = m.size(2);
  const unsigned grid = unsigned(std::min<int64_t>((total + kThreads - 1) / kThreads, 65536));
  auto run = [&](auto u, auto idx) {
    using U = decltype(u);
    using I = decltype(idx);
    zero_rowmajor_triangle_k<U, I>
        <<<grid, kThreads, 0, call.s>>>(static_cast<U*>(m.data_ptr()), I(total), I(r), I(c), k, keep_lower);
  };
  auto sized = [&](auto u) {
    if (total + int64_t(kThreads) * 65536 < int64_t(UINT32_MAX)) run(u, uint32_t{});
    else run(u, int64_t{});
  };
  switch (element_size(m.dtype())) {
    case 1: sized(uint8_t{}); break;
    case 2: sized(uint16_t{}); break;
    case 4: sized(uint32_t{}); break;
    case 8: sized(uint64_t{}); break;
    default: TG_INTERNAL_ASSERT(false, op, ": element size ", element_size(m.dtype()));
  }
  TG_CUDA_CHECK(cudaGetLastError(), op);
}

template <class T> void cholesky_impl(const Tensor& a, const Tensor& info, bool upper) {
  const char* op = "linalg.cholesky";
  const Mat A = mat(a, op, "A");
  const int64_t B = A.B;
  const int n = int(A.r), lda = int(A.ld);
  Call call(a, {}, {&a, &info});
  const int device = call.device;
  cudaStream_t s = call.s;
  LaunchEncoder& enc = call.enc;
  cusolverDnHandle_t h = lib::cusolver_dn(device, s, op);
  const cublasFillMode_t uplo = upper ? CUBLAS_FILL_MODE_UPPER : CUBLAS_FILL_MODE_LOWER;
  int* info32 = enc.workspace_for<int>(B);
  if (B > 1 && n <= kBatchedCholeskyMax) {
    T** ptrs = batch_pointers<T>(enc, A, s, op);
    TG_CUSOLVER_CHECK(Lib<T>::potrfBatched(h, uplo, n, ptrs, lda, info32, int(B)), op);
  } else {
    const int lwork =
        query_lwork([&](int* lw) { TG_CUSOLVER_CHECK(Lib<T>::potrf_bufferSize(h, uplo, n, A.at<T>(0), lda, lw), op); });
    T* work = enc.workspace_for<T>(lwork);
    for (int64_t b = 0; b < B; ++b)
      TG_CUSOLVER_CHECK(Lib<T>::potrf(h, uplo, n, A.at<T>(b), lda, work, lwork, info32 + b), op);
  }
  // The other triangle: potrf leaves A's values there, and potrfBatched
  // writes it too (measured on an H100: values in the strict lower triangle
  // of an upper factorization).
  if (n > 1) {
    const dim3 grid(unsigned((n * n + kThreads - 1) / kThreads), unsigned(std::min<int64_t>(B, 65535)), 1);
    zero_triangle_k<T><<<grid, kThreads, 0, s>>>(ptr_of<T>(A), B, n, upper);
    TG_CUDA_CHECK(cudaGetLastError(), op);
  }
  widen(info32, info, B, s, op);
}

// Triangular solves of order n <= kSmallTrsmMax with up to
// small_trsm_max_rhs() right-hand sides, b in any layout: a block per
// (matrix, chunk of <= 64 columns) holds op(A), the reciprocals of its
// diagonal and the chunk in shared memory (staged with coalesced loads in
// b's own memory order); a thread per (row, column group) keeps its row's
// values of up to 16 columns in registers, and the substitution takes a step
// per row: the row's threads scale by the reciprocal and publish x_i, every
// later row subtracts its multiple (one barrier a step). cuBLAS's
// trsmBatched runs these sizes at ~2 TFLOP/s (10^4 64 x 64 systems with 64
// right-hand sides: 1.4 ms on an H200, where a batched GEMM of the same shape
// takes 0.22 ms): the bottleneck of the batched Cholesky gradient, PyTorch's
// and JAX's too. TG_SMALL_TRSM=0 leaves more than 4 right-hand sides to it.
constexpr int kSmallTrsmMax = 64;
int small_trsm_max_rhs() { return tg::detail::switched_on<tg::detail::OffSwitch::kSmallTrsm>() ? 64 : 4; }
constexpr int kSmallTrsmGroups = 4;  // column groups (blockDim.y)
template <class T, int CPT>
__global__ void small_trsm_k(const T* a, int64_t a_ld, int64_t a_bs, T* x, int64_t x_rs, int64_t x_cs, int64_t x_bs,
                             int n, int k, bool lower, bool unit, bool trans) {
  extern __shared__ unsigned char smem[];
  const int G = int(blockDim.y), W = G * CPT;  // the chunk's columns
  T* sa = reinterpret_cast<T*>(smem);          // op(A): (i, j) at i * (n + 1) + j
  T* rd = sa + n * (n + 1);                    // 1 / op(A)(i, i)
  T* sx = rd + n;                              // the chunk: (i, w) at i * W + w
  const int64_t b = blockIdx.x;
  const int c0 = int(blockIdx.y) * W, cols = W < k - c0 ? W : k - c0;
  const int tid = int(threadIdx.y * blockDim.x + threadIdx.x), threads = int(blockDim.x * blockDim.y);
  const T* ab = a + b * a_bs;
  for (int t = tid; t < n * n; t += threads) {  // coalesced along A's columns
    const int r = t % n, c = t / n;
    const T v = ab[r + int64_t(c) * a_ld];
    if (trans) sa[c * (n + 1) + r] = v;
    else sa[r * (n + 1) + c] = v;
  }
  T* xb = x + b * x_bs + int64_t(c0) * x_cs;
  const bool rows_inner = x_cs != 1;  // b column-major-like: walk rows fastest
  for (int t = tid; t < n * cols; t += threads) {
    const int r = rows_inner ? t % n : t / cols, c = rows_inner ? t / n : t % cols;
    sx[r * W + c] = xb[r * x_rs + int64_t(c) * x_cs];
  }
  __syncthreads();
  for (int i = tid; i < n; i += threads)
    rd[i] = unit ? T(1) : T(1) / sa[i * (n + 1) + i];
  const int r = int(threadIdx.x), g = int(threadIdx.y);
  T val[CPT];
#pragma unroll
  for (int q = 0; q < CPT; ++q)
    val[q] = r < n ? sx[r * W + q * G + g] : T(0);
  __syncthreads();
  for (int step = 0; step < n; ++step) {
    const int i = lower ? step : n - 1 - step;
    if (r == i) {
      const T d = rd[i];
#pragma unroll
      for (int q = 0; q < CPT; ++q) {
        val[q] *= d;
        sx[i * W + q * G + g] = val[q];
      }
    }
    __syncthreads();  // x_i published (row i of sx: no other thread writes it)
    if (r < n && (lower ? r > i : r < i)) {
      const T l = sa[r * (n + 1) + i];
#pragma unroll
      for (int q = 0; q < CPT; ++q)
        val[q] -= l * sx[i * W + q * G + g];
    }
  }
  // Every row was published at its step: sx holds the solution.
  __syncthreads();
  for (int t = tid; t < n * cols; t += threads) {
    const int r = rows_inner ? t % n : t / cols, c = rows_inner ? t / n : t % cols;
    xb[r * x_rs + int64_t(c) * x_cs] = sx[r * W + c];
  }
}

// b [B, n, k] := op(A)^-1 b for A [A.B, n, n] column-major (a_stride 0: one
// A for the batch), b with any strides.
template <class T>
void small_trsm(const Mat& A, int64_t a_stride, const Tensor& b, bool upper, bool unit, bool transpose, cudaStream_t s,
                const char* op) {
  const int64_t B = b.sizes()[0];
  const int n = int(b.sizes()[1]), k = int(b.sizes()[2]);
  const int groups = std::min(kSmallTrsmGroups, k);
  const int per_thread = (k + groups - 1) / groups;
  // Columns per thread: a power of two up to 16 covering k where shared
  // memory allows (48 KiB, the static limit).
  const size_t fixed = size_t(n) * size_t(n + 2) * sizeof(T), limit = 48 * 1024;
  int cpt = 1;
  while (cpt < per_thread && cpt < 16 && fixed + size_t(n) * size_t(groups * cpt * 2) * sizeof(T) <= limit)
    cpt *= 2;
  const int width = groups * cpt;
  const dim3 block(unsigned(std::max(32, (n + 31) / 32 * 32)), unsigned(groups), 1);
  const dim3 grid(unsigned(B), unsigned((k + width - 1) / width), 1);
  TG_CHECK(B <= INT32_MAX && grid.y <= 65535, op, ": ", B, " systems of ", k, " right-hand sides exceed one launch");
  const size_t shared = fixed + size_t(n) * size_t(width) * sizeof(T);
  const int64_t xb = B > 1 ? b.strides()[0] : 0, xr = b.strides()[1], xc = b.strides()[2];
  T* xp = static_cast<T*>(b.data_ptr());
  // op(A) is lower triangular when A is lower and not transposed, or upper
  // and transposed: forward substitution; else backward.
  const bool lower = upper == transpose;
  auto launch = [&](auto kernel) {
    kernel<<<grid, block, shared, s>>>(A.at<T>(0), A.ld, a_stride, xp, xr, xc, xb, n, k, lower, unit, transpose);
  };
  switch (cpt) {
    case 1: launch(small_trsm_k<T, 1>); break;
    case 2: launch(small_trsm_k<T, 2>); break;
    case 4: launch(small_trsm_k<T, 4>); break;
    case 8: launch(small_trsm_k<T, 8>); break;
    default: launch(small_trsm_k<T, 16>); break;
  }
  TG_CUDA_CHECK(cudaGetLastError(), op);
}

template <class T> void triangular_solve_impl(const Tensor& a, const Tensor& b, bool upper, bool unit, bool transpose) {
  const char* op = "linalg.solve_triangular";
  const Mat A = mat(a, op, "A");
  Call call(b, {&a}, {&b});
  const int device = call.device;
  cudaStream_t s = call.s;
  LaunchEncoder& enc = call.enc;
  const int64_t a_stride = A.B == 1 ? 0 : A.bs;  // one A for every right-hand side
  if (A.r <= kSmallTrsmMax && b.sizes()[2] <= small_trsm_max_rhs()) {
    TG_INTERNAL_ASSERT(b.dim() == 3 && b.sizes()[1] == A.r && (A.B == b.sizes()[0] || A.B == 1), op,
                       ": mismatched operands");
    small_trsm<T>(A, a_stride, b, upper, unit, transpose, s, op);
    return;
  }
  const Mat X = mat(b, op, "B");
  TG_INTERNAL_ASSERT(A.r == A.c && A.r == X.r && (A.B == X.B || A.B == 1), op, ": mismatched operands");
  const int64_t B = X.B;
  const int n = int(X.r), k = int(X.c);
  cublasHandle_t h = lib::cublas(device, s, enc, op);
  const cublasFillMode_t uplo = upper ? CUBLAS_FILL_MODE_UPPER : CUBLAS_FILL_MODE_LOWER;
  const cublasOperation_t trans = transpose ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasDiagType_t diag = unit ? CUBLAS_DIAG_UNIT : CUBLAS_DIAG_NON_UNIT;
  const T one = 1;
  if (B > 1 && n <= kBatchedTrsmMax) {
    Mat Ab = A;
    Ab.B = B;
    Ab.bs = a_stride;
    T** pa = batch_pointers<T>(enc, Ab, s, op);
    T** px = batch_pointers<T>(enc, X, s, op);
    TG_CUBLAS_CHECK(
        Lib<T>::trsmBatched(h, CUBLAS_SIDE_LEFT, uplo, trans, diag, n, k, &one, pa, int(A.ld), px, int(X.ld), int(B)),
        op);
  } else {
    for (int64_t i = 0; i < B; ++i)
      TG_CUBLAS_CHECK(Lib<T>::trsm(h, CUBLAS_SIDE_LEFT, uplo, trans, diag, n, k, &one, A.at<T>(0) + i * a_stride,
                                   int(A.ld), X.at<T>(i), int(X.ld)),
                      op);
  }
}

template <class T> void lu_factor_impl(const Tensor& a, const Tensor& pivots, const Tensor& info) {
  const char* op = "linalg.lu_factor";
  const Mat A = mat(a, op, "A");
  TG_INTERNAL_ASSERT(A.r == A.c, op, ": the CUDA kernel takes square matrices");
  const int64_t B = A.B;
  const int n = int(A.r), lda = int(A.ld);
  Call call(a, {}, {&a, &pivots, &info});
  const int device = call.device;
  cudaStream_t s = call.s;
  LaunchEncoder& enc = call.enc;
  int* piv32 = enc.workspace_for<int>(B * n);
  int* info32 = enc.workspace_for<int>(B);
  if (B > 1 && n <= kBatchedLuMax) {
    cublasHandle_t h = lib::cublas(device, s, enc, op);
    T** ptrs = batch_pointers<T>(enc, A, s, op);
    TG_CUBLAS_CHECK(Lib<T>::getrfBatched(h, n, ptrs, lda, piv32, info32, int(B)), op);
  } else {
    cusolverDnHandle_t h = lib::cusolver_dn(device, s, op);
    const int lwork =
        query_lwork([&](int* lw) { TG_CUSOLVER_CHECK(Lib<T>::getrf_bufferSize(h, n, n, A.at<T>(0), lda, lw), op); });
    T* work = enc.workspace_for<T>(lwork);
    for (int64_t b = 0; b < B; ++b)
      TG_CUSOLVER_CHECK(Lib<T>::getrf(h, n, n, A.at<T>(b), lda, work, piv32 + b * n, info32 + b), op);
  }
  widen(piv32, pivots, B * n, s, op);
  widen(info32, info, B, s, op);
}

template <class T> void lu_solve_impl(const Tensor& lu, const Tensor& pivots, const Tensor& b, bool transpose) {
  const char* op = "linalg.lu_solve";
  const Mat LU = mat(lu, op, "LU"), X = mat(b, op, "B");
  TG_INTERNAL_ASSERT(LU.r == LU.c && LU.r == X.r && (LU.B == X.B || LU.B == 1) && pivots.numel() == LU.B * LU.r, op,
                     ": mismatched operands");
  const int64_t B = X.B;
  const int n = int(X.r), k = int(X.c);
  Call call(b, {&lu, &pivots}, {&b});
  const int device = call.device;
  cudaStream_t s = call.s;
  LaunchEncoder& enc = call.enc;
  const int64_t lu_stride = LU.B == 1 ? 0 : LU.bs;  // one factorization for every right-hand side
  // The pivots as the libraries take them: int32, one row per right-hand side.
  int* piv32 = enc.workspace_for<int>(B * n);
  narrow_k<<<blocks_for(B * n), kThreads, 0, s>>>(pivots.data_ptr<int64_t>(), LU.B == 1 ? 0 : n, piv32, B, n);
  TG_CUDA_CHECK(cudaGetLastError(), op);
  const cublasOperation_t trans = transpose ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (B > 1 && n <= kBatchedLuMax) {
    cublasHandle_t h = lib::cublas(device, s, enc, op);
    Mat Lb = LU;
    Lb.B = B;
    Lb.bs = lu_stride;
    T** pa = batch_pointers<T>(enc, Lb, s, op);
    T** px = batch_pointers<T>(enc, X, s, op);
    int host_info = 0;  // the arguments' validity, known when the call returns
    TG_CUBLAS_CHECK(Lib<T>::getrsBatched(h, trans, n, k, pa, int(LU.ld), piv32, px, int(X.ld), &host_info, int(B)), op);
    TG_INTERNAL_ASSERT(host_info == 0, op, ": cublasgetrsBatched rejected argument ", -host_info);
  } else {
    cusolverDnHandle_t h = lib::cusolver_dn(device, s, op);
    int* dinfo = enc.workspace_for<int>(1);  // argument checks only (the op checked them)
    for (int64_t i = 0; i < B; ++i)
      TG_CUSOLVER_CHECK(Lib<T>::getrs(h, trans, n, k, LU.at<T>(0) + i * lu_stride, int(LU.ld), piv32 + i * n,
                                      X.at<T>(i), int(X.ld), dinfo),
                        op);
  }
}

// perm := the permutation that LAPACK's 1-based pivots encode (one thread
// per matrix: the interchanges are sequential). A pivot out of range (the op
// checked them) is skipped rather than written through.
__global__ void pivots_to_permutation_k(const int64_t* piv, int64_t* perm, int64_t B, int64_t n) {
  for (int64_t b = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; b < B; b += int64_t(gridDim.x) * blockDim.x) {
    int64_t* p = perm + b * n;
    const int64_t* v = piv + b * n;
    for (int64_t i = 0; i < n; ++i)
      p[i] = i;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t j = v[i] - 1;
      if (j < 0 || j >= n || j == i) continue;
      const int64_t t = p[i];
      p[i] = p[j];
      p[j] = t;
    }
  }
}

void pivots_to_permutation(const Tensor& pivots, const Tensor& perm) {
  const char* op = "linalg.lu_unpack";
  const int64_t B = perm.sizes()[0], n = perm.sizes()[1];
  if (B * n == 0) return;
  DeviceGuard g(perm.device().index());
  cudaStream_t s = stream_on(perm.device().index());
  LaunchEncoder enc(s);
  enc.read(pivots);
  enc.write(perm);
  pivots_to_permutation_k<<<blocks_for(B), kThreads, 0, s>>>(pivots.data_ptr<int64_t>(), perm.data_ptr<int64_t>(), B,
                                                             n);
  TG_CUDA_CHECK(cudaGetLastError(), op);
}

template <class T> void eigh_impl(const Tensor& a, const Tensor& w, const Tensor& v, const Tensor& info) {
  const char* op = "linalg.eigh";
  const Mat A = mat(a, op, "A");
  TG_INTERNAL_ASSERT(A.r == A.c && w.is_contiguous() && w.numel() == A.B * A.r, op, ": mismatched operands");
  const bool vectors = v.defined();
  // cuSOLVER overwrites its input with the eigenvectors: it runs in v, a
  // copy of a (in a itself for values only).
  const Mat V = vectors ? mat(v, op, "V") : A;
  const int64_t B = A.B;
  const int n = int(A.r);
  const int device = a.device().index();
  DeviceGuard g(device);
  if (n > kJacobiMax)
    detail::check_not_capturing(
        "linalg.eigh (cuSOLVER's syevd, which larger than 32 x 32 matrices take, "
        "synchronizes with the host)",
        current_stream(device));
  cudaStream_t s = stream_on(device);
  LaunchEncoder enc(s);
  enc.read(a);
  enc.write(v);
  enc.write(w);
  enc.write(info);
  if (vectors) fill_matrix<T>(V, A, n, n, kCopy, 0, s, op);
  cusolverDnHandle_t h = lib::cusolver_dn(device, s, op);
  const cusolverEigMode_t jobz = vectors ? CUSOLVER_EIG_MODE_VECTOR : CUSOLVER_EIG_MODE_NOVECTOR;
  T* W = w.data_ptr<T>();
  int* info32 = enc.workspace_for<int>(B);
  if (n <= kJacobiMax) {
    check_packed(V, op, "V");
    SyevjParams params(op);
    const int lwork = query_lwork([&](int* lw) {
      TG_CUSOLVER_CHECK(Lib<T>::syevjBatched_bufferSize(h, jobz, CUBLAS_FILL_MODE_LOWER, n, V.at<T>(0), int(V.ld), W,
                                                        lw, params.p, int(B)),
                        op);
    });
    T* work = enc.workspace_for<T>(lwork);
    TG_CUSOLVER_CHECK(Lib<T>::syevjBatched(h, jobz, CUBLAS_FILL_MODE_LOWER, n, V.at<T>(0), int(V.ld), W, work, lwork,
                                           info32, params.p, int(B)),
                      op);
  } else {
    const int lwork = query_lwork([&](int* lw) {
      TG_CUSOLVER_CHECK(Lib<T>::syevd_bufferSize(h, jobz, CUBLAS_FILL_MODE_LOWER, n, V.at<T>(0), int(V.ld), W, lw), op);
    });
    T* work = enc.workspace_for<T>(lwork);
    for (int64_t b = 0; b < B; ++b)
      TG_CUSOLVER_CHECK(
          Lib<T>::syevd(h, jobz, CUBLAS_FILL_MODE_LOWER, n, V.at<T>(b), int(V.ld), W + b * n, work, lwork, info32 + b),
          op);
  }
  widen(info32, info, B, s, op);
}

template <class T> void qr_impl(const Tensor& a, const Tensor& q, const Tensor& r) {
  const char* op = "linalg.qr";
  const Mat A = mat(a, op, "A"), R = mat(r, op, "R");
  const int64_t B = A.B, k = std::min(A.r, A.c);
  const int m = int(A.r), n = int(A.c), lda = int(A.ld);
  Mat Q;
  if (q.defined()) Q = mat(q, op, "Q");
  const int nq = q.defined() ? int(Q.c) : 0;
  TG_INTERNAL_ASSERT(R.c == n && R.r <= m && (!q.defined() || (Q.r == m && nq >= k && nq <= m)), op,
                     ": mismatched operands");
  Call call(a, {}, {&a, &q, &r});
  const int device = call.device;
  cudaStream_t s = call.s;
  LaunchEncoder& enc = call.enc;
  cusolverDnHandle_t h = lib::cusolver_dn(device, s, op);
  T* tau = enc.workspace_for<T>(B * k);
  int* dinfo = enc.workspace_for<int>(1);  // argument checks only
  int lwork =
      query_lwork([&](int* lw) { TG_CUSOLVER_CHECK(Lib<T>::geqrf_bufferSize(h, m, n, A.at<T>(0), lda, lw), op); });
  if (q.defined())
    lwork =
        std::max(lwork, query_lwork([&](int* lw) {
                   TG_CUSOLVER_CHECK(Lib<T>::orgqr_bufferSize(h, m, nq, int(k), Q.at<T>(0), int(Q.ld), tau, lw), op);
                 }));
  T* work = enc.workspace_for<T>(lwork);
  for (int64_t b = 0; b < B; ++b)
    TG_CUSOLVER_CHECK(Lib<T>::geqrf(h, m, n, A.at<T>(b), lda, tau + b * k, work, lwork, dinfo), op);
  // R: the factored a's upper triangle (its top R.r rows; rows past n are
  // zero); then Q from the reflectors below the diagonal.
  fill_matrix<T>(R, A, R.r, n, kUpper, 0, s, op);
  if (!q.defined()) return;
  fill_matrix<T>(Q, A, m, nq, kReflectors, k, s, op);
  for (int64_t b = 0; b < B; ++b)
    TG_CUSOLVER_CHECK(Lib<T>::orgqr(h, m, nq, int(k), Q.at<T>(b), int(Q.ld), tau + b * k, work, lwork, dinfo), op);
}

template <class T>
void svd_impl(const Tensor& a, const Tensor& u, const Tensor& s_out, const Tensor& vh, const Tensor& info) {
  const char* op = "linalg.svd";
  const Mat A = mat(a, op, "A");
  const int64_t B = A.B, m = A.r, n = A.c, k = std::min(m, n);
  TG_INTERNAL_ASSERT(s_out.is_contiguous() && s_out.numel() == B * k, op, ": mismatched operands");
  const bool vectors = u.defined() && vh.defined();
  Mat U, VH;
  if (vectors) {
    U = mat(u, op, "U");
    VH = mat(vh, op, "Vh");
    TG_INTERNAL_ASSERT(U.r == m && VH.c == n && U.c >= k && VH.r >= k, op, ": mismatched operands");
  }
  const int64_t ku = vectors ? U.c : k, kv = vectors ? VH.r : k;
  const bool jacobi = m <= kJacobiMax && n <= kJacobiMax;
  const int device = a.device().index();
  DeviceGuard g(device);
  if (!jacobi)
    detail::check_not_capturing(
        "linalg.svd (cuSOLVER's gesvd, which matrices larger than 32 x 32 take, "
        "synchronizes with the host)",
        current_stream(device));
  // Temporaries (before the encoder: allocation is not stream work):
  // the Jacobi routine's full U [m, m] and V [n, n]; for gesvd of a wide
  // matrix (m < n, which gesvd does not take) A^T and its factors.
  Tensor t_u, t_v, t_a;
  if (jacobi) {
    t_u = fortran_empty(B, m, m, a);
    t_v = fortran_empty(B, n, n, a);
  } else if (m < n) {
    t_a = fortran_empty(B, n, m, a);
    if (vectors) {
      t_u = fortran_empty(B, n, kv, a);  // U' of A^T = U' S V'^T: vh = U'^T
      t_v = fortran_empty(B, m, m, a);   // V'^T: u = V'
    }
  }
  cudaStream_t s = stream_on(device);
  LaunchEncoder enc(s);
  enc.write(a);
  enc.write(u);
  enc.write(s_out);
  enc.write(vh);
  enc.write(info);
  enc.write(t_u);
  enc.write(t_v);
  enc.write(t_a);
  cusolverDnHandle_t h = lib::cusolver_dn(device, s, op);
  T* S = s_out.data_ptr<T>();
  int* info32 = enc.workspace_for<int>(B);
  if (jacobi) {
    check_packed(A, op, "A");
    const Mat TU = mat(t_u, op, "U"), TV = mat(t_v, op, "V");
    const cusolverEigMode_t jobz = vectors ? CUSOLVER_EIG_MODE_VECTOR : CUSOLVER_EIG_MODE_NOVECTOR;
    GesvdjParams params(op);
    const int lwork = query_lwork([&](int* lw) {
      TG_CUSOLVER_CHECK(Lib<T>::gesvdjBatched_bufferSize(h, jobz, int(m), int(n), A.at<T>(0), int(A.ld), S, TU.at<T>(0),
                                                         int(TU.ld), TV.at<T>(0), int(TV.ld), lw, params.p, int(B)),
                        op);
    });
    T* work = enc.workspace_for<T>(lwork);
    TG_CUSOLVER_CHECK(Lib<T>::gesvdjBatched(h, jobz, int(m), int(n), A.at<T>(0), int(A.ld), S, TU.at<T>(0), int(TU.ld),
                                            TV.at<T>(0), int(TV.ld), work, lwork, info32, params.p, int(B)),
                      op);
    if (vectors) {
      fill_matrix<T>(U, TU, m, ku, kCopy, 0, s, op);        // u: U's first ku columns
      fill_matrix<T>(VH, TV, kv, n, kTranspose, 0, s, op);  // vh: V^T's first kv rows
    }
  } else {
    // gesvd of X [mx, nx] with mx >= nx: X itself, or A^T for a wide A.
    const bool wide = m < n;
    Mat X = A, XU, XVT;
    if (wide) {
      X = mat(t_a, op, "A^T");
      fill_matrix<T>(X, A, n, m, kTranspose, 0, s, op);
      if (vectors) {
        XU = mat(t_u, op, "U");
        XVT = mat(t_v, op, "V^T");
      }
    } else if (vectors) {
      XU = U;
      XVT = VH;
    }
    const int mx = int(X.r), nx = int(X.c);
    // U of X: all mx columns ('A') when asked for (full matrices of a tall
    // A, or of A^T's U' = vh^T), else the first nx ('S'); V^T of X is nx x nx.
    const int64_t xu_cols = vectors ? XU.c : 0;
    const signed char jobu = !vectors ? 'N' : xu_cols == mx ? 'A' : 'S';
    const signed char jobvt = vectors ? 'A' : 'N';
    const int ldu = vectors ? int(XU.ld) : mx, ldvt = vectors ? int(XVT.ld) : nx;
    const int lwork = query_lwork([&](int* lw) { TG_CUSOLVER_CHECK(Lib<T>::gesvd_bufferSize(h, mx, nx, lw), op); });
    T* work = enc.workspace_for<T>(lwork);
    T* rwork = enc.workspace_for<T>(std::max<int64_t>(k - 1, 1));  // the unconverged superdiagonal
    for (int64_t b = 0; b < B; ++b)
      TG_CUSOLVER_CHECK(
          Lib<T>::gesvd(h, jobu, jobvt, mx, nx, X.at<T>(b), int(X.ld), S + b * k, vectors ? XU.at<T>(b) : nullptr, ldu,
                        vectors ? XVT.at<T>(b) : nullptr, ldvt, work, lwork, rwork, info32 + b),
          op);
    if (wide && vectors) {  // A = V' S U'^T: u = V' = (V'^T)^T, vh = U'^T
      fill_matrix<T>(U, XVT, m, ku, kTranspose, 0, s, op);
      fill_matrix<T>(VH, XU, kv, n, kTranspose, 0, s, op);
    }
  }
  widen(info32, info, B, s, op);
}

// The first nonzero info in batch order, recorded for the host (cuda/check.h
// BadIndex, kLinalgInfo) unless the record holds an unreported failure.
__global__ void first_nonzero_info_k(const int64_t* info, int64_t B, detail::BadIndex* rec, int message) {
  __shared__ unsigned long long first;
  if (threadIdx.x == 0) first = ULLONG_MAX;
  __syncthreads();
  for (int64_t b = threadIdx.x; b < B; b += blockDim.x)
    if (info[b] != 0) {  // each thread's first is its least
      atomicMin(&first, static_cast<unsigned long long>(b));
      break;
    }
  __syncthreads();
  if (threadIdx.x == 0 && first != ULLONG_MAX && rec->op == 0) {
    rec->value = info[first];
    rec->size = static_cast<long long>(first);
    rec->message = message;
    __threadfence_system();
    rec->op = detail::kLinalgInfo;
  }
}

void report_info(const Tensor& info, const char* op, const char* what) {
  const int64_t B = info.numel();
  if (B == 0) return;
  TG_INTERNAL_ASSERT(info.is_contiguous() && info.dtype() == kInt64, op, ": report_info takes a contiguous Int64 info");
  const int device = info.device().index();
  DeviceGuard g(device);
  const int message = detail::register_device_message(op, what);
  detail::BadIndex* rec = detail::bad_index_record();
  cudaStream_t s = stream_on(device);
  LaunchEncoder enc(s);  // reads info; writes only host memory
  enc.read(info);
  first_nonzero_info_k<<<1, kThreads, 0, s>>>(info.data_ptr<int64_t>(), B, rec, message);
  TG_CUDA_CHECK(cudaGetLastError(), op);
}

const kernels::LinalgKernels& linalg_table() {
  static const kernels::LinalgKernels t = [] {
    kernels::LinalgKernels k{};
    k.batched_max_n = std::min(kBatchedCholeskyMax, kBatchedTrsmMax);
    k.solve_any_layout_max_n = kSmallTrsmMax;
    k.solve_any_layout_max_k = small_trsm_max_rhs();
    k.cholesky = [](const Tensor& a, const Tensor& info, bool upper) {
      dispatch_float(a.dtype(), "linalg.cholesky", [&](auto tag) { cholesky_impl<decltype(tag)>(a, info, upper); });
    };
    k.triangular_solve = [](const Tensor& a, const Tensor& b, bool upper, bool unit, bool transpose) {
      dispatch_float(a.dtype(), "linalg.solve_triangular",
                     [&](auto tag) { triangular_solve_impl<decltype(tag)>(a, b, upper, unit, transpose); });
    };
    k.lu_factor = [](const Tensor& a, const Tensor& pivots, const Tensor& info) {
      dispatch_float(a.dtype(), "linalg.lu_factor", [&](auto tag) { lu_factor_impl<decltype(tag)>(a, pivots, info); });
    };
    k.lu_solve = [](const Tensor& lu, const Tensor& pivots, const Tensor& b, bool transpose) {
      dispatch_float(lu.dtype(), "linalg.lu_solve",
                     [&](auto tag) { lu_solve_impl<decltype(tag)>(lu, pivots, b, transpose); });
    };
    k.pivots_to_permutation = pivots_to_permutation;
    k.zero_triangle = zero_triangle;
    k.eigh = [](const Tensor& a, const Tensor& w, const Tensor& v, const Tensor& info) {
      dispatch_float(a.dtype(), "linalg.eigh", [&](auto tag) { eigh_impl<decltype(tag)>(a, w, v, info); });
    };
    k.qr = [](const Tensor& a, const Tensor& q, const Tensor& r) {
      dispatch_float(a.dtype(), "linalg.qr", [&](auto tag) { qr_impl<decltype(tag)>(a, q, r); });
    };
    k.svd = [](const Tensor& a, const Tensor& u, const Tensor& s, const Tensor& vh, const Tensor& info) {
      dispatch_float(a.dtype(), "linalg.svd", [&](auto tag) { svd_impl<decltype(tag)>(a, u, s, vh, info); });
    };
    k.report_info = report_info;
    return k;
  }();
  return t;
}

}  // namespace
}  // namespace tg::cuda

namespace tg::kernels {
const LinalgKernels* cuda_linalg_kernels() { return &cuda::linalg_table(); }
}  // namespace tg::kernels
