// The functional API, with the shapes of torch.autograd.functional. fn is
// evaluated at a fresh leaf copy of x, and results carry no history, unless
// create_graph is true: then fn sees a differentiable alias of x (when x
// requires grad), so results are differentiable with respect to x and to
// whatever fn closes over (d/dx of hessian(sum(x^4)) is 24x).
#pragma once

#include <functional>
#include <utility>
#include <vector>

#include <tapegrad/tensor/ops.h>
#include <tapegrad/tensor/tensor.h>

namespace tg::autograd {

/// A function of one tensor, as the functional API takes it.
using TensorFn = std::function<Tensor(const Tensor&)>;

/// How jacobian and hessian differentiate (torch.autograd.functional's
/// `strategy` / `outer_jacobian_strategy`).
enum class JacobianMode {
  /// One backward pass per output element (hessian: per gradient element,
  /// reverse over reverse). Lean on memory.
  Reverse,
  /// One forward pass carrying every input direction as a batch of tangents
  /// (hessian: forward over reverse, one forward and one backward pass,
  /// JAX's jacfwd(jacrev)); memory grows with x.numel() tangents of every
  /// intermediate. Inside a caller's forward_ad::dual_level (levels do not
  /// nest): Reverse.
  Forward,
};

/// d fn(x) / d x, shape fn(x).sizes() + x.sizes().
Tensor jacobian(const TensorFn& fn, const Tensor& x, bool create_graph = false,
                JacobianMode mode = JacobianMode::Reverse);
/// Scalar fn: d^2 fn / dx^2, shape x.sizes() + x.sizes().
Tensor hessian(const TensorFn& fn, const Tensor& x, bool create_graph = false,
               JacobianMode mode = JacobianMode::Reverse);
/// {fn(x), v^T J}, v of fn(x)'s shape.
std::pair<Tensor, Tensor> vjp(const TensorFn& fn, const Tensor& x, const Tensor& v, bool create_graph = false);
/// {fn(x), J v}, v of x's shape: one forward pass in forward mode (inside a
/// caller's forward_ad::dual_level, where levels do not nest: a double vjp).
std::pair<Tensor, Tensor> jvp(const TensorFn& fn, const Tensor& x, const Tensor& v, bool create_graph = false);
/// Scalar fn: {fn(x), H v}, by forward over reverse (the gradient's tangent
/// along v; inside a caller's dual level: reverse over reverse).
std::pair<Tensor, Tensor> hvp(const TensorFn& fn, const Tensor& x, const Tensor& v, bool create_graph = false);

/// How per_sample_hessian computes.
enum class HessianStrategy {
  /// The reference algorithm, as PyTorch users write it: m backward passes
  /// for the Jacobian rows grad(y[:, i], x, ones, create_graph), then m * n
  /// for the Hessian rows grad(J_i[:, j], x, ones).
  Rows,
  /// Batched cotangents: fn runs once on m * n stacked copies of x, copy
  /// (i, j) gets the cotangent e_i, and two backward passes (Jacobian, then
  /// the selected Hessian rows) do the work of m + m * n, with GEMMs m * n
  /// times taller and m * n times fewer launches. A fn that does not map one
  /// row of x to one row (it closes over per-row tensors, such as expanded
  /// per-sample weights) cannot run on the stacked copies: it gets
  /// ForwardOverReverse (Rows inside a caller's forward_ad::dual_level).
  BatchedCotangents,
  /// Forward over reverse (JAX's jacfwd(jacrev)): fn runs once with x
  /// carrying the n tangents e_1..e_n as a batch (forward_ad::dual_level(n):
  /// GEMMs on n times the rows), then one backward pass per output column;
  /// the gradients' tangents are the Hessian rows. No create_graph double
  /// backward (inside a caller's forward_ad::dual_level, where levels do not
  /// nest: BatchedCotangents).
  ForwardOverReverse,
  /// Taylor mode (forward_ad::taylor_level): one forward pass carrying the
  /// value, the n first derivatives and the n (n + 1) / 2 second derivatives
  /// of every intermediate, stacked: each GEMM runs once on all of them, an
  /// elementwise op applies its derivatives (Faa di Bruno), and ops whose
  /// second derivative vanishes (relu, linear ops) add nothing. Any fn
  /// whose ops (and custom Functions) have Taylor rules; recorded, so
  /// create_graph works. Inside a caller's dual level: BatchedCotangents.
  /// fn first runs once on an empty batch to find whether any rule forms a
  /// second-order term; when none does (a relu network) the Hessian is
  /// structurally zero and returned as zeros without the pass (with
  /// create_graph, zeros whose backward gives zeros to the parameters and x;
  /// docs/AUTOGRAD.md "Structural zeros"). As with torch.func's transforms, fn must apply the same ops
  /// to every sample (no control flow on x's values); it runs twice.
  Taylor,
};
/// Per-sample Hessians of a batched function (the PINN / Hessian-benchmark
/// case): fn maps x [B, n] to [B, m], and row b of the output depends only on
/// row b of x. Returns H [B, m, n, n], H[b, i, j, k] = d^2 fn(x)[b, i] /
/// dx[b, j] dx[b, k]. With create_graph, H is differentiable (e.g. into the
/// parameters fn closes over).
Tensor per_sample_hessian(const TensorFn& fn, const Tensor& x,
                          HessianStrategy strategy = HessianStrategy::BatchedCotangents, bool create_graph = false);

/// per_sample_hessian, laplacian and derivative_operator check that fn's
/// rows are independent (row i of fn(x) depends on row i of x alone) and
/// throw naming the function otherwise: a function that mixes rows (a mean
/// over the batch, a batch norm, cumsum over rows, x^T x, index_select along
/// 0) would get silently wrong per-row results. The check probes fn on four
/// rows (or the whole batch) with two backward passes and one host read; it
/// is skipped while a CUDA graph captures. Off with false (process-wide), for
/// functions known to be independent.
void set_check_rows_independent(bool on);
/// Whether the row check above is on (the default).
bool check_rows_independent();

/// Per-sample Laplacians of a batched function (the PINN operator): fn maps
/// x [B, n] to [B, m], row b of the output depending only on row b of x.
/// Returns [B, m], L[b, i] = sum_j d^2 fn(x)[b, i] / dx[b, j]^2. Taylor mode
/// (the "forward Laplacian"): one forward pass carrying the value, the n
/// first derivatives and one running sum of the second derivatives, for any
/// fn whose ops have Taylor rules; no Hessian is formed. With create_graph
/// the result is differentiable (a PINN loss on it trains the parameters fn
/// closes over). A structurally zero Laplacian (a relu network's) costs one
/// probe on an empty batch instead of the pass, as per_sample_hessian's
/// Taylor strategy. Inside a caller's dual level: the trace of reverse-mode
/// Hessians.
Tensor laplacian(const TensorFn& fn, const Tensor& x, bool create_graph = false);

/// The random directions of a stochastic estimator: Rademacher (each entry
/// +1 or -1) or standard normal; both have E[v v^T] = I.
enum class Directions { Rademacher, Gaussian };
/// A stochastic estimate per sample and output: its value and the variance
/// of that value (the sample variance of the k one-direction estimates over
/// k; NaN for k = 1; undefined unless asked for).
struct Estimate {
  Tensor value;     ///< [B, m]
  Tensor variance;  ///< [B, m], or undefined
};
/// Hutchinson's estimator of laplacian(fn, x): the mean over `samples`
/// random directions v (each sample its own, drawn from the global
/// generator; capturable in a CUDA graph, where each replay draws anew) of
/// v^T H v, each from one Taylor-mode jet along v (the second coefficient),
/// all in one pass. Unbiased; for Rademacher directions its variance is
/// 2 (sum of H_ij^2 over i != j) / samples, for Gaussian ones 2 |H|_F^2 /
/// samples; the cost does not grow with n. `variance`: also return the
/// estimated variance (each direction then its own second-order group:
/// somewhat more memory). With create_graph the value is differentiable.
Estimate laplacian_estimate(const TensorFn& fn, const Tensor& x, int64_t samples,
                            Directions directions = Directions::Rademacher, bool create_graph = false,
                            bool variance = false);

/// One term of a linear differential operator: coefficient times the
/// partial derivative d^k / dx_{dims[0]} ... dx_{dims[k-1]} (dims empty: the
/// value itself; {0, 0}: u_xx; {0, 1}: u_xy; {0, 0, 0}: u_xxx).
struct Partial {
  std::vector<int64_t> dims;  ///< input dims, one per differentiation (any order)
  double coefficient = 1.0;   ///< the term's factor
};
/// A linear differential operator applied per sample to a batched function
/// fn [B, n] -> [B, m] (row b of the output depends only on row b of x):
/// returns [B, m] = sum over terms of coefficient * the partial of fn, in
/// Taylor mode, computing only what the terms need: one pass for the terms
/// of order <= 2 (the named unit directions as first coefficients, the
/// second derivatives summed into one second-order group), and one
/// univariate pass of the highest order for the others (a pure partial is
/// k! c_k along e_d; a mixed one is polarized over 2^(k-1) sign
/// combinations of its directions). With create_graph the result is
/// differentiable (a PINN loss on it trains the parameters fn closes over).
/// Terms of order >= 2 that are structurally zero (a relu network's) drop
/// out after one probe on an empty batch, as in per_sample_hessian's Taylor
/// strategy. E.g. the 2-D Laplacian {{{0, 0}}, {{1, 1}}}, the KdV term {{{0, 0, 0}}}.
Tensor derivative_operator(const TensorFn& fn, const Tensor& x, const std::vector<Partial>& terms,
                           bool create_graph = false);
/// The stochastic form of derivative_operator (the sparse stochastic Taylor
/// derivative estimator of Shi et al., NeurIPS 2024): `samples` of the
/// terms, drawn uniformly without replacement from the global generator
/// (on the host), each scaled by terms.size() / samples, through the exact
/// operator's passes, so the cost grows with `samples`, not with the
/// number of terms (the n second derivatives of a Laplacian in n
/// dimensions, say). Unbiased for the operator, exact when samples equals
/// the number of terms; the draw is shared by the batch. Not under CUDA
/// graph capture (the terms drawn would be fixed in the graph): use
/// laplacian_estimate there.
Tensor derivative_operator_estimate(const TensorFn& fn, const Tensor& x, const std::vector<Partial>& terms,
                                    int64_t samples, bool create_graph = false);

/// The value, per-sample input Jacobian and Hessian of a multilayer
/// perceptron (layer l: h = act(h W_l^T + b_l), no activation after the
/// last), by per_sample_hessian's Taylor strategy on it: one forward pass,
/// each layer one GEMM on the stacked [n first; n (n + 1) / 2 second
/// derivatives; value] rows. Recorded when grad mode is on, so a loss of
/// the results backpropagates into the parameters.
/// x [B, n] -> value [B, m], jacobian [B, m, n], hessian [B, m, n, n].
struct MlpDerivatives {
  Tensor value;     ///< [B, m]
  Tensor jacobian;  ///< [B, m, n]
  Tensor hessian;   ///< [B, m, n, n]
};
/// See MlpDerivatives: the value, Jacobian and Hessian of the MLP at x.
MlpDerivatives mlp_taylor(const std::vector<Tensor>& weights, const std::vector<Tensor>& biases, tg::Activation act,
                          const Tensor& x);

}  // namespace tg::autograd
