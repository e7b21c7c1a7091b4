// Internal: the seam between tensor/ and a device. Each backend (tensor/cpu,
// later cuda/kernels) fills one Backend table; the op layer (tensor/*.cpp)
// checks arguments, computes result shapes and dtypes, broadcasts operands
// with expand() and converts BFloat16/Float16 through Float32, so a backend
// sees only: same-shape operands (strides may be 0), and compute dtypes
// Float32, Float64 or Int64 (Bool only where stated).
#pragma once

#include <cstdint>
#include <type_traits>
#include <vector>

#include <tapegrad/tensor/error.h>
#include <tapegrad/tensor/ops.h>
#include <tapegrad/tensor/tensor.h>

namespace tg::kernels {

// The dispatchers, generated from the dtype list
// (<tapegrad/tensor/dtypes.def>) and chosen by its columns: each calls f(T{})
// with T the dtype's host type. A dtype a dispatcher does not take reaches
// its error naming the op and the dtype, never another dtype's code.

// A real dtype kernels compute in (its Compute column is itself): Float32,
// Float64, Int64.
// Not the complex ones: the real kernels (arithmetic, reductions, compares)
// refuse them; complex kernels take them by name.
constexpr bool is_compute_dtype(ScalarType t) { return compute_type(t) == t && !is_complex(t); }
// A compute dtype of category Floating (Float32, Float64): what the "real
// floating" kernels (GEMMs, solvers, the derivative kernels) take.
constexpr bool is_floating_compute(ScalarType t) {
  return is_compute_dtype(t) && category(t) == DtypeCategory::Floating;
}
constexpr bool any_dtype(ScalarType) { return true; }

// f(T{}) when Takes(t), returning whether it did. The dtypes Takes refuses
// instantiate nothing.
template <bool (*Takes)(ScalarType), class F> bool dispatch_if(ScalarType t, F&& f) {
  switch (t) {
#define TG_DTYPE(Name, HostT, ...)           \
  case ScalarType::Name:                     \
    if constexpr (Takes(ScalarType::Name)) { \
      f(HostT{});                            \
      return true;                           \
    } else {                                 \
      return false;                          \
    }
#include <tapegrad/tensor/dtypes.def>
#undef TG_DTYPE
  }
  return false;
}

// The dtype of a host type (the dtype list's HostT column); a type not in the
// list does not compile.
template <class T> constexpr ScalarType scalar_type_of() {
#define TG_DTYPE(Name, HostT, ...) \
  if constexpr (std::is_same_v<T, HostT>) return ScalarType::Name;
#include <tapegrad/tensor/dtypes.def>
#undef TG_DTYPE
  throw Error("scalar_type_of: no dtype has this host type");
}

// Every dtype (copy, fill: host types, Half and BFloat16 included).
template <class F> void dispatch_all(ScalarType t, F&& f) {
  const bool done = dispatch_if<any_dtype>(t, f);
  TG_INTERNAL_ASSERT(done, "dispatch_all: unknown dtype ", int(t));
}

// A compute dtype (float, double, int64_t); the op layer converts the others
// (tensor/op_util.h), so another one here is an internal error.
template <class F> void dispatch_compute(ScalarType t, const char* op, F&& f) {
  TG_CHECK(!is_complex(t), op, ": no kernel for complex dtype ", t,
           " yet; take view_as_real(t), or real(t) and imag(t), and compute on the parts");
  const bool done = dispatch_if<is_compute_dtype>(t, f);
  TG_INTERNAL_ASSERT(done, op, ": kernel got non-compute dtype ", t);
}

// A real floating compute dtype (float, double); any other dtype is refused
// naming the op and the dtype (where code once read "Float64, else float").
template <class F> void dispatch_floating(ScalarType t, const char* op, F&& f) {
  const bool done = dispatch_if<is_floating_compute>(t, f);
  TG_CHECK(done, op, ": no kernel for dtype ", t, " (it takes Float32 or Float64)");
}

// Sixteen bytes as one element (Complex128), aligned as its parts.
struct Bytes16 {
  uint64_t lo, hi;
};
// Calls f(U{}) with U the unsigned integer type of `bytes` (1, 2, 4 or 8),
// or Bytes16 for 16: for kernels that only move elements (where, gather,
// index_select, fill).
template <class F> void dispatch_bytes(size_t bytes, F&& f) {
  switch (bytes) {
    case 1: f(uint8_t{}); return;
    case 2: f(uint16_t{}); return;
    case 4: f(uint32_t{}); return;
    case 8: f(uint64_t{}); return;
    case 16: f(Bytes16{}); return;
    default: TG_INTERNAL_ASSERT(false, "dispatch_bytes: no element type of ", bytes, " bytes");
  }
}

// The binary ops of <tapegrad/tensor/binary.def>.
enum class BinaryOp {
#define TG_BINARY(name, Kernel, ...) Kernel,
#include <tapegrad/tensor/binary.def>
#undef TG_BINARY
};
enum class CompareOp { Eq, Ne, Lt, Le, Gt, Ge };
// The plain unary ops of <tapegrad/tensor/unary.def>, then those with
// parameters.
enum class UnaryOp {
#define TG_UNARY(name, Kernel, ...) Kernel,
#include <tapegrad/tensor/unary.def>
#undef TG_UNARY
  Gelu,
  GeluTanh,
  Softplus,
  Clamp
};
enum class ReduceOp { Sum, Max, Min };
// The activations whose derivatives have fused kernels (activation_grad).
using tg::Activation;
// Orders of derivative the kernels compute (activation_math.h).
constexpr int kMaxFusedActivationOrder = 4;

// The most summands one add_n call takes.
constexpr size_t kMaxAddN = 16;
// The most pairs one copy_n call takes.
constexpr size_t kMaxCopyN = 32;

// Softplus: a = beta, b = threshold. Clamp: a = lo, b = hi (has_a/has_b).
struct UnaryParams {
  double a = 0, b = 0;
  bool has_a = false, has_b = false;
};

// The kernels of one device. The slots below are shared by several ops; an
// op with a kernel of its own declares its slot under its entry in ops.def
// (TG_KERNEL), expanded at the end.
struct Backend {
  // dst[i] = convert(src[i]); any dtypes incl. Bool/BFloat16/Float16.
  void (*copy)(const Tensor& dst, const Tensor& src);
  // Every element of dst (any dtype) := v.
  void (*fill)(const Tensor& dst, Scalar v);
  void (*binary)(BinaryOp, const Tensor& out, const Tensor& a, const Tensor& b);
  // out = a (op) s with the scalar a kernel argument (no 0-dim tensor to
  // fill): out and a of one shape and compute dtype (they may alias); s as
  // double and as int64, each already rounded to the op's dtype; the kernel
  // takes the one of its compute type. Optional (null: the scalar becomes a
  // 0-dim tensor, as on the CPU, where that costs no launch).
  void (*binary_scalar)(BinaryOp, const Tensor& out, const Tensor& a, double s, int64_t si);
  // out = a + alpha * b (the product rounded first, as mul then add would),
  // one shape and compute dtype, out may alias a; alpha as for
  // binary_scalar. Optional (null: mul, then add).
  void (*add_scaled)(const Tensor& out, const Tensor& a, const Tensor& b, double alpha, int64_t ialpha);
  // out = ((a + s[0]) + s[1]) + ... in that order, rounded after each add
  // (bitwise the sequential adds): a, out and every s[j] contiguous, of one
  // shape and compute dtype; out may alias a; s.size() <= kMaxAddN.
  // Optional (null: one add per summand). The engine sums held gradient
  // contributions with it (autograd/accumulation.cpp).
  void (*add_n)(const Tensor& out, const Tensor& a, const std::vector<Tensor>& s);
  // dst[j] = src[j] for every j in one launch: each pair contiguous, of one
  // shape; every tensor of one compute dtype (Float32 or Float64) and
  // device; dst[j] disjoint from every src; dst.size() <= kMaxCopyN.
  // Optional (null: one copy each). The engine concatenates the operands
  // of a weight's products with it (autograd/accumulation.cpp).
  void (*copy_n)(const std::vector<Tensor>& dst, const std::vector<Tensor>& src);
  // out is Bool; a and b share a compute dtype.
  void (*compare)(CompareOp, const Tensor& out, const Tensor& a, const Tensor& b);
  void (*unary)(UnaryOp, const Tensor& out, const Tensor& x, const UnaryParams&);
  // cond is Bool; out, a, b share any dtype (bytes are moved).
  void (*where)(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b);
  // out has x's rank with size 1 in the reduced dims (keepdim shape).
  void (*reduce)(ReduceOp, const Tensor& out, const Tensor& x);
  // out[b] = a[b] @ b[b]; a: [B, n, k], b: [B, k, m], out: [B, n, m] contiguous.
  void (*bmm)(const Tensor& out, const Tensor& a, const Tensor& b);
  // out += a @ b in one GEMM (beta 1): out [n, m] contiguous, a [n, k],
  // b [k, m], one Float32/Float64 dtype. Optional (null: the engine adds a
  // separate product). AccumulateGrad forms a weight's held products into an
  // existing .grad with it (autograd/accumulation.cpp).
  void (*mm_accumulate)(const Tensor& out, const Tensor& a, const Tensor& b);
  // out = sum_i l_i^T r_i (accumulate: out += ...) without concatenating
  // the operands: out [m, n] contiguous, l_i [k_i, m] and r_i [k_i, n] 2-D
  // of out's Float32/Float64 dtype and device, any strides. Returns false
  // (out untouched) where it leaves the sum to one product of the
  // concatenated operands. Optional. The engine sums a weight's held
  // gradient products with it (autograd/accumulation.cpp).
  bool (*mm_sum)(const Tensor& out, const std::vector<std::pair<Tensor, Tensor>>& products, bool accumulate);
  // out = a @ b + bias (bias added to each of the n rows): out [n, m] contiguous, a
  // [n, k], b [k, m], bias [m] contiguous, one Float32/Float64 dtype.
  // Optional (null: the product, then an add). linear's forward takes it
  // (the bias in the GEMM's epilogue on CUDA: no pass of its own).
  void (*mm_bias)(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias);
  // The unrecorded forward of a small MLP (nn::Sequential of Linear layers
  // with one activation after each but the last, and after the last too
  // when last_act; where nothing is recorded): out [n, w_L] from x [n, w_0]
  // through weights[i] [w_i+1, w_i] and biases[i] [w_i+1] (undefined: no
  // bias), one Float32/Float64 dtype, every operand contiguous, in one
  // launch. Each output sums its products in order, then adds the bias, as
  // the small-product kernel does. Returns false (out untouched) where it
  // has no kernel for the sizes. Optional (null: the layers one by one).
  // A recorded forward (autograd's fused_mlp) passes z and h (else empty),
  // one entry per layer: z[l] [n, w_l+1] receives the layer's
  // pre-activation where the activation follows it (undefined elsewhere),
  // h[l] the hidden layers' outputs (undefined for the last).
  bool (*mlp_forward)(Activation act, bool last_act, const Tensor& out, const Tensor& x,
                      const std::vector<Tensor>& weights, const std::vector<Tensor>& biases,
                      const std::vector<Tensor>& z, const std::vector<Tensor>& h);
  // Its backward, one launch: from g [n, w_L] (the output's gradient), the
  // widths w_0..w_L and the saved z, writes the pre-activations' gradients
  // gz[l] = dL/dz_l where defined (each element g act'(z), act' the formula
  // activation_grad uses; a layer without activation: dL/d(its output)),
  // for the layers from the last down to `lowest`, and the input's gradient
  // gx where defined (then lowest is 0), each element's sum over the
  // layer's outputs taken in order. weights[l] is read (and must be
  // defined) for l > lowest, and for l = 0 with gx; z[l] for l >= lowest
  // where the activation follows. Returns false (nothing written) where it
  // has no kernel for the operands. Optional.
  bool (*mlp_backward)(Activation act, bool last_act, const Tensor& g, const std::vector<int64_t>& widths,
                       const std::vector<Tensor>& z, const std::vector<Tensor>& weights, const Tensor& gx,
                       const std::vector<Tensor>& gz, int lowest);
  // Indices that were checked once and may have changed since (a sparse
  // tensor's, through _indices()): index Int64 1-D. CUDA only (the CPU
  // checks on the host): every index outside [0, size) is reported at the
  // next synchronization as `sparse tensor indices` (cuda/runtime/check.h BadIndex);
  // nothing is read but the index.
  void (*report_bad_indices)(const Tensor& index, int64_t size);
  // out (already a copy of self) [index along dim] += src; out contiguous.
  void (*scatter_add)(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src);
  // Philox streams; see tensor/random.h for the element mapping.
  void (*uniform)(const Tensor& out, uint64_t seed, uint64_t offset);
  void (*normal)(const Tensor& out, uint64_t seed, uint64_t offset);
  // Under CUDA graph capture (CUDA only; nullptr on the CPU): the seed is
  // state[0] and the offset state[1] + offset, read when the kernel runs, so
  // each replay draws fresh numbers (docs/GRAPHS.md "Random numbers").
  void (*random_from_state)(const Tensor& out, bool normal, const int64_t* state, uint64_t offset);
  // dst and src contiguous, same dtype and size, on different devices (one
  // of them this backend's); non_blocking may return before the copy is done
  // when the host side allows it.
  void (*copy_across)(const Tensor& dst, const Tensor& src, bool non_blocking);
  // out = g * act^(order)(x), order in 0..kMaxFusedActivationOrder; Float32/64.
  void (*activation_grad)(Activation act, int order, const Tensor& out, const Tensor& g, const Tensor& x);
  // Sparse COO coalesce: lin Int64 [nnz] (row-major linear index over the
  // sparse sizes), values [nnz, D] contiguous, compute dtype. Sets
  // out_indices Int64 [sparse_dim, u] (sorted, unique) and out_values [u, D]
  // (rows with one index summed in their original order). May sync the host
  // to learn u, unless the indices are known to be unique (unique: then u =
  // nnz and nothing is read on the host, so it can be captured).
  void (*coalesce)(const Tensor& lin, const Tensor& values, const IntList& sparse_sizes, Tensor& out_indices,
                   Tensor& out_values, bool unique);
  // out [n, k] = S @ dense, S [n, m] coalesced: rows, cols Int64 [nnz]
  // (sorted by row), values [nnz]; dense [m, k]; all contiguous, one
  // floating compute dtype; out contiguous (written, not accumulated).
  void (*spmm)(const Tensor& out, const Tensor& rows, const Tensor& cols, const Tensor& values, const Tensor& dense);
  // Zeroes every tensor of `ts` (contiguous, any dtype) in as few launches
  // as their count allows. Optional (null: one fill each).
  void (*multi_tensor_zero)(const std::vector<Tensor>& ts);
  // out[i] = the first position p in `sorted` with sorted[p] >= values[i]
  // (a vectorized lower bound); all Int64, contiguous, 1-D.
  void (*lower_bound)(const Tensor& out, const Tensor& sorted, const Tensor& values);

