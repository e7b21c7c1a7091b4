// Forward mode (docs/AUTOGRAD.md "Forward mode"): every tangent rule against
// central finite differences and against the reverse-mode J v (double vjp)
// in float64; forward-over-reverse Hessian-vector products against reverse
// over reverse; in-place ops, custom Functions with and without jvp; the
// level frees what it held; misuse says so. (Every op of the op list is
// also checked by tests/test_op_table.cpp: gradcheck with check_forward_ad,
// and gradgradcheck with it, i.e. forward over reverse.)
#include <cmath>
#include <functional>

#include "reference.h"

namespace {

using tg::Tensor;
namespace ag = tg::autograd;
namespace fwd = tg::autograd::forward_ad;

const auto kF64 = tg::TensorOptions().dtype(tg::kFloat64);
using Fn = std::function<Tensor(const Tensor&)>;

// J v of fn at x by forward mode.
Tensor forward_jv(const Fn& fn, const Tensor& x, const Tensor& v) {
  fwd::dual_level level;
  Tensor y = fn(fwd::make_dual(x, v));
  Tensor t = fwd::unpack_dual(y).tangent;
  EXPECT_TRUE(t.defined()) << "no tangent on the output";
  return t.defined() ? t : tg::zeros_like(y);
}

// Central differences of fn along v.
Tensor numeric_jv(const Fn& fn, const Tensor& x, const Tensor& v, double h = 1e-6) {
  return (fn(x + v * h) - fn(x - v * h)) / (2 * h);
}

// J v by reverse mode: d/du <J^T u, v> (the double-vjp trick).
Tensor reverse_jv(const Fn& fn, const Tensor& x, const Tensor& v) {
  Tensor xi = x.detach().requires_grad_();
  Tensor y = fn(xi);
  Tensor u = tg::zeros_like(y).requires_grad_();
  Tensor gx = ag::grad({y}, {xi}, {u}, true, true)[0];
  if (!gx.requires_grad()) return tg::zeros_like(y);  // J = 0 (sign, floor, ...)
  return ag::grad({gx}, {u}, {v})[0];
}

// H v by reverse over reverse.
Tensor reverse_hv(const Fn& f, const Tensor& x, const Tensor& v) {
  Tensor xi = x.detach().requires_grad_();
  Tensor g = ag::grad({f(xi)}, {xi}, {}, true, true)[0];
  return ag::grad({g}, {xi}, {v})[0];
}

double max_abs(const Tensor& t) { return t.numel() ? tg::amax(tg::abs(t)).item<double>() : 0.0; }

void check_jv(const std::string& what, const Fn& fn, const Tensor& x, double tol = 1e-7) {
  SCOPED_TRACE(what);
  Tensor v = tg::randn(x.sizes(), kF64);
  Tensor jv = forward_jv(fn, x, v);
  Tensor num = numeric_jv(fn, x, v);
  ASSERT_EQ(jv.sizes(), num.sizes());
  EXPECT_LT(max_abs(jv - num), tol * (1 + max_abs(num)));
  // Against reverse mode, and the functional jvp (a forward pass).
  Tensor rev = reverse_jv(fn, x, v);
  EXPECT_LT(max_abs(jv - rev), 1e-12 * (1 + max_abs(rev)));
  EXPECT_TRUE(tg::equal(ag::jvp(fn, x, v).second, jv));
}

// check_jv for functions reverse mode refuses (in-place ops on views while
// recording): against central differences, unbatched, batched (three
// directions in one pass) and through the functional jvp.
void check_jv_no_reverse(const std::string& what, const Fn& fn, const Tensor& x, double tol = 1e-7) {
  SCOPED_TRACE(what);
  Tensor vs = tg::randn({3, x.size(0), x.size(1)}, kF64);
  Tensor jv = forward_jv(fn, x, vs.select(0, 0));
  Tensor num = numeric_jv(fn, x, vs.select(0, 0));
  ASSERT_EQ(jv.sizes(), num.sizes());
  EXPECT_LT(max_abs(jv - num), tol * (1 + max_abs(num)));
  EXPECT_LT(max_abs(ag::jvp(fn, x, vs.select(0, 0)).second - num), tol * (1 + max_abs(num)));
  Tensor batched;
  {
    fwd::dual_level level(3);
    batched = fwd::unpack_dual(fn(fwd::make_dual(x, vs))).tangent;
  }
  ASSERT_TRUE(batched.defined());
  for (int64_t i = 0; i < 3; ++i) {
    Tensor n = numeric_jv(fn, x, vs.select(0, i));
    EXPECT_LT(max_abs(batched.select(0, i) - n), tol * (1 + max_abs(n))) << "batched direction " << i;
  }
}

TEST(ForwardAD, UnaryOpsMatchFiniteDifferencesAndReverseMode) {
  tg::manual_seed(1);
#define TG_UNARY(name, Kernel, float_only, forward, backward, saves, taylor, lo, hi, cx) \
  {                                                                                      \
    Tensor x = tg::rand({3, 4}, kF64) * (double(hi) - double(lo)) + double(lo);          \
    check_jv(                                                                            \
        #name, [](const Tensor& t) { return tg::name(t); }, x);                          \
  }
#include <tapegrad/tensor/unary.def>
#undef TG_UNARY
  Tensor x = tg::rand({5}, kF64) + 0.5;
  check_jv(
      "gelu", [](const Tensor& t) { return tg::gelu(t); }, x);
  check_jv(
      "gelu tanh", [](const Tensor& t) { return tg::gelu(t, "tanh"); }, x);
  check_jv(
      "softplus", [](const Tensor& t) { return tg::softplus(t, 2.0, 20.0); }, x);
  check_jv(
      "clamp", [](const Tensor& t) { return tg::clamp(t, 0.7, 1.2); }, x);
  check_jv(
      "scalar ops", [](const Tensor& t) { return tg::pow((t + 1.0) * 3.0 - 0.5, 2.5) / 4.0; }, x);
  check_jv(
      "scalar base", [](const Tensor& t) { return tg::pow(2.0, t); }, x);
}

TEST(ForwardAD, BinaryOpsWithBroadcastingAndWhere) {
  tg::manual_seed(2);
  Tensor b = tg::rand({1, 4}, kF64) + 0.5;  // a constant, broadcast
  Tensor x = tg::rand({3, 4}, kF64) + 0.5;
  check_jv(
      "add", [&](const Tensor& t) { return tg::add(t, b, 2.0); }, x);
  check_jv(
      "sub", [&](const Tensor& t) { return tg::sub(b, t, 0.5); }, x);
  check_jv(
      "mul", [&](const Tensor& t) { return t * b * t; }, x);
  check_jv(
      "div", [&](const Tensor& t) { return b / t + t / b; }, x);
  check_jv(
      "pow", [&](const Tensor& t) { return tg::pow(t, b) + tg::pow(b, t); }, x);
  check_jv(
      "maximum", [&](const Tensor& t) { return tg::maximum(t, b) + tg::minimum(t * 2.0, b); }, x);
  check_jv(
      "where", [&](const Tensor& t) { return tg::where(tg::gt(b, 0.9), t.square(), t * 3.0); }, x);
  check_jv(
      "where scalar",
      [&](const Tensor& t) { return tg::where(tg::gt(t, 1.0), t, 0.5) + tg::where(tg::gt(t, 1.0), 2.0, t); }, x);
  // Both operands dual, the smaller one broadcast.
  Tensor y = tg::rand({4}, kF64) + 0.5;
  check_jv(
      "both broadcast", [&](const Tensor& t) { return t.narrow(0, 0, 1).reshape({4}) * t; }, x);
  (void)y;
}

TEST(ForwardAD, LinalgReductionsAndViews) {
  tg::manual_seed(3);
  Tensor w = tg::randn({5, 4}, kF64), bias = tg::randn({5}, kF64);
  Tensor x = tg::randn({3, 4}, kF64);
  check_jv(
      "mm", [&](const Tensor& t) { return tg::mm(t, w.t()) + tg::mm(t, t.t()).sum(); }, x);
  check_jv(
      "matmul", [&](const Tensor& t) { return tg::matmul(t, t.t().narrow(1, 0, 2)); }, x);
  check_jv(
      "matmul 1-d", [&](const Tensor& t) { return tg::matmul(t.select(0, 1), t.t()); }, x);
  check_jv(
      "bmm",
      [&](const Tensor& t) {
        return tg::bmm(t.unsqueeze(0).expand({2, 3, 4}), t.t().unsqueeze(0).expand({2, 4, 3}));
      },
      x);
  check_jv(
      "linear", [&](const Tensor& t) { return tg::linear(t, w, bias); }, x);
  check_jv(
      "sum mean", [&](const Tensor& t) { return t.sum({1}, true) * t.mean() + t.mean({0}).sum(); }, x);
  check_jv(
      "views",
      [&](const Tensor& t) {
        return t.view({4, 3}).transpose(0, 1).reshape({12}).slice(0, 1, 11, 2).unsqueeze(1).expand({5, 3}).squeeze() *
               t.permute({1, 0}).flatten().select(0, 2);
      },
      x);
  check_jv(
      "clone", [&](const Tensor& t) { return t.clone() * 2.0; }, x);
  {  // a dtype conversion converts the tangent
    fwd::dual_level level;
    Tensor v = tg::randn({3, 4}, kF64);
    Tensor y = fwd::make_dual(x, v).to(tg::kFloat32);
    EXPECT_TRUE(tg::equal(fwd::unpack_dual(y).tangent, v.to(tg::kFloat32)));
  }
}

// An MLP: the forward tangent equals the reverse-mode J v.
TEST(ForwardAD, MlpTangentEqualsReverseMode) {
  tg::manual_seed(4);
  auto net = tg::nn::MLP({3, 16, 16, 2}, "tanh", tg::kFloat64);
  Tensor x = tg::randn({8, 3}, kF64);
  check_jv(
      "mlp", [&](const Tensor& t) { return net->forward(t); }, x);
  auto silu = tg::nn::MLP({3, 8, 1}, "silu", tg::kFloat64);
  check_jv(
      "silu mlp", [&](const Tensor& t) { return silu->forward(t); }, x);
}

// Forward over reverse: with x dual, the gradient's tangent is H v; equal to
// reverse over reverse (hvp).
// An energy of the input gradient, E(x) = |grad u|^2 (a PINN's): its
// Hessian-vector product by forward over reverse runs the backward of the
// inner gradient's activation_grad nodes unrecorded (create_graph off in the
// outer grad), where a fused kernel without tangent rules used to drop the
// tangent (hvp gave zeros). Every activation with a fused derivative, and
// the Hessian by forward mode, against reverse over reverse.
TEST(ForwardAD, ForwardOverReverseThroughAnInnerGradientsActivationDerivatives) {
  tg::manual_seed(13);
  Tensor w1 = tg::randn({8, 3}, kF64), b1 = tg::randn({8}, kF64), w2 = tg::randn({1, 8}, kF64);
  Tensor x = tg::randn({3}, kF64), v = tg::randn({3}, kF64);
  const std::pair<const char*, tg::Activation> acts[] = {{"silu", tg::Activation::Silu},
                                                         {"tanh", tg::Activation::Tanh},
                                                         {"sigmoid", tg::Activation::Sigmoid},
                                                         {"gelu", tg::Activation::Gelu}};
  for (auto [name, act] : acts) {
    auto a = tg::nn::make_activation(name);
    auto energy = [&](const Tensor& t) {
      Tensor u = tg::linear(a->forward(tg::linear(t, w1, b1)), w2).sum();
      Tensor g = ag::grad({u}, {t}, {}, std::nullopt, /*create_graph=*/true)[0];
      return (g * g).sum();
    };
    Tensor want = reverse_hv(energy, x, v);
    ASSERT_GT(max_abs(want), 1e-3) << name;
    EXPECT_LT(max_abs(ag::hvp(energy, x, v).second - want), 1e-10 * (1 + max_abs(want))) << name;
    Tensor h = ag::hessian(energy, x, false, ag::JacobianMode::Forward);
    EXPECT_LT(max_abs(h.matmul(v) - want), 1e-10 * (1 + max_abs(want))) << name;
    // activation_grad's own backward: the gradient of sum(act'(x)) is
    // act''(x), whose tangent along v is act'''(x) v.
    fwd::dual_level level;
    Tensor xr = x.clone().requires_grad_();
    Tensor y = tg::activation_grad(tg::ones_like(x), fwd::make_dual(xr, v), act, 1).sum();
    Tensor t = fwd::unpack_dual(ag::grad({y}, {xr})[0]).tangent;
    ASSERT_TRUE(t.defined()) << name;
    Tensor third = tg::activation_grad(tg::ones_like(x), x, act, 3) * v;
    EXPECT_LT(max_abs(t - third), 1e-12 * (1 + max_abs(third))) << name;
  }
}

TEST(ForwardAD, ForwardOverReverseHessianVectorProducts) {
  tg::manual_seed(5);
  auto net = tg::nn::MLP({4, 12, 12, 1}, "tanh", tg::kFloat64);
  auto f = [&](const Tensor& t) { return net->forward(t.unsqueeze(0)).sum() + (t * t * t).sum(); };
  Tensor x = tg::randn({4}, kF64), v = tg::randn({4}, kF64);
  Tensor hv;
  {
    fwd::dual_level level;
    Tensor xd = fwd::make_dual(x.clone().requires_grad_(), v);
    Tensor g = ag::grad({f(xd)}, {xd})[0];
    hv = fwd::unpack_dual(g).tangent;
  }
  ASSERT_TRUE(hv.defined());
  Tensor want = reverse_hv(f, x, v);
  EXPECT_LT(max_abs(hv - want), 1e-12 * (1 + max_abs(want)));
  // The functional hvp is forward over reverse; inside a caller's dual level
  // (levels do not nest) it is reverse over reverse: both equal.
  EXPECT_LT(max_abs(ag::hvp(f, x, v).second - want), 1e-12 * (1 + max_abs(want)));
  {
    fwd::dual_level level;
    EXPECT_LT(max_abs(ag::hvp(f, x, v).second - want), 1e-12 * (1 + max_abs(want)));
    EXPECT_LT(max_abs(ag::jvp(f, x, v).second - (ag::vjp(f, x, tg::ones({}, kF64)).second * v).sum()), 1e-12);
  }
  // With create_graph, H v is differentiable in x and v (third derivatives):
  // f = sum(x^4) / 4: H v = 3 x^2 v, d/dx sum(H v) = 6 x v.
  Tensor xr = x.clone().requires_grad_(), vr = v.clone().requires_grad_();
  auto quartic = [](const Tensor& t) { return (t * t * t * t).sum() / 4.0; };
  Tensor hq = ag::hvp(quartic, xr, vr, true).second;
  auto gs = ag::grad({hq.sum()}, {xr, vr});
  EXPECT_LT(max_abs(gs[0] - x * v * 6.0), 1e-12 * (1 + max_abs(x * v * 6.0)));
  EXPECT_LT(max_abs(gs[1] - x * x * 3.0), 1e-12 * (1 + max_abs(x * x * 3.0)));
  Tensor jq = ag::jvp([](const Tensor& t) { return t * t * t; }, xr, vr, true).second;
  EXPECT_LT(max_abs(ag::grad({jq.sum()}, {xr})[0] - x * v * 6.0), 1e-12 * (1 + max_abs(x * v * 6.0)));
  // backward() into .grad keeps the tangent too.
  {
    fwd::dual_level level;
    Tensor leaf = x.clone().requires_grad_();
    Tensor xd = fwd::make_dual(leaf, v);
    net->zero_grad();
    f(xd).backward();
    // The leaf's .grad is the gradient w.r.t. the dual's primal; the dual is a
    // view of the leaf, so the tangent reaches it through the view.
    ASSERT_TRUE(leaf.grad().defined());
    Tensor t = fwd::unpack_dual(leaf.grad()).tangent;
    ASSERT_TRUE(t.defined());
    EXPECT_LT(max_abs(t - want), 1e-12 * (1 + max_abs(want)));
  }
}

// An in-place op whose operand promotes (f32 self, f64 other) keeps self's
// dtype: its value, its tangent and its gradient are float32, the other
// operand's gradient float64 (as the raw op casts its result back).
TEST(ForwardAD, InPlaceOpsWithAPromotingOperandKeepSelfsDtype) {
  const auto kF32 = tg::TensorOptions().dtype(tg::kFloat32);
  Tensor x = tg::tensor({1.0, 2.0, 3.0}, {3}, kF32), tx = tg::tensor({0.5, -1.0, 2.0}, {3}, kF32);
  Tensor o = tg::tensor({0.25, 0.5, 4.0}, {3}, kF64), to = tg::tensor({1.0, 1.0, -3.0}, {3}, kF64);
  {
    fwd::dual_level level;
    Tensor y = fwd::make_dual(x, tx) * 1.0;
    y.mul_(fwd::make_dual(o, to));  // tangent tx o + x to
    EXPECT_EQ(y.dtype(), tg::kFloat32);
    Tensor t = fwd::unpack_dual(y).tangent;
    ASSERT_TRUE(t.defined());
    EXPECT_EQ(t.dtype(), tg::kFloat32);
    EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1.125f, 1.5f, -1.0f}));
    Tensor z = fwd::make_dual(x, tx) * 1.0;
    z.add_(o, 2);  // the tangent is x's alone
    EXPECT_EQ(fwd::unpack_dual(z).tangent.dtype(), tg::kFloat32);
    EXPECT_EQ(fwd::unpack_dual(z).tangent.to_vector<float>(), tx.to_vector<float>());
  }
  Tensor xl = x.clone().requires_grad_(), ol = o.clone().requires_grad_();
  Tensor y = xl * 1.0;
  y.mul_(ol);
  EXPECT_EQ(y.dtype(), tg::kFloat32);
  (y * tg::tensor({1.0, 2.0, 3.0}, {3}, kF32)).sum().backward();
  ASSERT_TRUE(xl.grad().defined() && ol.grad().defined());
  EXPECT_EQ(xl.grad().dtype(), tg::kFloat32);
  EXPECT_EQ(ol.grad().dtype(), tg::kFloat64);
  EXPECT_EQ(xl.grad().to_vector<float>(), (std::vector<float>{0.25f, 1.0f, 12.0f}));
  EXPECT_EQ(ol.grad().to_vector<double>(), (std::vector<double>{1.0, 4.0, 9.0}));
}

