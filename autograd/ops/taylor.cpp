// Taylor-mode arithmetic (autograd/ops/taylor.h). Everything is written with
// the differentiable ops, so coefficients carry reverse-mode history (a loss
// on a Laplacian backpropagates into the parameters).
#include "autograd/ops/taylor.h"

#include <tapegrad/tensor/error.h>
#include <tapegrad/tensor/ops.h>
#include <tapegrad/tensor/raw.h>

#include "autograd/ops/record.h"
#include "autograd/thread_state.h"
#include "autograd/kernels/kernels.h"
#include "tensor/kernels.h"
#include "tensor/op_util.h"

namespace tg::autograd {
namespace ops_detail {

namespace {
using forward_ad::TaylorLayout;

const TaylorLayout& layout() {
  const TaylorLayout* l = forward_ad::detail::current_state().taylor;
  TG_CHECK(l, "Taylor mode: no Taylor level is active");
  return *l;
}

// Whether v is 0, 1, ..., n - 1.
bool is_iota(const std::vector<int64_t>& v, int64_t n) {
  if (int64_t(v.size()) != n) return false;
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] != int64_t(i)) return false;
  return true;
}

// The pairs' index and weight tensors, made once per level and device.
struct PairTensors {
  uint64_t id = 0;
  Device device;
  ScalarType dtype = kFloat32;
  Tensor ia, ib;        // Int64 [P]
  bool a_iota = false;  // pair_a is 0..P-1 (no gather needed)
  bool b_iota = false;
  Tensor weight;  // [P] (undefined: all 1)
  Tensor groups;  // [Q, P] 0/1 (undefined: one pair per group, or one group)
};

const PairTensors& pair_tensors(const TaylorLayout& l, const Tensor& like) {
  // One per thread (its ThreadStorage), remade when the level, device or dtype changes.
  PairTensors& p = autograd::detail::storage_slot<PairTensors>(autograd::detail::thread_storage().taylor);
  if (p.id == l.id && p.device == like.device() && p.dtype == like.dtype()) return p;
  p = PairTensors();
  const TensorOptions real = like.options();
  const int64_t P = int64_t(l.pair_a.size()), Q = l.second_rows;
  p.a_iota = is_iota(l.pair_a, l.directions);
  p.b_iota = is_iota(l.pair_b, l.directions);
  // Ranges known: selecting rows by them reads nothing back from the device.
  p.ia = tg::detail::index_tensor(l.pair_a, like.device());
  p.ib = tg::detail::index_tensor(l.pair_b, like.device());
  bool unit = true;
  for (double w : l.pair_weight)
    unit = unit && w == 1.0;
  if (!unit) p.weight = tensor(l.pair_weight, {}, real);
  if (P != Q && Q != 1) {
    std::vector<double> m(size_t(Q * P), 0.0);
    for (int64_t i = 0; i < P; ++i)
      m[size_t(l.pair_group[size_t(i)] * P + i)] = 1.0;
    p.groups = tensor(m, {Q, P}, real);
  }
  p.id = l.id;
  p.device = like.device();
  p.dtype = like.dtype();
  return p;
}

double factorial(int j) {
  double f = 1;
  for (int i = 2; i <= j; ++i)
    f *= i;
  return f;
}

// Splits a full tangent into c_1..c_K (index 1..K; [0] unused).
std::vector<Tensor> blocks(const TaylorLayout& l, const Tensor& t) {
  std::vector<Tensor> b(size_t(l.order) + 1);
  if (t.defined())
    for (int j = 1; j <= l.order; ++j)
      b[size_t(j)] = l.block(t, j);
  return b;
}

// Stacks c_1..c_K back (undefined blocks: zeros shaped like `like`'s block).
Tensor stack_blocks(const TaylorLayout& l, std::vector<Tensor> b, const Tensor& like) {
  std::vector<Tensor> parts;
  for (int j = 1; j <= l.order; ++j) {
    Tensor c = b[size_t(j)];
    if (!c.defined()) {
      IntList s = like.sizes();
      s[0] = l.rows(j);
      c = zeros(s, like.options());
    }
    parts.push_back(c);
  }
  return parts.size() == 1 ? parts[0] : cat(parts, 0);
}

// ---- the fused order-2 unary rule -----------------------------------------------
// The fused kernels' x: t [rows] + shape as [rows, P] rows, contiguous. When
// t's leading non-row dims are broadcast (stride 0: a first layer's
// coefficients, the same for every sample), only their period P is copied
// (the kernels read element s at s % P); otherwise P = the shape's numel.
Tensor taylor2_rows(const Tensor& t) {
  Tensor c = t;
  bool broadcast = false;
  for (int64_t d = 1; d < t.dim() && (t.strides()[size_t(d)] == 0 || t.size(d) == 1); ++d)
    if (t.size(d) > 1) {
      c = c.narrow(d, 0, 1);
      broadcast = true;
    }
  return broadcast ? c.contiguous() : t.contiguous();
}

// y = [d1 x1; d1 x2 + d2 / 2 * cross(x1, x1)] in one kernel (kernels.h
// taylor2_unary), for the layouts it covers (`kind`); the derivatives d1, d2
// are inputs, or — for an activation (act^(order)) — computed in the kernel
// from its input z (the node's inputs are then x and z). Its backward is the
// composite's, written with the differentiable ops (so it records again;
// unrecorded, it is one kernel too):
//   dx1 = g1 d1 + d2 * (the cross term's adjoint), dx2 = g2 d1,
//   dd1 = sum_rows g x, dd2 = sum_rows g2 cross / 2,
//   with z: dz = dd1 act^(order + 2)(z) + dd2 act^(order + 3)(z).
class Taylor2UnaryBackward final : public OpNode {
 public:
  Taylor2UnaryBackward(int kind, int64_t k, Tensor pa, Tensor pb, bool activation, Activation act, int order)
      : OpNode("taylor2_unary", "Taylor2UnaryBackward"),
        kind_(kind),
        k_(k),
        pa_(std::move(pa)),
        pb_(std::move(pb)),
        activation_(activation),
        act_(act),
        order_(order) {}
  variable_list apply(variable_list&& grads) override {
    variable_list out(activation_ ? 2 : 3);
    const Tensor& g = grads[0];
    Tensor x = x_.unpack(this, "x");
    Tensor z = activation_ ? z_.unpack(this, "z") : Tensor();
    const int64_t q = x.size(0) - k_;
    const auto& be = autograd::kernels::derivative_kernels(x.device());
    if (!autograd::is_grad_enabled() && !autograd::forward_ad::is_active() && be.taylor2_unary_backward &&
        g.device() == x.device()) {
      // Not recorded, no tangents to carry: one kernel (half types compute in float).
      const ScalarType t = x.dtype(), ct = tg::detail::compute_type(t);
      autograd::kernels::Taylor2Derivatives d;
      Tensor like;  // an input of the derivatives' shape and dtype
      if (activation_) {
        d.z = z.to(ct).contiguous();
        d.act = act_;
        d.order = order_;
        like = z;
      } else {
        like = d1_.unpack(this, "d1");
        d.d1 = like.to(ct).contiguous();
        d.d2 = d2_.unpack(this, "d2").to(ct).contiguous();
      }
      Tensor gc = g.to(ct).contiguous(), xc = taylor2_rows(x.to(ct));
      Tensor dx = tg::detail::new_empty(x.sizes(), ct, xc.device());
      Tensor dd1 = tg::detail::new_empty(like.sizes(), ct, xc.device());
      Tensor dd2 = activation_ ? Tensor() : tg::detail::new_empty(like.sizes(), ct, xc.device());
      be.taylor2_unary_backward(kind_, k_, dx, dd1, dd2, gc, xc, d, pa_, pb_);
      if (should_compute_output(0)) out[0] = dx.to(t);
      if (should_compute_output(1)) out[1] = dd1.to(like.dtype());
      if (!activation_ && should_compute_output(2)) out[2] = dd2.to(like.dtype());
      return out;
    }
    Tensor d1, d2;
    if (activation_) {
      Tensor one = broadcast_one(z);
      d1 = activation_grad(one, z, act_, order_ + 1);
      d2 = activation_grad(one, z, act_, order_ + 2);
    } else {
      d1 = d1_.unpack(this, "d1");
      d2 = d2_.unpack(this, "d2");
    }
    Tensor x1 = x.narrow(0, 0, k_), x2 = x.narrow(0, k_, q), g1 = g.narrow(0, 0, k_), g2 = g.narrow(0, k_, q);
    auto rows = [&](const Tensor& t, const Tensor& idx) { return index_select(t, 0, idx); };
    if (should_compute_output(0)) {
      Tensor dx1;
      if (kind_ == 2) {  // row r of the cross term is x1[pa[r]] x1[pb[r]]
        Tensor h = mul(g2, mul(d2, 0.5));
        IntList s(size_t(x.dim()), 1);
        s[0] = q;
        auto spread = [&](const Tensor& idx) { return idx.view(s).expand(h.sizes()); };
        dx1 = scatter_add(scatter_add(zeros_like(x1), 0, spread(pa_), mul(h, rows(x1, pb_))), 0, spread(pb_),
                          mul(h, rows(x1, pa_)));
        dx1 = add(mul(g1, d1), dx1);
      } else {  // kind 0: g2 row a; kind 1: g2's one row, for every a
        dx1 = add(mul(g1, d1), mul(mul(g2, x1), d2));
      }
      out[0] = cat({dx1, mul(g2, d1)}, 0);
    }
    const bool want_d1 = should_compute_output(1), want_d2 = activation_ ? want_d1 : should_compute_output(2);
    Tensor dd1 = want_d1 ? sum(mul(g, x), {0}) : Tensor(), dd2;
    if (want_d2) {
      Tensor cross = kind_ == 0   ? mul(x1, x1)
                     : kind_ == 1 ? sum(mul(x1, x1), {0}, true)
                                  : mul(rows(x1, pa_), rows(x1, pb_));
      dd2 = mul(sum(mul(g2, cross), {0}), 0.5);
    }
    if (activation_) {
      if (want_d1) out[1] = add(activation_grad(dd1, z, act_, order_ + 2), activation_grad(dd2, z, act_, order_ + 3));
    } else {
      out[1] = dd1;
      out[2] = dd2;
    }
    return out;
  }
  void release_variables() override {
    x_.release();
    z_.release();
    d1_.release();
    d2_.release();
  }
  SavedVariable x_, z_, d1_, d2_;

