// Internal: Taylor-mode arithmetic for the ops' rules (docs/AUTOGRAD.md
// "Taylor mode"). Inside a forward_ad::taylor_level a tangent holds the
// stacked normalized Taylor coefficients c_1..c_K (TaylorLayout). A linear
// op's tangent rule already maps every coefficient (the batch dimension);
// the nonlinear ops call these instead:
//   - jet_unary: y = f(x) elementwise, from f's derivatives f^(j)(x) (Faa di
//     Bruno: y_k = sum_j f^(j)/j! * B_kj, the partial Bell polynomials of
//     the coefficients, by their recurrence);
//   - jet_product: y = f(a, b) bilinear (mul, the GEMMs): the Cauchy product
//     y_k = sum_i f(a_i, b_{k-i});
//   - jet_quotient: y = a / b, from a = y b.
// Arguments are full tangents ([batch] + shape, padded to broadcast against
// the output), undefined when zero; results likewise.
#pragma once

#include <functional>
#include <utility>
#include <vector>

#include <tapegrad/autograd/forward_ad.h>
#include <tapegrad/tensor/ops.h>  // Activation
#include <tapegrad/tensor/tensor.h>

namespace tg::autograd::ops_detail {

/// Structure probes. While a StructureProbe lives on this thread, every rule
/// that would form a second-order coefficient from first-order ones (a cross
/// term, an elementwise op's higher derivative, a custom Function's Taylor
/// rule) calls second_order_term(), which marks the probe and throws
/// SecondOrderTerm. A pass that completes without it has second coefficients
/// that are structurally zero: pushed through linear maps only from the
/// input's, which are zero (per_sample_hessian's Taylor strategy uses this to
/// skip a relu network's pass, docs/AUTOGRAD.md "Structural zeros").
struct SecondOrderTerm {};  // deliberately not a std::exception: only the probe catches it
class StructureProbe {
 public:
  StructureProbe();
  ~StructureProbe();
  StructureProbe(const StructureProbe&) = delete;
  StructureProbe& operator=(const StructureProbe&) = delete;
  /// Whether a second-order term was formed (also when fn swallowed the throw).
  bool found() const;

 private:
  bool prev_armed_, prev_found_;
};
/// Throws SecondOrderTerm while a probe is armed; nothing otherwise.
void second_order_term();

/// The active Taylor layout of order >= 2 (readable while a rule runs
/// paused); nullptr in plain forward mode.
const forward_ad::TaylorLayout* fw_taylor();

using Bilinear = std::function<Tensor(const Tensor&, const Tensor&)>;
/// A 1 broadcast to x's shape (one element: no fill of x's size), the
/// gradient that makes activation_grad an activation's derivative.
Tensor broadcast_one(const Tensor& x);
/// The elementwise product as a Bilinear (mul's, the unary rules' cross terms).
Tensor jet_mul(const Tensor& a, const Tensor& b);
/// The second-order cross term of two first coefficients under f (see
/// forward_ad::taylor_cross); `same`: a and b are one tensor (no
/// symmetrizing needed).
Tensor jet_cross(const Tensor& a, const Tensor& b, const Bilinear& f, bool same = false);
/// f(x)'s tangent from x's (tx) and d[j] = f^(j)(x), j = 1..K (d[0] unused;
/// undefined: zero, so a vanishing derivative costs nothing).
Tensor jet_unary(const Tensor& tx, const std::vector<Tensor>& d);
/// act^(order)(x)'s tangent from x's (tx) at order 2 in one fused kernel
/// that computes the derivatives itself; undefined where that kernel does
/// not apply (the caller falls back to jet_unary).
Tensor jet_activation(const Tensor& tx, const Tensor& x, Activation act, int order);
/// f(a, b)'s tangent for bilinear f from a, b and their tangents.
Tensor jet_product(const Tensor& a, const Tensor& ta, const Tensor& b, const Tensor& tb, const Bilinear& f);
/// (a / b)'s tangent; q = a / b (the output): jet_divide with f = mul.
Tensor jet_quotient(const Tensor& q, const Tensor& ta, const Tensor& b, const Tensor& tb);

using LinearMap = std::function<Tensor(const Tensor&)>;
/// The jet of implicit matrix functions. y solves f(a, y) = b with f
/// bilinear (a / b: mul; A X = B: matmul; a triangular solve: matmul with
/// A's triangle); y is the output, ta and tb the tangents of a and b
/// (undefined: zero), solve0(r) the y with f(a, y) = r at the primal a
/// (e.g. A^{-1} r). From b_m = sum_j f(a_j, y_{m-j}):
///   y_m = solve0(b_m - f(a_m, y) - sum_{j=1..m-1} f(a_j, y_{m-j})).
/// In plain forward mode only y_1: solve0(tb - f(ta, y)).
Tensor jet_divide(const Tensor& y, const Tensor& ta, const Tensor& tb, const Bilinear& f, const LinearMap& solve0);
/// y solves f(y, y) = x with f bilinear (Cholesky: y y^T = x); lin0(r) is
/// the y_m with f(y_m, y) + f(y, y_m) = r: x_m = f(y, y_m) + f(y_m, y) +
/// sum_{i=1..m-1} f(y_i, y_{m-i}), so y_m = lin0(x_m - sum_{i=1..m-1} f(y_i, y_{m-i})).
Tensor jet_square(const Tensor& tx, const Bilinear& f, const LinearMap& lin0);
/// log|det A|'s tangent from A's (ta) and the jet of Z = A^{-1} (z the
/// primal inverse, tz its tangent): y' = tr(Z A') gives
///   y_m = (1/m) sum_{i=1..m} i tr(Z_{m-i} A_i).
Tensor jet_logabsdet(const Tensor& z, const Tensor& tz, const Tensor& ta);
/// The symmetric eigenproblem's jet in the primal eigenbasis: A(t) V(t) =
/// V(t) Lambda(t), V^T V = I, written V(t) = V0 W(t) (W_0 = I), from tb, the
/// coefficients B_m = V0^T sym(A_m) V0, and gaps F_ik = 1 / (lambda_k -
/// lambda_i) off the diagonal (0 on it). Order by order, B W = W Lambda and
/// W^T W = I give
///   R_m = B_m + sum_{j=1..m-1} (B_j W_{m-j} - W_j Lambda_{m-j}),
///   Lambda_m = diag(R_m), W_m = F o R_m - diag(sum_{j=1..m-1} W_j^T W_{m-j}) / 2.
/// Returns (the eigenvalues' tangent, W's tangent); in plain forward mode
/// only m = 1: (diag(tb), F o tb).
std::pair<Tensor, Tensor> jet_eigh(const Tensor& gaps, const Tensor& tb);

}  // namespace tg::autograd::ops_detail