struct NoJvp : ag::Function<NoJvp> {
  static Tensor forward(ag::AutogradContext*, Tensor x) { return x * 2.0; }
  static ag::variable_list backward(ag::AutogradContext*, ag::variable_list g) { return {g[0] * 2.0}; }
};
struct BadJvp : ag::Function<BadJvp> {
  static Tensor forward(ag::AutogradContext*, Tensor x) { return x * 2.0; }
  static ag::variable_list backward(ag::AutogradContext*, ag::variable_list g) { return {g[0] * 2.0}; }
  static ag::variable_list jvp(ag::AutogradContext*, ag::variable_list t) { return {t[0].narrow(0, 0, 2)}; }
};

// A custom Function with a forward-mode rule: x^3 * y, jvp 3 x^2 y tx + x^3 ty.
struct CubeTimes : ag::Function<CubeTimes> {
  static Tensor forward(ag::AutogradContext* ctx, Tensor x, Tensor y) {
    ctx->save_for_backward({x, y});
    ctx->saved_data["x"] = x;
    ctx->saved_data["y"] = y;
    return x * x * x * y;
  }
  static ag::variable_list backward(ag::AutogradContext* ctx, ag::variable_list g) {
    auto s = ctx->get_saved_variables();
    return {g[0] * 3.0 * s[0] * s[0] * s[1], g[0] * s[0] * s[0] * s[0]};
  }
  static ag::variable_list jvp(ag::AutogradContext* ctx, ag::variable_list t) {
    Tensor x = std::any_cast<Tensor>(ctx->saved_data["x"]), y = std::any_cast<Tensor>(ctx->saved_data["y"]);
    return {t[0] * 3.0 * x * x * y + t[1] * x * x * x};
  }
};

