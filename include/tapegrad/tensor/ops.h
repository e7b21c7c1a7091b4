// The public op set. Every op broadcasts NumPy-style, accepts any strides and
// dispatches by device. The ops are listed once, in ops.def. Without the
// autograd layer (tapegrad::tensor alone) each runs its raw op of
// <tapegrad/tensor/raw.h>; with it (tapegrad::tapegrad) the differentiable
// ones also record a backward node when grad mode is on and an input requires
// grad. Comparisons, factories and whole-tensor comparisons never record.
// Dtype rules (docs/TENSOR.md): binary ops promote with promote_types();
// true division and the float-only unary ops give Float32 for Int64/Bool
// inputs; comparisons give Bool; sum of Int64/Bool gives Int64.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <tapegrad/tensor/tensor.h>

namespace tg {

// ---- factories ---------------------------------------------------------------
///@{

/// New tensors of `sizes` with the dtype and device of `opts` (Float32 on the
/// CPU by default): uninitialised, zeros, ones, `value`, uniform in [0, 1),
/// standard normal; arange: start, start + step, ... below end (Int64 when
/// every bound is integral and no dtype is given); linspace: `steps` evenly
/// spaced values from start to end; eye: the identity (n x m). For a complex
/// dtype rand and randn draw the real and imaginary parts independently,
/// each U[0, 1) or N(0, 1/2) (as PyTorch: E|z|^2 = 1 for randn).
Tensor empty(const IntList& sizes, TensorOptions opts = {});
Tensor zeros(const IntList& sizes, TensorOptions opts = {});
Tensor ones(const IntList& sizes, TensorOptions opts = {});
Tensor full(const IntList& sizes, Scalar value, TensorOptions opts = {});
Tensor rand(const IntList& sizes, TensorOptions opts = {});
Tensor randn(const IntList& sizes, TensorOptions opts = {});
Tensor arange(Scalar end, TensorOptions opts = {});
Tensor arange(Scalar start, Scalar end, Scalar step = 1, TensorOptions opts = {});
Tensor linspace(double start, double end, int64_t steps, TensorOptions opts = {});
Tensor eye(int64_t n, TensorOptions opts = {});
Tensor eye(int64_t n, int64_t m, TensorOptions opts = {});
///@}
///@{

/// A tensor of `values` in row-major order (`sizes` empty: 1-D of
/// values.size()); scalar_tensor: a 0-dim tensor; the *_like factories: a new
/// tensor of t's sizes, with the dtype and device `opts` sets and t's
/// otherwise (zeros_like(x, kFloat64) keeps x's device, as LibTorch's).
Tensor tensor(const std::vector<double>& values, const IntList& sizes = {}, TensorOptions opts = {});
Tensor scalar_tensor(Scalar value, TensorOptions opts = {});
Tensor empty_like(const Tensor& t, TensorOptions opts = {});
Tensor zeros_like(const Tensor& t, TensorOptions opts = {});
Tensor ones_like(const Tensor& t, TensorOptions opts = {});
Tensor full_like(const Tensor& t, Scalar value, TensorOptions opts = {});
Tensor rand_like(const Tensor& t, TensorOptions opts = {});
Tensor randn_like(const Tensor& t, TensorOptions opts = {});
///@}
///@{

/// Random integers uniform in [low, high) (randint(high, sizes): from 0),
/// Int64 unless `opts` sets a dtype; randperm: a random permutation of the
/// integers below n (Int64 unless set). Both draw from the global generator.
Tensor randint(int64_t high, const IntList& sizes, TensorOptions opts = {});
Tensor randint(int64_t low, int64_t high, const IntList& sizes, TensorOptions opts = {});
Tensor randint_like(const Tensor& t, int64_t low, int64_t high, TensorOptions opts = {});
Tensor randperm(int64_t n, TensorOptions opts = {});
///@}

///@{

/// One dim as an integer (tg::sum(x, 1), tg::mean(x, 1, true), tg::norm(x,
/// 2, 1)): the list forms with that one dim.
template <class I, detail::IfDim<I> = 0> Tensor sum(const Tensor& x, I dim, bool keepdim = false) {
  return x.sum(dim, keepdim);
}
template <class I, detail::IfDim<I> = 0> Tensor mean(const Tensor& x, I dim, bool keepdim = false) {
  return x.mean(dim, keepdim);
}
template <class I, detail::IfDim<I> = 0> Tensor amax(const Tensor& x, I dim, bool keepdim = false) {
  return x.amax(dim, keepdim);
}
template <class I, detail::IfDim<I> = 0> Tensor amin(const Tensor& x, I dim, bool keepdim = false) {
  return x.amin(dim, keepdim);
}
template <class I, detail::IfDim<I> = 0> Tensor logsumexp(const Tensor& x, I dim, bool keepdim = false) {
  return x.logsumexp(dim, keepdim);
}
template <class I, detail::IfDim<I> = 0> Tensor norm(const Tensor& x, double p, I dim, bool keepdim = false) {
  return x.norm(p, dim, keepdim);
}
template <class I, detail::IfDim<I> = 0>
Tensor var(const Tensor& x, I dim, double correction = 1, bool keepdim = false) {
  return x.var(dim, correction, keepdim);
}
template <class I, detail::IfDim<I> = 0>
Tensor std(const Tensor& x, I dim, double correction = 1, bool keepdim = false) {
  return x.std(dim, correction, keepdim);
}
template <class I, detail::IfDim<I> = 0> Tensor flip(const Tensor& x, I dim) { return x.flip(dim); }
template <class I, class J, detail::IfDim<I> = 0, detail::IfDim<J> = 0> Tensor roll(const Tensor& x, I shift, J dim) {
  return x.roll(shift, dim);
}
///@}

/// Counter-based Philox 4x32-10 generator (tensor/random.h has the mapping).
void manual_seed(uint64_t seed);
///@{

/// The global generator's state as a CPU Int64 tensor [2] (seed, offset),
/// and its restoring: a run that saves it and later restores it draws the
/// same numbers as one that never stopped. One counter-based generator
/// serves the CPU and every CUDA device (cuda::get_rng_state is the same
/// state). set_rng_state refuses another shape or dtype, and a change
/// while a CUDA graph captures.
Tensor get_rng_state();
void set_rng_state(const Tensor& state);
///@}

///@{

/// Deterministic mode (torch.use_deterministic_algorithms): process-wide; while
/// on, every op whose CUDA forward or backward could differ from run to run
/// (atomic accumulation in scatter_add and what is built on it: index_select,
/// gather and dense embedding backward, to_dense of an uncoalesced tensor;
/// cuSPARSE's SpMM) takes a bitwise-reproducible path instead. What it covers
/// and costs: docs/TENSOR.md "Deterministic mode".
void use_deterministic_algorithms(bool enabled);
bool are_deterministic_algorithms_enabled();
///@}
/// Sets the mode for a scope and restores the previous one.
class DeterministicGuard {
 public:
  /// Sets the mode to `enabled` until the guard ends.
  explicit DeterministicGuard(bool enabled = true);
  ~DeterministicGuard();
  DeterministicGuard(const DeterministicGuard&) = delete;
  DeterministicGuard& operator=(const DeterministicGuard&) = delete;

