// Every differentiable op: float64 gradcheck and gradgradcheck against
// central differences, with broadcasting and non-contiguous inputs; values
// at non-differentiable points; third derivatives against closed forms.
#include <cmath>

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
Tensor leaf(const IntList& sizes, uint64_t seed, double lo = -1, double hi = 1,
            bool transposed = false) {
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

#define EXPECT_GRADS(fn, ...)                                               \
  do {                                                                      \
    variable_list in{__VA_ARGS__};                                          \
    auto r1 = gradcheck(fn, in);                                            \
    EXPECT_TRUE(r1.ok) << r1.message;                                       \
    auto r2 = gradgradcheck(fn, in);                                        \
    EXPECT_TRUE(r2.ok) << "gradgradcheck: " << r2.message;                  \
  } while (0)

using Fn = std::function<Tensor(const variable_list&)>;

TEST(AutogradOps, Unary) {
  struct Case {
    const char* name;
    Fn fn;
    double lo, hi;
  };
  std::vector<Case> cases = {
      {"neg", [](const variable_list& v) { return tg::neg(v[0]); }, -1, 1},
      {"exp", [](const variable_list& v) { return tg::exp(v[0]); }, -1, 1},
      {"log", [](const variable_list& v) { return tg::log(v[0]); }, 0.5, 2},
      {"sin", [](const variable_list& v) { return tg::sin(v[0]); }, -2, 2},
      {"cos", [](const variable_list& v) { return tg::cos(v[0]); }, -2, 2},
      {"tanh", [](const variable_list& v) { return tg::tanh(v[0]); }, -2, 2},
      {"sigmoid", [](const variable_list& v) { return tg::sigmoid(v[0]); }, -2, 2},
      {"relu", [](const variable_list& v) { return tg::relu(v[0]); }, 0.1, 1},
      {"relu_neg", [](const variable_list& v) { return tg::relu(v[0]); }, -1, -0.1},
      {"silu", [](const variable_list& v) { return tg::silu(v[0]); }, -2, 2},
      {"erf", [](const variable_list& v) { return tg::erf(v[0]); }, -2, 2},
      {"gelu", [](const variable_list& v) { return tg::gelu(v[0]); }, -2, 2},
      {"gelu_tanh", [](const variable_list& v) { return tg::gelu(v[0], "tanh"); }, -2, 2},
      {"softplus", [](const variable_list& v) { return tg::softplus(v[0], 2.0, 1.0); }, -1, 1},
      {"sqrt", [](const variable_list& v) { return tg::sqrt(v[0]); }, 0.5, 2},
      {"rsqrt", [](const variable_list& v) { return tg::rsqrt(v[0]); }, 0.5, 2},
      {"abs", [](const variable_list& v) { return tg::abs(v[0] - 0.05); }, 0.1, 1},
      {"abs_neg", [](const variable_list& v) { return tg::abs(v[0]); }, -1, -0.1},
      {"sign", [](const variable_list& v) { return tg::sign(v[0]) * v[0]; }, 0.1, 1},
      {"square", [](const variable_list& v) { return tg::square(v[0]); }, -1, 1},
      {"reciprocal", [](const variable_list& v) { return tg::reciprocal(v[0]); }, 0.5, 2},
      {"clamp_lo", [](const variable_list& v) { return tg::clamp(v[0], -0.31); }, -1, 1},
      {"clamp_hi", [](const variable_list& v) { return tg::clamp(v[0], std::nullopt, 0.27); }, -1, 1},
      {"clamp_both", [](const variable_list& v) { return tg::clamp(v[0], -0.31, 0.27); }, -1, 1},
      {"pow_scalar", [](const variable_list& v) { return tg::pow(v[0], 3.0); }, -1, 1},
      {"pow_scalar_frac", [](const variable_list& v) { return tg::pow(v[0], 0.5); }, 0.5, 2},
      {"pow_scalar_base", [](const variable_list& v) { return tg::pow(2.5, v[0]); }, -1, 1},
      {"add_scalar", [](const variable_list& v) { return v[0] + 2.0; }, -1, 1},
      {"sub_scalar", [](const variable_list& v) { return 2.0 - v[0]; }, -1, 1},
      {"mul_scalar", [](const variable_list& v) { return v[0] * 3.0; }, -1, 1},
      {"div_scalar", [](const variable_list& v) { return v[0] / 4.0; }, -1, 1},
      {"scalar_div", [](const variable_list& v) { return 2.0 / v[0]; }, 0.5, 2},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_GRADS(c.fn, leaf({3, 4}, 1, c.lo, c.hi));
    EXPECT_GRADS(c.fn, leaf({3, 4}, 2, c.lo, c.hi, /*transposed=*/true));
  }
}

TEST(AutogradOps, BinaryWithBroadcasting) {
  struct Case {
    const char* name;
    Fn fn;
    double lo, hi;
  };
  std::vector<Case> cases = {
      {"add", [](const variable_list& v) { return tg::add(v[0], v[1]); }, -1, 1},
      {"add_alpha", [](const variable_list& v) { return tg::add(v[0], v[1], 2.5); }, -1, 1},
      {"sub", [](const variable_list& v) { return tg::sub(v[0], v[1]); }, -1, 1},
      {"sub_alpha", [](const variable_list& v) { return tg::sub(v[0], v[1], 0.5); }, -1, 1},
      {"mul", [](const variable_list& v) { return tg::mul(v[0], v[1]); }, -1, 1},
      {"div", [](const variable_list& v) { return tg::div(v[0], v[1]); }, 0.5, 2},
      {"pow", [](const variable_list& v) { return tg::pow(v[0], v[1]); }, 0.5, 2},
      {"maximum", [](const variable_list& v) { return tg::maximum(v[0], v[1]); }, -1, 1},
      {"minimum", [](const variable_list& v) { return tg::minimum(v[0], v[1]); }, -1, 1},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_GRADS(c.fn, leaf({3, 4}, 3, c.lo, c.hi), leaf({3, 4}, 4, c.lo, c.hi, true));
    EXPECT_GRADS(c.fn, leaf({3, 1}, 5, c.lo, c.hi), leaf({4}, 6, c.lo, c.hi));
    EXPECT_GRADS(c.fn, leaf({2, 3, 4}, 7, c.lo, c.hi), leaf({}, 8, c.lo, c.hi));
  }
  Fn where_fn = [](const variable_list& v) { return tg::where(tg::gt(v[0], 0.0), v[0], v[1]); };
  EXPECT_GRADS(where_fn, leaf({3, 4}, 9), leaf({4}, 10));
  Fn where_scalar = [](const variable_list& v) { return tg::where(tg::gt(v[0], 0.0), v[0], 2.0); };
  EXPECT_GRADS(where_scalar, leaf({3, 4}, 11));
  Fn where_scalar2 = [](const variable_list& v) { return tg::where(tg::gt(v[0], 0.0), 2.0, v[0]); };
  EXPECT_GRADS(where_scalar2, leaf({3, 4}, 12));
}

TEST(AutogradOps, Reductions) {
  std::vector<std::pair<const char*, Fn>> cases = {
      {"sum", [](const variable_list& v) { return tg::sum(v[0]); }},
      {"sum_dim", [](const variable_list& v) { return tg::sum(v[0], {1}); }},
      {"sum_dims_keep", [](const variable_list& v) { return tg::sum(v[0], {0, -1}, true); }},
      {"mean", [](const variable_list& v) { return tg::mean(v[0]); }},
      {"mean_dim", [](const variable_list& v) { return tg::mean(v[0], {0}); }},
      {"amax", [](const variable_list& v) { return tg::amax(v[0]); }},
      {"amax_dim", [](const variable_list& v) { return tg::amax(v[0], {1}); }},
      {"amin_dim_keep", [](const variable_list& v) { return tg::amin(v[0], {0}, true); }},
      {"sum_to", [](const variable_list& v) { return tg::sum_to(v[0], {1, 4}); }},
  };
  for (const auto& [name, fn] : cases) {
    SCOPED_TRACE(name);
    EXPECT_GRADS(fn, leaf({3, 4}, 13));
    EXPECT_GRADS(fn, leaf({3, 4}, 14, -1, 1, true));
  }
  Fn sum3 = [](const variable_list& v) { return tg::sum(tg::square(v[0]), {0, 2}); };
  EXPECT_GRADS(sum3, leaf({2, 3, 4}, 15));
}

TEST(AutogradOps, LinearAlgebra) {
  Fn mm = [](const variable_list& v) { return tg::mm(v[0], v[1]); };
  EXPECT_GRADS(mm, leaf({3, 4}, 16), leaf({4, 2}, 17, -1, 1, true));
  Fn bmm = [](const variable_list& v) { return tg::bmm(v[0], v[1]); };
  EXPECT_GRADS(bmm, leaf({2, 3, 4}, 18), leaf({2, 4, 2}, 19));
  Fn matmul = [](const variable_list& v) { return tg::matmul(v[0], v[1]); };
  EXPECT_GRADS(matmul, leaf({4}, 20), leaf({4}, 21));
  EXPECT_GRADS(matmul, leaf({3, 4}, 22), leaf({4}, 23));
  EXPECT_GRADS(matmul, leaf({4}, 24), leaf({4, 3}, 25));
  EXPECT_GRADS(matmul, leaf({2, 3, 4}, 26), leaf({4, 2}, 27));
  EXPECT_GRADS(matmul, leaf({2, 1, 3, 4}, 28), leaf({3, 4, 2}, 29));
  EXPECT_GRADS(matmul, leaf({2, 3, 4}, 30), leaf({4}, 31));
  Fn linear = [](const variable_list& v) { return tg::linear(v[0], v[1], v[2]); };
  EXPECT_GRADS(linear, leaf({5, 3}, 32), leaf({2, 3}, 33), leaf({2}, 34));
  EXPECT_GRADS(linear, leaf({2, 5, 3}, 35), leaf({2, 3}, 36, -1, 1, true), leaf({2}, 37));
  Fn linear_nb = [](const variable_list& v) { return tg::linear(v[0], v[1]); };
  EXPECT_GRADS(linear_nb, leaf({3}, 38), leaf({2, 3}, 39));
  Fn mlp = [](const variable_list& v) {
    return tg::sum(tg::tanh(tg::linear(tg::silu(tg::linear(v[0], v[1], v[2])), v[3])));
  };
  EXPECT_GRADS(mlp, leaf({4, 2}, 40), leaf({3, 2}, 41), leaf({3}, 42), leaf({2, 3}, 43));
}

TEST(AutogradOps, JoiningAndIndexing) {
  Fn cat0 = [](const variable_list& v) { return tg::cat({v[0], v[1]}, 0); };
  EXPECT_GRADS(cat0, leaf({2, 3}, 44), leaf({1, 3}, 45));
  Fn cat1 = [](const variable_list& v) { return tg::cat({v[0], v[1]}, -1); };
  EXPECT_GRADS(cat1, leaf({2, 3}, 46, -1, 1, true), leaf({2, 1}, 47));
  Fn stack = [](const variable_list& v) { return tg::stack({v[0], v[1]}, 1); };
  EXPECT_GRADS(stack, leaf({2, 3}, 48), leaf({2, 3}, 49));
  Tensor idx = tg::tensor({2, 0, 2, 1}, {4}, tg::TensorOptions().dtype(tg::kInt64));
  Fn isel = [idx](const variable_list& v) { return tg::index_select(v[0], 1, idx); };
  EXPECT_GRADS(isel, leaf({2, 3}, 50));
  Fn isel0 = [idx](const variable_list& v) { return tg::index_select(v[0], 0, idx); };
  EXPECT_GRADS(isel0, leaf({3, 2}, 51, -1, 1, true));
  Tensor gidx = tg::tensor({0, 2, 1, 1, 0, 0}, {2, 3}, tg::TensorOptions().dtype(tg::kInt64));
  Fn gather = [gidx](const variable_list& v) { return tg::gather(v[0], 1, gidx); };
  EXPECT_GRADS(gather, leaf({2, 3}, 52));
  Fn scatter = [gidx](const variable_list& v) { return tg::scatter_add(v[0], 1, gidx, v[1]); };
  EXPECT_GRADS(scatter, leaf({2, 3}, 53), leaf({2, 3}, 54));
}

TEST(AutogradOps, ViewsAndConversions) {
  std::vector<std::pair<const char*, Fn>> cases = {
      {"view", [](const variable_list& v) { return v[0].contiguous().view({4, 3}) * 2.0; }},
      {"reshape", [](const variable_list& v) { return v[0].reshape({2, 6}); }},
      {"transpose", [](const variable_list& v) { return v[0].transpose(0, 1); }},
      {"t", [](const variable_list& v) { return v[0].t(); }},
      {"permute", [](const variable_list& v) { return v[0].unsqueeze(0).permute({2, 0, 1}); }},
      {"select", [](const variable_list& v) { return v[0].select(1, -1); }},
      {"slice", [](const variable_list& v) { return v[0].slice(1, 1, std::nullopt, 2); }},
      {"narrow", [](const variable_list& v) { return v[0].narrow(0, 1, 2); }},
      {"unsqueeze", [](const variable_list& v) { return v[0].unsqueeze(-1); }},
      {"squeeze", [](const variable_list& v) { return v[0].unsqueeze(1).squeeze(); }},
      {"squeeze_dim", [](const variable_list& v) { return v[0].unsqueeze(1).squeeze(1); }},
      {"expand", [](const variable_list& v) { return v[0].unsqueeze(0).expand({2, 3, 4}); }},
      {"flatten", [](const variable_list& v) { return v[0].flatten(); }},
      {"clone", [](const variable_list& v) { return v[0].clone(); }},
      {"contiguous", [](const variable_list& v) { return v[0].contiguous(); }},
      {"index", [](const variable_list& v) { return v[0][1]; }},
  };
  for (const auto& [name, fn] : cases) {
    SCOPED_TRACE(name);
    EXPECT_GRADS(fn, leaf({3, 4}, 55));
    EXPECT_GRADS(fn, leaf({3, 4}, 56, -1, 1, true));
  }
  // to(dtype) through float32 and back: finite differences need a step the
  // float32 rounding does not swamp.
  tg::autograd::GradcheckOptions coarse;
  coarse.eps = 1e-3;
  coarse.atol = 1e-3;
  Fn round_trip = [](const variable_list& v) { return v[0].to(tg::kFloat32).to(tg::kFloat64) * 2.0; };
  auto rt1 = gradcheck(round_trip, {leaf({3, 4}, 58)}, coarse);
  EXPECT_TRUE(rt1.ok) << rt1.message;
  auto rt2 = gradgradcheck(round_trip, {leaf({3, 4}, 59)}, coarse);
  EXPECT_TRUE(rt2.ok) << rt2.message;
  // to(dtype): the gradient comes back in the input's dtype.
  Tensor x = leaf({3}, 57);
  Tensor g = tg::autograd::grad({(x.to(tg::kFloat32) * 2.0f).sum()}, {x})[0];
  EXPECT_EQ(g.dtype(), tg::kFloat64);
  EXPECT_TRUE(tg::allclose(g, tg::full({3}, 2.0, kF64)));
}

TEST(AutogradOps, InPlace) {
  Fn fn = [](const variable_list& v) {
    Tensor h = v[0] * 1.0;
    h.mul_(v[1]);
    h.add_(v[0], 2.0);
    h.div_(v[1] + 3.0);
    h.sub_(v[0]);
    Tensor out = tg::zeros({3, 4}, kF64);
    out.copy_(h * h);
    return out;
  };
  EXPECT_GRADS(fn, leaf({3, 4}, 60), leaf({4}, 61));
}

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
  EXPECT_EQ(tg::autograd::grad({tg::amax(t)}, {t})[0].to_vector<double>(),
            (std::vector<double>{0.5, 0, 0.5, 0}));
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
    for (size_t i = 0; i < xs.size(); ++i) EXPECT_NEAR(got[i], closed(xs[i]), 1e-10) << xs[i];
  };
  check("tanh", [](const Tensor& t) { return tg::tanh(t); }, [](double v) {
    double t = std::tanh(v);
    return (1 - t * t) * (6 * t * t - 2);
  });
  check("sigmoid", [](const Tensor& t) { return tg::sigmoid(t); }, [](double v) {
    double s = 1 / (1 + std::exp(-v)), s1 = s * (1 - s);
    return s1 * (1 - 2 * s) * (1 - 2 * s) - 2 * s1 * s1;
  });
  check("silu", [](const Tensor& t) { return tg::silu(t); }, [](double v) {
    double s = 1 / (1 + std::exp(-v)), s1 = s * (1 - s);
    return 3 * s1 * (1 - 2 * s) + v * (s1 * (1 - 2 * s) * (1 - 2 * s) - 2 * s1 * s1);
  });
  check("exp(2x)", [](const Tensor& t) { return tg::exp(t * 2.0); },
        [](double v) { return 8 * std::exp(2 * v); });
  check("exp(sin x)", [](const Tensor& t) { return tg::exp(tg::sin(t)); }, [](double v) {
    double f = std::exp(std::sin(v)), c = std::cos(v);
    return f * c * (c * c - 3 * std::sin(v) - 1);
  });
  check("sin(x) * tanh(x)", [](const Tensor& t) { return tg::sin(t) * tg::tanh(t); },
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
    EXPECT_TRUE(tg::allclose(tg::activation_grad(tg::ones_like(x), x, c.act, 0), c.fn(x), 1e-14, 1e-14))
        << c.name;
    EXPECT_TRUE(tg::allclose(tg::activation_grad(tg::ones_like(x).to(tg::kFloat32), x.to(tg::kFloat32),
                                                 c.act, 2).to(tg::kFloat64),
                             tg::activation_grad(tg::ones_like(x), x, c.act, 2), 1e-5, 1e-6))
        << c.name << " float32";
  }
  try {
    tg::activation_grad(tg::ones({2}, kF64), tg::ones({2}, kF64), tg::Activation::Silu, -1);
    ADD_FAILURE() << "no error";
  } catch (const tg::Error& e) {
    EXPECT_NE(std::string(e.what()).find("activation_grad: order must be >= 0, got -1"),
              std::string::npos) << e.what();
  }
}

}  // namespace