 private:
  int kind_;
  int64_t k_;
  Tensor pa_, pb_;  // Int64, not differentiable
  bool activation_;
  Activation act_;
  int order_;
};

// Which fused kind covers the layout (-1: none); read on the host, so the
// univariate and Laplacian layouts copy no index tensors to the device.
int taylor2_kind(const TaylorLayout& l) {
  if (l.order != 2) return -1;
  for (double w : l.pair_weight)
    if (w != 1.0) return -1;
  if (l.univariate) return 0;
  if (l.diagonal && l.second_rows == 1 && is_iota(l.pair_a, l.directions)) return 1;
  if (int64_t(l.pair_a.size()) == l.second_rows) return 2;
  return -1;
}

// The fused rule, or undefined where it does not apply. `d`: d1 and d2
// (the op's derivatives, any dtype matching tx's), or z with an activation.
Tensor taylor2_fused(const TaylorLayout& l, const Tensor& tx, const autograd::kernels::Taylor2Derivatives& d) {
  const bool activation = d.z.defined();
  const Tensor& like = activation ? d.z : d.d1;  // the derivatives' shape
  if (!tx.defined() || !like.defined() || (!activation && !d.d2.defined())) return Tensor();
  if (activation && (d.act == Activation::Relu || d.order + 3 > tg::kernels::kMaxFusedActivationOrder)) return Tensor();
  const ScalarType t = tx.dtype();
  if (!tx.is_floating_point() || like.dtype() != t || (!activation && d.d2.dtype() != t)) return Tensor();
  if (like.device() != tx.device() || (!activation && d.d2.device() != tx.device())) return Tensor();
  IntList s = tx.sizes();
  if (s.empty() || s[0] != l.batch()) return Tensor();
  s.erase(s.begin());
  if (like.sizes() != s || (!activation && d.d2.sizes() != s)) return Tensor();
  const auto& be = autograd::kernels::derivative_kernels(tx.device());
  if (!be.taylor2_unary) return Tensor();
  const int kind = taylor2_kind(l);
  if (kind < 0) return Tensor();
  second_order_term();  // the kernel forms the cross term
  Tensor pa, pb;        // kind 2's pairs
  if (kind == 2) {
    const PairTensors& p = pair_tensors(l, tx);
    pa = p.ia;
    pb = p.ib;
  }
  auto compute = [&] {  // half types compute in float
    const ScalarType ct = tg::detail::compute_type(t);
    autograd::kernels::Taylor2Derivatives dc = d;
    for (Tensor* u : {&dc.d1, &dc.d2, &dc.z})
      if (u->defined()) *u = u->to(ct).contiguous();
    Tensor x = taylor2_rows(tx.to(ct));
    Tensor out = tg::detail::new_empty(tx.sizes(), ct, x.device());
    be.taylor2_unary(kind, l.directions, out, x, dc, pa, pb);
    return out.to(t);
  };
  const Tensor none;
  const Tensor& second = activation ? none : d.d2;
  if (!should_record({&tx, &like, &second})) return run_raw(compute);
  auto node = activation
                  ? make_node<Taylor2UnaryBackward>({&tx, &d.z}, kind, l.directions, pa, pb, true, d.act, d.order)
                  : make_node<Taylor2UnaryBackward>({&tx, &d.d1, &d.d2}, kind, l.directions, pa, pb, false,
                                                    Activation::Tanh, 0);
  Tensor out = run_raw(compute);
  node->x_ = SavedVariable(tx, false);
  if (activation) {
    node->z_ = SavedVariable(d.z, false);
  } else {
    node->d1_ = SavedVariable(d.d1, false);
    node->d2_ = SavedVariable(d.d2, false);
  }
  return finish(out, node);
}

}  // namespace

