// Differentiable mm, bmm, matmul, linear. Each backward computes only the
// gradients should_compute_output() asks for: under grad(y, x) through a
// linear layer the weight GEMM is skipped (edge trimming).
#include <tapegrad/tensor/error.h>

#include "autograd/accumulation.h"
#include "autograd/ops/ops.h"
#include "autograd/ops/record.h"
#include "autograd/ops/taylor.h"

#include "tensor/composite.h"
#include "tensor/linalg_kernels.h"

namespace tg {

using autograd::SavedVariable;
using autograd::variable_list;
using namespace autograd::ops_detail;

namespace {

// mm (batched = false) or bmm (batched = true): dA = g B^T, dB = A^T g
// (complex: g B^H, A^H g).
class GemmBackward final : public OpNode, public autograd::ProductFormula {
 public:
  explicit GemmBackward(bool batched)
      : OpNode(batched ? "bmm" : "mm", batched ? "BmmBackward" : "MmBackward"), batched_(batched) {}
  variable_list apply(variable_list&& grads) override {
    variable_list out(2);
    const Tensor& g = grads[0];
    if (is_complex(g.dtype())) {
      auto mat = [this](const Tensor& x, const Tensor& y) { return batched_ ? bmm(x, y) : mm(x, y); };
      if (should_compute_output(0)) out[0] = mat(g, conj(other_.unpack(this, "mat2")).transpose(-2, -1));
      if (should_compute_output(1)) out[1] = mat(conj(self_.unpack(this, "self")).transpose(-2, -1), g);
      return out;
    }
    if (batched_) {
      if (should_compute_output(0)) out[0] = bmm(g, other_.unpack(this, "mat2").transpose(1, 2));
      if (should_compute_output(1)) out[1] = bmm(self_.unpack(this, "self").transpose(1, 2), g);
      return out;
    }
    // A leaf's gradient may go to the engine as a product (summed with the
    // leaf's other products in one GEMM). g b^T as linear(g, b): under
    // create_graph b stays a direct input (no transpose node before it).
    if (should_compute_output(0)) {
      const Tensor b = other_.unpack(this, "mat2");
      out[0] = autograd::product_allowed(*this, 0) ? autograd::product_grad(*this, 0, g.t(), b.t()) : linear(g, b);
    }
    if (should_compute_output(1)) out[1] = autograd::product_grad(*this, 1, self_.unpack(this, "self"), g);
    return out;
  }
  void release_variables() override {
    self_.release();
    other_.release();
  }
  SavedVariable self_, other_;