 private:
  bool prev_;
};

/// g * act^(order)(x): the order-th derivative of an activation at x, times g,
/// in one fused kernel (the backward of silu/sigmoid/tanh/relu and of exact
/// gelu uses it with order 1). Differentiable to any order: orders 0..4 are fused kernels, and
/// each derivative raises the order by one (above 4 the engine differentiates
/// the order-4 kernel's graph).
enum class Activation { Silu, Sigmoid, Tanh, Relu, Gelu };

// ---- the op list ------------------------------------------------------------------
// Every op of <tapegrad/tensor/ops.def> that is a free function, declared
// here. Notes on some of them:
// - silu(x) = x * sigmoid(x); gelu(x) is exact x * Phi(x), approximate =
//   "tanh" uses the tanh formula; softplus(x) = log(1 + exp(beta x)) / beta,
//   linear where beta x > threshold (as PyTorch).
// - Reductions: dims may be negative; sum_to(x, shape) sums x down to `shape`
//   (x's shape must broadcast from it), as PyTorch's sum_to_size.
// - mm [n,k] x [k,m]; bmm [B,n,k] x [B,k,m]; matmul has NumPy semantics;
//   linear(x, w, b) = x @ w^T + b, w: [out, in], b: [out] (optional).
// - sparse_coo_tensor(indices, values, sizes): indices Int64 [sparse_dim,
//   nnz]; values [nnz, dense sizes...]; sizes the logical shape. Checks ranks,
//   dtypes, devices and every index (one device sync on a GPU) and throws
//   naming the first bad index. Differentiable in values. coalesce sorts
//   row-major and sums duplicates (returns its input when coalesced);
//   to_dense returns a strided tensor as is.
// - embedding(weight, indices, sparse): rows of weight ([num, dim...]) picked
//   by indices (Int64, any shape): [indices..., dim...]. With sparse = true
//   the gradient of weight is a sparse COO tensor (the lookup indices,
//   uncoalesced, and the rows of the incoming gradient). index_select(x, 0,
//   index, sparse_grad) likewise.
// - allclose: |a - b| <= atol + rtol |b| elementwise (broadcasting), like
//   torch.allclose; equal: same sizes and values (dtypes may differ).
#define TG_D(...) = __VA_ARGS__
#define TG_OP0(ret, name, id, form) TG_IF_FREE_##form(ret name(const Tensor& self);)
#define TG_OP(ret, name, id, extras, args, form) TG_IF_FREE_##form(ret name(const Tensor& self, TG_UNPAREN extras);)
#define TG_FN(ret, name, id, params, args, form) TG_IF_FREE_##form(ret name params;)
#include <tapegrad/tensor/ops.def>
#undef TG_FN
#undef TG_OP
#undef TG_OP0
#undef TG_D

// ---- shape helpers -------------------------------------------------------------
///@{

/// The broadcast shape of a and b (an error naming `op` when they do not
/// broadcast); broadcast_to: x expanded to `sizes` (a view).
IntList broadcast_shapes(const IntList& a, const IntList& b, const char* op);
Tensor broadcast_to(const Tensor& x, const IntList& sizes);
///@}

// ---- operators -------------------------------------------------------------------
///@{

/// Arithmetic as add, sub, mul, div (and neg): tensor with tensor, tensor
/// with scalar, scalar with tensor; the compound forms work in place.
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, Scalar b);
Tensor operator-(const Tensor& a, Scalar b);
Tensor operator*(const Tensor& a, Scalar b);
Tensor operator/(const Tensor& a, Scalar b);
Tensor operator+(Scalar a, const Tensor& b);
Tensor operator-(Scalar a, const Tensor& b);
Tensor operator*(Scalar a, const Tensor& b);
Tensor operator/(Scalar a, const Tensor& b);
Tensor operator-(const Tensor& x);
Tensor& operator+=(Tensor& a, const Tensor& b);
Tensor& operator-=(Tensor& a, const Tensor& b);
Tensor& operator*=(Tensor& a, const Tensor& b);
Tensor& operator/=(Tensor& a, const Tensor& b);
Tensor& operator+=(Tensor& a, Scalar b);
Tensor& operator-=(Tensor& a, Scalar b);
Tensor& operator*=(Tensor& a, Scalar b);
Tensor& operator/=(Tensor& a, Scalar b);
/// Comparisons as eq, ne, lt, le, gt, ge: Bool tensors of the broadcast
/// shape, never recorded; tensor with tensor, tensor with scalar (`x > 0.0`)
/// and scalar with tensor (`0.0 < x`, the comparison mirrored).
Tensor operator==(const Tensor& a, const Tensor& b);
Tensor operator!=(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor operator==(const Tensor& a, Scalar b);
Tensor operator!=(const Tensor& a, Scalar b);
Tensor operator<(const Tensor& a, Scalar b);
Tensor operator<=(const Tensor& a, Scalar b);
Tensor operator>(const Tensor& a, Scalar b);
Tensor operator>=(const Tensor& a, Scalar b);
Tensor operator==(Scalar a, const Tensor& b);
Tensor operator!=(Scalar a, const Tensor& b);
Tensor operator<(Scalar a, const Tensor& b);
Tensor operator<=(Scalar a, const Tensor& b);
Tensor operator>(Scalar a, const Tensor& b);
Tensor operator>=(Scalar a, const Tensor& b);
/// Logical operators: `!x` is logical_not (any dtype). `&`, `|`, `^` and
/// `~` are logical_and, logical_or, logical_xor and logical_not on Bool
/// tensors, as LibTorch's on Bool; on other dtypes LibTorch's are bitwise,
/// which tapegrad does not have, so they throw, naming the operator (use
/// the logical ops).
Tensor operator!(const Tensor& x);
Tensor operator~(const Tensor& x);
Tensor operator&(const Tensor& a, const Tensor& b);
Tensor operator|(const Tensor& a, const Tensor& b);
Tensor operator^(const Tensor& a, const Tensor& b);
///@}

}  // namespace tg