StructureProbe::StructureProbe() {
  autograd::detail::ThreadState& s = autograd::detail::thread_state();
  prev_armed_ = s.probe_armed;
  prev_found_ = s.probe_found;
  s.probe_armed = true;
  s.probe_found = false;
}
StructureProbe::~StructureProbe() {
  autograd::detail::ThreadState& s = autograd::detail::thread_state();
  s.probe_armed = prev_armed_;
  s.probe_found = prev_found_;
}
bool StructureProbe::found() const { return autograd::detail::thread_state().probe_found; }

void second_order_term() {
  autograd::detail::ThreadState& s = autograd::detail::thread_state();
  if (!s.probe_armed) return;
  s.probe_found = true;
  throw SecondOrderTerm{};
}

const forward_ad::TaylorLayout* fw_taylor() {
  const TaylorLayout* l = forward_ad::detail::current_state().taylor;
  return l && l->order >= 2 ? l : nullptr;
}

Tensor broadcast_one(const Tensor& x) { return ones({}, x.options()).expand(x.sizes()); }

Tensor jet_mul(const Tensor& a, const Tensor& b) { return mul(a, b); }

// Rows idx of t (dim 0): complex coefficients through their real view
// (index_select takes real tensors), recorded either way.
Tensor select_rows(const Tensor& t, const Tensor& idx) {
  if (!is_complex(t.dtype())) return index_select(t, 0, idx);
  return view_as_complex(index_select(view_as_real(t), 0, idx));
}