 private:
  bool batched_;
};

// Tangent: ta b + a tb.
Tensor gemm_op(const Tensor& a, const Tensor& b, bool batched) {
  Tensor out;
  if (!should_record({&a, &b})) {
    out = run_raw([&] { return batched ? raw::bmm(a, b) : raw::mm(a, b); });
  } else {
    out = run_raw([&] { return batched ? raw::bmm(a, b) : raw::mm(a, b); });
    auto node = make_node<GemmBackward>({&a, &b}, batched);
    if (node->needs_input_grad(1)) node->self_ = SavedVariable(a, false);
    if (node->needs_input_grad(0)) node->other_ = SavedVariable(b, false);
    out = finish(out, node);
  }
  if (fw_any({&a, &b})) {
    const Tensor ta = fw_t(a), tb = fw_t(b);
    fw_rule(out, [&] {
      // Batched tangents ([k] + shape): matmul broadcasts the batch.
      auto prod = [&](const Tensor& x, const Tensor& y) {
        return fw_batch() > 0 ? tg::matmul(x, y) : batched ? tg::bmm(x, y) : tg::mm(x, y);
      };
      return jet_product(a, ta, b, tb, prod);  // Taylor mode: with the c_i c_(k-i) products
    });
  }
  return out;
}

// A matrix a [n, k] times a batch b [..., k, m]: one batched GEMM with a
// broadcast (batch stride 0). a's gradient, the sum over the batch of
// g_i b_i^H, is one GEMM with the batch folded into its inner dim (the
// batched product behind expand's sum has one n x m output per batch item
// and used a few of the GPU's cores: an FNO layer's 32 x 32 weight over 20
// items of 16384 points took 0.58 ms on an H100); b's is a^H g, batched.
class BroadcastMatmulBackward final : public OpNode {
 public:
  BroadcastMatmulBackward() : OpNode("matmul", "MatmulBackward") {}
  variable_list apply(variable_list&& grads) override {
    variable_list out(2);
    const Tensor& g = grads[0];
    const bool cx = is_complex(g.dtype());
    if (should_compute_output(0)) {
      // t [..., r, m] -> [r, (batch, m)]
      auto fold = [](const Tensor& t) {
        const int64_t r = t.size(-2), m = t.size(-1);
        int64_t batch = 1;  // explicit: -1 cannot be inferred for zero sizes
        for (int64_t d = 0; d + 2 < t.dim(); ++d)
          batch *= t.size(d);
        return t.reshape({batch, r, m}).permute({1, 0, 2}).reshape({r, batch * m});
      };
      Tensor b = fold(other_.unpack(this, "other"));
      out[0] = mm(fold(g), (cx ? conj(b) : b).t());
    }
    if (should_compute_output(1)) {
      Tensor a = self_.unpack(this, "self");
      out[1] = matmul((cx ? conj(a) : a).t(), g);
    }
    return out;
  }
  void release_variables() override {
    self_.release();
    other_.release();
  }
  SavedVariable self_, other_;
};

Tensor broadcast_matmul(const Tensor& a, const Tensor& b) {
  Tensor out = run_raw([&] { return raw::matmul(a, b); });
  if (should_record({&a, &b})) {
    auto node = make_node<BroadcastMatmulBackward>({&a, &b});
    if (node->needs_input_grad(1)) node->self_ = SavedVariable(a, false);
    if (node->needs_input_grad(0)) node->other_ = SavedVariable(b, false);
    out = finish(out, node);
  }
  if (fw_any({&a, &b})) {
    const Tensor ta = fw_t(a), tb = fw_t(b);
    const int64_t batch_dims = b.dim() - 2;
    fw_rule(out, [&] {
      // A batch of tangents of a ([K, n, k]) meets b's batch dims after K.
      auto prod = [&](const Tensor& x, const Tensor& y) {
        if (fw_batch() == 0 || x.dim() == 2) return tg::matmul(x, y);
        Tensor xb = x;  // [K, 1 (per batch dim of b)..., n, k]: a view of any layout
        for (int64_t d = 0; d < batch_dims; ++d)
          xb = xb.unsqueeze(1);
        return tg::matmul(xb, y);
      };
      return jet_product(a, ta, b, tb, prod);
    });
  }
  return out;
}

// y = x w^T + b over the last dim of x.
class LinearBackward final : public OpNode, public autograd::ProductFormula {
 public:
  LinearBackward() : OpNode("linear", "LinearBackward") {}
  variable_list apply(variable_list&& grads) override {
    variable_list out(3);
    const Tensor& g = grads[0];
    if (should_compute_output(0)) out[0] = matmul(g, weight_.unpack(this, "weight"));
    bool gw = should_compute_output(1), gb = should_compute_output(2);
    if (gw || gb) {
      // The leading dims as one, given (-1 is not inferred from zero
      // elements: no input or output features).
      auto rows = [](const Tensor& t) {
        int64_t r = 1;
        for (int64_t d = 0; d + 1 < t.dim(); ++d)
          r *= t.size(d);
        return r;
      };
      Tensor g2 = g.reshape({rows(g), g.size(-1)});
      if (gw) {
        Tensor x = input_.unpack(this, "input");
        out[1] = autograd::product_grad(*this, 1, g2, x.reshape({rows(x), x.size(-1)}));
      }
      if (gb) out[2] = sum(g2, {0});
    }
    return out;
  }
  void release_variables() override {
    input_.release();
    weight_.release();
  }
  SavedVariable input_, weight_;
};

}  // namespace

Tensor autograd::ops::mm(const Tensor& a, const Tensor& b) {
  if (a.defined() && a.is_sparse()) return autograd::impl::sparse_mm(a, b);
  return gemm_op(a, b, false);
}
Tensor autograd::ops::bmm(const Tensor& a, const Tensor& b) { return gemm_op(a, b, true); }

// Tangent: tx w^T + x tw^T + tb.
Tensor autograd::ops::linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  Tensor out;
  if (!should_record({&x, &w, &b})) {
    out = run_raw([&] { return raw::linear(x, w, b); });
  } else {
    out = run_raw([&] { return raw::linear(x, w, b); });
    auto node = make_node<LinearBackward>({&x, &w, &b});
    if (node->needs_input_grad(1)) node->input_ = SavedVariable(x, false);
    if (node->needs_input_grad(0)) node->weight_ = SavedVariable(w, false);
    out = finish(out, node);
  }
  if (fw_any({&x, &w, &b})) {
    const Tensor tx = fw_t(x), tw = fw_t(w), tb = fw_t(b);
    if (tx.defined() && !tw.defined() && !tb.defined() && x.dim() >= 2 && forward_ad::taylor_layout() &&
        forward_ad::detail::deferring_tangents()) {
      // Taylor mode, a constant layer: tx w^T when (and where) it is read.
      forward_ad::detail::defer_tangent(
          out, tx, [w](const Tensor& t) { return tg::matmul(t, w.t()); }, {w}, "linear");
      return out;
    }
    fw_rule(out, [&] {
      // A 1-D x as a row [1, in] (so a batched tangent [k, 1, in] stays a
      // batch of rows in the Taylor cross terms); batched: tw^T [k, in, out]
      // padded so x's leading dims broadcast.
      const bool vec = x.dim() == 1;
      const Tensor x2 = vec ? x.unsqueeze(0) : x;
      const Tensor tx2 = vec && tx.defined() ? tx.unsqueeze(-2) : tx;
      Tensor twt = tw.defined() ? fw_pad(tw.transpose(-1, -2), x2.dim()) : Tensor();
      Tensor t = jet_product(x2, tx2, w.t(), twt, [](const Tensor& u, const Tensor& v) { return tg::matmul(u, v); });
      if (vec && t.defined()) t = t.squeeze(-2);
      return fw_add(t, fw_pad(tb, out.dim()));
    });
  }
  return out;
}

