// CUDA backend, elementwise family: copy/convert, fill, binary, compare,
// unary, where, and copies between devices. One offset calculator for every
// strided, broadcast (stride 0) or contiguous operand set (dims with size 1
// dropped, adjacent dims coalesced); contiguous operand sets skip it. Kernels
// run on the current stream of the output's device.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <limits>

#include <tapegrad/cuda/check.h>
#include <tapegrad/cuda/stream.h>
#include <tapegrad/tensor/kernels.h>
#include <tapegrad/tensor/ops.h>
#include <tapegrad/tensor/raw.h>

namespace tg::cuda {
namespace {

using kernels::BinaryOp;
using kernels::CompareOp;
using kernels::UnaryOp;

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
Indexer make_indexer(const Tensor* ops, int nops, const char* op) {
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
template <class F>
void dispatch_compute(ScalarType t, const char* op, F&& f) {
  switch (t) {
    case ScalarType::Float32: f(float{}); return;
    case ScalarType::Float64: f(double{}); return;
    case ScalarType::Int64: f(int64_t{}); return;
    default: TG_INTERNAL_ASSERT(false, op, ": CUDA kernel got non-compute dtype ", t);
  }
}

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

// ---- copy, fill, where ----------------------------------------------------------------
template <class D, class S>
struct CopyFn {
  __device__ void operator()(char* const* p, const int64_t* off) const {
    *reinterpret_cast<D*>(p[0] + off[0]) = convert<D>(*reinterpret_cast<const S*>(p[1] + off[1]));
  }
};

void copy_kernel(const Tensor& dst, const Tensor& src) {
  Tensor ops[2] = {dst, src};
  dispatch_all(dst.dtype(), [&](auto d) {
    dispatch_all(src.dtype(), [&](auto s) {
      launch(ops, 2, "copy", CopyFn<decltype(d), decltype(s)>{});
    });
  });
}

template <class U>
struct FillFn {
  U bits;
  __device__ void operator()(char* const* p, const int64_t* off) const {
    *reinterpret_cast<U*>(p[0] + off[0]) = bits;
  }
};

void fill_kernel(const Tensor& dst, Scalar v) {
  // The value's bytes in dst's dtype, converted on the host by the CPU kernels.
  Tensor one = tg::empty({}, TensorOptions().dtype(dst.dtype()));
  kernels::cpu_backend().fill(one, v);
  Tensor ops[1] = {dst};
  switch (element_size(dst.dtype())) {
    case 1: return launch(ops, 1, "fill_", FillFn<uint8_t>{*static_cast<uint8_t*>(one.data_ptr())});
    case 2: return launch(ops, 1, "fill_", FillFn<uint16_t>{*static_cast<uint16_t*>(one.data_ptr())});
    case 4: return launch(ops, 1, "fill_", FillFn<uint32_t>{*static_cast<uint32_t*>(one.data_ptr())});
    default: return launch(ops, 1, "fill_", FillFn<uint64_t>{*static_cast<uint64_t*>(one.data_ptr())});
  }
}

template <class U>
struct WhereFn {
  __device__ void operator()(char* const* p, const int64_t* off) const {
    bool c = *reinterpret_cast<const bool*>(p[1] + off[1]);
    *reinterpret_cast<U*>(p[0] + off[0]) = *reinterpret_cast<const U*>(c ? p[2] + off[2] : p[3] + off[3]);
  }
};

void where_kernel(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  Tensor ops[4] = {out, cond, a, b};
  switch (element_size(out.dtype())) {
    case 1: return launch(ops, 4, "where", WhereFn<uint8_t>{});
    case 2: return launch(ops, 4, "where", WhereFn<uint16_t>{});
    case 4: return launch(ops, 4, "where", WhereFn<uint32_t>{});
    default: return launch(ops, 4, "where", WhereFn<uint64_t>{});
  }
}

// ---- binary and compare --------------------------------------------------------------
template <class T>
__device__ T ipow(T base, T e) {
  if (e < 0) {
    if (base == 1) return 1;
    if (base == -1) return (e % 2 == 0) ? 1 : -1;
    return 0;
  }
  T r = 1;
  while (e) {
    if (e & 1) r *= base;
    base *= base;
    e >>= 1;
  }
  return r;
}

template <class T>
struct BinaryFn {
  BinaryOp op;
  __device__ T apply(T a, T b) const {
    switch (op) {
      case BinaryOp::Add: return a + b;
      case BinaryOp::Sub: return a - b;
      case BinaryOp::Mul: return a * b;
      case BinaryOp::Div:
        if constexpr (std::is_integral_v<T>) return b == 0 ? T(0) : a / b;
        else return a / b;
      case BinaryOp::Pow:
        if constexpr (std::is_integral_v<T>) return ipow(a, b);
        else return ::pow(a, b);
      case BinaryOp::Max:
        if constexpr (!std::is_integral_v<T>)
          if (a != a || b != b) return a != a ? a : b;  // NaN propagates
        return a > b ? a : b;
      case BinaryOp::Min:
        if constexpr (!std::is_integral_v<T>)
          if (a != a || b != b) return a != a ? a : b;
        return a < b ? a : b;
    }
    return T(0);
  }
  __device__ void operator()(char* const* p, const int64_t* off) const {
    *reinterpret_cast<T*>(p[0] + off[0]) =
        apply(*reinterpret_cast<const T*>(p[1] + off[1]), *reinterpret_cast<const T*>(p[2] + off[2]));
  }
};

void binary_kernel(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  Tensor ops[3] = {out, a, b};
  dispatch_compute(out.dtype(), "binary", [&](auto tag) {
    launch(ops, 3, "binary", BinaryFn<decltype(tag)>{op});
  });
}

template <class T>
struct CompareFn {
  CompareOp op;
  __device__ void operator()(char* const* p, const int64_t* off) const {
    T x = *reinterpret_cast<const T*>(p[1] + off[1]);
    T y = *reinterpret_cast<const T*>(p[2] + off[2]);
    bool r = false;
    switch (op) {
      case CompareOp::Eq: r = x == y; break;
      case CompareOp::Ne: r = x != y; break;
      case CompareOp::Lt: r = x < y; break;
      case CompareOp::Le: r = x <= y; break;
      case CompareOp::Gt: r = x > y; break;
      case CompareOp::Ge: r = x >= y; break;
    }
    *reinterpret_cast<bool*>(p[0] + off[0]) = r;
  }
};

void compare_kernel(CompareOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  Tensor ops[3] = {out, a, b};
  dispatch_compute(a.dtype(), "compare", [&](auto tag) {
    launch(ops, 3, "compare", CompareFn<decltype(tag)>{op});
  });
}

// ---- unary ----------------------------------------------------------------------------
template <class T>
struct UnaryFn {
  UnaryOp op;
  T a, b;
  bool has_a, has_b;
  __device__ T apply(T x) const {
    if constexpr (std::is_integral_v<T>) {
      switch (op) {
        case UnaryOp::Neg: return -x;
        case UnaryOp::Abs: return x < 0 ? -x : x;
        case UnaryOp::Sign: return T((x > 0) - (x < 0));
        case UnaryOp::Square: return x * x;
        case UnaryOp::Relu: return x < 0 ? T(0) : x;
        case UnaryOp::Clamp:
          if (has_a && x < a) x = a;
          if (has_b && x > b) x = b;
          return x;
        default: return x;  // float-only ops never reach integers (op layer)
      }
    } else {
      switch (op) {
        case UnaryOp::Neg: return -x;
        case UnaryOp::Abs: return x < 0 ? -x : x;
        case UnaryOp::Sign: return x != x ? x : T((x > 0) - (x < 0));
        case UnaryOp::Square: return x * x;
        case UnaryOp::Relu: return x < 0 ? T(0) : x;
        case UnaryOp::Clamp:
          if (x != x) return x;
          if (has_a && x < a) x = a;
          if (has_b && x > b) x = b;
          return x;
        case UnaryOp::Exp: return ::exp(x);
        case UnaryOp::Log: return ::log(x);
        case UnaryOp::Sin: return ::sin(x);
        case UnaryOp::Cos: return ::cos(x);
        case UnaryOp::Tanh: return ::tanh(x);
        case UnaryOp::Sigmoid: return T(1) / (T(1) + ::exp(-x));
        case UnaryOp::Silu: return x / (T(1) + ::exp(-x));
        case UnaryOp::Erf: return ::erf(x);
        case UnaryOp::Gelu: return T(0.5) * x * (T(1) + ::erf(x * T(0.70710678118654752440)));
        case UnaryOp::GeluTanh: {
          T inner = T(0.79788456080286535588) * (x + T(0.044715) * x * x * x);
          return T(0.5) * x * (T(1) + ::tanh(inner));
        }
        case UnaryOp::Softplus: {
          T z = a * x;
          return z > b ? x : ::log1p(::exp(z)) / a;
        }
        case UnaryOp::Sqrt: return ::sqrt(x);
        case UnaryOp::Rsqrt: return T(1) / ::sqrt(x);
        case UnaryOp::Reciprocal: return T(1) / x;
      }
      return x;
    }
  }
  __device__ void operator()(char* const* p, const int64_t* off) const {
    *reinterpret_cast<T*>(p[0] + off[0]) = apply(*reinterpret_cast<const T*>(p[1] + off[1]));
  }
};

void unary_kernel(UnaryOp op, const Tensor& out, const Tensor& x, const kernels::UnaryParams& prm) {
  Tensor ops[2] = {out, x};
  dispatch_compute(out.dtype(), "unary", [&](auto tag) {
    using T = decltype(tag);
    launch(ops, 2, "unary", UnaryFn<T>{op, T(prm.a), T(prm.b), prm.has_a, prm.has_b});
  });
}

// ---- between devices --------------------------------------------------------------------
void copy_across(const Tensor& dst, const Tensor& src, bool non_blocking) {
  size_t bytes = size_t(dst.numel()) * element_size(dst.dtype());
  if (bytes == 0) return;
  if (dst.is_cuda() && src.is_cuda()) {
    DeviceGuard g(dst.device().index());
    TG_CUDA_CHECK(cudaMemcpyPeer(dst.data_ptr(), dst.device().index(), src.data_ptr(),
                                 src.device().index(), bytes),
                  "to");
    return;
  }
  int dev = dst.is_cuda() ? dst.device().index() : src.device().index();
  DeviceGuard g(dev);
  cudaStream_t s = static_cast<cudaStream_t>(current_stream(dev).handle());
  if (dst.is_cuda()) {
    // Host to device: from pageable memory the copy is staged before the call
    // returns, so the source may be freed right after.
    TG_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), bytes, cudaMemcpyHostToDevice, s),
                  "to");
  } else {
    TG_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), bytes, cudaMemcpyDeviceToHost, s),
                  "to");
    // The host reads the result next: wait unless asked not to.
    if (!non_blocking) TG_CUDA_CHECK(cudaStreamSynchronize(s), "to");
  }
}

