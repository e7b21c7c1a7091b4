// Differentiable elementwise ops. Each formula is written with the public
// (differentiable) ops, so with create_graph the backward records again and
// derivatives of any order follow. Broadcasting: a formula returns the
// gradient at the broadcast shape; the engine sums it back to the input's.
//
// Derivatives chosen at non-differentiable points (docs/AUTOGRAD.md):
//   relu(x) at 0 -> 0;  abs(x) at 0 -> 0 (sign(0) = 0);  sign -> 0 everywhere;
//   clamp(x, lo, hi) at x == lo or x == hi -> 1 (the bound is inside);
//   maximum/minimum at ties -> the gradient is split evenly (1/2 each);
//   pow(a, b) w.r.t. b where a == 0 and b >= 0 -> 0 (a tensor or a number a).
#include <cmath>

#include "autograd/ops/ops.h"
#include "autograd/ops/record.h"
#include "autograd/ops/taylor.h"

#include <tapegrad/autograd/engine.h>
#include "autograd/kernels/kernels.h"
#include "tensor/kernels.h"
#include "tensor/op_util.h"

namespace tg {

using autograd::Node;
using autograd::SavedVariable;
using autograd::variable_list;
using namespace autograd::ops_detail;

namespace {

// ---- unary ----------------------------------------------------------------------

struct UnaryArgs {
  double a = 0, b = 0;
};
// u f'(x): an op's derivative, stated once (unary.def's derivative column).
using UnaryFormula = Tensor (*)(const Tensor& u, const Tensor& x, const Tensor& r, const UnaryArgs&);

// Complex conjugation where a tensor's dtype is complex, the identity on the
// real dtypes. docs/AUTOGRAD.md, "Conjugation": gradients are conjugate
// Wirtinger derivatives, so the backward of f is g conj(f') and the tangent
// t f'.
Tensor conj_if_complex(const Tensor& t) { return t.defined() && is_complex(t.dtype()) ? conj(t) : t; }
// The two rules from one derivative d(u) = u f': the backward g conj(f') =
// conj(d(conj(g))) and the tangent d(t) = t f'.
template <class D, class... A> Tensor backward_from(D d, const Tensor& g, const A&... args) {
  return conj_if_complex(d(conj_if_complex(g), args...));
}
template <class D, class... A> Tensor tangent_from(D d, const Tensor& t, const A&... args) { return d(t, args...); }
enum Saves : uint8_t { kNone = 0, kSelf = 1, kOther = 2, kResult = 4 };

// A unary op's Taylor rule: where its derivatives f^(j)(x), j = 1..K, come
// from (Faa di Bruno then combines them, jet_unary).
struct TaylorRule {
  enum Kind : uint8_t {
    kLinear,      // piecewise linear: the tangent rule maps every coefficient
    kActivation,  // act's fused kernels, one per order (order 2: one kernel in all)
    kPower,       // x^e, e = exponent (args.a when exponent_from_args)
    kClosed,      // derivs(x, r, args, d) fills d[1..K]
    kByReverse,   // the backward formula differentiated again
  } kind = kByReverse;
  Activation act = Activation::Tanh;
  double exponent = 0;
  bool exponent_from_args = false;
  void (*derivs)(const Tensor& x, const Tensor& r, const UnaryArgs& args, std::vector<Tensor>& d) = nullptr;
};

// The rules a spec line names (unary.def's `taylor` column, and the specs
// below).
namespace taylor_rule {
TaylorRule linear() { return {TaylorRule::kLinear}; }
TaylorRule activation(Activation a) { return {TaylorRule::kActivation, a}; }
TaylorRule power(double e) { return {TaylorRule::kPower, Activation::Tanh, e}; }
TaylorRule power_of_args() { return {TaylorRule::kPower, Activation::Tanh, 0, true}; }
TaylorRule derivatives(void (*f)(const Tensor&, const Tensor&, const UnaryArgs&, std::vector<Tensor>&)) {
  TaylorRule t{TaylorRule::kClosed};
  t.derivs = f;
  return t;
}
TaylorRule by_reverse() { return {TaylorRule::kByReverse}; }

// d[j] = log^(j)(u) = (-1)^(j-1) (j-1)! / u^j, j = 1..K.
void log_derivatives(const Tensor& u, std::vector<Tensor>& d) {
  Tensor inv = reciprocal(u);
  d[1] = inv;
  for (size_t j = 2; j < d.size(); ++j)
    d[j] = mul(d[j - 1], mul(inv, -double(j - 1)));
}
// sin^(j) = sin(x + j pi / 2): a cycle of four, starting `shift` along it.
void sine_derivatives(const Tensor& sn, const Tensor& cs, int shift, std::vector<Tensor>& d) {
  const Tensor cycle[4] = {sn, cs, neg(sn), neg(cs)};
  for (size_t j = 1; j < d.size(); ++j)
    d[j] = cycle[(j + size_t(shift)) % 4];
}
void exp_d(const Tensor&, const Tensor& r, const UnaryArgs&, std::vector<Tensor>& d) {
  for (size_t j = 1; j < d.size(); ++j)
    d[j] = r;
}
void expm1_d(const Tensor&, const Tensor& r, const UnaryArgs&, std::vector<Tensor>& d) {
  Tensor e = add(r, 1);
  for (size_t j = 1; j < d.size(); ++j)
    d[j] = e;
}
void log_d(const Tensor& x, const Tensor&, const UnaryArgs&, std::vector<Tensor>& d) { log_derivatives(x, d); }
void log1p_d(const Tensor& x, const Tensor&, const UnaryArgs&, std::vector<Tensor>& d) {
  log_derivatives(add(x, 1), d);
}
void sin_d(const Tensor& x, const Tensor& r, const UnaryArgs&, std::vector<Tensor>& d) {
  sine_derivatives(r, cos(x), 0, d);
}
void cos_d(const Tensor& x, const Tensor& r, const UnaryArgs&, std::vector<Tensor>& d) {
  sine_derivatives(sin(x), r, 1, d);
}
// sinh and cosh: their derivatives alternate between cosh and sinh.
void sinh_d(const Tensor& x, const Tensor& r, const UnaryArgs&, std::vector<Tensor>& d) {
  Tensor c = cosh(x);
  for (size_t j = 1; j < d.size(); ++j)
    d[j] = j % 2 ? c : r;
}
void cosh_d(const Tensor& x, const Tensor& r, const UnaryArgs&, std::vector<Tensor>& d) {
  Tensor s = sinh(x);
  for (size_t j = 1; j < d.size(); ++j)
    d[j] = j % 2 ? s : r;
}
// log_b(x) = ln(x) / ln(b).
void scaled_log_derivatives(const Tensor& x, double ln_b, std::vector<Tensor>& d) {
  log_derivatives(x, d);
  for (size_t j = 1; j < d.size(); ++j)
    d[j] = mul(d[j], 1 / ln_b);
}
void log2_d(const Tensor& x, const Tensor&, const UnaryArgs&, std::vector<Tensor>& d) {
  scaled_log_derivatives(x, std::log(2.0), d);
}
void log10_d(const Tensor& x, const Tensor&, const UnaryArgs&, std::vector<Tensor>& d) {
  scaled_log_derivatives(x, std::log(10.0), d);
}
// (ln 2)^j 2^x.
void exp2_d(const Tensor&, const Tensor& r, const UnaryArgs&, std::vector<Tensor>& d) {
  for (size_t j = 1; j < d.size(); ++j)
    d[j] = mul(r, std::pow(std::log(2.0), double(j)));
}
// r (ln a)^j, the j-th derivative of r = a^x in x. For a = 0, as PyTorch's
// rule: 0 where x >= 0 (r is 0 or 1 there: 0^x is constant), not 0 * inf,
// and (-inf)^j where x < 0 (r = inf), NaN where x is; a constant in r either
// way, so the derivatives past it are 0, not inf * 0.
Tensor pow_base_term(const Tensor& r, double a, double j) {
  const double c = std::pow(std::log(a), j);
  if (a != 0) return mul(r, c);
  const Tensor z = zeros_like(r);
  return where(ne(r, r), add(z, std::nan("")), where(le(r, 1.0), z, add(z, c)));
}
// (ln a)^j a^x for a^x (pow with a scalar base a = args.a).
void pow_base_d(const Tensor&, const Tensor& r, const UnaryArgs& args, std::vector<Tensor>& d) {
  for (size_t j = 1; j < d.size(); ++j)
    d[j] = pow_base_term(r, args.a, double(j));
}
}  // namespace taylor_rule

// An op's derivative rules, side by side: its derivative u f'(x), from which
// the backward and the tangent rule both come (the Jacobian is diagonal), what
// it saves, and its Taylor rule.
struct UnarySpec {
  const char* op;
  const char* node;
  UnaryFormula derivative;
  uint8_t saves;
  TaylorRule taylor;
};

class UnaryBackward final : public SelfResultNode {
 public:
  UnaryBackward(const UnarySpec& spec, UnaryArgs args)
      : SelfResultNode(spec.op, spec.node), derivative_(spec.derivative), args_(args) {}
  variable_list apply(variable_list&& grads) override {
    variable_list out(1);
    if (should_compute_output(0))
      out[0] = backward_from(derivative_, grads[0], self_.unpack(this, "self"), result_.unpack(this, "result"), args_);
    return out;
  }

