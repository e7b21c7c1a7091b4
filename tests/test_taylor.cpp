// Taylor mode (docs/AUTOGRAD.md "Taylor mode"): every op's Taylor
// coefficients to the fourth order against nested reverse-mode directional
// derivatives (f64), the second-order groups (mixed pairs, weights, sums)
// against reverse-mode mixed partials, closed forms, per-sample Hessians by
// Taylor mode against the reference rows for networks with residual
// connections, Fourier features, products of two networks and custom
// Functions (with a Taylor rule, and the error without one), the Laplacian
// of a 100-input function against its Hessian's trace, and the GPU against
// the CPU.
#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>

#include "autograd/ops/taylor.h"
#include "reference.h"

namespace {

using tg::Tensor;
namespace ag = tg::autograd;
namespace fwd = tg::autograd::forward_ad;

const auto kF64 = tg::TensorOptions().dtype(tg::kFloat64);
const tg::Device kGpu(tg::kCUDA, 0);
using Fn = std::function<Tensor(const Tensor&)>;

double factorial(int k) { return k <= 1 ? 1.0 : k * factorial(k - 1); }

void expect_near(const Tensor& got, const Tensor& want, const std::string& what, double tol = 1e-8) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  Tensor g = got.detach().to(tg::Device(tg::kCPU)), w = want.detach().to(tg::Device(tg::kCPU));
  const double scale = 1.0 + tg::abs(w).amax().item<double>();
  const double err = g.numel() ? tg::abs(g - w).amax().item<double>() : 0.0;
  EXPECT_LE(err, tol * scale) << what << ": max |got - want| = " << err;
}

// The coefficients c_1..c_K of fn at x along the rows of `dirs` ([k] + x's
// shape), by Taylor mode.
std::vector<Tensor> taylor(const Fn& fn, const Tensor& x, const Tensor& dirs, int order) {
  fwd::taylor_level level(order, dirs.size(0));
  std::vector<Tensor> c(static_cast<size_t>(order));
  c[0] = dirs;
  Tensor y = fn(fwd::make_jet(x, c));
  std::vector<Tensor> out = fwd::jet_coefficients(y);
  for (Tensor& t : out)
    if (!t.defined()) {
      tg::IntList s = y.sizes();
      s.insert(s.begin(), dirs.size(0));
      t = tg::zeros(s, y.options());
    }
  return out;
}

// D^k s [v_1, ..., v_k] of the scalar s(x) = sum(weights * fn(x)), by
// nested reverse mode (an independent path: gradients of gradients).
double reverse_directional(const Fn& fn, const Tensor& x, const Tensor& weights, const std::vector<Tensor>& vs) {
  Tensor xi = x.detach().requires_grad_();
  Tensor h = (fn(xi) * weights).sum();
  for (const Tensor& v : vs) {
    if (!h.requires_grad()) return 0.0;
    Tensor g = ag::grad({h}, {xi}, {}, true, true, true)[0];
    if (!g.defined()) return 0.0;
    h = (g * v).sum();
  }
  return h.item<double>();
}

struct Case {
  std::string name;
  Fn fn;
  double lo = 0.5, hi = 2.0;  // the input's range
  tg::IntList shape = {3, 4};
};

std::vector<Case> cases() {
  using namespace tg;
  Tensor w = randn({4, 5}, kF64), b = randn({5}, kF64);
  return {
      {"exp", [](const Tensor& x) { return exp(x); }},
      {"log", [](const Tensor& x) { return log(x); }},
      {"sin", [](const Tensor& x) { return sin(x); }},
      {"cos", [](const Tensor& x) { return cos(x); }},
      {"tan", [](const Tensor& x) { return tan(x); }, -1, 1},
      {"tanh", [](const Tensor& x) { return tanh(x); }, -2, 2},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, -2, 2},
      {"relu", [](const Tensor& x) { return relu(x); }, -2, 2},
      {"silu", [](const Tensor& x) { return silu(x); }, -2, 2},
      {"erf", [](const Tensor& x) { return erf(x); }, -2, 2},
      {"log1p", [](const Tensor& x) { return log1p(x); }},
      {"expm1", [](const Tensor& x) { return expm1(x); }},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }},
      {"abs", [](const Tensor& x) { return abs(x); }, -2, 2},
      {"sign", [](const Tensor& x) { return sign(x) * x; }, -2, 2},
      {"square", [](const Tensor& x) { return square(x); }, -2, 2},
      {"asin", [](const Tensor& x) { return asin(x); }, -0.8, 0.8},
      {"atan", [](const Tensor& x) { return atan(x); }, -2, 2},
      {"sinh", [](const Tensor& x) { return sinh(x); }, -2, 2},
      {"cosh", [](const Tensor& x) { return cosh(x); }, -2, 2},
      {"atanh", [](const Tensor& x) { return atanh(x); }, -0.8, 0.8},
      {"log2", [](const Tensor& x) { return log2(x); }},
      {"log10", [](const Tensor& x) { return log10(x); }},
      {"exp2", [](const Tensor& x) { return exp2(x); }, -1, 1},
      {"frac", [](const Tensor& x) { return frac(x); }, 0.1, 0.9},
      {"reciprocal", [](const Tensor& x) { return reciprocal(x); }},
      {"neg", [](const Tensor& x) { return neg(x); }},
      {"gelu", [](const Tensor& x) { return gelu(x); }, -2, 2},
      {"gelu_tanh", [](const Tensor& x) { return gelu(x, "tanh"); }, -2, 2},
      {"softplus", [](const Tensor& x) { return softplus(x, 2.0, 20.0); }, -2, 2},
      {"clamp", [](const Tensor& x) { return clamp(x, 0.8, 1.6) * x; }},
      {"pow_int", [](const Tensor& x) { return pow(x, 3); }, -2, 2},
      {"pow_real", [](const Tensor& x) { return pow(x, 2.5); }},
      {"pow_neg", [](const Tensor& x) { return pow(x, -1.5); }},
      {"pow_base", [](const Tensor& x) { return pow(Scalar(2.0), x); }},
      {"scalar_ops", [](const Tensor& x) { return (x + 1.5) * 2.0 - x / 3.0; }},
      {"mul", [](const Tensor& x) { return mul(x, exp(x)); }},
      {"mul_broadcast", [](const Tensor& x) { return mul(x, sin(x).sum({0})); }},
      {"div", [](const Tensor& x) { return div(sin(x), x); }},
      {"div_constant", [](const Tensor& x) { return div(x, full({4}, 3.0, kF64)); }},
      {"pow_tensor", [](const Tensor& x) { return pow(x, cos(x)); }},
      {"pow_tensor_exponent_constant", [](const Tensor& x) { return pow(x, full({4}, 2.5, kF64)); }},
      {"maximum", [](const Tensor& x) { return maximum(x, square(x) * 0.5) * x; }},
      {"minimum", [](const Tensor& x) { return minimum(x, square(x) * 0.5) * x; }},
      {"atan2", [](const Tensor& x) { return atan2(sin(x), x - 1.2) + atan2(x, square(x) * 0.3); }},
      {"hypot", [](const Tensor& x) { return hypot(x, sin(x)); }},
      {"fmod", [](const Tensor& x) { return fmod(square(x) * 3.0, x) * x; }},
      {"remainder", [](const Tensor& x) { return remainder(exp(x), x * 0.5 + 0.3) * x; }},
      {"where", [](const Tensor& x) { return where(gt(x, 1.2), square(x), sin(x)); }},
      {"mm", [](const Tensor& x) { return mm(x, x.t()); }},
      {"mm_constant", [w](const Tensor& x) { return mm(exp(x), w); }},
      {"bmm", [](const Tensor& x) { return bmm(x.unsqueeze(0), sin(x).t().unsqueeze(0)); }},
      {"matmul_batched",
       [](const Tensor& x) {
         return matmul(x.view({3, 1, 4}), x.view({3, 4, 1}));
       }},
      {"linear", [w, b](const Tensor& x) { return linear(tanh(x), w.t(), b); }},
      {"linear_both", [](const Tensor& x) { return linear(x, sin(x), x.sum({1})); }},
      {"dot", [](const Tensor& x) { return dot(x.view({12}), cos(x).view({12})); }},
      {"activation_grad", [](const Tensor& x) { return activation_grad(x, x, Activation::Tanh, 1); }, -2, 2},
      {"activation_grad_0", [](const Tensor& x) { return activation_grad(x, x, Activation::Relu, 0); }, -2, 2},
      {"activation_grad_silu2", [](const Tensor& x) { return activation_grad(sin(x), x, Activation::Silu, 2); }, -2, 2},
      {"activation_grad_gelu3", [](const Tensor& x) { return activation_grad(sin(x), x, Activation::Gelu, 3); }, -2, 2},
      {"softmax", [](const Tensor& x) { return softmax(x, 1); }, -2, 2},
      {"log_softmax", [](const Tensor& x) { return log_softmax(x, 0); }, -2, 2},
      {"logsumexp", [](const Tensor& x) { return logsumexp(x, {1}, false); }, -2, 2},
      {"norm", [](const Tensor& x) { return norm(x, 2.0, {1}, true); }},
      {"amax", [](const Tensor& x) { return amax(square(x), {1}, false); }},
      {"reductions", [](const Tensor& x) { return sum(square(x), {0}) + mean(exp(x), {1}, true).sum(); }},
      {"views",
       [](const Tensor& x) {
         return square(x.t().reshape({2, 6}).permute({1, 0})).expand({3, 6, 2});
       }},
      {"cat_stack",
       [](const Tensor& x) {
         return stack({cat({x, sin(x)}, 1), cat({square(x), x}, 1)}, 0);
       }},
      {"index",
       [](const Tensor& x) {
         Tensor idx = tensor({2, 0}, {2}, TensorOptions().dtype(kInt64));
         return index_select(square(x), 1, idx) *
                gather(x, 1, tensor({1, 3, 0, 2, 2, 1}, {3, 2}, TensorOptions().dtype(kInt64)));
       }},
      {"cumsum", [](const Tensor& x) { return cumsum(square(x), 1); }},
      {"composite", [](const Tensor& x) { return tanh(tanh(x) * sin(x)) / (x + 1.0); }, -0.5, 1},
  };
}