[[noreturn]] void not_yet(const char* op) {
  TG_ERROR(op, ": not implemented on CUDA yet (the CUDA kernels land in parts: "
           "elementwise ops and copies now; reductions, GEMM, indexing and random next); "
           "compute it on the CPU for now");
}

const kernels::Backend& backend() {
  static const kernels::Backend b = [] {
    kernels::Backend t{};
    t.copy = copy_kernel;
    t.fill = fill_kernel;
    t.binary = binary_kernel;
    t.compare = compare_kernel;
    t.unary = unary_kernel;
    t.where = where_kernel;
    t.copy_across = copy_across;
    t.reduce = [](kernels::ReduceOp, const Tensor&, const Tensor&) { not_yet("reduce"); };
    t.bmm = [](const Tensor&, const Tensor&, const Tensor&) { not_yet("bmm"); };
    t.index_select = [](const Tensor&, const Tensor&, const Tensor&) { not_yet("index_select"); };
    t.gather = [](const Tensor&, const Tensor&, const Tensor&, int64_t, int64_t) { not_yet("gather"); };
    t.scatter_add = [](const Tensor&, int64_t, const Tensor&, const Tensor&) { not_yet("scatter_add"); };
    t.uniform = [](const Tensor&, uint64_t, uint64_t) { not_yet("rand"); };
    t.normal = [](const Tensor&, uint64_t, uint64_t) { not_yet("randn"); };
    return t;
  }();
  return b;
}

[[maybe_unused]] const bool g_registered = [] {
  kernels::register_backend(DeviceType::CUDA, &backend());
  return true;
}();

}  // namespace
}  // namespace tg::cuda