TEST(ForwardAD, CustomFunctionJvp) {
  tg::manual_seed(6);
  Tensor x = tg::randn({3}, kF64).requires_grad_(), y = tg::randn({3}, kF64).requires_grad_();
  ag::GradcheckOptions o;
  o.check_forward_ad = true;
  auto fn = [](const ag::variable_list& v) { return CubeTimes::apply(v[0], v[1]); };
  EXPECT_TRUE(ag::gradcheck(fn, {x, y}, o).ok) << ag::gradcheck(fn, {x, y}, o).message;
  // Only y dual: x's tangent is zero.
  fwd::dual_level level;
  Tensor ty = tg::randn({3}, kF64);
  Tensor out = CubeTimes::apply(x.detach(), fwd::make_dual(y.detach(), ty));
  Tensor want = x.detach() * x.detach() * x.detach() * ty;
  EXPECT_LT(max_abs(fwd::unpack_dual(out).tangent - want), 1e-15);
}

// The same rule written as LibTorch users write it: jvp reads the tensors
// forward saved with get_saved_variables(), whether or not a backward was
// recorded (inputs that require grad, or plain dual inputs).
struct CubeTimesSaved : ag::Function<CubeTimesSaved> {
  static Tensor forward(ag::AutogradContext* ctx, Tensor x, Tensor y) {
    ctx->save_for_backward({x, y});
    return x * x * x * y;
  }
  static ag::variable_list backward(ag::AutogradContext* ctx, ag::variable_list g) {
    auto s = ctx->get_saved_variables();
    return {g[0] * 3.0 * s[0] * s[0] * s[1], g[0] * s[0] * s[0] * s[0]};
  }
  static ag::variable_list jvp(ag::AutogradContext* ctx, ag::variable_list t) {
    auto s = ctx->get_saved_variables();
    if (s.size() != 2) throw std::runtime_error("jvp saw " + std::to_string(s.size()) + " saved tensors");
    return {t[0] * 3.0 * s[0] * s[0] * s[1] + t[1] * s[0] * s[0] * s[0]};
  }
};