// A case's input (in its range) and k random directions [k] + its shape.
std::pair<Tensor, Tensor> sample(const Case& c, int64_t k) {
  Tensor x = tg::rand(c.shape, kF64) * (c.hi - c.lo) + c.lo;
  tg::IntList ds = c.shape;
  ds.insert(ds.begin(), k);
  return {x, tg::randn(ds, kF64)};
}

// Univariate coefficients of every op to the fourth order along two random
// directions, against nested reverse mode.
TEST(TaylorMode, EveryOpsCoefficientsMatchReverseMode) {
  tg::manual_seed(7);
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    auto [x, dirs] = sample(c, 2);
    Tensor weights = tg::randn(c.fn(x).sizes(), kF64);
    for (int K : {2, 4}) {  // order 2: the fused rule where it applies
      std::vector<Tensor> cf = taylor(c.fn, x, dirs, K);
      for (int64_t a = 0; a < 2; ++a)
        for (int k = 1; k <= K; ++k) {
          const double got = (cf[size_t(k - 1)].select(0, a) * weights).sum().item<double>() * factorial(k);
          const double want = reverse_directional(c.fn, x, weights, std::vector<Tensor>(size_t(k), dirs.select(0, a)));
          EXPECT_NEAR(got, want, 1e-8 * (1 + std::abs(want))) << "order " << k << " of " << K << ", direction " << a;
        }
    }
  }
}

// The structure probe is sound for every op: where a pass on an empty batch
// forms no second-order term, the op's second coefficients at a real input
// are exactly zero; and it does find the terms of the nonlinear ops.
TEST(TaylorMode, StructureProbeIsSoundForEveryOp) {
  tg::manual_seed(11);
  int zero = 0, nonzero = 0;
  std::vector<std::string> completed;
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    auto [x, dirs] = sample(c, 2);
    bool found = false, refused = false;
    {
      tg::autograd::ops_detail::StructureProbe probe;
      try {
        taylor(c.fn, x.narrow(0, 0, 0), dirs.narrow(1, 0, 0), 2);
      } catch (const tg::autograd::ops_detail::SecondOrderTerm&) {
      } catch (const tg::Error&) {
        refused = true;  // an op that wants a non-empty input: no conclusion
      }
      found = probe.found();
    }
    if (found) {
      ++nonzero;
      continue;
    }
    if (refused) continue;
    ++zero;
    completed.push_back(c.name);
    std::vector<Tensor> cf = taylor(c.fn, x, dirs, 2);
    EXPECT_EQ(tg::abs(cf[1]).amax().item<double>(), 0.0) << "the probe found no second-order term";
  }
  auto has = [&](const std::string& name) {
    return std::find(completed.begin(), completed.end(), name) != completed.end();
  };
  EXPECT_TRUE(has("relu"));
  EXPECT_TRUE(has("abs"));
  EXPECT_FALSE(has("exp"));
  EXPECT_FALSE(has("tanh"));
  EXPECT_GE(nonzero, 40);
  EXPECT_GE(zero, 5);
}

// A linear layer's tangent left pending under DeferTangents: one block read
// computes only that block (the slot stays pending), a full read or a
// consumer computes it all, every way equal to the eager rule; under grad
// mode it keeps its history; an in-place change of the weight before the
// read is refused, naming linear, and the library stays usable.
TEST(TaylorMode, DeferredLinearTangents) {
  tg::manual_seed(13);
  const int64_t B = 4, n = 3;
  Tensor x = tg::randn({B, n}, kF64), w = tg::randn({5, n}, kF64), dirs = tg::randn({n, B, n}, kF64);
  std::vector<std::vector<fwd::SecondOrderPair>> groups = {{{0, 1, 1.0}}, {{2, 2, 1.0}}};
  auto run = [&](bool defer, const std::function<void(const Tensor& y, const Tensor& want)>& check) {
    fwd::taylor_level level(n, groups);
    Tensor h = tg::tanh(fwd::make_jet(x, {dirs, {}}));
    Tensor want = fwd::unpack_dual(tg::linear(h, w)).tangent;  // the eager rule
    std::optional<fwd::detail::DeferTangents> d;
    if (defer) d.emplace();
    Tensor y = tg::linear(h, w);
    d.reset();
    check(y, want);
  };
  run(true, [&](const Tensor& y, const Tensor& want) {
    const fwd::TaylorLayout& l = *fwd::taylor_layout();
    Tensor c2 = fwd::detail::jet_block(y, 2);
    expect_near(c2, l.block(want, 2), "c_2 alone");
    EXPECT_TRUE(ag::impl::meta(y)->fw->pending != nullptr) << "reading c_2 formed c_1";
    expect_near(fwd::detail::jet_block(y, 1), l.block(want, 1), "c_1 alone");
    expect_near(fwd::unpack_dual(y).tangent, want, "the whole tangent");
    EXPECT_TRUE(ag::impl::meta(y)->fw->pending == nullptr);
  });
  run(true, [&](const Tensor& y, const Tensor& want) {  // a consumer reads it
    Tensor z = tg::sin(y);
    Tensor ref;
    {
      fwd::detail::Suspend pause;
      ref = want * tg::cos(y.detach());
    }
    expect_near(fwd::jet_coefficients(z)[0], fwd::taylor_layout()->block(ref, 1), "sin of a pending tangent");
  });
  run(true, [&](const Tensor& y, const Tensor&) {  // in place before the read
    {
      fwd::detail::Suspend pause;
      tg::NoGradGuard no_grad;
      w.add_(1.0);
    }
    EXPECT_ERROR_CONTAINS(fwd::unpack_dual(y), "linear: a tensor its Taylor-mode tangent reads");
    {
      fwd::detail::Suspend pause;
      tg::NoGradGuard no_grad;
      w.sub_(1.0);
    }
  });
  // Recorded: deferred under grad mode, read without it, still a function of w.
  Tensor wr = w.detach().requires_grad_();
  {
    fwd::taylor_level level(n, groups);
    Tensor h = tg::tanh(fwd::make_jet(x, {dirs, {}}));
    Tensor y;
    {
      fwd::detail::DeferTangents d;
      y = tg::linear(h, wr);
    }
    Tensor c2;
    {
      tg::NoGradGuard no_grad;
      c2 = fwd::detail::jet_block(y, 2);
    }
    EXPECT_TRUE(c2.requires_grad());
    Tensor g = ag::grad({c2.sum()}, {wr})[0];
    Tensor want = fwd::taylor_layout()->block(fwd::unpack_dual(tg::linear(h, wr)).tangent, 2);
    expect_near(g, ag::grad({want.sum()}, {wr})[0], "d c_2 / dw");
  }
  // laplacian / per_sample_hessian of a network ending in a linear layer:
  // its output's tangent is never computed in full (the entry points read
  // c_2 only, and the value without the tangent), and the results are right.
  {
    Tensor w1 = tg::randn({6, n}, kF64), w2 = tg::randn({2, 6}, kF64);
    Fn net = [&](const Tensor& z) { return tg::linear(tg::tanh(tg::linear(z, w1)), w2); };
    const int64_t before = fwd::detail::pending_tangents_resolved();
    Tensor lap = ag::laplacian(net, x);
    Tensor h = ag::per_sample_hessian(net, x, ag::HessianStrategy::Taylor);
    // Computed in full: only the first layer's, read by tanh (the structure
    // probe and the pass of each); never the output layer's.
    EXPECT_EQ(fwd::detail::pending_tangents_resolved() - before, 4);
    expect_near(h, ag::per_sample_hessian(net, x, ag::HessianStrategy::Rows), "Hessian");
    expect_near(lap, (h * tg::eye(n, kF64)).sum({2, 3}), "Laplacian = trace");
  }
  // Usable afterwards: the same run without deferral.
  run(false, [&](const Tensor& y, const Tensor& want) { expect_near(fwd::unpack_dual(y).tangent, want, "eager"); });
}