// Composite: the same cases as the raw op, expressed with differentiable
// views and mm/bmm, so each GEMM node trims on its own.
Tensor autograd::ops::matmul(const Tensor& a, const Tensor& b) {
  if (a.defined() && a.is_sparse()) return autograd::impl::sparse_mm(a, b, "matmul");
  // a broadcast along a leading dim (stride 0: e.g. Taylor mode's input
  // directions, the same for every sample) times a matrix: one copy's
  // product, expanded (the GEMM shrinks by that dim's size). Only for an a
  // that is a constant to autograd: one that requires grad (a leaf made
  // from an expand, say) has a gradient per position, and one with a
  // tangent may carry a tangent per position (a per-sample direction), and
  // both would see only the first copy's.
  if (a.defined() && b.defined() && a.dim() >= 2 && b.dim() == 2 && !b.is_sparse() && !a.requires_grad() &&
      !fw_any({&a})) {
    Tensor one = a;
    for (int64_t d = 0; d + 1 < a.dim(); ++d)
      if (a.size(d) > 1 && a.stride(d) == 0) one = one.narrow(d, 0, 1);
    if (!one.is_same(a)) {
      IntList shape = a.sizes();
      shape.back() = b.size(1);
      return tg::matmul(one, b).expand(shape);
    }
  }
  if (!should_record({&a, &b}) && !fw_any({&a, &b})) return raw::matmul(a, b);
  if (a.defined() && b.defined() && a.dim() == 2 && b.dim() >= 3 && !b.is_sparse()) {
    return broadcast_matmul(a, b);
  }
  return tg::detail::matmul_shapes<tg::detail::PublicOps>(a, b);
}

}  // namespace tg

// ---- tg::linalg's primitives (<tapegrad/tensor/linalg.def>) -----------------------
// Each node's backward formula is written with the public ops (linalg
// included), so it differentiates again; each tangent rule likewise, and the
// implicit ones (cholesky, the solves, slogdet) give their Taylor rule
// through the jets of autograd/ops/taylor.h. Multi-output ops record one node
// whose inputs are their floating outputs; a gradient may come from any
// subset (the others arrive undefined).
namespace tg {
namespace {

Tensor mT(const Tensor& t) { return t.transpose(-2, -1); }
// A rule at first order (nothing records, no tangent): it may work in place
// on its own fresh results, saving whole-matrix temporaries.
bool first_order(const Tensor& t) { return !autograd::is_grad_enabled() && !fw_any({&t}); }
Tensor sym(const Tensor& t) {
  if (first_order(t)) return add(t, mT(t)).mul_(0.5);
  return mul(add(t, mT(t)), 0.5);
}
// The lower triangle with its diagonal halved (Cholesky's Phi). Recorded: one
// multiply by the constant weights tril(1) - I / 2 (linear in t, so it
// differentiates again as itself); at first order tril(t) with its diagonal
// halved in place (no n x n weights: their temporaries were most of the
// n = 4096 GP gradient's extra peak memory).
Tensor phi(const Tensor& t) {
  if (first_order(t)) {
    Tensor out = tril(t);
    diagonal(out, 0, -2, -1).mul_(0.5);
    return out;
  }
  const int64_t n = t.size(-1);
  const TensorOptions o = TensorOptions().dtype(t.dtype()).device(t.device());
  return mul(t, sub(tril(ones({n, n}, o)), mul(eye(n, o), 0.5)));
}
// diag(v) of the last dim: v_i on the diagonal (a broadcast multiply by I).
Tensor diag_of(const Tensor& v) {
  const int64_t n = v.size(-1);
  return mul(v.unsqueeze(-1), eye(n, TensorOptions().dtype(v.dtype()).device(v.device())));
}
// A triangle as solve_triangular reads it.
Tensor triangle(const Tensor& t, bool upper, bool unit) {
  return upper ? triu(t, unit ? 1 : 0) : tril(t, unit ? -1 : 0);
}
Tensor add_defined(const Tensor& a, const Tensor& b) { return fw_add(a, b); }
// Makes `node` the producer of each output, in order, and saves each in its
// slot (a multi-output op's one node).
template <class N>
void record_outputs(const std::shared_ptr<N>& node, std::initializer_list<std::pair<Tensor*, SavedVariable*>> outs) {
  for (const auto& o : outs) {
    *o.first = finish(*o.first, node);
    *o.second = SavedVariable(*o.first, true);
  }
}
// Runs f with forward mode paused (a tangent rule's own ops push no tangents).
template <class F> void paused(F&& f) {
  autograd::forward_ad::detail::Suspend pause;
  f();
}
// F_ij = 1 / (d_j - d_i) off the diagonal, 0 on it (no inf anywhere, so its
// own derivative has no NaN).
Tensor inverse_gaps(const Tensor& d) {
  const int64_t n = d.size(-1);
  Tensor eye_mask = gt(eye(n, TensorOptions().dtype(d.dtype()).device(d.device())), 0.5);
  Tensor e = sub(d.unsqueeze(-2), d.unsqueeze(-1));
  Tensor safe = where(eye_mask, ones_like(e), e);
  return where(eye_mask, zeros_like(e), reciprocal(safe));
}
Tensor permute_rows(const Tensor& X, const Tensor& p) { return tg::detail::permute_rows(X, p, "linalg.lu_factor"); }
// The row order (P^T A)[i] = A[perm[i]] of lu_factor's pivots (no recording).
Tensor permutation_of(const Tensor& LU, const Tensor& pivots) {
  // lu_solve of the identity's rows would do; the kernel is direct.
  Tensor perm = pivots.clone();
  const int64_t n = pivots.size(-1);
  if (pivots.numel() > 0)
    tg::kernels::linalg_kernels(LU.device(), "linalg.lu_factor")
        .pivots_to_permutation(pivots.contiguous().view({-1, n}), perm.view({-1, n}));
  return perm;
}

// ---- cholesky ----
class CholeskyBackward final : public SelfResultNode {  // result_: the factor
 public:
  explicit CholeskyBackward(bool upper) : SelfResultNode("linalg.cholesky", "LinalgCholeskyBackward"), upper_(upper) {}
  // gA = sym(L^-T Phi(L^T gL) L^-1).
  variable_list apply(variable_list&& grads) override {
    variable_list out(1);
    if (!grads[0].defined() || !should_compute_output(0)) return out;
    Tensor L = result_.unpack(this, "L");
    if (upper_) L = mT(L);
    const Tensor gL = upper_ ? mT(grads[0]) : grads[0];
    Tensor p = phi(matmul(mT(L), gL));
    Tensor x = linalg::solve_triangular(mT(L), p, true);
    out[0] = sym(linalg::solve_triangular(L, x, false, false));
    return out;
  }