TEST(ForwardAD, CustomFunctionJvpReadsSavedVariables) {
  tg::manual_seed(16);
  Tensor x = tg::randn({3}, kF64), y = tg::randn({3}, kF64), tx = tg::randn({3}, kF64), ty = tg::randn({3}, kF64);
  const Tensor want = tx * 3.0 * x * x * y + ty * x * x * x;
  for (bool recorded : {false, true}) {
    Tensor xr = recorded ? x.clone().requires_grad_() : x, yr = recorded ? y.clone().requires_grad_() : y;
    fwd::dual_level level;
    Tensor out = CubeTimesSaved::apply(fwd::make_dual(xr, tx), fwd::make_dual(yr, ty));
    EXPECT_LT(max_abs(fwd::unpack_dual(out).tangent.detach() - want), 1e-14) << "recorded " << recorded;
    EXPECT_EQ(out.requires_grad(), recorded);
  }
  ag::GradcheckOptions o;
  o.check_forward_ad = true;
  Tensor xg = x.clone().requires_grad_(), yg = y.clone().requires_grad_();
  auto fn = [](const ag::variable_list& v) { return CubeTimesSaved::apply(v[0], v[1]); };
  EXPECT_TRUE(ag::gradcheck(fn, {xg, yg}, o).ok) << ag::gradcheck(fn, {xg, yg}, o).message;
  EXPECT_TRUE(ag::gradgradcheck(fn, {xg, yg}).ok);
}

// In-place ops push tangents as their out-of-place forms.
TEST(ForwardAD, InPlaceOps) {
  tg::manual_seed(7);
  Tensor x = tg::rand({3, 4}, kF64) + 0.5, y = tg::rand({4}, kF64) + 0.5;
  Tensor tx = tg::randn({3, 4}, kF64), ty = tg::randn({4}, kF64);
  fwd::dual_level level;
  Tensor xd = fwd::make_dual(x, tx), yd = fwd::make_dual(y, ty);
  auto tangent = [](const Tensor& t) { return fwd::unpack_dual(t).tangent; };
  auto near = [&](const Tensor& got, const Tensor& want) {
    ASSERT_TRUE(got.defined());
    EXPECT_LT(max_abs(got - want), 1e-13 * (1 + max_abs(want)));
  };
  Tensor h = xd.clone();
  h.mul_(yd);  // d(x y) = tx y + x ty
  near(tangent(h), tx * y + x * ty);
  h.add_(yd, 2.0).div_(3.0);
  near(tangent(h), (tx * y + x * ty + ty * 2.0) / 3.0);
  Tensor k = x.clone();  // no tangent until an operand brings one
  k.sub_(yd);
  near(tangent(k), -ty.expand({3, 4}));
  k.copy_(xd * 2.0);
  near(tangent(k), tx * 2.0);
  k.fill_(1.0);  // a constant now
  near(tangent(k), tg::zeros({3, 4}, kF64));
  // Inside a dual level, in-place ops on tensors without tangents stay plain.
  Tensor plain = x.clone();
  plain.mul_(2.0);
  EXPECT_FALSE(tangent(plain).defined());
}