// Order 2 with second-order groups: mixed pairs, weights and sums.
TEST(TaylorMode, SecondOrderGroupsMatchMixedPartials) {
  tg::manual_seed(8);
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    auto [x, dirs] = sample(c, 3);
    // group 0: (0, 1); group 1: 0.5 (2, 2) - 2 (0, 2) + (1, 1); group 2: (1, 0) weight 3.
    std::vector<std::vector<fwd::SecondOrderPair>> groups = {
        {{0, 1, 1.0}}, {{2, 2, 0.5}, {0, 2, -2.0}, {1, 1, 1.0}}, {{1, 0, 3.0}}};
    Tensor y = c.fn(x);
    Tensor weights = tg::randn(y.sizes(), kF64);
    std::vector<Tensor> cf;
    {
      fwd::taylor_level level(3, groups);
      Tensor out = c.fn(fwd::make_jet(x, {dirs, Tensor()}));
      cf = fwd::jet_coefficients(out);
    }
    ASSERT_TRUE(cf[1].defined());
    ASSERT_EQ(cf[1].size(0), 3);
    for (size_t q = 0; q < groups.size(); ++q) {
      double want = 0;
      for (const auto& p : groups[q])
        want += p.weight / 2 * reverse_directional(c.fn, x, weights, {dirs.select(0, p.a), dirs.select(0, p.b)});
      const double got = (cf[1].select(0, int64_t(q)) * weights).sum().item<double>();
      EXPECT_NEAR(got, want, 1e-8 * (1 + std::abs(want))) << "group " << q;
    }
  }
}

// Closed forms: sin(x) e^y along (1, 1): c_k = e^y 2^(k/2) sin(x + k pi/4) / k!;
// tanh's derivatives; Rosenbrock's (a polynomial: c_5 and beyond vanish).
TEST(TaylorMode, ClosedForms) {
  Tensor p = tg::tensor({0.3, -0.7, 1.1, 0.4}, {2, 2}, kF64);  // rows (x, y)
  Fn se = [](const Tensor& z) { return tg::sin(z.select(1, 0)) * tg::exp(z.select(1, 1)); };
  std::vector<Tensor> c = taylor(se, p, tg::ones({1, 2, 2}, kF64), 6);
  for (int k = 1; k <= 6; ++k) {
    Tensor x = p.select(1, 0), y = p.select(1, 1);
    Tensor want = tg::exp(y) * std::pow(2.0, k / 2.0) * tg::sin(x + k * M_PI / 4) / factorial(k);
    expect_near(c[size_t(k - 1)].select(0, 0), want, "sin(x) e^y, c_" + std::to_string(k));
  }
  Tensor x = tg::tensor({-1.3, 0.2, 0.9}, {3}, kF64);
  std::vector<Tensor> t = taylor([](const Tensor& z) { return tg::tanh(z); }, x, tg::ones({1, 3}, kF64), 4);
  Tensor th = tg::tanh(x), s = 1.0 - th * th;
  expect_near(t[0].select(0, 0), s, "tanh'");
  expect_near(t[1].select(0, 0), -th * s, "tanh'' / 2");
  expect_near(t[2].select(0, 0), s * (3.0 * th * th - 1.0) * (2.0 / 6.0), "tanh''' / 6");
  expect_near(t[3].select(0, 0), th * s * (2.0 - 3.0 * th * th) * (8.0 / 24.0), "tanh'''' / 24");
  Fn rosen = [](const Tensor& z) {
    Tensor a = z.select(1, 0), b = z.select(1, 1);
    return tg::square(1.0 - a) + tg::square(b - tg::square(a)) * 100.0;
  };
  std::vector<Tensor> r = taylor(rosen, p, tg::tensor({1.0, 0.0, 1.0, 0.0}, {1, 2, 2}, kF64), 5);
  Tensor a = p.select(1, 0);
  expect_near(r[2].select(0, 0), a * (2400.0 / 6.0), "rosenbrock_xxx / 6");
  expect_near(r[3].select(0, 0), tg::full({2}, 100.0, kF64), "rosenbrock_xxxx / 24");
  expect_near(r[4].select(0, 0), tg::zeros({2}, kF64), "rosenbrock, c_5");
}

// In-place ops on views in a Taylor level write every coefficient into the
// base's (the coefficients are the stacked tangent): order 3, two
// directions, against the same function written out of place (Taylor mode)
// and against nested reverse mode on that.
TEST(TaylorMode, InPlaceOpsOnViewsCarryEveryCoefficient) {
  tg::manual_seed(12);
  const Tensor x = tg::rand({3, 4}, kF64) + 0.5;
  const Tensor dirs = tg::randn({2, 3, 4}, kF64);
  struct Pair {
    std::string name;
    Fn inplace, reference;
  };
  const std::vector<Pair> pairs = {
      {"narrow: mul_ and div_ by dual operands, then a square",
       [](const Tensor& z) {
         Tensor o = tg::sin(z) + 2.0;
         Tensor a = z.clone();
         Tensor row0 = a.select(0, 0);  // taken before
         a.narrow(0, 1, 2).mul_(o.narrow(0, 0, 2));
         a.narrow(0, 0, 1).div_(o.narrow(0, 2, 1));
         return tg::cat({(a * a).flatten(), row0 * 3.0});
       },
       [](const Tensor& z) {
         Tensor o = tg::sin(z) + 2.0;
         Tensor a = tg::cat({z.narrow(0, 0, 1) / o.narrow(0, 2, 1), z.narrow(0, 1, 2) * o.narrow(0, 0, 2)}, 0);
         return tg::cat({(a * a).flatten(), a.select(0, 0) * 3.0});
       }},
      {"transposed select copy_, strided slice add_ and mul_ by a scalar, then a cube",
       [](const Tensor& z) {
         Tensor o = z * z;
         Tensor a = z * 1.0;
         a.t().select(0, 1).copy_(o.select(1, 3));
         a.slice(1, 0, 4, 2).add_(o.slice(1, 1, 4, 2));
         a.narrow(1, 3, 1).mul_(5.0);
         return a * a * a;
       },
       [](const Tensor& z) {
         Tensor o = z * z;
         Tensor a = tg::stack(
             {z.select(1, 0) + o.select(1, 1), o.select(1, 3), z.select(1, 2) + o.select(1, 3), z.select(1, 3) * 5.0},
             1);
         return a * a * a;
       }},
      {"a base without coefficients",
       [](const Tensor& z) {
         Tensor c = tg::zeros({3, 4}, kF64);
         Tensor col = c.select(1, 1);  // taken before c has coefficients
         c.narrow(0, 0, 1).copy_(z.narrow(0, 0, 1) * z.narrow(0, 1, 1));
         c.select(1, 1).add_(tg::exp(z.select(1, 2)));
         return tg::cat({(c * c.sum()).flatten(), col * col});
       },
       [](const Tensor& z) {
         Tensor top = z.narrow(0, 0, 1) * z.narrow(0, 1, 1);  // [1, 4]
         Tensor c = tg::cat({top, tg::zeros({2, 4}, kF64)}, 0);
         Tensor add =
             tg::stack({tg::zeros({3}, kF64), tg::exp(z.select(1, 2)), tg::zeros({3}, kF64), tg::zeros({3}, kF64)}, 1);
         c = c + add;
         Tensor col = c.select(1, 1);
         return tg::cat({(c * c.sum()).flatten(), col * col});
       }},
  };
  for (const Pair& p : pairs) {
    SCOPED_TRACE(p.name);
    expect_near(p.inplace(x), p.reference(x), "the values");
    std::vector<Tensor> got = taylor(p.inplace, x, dirs, 3), want = taylor(p.reference, x, dirs, 3);
    for (size_t k = 0; k < 3; ++k)
      expect_near(got[k], want[k], "c_" + std::to_string(k + 1), 1e-12);
    const Tensor w = tg::randn(p.reference(x).sizes(), kF64);
    for (int64_t d = 0; d < 2; ++d) {
      const Tensor v = dirs.select(0, d);
      std::vector<Tensor> vs;
      for (int k = 1; k <= 3; ++k) {
        vs.push_back(v);
        const double rev = reverse_directional(p.reference, x, w, vs) / factorial(k);
        const double tay = (got[size_t(k - 1)].select(0, d) * w).sum().item<double>();
        EXPECT_NEAR(tay, rev, 1e-9 * (1.0 + std::abs(rev))) << "direction " << d << ", c_" << k;
      }
    }
  }
}