Tensor jet_cross(const Tensor& a, const Tensor& b, const Bilinear& f, bool same) {
  second_order_term();
  const TaylorLayout& l = layout();
  if (l.univariate) return f(a, b);
  const PairTensors& p = pair_tensors(l, a);
  auto rows = [&](const Tensor& t, const Tensor& idx, bool iota) { return iota ? t : select_rows(t, idx); };
  Tensor prod = f(rows(a, p.ia, p.a_iota), rows(b, p.ib, p.b_iota));
  if (!(same || l.diagonal))  // (A_a B_b + A_b B_a) / 2
    prod = mul(add(prod, f(rows(a, p.ib, p.b_iota), rows(b, p.ia, p.a_iota))), 0.5);
  if (p.weight.defined()) {
    IntList s(size_t(prod.dim()), 1);
    s[0] = -1;
    prod = mul(prod, p.weight.view(s));
  }
  const int64_t P = prod.size(0), Q = l.second_rows;
  if (P == Q) return prod;  // one pair per group, in group order
  if (Q == 1) return sum(prod, {0}, true);
  IntList s = prod.sizes();
  s[0] = Q;
  return mm(p.groups, prod.reshape({P, -1})).view(s);
}

Tensor jet_unary(const Tensor& tx, const std::vector<Tensor>& d) {
  const TaylorLayout& l = layout();
  const int K = l.order;
  bool higher = false;
  for (int j = 2; j <= K; ++j)
    higher = higher || d[size_t(j)].defined();
  if (higher) second_order_term();
  if (K == 2) {
    autograd::kernels::Taylor2Derivatives fd;
    fd.d1 = d[1];
    fd.d2 = d[2];
    if (Tensor fused = taylor2_fused(l, tx, fd); fused.defined()) return fused;
  }
  Tensor lin = d[1].defined() ? mul(tx, d[1]) : Tensor();
  if (!higher) return lin.defined() ? lin : zeros_like(tx);
  std::vector<Tensor> x = blocks(l, tx), y = blocks(l, lin);
  // bell[m][j]: the coefficient of t^m in (c_1 t + c_2 t^2 + ...)^j.
  std::vector<std::vector<Tensor>> bell(size_t(K) + 1, std::vector<Tensor>(size_t(K) + 1));
  for (int m = 1; m <= K; ++m)
    bell[size_t(m)][1] = x[size_t(m)];
  for (int m = 2; m <= K; ++m) {
    for (int j = 2; j <= m; ++j) {
      Tensor s;
      if (m == 2) s = jet_cross(x[1], x[1], jet_mul, true);  // the pairs' c_1 c_1
      else
        for (int i = 1; i <= m - j + 1; ++i)
          s = fw_add(s, mul(x[size_t(i)], bell[size_t(m - i)][size_t(j - 1)]));
      bell[size_t(m)][size_t(j)] = s;
      if (const Tensor& dj = d[size_t(j)]; dj.defined())
        y[size_t(m)] = fw_add(y[size_t(m)], mul(s, mul(dj, 1.0 / factorial(j))));
    }
  }
  return stack_blocks(l, std::move(y), tx);
}