// In-place ops on views (PyTorch's semantics): the view's tangent is its
// part of the base's, so an in-place op on a view taken inside the level
// updates the base's tangent (a zero one is made for a base without) and
// every view of it, taken before or after.
TEST(ForwardAD, InPlaceOpsOnViewsReachTheBase) {
  const Tensor x = tg::tensor({2.0, 3.0}, {2}, kF64);
  fwd::dual_level level;
  auto tangent = [](const Tensor& t) { return fwd::unpack_dual(t).tangent; };
  // The reproducer.
  Tensor a = fwd::make_dual(x, tg::ones({2}, kF64)).clone();
  Tensor before = a.narrow(0, 1, 1);
  a.narrow(0, 0, 1).mul_(5.0);
  EXPECT_TRUE(tg::equal(a, tg::tensor({10.0, 3.0}, {2}, kF64)));
  ASSERT_TRUE(tangent(a).defined());
  EXPECT_TRUE(tg::equal(tangent(a), tg::tensor({5.0, 1.0}, {2}, kF64)));
  EXPECT_TRUE(tg::equal(tangent(a.select(0, 0)), tg::full({}, 5.0, kF64)));
  EXPECT_TRUE(tg::equal(tangent(before), tg::tensor({1.0}, {1}, kF64)));
  // A base without a tangent gets a zero one with the view's part written;
  // a view taken before that sees it.
  Tensor c = tg::zeros({2}, kF64);
  Tensor c1 = c.narrow(0, 1, 1), c0 = c.select(0, 0);
  c.narrow(0, 0, 1).copy_(fwd::make_dual(x, tg::ones({2}, kF64)).narrow(0, 0, 1));
  ASSERT_TRUE(tangent(c).defined());
  EXPECT_TRUE(tg::equal(tangent(c), tg::tensor({1.0, 0.0}, {2}, kF64)));
  EXPECT_TRUE(tg::equal(tangent(c1), tg::tensor({0.0}, {1}, kF64)));
  EXPECT_TRUE(tg::equal(tangent(c0), tg::full({}, 1.0, kF64)));
  // A view of a view; then an in-place op on the base reaches the views.
  Tensor m = tg::zeros({3, 4}, kF64);
  Tensor col = m.t().select(0, 2);  // column 2, stride 4
  Tensor mid = col.narrow(0, 1, 1);
  mid.add_(fwd::make_dual(x, tg::tensor({7.0, 8.0}, {2}, kF64)).narrow(0, 1, 1));
  Tensor want = tg::zeros({3, 4}, kF64);
  want.select(0, 1).select(0, 2).fill_(8.0);
  EXPECT_TRUE(tg::equal(tangent(m), want));
  EXPECT_TRUE(tg::equal(tangent(col), tg::tensor({0.0, 8.0, 0.0}, {3}, kF64)));
  m.mul_(2.0);
  EXPECT_TRUE(tg::equal(tangent(mid), tg::tensor({16.0}, {1}, kF64)));
  m.select(0, 1).zero_();
  EXPECT_TRUE(tg::equal(tangent(col), tg::zeros({3}, kF64)));
  // make_dual and unpack_dual's primal are aliases that keep their own
  // tangents (as PyTorch): an in-place op on one leaves the other's.
  Tensor p = x.clone();
  Tensor d = fwd::make_dual(p, tg::ones({2}, kF64));
  d.narrow(0, 0, 1).mul_(3.0);
  EXPECT_TRUE(tg::equal(tangent(d), tg::tensor({3.0, 1.0}, {2}, kF64)));
  EXPECT_FALSE(tangent(p).defined());
  p.narrow(0, 1, 1).copy_(d.narrow(0, 0, 1));  // p gets a tangent, d keeps its own
  EXPECT_TRUE(tg::equal(tangent(p), tg::tensor({0.0, 3.0}, {2}, kF64)));
  EXPECT_TRUE(tg::equal(tangent(d), tg::tensor({3.0, 1.0}, {2}, kF64)));
  // The user's tangent is never written.
  Tensor v = tg::ones({2}, kF64);
  Tensor e = fwd::make_dual(x.clone(), v);
  e.narrow(0, 0, 1).mul_(4.0);
  EXPECT_TRUE(tg::equal(v, tg::ones({2}, kF64)));
}

// Every in-place op on every kind of view, with a scalar and with a dual
// operand, on a dual base and on a base without a tangent: the base and its
// views (taken before and after) against central differences (the functions
// are polynomial or rational in x, so differences are accurate), unbatched,
// batched (dual_level(3)) and through the functional jvp.
TEST(ForwardAD, InPlaceOpsOnEveryViewMatchFiniteDifferences) {
  tg::manual_seed(11);
  const Tensor x = tg::rand({3, 4}, kF64) + 0.5;
  using View = std::function<Tensor(const Tensor&)>;
  const std::vector<std::pair<std::string, View>> views = {
      {"itself", [](const Tensor& b) { return b; }},
      {"narrow", [](const Tensor& b) { return b.narrow(0, 1, 2); }},
      {"select", [](const Tensor& b) { return b.select(1, 2); }},
      {"transposed", [](const Tensor& b) { return b.t().narrow(0, 1, 2); }},
      {"strided slice", [](const Tensor& b) { return b.slice(1, 0, 4, 2); }},
      {"view of a view", [](const Tensor& b) { return b.t().select(0, 3).narrow(0, 0, 2); }},
      {"reshaped",
       [](const Tensor& b) {
         return b.view({12}).narrow(0, 3, 6).view({2, 3});
       }},
  };
  using Op = std::function<void(const Tensor& view, const Tensor& dual)>;  // dual: an operand of view's shape
  const std::vector<std::pair<std::string, Op>> ops = {
      {"mul_ scalar", [](const Tensor& w, const Tensor&) { w.mul_(5.0); }},
      {"div_ scalar", [](const Tensor& w, const Tensor&) { w.div_(4.0); }},
      {"add_ scalar", [](const Tensor& w, const Tensor&) { w.add_(2.0); }},
      {"mul_ dual", [](const Tensor& w, const Tensor& o) { w.mul_(o); }},
      {"div_ dual", [](const Tensor& w, const Tensor& o) { w.div_(o); }},
      {"add_ dual", [](const Tensor& w, const Tensor& o) { w.add_(o, 3.0); }},
      {"sub_ dual", [](const Tensor& w, const Tensor& o) { w.sub_(o); }},
      {"copy_ dual", [](const Tensor& w, const Tensor& o) { w.copy_(o); }},
      {"fill_", [](const Tensor& w, const Tensor&) { w.fill_(1.5); }},
  };
  for (const auto& [vname, view] : views)
    for (const auto& [oname, op] : ops)
      for (bool dual_base : {true, false}) {
        if (!dual_base && oname.find("dual") == std::string::npos) continue;  // nothing to push
        auto fn = [&, dual_base](const Tensor& xi) {
          // Operand: a nonlinear function of x, of the view's shape.
          Tensor o = view(tg::exp(xi * 0.3) + 1.0);
          Tensor base = dual_base ? xi * xi : tg::zeros({3, 4}, kF64) + 1.0;
          Tensor pre = base.select(0, 1);  // taken before the in-place op
          op(view(base), o);
          return tg::cat({base.flatten(), pre * 1.0, view(base).flatten() * 2.0, base.select(1, 0)});
        };
        check_jv_no_reverse(vname + ", " + oname + (dual_base ? ", dual base" : ", base without tangent"), fn, x);
      }
}

// The tangent of a tensor whose forward-over-reverse history saves the
// tensor itself (exp: the tangent t * exp(x) keeps exp(x)) forms a cycle;
// the level clears tangents when it ends, so the graph is freed.
TEST(ForwardAD, LevelEndFreesTangentCycles) {
  std::weak_ptr<ag::Node> node;
  {
    Tensor x = tg::randn({3}, kF64).requires_grad_();
    fwd::dual_level level;
    Tensor y = tg::exp(fwd::make_dual(x, tg::ones({3}, kF64)));
    node = y.grad_fn();
    ASSERT_TRUE(fwd::unpack_dual(y).tangent.requires_grad());  // the tangent has history
  }
  EXPECT_TRUE(node.expired()) << "the graph of exp outlived the dual level";
}

