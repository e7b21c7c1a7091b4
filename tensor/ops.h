// The public op set. Every op broadcasts NumPy-style, accepts any strides and
// dispatches by device. The differentiable ones (elementwise math, reductions,
// linear algebra, joining/indexing, views) are defined in autograd/ops/: they
// run the raw op of <tapegrad/tensor/raw.h> and, when grad mode is on and an
// input requires grad, record a backward node. Comparisons, factories and
// whole-tensor comparisons never record.
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
Tensor empty(const IntList& sizes, TensorOptions opts = {});
Tensor zeros(const IntList& sizes, TensorOptions opts = {});
Tensor ones(const IntList& sizes, TensorOptions opts = {});
Tensor full(const IntList& sizes, Scalar value, TensorOptions opts = {});
Tensor rand(const IntList& sizes, TensorOptions opts = {});   // U[0, 1)
Tensor randn(const IntList& sizes, TensorOptions opts = {});  // N(0, 1)
Tensor arange(Scalar end, TensorOptions opts = {});
Tensor arange(Scalar start, Scalar end, Scalar step = 1, TensorOptions opts = {});
Tensor linspace(double start, double end, int64_t steps, TensorOptions opts = {});
Tensor eye(int64_t n, TensorOptions opts = {});
Tensor eye(int64_t n, int64_t m, TensorOptions opts = {});
// Values in row-major order; `sizes` empty means 1-D of values.size().
Tensor tensor(const std::vector<double>& values,
              const IntList& sizes = {},
              TensorOptions opts = {});
Tensor scalar_tensor(Scalar value, TensorOptions opts = {});
Tensor empty_like(const Tensor& t);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, Scalar value);
Tensor rand_like(const Tensor& t);
Tensor randn_like(const Tensor& t);

// Counter-based Philox 4x32-10 generator (tensor/random.h has the mapping).
void manual_seed(uint64_t seed);

// Deterministic mode (torch.use_deterministic_algorithms): process-wide; while
// on, every op whose CUDA forward or backward could differ from run to run
// (atomic accumulation in scatter_add and what is built on it: index_select,
// gather and dense embedding backward, to_dense of an uncoalesced tensor;
// cuSPARSE's SpMM) takes a bitwise-reproducible path instead. What it covers
// and costs: docs/TENSOR.md "Deterministic mode".
void use_deterministic_algorithms(bool enabled);
bool are_deterministic_algorithms_enabled();
// Sets the mode for a scope and restores the previous one.
class DeterministicGuard {
 public:
  explicit DeterministicGuard(bool enabled = true);
  ~DeterministicGuard();
  DeterministicGuard(const DeterministicGuard&) = delete;
  DeterministicGuard& operator=(const DeterministicGuard&) = delete;

 private:
  bool prev_;
};

// ---- elementwise -------------------------------------------------------------
Tensor add(const Tensor& a, const Tensor& b, Scalar alpha = 1);
Tensor sub(const Tensor& a, const Tensor& b, Scalar alpha = 1);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, Scalar b);
Tensor sub(const Tensor& a, Scalar b);
Tensor mul(const Tensor& a, Scalar b);
Tensor div(const Tensor& a, Scalar b);
Tensor pow(const Tensor& a, Scalar exponent);
Tensor pow(Scalar base, const Tensor& exponent);

Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, Scalar b);
Tensor ne(const Tensor& a, Scalar b);
Tensor lt(const Tensor& a, Scalar b);
Tensor le(const Tensor& a, Scalar b);
Tensor gt(const Tensor& a, Scalar b);
Tensor ge(const Tensor& a, Scalar b);

Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor silu(const Tensor& x);  // x * sigmoid(x)
// g * act^(order)(x): the order-th derivative of an activation at x, times g,
// in one fused kernel (the backward of silu/sigmoid/tanh/relu uses it with
// order 1). Differentiable to any order: orders 0..4 are fused kernels, and
// each derivative raises the order by one (above 4 the engine differentiates
// the order-4 kernel's graph).
enum class Activation { Silu, Sigmoid, Tanh, Relu };
Tensor activation_grad(const Tensor& g, const Tensor& x, Activation act, int order = 1);
Tensor erf(const Tensor& x);
// Exact GELU x * Phi(x); approximate = "tanh" uses the tanh formula.
Tensor gelu(const Tensor& x, const std::string& approximate = "none");
// log(1 + exp(beta x)) / beta; linear where beta x > threshold (as PyTorch).
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor sign(const Tensor& x);
Tensor square(const Tensor& x);
Tensor reciprocal(const Tensor& x);