// A custom Function with a Taylor rule: cube(x) = x^3.
struct Cube : ag::Function<Cube> {
  static Tensor forward(ag::AutogradContext* ctx, const Tensor& x) {
    ctx->save_for_backward({x});
    ctx->saved_data["x"] = x;  // for taylor: saved variables exist only when recorded
    return x * x * x;
  }
  static ag::variable_list backward(ag::AutogradContext* ctx, ag::variable_list g) {
    Tensor x = ctx->get_saved_variables()[0];
    return {g[0] * x * x * 3.0};
  }
  static std::vector<ag::variable_list> taylor(ag::AutogradContext* ctx, std::vector<ag::variable_list> c) {
    Tensor x = std::any_cast<Tensor>(ctx->saved_data["x"]);
    Tensor c1 = c[0][0], c2 = c[1][0];
    // (x + c1 t + c2 t^2)^3 up to t^2: 3x^2 c1; 3x^2 c2 + 3x c1 c1.
    return {{c1 * (x * x * 3.0)}, {c2 * (x * x * 3.0) + fwd::taylor_cross(c1, c1) * (x * 3.0)}};
  }
};
struct CubeWithoutTaylor : ag::Function<CubeWithoutTaylor> {
  static Tensor forward(ag::AutogradContext*, const Tensor& x) { return x * x * x; }
  static ag::variable_list backward(ag::AutogradContext*, ag::variable_list g) { return g; }
  static ag::variable_list jvp(ag::AutogradContext*, ag::variable_list t) { return t; }
};

// Per-sample Hessians by Taylor mode equal the reference rows.
TEST(TaylorMode, PerSampleHessianMatchesRowsForGeneralNetworks) {
  tg::manual_seed(9);
  const int64_t B = 5, n = 3, d = 8;
  Tensor w1 = tg::randn({d, n}, kF64) * 0.5, b1 = tg::randn({d}, kF64) * 0.1;
  Tensor w2 = tg::randn({d, d}, kF64) * 0.3, w3 = tg::randn({2, d}, kF64) * 0.5;
  Tensor freq = tg::randn({n, 4}, kF64), wf = tg::randn({2, 8}, kF64) * 0.3;
  Tensor v1 = tg::randn({d, n}, kF64) * 0.5, v2 = tg::randn({1, d}, kF64) * 0.5;
  std::vector<std::pair<std::string, Fn>> fns = {
      {"residual MLP",
       [&](const Tensor& x) {
         Tensor h = tg::silu(tg::linear(x, w1, b1));
         h = h + tg::tanh(tg::linear(h, w2));  // residual block
         return tg::linear(h, w3);
       }},
      {"Fourier features",
       [&](const Tensor& x) {
         Tensor z = tg::matmul(x, freq);
         Tensor f = tg::cat({tg::sin(z), tg::cos(z)}, 1);
         return tg::linear(tg::tanh(f), wf);
       }},
      {"product of two networks",
       [&](const Tensor& x) {
         Tensor a = tg::linear(tg::tanh(tg::linear(x, w1, b1)), w3);
         Tensor b = tg::linear(tg::sigmoid(tg::linear(x, v1)), v2);
         return a * b;  // [B, 2] * [B, 1]
       }},
      {"custom Function", [&](const Tensor& x) { return tg::linear(Cube::apply(tg::linear(x, w1, b1)), w3); }},
      {"relu MLP", [&](const Tensor& x) { return tg::linear(tg::relu(tg::linear(x, w1, b1)), w3); }},
  };
  Tensor x = tg::randn({B, n}, kF64);
  for (auto& [name, fn] : fns) {
    SCOPED_TRACE(name);
    Tensor want = ag::per_sample_hessian(fn, x, ag::HessianStrategy::Rows);
    Tensor got = ag::per_sample_hessian(fn, x, ag::HessianStrategy::Taylor);
    expect_near(got, want, name);
  }
  // The relu MLP's Hessian is exactly zero (structural).
  Tensor relu_h = ag::per_sample_hessian(fns[4].second, x, ag::HessianStrategy::Taylor);
  EXPECT_EQ(tg::abs(relu_h).amax().item<double>(), 0.0);
  EXPECT_ERROR_CONTAINS(ag::per_sample_hessian([](const Tensor& z) { return CubeWithoutTaylor::apply(z); }, x,
                                               ag::HessianStrategy::Taylor),
                        "CubeWithoutTaylor: this custom Function has no Taylor-mode rule");
  // Plain forward mode still takes its jvp, and the library stays usable.
  {
    fwd::dual_level level;
    Tensor t = fwd::unpack_dual(CubeWithoutTaylor::apply(fwd::make_dual(x, tg::ones_like(x)))).tangent;
    expect_near(t, tg::ones_like(x), "jvp after the error");
  }
}