// Batched tangents: k directions in one pass, the tangent [k] + shape.
// The identity as the batch gives the whole Jacobian; with x dual, the
// gradient's batched tangent is the whole Hessian (forward over reverse).
TEST(ForwardAD, BatchedTangentsGiveJacobiansAndHessiansInOnePass) {
  tg::manual_seed(8);
  auto net = tg::nn::MLP({3, 10, 10, 2}, "tanh", tg::kFloat64);
  Tensor w = tg::randn({3, 3}, kF64);
  // A residual block, a cat, reductions, a custom Function and broadcasting.
  auto f = [&](const Tensor& x) {
    Tensor h = x + tg::tanh(tg::matmul(x, w));
    Tensor c = tg::cat({h, h.narrow(0, 0, 1) * 2.0}, 0);  // [4]
    return tg::stack(
        {net->forward(h.unsqueeze(0)).squeeze(0).sum(), c.amax(), CubeTimes::apply(x, h).sum(), tg::logsumexp(c, {0})});
  };
  Tensor x = tg::randn({3}, kF64);
  Tensor eye = tg::zeros({3, 3}, kF64);
  for (int64_t j = 0; j < 3; ++j)
    eye.select(0, j).narrow(0, j, 1).fill_(1.0);
  Tensor jac_t;  // [k = 3, 4]: row j = J e_j
  {
    fwd::dual_level level(3);
    EXPECT_EQ(fwd::batch_size(), 3);
    jac_t = fwd::unpack_dual(f(fwd::make_dual(x, eye))).tangent;
  }
  EXPECT_EQ(fwd::batch_size(), 0);
  ASSERT_TRUE(jac_t.defined());
  Tensor jac = ag::jacobian(f, x);  // reverse mode, [4, 3]
  EXPECT_LT(max_abs(jac_t.t() - jac), 1e-12 * (1 + max_abs(jac)));
  // Forward over reverse, batched: the Hessian of a scalar in one pass.
  auto g = [&](const Tensor& t) { return f(t).sum(); };
  Tensor hess_t;
  {
    fwd::dual_level level(3);
    Tensor xd = fwd::make_dual(x.clone().requires_grad_(), eye);
    hess_t = fwd::unpack_dual(ag::grad({g(xd)}, {xd})[0]).tangent;
  }
  Tensor hess = ag::hessian(g, x);
  ASSERT_TRUE(hess_t.defined());
  EXPECT_LT(max_abs(hess_t - hess), 1e-11 * (1 + max_abs(hess)));
  // Misuse.
  fwd::dual_level level(2);
  EXPECT_ERROR_CONTAINS(fwd::make_dual(x, eye),
                        "make_dual: the tangent (Float64 [3, 3] on cpu) must have the "
                        "primal's shape after the level's batch dimension, dtype and "
                        "device (Float64 [2, 3] on cpu)");
  Tensor v = fwd::make_dual(x, tg::ones({2, 3}, kF64));
  Tensor idx = tg::zeros({1, 3}, tg::TensorOptions().dtype(tg::kInt64));
  EXPECT_ERROR_CONTAINS(tg::sparse_coo_tensor(idx, v, {2}),
                        "sparse_coo_tensor: sparse tensors take no batched "
                        "tangents");
}

// laplacian: a 100-input function's per-sample Laplacian equals the trace
// of its Hessian (reverse over reverse), and a closed form.
TEST(ForwardAD, LaplacianEqualsTraceOfHessian) {
  tg::manual_seed(9);
  auto net = tg::nn::MLP({100, 16, 2}, "tanh", tg::kFloat64);
  auto f = [&](const Tensor& x) { return net->forward(x) + (tg::sin(x) * x * x).sum({1}, true); };
  Tensor x = tg::randn({3, 100}, kF64);
  Tensor lap = ag::laplacian(f, x);
  ASSERT_EQ(lap.sizes(), (tg::IntList{3, 2}));
  Tensor h = ag::per_sample_hessian(f, x, ag::HessianStrategy::Rows);  // [3, 2, 100, 100]
  Tensor eye = tg::zeros({100, 100}, kF64);
  for (int64_t j = 0; j < 100; ++j)
    eye.select(0, j).narrow(0, j, 1).fill_(1.0);
  Tensor trace = (h * eye).sum({2, 3});
  EXPECT_LT(max_abs(lap - trace), 1e-11 * (1 + max_abs(trace)));
  // sum_j x_j^3 + x_0 x_1: the Laplacian is 6 sum_j x_j.
  auto g = [](const Tensor& t) {
    return (t * t * t).sum({1}, true) + t.select(1, 0).unsqueeze(1) * t.select(1, 1).unsqueeze(1);
  };
  Tensor y = tg::randn({4, 5}, kF64);
  EXPECT_LT(max_abs(ag::laplacian(g, y) - y.sum({1}, true) * 6.0), 1e-12);
  // Inside a caller's dual level (no nesting) the reverse-mode trace, equal.
  {
    fwd::dual_level level;
    EXPECT_LT(max_abs(ag::laplacian(f, x) - trace), 1e-11 * (1 + max_abs(trace)));
  }
  EXPECT_ERROR_CONTAINS(ag::laplacian(f, tg::ones({4}, kF64)), "laplacian: x must have shape [B, n], got [4]");
}

// A PINN loss on the Laplacian trains: its gradient into the parameters
// (third derivatives through the network) against finite differences.
TEST(ForwardAD, LaplacianLossGradcheckIntoParameters) {
  tg::manual_seed(10);
  Tensor x = tg::randn({5, 3}, kF64);
  Tensor w1 = (tg::randn({4, 3}, kF64) * 0.8).requires_grad_(), b1 = tg::randn({4}, kF64).requires_grad_();
  Tensor w2 = (tg::randn({1, 4}, kF64) * 0.8).requires_grad_();
  auto loss = [&](const ag::variable_list& p) {
    auto u = [&](const Tensor& t) { return tg::linear(tg::tanh(tg::linear(t, p[0], p[1])), p[2]); };
    Tensor lap = ag::laplacian(u, x, /*create_graph=*/true);
    return (lap - 1.0).square().mean();
  };
  auto r = ag::gradcheck(loss, {w1, b1, w2});
  EXPECT_TRUE(r.ok) << r.message;
  EXPECT_GT(tg::abs(ag::grad({loss({w1, b1, w2})}, {w1})[0]).sum().item<double>(), 1e-3);  // a real gradient
}