 private:
  bool upper_;
};

// tL = L Phi(L^-1 sym(tA) L^-T); Taylor: jet_square with f(u, v) = u v^T.
Tensor cholesky_lin0(const Tensor& L, const Tensor& r) {
  Tensor y = linalg::solve_triangular(L, sym(r), false);
  Tensor z = linalg::solve_triangular(L, mT(y), false);
  return matmul(L, phi(z));
}

// ---- solve_triangular ----
class SolveTriangularBackward final : public SelfResultNode {  // self_: A, result_: X
 public:
  SolveTriangularBackward(bool upper, bool left, bool unit)
      : SelfResultNode("linalg.solve_triangular", "LinalgSolveTriangularBackward"),
        upper_(upper),
        left_(left),
        unit_(unit) {}
  // left: gB = A^-T g, gA = -gB X^T; right: gB = g A^-T, gA = -X^T gB; gA on
  // the triangle read.
  variable_list apply(variable_list&& grads) override {
    variable_list out(2);
    const Tensor& g = grads[0];
    if (!g.defined()) return out;
    Tensor A = self_.unpack(this, "A");
    Tensor gB = tg::linalg::solve_triangular(mT(A), g, !upper_, left_, unit_);
    if (should_compute_output(0)) {
      Tensor X = result_.unpack(this, "result");
      const Tensor ngB = neg(gB);  // on the factor: [n, k] rather than the [n, n] product
      out[0] = triangle(left_ ? matmul(ngB, mT(X)) : matmul(mT(X), ngB), upper_, unit_);
    }
    if (should_compute_output(1)) out[1] = gB;
    return out;
  }

 private:
  bool upper_, left_, unit_;
};

// ---- solve ----
class SolveBackward final : public SelfResultNode {  // self_: A, result_: X
 public:
  SolveBackward(bool left, bool vec) : SelfResultNode("linalg.solve", "LinalgSolveBackward"), left_(left), vec_(vec) {}
  // left: gB = A^-T g, gA = -gB X^T; right: gB = g A^-T, gA = -X^T gB.
  variable_list apply(variable_list&& grads) override {
    variable_list out(2);
    if (!grads[0].defined()) return out;
    Tensor A = self_.unpack(this, "A");
    Tensor g = vec_ ? grads[0].unsqueeze(-1) : grads[0];
    Tensor gB = std::get<0>(tg::linalg::solve_ex(mT(A), g, left_, false));
    if (should_compute_output(0)) {
      Tensor X = result_.unpack(this, "result");
      if (vec_) X = X.unsqueeze(-1);
      out[0] = neg(left_ ? matmul(gB, mT(X)) : matmul(mT(X), gB));
    }
    if (should_compute_output(1)) out[1] = vec_ ? gB.squeeze(-1) : gB;
    return out;
  }

