// Beyond the op table (test_op_table.cpp: every op's gradcheck and
// gradgradcheck): values at non-differentiable points, third derivatives
// against closed forms, activation_grad at every order.
#include <cmath>
#include <limits>

#include "reference.h"

namespace {

using tg::IntList;
using tg::Tensor;
using tg::autograd::gradcheck;
using tg::autograd::gradgradcheck;
using tg::autograd::variable_list;

const tg::TensorOptions kF64 = tg::TensorOptions().dtype(tg::kFloat64);

// A float64 leaf with values in [lo, hi); `transposed` gives a
// non-contiguous leaf of the same shape.
Tensor leaf(const IntList& sizes, uint64_t seed, double lo = -1, double hi = 1, bool transposed = false) {
  tg::manual_seed(seed);
  Tensor t;
  if (transposed && sizes.size() == 2) {
    t = (tg::rand({sizes[1], sizes[0]}, kF64) * (hi - lo) + lo).t();
  } else {
    t = tg::rand(sizes, kF64) * (hi - lo) + lo;
  }
  t.requires_grad_(true);
  return t;
}

#define EXPECT_GRADS(fn, ...)                              \
  do {                                                     \
    variable_list in{__VA_ARGS__};                         \
    auto r1 = gradcheck(fn, in);                           \
    EXPECT_TRUE(r1.ok) << r1.message;                      \
    auto r2 = gradgradcheck(fn, in);                       \
    EXPECT_TRUE(r2.ok) << "gradgradcheck: " << r2.message; \
  } while (0)

using Fn = std::function<Tensor(const variable_list&)>;

// Derivatives chosen at non-differentiable points (documented in
// autograd/ops/elementwise.cpp and docs/AUTOGRAD.md).
TEST(AutogradOps, NonDifferentiablePoints) {
  Tensor z = tg::tensor({0.0, 1.0, -1.0}, {3}, kF64).requires_grad_();
  auto d = [&](Tensor y) { return tg::autograd::grad({y.sum()}, {z})[0].to_vector<double>(); };
  EXPECT_EQ(d(tg::relu(z)), (std::vector<double>{0, 1, 0}));
  EXPECT_EQ(d(tg::abs(z)), (std::vector<double>{0, 1, -1}));
  EXPECT_EQ(d(tg::clamp(z, -1.0, 1.0)), (std::vector<double>{1, 1, 1}));  // bounds pass
  EXPECT_EQ(d(tg::clamp(z, 0.5)), (std::vector<double>{0, 1, 0}));
  Tensor w = tg::tensor({0.0, 2.0, -3.0}, {3}, kF64).requires_grad_();
  auto [gz, gw] = [&] {
    auto g = tg::autograd::grad({tg::maximum(z, w).sum()}, {z, w});
    return std::make_pair(g[0].to_vector<double>(), g[1].to_vector<double>());
  }();
  EXPECT_EQ(gz, (std::vector<double>{0.5, 0, 1}));  // tie at 0 splits evenly
  EXPECT_EQ(gw, (std::vector<double>{0.5, 1, 0}));
  Tensor t = tg::tensor({3.0, 1.0, 3.0, 2.0}, {4}, kF64).requires_grad_();
  EXPECT_EQ(tg::autograd::grad({tg::amax(t)}, {t})[0].to_vector<double>(), (std::vector<double>{0.5, 0, 0.5, 0}));
  // pow(0, b) in b: 0 where b >= 0 (0^b is constant there), -inf where b < 0,
  // for a number base as for a tensor one; the tangent and the second
  // derivative too (they were 0 * -inf = NaN for a number base).
  const double inf = std::numeric_limits<double>::infinity();
  Tensor b = tg::tensor({1.5, -2.0, 3.0, 0.0}, {4}, kF64).requires_grad_();
  const std::vector<double> want{0, -inf, 0, 0};
  EXPECT_EQ(tg::autograd::grad({tg::pow(0.0, b).sum()}, {b})[0].to_vector<double>(), want);
  EXPECT_EQ(tg::autograd::grad({tg::pow(tg::zeros({4}, kF64), b).sum()}, {b})[0].to_vector<double>(), want);
  // Its derivative is constant in b (0 or -inf), so the second derivative,
  // of the first taken with create_graph and a weight w, is 0: not NaN.
  Tensor wt = tg::ones({4}, kF64).requires_grad_();
  Tensor g1 = tg::autograd::grad({tg::pow(0.0, b)}, {b}, {wt}, std::nullopt, true)[0];
  EXPECT_EQ(g1.to_vector<double>(), want);
  auto g2 = tg::autograd::grad({tg::where(tg::ge(b.detach(), 0.0), g1, 0.0).sum()}, {b, wt}, {}, std::nullopt, false,
                               /*allow_unused=*/true);
  if (g2[0].defined()) {
    EXPECT_EQ(g2[0].to_vector<double>(), (std::vector<double>{0, 0, 0, 0}));
  }
  const std::vector<double> gwt = g2[1].to_vector<double>();  // d/dw of w * 0 where b >= 0
  EXPECT_EQ(gwt[0], 0.0);
  EXPECT_EQ(gwt[2], 0.0);
  EXPECT_EQ(gwt[3], 0.0);
  {
    namespace fwd = tg::autograd::forward_ad;
    fwd::dual_level level;
    Tensor t = fwd::unpack_dual(tg::pow(0.0, fwd::make_dual(b.detach(), tg::ones({4}, kF64)))).tangent;
    EXPECT_EQ(t.to_vector<double>(), want);
  }
  // Away from 0 the number base keeps its rule: d/db 2^b = 2^b ln 2.
  Tensor e = tg::tensor({0.5}, {1}, kF64).requires_grad_();
  EXPECT_NEAR(tg::autograd::grad({tg::pow(2.0, e).sum()}, {e})[0].item<double>(), std::sqrt(2.0) * std::log(2.0),
              1e-15);
}

// d^3/dx^3 by three nested grad(create_graph) calls; the function is
// elementwise, so grad of the sum gives the elementwise derivative.
std::vector<double> third(const std::function<Tensor(const Tensor&)>& f, const Tensor& x) {
  Tensor g1 = tg::autograd::grad({f(x).sum()}, {x}, {}, std::nullopt, true)[0];
  Tensor g2 = tg::autograd::grad({g1.sum()}, {x}, {}, std::nullopt, true)[0];
  Tensor g3 = tg::autograd::grad({g2.sum()}, {x})[0];
  return g3.to_vector<double>();
}

TEST(AutogradOps, ThirdDerivativesMatchClosedForms) {
  std::vector<double> xs{-1.3, -0.4, 0.2, 0.9, 1.7};
  Tensor x = tg::tensor(xs, {5}, kF64).requires_grad_();
  auto check = [&](const char* name, const std::function<Tensor(const Tensor&)>& f,
                   const std::function<double(double)>& closed) {
    SCOPED_TRACE(name);
    auto got = third(f, x);
    for (size_t i = 0; i < xs.size(); ++i)
      EXPECT_NEAR(got[i], closed(xs[i]), 1e-10) << xs[i];
  };
  check(
      "tanh", [](const Tensor& t) { return tg::tanh(t); },
      [](double v) {
        double t = std::tanh(v);
        return (1 - t * t) * (6 * t * t - 2);
      });
  check(
      "sigmoid", [](const Tensor& t) { return tg::sigmoid(t); },
      [](double v) {
        double s = 1 / (1 + std::exp(-v)), s1 = s * (1 - s);
        return s1 * (1 - 2 * s) * (1 - 2 * s) - 2 * s1 * s1;
      });
  check(
      "silu", [](const Tensor& t) { return tg::silu(t); },
      [](double v) {
        double s = 1 / (1 + std::exp(-v)), s1 = s * (1 - s);
        return 3 * s1 * (1 - 2 * s) + v * (s1 * (1 - 2 * s) * (1 - 2 * s) - 2 * s1 * s1);
      });
  check(
      "exp(2x)", [](const Tensor& t) { return tg::exp(t * 2.0); }, [](double v) { return 8 * std::exp(2 * v); });
  check(
      "exp(sin x)", [](const Tensor& t) { return tg::exp(tg::sin(t)); },
      [](double v) {
        double f = std::exp(std::sin(v)), c = std::cos(v);
        return f * c * (c * c - 3 * std::sin(v) - 1);
      });
  check(
      "sin(x) * tanh(x)", [](const Tensor& t) { return tg::sin(t) * tg::tanh(t); },
      [](double v) {
        double s = std::sin(v), c = std::cos(v), t = std::tanh(v);
        double t1 = 1 - t * t, t2 = -2 * t * t1, t3 = t1 * (6 * t * t - 2);
        return -c * t + 3 * -s * t1 + 3 * c * t2 + s * t3;
      });
}

// activation_grad: g * act^(k)(x) as one fused kernel for k <= 4, the
// engine's reentrant derivative above. gradcheck + gradgradcheck at every
// order 0..5 (so the analytic derivatives up to order 7 are checked against
// finite differences of the order below), order 0 against the activation,
// and the bad order.
TEST(AutogradOps, ActivationGradEveryOrder) {
  struct Case {
    const char* name;
    tg::Activation act;
    double lo, hi;
    Tensor (*fn)(const Tensor&);
  };
  std::vector<Case> cases = {
      {"silu", tg::Activation::Silu, -2, 2, [](const Tensor& t) { return tg::silu(t); }},
      {"sigmoid", tg::Activation::Sigmoid, -2, 2, [](const Tensor& t) { return tg::sigmoid(t); }},
      {"tanh", tg::Activation::Tanh, -1.5, 1.5, [](const Tensor& t) { return tg::tanh(t); }},
      {"relu", tg::Activation::Relu, 0.1, 1, [](const Tensor& t) { return tg::relu(t); }},
      {"gelu", tg::Activation::Gelu, -2.5, 2.5, [](const Tensor& t) { return tg::gelu(t); }},
  };
  for (const Case& c : cases) {
    for (int k = 0; k <= 5; ++k) {
      SCOPED_TRACE(std::string(c.name) + " order " + std::to_string(k));
      Fn fn = [&, k](const variable_list& v) { return tg::activation_grad(v[0], v[1], c.act, k); };
      EXPECT_GRADS(fn, leaf({2, 3}, 80 + uint64_t(k), -1, 1), leaf({2, 3}, 90 + uint64_t(k), c.lo, c.hi));
      // Broadcast g against x.
      EXPECT_GRADS(fn, leaf({3}, 70 + uint64_t(k), -1, 1), leaf({2, 3}, 60 + uint64_t(k), c.lo, c.hi, true));
    }
    Tensor x = leaf({4, 5}, 50, c.lo, c.hi).detach();
    EXPECT_TRUE(tg::allclose(tg::activation_grad(tg::ones_like(x), x, c.act, 0), c.fn(x), 1e-14, 1e-14)) << c.name;
    EXPECT_TRUE(tg::allclose(
        tg::activation_grad(tg::ones_like(x).to(tg::kFloat32), x.to(tg::kFloat32), c.act, 2).to(tg::kFloat64),
        tg::activation_grad(tg::ones_like(x), x, c.act, 2), 1e-5, 1e-6))
        << c.name << " float32";
  }
  // Gelu far in the tails (the adversary's finding): every order 0 where phi
  // underflows, no NaN from x^k overflowing against phi = 0, and no denormal
  // floor of a clamped exp times x^5 above the fused orders.
  for (auto dt : {tg::kFloat32, tg::kFloat64}) {
    Tensor far = tg::tensor({-1e20, -1e10, -1e7, -50.0, 50.0, 1e7, 1e10, 1e20}, {8}, kF64).to(dt);
    for (int k = 2; k <= 6; ++k) {
      Tensor d = tg::activation_grad(tg::ones_like(far), far, tg::Activation::Gelu, k);
      EXPECT_TRUE(tg::equal(d, tg::zeros_like(d))) << dt << " order " << k << ": " << d;
    }
    Tensor d1 = tg::activation_grad(tg::ones_like(far), far, tg::Activation::Gelu, 1).to(tg::kFloat64);
    EXPECT_TRUE(tg::equal(d1, tg::tensor({0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0}, {8}, kF64))) << dt << ": " << d1;
  }
  // relu and gelu have no complex meaning at any order (orders past the
  // fused ones were let through).
  for (auto act : {tg::Activation::Relu, tg::Activation::Gelu})
    for (int k : {1, 4, 5, 6}) {
      Tensor z = tg::complex_from(tg::ones({2}, kF64), tg::ones({2}, kF64));
      EXPECT_ERROR_CONTAINS(tg::activation_grad(z, z, act, k), "has no complex meaning");
    }
  try {
    tg::activation_grad(tg::ones({2}, kF64), tg::ones({2}, kF64), tg::Activation::Silu, -1);
    ADD_FAILURE() << "no error";
  } catch (const tg::Error& e) {
    EXPECT_NE(std::string(e.what()).find("activation_grad: order must be >= 0, got -1"), std::string::npos) << e.what();
  }
}

// Past the fused orders (the adversary's findings): relu keeps x an input
// with a zero gradient, as orders 2 to 4 do, and silu is 0 at +-inf (its x
// u terms vanish where the sigmoid saturates, not inf * 0 = NaN).
TEST(AutogradOps, ActivationGradPastTheFusedOrdersAtTheEdges) {
  for (int k : {5, 6}) {
    Tensor x = tg::tensor({-1.0, 0.5, 2.0}, {3}, kF64).requires_grad_();
    Tensor g = tg::tensor({0.3, -2.0, 1.5}, {3}, kF64).requires_grad_();
    Tensor y = tg::activation_grad(g, x, tg::Activation::Relu, k);
    EXPECT_TRUE(tg::equal(y.detach(), tg::zeros({3}, kF64))) << k;
    std::vector<Tensor> d = tg::autograd::grad({y.sum()}, {g, x}, {}, std::nullopt, /*create_graph=*/true);
    ASSERT_TRUE(d[1].defined()) << k;
    EXPECT_TRUE(tg::equal(d[0].detach(), tg::zeros({3}, kF64))) << k;
    EXPECT_TRUE(tg::equal(d[1].detach(), tg::zeros({3}, kF64))) << k;
  }
  const double inf = std::numeric_limits<double>::infinity();
  for (auto dt : {tg::kFloat64, tg::kFloat32}) {
    Tensor x = tg::tensor({inf, -inf, 1e3, -1e3}, {4}, kF64).to(dt).requires_grad_();
    Tensor d5 = tg::activation_grad(tg::ones_like(x), x.detach(), tg::Activation::Silu, 5);
    EXPECT_TRUE(tg::equal(d5, tg::zeros_like(d5))) << dt << ": " << d5;
    Tensor g = tg::ones_like(x).requires_grad_();
    Tensor y = tg::activation_grad(g, x, tg::Activation::Silu, 4);
    std::vector<Tensor> d = tg::autograd::grad({y.sum()}, {g, x});
    EXPECT_TRUE(tg::equal(d[0], tg::zeros_like(d[0]))) << dt << ": " << d[0];
    EXPECT_TRUE(tg::equal(d[1], tg::zeros_like(d[1]))) << dt << ": " << d[1];
  }
}

// The unrecorded backward of activation_grad (the last backward of a
// double backward) runs fused kernels on the CPU: both gradients in one
// pass (contiguous operands of one shape), or (g * g2) act^(k+1)(x) in one
// pass (broadcast or strided operands). Each against the recorded backward
// (mul, then activation_grad: the public ops), sizes across the kernels'
// blocks and chunks, zero-size too.
TEST(AutogradOps, ActivationGradFusedBackwardMatchesTheRecordedOne) {
  const tg::Activation acts[] = {tg::Activation::Silu, tg::Activation::Sigmoid, tg::Activation::Tanh,
                                 tg::Activation::Gelu, tg::Activation::Relu};
  for (auto dt : {tg::kFloat32, tg::kFloat64})
    for (tg::Activation act : acts)
      for (int k = 0; k <= 3; ++k)
        for (int layout = 0; layout < 4; ++layout) {
          // 0: contiguous (the pair kernel); 1: g broadcast; 2: x transposed;
          // 3: zero-size.
          const IntList shape = layout == 3 ? IntList{0, 7} : IntList{37, 301};
          Tensor x = (tg::rand(layout == 2 ? IntList{shape[1], shape[0]} : shape, kF64) * 4.0 - 2.0).to(dt);
          if (layout == 2) x = x.t();
          x.requires_grad_(true);
          Tensor g = (tg::rand(layout == 1 ? IntList{shape[1]} : shape, kF64) - 0.5).to(dt).requires_grad_(true);
          Tensor gg = (tg::rand(shape, kF64) - 0.5).to(dt);
          auto grads = [&](bool create_graph) {
            Tensor y = tg::activation_grad(g, x, act, k);
            return tg::autograd::grad({y}, {g, x}, {gg}, std::nullopt, create_graph);
          };
          std::vector<Tensor> fused = grads(false), recorded = grads(true);
          const double tol = dt == tg::kFloat32 ? 1e-6 : 1e-14;
          const std::string what = std::string(tg::to_string(dt)) + " act " + std::to_string(int(act)) + " order " +
                                   std::to_string(k) + " layout " + std::to_string(layout);
          for (size_t i = 0; i < 2; ++i) {
            ASSERT_EQ(fused[i].sizes(), recorded[i].sizes()) << what;
            EXPECT_EQ(fused[i].dtype(), dt) << what;
            EXPECT_TRUE(tg::allclose(fused[i], recorded[i].detach(), tol, tol)) << what << " input " << i;
          }
          if (layout == 0 && k == 1 && dt == tg::kFloat64 && act == tg::Activation::Tanh) {  // closed form
            Tensor t = tg::tanh(x.detach()), v = 1.0 - t * t;
            EXPECT_TRUE(tg::allclose(fused[0], gg * v, 1e-14, 1e-14));
            EXPECT_TRUE(tg::allclose(fused[1], gg * g.detach() * (-2.0) * t * v, 1e-14, 1e-14));
          }
        }
}

}  // namespace