Tensor jet_activation(const Tensor& tx, const Tensor& x, Activation act, int order) {
  const TaylorLayout& l = layout();
  if (l.order != 2) return Tensor();
  autograd::kernels::Taylor2Derivatives d;
  d.z = x;
  d.act = act;
  d.order = order;
  return taylor2_fused(l, tx, d);
}

Tensor jet_product(const Tensor& a, const Tensor& ta, const Tensor& b, const Tensor& tb, const Bilinear& f) {
  Tensor lin = fw_add(ta.defined() ? f(ta, b) : Tensor(), tb.defined() ? f(a, tb) : Tensor());
  if (!ta.defined() || !tb.defined() || !fw_taylor()) return lin;  // linear in the one with coefficients
  second_order_term();
  const TaylorLayout& l = layout();
  std::vector<Tensor> A = blocks(l, ta), B = blocks(l, tb), y = blocks(l, lin);
  for (int m = 2; m <= l.order; ++m) {
    Tensor s = m == 2 ? jet_cross(A[1], B[1], f) : Tensor();
    if (m > 2)
      for (int i = 1; i < m; ++i)
        s = fw_add(s, f(A[size_t(i)], B[size_t(m - i)]));
    y[size_t(m)] = add(y[size_t(m)], s);
  }
  return stack_blocks(l, std::move(y), lin);
}