// With create_graph the Taylor Hessian is differentiable into the
// parameters: equal to the gradient of the reference's.
// A structurally zero Hessian (no rule forms a second-order term: relu,
// linear ops) costs one probe on an empty batch instead of the pass;
// anything that forms one (an activation after the relu, a product, a custom
// Function's rule, a second-order term fn itself swallowed) gets the pass, and
// every result equals the reference rows.
TEST(TaylorMode, StructurallyZeroHessiansSkipThePass) {
  tg::manual_seed(10);
  const int64_t B = 6, n = 3, d = 8;
  Tensor w1 = tg::randn({d, n}, kF64) * 0.5, b1 = tg::randn({d}, kF64) * 0.1;
  Tensor w2 = tg::randn({d, d}, kF64) * 0.3, w3 = tg::randn({2, d}, kF64) * 0.5;
  Tensor w4 = tg::randn({2, 7}, kF64) * 0.5;
  std::vector<int64_t> calls;  // the batch of every call of fn
  // The calls the strategy makes, without the row check's probe.
  struct NoRowCheck {
    NoRowCheck() { ag::set_check_rows_independent(false); }
    ~NoRowCheck() { ag::set_check_rows_independent(true); }
  } no_row_check;
  using Fn = std::function<Tensor(const Tensor&)>;
  auto counted = [&](Fn f) {
    return [&calls, f](const Tensor& x) {
      calls.push_back(x.size(0));
      return f(x);
    };
  };
  auto relu_mlp = [&](const Tensor& x) {
    Tensor h = tg::relu(tg::linear(x, w1, b1));
    h = tg::relu(tg::linear(h, w2)).narrow(1, 0, 6) * 2.0 - 1.0;  // views and scalar ops: linear too
    return tg::linear(tg::cat({h, tg::amax(h, {1}, true)}, 1), w4);
  };
  struct Case {
    std::string name;
    Fn fn;
    std::vector<int64_t> calls;  // expected
    bool zero;
  };
  std::vector<Case> cases = {
      {"relu MLP", relu_mlp, {0}, true},
      {"tanh after the relus", [&](const Tensor& x) { return tg::tanh(relu_mlp(x)); }, {0, B}, false},
      {"product of a relu MLP and x", [&](const Tensor& x) { return relu_mlp(x) * x.narrow(1, 0, 1); }, {0, B}, false},
      {"custom Function",
       [&](const Tensor& x) { return tg::linear(Cube::apply(tg::relu(tg::linear(x, w1))), w3); },
       {0, B},
       false},
      {"second-order term swallowed by fn",
       [&](const Tensor& x) {
         try {
           return tg::linear(tg::silu(tg::linear(x, w1)), w3);
         } catch (...) {
           return tg::linear(tg::relu(tg::linear(x, w1)), w3);
         }
       },
       {0, B},
       false},
      {"fn that refuses an empty batch",
       [&](const Tensor& x) {
         TG_CHECK(x.size(0) > 0, "test fn: wants samples");
         return relu_mlp(x);
       },
       {0, B},
       true},
  };
  Tensor x = tg::randn({B, n}, kF64);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Tensor want = ag::per_sample_hessian(c.fn, x, ag::HessianStrategy::Rows);
    calls.clear();
    Tensor got = ag::per_sample_hessian(counted(c.fn), x, ag::HessianStrategy::Taylor);
    EXPECT_EQ(calls, c.calls);
    ASSERT_EQ(got.sizes(), (tg::IntList{B, 2, n, n}));
    expect_near(got, want, c.name);
    EXPECT_EQ(tg::abs(got).amax().item<double>() == 0.0, c.zero);
  }
  // With create_graph the probe is recorded, and its zeros stay a function
  // of the parameters and of x: a loss on them backpropagates zeros there,
  // as the reference's pass does (tested below for the Laplacian and the
  // derivative operator too), and the pass is skipped.
  Tensor w = w1.clone().requires_grad_(), xg = x.clone().requires_grad_();
  Fn relu_w = [&](const Tensor& z) { return tg::linear(tg::relu(tg::linear(z, w, b1)), w3); };
  calls.clear();
  Tensor h = ag::per_sample_hessian(counted(relu_w), xg, ag::HessianStrategy::Taylor, /*create_graph=*/true);
  EXPECT_EQ(calls, (std::vector<int64_t>{0}));
  ASSERT_EQ(h.sizes(), (tg::IntList{B, 2, n, n}));
  EXPECT_EQ(tg::abs(h).amax().item<double>(), 0.0);
  ASSERT_TRUE(h.requires_grad());
  Tensor ref = ag::per_sample_hessian(relu_w, xg, ag::HessianStrategy::Rows, /*create_graph=*/true);
  // (The reference's gradient in x is unused, undefined: its second
  // derivatives carry no history of x; the probe's zeros give zeros.)
  for (int k = 0; k < 2; ++k) {
    SCOPED_TRACE(k == 0 ? "probe" : "reference");
    const Tensor& hh = k == 0 ? h : ref;
    std::vector<Tensor> g = ag::grad({(hh * hh + hh * 3.0).sum()}, {w, xg}, {}, false, false, true);
    for (size_t i = 0; i < 2; ++i) {
      if (k == 1 && i == 1 && !g[i].defined()) continue;
      ASSERT_TRUE(g[i].defined()) << "gradient " << i;
      EXPECT_EQ(g[i].sizes(), (i == 0 ? w : xg).sizes());
      EXPECT_EQ(tg::abs(g[i]).amax().item<double>(), 0.0) << "gradient " << i;
    }
  }
  // And a PINN-style loss: data misfit plus the squared Laplacian of a relu
  // network trains exactly as the data misfit alone.
  Tensor target = tg::randn({B, 2}, kF64);
  calls.clear();
  Tensor lap = ag::laplacian(counted(relu_w), xg, /*create_graph=*/true);
  EXPECT_EQ(calls, (std::vector<int64_t>{0}));
  ASSERT_EQ(lap.sizes(), (tg::IntList{B, 2}));
  EXPECT_TRUE(lap.requires_grad());
  Tensor with = ag::grad({(tg::square(relu_w(xg) - target)).sum() + tg::square(lap).sum()}, {w})[0];
  Tensor without = ag::grad({(tg::square(relu_w(xg) - target)).sum()}, {w})[0];
  expect_near(with, without, "data + Laplacian loss against the data loss", 0.0);
}

// The Laplacian and derivative operators of a structurally linear fn (relu
// networks) skip their passes after the probe, with and without
// create_graph: the zero terms drop out, the value and first derivatives
// are still computed, and every result equals the reference (reverse-mode
// rows); a fn with a second-order term gets the pass.
TEST(TaylorMode, StructurallyZeroOperatorsSkipThePass) {
  tg::manual_seed(12);
  const int64_t B = 5, n = 3, d = 7;
  Tensor w1 = tg::randn({d, n}, kF64) * 0.5, b1 = tg::randn({d}, kF64) * 0.1, w2 = tg::randn({2, d}, kF64) * 0.5;
  struct NoRowCheck {
    NoRowCheck() { ag::set_check_rows_independent(false); }
    ~NoRowCheck() { ag::set_check_rows_independent(true); }
  } no_row_check;
  std::vector<int64_t> calls;
  Fn relu_mlp = [&](const Tensor& x) {
    calls.push_back(x.size(0));
    return tg::linear(tg::relu(tg::linear(x, w1, b1)), w2);
  };
  Fn tanh_mlp = [&](const Tensor& x) {
    calls.push_back(x.size(0));
    return tg::linear(tg::tanh(tg::linear(x, w1, b1)), w2);
  };
  Tensor x = tg::randn({B, n}, kF64);
  // The references: first derivatives by reverse mode, second ones from the reference Hessian rows.
  auto jacobian_column = [&](const Fn& fn, int64_t dim) {
    Tensor xr = x.clone().requires_grad_();
    Tensor y = fn(xr);
    std::vector<Tensor> cols;
    for (int64_t i = 0; i < y.size(1); ++i)
      cols.push_back(ag::grad({y.select(1, i).sum()}, {xr}, {}, true)[0].select(1, dim));
    return tg::stack(cols, 1);
  };
  const std::vector<ag::Partial> mixed = {{{}, 0.5}, {{1}, 2.0}, {{0, 0}, 1.0}, {{0, 2}, -3.0}, {{1, 1, 1}, 0.25}};
  const std::vector<ag::Partial> second = {{{0, 0}, 1.0}, {{2, 1}, 2.0}, {{0, 1, 2}, 1.0}};
  for (bool create_graph : {false, true}) {
    SCOPED_TRACE(create_graph ? "create_graph" : "no graph");
    calls.clear();
    Tensor lap = ag::laplacian(relu_mlp, x, create_graph);
    EXPECT_EQ(calls, (std::vector<int64_t>{0}));
    expect_near(lap, tg::zeros({B, 2}, kF64), "relu Laplacian", 0.0);
    calls.clear();
    Tensor op2 = ag::derivative_operator(relu_mlp, x, second, create_graph);
    EXPECT_EQ(calls, (std::vector<int64_t>{0}));
    expect_near(op2, tg::zeros({B, 2}, kF64), "relu second- and third-order operator", 0.0);
    calls.clear();
    Tensor op = ag::derivative_operator(relu_mlp, x, mixed, create_graph);
    EXPECT_EQ(calls, (std::vector<int64_t>{0, B}));  // the probe, then one first-order pass
    calls.clear();
    Tensor want = relu_mlp(x) * 0.5 + jacobian_column(relu_mlp, 1) * 2.0;
    expect_near(op, want, "relu operator: value and first derivative kept, the rest zero");
    // A second-order term: the passes run and match the references.
    calls.clear();
    Tensor tl = ag::laplacian(tanh_mlp, x, create_graph);
    EXPECT_EQ(calls, (std::vector<int64_t>{0, B}));
    Tensor h = ag::per_sample_hessian(tanh_mlp, x, ag::HessianStrategy::Rows);
    expect_near(tl, h.diagonal(0, 2, 3).sum({2}), "tanh Laplacian");
    Tensor top = ag::derivative_operator(tanh_mlp, x, {{{0, 0}, 1.0}, {{0, 2}, -3.0}}, create_graph);
    expect_near(top, h.select(2, 0).select(2, 0) - h.select(2, 0).select(2, 2) * 3.0, "tanh operator");
  }
  // A structurally linear fn needs no row check for its second derivatives:
  // they vanish across rows too. One that mixes rows (centred over the
  // batch) gets zeros, exactly; with a nonlinearity the check still refuses
  // it, and so does a first-derivative term (whose value mixing rows would
  // corrupt).
  ag::set_check_rows_independent(true);
  Fn centred = [&](const Tensor& z) { return tg::linear(tg::relu(tg::linear(z - z.mean({0}, true), w1, b1)), w2); };
  expect_near(ag::per_sample_hessian(centred, x, ag::HessianStrategy::Taylor), tg::zeros({B, 2, n, n}, kF64),
              "centred relu network's Hessian", 0.0);
  expect_near(ag::laplacian(centred, x), tg::zeros({B, 2}, kF64), "centred relu network's Laplacian", 0.0);
  expect_near(ag::derivative_operator(centred, x, {{{0, 1}, 1.0}}), tg::zeros({B, 2}, kF64),
              "centred relu network's u_xy", 0.0);
  EXPECT_ERROR_CONTAINS(ag::derivative_operator(centred, x, {{{0}, 1.0}, {{0, 1}, 1.0}}), "fn mixes rows of the batch");
  EXPECT_ERROR_CONTAINS(ag::laplacian([&](const Tensor& z) { return tg::tanh(centred(z)); }, x),
                        "fn mixes rows of the batch");
}