  // The slots ops.def declares with TG_KERNEL.
#define TG_OP0(...)
#define TG_OP(...)
#define TG_FN(...)
#define TG_KERNEL(ret, name, params) ret(*name) params;
#include <tapegrad/tensor/ops.def>
#undef TG_KERNEL
#undef TG_FN
#undef TG_OP
#undef TG_OP0
};

// The backend of a device; throws a clear error when the device has none.
const Backend& backend(Device d, const char* op);

const Backend& cpu_backend();

// dst[j] = src[j] for every j, unrecorded, every dst disjoint from every
// src: the contiguous pairs of one shape, of dst[0]'s dtype (Float32 or
// Float64) and device, in as few launches as the backend's copy_n takes;
// the others one copy each. (The engine's concatenated products, odeint's
// stage rows and graphed-adjoint inputs.)
void copy_pairs(const std::vector<Tensor>& dst, const std::vector<Tensor>& src, const char* op);

// The CUDA kernels: defined by cuda/kernels (nullptr from cuda/kernels/stub.cpp
// in a build without CUDA). Chosen at link time, initialised on first use: no
// registration by static initializer, so a static link keeps it. (The same
// seam for memory, the device and pinned allocators, is the runtime's:
// cuda/runtime/allocators.h.)
const Backend* cuda_backend();

}  // namespace tg::kernels