Tensor jet_quotient(const Tensor& q, const Tensor& ta, const Tensor& b, const Tensor& tb) {
  // a = q b: the divide rule with f = mul, solve0 = division by b.
  return jet_divide(q, tb, ta, jet_mul, [&](const Tensor& r) { return div(r, b); });
}

Tensor jet_divide(const Tensor& y, const Tensor& ta, const Tensor& tb, const Bilinear& f, const LinearMap& solve0) {
  auto residual = [&](const Tensor& bm, const Tensor& am, const Tensor& cross) {
    // bm - f(am, y) - cross, any term undefined (zero)
    Tensor s = fw_add(am.defined() ? f(am, y) : Tensor(), cross);
    if (!bm.defined()) return s.defined() ? neg(s) : Tensor();
    return s.defined() ? sub(bm, s) : bm;
  };
  auto solved = [&](const Tensor& r) { return r.defined() ? solve0(r) : Tensor(); };
  if (!fw_taylor()) {
    Tensor r = residual(tb, ta, Tensor());
    return r.defined() ? solve0(r) : Tensor();
  }
  second_order_term();
  const TaylorLayout& l = layout();
  std::vector<Tensor> A = blocks(l, ta), Bc = blocks(l, tb), Y(size_t(l.order) + 1);
  for (int m = 1; m <= l.order; ++m) {
    Tensor cross;
    if (m == 2) {
      if (A[1].defined() && Y[1].defined()) cross = jet_cross(A[1], Y[1], f);
    } else {
      for (int j = 1; j < m; ++j)
        if (A[size_t(j)].defined() && Y[size_t(m - j)].defined())
          cross = fw_add(cross, f(A[size_t(j)], Y[size_t(m - j)]));
    }
    Y[size_t(m)] = solved(residual(Bc[size_t(m)], A[size_t(m)], cross));
  }
  const Tensor& like = ta.defined() ? ta : tb;
  // stack_blocks shapes a missing block after `like`'s rows and y's shape.
  IntList sh = y.sizes();
  sh.insert(sh.begin(), like.size(0));
  return stack_blocks(l, std::move(Y), zeros({1}, y.options()).expand(sh));
}

Tensor jet_square(const Tensor& tx, const Bilinear& f, const LinearMap& lin0) {
  if (!tx.defined()) return Tensor();
  if (!fw_taylor()) return lin0(tx);
  second_order_term();
  const TaylorLayout& l = layout();
  std::vector<Tensor> X = blocks(l, tx), Y(size_t(l.order) + 1);
  for (int m = 1; m <= l.order; ++m) {
    Tensor cross;
    if (m == 2) cross = jet_cross(Y[1], Y[1], f);  // f(y_a, y_b) is not symmetric in a, b
    else
      for (int i = 1; i < m; ++i)
        cross = fw_add(cross, f(Y[size_t(i)], Y[size_t(m - i)]));
    Tensor r = X[size_t(m)].defined() ? (cross.defined() ? sub(X[size_t(m)], cross) : X[size_t(m)]) : neg(cross);
    Y[size_t(m)] = lin0(r);
  }
  return stack_blocks(l, std::move(Y), tx);
}