 private:
  bool left_, vec_;
};

// ---- slogdet ----
class SlogdetBackward final : public SelfResultNode {  // self_: A
 public:
  SlogdetBackward() : SelfResultNode("linalg.slogdet", "LinalgSlogdetBackward") {}
  // d log|det A| / dA = A^-T (sign has no gradient).
  variable_list apply(variable_list&& grads) override {
    variable_list out(1);
    if (!grads[0].defined() || !should_compute_output(0)) return out;
    Tensor A = self_.unpack(this, "A");
    Tensor inv = std::get<0>(tg::linalg::inv_ex(A, false));
    out[0] = mul(grads[0].unsqueeze(-1).unsqueeze(-1), mT(inv));
    return out;
  }
};

// ---- lu_factor ----
class LuFactorBackward final : public SelfResultNode {  // result_: LU
 public:
  LuFactorBackward() : SelfResultNode("linalg.lu_factor", "LinalgLuFactorBackward") {}
  // A = P L U: gA = P L^-T (tril(L^T gL, -1) + triu(gU U^T)) U^-T.
  variable_list apply(variable_list&& grads) override {
    variable_list out(1);
    const Tensor& g = grads[0];
    if (!g.defined() || !should_compute_output(0)) return out;
    Tensor LU = result_.unpack(this, "LU");
    const int64_t n = LU.size(-1);
    Tensor L = add(tril(LU, -1), eye(n, TensorOptions().dtype(LU.dtype()).device(LU.device())));
    Tensor U = triu(LU);
    Tensor M = add(tril(matmul(mT(L), tril(g, -1)), -1), triu(matmul(triu(g), mT(U))));
    Tensor x = tg::linalg::solve_triangular(mT(L), M, true, true, true);
    Tensor y = tg::linalg::solve_triangular(mT(U), x, false, false);
    out[0] = permute_rows(y, argsort(perm_, -1));
    return out;
  }
  Tensor perm_;  // Int64, not differentiable
};

// ---- eigh ----
class EighBackward final : public OpNode {
 public:
  EighBackward() : OpNode("linalg.eigh", "LinalgEighBackward") {}
  // gA = sym(V (diag(gw) + F o (V^T gV)) V^T), F_ij = 1 / (w_j - w_i).
  variable_list apply(variable_list&& grads) override {
    variable_list out(1);
    const Tensor &gw = grads[0], &gV = grads[1];
    if ((!gw.defined() && !gV.defined()) || !should_compute_output(0)) return out;
    Tensor V = v_.unpack(this, "eigenvectors");
    Tensor inner = gw.defined() ? diag_of(gw) : Tensor();
    if (gV.defined()) {
      Tensor w = w_.unpack(this, "eigenvalues");
      inner = add_defined(inner, mul(inverse_gaps(w), matmul(mT(V), gV)));
    }
    out[0] = sym(matmul(matmul(V, inner), mT(V)));
    return out;
  }
  void release_variables() override {
    w_.release();
    v_.release();
  }
  SavedVariable w_, v_;
};

// ---- qr ----
class QrBackward final : public OpNode {
 public:
  explicit QrBackward(std::string mode) : OpNode("linalg.qr", "LinalgQrBackward"), mode_(std::move(mode)) {}
  // m >= n: gA = (gQ + Q N) R^-T, N = triu(M) + triu(M, 1)^T,
  // M = gR R^T - Q^T gQ.
  variable_list apply(variable_list&& grads) override {
    variable_list out(1);
    const Tensor &gQ = grads[0], &gR = grads[1];
    if ((!gQ.defined() && !gR.defined()) || !should_compute_output(0)) return out;
    Tensor Q = q_.unpack(this, "Q"), R = r_.unpack(this, "R");
    Tensor M = gR.defined() ? matmul(gR, mT(R)) : Tensor();
    if (gQ.defined()) M = M.defined() ? sub(M, matmul(mT(Q), gQ)) : neg(matmul(mT(Q), gQ));
    Tensor N = add(triu(M), mT(triu(M, 1)));
    Tensor rhs = add_defined(gQ, matmul(Q, N));
    out[0] = tg::linalg::solve_triangular(mT(R), rhs, false, false);
    return out;
  }
  void release_variables() override {
    q_.release();
    r_.release();
  }
  SavedVariable q_, r_;