TEST(TaylorMode, HessianLossBackpropagatesIntoParameters) {
  tg::manual_seed(10);
  Tensor w1 = (tg::randn({6, 2}, kF64) * 0.5).requires_grad_(), w2 = (tg::randn({1, 6}, kF64) * 0.5).requires_grad_();
  Fn f = [&](const Tensor& x) { return tg::linear(tg::tanh(tg::linear(x, w1)), w2); };
  Tensor x = tg::randn({4, 2}, kF64);
  auto grads = [&](ag::HessianStrategy s) {
    Tensor h = ag::per_sample_hessian(f, x, s, true);
    return ag::grad({tg::square(h).sum()}, {w1, w2});
  };
  std::vector<Tensor> want = grads(ag::HessianStrategy::Rows), got = grads(ag::HessianStrategy::Taylor);
  expect_near(got[0], want[0], "d/dw1");
  expect_near(got[1], want[1], "d/dw2");
}

// The fused order-2 rule's backward (each layout it covers: univariate,
// one diagonal group, one pair per group; derivatives computed in the kernel
// for the activations and tanh' = activation_grad order 1, given for exp) by
// gradcheck and gradgradcheck of the second coefficients into x and the
// parameters.
TEST(TaylorMode, FusedOrderTwoRuleGradchecks) {
  tg::manual_seed(13);
  Tensor x = (tg::randn({3, 2}, kF64)).requires_grad_();
  Tensor w = (tg::randn({4, 2}, kF64) * 0.7).requires_grad_(), v = tg::randn({4}, kF64).requires_grad_();
  Tensor dirs = tg::randn({2, 3, 2}, kF64);
  const std::vector<std::pair<std::string, std::function<Tensor(const Tensor&)>>> acts = {
      {"silu", [](const Tensor& z) { return tg::silu(z); }},
      {"tanh", [](const Tensor& z) { return tg::tanh(z); }},
      {"sigmoid", [](const Tensor& z) { return tg::sigmoid(z); }},
      {"tanh'", [](const Tensor& z) { return tg::activation_grad(tg::cos(z), z, tg::Activation::Tanh, 1); }},
      {"exp", [](const Tensor& z) { return tg::exp(z * 0.5); }}};
  for (const auto& [name, act] : acts)
    for (int kind = 0; kind < 3; ++kind) {
      SCOPED_TRACE(name + ", kind " + std::to_string(kind));
      ag::TensorsFn second = [&, act = act](const ag::variable_list& p) {
        std::optional<fwd::taylor_level> level;
        if (kind == 0) level.emplace(2, 2);
        else if (kind == 1)
          level.emplace(2, std::vector<std::vector<fwd::SecondOrderPair>>{{{0, 0, 1.0}, {1, 1, 1.0}}});
        else
          level.emplace(2, std::vector<std::vector<fwd::SecondOrderPair>>{{{0, 1, 1.0}}, {{1, 1, 1.0}}, {{0, 0, 1.0}}});
        Tensor y = act(tg::linear(fwd::make_jet(p[0], {dirs, Tensor()}), p[1])) * p[2];
        return ag::variable_list{fwd::jet_coefficients(y)[1]};
      };
      auto r = ag::gradcheck(second, {x, w, v});
      EXPECT_TRUE(r.ok) << r.message;
      auto rr = ag::gradgradcheck(second, {x, w, v});
      EXPECT_TRUE(rr.ok) << rr.message;
    }
  // Unrecorded (the backward kernels) against recorded (the composite).
  for (const auto& [name, act] : acts) {
    SCOPED_TRACE(name);
    auto grads = [&, act = act](bool create_graph) {
      Tensor xx = x.detach().requires_grad_(), ww = w.detach().requires_grad_();
      fwd::taylor_level level(2, std::vector<std::vector<fwd::SecondOrderPair>>{{{0, 0, 1.0}, {1, 1, 1.0}}});
      Tensor y = act(tg::linear(fwd::make_jet(xx, {dirs, Tensor()}), ww));
      Tensor c2 = fwd::jet_coefficients(y)[1];
      return ag::grad({(c2 * c2).sum()}, {xx, ww}, {}, std::nullopt, create_graph);
    };
    std::vector<Tensor> a = grads(false), b = grads(true);
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_TRUE(tg::allclose(a[i], b[i], 1e-12, 1e-12)) << "input " << i;
  }
}

// bf16 and f16 networks: the fused rule computes in float; the Hessian,
// the Laplacian and a weight gradient against float64 within half rounding.
TEST(TaylorMode, HalfPrecisionNetworks) {
  tg::manual_seed(14);
  Tensor w1 = tg::randn({8, 3}, kF64) * 0.5, w2 = tg::randn({2, 8}, kF64) * 0.5, x = tg::randn({5, 3}, kF64);
  auto net = [](const Tensor& a, const Tensor& b) {
    return [a, b](const Tensor& z) { return tg::linear(tg::tanh(tg::linear(z, a)), b); };
  };
  // References by reverse mode (the rows), in float64.
  auto trace = [](const Tensor& h) { return (h * tg::eye(3, kF64)).sum({2, 3}); };
  Tensor h64 = ag::per_sample_hessian(net(w1, w2), x, ag::HessianStrategy::Rows);
  Tensor l64 = trace(h64);
  for (tg::ScalarType t : {tg::kBFloat16, tg::kFloat16}) {
    SCOPED_TRACE(tg::to_string(t));
    Tensor a = w1.to(t), b = w2.to(t), xt = x.to(t);
    Tensor h = ag::per_sample_hessian(net(a, b), xt, ag::HessianStrategy::Taylor);
    EXPECT_EQ(h.dtype(), t);
    expect_near(h.to(tg::kFloat64), h64, "Hessian", 5e-2);
    expect_near(ag::laplacian(net(a, b), xt).to(tg::kFloat64), l64, "Laplacian", 5e-2);
    Tensor ar = a.detach().requires_grad_();
    Tensor g = ag::grad({ag::laplacian(net(ar, b), xt, true).sum()}, {ar})[0];
    Tensor w64 = w1.detach().requires_grad_();
    Tensor g64 =
        ag::grad({trace(ag::per_sample_hessian(net(w64, w2), x, ag::HessianStrategy::Rows, true)).sum()}, {w64})[0];
    expect_near(g.to(tg::kFloat64), g64, "d/dw of the Laplacian", 5e-2);
  }
}

// The Laplacian of a 100-input function equals the trace of its Hessian.
TEST(TaylorMode, LaplacianOfHundredInputsIsTheHessianTrace) {
  tg::manual_seed(11);
  const int64_t B = 3, n = 100;
  Tensor w1 = tg::randn({16, n}, kF64) * 0.1, w2 = tg::randn({2, 16}, kF64) * 0.3;
  Fn f = [&](const Tensor& x) { return tg::linear(tg::tanh(tg::linear(x, w1)), w2) * tg::sin(x.sum({1}, true)); };
  Tensor x = tg::randn({B, n}, kF64);
  Tensor h = ag::per_sample_hessian(f, x, ag::HessianStrategy::BatchedCotangents);  // [B, 2, n, n]
  Tensor trace = (h * tg::eye(n, kF64)).sum({2, 3});
  expect_near(ag::laplacian(f, x), trace, "laplacian");
}