Tensor jet_logabsdet(const Tensor& z, const Tensor& tz, const Tensor& ta) {
  // tr(P Q) over the last two dims, batched.
  auto tr = [](const Tensor& p, const Tensor& q) { return sum(mul(p, q.transpose(-2, -1)), {-2, -1}); };
  if (!ta.defined()) return Tensor();
  if (!fw_taylor()) return tr(z, ta);
  second_order_term();
  const TaylorLayout& l = layout();
  std::vector<Tensor> A = blocks(l, ta), Z = blocks(l, tz), Y(size_t(l.order) + 1);
  for (int m = 1; m <= l.order; ++m) {
    Tensor s = A[size_t(m)].defined() ? mul(tr(z, A[size_t(m)]), double(m)) : Tensor();
    if (m == 2) {
      if (Z[1].defined() && A[1].defined()) s = fw_add(s, jet_cross(Z[1], A[1], tr));
    } else {
      for (int i = 1; i < m; ++i)
        if (Z[size_t(m - i)].defined() && A[size_t(i)].defined())
          s = fw_add(s, mul(tr(Z[size_t(m - i)], A[size_t(i)]), double(i)));
    }
    Y[size_t(m)] = s.defined() ? mul(s, 1.0 / m) : Tensor();
  }
  IntList sh = z.sizes();
  sh.resize(sh.size() - 2);
  sh.insert(sh.begin(), ta.size(0));
  return stack_blocks(l, std::move(Y), zeros({1}, z.options()).expand(sh));
}

std::pair<Tensor, Tensor> jet_eigh(const Tensor& gaps, const Tensor& tb) {
  auto diag = [](const Tensor& r) { return diagonal(r, 0, -2, -1); };
  if (!tb.defined()) return {};
  if (!fw_taylor()) return {diag(tb), mul(gaps, tb)};
  second_order_term();
  const TaylorLayout& l = layout();
  const int64_t n = tb.size(-1);
  const Tensor eye_n = eye(n, TensorOptions().dtype(tb.dtype()).device(tb.device()));
  // The products of the recurrence as bilinear maps (jet_cross polarizes
  // them over a level's second-order groups): B W, W diag(lambda), and
  // diag(W^T W') (symmetric in W, W').
  auto bw = [](const Tensor& b, const Tensor& w) { return matmul(b, w); };
  auto wl = [](const Tensor& w, const Tensor& lam) { return mul(w, lam.unsqueeze(-2)); };
  auto wtw = [](const Tensor& u, const Tensor& v) { return sum(mul(u, v), {-2}); };
  std::vector<Tensor> B = blocks(l, tb), Lam(size_t(l.order) + 1), W(size_t(l.order) + 1);
  for (int m = 1; m <= l.order; ++m) {
    Tensor R = B[size_t(m)], d;
    if (m == 2) {
      R = add(R, sub(jet_cross(B[1], W[1], bw), jet_cross(W[1], Lam[1], wl)));
      d = jet_cross(W[1], W[1], wtw, true);
    } else {
      for (int j = 1; j < m; ++j) {
        R = add(R, sub(bw(B[size_t(j)], W[size_t(m - j)]), wl(W[size_t(j)], Lam[size_t(m - j)])));
        d = fw_add(d, wtw(W[size_t(j)], W[size_t(m - j)]));
      }
    }
    Lam[size_t(m)] = diag(R);
    W[size_t(m)] = mul(gaps, R);
    if (d.defined()) W[size_t(m)] = sub(W[size_t(m)], mul(d.unsqueeze(-1), mul(eye_n, 0.5)));
  }
  auto stack = [&](std::vector<Tensor>& c) {
    std::vector<Tensor> parts(c.begin() + 1, c.end());
    return parts.size() == 1 ? parts[0] : cat(parts, 0);
  };
  return {stack(Lam), stack(W)};
}

}  // namespace ops_detail

namespace forward_ad {
Tensor taylor_cross(const Tensor& a, const Tensor& b) {
  TG_CHECK(detail::current_state().taylor, "taylor_cross: no Taylor level is active");
  return ops_detail::jet_cross(a, b, ops_detail::jet_mul, a.is_same(b));
}
}  // namespace forward_ad

}  // namespace tg::autograd