 private:
  UnaryFormula derivative_;
  UnaryArgs args_;
};

// Taylor mode: whether the op's derivatives vanish from the second on
// (its tangent rule maps every coefficient, adding nothing), and its
// derivatives f^(j)(x), j = 1..K, in closed form (false: none here).
// The activation the op is (tanh, sigmoid, silu: fused derivative kernels),
// or false.
bool closed_derivatives(const UnarySpec& spec, const Tensor& x, const Tensor& r, const UnaryArgs& args,
                        std::vector<Tensor>& d);

template <class F> Tensor unary_op(const Tensor& x, const UnarySpec& spec, F&& raw_fn, UnaryArgs args = {});

// f^(j)(x), j = 1..K, for an op without closed forms: its derivative at
// u = 1 is f', and since f is elementwise, f^(j+1) is the
// gradient of the sum of f^(j). On x itself when x is recorded (so the
// derivatives keep x's history), else on a leaf copy.
template <class F>
std::vector<Tensor> derivatives_by_reverse(const UnarySpec& spec, const Tensor& x, const Tensor& out,
                                           const UnaryArgs& args, F&& raw_fn, int K) {
  const bool recorded =
      autograd::is_grad_enabled() && autograd::impl::requires_grad(x) && autograd::impl::requires_grad(out);
  autograd::AutoGradMode grad_on(true);
  Tensor xv = x, rv = out;
  if (!recorded) {
    xv = x.detach();
    xv.requires_grad_(true);
    rv = unary_op(xv, spec, raw_fn, args);
  }
  std::vector<Tensor> d(size_t(K) + 1);
  d[1] = spec.derivative(ones_like(xv), xv, rv, args);
  // The engine gives conj(f^(j+1)) for a complex x (holomorphic f).
  for (int j = 2; j <= K && d[size_t(j - 1)].requires_grad(); ++j)
    d[size_t(j)] = conj_if_complex(autograd::grad({d[size_t(j - 1)]}, {xv}, {ones_like(xv)}, true, true, true)[0]);
  if (!recorded)
    for (Tensor& t : d)
      if (t.defined()) t = t.detach();
  return d;
}

// The tangent rule of an elementwise op is its derivative at the tangent
// (tangent_from): the Jacobian is diagonal. Taylor mode:
// Faa di Bruno on the op's derivatives (jet_unary).
template <class F> Tensor unary_op(const Tensor& x, const UnarySpec& spec, F&& raw_fn, UnaryArgs args) {
  Tensor out;
  if (!should_record({&x})) {
    out = run_raw([&] { return raw_fn(x); });
  } else {
    auto node = make_node<UnaryBackward>({&x}, spec, args);
    out = run_raw([&] { return raw_fn(x); });
    if (spec.saves & kSelf) node->self_ = SavedVariable(x, false);
    out = finish(out, node);
    if (spec.saves & kResult) node->result_ = SavedVariable(out, true);
  }
  if (fw_any({&x})) {
    const Tensor t = fw_t(x);
    fw_rule(out, [&] {
      const autograd::forward_ad::TaylorLayout* taylor = fw_taylor();
      if (!taylor || spec.taylor.kind == TaylorRule::kLinear) return tangent_from(spec.derivative, t, x, out, args);
      if (spec.taylor.kind == TaylorRule::kActivation)  // order 2: one kernel, derivatives in it
        if (Tensor fused = jet_activation(t, x, spec.taylor.act, 0); fused.defined()) return fused;
      std::vector<Tensor> d(size_t(taylor->order) + 1);
      if (!closed_derivatives(spec, x, out, args, d))
        d = derivatives_by_reverse(spec, x, out, args, raw_fn, taylor->order);
      return jet_unary(t, d);
    });
  }
  return out;
}

constexpr double kInvSqrt2Pi = 0.39894228040143267794;
constexpr double kSqrt2OverPi = 0.79788456080286535588;

#define TG_UNARY_BACKWARD(var, op, node, saves, taylor, body)                                                  \
  const UnarySpec var{op, node,                                                                                \
                      [](const Tensor& u, const Tensor& x, const Tensor& r, const UnaryArgs& args) -> Tensor { \
                        (void)x, (void)r, (void)args;                                                          \
                        return body;                                                                           \
                      },                                                                                       \
                      saves,                                                                                   \
                      [] {                                                                                     \
                        using namespace taylor_rule;                                                           \
                        return taylor;                                                                         \
                      }()};

// The plain unary ops: the derivative of each line of unary.def (the
// activations' is one fused kernel, differentiable again with one kernel per
// order: activation_grad below).
#define TG_UNARY(name, Kernel, float_only, forward, derivative, saves, taylor, lo, hi, cx) \
  TG_UNARY_BACKWARD(k##Kernel, #name, #Kernel "Backward", saves, taylor, derivative)
#include <tapegrad/tensor/unary.def>
#undef TG_UNARY
TG_UNARY_BACKWARD(kGelu, "gelu", "GeluBackward", kSelf, activation(Activation::Gelu),
                  activation_grad(u, x, Activation::Gelu, 1))
TG_UNARY_BACKWARD(kGeluTanh, "gelu", "GeluBackward", kSelf, by_reverse(), [&] {
  constexpr double c = 0.044715;
  Tensor x2 = square(x);
  Tensor t = tanh(mul(mul(add(mul(x2, c), 1), x), kSqrt2OverPi));
  Tensor left = mul(add(t, 1), 0.5);
  Tensor dt = mul(add(neg(square(t)), 1), mul(add(mul(x2, 3 * c), 1), kSqrt2OverPi));
  return mul(u, add(left, mul(mul(x, dt), 0.5)));
}())
TG_UNARY_BACKWARD(kSoftplus, "softplus", "SoftplusBackward", kSelf, by_reverse(), [&] {
  Tensor z = mul(x, args.a);
  return where(gt(z, args.b), u, mul(u, sigmoid(z)));
}())
// clamp: args.a = lo, args.b = hi; the spec says which bounds exist.
TG_UNARY_BACKWARD(kClampLo, "clamp", "ClampBackward", kSelf, linear(), where(ge(x, args.a), u, 0))
TG_UNARY_BACKWARD(kClampHi, "clamp", "ClampBackward", kSelf, linear(), where(le(x, args.b), u, 0))
TG_UNARY_BACKWARD(kClampBoth, "clamp", "ClampBackward", kSelf, linear(),
                  where(ge(x, args.a), where(le(x, args.b), u, 0), 0))
TG_UNARY_BACKWARD(kAddScalar, "add", "AddBackward", kNone, linear(), u)
TG_UNARY_BACKWARD(kMulScalar, "mul", "MulBackward", kNone, linear(), mul(u, args.a))
TG_UNARY_BACKWARD(kFmodScalar, "fmod", "FmodBackward", kNone, linear(), u)
TG_UNARY_BACKWARD(kRemainderScalar, "remainder", "RemainderBackward", kNone, linear(), u)
TG_UNARY_BACKWARD(kPowScalar, "pow", "PowBackward", kSelf, power_of_args(),
                  args.a == 0 ? zeros_like(u) : mul(u, mul(pow(x, args.a - 1), args.a)))
TG_UNARY_BACKWARD(kPowScalarBase, "pow", "PowBackward", kResult, derivatives(pow_base_d),
                  mul(u, taylor_rule::pow_base_term(r, args.a, 1.0)))
#undef TG_UNARY_BACKWARD

// d[j] = act^(order + j)(x), j = 1..K (the fused kernels).
void activation_derivatives(const Tensor& x, Activation act, int order, std::vector<Tensor>& d) {
  Tensor one = broadcast_one(x);
  for (size_t j = 1; j < d.size(); ++j)
    d[j] = activation_grad(one, x, act, order + int(j));
}

// d[1..K] by the spec's Taylor rule; false for by_reverse (the caller
// differentiates the backward formula again).
bool closed_derivatives(const UnarySpec& s, const Tensor& x, const Tensor& r, const UnaryArgs& args,
                        std::vector<Tensor>& d) {
  const TaylorRule& t = s.taylor;
  switch (t.kind) {
    case TaylorRule::kActivation: activation_derivatives(x, t.act, 0, d); return true;
    case TaylorRule::kPower: {  // d^j x^e = e (e - 1) ... (e - j + 1) x^(e - j)
      const double e = t.exponent_from_args ? args.a : t.exponent;
      double c = 1;
      for (size_t j = 1; j < d.size(); ++j) {
        c *= e - double(j - 1);
        if (c == 0) break;  // a polynomial: the rest vanish
        d[j] = mul(pow(x, e - double(j)), c);
      }
      return true;
    }
    case TaylorRule::kClosed: t.derivs(x, r, args, d); return true;
    case TaylorRule::kLinear:  // handled by the tangent rule; never asked
    case TaylorRule::kByReverse: return false;
  }
  return false;
}

// ---- binary ---------------------------------------------------------------------

// u df/da (or u df/db): a partial derivative, stated once (binary.def's d_a,
// d_b columns).
using BinaryFormula = Tensor (*)(const Tensor& u, const Tensor& a, const Tensor& b, const Tensor& r, double alpha);
// A binary op's Taylor rule: kTangent, the tangent rule (the formulas with
// the tangents for g) maps every coefficient (add, sub, and maximum/minimum,
// piecewise linear); the others combine the coefficients (jet_product,
// jet_quotient, pow through exp(b log a)).
// kComposite: the op's jet is that of `composite`, a formula through other
// ops with the op's derivatives (atan2, hypot).
enum class BinaryTaylor : uint8_t { kTangent, kProduct, kQuotient, kPower, kComposite };

// An op's derivative rules, side by side: its partial derivatives u df/da
// and u df/db (binary.def's d_a, d_b), from which the backward and the
// tangent rule both come, what each reads, and its Taylor rule.
struct BinarySpec {
  const char* op;
  const char* node;
  BinaryFormula fa, fb;      // d_a, d_b
  uint8_t saves_a, saves_b;  // what the gradient of a (of b) reads
  // kProduct: a * b, whose two gradients may also come from one kernel
  BinaryTaylor taylor = BinaryTaylor::kTangent;
  Tensor (*composite)(const Tensor& a, const Tensor& b) = nullptr;
};

// atan2's jet: atan(a / b) where |b| >= |a|, else -atan(b / a), the
// same derivatives as atan2 (they differ by constants); the divisor of
// the branch not taken is 1, so neither branch makes a NaN.
Tensor atan2_composite(const Tensor& a, const Tensor& b) {
  const Tensor by_b = ge(abs(b), abs(a));
  return where(by_b, atan(div(a, where(by_b, b, 1.0))), neg(atan(div(b, where(by_b, 1.0, a)))));
}

// mul's two gradients g * b and g * a in one kernel, when nothing is
// recorded (no create_graph, no tangents), both are wanted and every operand
// is contiguous with one shape and compute dtype (no broadcast to undo);
// false otherwise (the formulas run).
bool fused_product_backward(const Tensor& g, const Tensor& a, const Tensor& b, variable_list& out) {
  if (autograd::is_grad_enabled() || autograd::forward_ad::is_active()) return false;
  const ScalarType t = g.dtype();
  if ((t != kFloat32 && t != kFloat64) || a.dtype() != t || b.dtype() != t) return false;
  if (a.device() != g.device() || b.device() != g.device() || a.sizes() != g.sizes() || b.sizes() != g.sizes() ||
      !g.is_contiguous() || !a.is_contiguous() || !b.is_contiguous() || g.is_sparse() || a.is_sparse() || b.is_sparse())
    return false;
  const auto mul_backward = autograd::kernels::derivative_kernels(g.device()).mul_backward;
  if (!mul_backward) return false;
  out[0] = empty_like(g);
  out[1] = empty_like(g);
  mul_backward(out[0], out[1], g, a, b);
  return true;
}

class BinaryBackward final : public OpNode {
 public:
  BinaryBackward(const BinarySpec& spec, double alpha) : OpNode(spec.op, spec.node), spec_(spec), alpha_(alpha) {}
  variable_list apply(variable_list&& grads) override {
    variable_list out(2);
    bool ga = should_compute_output(0), gb = should_compute_output(1);
    if (!ga && !gb) return out;
    Tensor a = self_.unpack(this, "self"), b = other_.unpack(this, "other");
    Tensor r = result_.unpack(this, "result");
    if (spec_.taylor == BinaryTaylor::kProduct && ga && gb && grads[0].defined() &&
        fused_product_backward(grads[0], a, b, out))
      return out;
    if (ga) out[0] = backward_from(spec_.fa, grads[0], a, b, r, alpha_);
    if (gb) out[1] = backward_from(spec_.fb, grads[0], a, b, r, alpha_);
    return out;
  }
  void release_variables() override {
    self_.release();
    other_.release();
    result_.release();
  }
  SavedVariable self_, other_, result_;

 private:
  const BinarySpec& spec_;
  double alpha_;
};

// Taylor mode: the tangent of a nonlinear binary op (mul, div, pow);
// undefined for the others, whose tangent rule maps every coefficient.
Tensor binary_taylor(const BinarySpec& spec, const Tensor& a, const Tensor& b, const Tensor& out, const Tensor& ta,
                     const Tensor& tb);

template <class F>
Tensor binary_op(const Tensor& a, const Tensor& b, const BinarySpec& spec, F&& raw_fn, double alpha = 1) {
  Tensor out;
  if (!should_record({&a, &b})) {
    out = run_raw(raw_fn);
  } else {
    auto node = make_node<BinaryBackward>({&a, &b}, spec, alpha);
    out = run_raw(raw_fn);
    uint8_t saves = (node->needs_input_grad(0) ? spec.saves_a : 0) | (node->needs_input_grad(1) ? spec.saves_b : 0);
    if (saves & kSelf) node->self_ = SavedVariable(a, false);
    if (saves & kOther) node->other_ = SavedVariable(b, false);
    out = finish(out, node);
    if (saves & kResult) node->result_ = SavedVariable(out, true);
  }
  if (fw_any({&a, &b}) && spec.taylor == BinaryTaylor::kComposite && fw_taylor()) {
    fw_set(out, fw_t(spec.composite(a, b)));  // the formula's parts push the jet
  } else if (fw_any({&a, &b})) {
    const Tensor ta = fw_pad(fw_t(a), out.dim()), tb = fw_pad(fw_t(b), out.dim());  // batched: broadcast
    fw_rule(out, [&] {
      if (fw_taylor())
        if (Tensor t = binary_taylor(spec, a, b, out, ta, tb); t.defined()) return t;
      return fw_add(ta.defined() ? tangent_from(spec.fa, ta, a, b, out, alpha) : Tensor(),
                    tb.defined() ? tangent_from(spec.fb, tb, a, b, out, alpha) : Tensor());
    });
  }
  return out;
}

#define TG_BINARY_FORMULA(body)                                                                    \
  [](const Tensor& u, const Tensor& a, const Tensor& b, const Tensor& r, double alpha) -> Tensor { \
    (void)u, (void)a, (void)b, (void)r, (void)alpha;                                               \
    return body;                                                                                   \
  }

Tensor both(const Tensor& m1, const Tensor& m2) {  // logical and of two masks
  return eq(raw::add(raw::to(m1, kInt64), raw::to(m2, kInt64)), 2);
}

Tensor hypot_composite(const Tensor& a, const Tensor& b) { return sqrt(add(square(a), square(b))); }

// The binary ops: the spec of each line of binary.def.
#define TG_BINARY(name, Kernel, arg, form, float_only, forward, d_a, d_b, saves_a, saves_b, taylor, composite, ...) \
  const BinarySpec k##Kernel{#name,                                                                                 \
                             #Kernel "Backward",                                                                    \
                             TG_BINARY_FORMULA(d_a),                                                                \
                             TG_BINARY_FORMULA(d_b),                                                                \
                             saves_a,                                                                               \
                             saves_b,                                                                               \
                             BinaryTaylor::taylor,                                                                  \
                             composite};
#include <tapegrad/tensor/binary.def>
#undef TG_BINARY
#undef TG_BINARY_FORMULA

Tensor binary_taylor(const BinarySpec& spec, const Tensor& a, const Tensor& b, const Tensor& out, const Tensor& ta,
                     const Tensor& tb) {
  if (spec.taylor == BinaryTaylor::kProduct) return jet_product(a, ta, b, tb, jet_mul);
  if (spec.taylor == BinaryTaylor::kQuotient) return tb.defined() ? jet_quotient(out, ta, b, tb) : Tensor();
  if (spec.taylor != BinaryTaylor::kPower) return Tensor();
  const int K = fw_taylor()->order;
  std::vector<Tensor> d(size_t(K) + 1);
  if (!tb.defined()) {  // a^b in a: b (b - 1) ... (b - j + 1) a^(b - j)
    Tensor c = b;
    for (int j = 1; j <= K; ++j) {
      if (j > 1) c = mul(c, sub(b, j - 1));
      d[size_t(j)] = mul(c, pow(a, sub(b, j)));
    }
    return jet_unary(ta, d);
  }
  // exp(b log a) (a > 0): the log's coefficients, their product with b's,
  // then exp's (every derivative of exp is the output).
  Tensor la = log(a), tl;
  if (ta.defined()) {
    taylor_rule::log_derivatives(a, d);
    tl = jet_unary(ta, d);
  }
  Tensor tm = jet_product(b, tb, la, tl, jet_mul);
  for (int j = 1; j <= K; ++j)
    d[size_t(j)] = out;
  return jet_unary(tm, d);
}

// ---- where --------------------------------------------------------------------------

class WhereBackward final : public OpNode {
 public:
  explicit WhereBackward(Tensor cond) : OpNode("where", "WhereBackward"), cond_(std::move(cond)) {}
  variable_list apply(variable_list&& grads) override {
    variable_list out(2);
    const Tensor& g = grads[0];
    if (should_compute_output(0)) out[0] = where(cond_, g, 0);
    if (should_compute_output(1)) out[1] = where(cond_, 0, g);
    return out;
  }
  void release_variables() override { cond_ = Tensor(); }