// x with no input columns ([B, 0]): every per-sample entry point returns
// its empty or zero derivatives (PyTorch's functional Hessian of a function
// of no inputs is empty), differentiable into fn's parameters with
// create_graph (zero gradients), instead of an internal error.
TEST(TaylorMode, InputsWithoutColumnsGiveEmptyOrZeroDerivatives) {
  Tensor w = tg::tensor({1.5, -2.0}, {1, 2}, kF64).requires_grad_();
  Fn fn = [&](const Tensor& x) { return x.sum({1}, true) + w; };  // [B, 0] -> [B, 2]
  Tensor x = tg::zeros({3, 0}, kF64);
  for (bool cg : {false, true}) {
    Tensor lap = ag::laplacian(fn, x, cg);
    EXPECT_EQ(lap.sizes(), (tg::IntList{3, 2}));
    EXPECT_EQ(tgtest::values(lap), std::vector<double>(6, 0.0));
    for (auto s : {ag::HessianStrategy::Taylor, ag::HessianStrategy::Rows, ag::HessianStrategy::BatchedCotangents,
                   ag::HessianStrategy::ForwardOverReverse})
      EXPECT_EQ(ag::per_sample_hessian(fn, x, s, cg).sizes(), (tg::IntList{3, 2, 0, 0}));
    if (cg) {
      ASSERT_TRUE(lap.requires_grad());
      Tensor gw = ag::grad({lap.sum()}, {w})[0];
      EXPECT_EQ(tgtest::values(gw), std::vector<double>(2, 0.0));
    }
  }
  EXPECT_ERROR_CONTAINS(ag::laplacian([](const Tensor& t) { return t.sum(); }, x),
                        "laplacian: fn must map [B, n] to [B, m]");
  // Integer inputs and outputs are not differentiated: each entry point says so.
  const Tensor xi = tg::ones({3, 2}, tg::TensorOptions().dtype(tg::kInt64));
  EXPECT_ERROR_CONTAINS(ag::laplacian(fn, xi), "laplacian: x must be floating-point (or complex)");
  EXPECT_ERROR_CONTAINS(ag::per_sample_hessian(fn, xi), "per_sample_hessian: x must be floating-point (or complex)");
  Fn to_int = [](const Tensor& t) { return (t * t).to(tg::kInt64); };
  const Tensor xf = tg::ones({3, 2}, kF64);
  EXPECT_ERROR_CONTAINS(ag::laplacian(to_int, xf), "laplacian: fn must return a floating-point (or complex) tensor");
  EXPECT_ERROR_CONTAINS(ag::per_sample_hessian(to_int, xf, ag::HessianStrategy::Taylor),
                        "per_sample_hessian: fn must return a floating-point (or complex) tensor");
}

// A fn that differentiates inside (u's input gradient, as a PINN's residual
// does) cannot run in a pass that records nothing (create_graph false): the
// error names the entry point and the way out; with create_graph (x
// requiring grad) Taylor mode matches the rows.
TEST(TaylorMode, AFnThatDifferentiatesInsideSaysWhatTheTaylorPassNeeds) {
  tg::manual_seed(4);
  Tensor w1 = tg::randn({6, 3}, kF64), w2 = tg::randn({1, 6}, kF64);
  Fn energy = [&](const Tensor& x) {
    Tensor u = tg::linear(tg::tanh(tg::linear(x, w1)), w2);
    Tensor g = ag::grad({u.sum()}, {x}, {}, std::nullopt, /*create_graph=*/true)[0];
    return (g * g).sum({1}, true);
  };
  Tensor x = tg::randn({4, 3}, kF64);
  for (const char* what : {"laplacian", "per_sample_hessian"}) {
    SCOPED_TRACE(what);
    auto call = [&] {
      return std::string(what) == "laplacian" ? ag::laplacian(energy, x)
                                              : ag::per_sample_hessian(energy, x, ag::HessianStrategy::Taylor);
    };
    EXPECT_ERROR_CONTAINS(call(), std::string(what) + ": fn failed in its Taylor-mode pass");
    EXPECT_ERROR_CONTAINS(call(), "needs create_graph=true with x requiring grad");
  }
  Tensor xr = x.clone().requires_grad_();
  Tensor taylor = ag::per_sample_hessian(energy, xr, ag::HessianStrategy::Taylor, true);
  Tensor rows = ag::per_sample_hessian(energy, x, ag::HessianStrategy::Rows);
  expect_near(taylor, rows, "Taylor against the rows", 1e-10);
  // The reverse-mode strategies record fn, so they take it as it is.
  expect_near(ag::per_sample_hessian(energy, x, ag::HessianStrategy::BatchedCotangents), rows, "batched cotangents",
              1e-10);
  expect_near(ag::per_sample_hessian(energy, x, ag::HessianStrategy::ForwardOverReverse), rows, "forward over reverse",
              1e-10);
}

// Products of complex intermediates (z = view_as_complex of x's pairs): the
// second-order cross terms gather complex coefficient rows (through their
// real view), and the Taylor Hessian and Laplacian match the rows.
TEST(TaylorMode, ComplexIntermediatesProductsMatchTheRows) {
  tg::manual_seed(21);
  Tensor x = tg::randn({3, 4}, kF64);
  const std::vector<std::pair<const char*, Fn>> fns = {
      {"real(z z)",
       [](const Tensor& t) {
         Tensor z = t.reshape({t.size(0), 2, 2}).view_as_complex();
         return tg::real(z * z);
       }},
      {"view_as_real(z conj z)", [](const Tensor& t) {
         Tensor z = t.reshape({t.size(0), 2, 2}).view_as_complex();
         return tg::view_as_real(z * tg::conj(z)).reshape({t.size(0), 4});
       }}};
  for (const auto& [name, fn] : fns) {
    SCOPED_TRACE(name);
    Tensor rows = ag::per_sample_hessian(fn, x, ag::HessianStrategy::Rows);
    ASSERT_GT(tg::abs(rows).amax().item<double>(), 0.5);
    expect_near(ag::per_sample_hessian(fn, x, ag::HessianStrategy::Taylor), rows, "Taylor", 1e-10);
    expect_near(ag::laplacian(fn, x), rows.diagonal(0, 2, 3).sum({2}), "Laplacian", 1e-10);
  }
}

TEST(TaylorMode, MisuseSaysSo) {
  EXPECT_ERROR_CONTAINS(fwd::taylor_level(0, 2), "taylor_level: the order must be >= 1");
  EXPECT_ERROR_CONTAINS(fwd::taylor_level(2, {{{0, 3, 1.0}}}), "names a direction outside [0, 2)");
  Tensor x = tg::ones({2}, kF64);
  EXPECT_ERROR_CONTAINS(fwd::make_jet(x, {x}), "make_jet: no Taylor level is active");
  fwd::taylor_level level(2, 1);
  EXPECT_ERROR_CONTAINS(fwd::make_jet(x, {x.view({1, 2})}), "make_jet: the level has order 2, got 1");
  EXPECT_ERROR_CONTAINS(fwd::make_jet(x, {x, Tensor()}), "make_jet: coefficient 1");
  EXPECT_ERROR_CONTAINS(fwd::taylor_level(1, 1), "a dual level is already active");
}