Tensor clamp(const Tensor& x,
             std::optional<Scalar> min,
             std::optional<Scalar> max = std::nullopt);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, Scalar b);
Tensor where(const Tensor& cond, Scalar a, const Tensor& b);

// ---- reductions (dims may be negative; empty dims means all) ----------------
Tensor sum(const Tensor& x);
Tensor sum(const Tensor& x, const IntList& dims, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, const IntList& dims, bool keepdim = false);
Tensor amax(const Tensor& x);
Tensor amax(const Tensor& x, const IntList& dims, bool keepdim = false);
Tensor amin(const Tensor& x);
Tensor amin(const Tensor& x, const IntList& dims, bool keepdim = false);
// Sums x down to `shape` (x's shape must broadcast from it): the reverse of
// broadcasting, as PyTorch's sum_to_size.
Tensor sum_to(const Tensor& x, const IntList& shape);

// ---- linear algebra ----------------------------------------------------------
Tensor mm(const Tensor& a, const Tensor& b);      // [n,k] x [k,m]
Tensor bmm(const Tensor& a, const Tensor& b);     // [B,n,k] x [B,k,m]
Tensor matmul(const Tensor& a, const Tensor& b);  // NumPy matmul semantics
// x @ w^T + b, w: [out, in], b: [out] (optional).
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b = {});

// ---- joining and indexing ----------------------------------------------------
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
Tensor scatter_add(const Tensor& x,
                   int64_t dim,
                   const Tensor& index,
                   const Tensor& src);

// ---- sparse COO (docs/TENSOR.md "Sparse COO tensors") ----------------------
// indices: Int64 [sparse_dim, nnz]; values: [nnz, dense sizes...]; sizes: the
// logical shape, sparse sizes then the values' trailing sizes. Checks ranks,
// dtypes, devices and every index against its size (one device sync on a
// GPU) and throws naming the first bad index. Differentiable in values.
Tensor sparse_coo_tensor(const Tensor& indices, const Tensor& values, const IntList& sizes);
// Sorted row-major, duplicates summed; returns `s` when already coalesced.
Tensor coalesce(const Tensor& s);
Tensor to_dense(const Tensor& x);  // a strided x is returned as is
// Rows of `weight` ([num, dim...]) picked by `indices` (Int64, any shape):
// [indices..., dim...]. With sparse = true the gradient of weight is a sparse
// COO tensor (the lookup indices, uncoalesced, and the rows of the incoming
// gradient) instead of a dense [num, dim...] one.
Tensor embedding(const Tensor& weight, const Tensor& indices, bool sparse = false);
// index_select along dim 0 whose gradient for x is sparse when sparse_grad.
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index, bool sparse_grad);

// ---- comparison of whole tensors ---------------------------------------------
// |a - b| <= atol + rtol |b| elementwise (broadcasting), like torch.allclose.
bool allclose(const Tensor& a,
              const Tensor& b,
              double rtol = 1e-5,
              double atol = 1e-8,
              bool equal_nan = false);
// Same sizes and the same values (dtypes may differ), like torch.equal.
bool equal(const Tensor& a, const Tensor& b);

// ---- shape helpers -------------------------------------------------------------
IntList broadcast_shapes(const IntList& a, const IntList& b, const char* op);
Tensor broadcast_to(const Tensor& x, const IntList& sizes);

// ---- operators -------------------------------------------------------------------
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

}  // namespace tg