 private:
  Tensor cond_;  // Bool, not differentiable
};

}  // namespace

// ---- public ops ----------------------------------------------------------------

Tensor autograd::ops::add(const Tensor& a, const Tensor& b, Scalar alpha) {
  return binary_op(
      a, b, kAdd, [&] { return raw::add(a, b, alpha); }, alpha.to_double());
}
Tensor autograd::ops::sub(const Tensor& a, const Tensor& b, Scalar alpha) {
  return binary_op(
      a, b, kSub, [&] { return raw::sub(a, b, alpha); }, alpha.to_double());
}
// The binary ops of forms G and R: one entry per line of binary.def.
#define TG_BINARY_AUTOGRAD_A(name, Kernel)
#define TG_BINARY_AUTOGRAD_G(name, Kernel)                              \
  Tensor autograd::ops::name(const Tensor& a, const Tensor& b) {        \
    return binary_op(a, b, k##Kernel, [&] { return raw::name(a, b); }); \
  }
#define TG_BINARY_AUTOGRAD_R(name, Kernel) TG_BINARY_AUTOGRAD_G(name, Kernel)
#define TG_BINARY(name, Kernel, arg, form, ...) TG_BINARY_AUTOGRAD_##form(name, Kernel)
#include <tapegrad/tensor/binary.def>
#undef TG_BINARY
#undef TG_BINARY_AUTOGRAD_A
#undef TG_BINARY_AUTOGRAD_G
#undef TG_BINARY_AUTOGRAD_R
Tensor autograd::ops::fmod(const Tensor& a, Scalar b) {
  return unary_op(a, kFmodScalar, [&](const Tensor& x) { return raw::fmod(x, b); });
}
Tensor autograd::ops::remainder(const Tensor& a, Scalar b) {
  return unary_op(a, kRemainderScalar, [&](const Tensor& x) { return raw::remainder(x, b); });
}
Tensor autograd::ops::add(const Tensor& a, Scalar b) {
  return unary_op(a, kAddScalar, [&](const Tensor& x) { return raw::add(x, b); });
}
Tensor autograd::ops::sub(const Tensor& a, Scalar b) {
  return unary_op(a, kAddScalar, [&](const Tensor& x) { return raw::sub(x, b); });
}
Tensor autograd::ops::mul(const Tensor& a, Scalar b) {
  return unary_op(a, kMulScalar, [&](const Tensor& x) { return raw::mul(x, b); }, {b.to_double(), 0});
}
Tensor autograd::ops::div(const Tensor& a, Scalar b) {
  return unary_op(a, kMulScalar, [&](const Tensor& x) { return raw::div(x, b); }, {1.0 / b.to_double(), 0});
}
Tensor autograd::ops::pow(const Tensor& a, Scalar e) {
  return unary_op(a, kPowScalar, [&](const Tensor& x) { return raw::pow(x, e); }, {e.to_double(), 0});
}
Tensor autograd::ops::pow(Scalar base, const Tensor& e) {
  return unary_op(e, kPowScalarBase, [&](const Tensor& x) { return raw::pow(base, x); }, {base.to_double(), 0});
}

namespace {
// ---- complex: the modulus and the argument ----------------------------------------
// Not holomorphic, so not of the `u f'` form: their backward formulas are
// written out (g real; the gradient of a complex z is dL/dRe z + i dL/dIm z,
// docs/AUTOGRAD.md "Conjugation"), zero where z is 0 (as PyTorch's).
using ComplexFormula = Tensor (*)(const Tensor& g, const Tensor& z);
class ComplexToRealBackward final : public SelfResultNode {
 public:
  ComplexToRealBackward(const char* op, const char* name, ComplexFormula f) : SelfResultNode(op, name), f_(f) {}
  variable_list apply(variable_list&& grads) override {
    variable_list out(1);
    if (should_compute_output(0)) out[0] = f_(grads[0], self_.unpack(this, "self"));
    return out;
  }

 private:
  ComplexFormula f_;
};

// |z|^2, and a copy of it with 1 where z is 0 (a divisor whose derivative
// stays finite there).
Tensor modulus_squared(const Tensor& z) { return add(square(real(z)), square(imag(z))); }
Tensor safe_divisor(const Tensor& d) { return where(eq(d, 0), ones_like(d), d); }
// z / |z|, 0 where z is 0.
Tensor sgn_of(const Tensor& z) { return div(z, safe_divisor(abs(z))); }

// d|z| = Re(conj(sgn z) dz); the gradient g sgn(z).
Tensor abs_grad(const Tensor& g, const Tensor& z) { return mul(g, sgn_of(z)); }
// d arg z = Im(conj(z) dz) / |z|^2; the gradient g i z / |z|^2.
Tensor angle_grad(const Tensor& g, const Tensor& z) {
  if (!is_complex(z.dtype())) return zeros_like(g);  // piecewise constant
  return mul(g, div(complex_from(neg(imag(z)), real(z)), safe_divisor(modulus_squared(z))));
}

template <class Raw, class Tangent>
Tensor complex_to_real(const Tensor& z, const char* op, const char* name, ComplexFormula grad, Raw&& raw_fn,
                       Tangent&& tangent) {
  Tensor out;
  if (!should_record({&z})) {
    out = run_raw(raw_fn);
  } else {
    auto node = make_node<ComplexToRealBackward>({&z}, op, name, grad);
    out = run_raw(raw_fn);
    node->self_ = SavedVariable(z, false);
    out = finish(out, node);
  }
  return fw_linear(out, z, tangent);
}

// Taylor mode: through the parts (sqrt(re^2 + im^2), atan2(im, re)), whose
// ops have Taylor rules (the tangent formulas above are first order only).
bool taylor_through_parts(const Tensor& z) { return fw_taylor() && fw_any({&z}) && is_complex(z.dtype()); }

Tensor complex_abs(const Tensor& z) {
  if (taylor_through_parts(z)) return sqrt(modulus_squared(z));
  return complex_to_real(
      z, "abs", "AbsBackward", abs_grad, [&] { return raw::abs(z); },
      [&](const Tensor& t) { return real(mul(conj(sgn_of(z)), t)); });
}

class ComplexFromBackward final : public OpNode {
 public:
  ComplexFromBackward() : OpNode("complex_from", "ComplexFromBackward") {}
  variable_list apply(variable_list&& grads) override {
    variable_list out(2);
    if (should_compute_output(0)) out[0] = real(grads[0]);
    if (should_compute_output(1)) out[1] = imag(grads[0]);
    return out;
  }
};
}  // namespace

Tensor autograd::ops::angle(const Tensor& z) {
  if (taylor_through_parts(z)) return tg::atan2(tg::imag(z), tg::real(z));
  return complex_to_real(
      z, "angle", "AngleBackward", angle_grad, [&] { return raw::angle(z); },
      [&](const Tensor& t) {
        return is_complex(z.dtype()) ? tg::div(tg::imag(tg::mul(tg::conj(z), t)), safe_divisor(modulus_squared(z)))
                                     : zeros_like(t);
      });
}
Tensor autograd::ops::complex_from(const Tensor& re, const Tensor& im) {
  Tensor out = !should_record({&re, &im}) ? run_raw([&] { return raw::complex_from(re, im); })
                                          : finish(run_raw([&] { return raw::complex_from(re, im); }),
                                                   make_node<ComplexFromBackward>({&re, &im}));
  if (fw_any({&re, &im})) {
    const Tensor tr = fw_pad(fw_t(re), out.dim()), ti = fw_pad(fw_t(im), out.dim());
    fw_rule(out,
            [&] { return tg::complex_from(tr.defined() ? tr : zeros_like(ti), ti.defined() ? ti : zeros_like(tr)); });
  }
  return out;
}
Tensor autograd::ops::polar(const Tensor& abs, const Tensor& angle) {
  if (!should_record({&abs, &angle}) && !fw_any({&abs, &angle})) return raw::polar(abs, angle);
  tg::detail::check_complex_parts(abs, angle, "polar");
  return tg::complex_from(tg::mul(abs, tg::cos(angle)), tg::mul(abs, tg::sin(angle)));
}

// The plain unary ops of unary.def, recorded with their spec above (abs of a
// complex tensor: its modulus, above).
#define TG_UNARY(name, Kernel, ...)                                                                        \
  Tensor autograd::ops::name(const Tensor& x) {                                                            \
    if (tg::kernels::UnaryOp::Kernel == tg::kernels::UnaryOp::Abs && x.defined() && is_complex(x.dtype())) \
      return complex_abs(x);                                                                               \
    return unary_op(x, k##Kernel, [](const Tensor& t) { return raw::name(t); });                           \
  }
#include <tapegrad/tensor/unary.def>
#undef TG_UNARY

Tensor autograd::ops::gelu(const Tensor& x, const std::string& approximate) {
  return unary_op(x, approximate == "tanh" ? kGeluTanh : kGelu,
                  [&](const Tensor& t) { return raw::gelu(t, approximate); });
}
Tensor autograd::ops::softplus(const Tensor& x, double beta, double threshold) {
  return unary_op(x, kSoftplus, [&](const Tensor& t) { return raw::softplus(t, beta, threshold); }, {beta, threshold});
}
Tensor autograd::ops::clamp(const Tensor& x, std::optional<Scalar> lo, std::optional<Scalar> hi) {
  const UnarySpec& spec = lo && hi ? kClampBoth : lo ? kClampLo : kClampHi;
  return unary_op(x, spec, [&](const Tensor& t) { return raw::clamp(t, lo, hi); },
                  {lo ? lo->to_double() : 0, hi ? hi->to_double() : 0});
}

Tensor autograd::ops::where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  Tensor out = !should_record({&a, &b})
                   ? run_raw([&] { return raw::where(cond, a, b); })
                   : finish(run_raw([&] { return raw::where(cond, a, b); }), make_node<WhereBackward>({&a, &b}, cond));
  if (fw_any({&a, &b})) {  // the tangent of the branch taken
    const Tensor ta = fw_pad(fw_t(a), out.dim()), tb = fw_pad(fw_t(b), out.dim());
    fw_rule(out, [&] { return tg::where(cond, ta.defined() ? ta : zeros_like(a), tb.defined() ? tb : zeros_like(b)); });
  }
  return out;
}
Tensor autograd::ops::where(const Tensor& cond, const Tensor& a, Scalar b) {
  if (!should_record({&a}) && !fw_any({&a})) return raw::where(cond, a, b);
  Tensor bt = scalar_tensor(b, TensorOptions().dtype(a.dtype()).device(a.device()));
  return tg::where(cond, a, bt);
}
Tensor autograd::ops::where(const Tensor& cond, Scalar a, const Tensor& b) {
  if (!should_record({&b}) && !fw_any({&b})) return raw::where(cond, a, b);
  Tensor at = scalar_tensor(a, TensorOptions().dtype(b.dtype()).device(b.device()));
  return tg::where(cond, at, b);
}

// ---- activation_grad: g * act^(k)(x) ---------------------------------------------------
// d/dg = act^(k)(x) (the same op on the incoming gradient), d/dx =
// g * act^(k+1)(x) (the next order on gg * g): each derivative is one or two
// fused kernels, for any order. Above the fused orders, the order-(k-1)
// kernel's graph is differentiated by the engine (reentrant grad), keeping
// the dependence on x when grad mode is on.
namespace {

// (g * g2) * act^(order)(x), broadcast, not recorded: one kernel where the
// device has activation_grad_product (autograd/kernels/kernels.h), else mul
// then activation_grad.
Tensor activation_grad_product(const Tensor& g, const Tensor& g2, const Tensor& x, Activation act, int order) {
  const char* name = "activation_grad";
  const auto fused = autograd::kernels::derivative_kernels(x.device()).activation_grad_product;
  if (!fused || g.device() != x.device() || g2.device() != x.device() || !g.is_floating_point() ||
      !g2.is_floating_point() || !x.is_floating_point())
    return raw::activation_grad(raw::mul(g, g2), x, act, order);
  const ScalarType rt = promote_types(promote_types(g.dtype(), g2.dtype()), x.dtype());
  const ScalarType ct = detail::compute_type(rt);
  const IntList shape = broadcast_shapes(broadcast_shapes(g.sizes(), g2.sizes(), name), x.sizes(), name);
  Tensor out = detail::new_empty(shape, ct, x.device());
  fused(act, order, out, raw::expand(detail::cast(g, ct), shape), raw::expand(detail::cast(g2, ct), shape),
        raw::expand(detail::cast(x, ct), shape));
  return detail::cast(out, rt);
}

// Both gradients of activation_grad, unrecorded, in one kernel where the
// device has activation_grad_pair and gg, g and x are contiguous, of one
// shape and dtype (Float32/64): out[0] = gg * act^(order)(x), out[1] = (gg
// * g) * act^(order + 1)(x). False (out untouched) otherwise.
bool activation_grad_pair(const Tensor& gg, const Tensor& g, const Tensor& x, Activation act, int order,
                          variable_list& out) {
  const auto fused = autograd::kernels::derivative_kernels(x.device()).activation_grad_pair;
  const ScalarType dt = x.dtype();
  if (!fused || !gg.defined() || (dt != kFloat32 && dt != kFloat64) || gg.dtype() != dt || g.dtype() != dt ||
      gg.device() != x.device() || g.device() != x.device() || gg.sizes() != x.sizes() || g.sizes() != x.sizes() ||
      !gg.is_contiguous() || !g.is_contiguous() || !x.is_contiguous())
    return false;
  Tensor o0 = detail::new_empty(x.sizes(), dt, x.device()), o1 = detail::new_empty(x.sizes(), dt, x.device());
  fused(act, order, o0, o1, gg, g, x);
  out[0] = o0;
  out[1] = o1;
  return true;
}

// The highest fused order written with differentiable ops (activation_math.h
// has the formulas), so that differentiating it never asks for a higher
// fused order again.
Tensor composite_top_order(const Tensor& x, Activation act) {
  static_assert(tg::kernels::kMaxFusedActivationOrder == 4, "update the composite formulas");
  switch (act) {
    case Activation::Silu:
    case Activation::Sigmoid: {
      Tensor s = sigmoid(x);
      Tensor u = mul(s, sub(ones_like(s), s)), a = sub(ones_like(s), mul(s, 2.0));
      if (act == Activation::Sigmoid) return mul(mul(u, a), sub(square(a), mul(u, 8.0)));
      // Where the sigmoid saturates (u = 0, x = +-inf too) the x u terms
      // are 0 (the fused orders' rule): x is zeroed there first, so
      // inf * 0 gives no NaN and the branch not taken differentiates to 0.
      Tensor flat = eq(u, 0.0);
      Tensor xa = mul(where(flat, 0.0, x), a);
      return mul(u, sub(add(mul(square(a), 4.0), mul(xa, square(a))), add(mul(mul(xa, u), 8.0), mul(u, 8.0))));
    }
    case Activation::Tanh: {
      Tensor t = tanh(x), t2 = square(t);
      Tensor v = sub(ones_like(t), t2);
      return mul(mul(v, t), sub(full_like(t, 16.0), mul(t2, 24.0)));
    }
    case Activation::Relu: return zeros_like(x);
    case Activation::Gelu: {  // phi(x) ((7 - x^2) x^2 - 4), 0 where phi underflows
      // (|x| > 40: the polynomial's powers would overflow, and a clamped
      // vectorized exp leaves phi at a denormal instead of 0). x is zeroed
      // there first, so the branch not taken differentiates to 0, not NaN.
      Tensor far = gt(abs(x), 40.0);
      Tensor xs = where(far, 0.0, x);
      Tensor x2 = square(xs);
      Tensor pdf = mul(exp(mul(x2, -0.5)), kInvSqrt2Pi);
      return where(far, 0.0, mul(pdf, sub(mul(sub(full_like(x2, 7.0), x2), x2), 4.0)));
    }
  }
  return Tensor();
}

Tensor activation_grad_beyond(const Tensor& g, const Tensor& x, Activation act, int order) {
  // relu's derivatives vanish from the second on: the top fused order's
  // zeros, which keep x an input with a zero gradient (as orders 2 to 4
  // do; a composite of zeros would leave x unused).
  if (act == Activation::Relu) return activation_grad(g, x, act, tg::kernels::kMaxFusedActivationOrder);
  const bool keep = autograd::is_grad_enabled() && x.requires_grad();
  Tensor xin = keep ? x : x.detach().requires_grad_(true);
  Tensor deriv;
  {
    EnableGradGuard on;
    Tensor prev = order - 1 == tg::kernels::kMaxFusedActivationOrder
                      ? composite_top_order(xin, act)
                      : activation_grad(ones_like(xin), xin, act, order - 1);
    // The engine gives conj(prev') for a complex x (holomorphic prev).
    if (prev.requires_grad())
      deriv = conj_if_complex(autograd::grad({prev}, {xin}, {ones_like(prev)}, true, keep, true)[0]);
  }
  if (!deriv.defined()) deriv = zeros_like(xin);
  return mul(g, deriv);
}

class ActivationGradBackward final : public OpNode {
 public:
  ActivationGradBackward(Activation act, int order)
      : OpNode("activation_grad", "ActivationGradBackward"), act_(act), order_(order) {}
  variable_list apply(variable_list&& grads) override {
    variable_list out(2);
    const Tensor& gg = grads[0];
    Tensor x = x_.unpack(this, "x");
    if (is_complex(x.dtype())) {  // g conj(f'): conj(conj(g) f') (holomorphic)
      const Tensor cg = conj(gg);
      if (should_compute_output(0)) out[0] = conj_if_complex(activation_grad(cg, x, act_, order_));
      if (should_compute_output(1)) out[1] = conj(activation_grad(mul(cg, g_.unpack(this, "g")), x, act_, order_ + 1));
      return out;
    }
    // Not recorded (the last backward of a chain) and no tangents to carry
    // (forward over reverse needs the public ops' rules): fused kernels.
    const bool unrecorded = !autograd::is_grad_enabled() && !autograd::forward_ad::is_active() &&
                            order_ + 1 <= tg::kernels::kMaxFusedActivationOrder;
    if (unrecorded && act_ != Activation::Relu && should_compute_output(0) && should_compute_output(1) &&
        activation_grad_pair(gg, g_.unpack(this, "g"), x, act_, order_, out))
      return out;
    if (should_compute_output(0)) out[0] = activation_grad(gg, x, act_, order_);
    if (should_compute_output(1)) {
      if (act_ == Activation::Relu && order_ >= 1)
        out[1] = zeros_like(x);  // relu's derivatives vanish from the second on
      else if (unrecorded)       // the mul fused in
        out[1] = activation_grad_product(gg, g_.unpack(this, "g"), x, act_, order_ + 1);
      else out[1] = activation_grad(mul(gg, g_.unpack(this, "g")), x, act_, order_ + 1);
    }
    return out;
  }
  void release_variables() override {
    g_.release();
    x_.release();
  }
  SavedVariable g_, x_;

 private:
  Activation act_;
  int order_;
};

}  // namespace

Tensor autograd::ops::activation_grad(const Tensor& g, const Tensor& x, Activation act, int order) {
  TG_CHECK(order >= 0, "activation_grad: order must be >= 0, got ", order);
  if (order > tg::kernels::kMaxFusedActivationOrder) {
    // The fused kernels' checks, for the orders past them.
    TG_CHECK(!(x.defined() && is_complex(x.dtype()) && (act == Activation::Relu || act == Activation::Gelu)),
             "activation_grad: ", act == Activation::Relu ? "relu" : "gelu", " has no complex meaning (", x.dtype(),
             ")");
    return activation_grad_beyond(g, x, act, order);
  }
  Tensor out;
  if (!should_record({&g, &x})) {
    out = run_raw([&] { return raw::activation_grad(g, x, act, order); });
  } else {
    auto node = make_node<ActivationGradBackward>({&g, &x}, act, order);
    out = run_raw([&] { return raw::activation_grad(g, x, act, order); });
    node->x_ = SavedVariable(x, false);
    if (node->needs_input_grad(1)) node->g_ = SavedVariable(g, false);
    out = finish(out, node);
  }
  if (fw_any({&g, &x})) {  // d(g act^(k)(x)) = dg act^(k)(x) + g dx act^(k+1)(x)
    const Tensor tg_ = fw_pad(fw_t(g), out.dim()), tx = fw_pad(fw_t(x), out.dim());
    fw_rule(out, [&] {
      if (fw_taylor() && tx.defined() && !(act == Activation::Relu && order >= 1)) {
        // g times phi = act^(order)(x): phi's coefficients from its
        // derivatives act^(order + j), then the product's (Cauchy).
        Tensor phi = tg::activation_grad(broadcast_one(x), x, act, order);
        Tensor tphi = jet_activation(tx, x, act, order);  // order 2: one kernel
        if (!tphi.defined()) {
          std::vector<Tensor> d(size_t(fw_taylor()->order) + 1);
          activation_derivatives(x, act, order, d);
          tphi = jet_unary(tx, d);
        }
        return jet_product(g, tg_, phi, tphi, jet_mul);
      }
      return fw_add(tg_.defined() ? tg::activation_grad(tg_, x, act, order) : Tensor(),
                    tx.defined() ? tg::activation_grad(tg::mul(g, tx), x, act, order + 1) : Tensor());
    });
  }
  return out;
}

}  // namespace tg