// derivative_operator: mixed partials to the fourth order against closed
// forms. u = sin(x) exp(y) (harmonic: u_xx + u_yy = 0), tanh(x y), and
// Rosenbrock (1 - x)^2 + 100 (y - x^2)^2 per sample.
TEST(ForwardAD, DerivativeOperatorMatchesClosedForms) {
  tg::manual_seed(11);
  Tensor x = tg::rand({6, 2}, kF64) * 2 - 1;
  auto a = x.select(1, 0).unsqueeze(1), b = x.select(1, 1).unsqueeze(1);  // [6, 1]
  auto se = [](const Tensor& t) { return (tg::sin(t.select(1, 0)) * tg::exp(t.select(1, 1))).unsqueeze(1); };
  using P = std::vector<ag::Partial>;
  auto op = [&](const ag::TensorFn& f, P terms) { return ag::derivative_operator(f, x, terms); };
  auto near = [&](const Tensor& got, const Tensor& want, const char* what) {
    ASSERT_EQ(got.sizes(), want.sizes()) << what;
    EXPECT_LT(max_abs(got - want), 1e-11 * (1 + max_abs(want))) << what;
  };
  const Tensor s = tg::sin(a) * tg::exp(b), c = tg::cos(a) * tg::exp(b);
  near(op(se, {{{}}}), s, "u");
  near(op(se, {{{0}}, {{1}, 2.0}}), c + s * 2.0, "u_x + 2 u_y");
  near(op(se, {{{0, 0}}, {{1, 1}}}), tg::zeros_like(s), "u_xx + u_yy (harmonic)");
  near(op(se, {{{0, 1}}}), c, "u_xy");
  near(op(se, {{{1, 0}}}), c, "u_yx");
  near(op(se, {{{0, 0, 0}}}), -c, "u_xxx");
  near(op(se, {{{0, 1, 1}}}), c, "u_xyy");
  near(op(se, {{{0, 0, 1, 1}}}), -s, "u_xxyy");
  near(op(se, {{{0, 0, 0, 0}, 0.5}, {{}, -0.5}}), tg::zeros_like(s), "u_xxxx / 2 - u / 2");
  // tanh(x y): d/dx = y (1 - t^2), d2/dx2 = -2 y^2 t (1 - t^2),
  // d3/dx3 = -2 y^3 (1 - t^2)(1 - 3 t^2).
  auto th = [](const Tensor& t) { return tg::tanh(t.select(1, 0) * t.select(1, 1)).unsqueeze(1); };
  const Tensor t = tg::tanh(a * b), sech2 = 1.0 - t * t;
  near(op(th, {{{0, 0, 0}}}), b * b * b * sech2 * (1.0 - t * t * 3.0) * -2.0, "tanh(xy)_xxx");
  // Rosenbrock: f_xxx = 2400 x, f_xxy = -400, f_xxxx = 2400, f_yyy = 0.
  auto rosen = [](const Tensor& t) {
    Tensor u = t.select(1, 0), v = t.select(1, 1);
    return ((1.0 - u).square() + (v - u * u).square() * 100.0).unsqueeze(1);
  };
  near(op(rosen, {{{0, 0, 0}}}), a * 2400.0, "rosenbrock_xxx");
  near(op(rosen, {{{0, 1, 0}}}), tg::full({6, 1}, -400.0, kF64), "rosenbrock_xyx");
  near(op(rosen, {{{0, 0, 0, 0}}, {{1, 1, 1}}}), tg::full({6, 1}, 2400.0, kF64), "rosenbrock_xxxx + yyy");
  // A network: the Laplacian equals laplacian(); several output columns.
  auto net = tg::nn::MLP({3, 12, 2}, "silu", tg::kFloat64);
  Tensor z = tg::randn({4, 3}, kF64);
  auto f = [&](const Tensor& in) { return net->forward(in); };
  near(ag::derivative_operator(f, z, {{{0, 0}}, {{1, 1}}, {{2, 2}}}), ag::laplacian(f, z), "MLP Laplacian");
  EXPECT_ERROR_CONTAINS(ag::derivative_operator(f, z, {{{3}}}),
                        "derivative_operator: a term names input dim 3, "
                        "but x has 3 (shape [4, 3])");
}

// A loss on a third derivative trains: its gradient into the parameters
// (fourth derivatives through the network) against finite differences.
TEST(ForwardAD, DerivativeOperatorLossGradcheckIntoParameters) {
  tg::manual_seed(12);
  Tensor x = tg::randn({4, 2}, kF64);
  Tensor w1 = (tg::randn({3, 2}, kF64) * 0.8).requires_grad_(), w2 = (tg::randn({1, 3}, kF64) * 0.8).requires_grad_();
  auto loss = [&](const ag::variable_list& p) {
    auto u = [&](const Tensor& t) { return tg::linear(tg::tanh(tg::linear(t, p[0])), p[1]); };
    Tensor r = ag::derivative_operator(u, x, {{{0, 0, 0}}, {{0, 1}, 0.5}}, /*create_graph=*/true);
    return r.square().mean();
  };
  auto res = ag::gradcheck(loss, {w1, w2});
  EXPECT_TRUE(res.ok) << res.message;
}

// jacobian and hessian in forward mode (one batched pass; forward over
// reverse) equal the reverse-mode ones, on a matrix input, with create_graph
// (d/dx of the Hessian of sum(w x^4) is 24 w x on the diagonal).
TEST(ForwardAD, JacobianAndHessianInForwardMode) {
  tg::manual_seed(13);
  Tensor w = tg::randn({2, 3}, kF64);
  auto f = [&](const Tensor& t) { return tg::tanh(tg::matmul(t, w.t())) * t.sum(); };  // [4, 2] -> [4, 2]
  auto g = [&](const Tensor& t) { return (tg::sin(t) * t).sum() + tg::logsumexp(t.flatten(), {0}); };
  Tensor x = tg::randn({4, 3}, kF64);
  Tensor jr = ag::jacobian(f, x), jf = ag::jacobian(f, x, false, ag::JacobianMode::Forward);
  ASSERT_EQ(jf.sizes(), (tg::IntList{4, 2, 4, 3}));
  EXPECT_LT(max_abs(jf - jr), 1e-12 * (1 + max_abs(jr)));
  Tensor hr = ag::hessian(g, x), hf = ag::hessian(g, x, false, ag::JacobianMode::Forward);
  ASSERT_EQ(hf.sizes(), (tg::IntList{4, 3, 4, 3}));
  EXPECT_LT(max_abs(hf - hr), 1e-12 * (1 + max_abs(hr)));
  EXPECT_FALSE(hf.requires_grad());
  Tensor xr = tg::randn({3}, kF64).requires_grad_();
  Tensor wq = tg::randn({3}, kF64);
  Tensor h =
      ag::hessian([&](const Tensor& t) { return (wq * t * t * t * t).sum(); }, xr, true, ag::JacobianMode::Forward);
  Tensor d = ag::grad({h.sum()}, {xr})[0];
  EXPECT_LT(max_abs(d - wq * xr.detach() * 24.0), 1e-12 * (1 + max_abs(wq * xr.detach() * 24.0)));
}