TEST(TaylorModeGpu, MatchesCpu) {
  REQUIRE_GPU();
  tg::manual_seed(12);
  Tensor w1 = tg::randn({8, 3}, kF64), w2 = tg::randn({2, 8}, kF64);
  auto net = [](const Tensor& a, const Tensor& b) {
    return [a, b](const Tensor& x) { return tg::linear(tg::silu(tg::linear(x, a)) * tg::sin(x.sum({1}, true)), b); };
  };
  Tensor x = tg::randn({6, 3}, kF64);
  Tensor cpu = ag::per_sample_hessian(net(w1, w2), x, ag::HessianStrategy::Taylor);
  Tensor gpu = ag::per_sample_hessian(net(w1.to(kGpu), w2.to(kGpu)), x.to(kGpu), ag::HessianStrategy::Taylor);
  expect_near(gpu, cpu, "Taylor Hessian, GPU vs CPU");
  {                      // a relu network on the GPU: the probe on an empty batch, zeros, no pass
    struct NoRowCheck {  // the calls the strategy makes, without the row check's
      NoRowCheck() { ag::set_check_rows_independent(false); }
      ~NoRowCheck() { ag::set_check_rows_independent(true); }
    } no_row_check;
    std::vector<int64_t> calls;
    Tensor a = w1.to(kGpu), b = w2.to(kGpu);
    Tensor h = ag::per_sample_hessian(
        [&](const Tensor& z) {
          calls.push_back(z.size(0));
          return tg::linear(tg::relu(tg::linear(z, a)), b);
        },
        x.to(kGpu), ag::HessianStrategy::Taylor);
    EXPECT_EQ(calls, (std::vector<int64_t>{0}));
    EXPECT_TRUE(h.is_cuda());
    expect_near(h.to(tg::Device(tg::kCPU)), tg::zeros({6, 2, 3, 3}, kF64), "relu network's Hessian on the GPU");
    // With create_graph: the recorded probe's zeros, whose backward gives
    // zeros to the weights (on the GPU), and the same for the Laplacian.
    Tensor wa = a.detach().requires_grad_();
    Fn relu_w = [&](const Tensor& z) {
      calls.push_back(z.size(0));
      return tg::linear(tg::relu(tg::linear(z, wa)), b);
    };
    calls.clear();
    Tensor hg = ag::per_sample_hessian(relu_w, x.to(kGpu), ag::HessianStrategy::Taylor, /*create_graph=*/true);
    Tensor lg = ag::laplacian(relu_w, x.to(kGpu), /*create_graph=*/true);
    EXPECT_EQ(calls, (std::vector<int64_t>{0, 0}));
    ASSERT_TRUE(hg.requires_grad() && lg.requires_grad());
    Tensor g = ag::grad({(tg::square(hg) + hg).sum() + (tg::square(lg) + lg).sum()}, {wa})[0];
    EXPECT_TRUE(g.is_cuda());
    expect_near(g.to(tg::Device(tg::kCPU)), tg::zeros({8, 3}, kF64), "d/dw of the relu network's zeros", 0.0);
  }
  expect_near(ag::laplacian(net(w1.to(kGpu), w2.to(kGpu)), x.to(kGpu)), ag::laplacian(net(w1, w2), x), "Laplacian");
  // The weight gradient of a Hessian loss (the fused rule's backward kernel).
  auto weight_grad = [&](const Tensor& a, const Tensor& b, const Tensor& at) {
    Tensor wa = a.detach().requires_grad_(), wb = b.detach().requires_grad_();
    Tensor h = ag::per_sample_hessian(net(wa, wb), at, ag::HessianStrategy::Taylor, true);
    return ag::grad({tg::square(h).sum()}, {wa})[0];
  };
  expect_near(weight_grad(w1.to(kGpu), w2.to(kGpu), x.to(kGpu)), weight_grad(w1, w2, x), "d/dw of |H|^2");
  expect_near(ag::derivative_operator(net(w1.to(kGpu), w2.to(kGpu)), x.to(kGpu), {{{0, 1, 2}}, {{1, 1}, 0.5}}),
              ag::derivative_operator(net(w1, w2), x, {{{0, 1, 2}}, {{1, 1}, 0.5}}), "u_xyz + u_yy / 2");
  for (const Case& c : cases()) {  // every op's second- and fourth-order coefficients
    SCOPED_TRACE(c.name);
    if (c.name == "index" || c.name == "div_constant" || c.name == "pow_tensor_exponent_constant" ||
        c.name.rfind("mm_constant", 0) == 0 || c.name == "linear")
      continue;  // they close over CPU tensors
    auto [xc, dirs] = sample(c, 2);
    for (int K : {2, 4}) {  // order 2: the fused rules where they apply
      std::vector<Tensor> a = taylor(c.fn, xc, dirs, K), b = taylor(c.fn, xc.to(kGpu), dirs.to(kGpu), K);
      for (size_t k = 0; k < a.size(); ++k)
        expect_near(b[k], a[k], "c_" + std::to_string(k + 1), 1e-9);
    }
  }
}

// Per-sample operators of functions whose rows are not independent throw
// (they would silently return wrong per-row values: x - mean(x, 0) gave 0
// where the true per-row Laplacian term is not), for every strategy; an
// independent fn, one closing over per-row tensors (probed on the whole
// batch) and a batch of one pass; the switch turns the check off.
TEST(RowIndependence, MixingRowsIsAnErrorForEveryPerSampleOperator) {
  const auto f64 = tg::TensorOptions().dtype(tg::kFloat64);
  tg::manual_seed(31);
  const int64_t B = 6, n = 3;
  Tensor x = tg::randn({B, n}, f64);
  Tensor w = tg::randn({n, 2}, f64);
  Tensor per_row = tg::randn({B, 1}, f64);
  Tensor reverse = tg::tensor({5, 4, 3, 2, 1, 0}, {B}, tg::TensorOptions().dtype(tg::kInt64));
  auto head = [&](const Tensor& h) { return tg::tanh(tg::mm(h, w)); };  // [*, n] -> [*, 2], per row
  const std::vector<std::pair<std::string, Fn>> mixing = {
      {"mean over dim 0", [&](const Tensor& z) { return head(tg::square(z - z.mean({0}, true))); }},
      {"batch norm",
       [&](const Tensor& z) {
         Tensor c = z - z.mean({0}, true);
         return head(c / tg::sqrt(tg::square(c).mean({0}, true) + 1e-5));
       }},
      {"x^T x", [&](const Tensor& z) { return tg::sin(tg::mm(z.t(), z)); }},
      {"index_select along 0", [&](const Tensor& z) { return head(tg::square(z.index_select(0, reverse)) + z); }},
      {"cumsum over rows", [&](const Tensor& z) { return head(tg::square(z.cumsum(0))); }},
  };
  const std::vector<std::pair<std::string, std::function<Tensor(const Fn&)>>> operators = {
      {"laplacian", [&](const Fn& f) { return ag::laplacian(f, x); }},
      {"derivative_operator",
       [&](const Fn& f) {
         return ag::derivative_operator(f, x, {{{0, 0}, 1.0}, {{1}, 2.0}});
       }},
      {"per_sample_hessian Rows", [&](const Fn& f) { return ag::per_sample_hessian(f, x, ag::HessianStrategy::Rows); }},
      {"per_sample_hessian BatchedCotangents",
       [&](const Fn& f) { return ag::per_sample_hessian(f, x, ag::HessianStrategy::BatchedCotangents); }},
      {"per_sample_hessian ForwardOverReverse",
       [&](const Fn& f) { return ag::per_sample_hessian(f, x, ag::HessianStrategy::ForwardOverReverse); }},
      {"per_sample_hessian Taylor",
       [&](const Fn& f) { return ag::per_sample_hessian(f, x, ag::HessianStrategy::Taylor); }},
  };
  ASSERT_TRUE(ag::check_rows_independent());
  for (const auto& [oname, op] : operators) {
    for (const auto& [fname, f] : mixing) {
      try {
        (void)op(f);
        ADD_FAILURE() << oname << " of a fn with " << fname << ": no error";
      } catch (const tg::Error& e) {
        const std::string m = e.what();
        const std::string want = oname.substr(0, oname.find(' '));
        EXPECT_NE(m.find(want + ":"), std::string::npos) << m;
        // x^T x is [n, n]: the shape check or the row check, both name the op.
        if (fname != "x^T x") {
          EXPECT_NE(m.find("rows must be independent"), std::string::npos) << oname << ", " << fname << ": " << m;
        }
      }
    }
    // Independent rows: no error, and the same values with the check off.
    const Fn good = [&](const Tensor& z) { return head(tg::sin(z) * z); };
    const Fn closes_over_rows = [&](const Tensor& z) { return head(tg::sin(z) * per_row); };
    // (BatchedCotangents runs fn on stacked copies of x: per-row closures
    // cannot follow, with or without the check.)
    std::vector<Fn> fns = {good};
    if (oname.find("BatchedCotangents") == std::string::npos) fns.push_back(closes_over_rows);
    for (const Fn& f : fns) {
      Tensor on = op(f);
      ag::set_check_rows_independent(false);
      Tensor off = op(f);
      ag::set_check_rows_independent(true);
      EXPECT_TRUE(tg::equal(on, off)) << oname;
    }
    // The switch: a mixing fn passes unchecked (the caller's responsibility).
    ag::set_check_rows_independent(false);
    EXPECT_NO_THROW((void)op(mixing[0].second)) << oname;
    ag::set_check_rows_independent(true);
  }
  // One row: nothing can mix.
  EXPECT_NO_THROW((void)ag::laplacian(mixing[0].second, x.narrow(0, 0, 1)));
}

}  // namespace