 private:
  std::string mode_;
};

// ---- svd ----
// The reduced SVD's pieces: U [m, k], S [k], V [n, k].
struct SvdParts {
  Tensor U, S, V;
};
class SvdBackward final : public OpNode {
 public:
  SvdBackward() : OpNode("linalg.svd", "LinalgSvdBackward") {}
  // Townsend (2016), F_ij = 1 / (s_j^2 - s_i^2):
  // gA = U [(F o (U^T gU - gU^T U)) S + diag(gS) + S (F o (V^T gV - gV^T V))] V^T
  //      + (I - U U^T) gU S^-1 V^T + U S^-1 gV^T (I - V V^T).
  variable_list apply(variable_list&& grads) override {
    variable_list out(1);
    Tensor gU = grads[0], gS = grads[1], gVh = grads[2];
    if ((!gU.defined() && !gS.defined() && !gVh.defined()) || !should_compute_output(0)) return out;
    Tensor U = u_.unpack(this, "U"), S = s_.unpack(this, "S"), Vh = vh_.unpack(this, "Vh");
    const int64_t m = U.size(-2), n = Vh.size(-1), k = S.size(-1);
    if (U.size(-1) != k || Vh.size(-2) != k) {
      TG_CHECK(!gU.defined() && !gVh.defined(), "linalg.svd: the derivative of U and Vh with full_matrices=true on a ",
               m, " x ", n, " matrix is not defined (their extra columns are arbitrary); use full_matrices=false");
      U = U.narrow(-1, 0, k);
      Vh = Vh.narrow(-2, 0, k);
    }
    Tensor V = mT(Vh), gV = gVh.defined() ? mT(gVh) : Tensor();
    Tensor inner = gS.defined() ? diag_of(gS) : Tensor();
    if (gU.defined() || gV.defined()) {
      Tensor F = inverse_gaps(mul(S, S));
      if (gU.defined()) {
        Tensor UtgU = matmul(mT(U), gU);
        inner = add_defined(inner, mul(mul(F, sub(UtgU, mT(UtgU))), S.unsqueeze(-2)));
      }
      if (gV.defined()) {
        Tensor VtgV = matmul(mT(V), gV);
        inner = add_defined(inner, mul(S.unsqueeze(-1), mul(F, sub(VtgV, mT(VtgV)))));
      }
    }
    Tensor gA = matmul(matmul(U, inner), Vh);
    Tensor Sinv = reciprocal(S);
    if (gU.defined() && m > k) gA = add(gA, matmul(mul(sub(gU, matmul(U, matmul(mT(U), gU))), Sinv.unsqueeze(-2)), Vh));
    if (gV.defined() && n > k)
      gA = add(gA, matmul(mul(U, Sinv.unsqueeze(-2)), sub(mT(gV), matmul(matmul(mT(gV), V), Vh))));
    out[0] = gA;
    return out;
  }
  void release_variables() override {
    u_.release();
    s_.release();
    vh_.release();
  }
  SavedVariable u_, s_, vh_;
};

// The primitives' differentiable forms (the table's entries forward here:
// in namespace tg, matmul & co. name the public ops).
namespace linalg_impl {

TensorPair cholesky_ex(const Tensor& A, bool upper, bool check_errors) {
  TensorPair r = run_raw([&] { return raw::linalg::cholesky_ex(A, upper, check_errors); });
  Tensor F = std::get<0>(r);
  if (should_record({&A})) {
    auto node = make_node<CholeskyBackward>({&A}, upper);
    F = finish(F, node);
    node->result_ = SavedVariable(F, true);
  }
  if (fw_any({&A})) {
    const Tensor tA = fw_t(A);
    fw_rule(F, [&] {
      const Tensor L = upper ? mT(F) : F;
      Tensor tL = jet_square(
          tA, [](const Tensor& u, const Tensor& v) { return matmul(u, mT(v)); },
          [&](const Tensor& res) { return cholesky_lin0(L, res); });
      return upper && tL.defined() ? mT(tL) : tL;
    });
  }
  return {F, std::get<1>(r)};
}

Tensor solve_triangular(const Tensor& A, const Tensor& B, bool upper, bool left, bool unit) {
  Tensor X = run_raw([&] { return raw::linalg::solve_triangular(A, B, upper, left, unit); });
  if (should_record({&A, &B})) {
    auto node = make_node<SolveTriangularBackward>({&A, &B}, upper, left, unit);
    node->self_ = SavedVariable(A, false);
    X = finish(X, node);
    if (node->needs_input_grad(0)) node->result_ = SavedVariable(X, true);
  }
  if (fw_any({&A, &B})) {
    // Tangents padded to X's rank (batch dims broadcast against A's or B's).
    const Tensor tA = fw_pad(fw_t(A), X.dim()), tB = fw_pad(fw_t(B), X.dim());
    fw_rule(X, [&] {
      Tensor ta = tA.defined() ? triangle(tA, upper, unit) : Tensor();
      auto f = [left](const Tensor& a, const Tensor& y) { return left ? matmul(a, y) : matmul(y, a); };
      return jet_divide(X, ta, tB, f,
                        [&](const Tensor& r) { return tg::linalg::solve_triangular(A, r, upper, left, unit); });
    });
  }
  return X;
}

TensorPair solve_ex(const Tensor& A, const Tensor& B, bool left, bool check_errors) {
  TensorPair r = run_raw([&] { return raw::linalg::solve_ex(A, B, left, check_errors); });
  Tensor X = std::get<0>(r);
  const bool vec =
      B.dim() == 1 || (B.dim() == A.dim() - 1 && IntList(A.sizes().begin(), A.sizes().end() - 1) == B.sizes());
  if (should_record({&A, &B})) {
    auto node = make_node<SolveBackward>({&A, &B}, left, vec);
    node->self_ = SavedVariable(A, false);
    X = finish(X, node);
    if (node->needs_input_grad(0)) node->result_ = SavedVariable(X, true);
  }
  if (fw_any({&A, &B})) {
    const Tensor Xm = vec ? X.unsqueeze(-1) : X;
    const Tensor tB0 = fw_t(B);
    // Tangents padded to the matrix solution's rank (batch dims broadcast).
    const Tensor tA = fw_pad(fw_t(A), Xm.dim());
    const Tensor tBm = fw_pad(vec && tB0.defined() ? tB0.unsqueeze(-1) : tB0, Xm.dim());
    fw_rule(X, [&] {
      auto f = [left](const Tensor& a, const Tensor& y) { return left ? matmul(a, y) : matmul(y, a); };
      Tensor t = jet_divide(Xm, tA, tBm, f,
                            [&](const Tensor& res) { return std::get<0>(tg::linalg::solve_ex(A, res, left, false)); });
      return vec && t.defined() ? t.squeeze(-1) : t;
    });
  }
  return {X, std::get<1>(r)};
}

TensorPair slogdet(const Tensor& A) {
  TensorPair r = run_raw([&] { return raw::linalg::slogdet(A); });
  Tensor logabs = std::get<1>(r);
  if (should_record({&A})) {
    auto node = make_node<SlogdetBackward>({&A});
    node->self_ = SavedVariable(A, false);
    logabs = finish(logabs, node);
  }
  if (fw_any({&A})) {
    const Tensor tA = fw_t(A);
    fw_rule(logabs, [&] {
      // Z = A^-1 and its jet (A Z = I), then tr(Z A')'s recurrence.
      Tensor Z = std::get<0>(tg::linalg::inv_ex(A, false));
      Tensor tZ;
      if (fw_taylor())
        tZ = jet_divide(
            Z, tA, Tensor(), [](const Tensor& a, const Tensor& y) { return matmul(a, y); },
            [&](const Tensor& res) { return matmul(Z, res); });
      return jet_logabsdet(Z, tZ, tA);
    });
  }
  return {std::get<0>(r), logabs};
}

TensorTriple lu_factor_ex(const Tensor& A, bool pivot, bool check_errors) {
  TensorTriple r = run_raw([&] { return raw::linalg::lu_factor_ex(A, pivot, check_errors); });
  Tensor LU = std::get<0>(r);
  const Tensor& piv = std::get<1>(r);
  const bool fw = fw_any({&A});
  Tensor perm = should_record({&A}) || fw ? run_raw([&] { return permutation_of(LU, piv); }) : Tensor();
  if (should_record({&A})) {
    auto node = make_node<LuFactorBackward>({&A});
    LU = finish(LU, node);
    node->result_ = SavedVariable(LU, true);
    node->perm_ = perm;
  }
  if (fw) {
    const Tensor tA = fw_t(A);
    fw_rule(LU, [&] {
      // X = L^-1 P^T tA U^-1; tLU = L tril(X, -1) + triu(X) U.
      const int64_t n = LU.size(-1);
      Tensor L = add(tril(LU, -1), eye(n, TensorOptions().dtype(LU.dtype()).device(LU.device())));
      Tensor U = triu(LU);
      Tensor y = tg::linalg::solve_triangular(L, permute_rows(tA, perm), false, true, true);
      Tensor X = tg::linalg::solve_triangular(U, y, true, false);
      return add(matmul(L, tril(X, -1)), matmul(triu(X), U));
    });
  }
  return {LU, piv, std::get<2>(r)};
}

TensorPair eigh(const Tensor& A, const std::string& UPLO) {
  TensorPair r = run_raw([&] { return raw::linalg::eigh(A, UPLO); });
  Tensor w = std::get<0>(r), V = std::get<1>(r);
  if (should_record({&A})) {
    auto node = make_node<EighBackward>({&A});
    record_outputs(node, {{&w, &node->w_}, {&V, &node->v_}});
  }
  if (fw_any({&A})) {
    // M = V^T sym(tA) V: tw = diag(M), tV = V (F o M), F_ik = 1 / (w_k - w_i).
    // Taylor mode: V(t) = V W(t) with B_m = V^T sym(A_m) V (all coefficients
    // in one product) and, order by order (jet_eigh),
    //   R_m = B_m + sum_{j<m} (B_j W_{m-j} - W_j diag(w_{m-j})),
    //   w_m = diag(R_m), W_m = F o R_m - diag(sum_{j<m} W_j^T W_{m-j}) / 2.
    const Tensor tA = fw_t(A);
    Tensor tw, tV;
    paused([&] {
      const Tensor M = matmul(matmul(mT(V), sym(tA)), V);
      Tensor tW;
      std::tie(tw, tW) = jet_eigh(inverse_gaps(w), M);
      tV = matmul(V, tW);
    });
    fw_rule(w, [&] { return tw; });
    fw_rule(V, [&] { return tV; });
  }
  return {w, V};
}

TensorPair qr(const Tensor& A, const std::string& mode) {
  TensorPair r = run_raw([&] { return raw::linalg::qr(A, mode); });
  Tensor Q = std::get<0>(r), R = std::get<1>(r);
  const int64_t m = A.size(-2), n = A.size(-1);
  const bool differentiable = mode != "r" && (m >= n && (mode == "reduced" || m == n));
  if (should_record({&A}) || fw_any({&A}))
    TG_CHECK(differentiable, "linalg.qr: the derivative is defined for mode \"reduced\" with rows >= columns (or a ",
             "square A), got mode \"", mode, "\" on ", shape_str(A.sizes()),
             mode == "r" ? "; mode \"r\" computes no Q, which the derivative needs: use \"reduced\""
             : m < n     ? "; for rows < columns differentiate the QR of A's transpose"
                         : "; the extra columns of a complete Q are arbitrary: use mode \"reduced\"");
  if (should_record({&A})) {
    auto node = make_node<QrBackward>({&A}, mode);
    record_outputs(node, {{&Q, &node->q_}, {&R, &node->r_}});
  }
  if (fw_any({&A})) {
    // C = Q^T tA R^-1, Omega = tril(C, -1) - tril(C, -1)^T:
    // tR = (C - Omega) R, tQ = tA R^-1 - Q (C - Omega).
    const Tensor tA = fw_t(A);
    Tensor tAR, CO;
    paused([&] {
      tAR = tg::linalg::solve_triangular(R, tA, true, false);
      Tensor C = matmul(mT(Q), tAR);
      CO = add(triu(C), mT(tril(C, -1)));
    });
    fw_rule(Q, [&] { return sub(tAR, matmul(Q, CO)); });
    fw_rule(R, [&] { return matmul(CO, R); });
  }
  return {Q, R};
}

TensorTriple svd(const Tensor& A, bool full_matrices) {
  TensorTriple r = run_raw([&] { return raw::linalg::svd(A, full_matrices); });
  Tensor U = std::get<0>(r), S = std::get<1>(r), Vh = std::get<2>(r);
  if (should_record({&A})) {
    auto node = make_node<SvdBackward>({&A});
    record_outputs(node, {{&U, &node->u_}, {&S, &node->s_}, {&Vh, &node->vh_}});
  }
  if (fw_any({&A})) {
    const int64_t m = A.size(-2), n = A.size(-1), k = S.size(-1);
    const bool extra = U.size(-1) != k || Vh.size(-2) != k;
    TG_CHECK(!extra, "linalg.svd: the tangent of U and Vh with full_matrices=true on a ", m, " x ", n,
             " matrix is not defined (their extra columns are arbitrary); use full_matrices=false");
    // dP = U^T tA V: tS = diag(dP), tU = U (F o (dP S + S dP^T)) + (I - U U^T) tA V S^-1,
    // tV = V (F o (S dP + dP^T S)) + (I - V V^T) tA^T U S^-1.
    const Tensor tA = fw_t(A);
    Tensor tS, tU, tVh;
    paused([&] {
      Tensor V = mT(Vh);
      Tensor dP = matmul(matmul(mT(U), tA), V);
      Tensor F = inverse_gaps(mul(S, S));
      Tensor Sr = S.unsqueeze(-2), Sc = S.unsqueeze(-1), Sinv = reciprocal(S).unsqueeze(-2);
      tS = diagonal(dP, 0, -2, -1);
      tU = matmul(U, mul(F, add(mul(dP, Sr), mul(Sc, mT(dP)))));
      Tensor tV = matmul(V, mul(F, add(mul(Sc, dP), mul(mT(dP), Sr))));
      if (m > k) {
        Tensor tAV = matmul(tA, V);
        tU = add(tU, mul(sub(tAV, matmul(U, matmul(mT(U), tAV))), Sinv));
      }
      if (n > k) {
        Tensor tAtU = matmul(mT(tA), U);
        tV = add(tV, mul(sub(tAtU, matmul(V, matmul(Vh, tAtU))), Sinv));
      }
      tVh = mT(tV);
    });
    fw_rule(U, [&] { return tU; });
    fw_rule(S, [&] { return tS; });
    fw_rule(Vh, [&] { return tVh; });
  }
  return {U, S, Vh};
}

}  // namespace linalg_impl
}  // namespace

namespace autograd::ops::linalg {
#define TG_LINALG_IF_P_P(...) __VA_ARGS__
#define TG_LINALG_IF_P_C(...)
#define TG_D(...)
#define TG_LINALG(ret, name, id, params, args, kind, taylor) \
  TG_LINALG_IF_P_##kind(ret name params { return tg::linalg_impl::name args; })
#include <tapegrad/tensor/linalg.def>
#undef TG_LINALG
#undef TG_D
}  // namespace autograd::ops::linalg
}  // namespace tg