TEST(ForwardAD, WhatIsNotSupportedSaysSo) {
  Tensor x = tg::randn({3}, kF64);
  EXPECT_ERROR_CONTAINS(fwd::make_dual(x, x), "make_dual: no dual level is active");
  fwd::dual_level level;
  EXPECT_ERROR_CONTAINS(fwd::dual_level(), "a dual level is already active on this thread");
  EXPECT_ERROR_CONTAINS(fwd::make_dual(x, tg::randn({4}, kF64)),
                        "make_dual: the tangent (Float64 [4] on cpu) must "
                        "have the primal's shape");
  EXPECT_ERROR_CONTAINS(fwd::make_dual(Tensor(), x), "make_dual: primal and tangent must be defined");
  Tensor ints = tg::ones({3}, tg::TensorOptions().dtype(tg::kInt64));
  EXPECT_ERROR_CONTAINS(fwd::make_dual(ints, ints), "make_dual: the primal must be floating point, got Int64");
  Tensor d = fwd::make_dual(x, tg::ones({3}, kF64));
  EXPECT_ERROR_CONTAINS(NoJvp::apply(d),
                        "NoJvp: this custom Function has no forward-mode rule and an "
                        "input carries a tangent");
  EXPECT_ERROR_CONTAINS(BadJvp::apply(d),
                        "BadJvp: jvp's tangent 0 (Float64 [2] on cpu) must match output 0 "
                        "(Float64 [3] on cpu)");
  NoJvp::apply(x);  // no tangent: fine
  // The primal of unpack_dual carries no tangent; ops on it are plain.
  auto u = fwd::unpack_dual(d);
  EXPECT_TRUE(tg::equal(u.primal, x));
  EXPECT_FALSE(fwd::unpack_dual(u.primal * 2.0).tangent.defined());
  EXPECT_TRUE(tg::equal(u.tangent, tg::ones({3}, kF64)));
}

// An in-place op whose tangent could not reach every tensor sharing the
// memory is an error naming the op, never a silently wrong tangent.
TEST(ForwardAD, InPlaceOpsOnUntrackedViewsSaySo) {
  Tensor x = tg::randn({2}, kF64);
  Tensor c = tg::zeros({2}, kF64);
  Tensor outside = c.narrow(0, 0, 1);  // taken before the level: not tracked
  fwd::dual_level level;
  Tensor d = fwd::make_dual(x, tg::ones({2}, kF64));
  EXPECT_ERROR_CONTAINS(outside.copy_(d.narrow(0, 0, 1)),
                        "copy_: in-place operation in a forward-mode level on a tensor (Float64 [1]) that shares "
                        "memory with a tensor forward mode does not track");
  EXPECT_ERROR_CONTAINS(c.narrow(0, 1, 1).add_(d.narrow(0, 0, 1)), "use out-of-place ops");
  EXPECT_FALSE(fwd::unpack_dual(c).tangent.defined());
  // The whole tensor written in place keeps its own tangent right (the view
  // taken outside the level does not see it, as documented).
  c.copy_(d);
  EXPECT_EQ(tgtest::values(fwd::unpack_dual(c).tangent), (std::vector<double>{1, 1}));
  // Plain in-place ops (no tangent involved) stay allowed.
  outside.mul_(2.0);
  // An expanded view reaches a base element twice.
  Tensor b = tg::zeros({1}, kF64);
  EXPECT_ERROR_CONTAINS(b.expand({3}).mul_(fwd::make_dual(tg::ones({3}, kF64), tg::ones({3}, kF64))), "mul_:");
}

// The composite views (chunk, split, diagonal, diag) taken in a level of a
// base without a tangent are tracked like narrow: building an output in
// parts reaches the base's tangent.
TEST(ForwardAD, InPlaceOpsOnCompositeViewsReachTheBase) {
  Tensor x = tg::tensor({2.0, 3.0, 5.0}, {3}, kF64);
  fwd::dual_level level;
  Tensor d = fwd::make_dual(x, tg::tensor({1.0, 10.0, 100.0}, {3}, kF64));
  Tensor out = tg::zeros({6}, kF64);
  out.chunk(2)[1].copy_(d);
  EXPECT_EQ(tgtest::values(fwd::unpack_dual(out).tangent), (std::vector<double>{0, 0, 0, 1, 10, 100}));
  Tensor parts = tg::zeros({4}, kF64);
  parts.split(1, 0)[2].copy_(d.narrow(0, 1, 1));
  EXPECT_EQ(tgtest::values(fwd::unpack_dual(parts).tangent), (std::vector<double>{0, 0, 10, 0}));
  Tensor m = tg::ones({3, 3}, kF64);
  m.diagonal().mul_(d);  // m's diagonal is x: tangent d's
  EXPECT_EQ(tgtest::values(fwd::unpack_dual(m).tangent), (std::vector<double>{1, 0, 0, 0, 10, 0, 0, 0, 100}));
  Tensor m2 = tg::ones({3, 3}, kF64);
  tg::diag(m2).copy_(d);
  EXPECT_EQ(tgtest::values(fwd::unpack_dual(m2).tangent), (std::vector<double>{1, 0, 0, 0, 10, 0, 0, 0, 100}));
}

// An optimizer-like step inside a level: a parameter updated in place with a
// dual gradient while the loss (whose graph saved views of the parameter,
// made while the rules ran paused) is alive. The parameter is its whole
// storage: allowed, and its tangent is the step's.
TEST(ForwardAD, InPlaceUpdateOfAWholeTensorWhoseViewsARuleSavedIsAllowed) {
  tg::manual_seed(3);
  Tensor W1 = tg::randn({4, 3}, kF64).requires_grad_(), W2 = tg::randn({2, 4}, kF64).requires_grad_();
  Tensor xb = tg::randn({6, 3}, kF64), vb = tg::randn({6, 3}, kF64);
  fwd::dual_level level;
  Tensor xd = fwd::make_dual(xb, vb);
  Tensor loss = tg::linear(tg::tanh(tg::linear(xd, W1)), W2).pow(2).sum();
  auto g = tg::autograd::grad({loss}, {W1, W2});
  Tensor before = W2.detach().clone();
  Tensor step_tangent = fwd::unpack_dual(g[1]).tangent;
  ASSERT_TRUE(step_tangent.defined());
  {
    tg::NoGradGuard no_grad;
    W2.sub_(g[1] * 0.1);
  }
  EXPECT_LT(tg::abs(W2.detach() - (before - fwd::unpack_dual(g[1]).primal * 0.1)).amax().item<double>(), 1e-14);
  EXPECT_LT(tg::abs(fwd::unpack_dual(W2).tangent + step_tangent * 0.1).amax().item<double>(), 1e-14);
}

}  // namespace
