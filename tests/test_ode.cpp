// tg::ode::odeint: every method against closed forms (the exponential, the
// harmonic oscillator, a linear system), its convergence order and
// tolerance control, gradients by backpropagation and by the adjoint method
// against each other and against finite differences, second derivatives
// through the solver, and its refusals.
#include <gtest/gtest.h>

#include <cmath>

#include <tapegrad/tapegrad.h>

#include "reference.h"  // tgtest::error_message

namespace {

using tg::Tensor;
namespace ode = tg::ode;
namespace ag = tg::autograd;

const auto f64 = tg::TensorOptions().dtype(tg::kFloat64);

Tensor times(std::vector<double> v) { return tg::tensor(v).to(tg::kFloat64); }
// The same without rounding through float32 first.
Tensor exact_times(std::vector<double> v) { return tg::tensor(v, {}, tg::kFloat64); }

double max_abs(const Tensor& a) { return tg::amax(tg::abs(a)).item<double>(); }

// y' = -k y: y(t) = y0 exp(-k t).
TEST(Ode, EveryMethodSolvesTheExponential) {
  const double k = 1.3;
  Tensor y0 = tg::tensor({1.0, -2.0, 0.5}).to(tg::kFloat64);
  Tensor t = times({0.0, 0.25, 1.0, 2.0});
  auto f = [&](const Tensor&, const Tensor& y) { return y * -k; };
  Tensor exact = tg::exp(t.view({4, 1}) * -k) * y0.view({1, 3});
  for (auto m :
       {ode::Method::Euler, ode::Method::Midpoint, ode::Method::RK4, ode::Method::Dopri5, ode::Method::Tsit5}) {
    ode::OdeOptions o;
    o.method = m;
    o.steps_per_interval = 400;
    o.rtol = 1e-10;
    o.atol = 1e-12;
    Tensor y = ode::odeint(f, y0, t, o);
    ASSERT_EQ(y.sizes(), tg::IntList({4, 3}));
    // Dopri5 and Tsit5 interpolate with their own 4th-order interpolants
    // (Tsit5's was cubic Hermite, 1e-7 here).
    const double tol = m == ode::Method::Euler ? 1e-2 : m == ode::Method::Midpoint ? 1e-5 : 2e-9;
    EXPECT_LT(max_abs(y - exact), tol) << int(m);
    EXPECT_EQ(max_abs(y.select(0, 0) - y0), 0.0);  // the first entry is y0
  }
}

// Loose tolerances and many output times: several outputs fall inside one
// step and are interpolated together. Their values against the closed form,
// and the gradient in the interior times (which do not move the steps, so
// that central differences see the interpolant alone) against differences.
TEST(Ode, SeveralOutputsInsideOneAdaptiveStep) {
  const double k = 0.7;
  Tensor y0 = tg::tensor({1.0, -0.5}).to(tg::kFloat64);
  Tensor t0 = tg::linspace(0, 2, 41, f64);
  Tensor w = tg::linspace(-1, 1, 82, f64).view({41, 2});
  auto f = [&](const Tensor&, const Tensor& y) { return y * -k; };
  for (auto m : {ode::Method::Dopri5, ode::Method::Tsit5}) {
    ode::OdeOptions o;
    o.method = m;
    o.rtol = 1e-7;
    o.atol = 1e-9;
    ode::OdeStats st;
    Tensor t = t0.clone().requires_grad_();
    Tensor y = ode::odeint(f, y0, t, o, &st);
    ASSERT_LT(st.accepted, 20) << int(m) << ": fewer steps than outputs, so that steps hold several";
    Tensor exact = tg::exp(t0.view({41, 1}) * -k) * y0.view({1, 2});
    EXPECT_LT(max_abs(y.detach() - exact), m == ode::Method::Dopri5 ? 1e-6 : 1e-5) << int(m);
    Tensor g = ag::grad({tg::sum(y * w)}, {t})[0];
    const double eps = 1e-6;
    for (int64_t i : {1, 7, 20, 33, 39}) {
      Tensor p = t0.clone(), q = t0.clone();
      p.select(0, i).add_(eps);
      q.select(0, i).sub_(eps);
      ag::NoGradGuard ng;
      const double fd = (tg::sum(ode::odeint(f, y0, p, o) * w).item<double>() -
                         tg::sum(ode::odeint(f, y0, q, o) * w).item<double>()) /
                        (2 * eps);
      EXPECT_NEAR(g.select(0, i).item<double>(), fd, 1e-7) << int(m) << " t[" << i << "]";
      // ... and near the exact solution's derivative, -k y(t_i) . w_i
      const double exact_d = tg::sum(exact.select(0, i) * w.select(0, i)).item<double>() * -k;
      EXPECT_NEAR(g.select(0, i).item<double>(), exact_d, 1e-4) << int(m) << " t[" << i << "]";
    }
  }
}

// f that reads t: y' = cos(t), y = y0 + sin(t). Stage times come in chunks
// of 1024 steps; 2500 steps in one interval cross two chunk edges.
TEST(Ode, FixedStepStageTimesAcrossChunks) {
  Tensor y0 = tg::tensor({0.5, -1.0}).to(tg::kFloat64);
  Tensor t = times({0.0, 3.0, 4.5});
  auto f = [&](const Tensor& tt, const Tensor& y) { return tg::cos(tt) * tg::ones_like(y); };
  for (int64_t m : {2500, 7}) {
    ode::OdeOptions o;
    o.method = ode::Method::RK4;
    o.steps_per_interval = m;
    Tensor y = ode::odeint(f, y0, t, o);
    Tensor exact = tg::sin(t).view({3, 1}) + y0.view({1, 2});
    EXPECT_LT(max_abs(y - exact), m == 7 ? 1e-4 : 1e-12) << m;
  }
}

TEST(Ode, FixedStepMethodsConvergeAtTheirOrders) {
  auto f = [](const Tensor&, const Tensor& y) { return -y; };
  Tensor y0 = tg::ones({1}, f64), t = times({0.0, 1.0});
  const double exact = std::exp(-1.0);
  const std::pair<ode::Method, double> orders[] = {
      {ode::Method::Euler, 1}, {ode::Method::Midpoint, 2}, {ode::Method::RK4, 4}};
  for (auto [m, order] : orders) {
    ode::OdeOptions o;
    o.method = m;
    o.steps_per_interval = 16;
    const double e1 = std::fabs(ode::odeint(f, y0, t, o).select(0, 1).item<double>() - exact);
    o.steps_per_interval = 32;
    const double e2 = std::fabs(ode::odeint(f, y0, t, o).select(0, 1).item<double>() - exact);
    EXPECT_NEAR(std::log2(e1 / e2), order, 0.15) << int(m);
  }
  // step_size: the fewest equal steps of at most that size per interval.
  ode::OdeOptions o;
  o.method = ode::Method::Euler;
  o.step_size = 0.1;
  ode::OdeStats st;
  ode::odeint(f, y0, times({0.0, 1.0, 1.05}), o, &st);
  EXPECT_EQ(st.accepted, 10 + 1);
  EXPECT_EQ(st.evaluations, 11);
}

// x'' = -w^2 x as [x, v], a batch of initial states, forwards and backwards in time.
TEST(Ode, HarmonicOscillatorBatchedAndBackwardInTime) {
  const double w = 2.0;
  Tensor y0 = tg::tensor({1.0, 0.0, 0.0, 1.0, 0.5, -0.3}).to(tg::kFloat64).view({3, 2});
  auto f = [&](const Tensor&, const Tensor& y) { return tg::stack({y.select(1, 1), y.select(1, 0) * (-w * w)}, 1); };
  std::vector<double> tv{0.0, 0.7, 1.9, 3.0};
  Tensor t = times(tv);
  for (auto m : {ode::Method::RK4, ode::Method::Dopri5}) {
    ode::OdeOptions o;
    o.method = m;
    o.steps_per_interval = 200;
    o.rtol = 1e-10;
    o.atol = 1e-12;
    Tensor y = ode::odeint(f, y0, t, o);
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t b = 0; b < 3; ++b) {
        const double x0 = y0.select(0, b).select(0, 0).item<double>(), v0 = y0.select(0, b).select(0, 1).item<double>();
        const double x = x0 * std::cos(w * tv[size_t(i)]) + v0 / w * std::sin(w * tv[size_t(i)]);
        EXPECT_NEAR(y.select(0, i).select(0, b).select(0, 0).item<double>(), x, 1e-7) << int(m) << " " << i;
      }
    // From t = 3 back to 0 recovers y0.
    Tensor yb = ode::odeint(f, y.select(0, 3), times({3.0, 0.0}), o);
    EXPECT_LT(max_abs(yb.select(0, 1) - y0), 1e-6) << int(m);
  }
}

TEST(Ode, ToleranceControlsTheError) {
  auto f = [](const Tensor& t, const Tensor& y) { return tg::cos(t) * y; };  // y = exp(sin t)
  Tensor y0 = tg::ones({1}, f64), t = times({0.0, 5.0});
  const double exact = std::exp(std::sin(5.0));
  double prev_err = 1e9;
  int64_t prev_steps = 0;
  for (auto m : {ode::Method::Dopri5, ode::Method::Tsit5})
    for (double tol : {1e-3, 1e-6, 1e-9}) {
      if (tol == 1e-3) {
        prev_err = 1e9;
        prev_steps = 0;
      }
      ode::OdeOptions o;
      o.method = m;
      o.rtol = tol;
      o.atol = tol;
      ode::OdeStats st;
      const double err = std::fabs(ode::odeint(f, y0, t, o, &st).select(0, 1).item<double>() - exact);
      EXPECT_LT(err, 50 * tol) << tol;
      EXPECT_LT(err, prev_err);
      EXPECT_GT(st.accepted, prev_steps);
      EXPECT_EQ(st.evaluations, 1 + 1 + 6 * (st.accepted + st.rejected));  // k1, the trial step, 6 stages a step
      prev_err = err;
      prev_steps = st.accepted;
    }
}

// L = sum(c * y(t)) over every time for y' = A y: the gradients in y0, A and
// t by backpropagation, by the adjoint, and by central differences.
TEST(Ode, BackpropAndAdjointGradientsAgreeWithFiniteDifferences) {
  Tensor a0 = tg::tensor({-0.5, 1.0, -1.2, -0.3}).to(tg::kFloat64).view({2, 2});
  Tensor y00 = tg::tensor({1.0, 0.5}).to(tg::kFloat64), t0 = times({0.0, 0.6, 1.5});
  Tensor c = tg::tensor({0.3, -1.0, 0.7, 0.2, 1.1, -0.4}).to(tg::kFloat64).view({3, 2});
  auto loss = [&](const Tensor& A, const Tensor& y0, const Tensor& t, ode::Method m, ode::Gradient g) {
    ode::OdeOptions o;
    o.method = m;
    o.steps_per_interval = 60;
    o.rtol = 1e-10;
    o.atol = 1e-12;
    o.gradient = g;
    o.params = {A};
    auto f = [&](const Tensor&, const Tensor& y) { return tg::matmul(A, y.view({2, 1})).view({2}); };
    return tg::sum(ode::odeint(f, y0, t, o) * c);
  };
  for (auto m : {ode::Method::RK4, ode::Method::Dopri5, ode::Method::Tsit5}) {
    std::vector<std::vector<Tensor>> grads;
    for (auto g : {ode::Gradient::Backprop, ode::Gradient::Adjoint}) {
      Tensor A = a0.clone().requires_grad_(), y0 = y00.clone().requires_grad_(), t = t0.clone().requires_grad_();
      grads.push_back(ag::grad({loss(A, y0, t, m, g)}, {A, y0, t}));
    }
    // Central differences of the loss (no grad).
    const double eps = 1e-6;
    auto fd = [&](const Tensor& base, int which) {
      Tensor out = tg::zeros_like(base);
      for (int64_t i = 0; i < base.numel(); ++i) {
        Tensor p = base.clone(), q = base.clone();
        p.view({-1}).select(0, i).add_(eps);
        q.view({-1}).select(0, i).sub_(eps);
        auto L = [&](const Tensor& x) {
          ag::NoGradGuard ng;
          return loss(which == 0 ? x : a0, which == 1 ? x : y00, which == 2 ? x : t0, m, ode::Gradient::Backprop)
              .item<double>();
        };
        out.view({-1}).select(0, i).fill_((L(p) - L(q)) / (2 * eps));
      }
      return out;
    };
    const Tensor bases[3] = {a0, y00, t0};
    for (int w = 0; w < 3; ++w) {
      Tensor ref = fd(bases[w], w);
      EXPECT_LT(max_abs(grads[0][size_t(w)] - ref), 1e-6) << "backprop " << int(m) << " input " << w;
      EXPECT_LT(max_abs(grads[1][size_t(w)] - ref), 1e-6) << "adjoint " << int(m) << " input " << w;
    }
  }
}

// The adjoint of every method: its parameters' gradients are quadratures
// (only the stages the solution weighs are asked for: midpoint's first
// stage has weight 0), against backpropagation through the same method,
// with a frozen parameter between two live ones and outputs at several
// times (Euler is first order: 400 steps per interval leave ~4e-3); the
// adaptive ones over long intervals (several steps each: the
// last stage's quadratures carry over to the next step).
TEST(Ode, AdjointOfEveryMethodAgreesWithBackprop) {
  Tensor A = tg::tensor({-0.5, 1.0, -1.2, -0.3}).to(tg::kFloat64).view({2, 2}).requires_grad_();
  Tensor frozen = tg::ones({3}, f64);
  Tensor b = tg::tensor({0.2, -0.1}).to(tg::kFloat64).requires_grad_();
  Tensor y0 = tg::tensor({1.0, 0.5}).to(tg::kFloat64).requires_grad_();
  Tensor t = times({0.0, 0.7, 2.0, 4.0});
  auto f = [&](const Tensor&, const Tensor& y) { return tg::matmul(A, y.view({2, 1})).view({2}) + b; };
  const struct {
    ode::Method m;
    double tol;
  } methods[] = {{ode::Method::Euler, 1e-2},
                 {ode::Method::Midpoint, 1e-5},
                 {ode::Method::RK4, 1e-9},
                 {ode::Method::Dopri5, 1e-6},
                 {ode::Method::Tsit5, 1e-6}};
  for (const auto& [m, tol] : methods) {
    std::vector<std::vector<Tensor>> grads;
    for (auto g : {ode::Gradient::Backprop, ode::Gradient::Adjoint}) {
      ode::OdeOptions o;
      o.method = m;
      o.steps_per_interval = 400;
      o.rtol = 1e-9;
      o.atol = 1e-10;
      o.gradient = g;
      o.params = {A, frozen, b};
      ode::OdeStats st;
      Tensor ys = ode::odeint(f, y0, t, o, &st);
      if (m == ode::Method::Dopri5 || m == ode::Method::Tsit5) {
        EXPECT_GT(st.accepted, 12) << int(m);
      }
      grads.push_back(ag::grad({tg::sum(ys * ys)}, {A, b, y0}));
    }
    for (size_t w = 0; w < 3; ++w) {
      const double scale = max_abs(grads[0][w]);
      EXPECT_GT(scale, 1e-3) << int(m) << " input " << w;
      EXPECT_LT(max_abs(grads[1][w] - grads[0][w]), tol * scale) << int(m) << " input " << w;
    }
  }
}

// The adaptive solvers scale their stage weights by the step as a number;
// a time gradient reaches the last step through a term that is 0 in value,
// so the solution is bitwise the same whether t needs a gradient or not,
// and that gradient is right.
TEST(Ode, AdaptiveSolutionIsTheSameWhetherTimesNeedAGradient) {
  Tensor A = tg::tensor({-0.5, 1.0, -1.2, -0.3}).to(tg::kFloat64).view({2, 2});
  Tensor y0 = tg::tensor({1.0, 0.5}).to(tg::kFloat64);
  auto f = [&](const Tensor&, const Tensor& y) { return tg::matmul(A, y.view({2, 1})).view({2}); };
  for (auto m : {ode::Method::Dopri5, ode::Method::Tsit5}) {
    ode::OdeOptions o;
    o.method = m;
    o.rtol = 1e-8;
    o.atol = 1e-9;
    auto solve = [&](const Tensor& t) { return ode::odeint(f, y0, t, o); };
    Tensor plain = solve(times({0.0, 0.3, 2.5}));
    Tensor t = times({0.0, 0.3, 2.5}).requires_grad_();
    Tensor traced = solve(t);
    ASSERT_TRUE(traced.requires_grad());
    EXPECT_EQ(max_abs(plain - traced.detach()), 0.0) << int(m);
    // d/dT sum(y(T)) = sum(f(y(T))): the solver's own derivative in its
    // last step's size (finite differences in T would see the controller
    // change its steps).
    Tensor g = ag::grad({traced.select(0, 2).sum()}, {t})[0];
    const double exact = f(t, traced.select(0, 2).detach()).sum().item<double>();
    EXPECT_NEAR(g.select(0, 2).item<double>(), exact, 1e-7) << int(m);
  }
}

// Under NoGradGuard the adaptive solvers keep each step's stages as the
// rows of one buffer and form their sums, error estimates and dense output
// as products with it; the solution agrees with the elementwise form of a
// solve in grad mode to rounding (float64; in float32 both are within the
// tolerance of the exact solution), forwards and backwards in time, with
// several outputs inside one step, a batched transposed y0, float32 and an
// empty state.
TEST(Ode, NoGradAdaptiveSolveAgreesWithTheRecordedOne) {
  Tensor A = tg::tensor({-0.5, 1.0, -1.2, -0.3}).to(tg::kFloat64).view({2, 2});
  auto f = [&](const Tensor& t, const Tensor& y) { return tg::matmul(y, A.to(y.dtype())) + t * 0.1; };
  Tensor y0 = tg::tensor({1.0, 0.5, -0.3, 0.8, 0.2, -1.0}).to(tg::kFloat64).view({2, 3}).t();  // [3, 2], strided
  ASSERT_FALSE(y0.is_contiguous());
  for (auto m : {ode::Method::Dopri5, ode::Method::Tsit5}) {
    for (const auto& tv :
         {std::vector<double>{0.0, 0.05, 0.1, 0.15, 1.0, 1.02, 3.0}, std::vector<double>{2.0, 1.9, 1.0, 0.99, -0.5}}) {
      for (auto dt : {tg::kFloat64, tg::kFloat32}) {
        ode::OdeOptions o;
        o.method = m;
        o.rtol = dt == tg::kFloat64 ? 1e-7 : 1e-4;
        o.atol = dt == tg::kFloat64 ? 1e-8 : 1e-5;
        const Tensor y = y0.to(dt), t = times(tv).to(dt);
        ode::OdeStats recorded_st, plain_st;
        Tensor recorded = ode::odeint(f, y, t, o, &recorded_st);
        Tensor plain;
        {
          ag::NoGradGuard ng;
          plain = ode::odeint(f, y, t, o, &plain_st);
        }
        EXPECT_EQ(plain.sizes(), recorded.sizes());
        EXPECT_EQ(plain_st.accepted, recorded_st.accepted) << int(m);
        if (dt == tg::kFloat64) {  // the same steps: rounding apart
          EXPECT_LT(max_abs(plain - recorded), 1e-12) << int(m) << " from " << tv[0];
        } else {  // rounding moves the controller's steps: both within the tolerance of the exact solution
          ode::OdeOptions tight = o;
          tight.rtol = tight.atol = 1e-12;
          const Tensor exact = ode::odeint(f, y0, times(tv), tight);
          EXPECT_LT(max_abs(plain.to(tg::kFloat64) - exact), 1e-3) << int(m) << " from " << tv[0];
          EXPECT_LT(max_abs(recorded.to(tg::kFloat64) - exact), 1e-3) << int(m) << " from " << tv[0];
        }
        EXPECT_EQ(max_abs((plain.select(0, 0) - y).to(tg::kFloat64)), 0.0);
      }
    }
  }
  ag::NoGradGuard ng;
  Tensor empty =
      ode::odeint([](const Tensor&, const Tensor& y) { return -y; }, tg::zeros({0, 2}, f64), times({0.0, 0.5, 1.0}));
  EXPECT_EQ(empty.sizes(), (tg::IntList{3, 0, 2}));
}

// y' = -y^2: y(T) = y0 / (1 + y0 T); its second derivative in y0 through the
// solver's own operations (create_graph).
TEST(Ode, SecondDerivativesThroughTheSolver) {
  const double T = 1.5, v = 0.8;
  auto f = [](const Tensor&, const Tensor& y) { return -(y * y); };
  for (auto m : {ode::Method::RK4, ode::Method::Dopri5}) {
    ode::OdeOptions o;
    o.method = m;
    o.steps_per_interval = 200;
    o.rtol = 1e-11;
    o.atol = 1e-12;
    Tensor y0 = tg::full({1}, v, f64).requires_grad_();
    Tensor yT = ode::odeint(f, y0, times({0.0, T}), o).select(0, 1).sum();
    Tensor d1 = ag::grad({yT}, {y0}, {}, true, true)[0];
    Tensor d2 = ag::grad({d1.sum()}, {y0})[0];
    EXPECT_NEAR(d1.item<double>(), 1 / std::pow(1 + v * T, 2), 1e-8) << int(m);
    EXPECT_NEAR(d2.item<double>(), -2 * T / std::pow(1 + v * T, 3), 1e-6) << int(m);
  }
  // Outputs inside adaptive steps (dense output): second derivatives in y0,
  // and the mixed one in y0 and the output time, d/dy0 dy(t1)/dt1 =
  // d/dy0 (-y(t1)^2) = -2 v / (1 + v t1)^3.
  for (auto m : {ode::Method::Dopri5, ode::Method::Tsit5}) {
    ode::OdeOptions o;
    o.method = m;
    o.rtol = 1e-7;
    o.atol = 1e-9;
    Tensor y0 = tg::full({1}, v, f64).requires_grad_();
    // Steps of ~0.1: 0.31 and 0.312 cannot both end one.
    const std::vector<double> tv{0.0, 0.31, 0.312, 0.77, 1.5};
    Tensor t = times(tv).requires_grad_();
    Tensor ys = ode::odeint(f, y0, t, o);
    for (int64_t i = 1; i < 4; ++i) {
      const double ti = tv[size_t(i)];
      std::vector<Tensor> d1 = ag::grad({ys.select(0, i).sum()}, {y0, t}, {}, true, true);
      Tensor d2 = ag::grad({d1[0].sum()}, {y0}, {}, true)[0];
      Tensor dty = ag::grad({d1[1].select(0, i)}, {y0}, {}, true)[0];
      EXPECT_NEAR(d1[0].item<double>(), 1 / std::pow(1 + v * ti, 2), 1e-5) << int(m) << " t " << ti;
      EXPECT_NEAR(d2.item<double>(), -2 * ti / std::pow(1 + v * ti, 3), 1e-4) << int(m) << " t " << ti;
      EXPECT_NEAR(dty.item<double>(), -2 * v / std::pow(1 + v * ti, 3), 1e-4) << int(m) << " t " << ti;
    }
  }
  // The adjoint's gradient is once differentiable, and says so.
  ode::OdeOptions o;
  o.method = ode::Method::RK4;
  o.gradient = ode::Gradient::Adjoint;
  Tensor y0 = tg::full({1}, v, f64).requires_grad_();
  Tensor d1 = ag::grad({ode::odeint(f, y0, times({0.0, T}), o).sum()}, {y0}, {}, true, true)[0];
  EXPECT_THROW(ag::grad({d1.sum()}, {y0}), tg::Error);
}

// The adversary's cases: each refused with its reason, or now right.
TEST(Ode, ParamsDtypesAndScalesTheAdjointAndSolversHandle) {
  auto message = [](auto&& fn) { return tgtest::error_message(fn); };
  Tensor B = tg::tensor({-0.3, 1.0, -1.2, -0.1}).to(tg::kFloat64).view({2, 2}).requires_grad_();
  Tensor y0 = tg::tensor({1.0, 0.5}).to(tg::kFloat64);
  auto f = [&](const Tensor&, const Tensor& y) { return tg::matmul(B, y.view({2, 1})).view({2}); };
  ode::OdeOptions o;
  o.method = ode::Method::RK4;
  o.steps_per_interval = 20;
  o.gradient = ode::Gradient::Adjoint;
  // A parameter listed twice: refused (its gradient would count twice).
  o.params = {B, B};
  EXPECT_NE(message([&] { ode::odeint(f, y0, times({0.0, 1.0}), o); }).find("same tensor"), std::string::npos);
  {  // The adjoint is once-differentiable: a second derivative through it points to Backprop.
    ode::OdeOptions a = o;
    a.params = {B};
    Tensor g = ag::grad({tg::sum(ode::odeint(f, y0, times({0.0, 1.0}), a))}, {B}, {}, true, true)[0];
    const std::string m = message([&] { ag::grad({tg::sum(g)}, {B}); });
    EXPECT_NE(m.find("is once-differentiable"), std::string::npos) << m;
    EXPECT_NE(m.find("Gradient::Backprop"), std::string::npos) << m;
  }
  o.params = {B, B.view({4})};  // a view of it: the same memory, refused too
  EXPECT_NE(message([&] {
              ode::odeint(f, y0, times({0.0, 1.0}), o);
            }).find("overlapping views of one storage"),
            std::string::npos);
  {  // Allowed: disjoint slices of one flat buffer, a detached view, and any list under Backprop.
    Tensor flat = tg::tensor({-0.3, 1.0, -1.2, -0.1, 0.2, -0.4}).to(tg::kFloat64).requires_grad_();
    Tensor W = flat.narrow(0, 0, 4).view({2, 2}), c = flat.narrow(0, 4, 2);
    auto g2 = [&](const Tensor&, const Tensor& y) { return tg::matmul(W, y.view({2, 1})).view({2}) + c; };
    ode::OdeOptions a = o;
    a.params = {W, c, flat.detach()};
    Tensor ga = ag::grad({tg::sum(ode::odeint(g2, y0, times({0.0, 1.0}), a))}, {flat})[0];
    a.gradient = ode::Gradient::Backprop;
    a.params = {B, B, B.view({4})};  // ignored by Backprop
    Tensor gr = ag::grad({tg::sum(ode::odeint(g2, y0, times({0.0, 1.0}), a))}, {flat})[0];
    EXPECT_LT(max_abs(ga - gr), 1e-5);
  }
  {  // A tolerance no dtype resolves: the scaled norm overflows even in float64, and says so.
    ode::OdeOptions t;
    t.method = ode::Method::Dopri5;
    t.rtol = 0;
    t.atol = 1e-300;
    auto decay = [](const Tensor&, const Tensor& y) { return -y; };
    const std::string m = message([&] { ode::odeint(decay, tg::full({2}, 1e10), times({0.0, 1.0}), t); });
    EXPECT_NE(m.find("error norm overflows"), std::string::npos) << m;
    EXPECT_NE(m.find("raise atol"), std::string::npos) << m;
    // Ratios whose squares pass float32's range: the norm is taken in float64, and the solve runs.
    t.rtol = t.atol = 1e-3;
    auto fast = [](const Tensor&, const Tensor& y) { return tg::full_like(y, 1e20); };
    Tensor tt = tg::tensor({0.0, 1e-20}).to(tg::kFloat32);
    Tensor ys = ode::odeint(fast, tg::zeros({2}), tt, t);
    EXPECT_NEAR(ys.select(0, 1).select(0, 0).item<float>(), 1.0f, 1e-4);
  }
  // Parameters that need no gradient are skipped; the others' are right.
  Tensor frozen = tg::ones({3}, f64), ints = tg::ones({2}, tg::TensorOptions().dtype(tg::kInt64));
  o.params = {frozen, B, ints};
  Tensor gb = ag::grad({tg::sum(ode::odeint(f, y0, times({0.0, 1.0}), o))}, {B})[0];
  o.gradient = ode::Gradient::Backprop;
  Tensor gb_ref = ag::grad({tg::sum(ode::odeint(f, y0, times({0.0, 1.0}), o))}, {B})[0];
  EXPECT_LT(max_abs(gb - gb_ref), 1e-5);  // the adjoint solves its own ODE: RK4 error apart
  // A parameter changed in place before backward: reported stale.
  o.gradient = ode::Gradient::Adjoint;
  o.params = {B};
  Tensor y0g = y0.clone().requires_grad_();
  Tensor ys = ode::odeint(f, y0g, times({0.0, 1.0}), o);
  {
    ag::NoGradGuard ng;
    B.detach().mul_(2.0);
  }
  EXPECT_THROW(ag::grad({tg::sum(ys)}, {y0g}), tg::Error);
  // A step_size that needs more steps than anyone can take, a non-finite
  // single time, an unknown method: refused.
  ode::OdeOptions fixed;
  fixed.method = ode::Method::RK4;
  fixed.step_size = 1e-19;
  auto decay = [](const Tensor&, const Tensor& y) { return -y; };
  EXPECT_NE(message([&] {
              ode::odeint(decay, y0, times({0.0, 1.0}), fixed);
            }).find("larger step_size"),
            std::string::npos);
  EXPECT_NE(message([&] { ode::odeint(decay, y0, times({NAN})); }).find("not finite"), std::string::npos);
  ode::OdeOptions bad;
  bad.method = static_cast<ode::Method>(42);
  EXPECT_NE(message([&] { ode::odeint(decay, y0, times({0.0, 1.0}), bad); }).find("unknown method"), std::string::npos);
  // float32 y0 with float64 times: the state stays float32.
  Tensor y32 = tg::ones({2});
  Tensor r32 = ode::odeint(
      [](const Tensor& t, const Tensor& y) {
        EXPECT_EQ(y.dtype(), tg::kFloat32);
        EXPECT_EQ(t.dtype(), tg::kFloat32);
        return -y;
      },
      y32, times({0.0, 0.5, 1.0}));
  EXPECT_EQ(r32.dtype(), tg::kFloat32);
  EXPECT_NEAR(r32.select(0, 2).select(0, 0).item<float>(), std::exp(-1.0f), 1e-5);
  // Half precision with an adaptive method.
  ode::OdeOptions loose;
  loose.rtol = loose.atol = 1e-3;
  Tensor rh = ode::odeint(decay, tg::ones({2}).to(tg::kFloat16), times({0.0, 1.0}), loose);
  EXPECT_NEAR(rh.to(tg::kFloat32).select(0, 1).select(0, 0).item<float>(), std::exp(-1.0f), 5e-3);
  // An rtol below a 16-bit state's precision is refused (its rounding alone
  // exceeds it); rtol 0 with an atol is the user's absolute control.
  ode::OdeOptions fine;
  fine.rtol = 1e-5;
  EXPECT_NE(message([&] {
              ode::odeint(decay, tg::ones({2}).to(tg::kFloat16), times({0.0, 1.0}), fine);
            }).find("below Float16's precision"),
            std::string::npos);
  fine.rtol = 1e-3;  // above Float16's 2^-10, below BFloat16's 2^-7
  EXPECT_NE(message([&] {
              ode::odeint(decay, tg::ones({2}).to(tg::kBFloat16), times({0.0, 1.0}), fine);
            }).find("below BFloat16's precision"),
            std::string::npos);
  fine.rtol = 0;
  fine.atol = 1e-2;
  Tensor ra = ode::odeint(decay, tg::ones({2}).to(tg::kBFloat16), times({0.0, 1.0}), fine);
  EXPECT_NEAR(ra.to(tg::kFloat32).select(0, 1).select(0, 0).item<float>(), std::exp(-1.0f), 3e-2);
  // rtol 0 with an atol below the 16-bit state's resolution at its scale: refused as such an rtol is.
  fine.atol = 1e-9;
  for (auto dt : {tg::kFloat16, tg::kBFloat16}) {
    const std::string am = message([&] { ode::odeint(decay, tg::ones({2}).to(dt), times({0.0, 1.0}), fine); });
    EXPECT_NE(am.find("with rtol 0, atol 1e-09 is below"), std::string::npos) << am;
  }
  // A complex state is refused naming y0, not t.
  const std::string cm = message([&] {
    ode::odeint(decay, tg::ones({2}, tg::TensorOptions().dtype(tg::kComplex64)), times({0.0, 1.0}));
  });
  EXPECT_NE(cm.find("y0 (Complex64) must be real floating point"), std::string::npos) << cm;
  EXPECT_EQ(cm.find("and t"), std::string::npos) << cm;
  // Intervals far below 1e-14, at any time scale: the step floor is relative to t.
  auto scaled = [](const Tensor&, const Tensor& y) { return y * -1e20; };
  Tensor tiny = ode::odeint(scaled, tg::ones({1}, f64), times({0.0, 1e-20}));
  EXPECT_NEAR(tiny.select(0, 1).item<double>(), std::exp(-1.0), 1e-6);
}

// Forward mode through the solver's operations: the output's tangent along
// a direction of y0 against central differences; the adjoint, which has no
// tangent rule, refuses a tangent naming itself.
TEST(Ode, ForwardModeThroughTheSolver) {
  namespace fad = tg::autograd::forward_ad;
  auto f = [](const Tensor&, const Tensor& y) { return -(y * y * y) + tg::sin(y); };
  Tensor y0 = tg::tensor({0.7, -0.4}).to(tg::kFloat64), v = tg::tensor({0.3, 1.1}).to(tg::kFloat64);
  Tensor t = times({0.0, 0.5, 1.2});
  ode::OdeOptions o;
  o.method = ode::Method::RK4;
  o.steps_per_interval = 20;
  Tensor tangent;
  {
    fad::dual_level level;
    tangent = fad::unpack_dual(ode::odeint(f, fad::make_dual(y0, v), t, o)).tangent;
  }
  const double eps = 1e-6;
  Tensor fd = (ode::odeint(f, y0 + v * eps, t, o) - ode::odeint(f, y0 - v * eps, t, o)) / (2 * eps);
  ASSERT_TRUE(tangent.defined());
  EXPECT_LT(max_abs(tangent - fd), 1e-8);
  o.gradient = ode::Gradient::Adjoint;
  fad::dual_level level;
  const std::string m = tgtest::error_message([&] { ode::odeint(f, fad::make_dual(y0, v), t, o); });
  EXPECT_NE(m.find("OdeAdjoint"), std::string::npos) << m;
}

// The tangent along the times of a dual t that does not require grad: y' =
// -y / 2 from y(0) = 1, so dy(T)/dT = -exp(-T / 2) / 2 at the last time and
// the first row's tangent is that of y0 (none). Adaptive methods carry the
// last step's length through its weights (it used to reach them only where
// t required grad, giving no tangent).
TEST(Ode, ForwardModeTangentInTheTimes) {
  namespace fad = tg::autograd::forward_ad;
  auto f = [](const Tensor&, const Tensor& y) { return -0.5 * y; };
  for (auto m : {ode::Method::RK4, ode::Method::Dopri5, ode::Method::Tsit5}) {
    ode::OdeOptions o;
    o.method = m;
    o.steps_per_interval = 100;
    o.rtol = 1e-10;
    o.atol = 1e-12;
    fad::dual_level level;
    Tensor t = fad::make_dual(times({0.0, 0.5, 1.0}), times({0.0, 0.0, 1.0}));
    Tensor tangent = fad::unpack_dual(ode::odeint(f, tg::ones({1}, f64), t, o)).tangent;
    ASSERT_TRUE(tangent.defined()) << int(m);
    EXPECT_NEAR(tangent.select(0, 2).item<double>(), -0.5 * std::exp(-0.5), 1e-7) << int(m);
    EXPECT_NEAR(tangent.select(0, 1).item<double>(), 0.0, 1e-12) << int(m);
  }
}

// Times are checked again in y0's dtype, where the solver keeps them: past
// its range, or two that round to one value, are refused naming odeint.
// A span of a few denormals, where every weighted stage underflows, returns
// y0 (its error estimate is zero). The adjoint's backward solve chooses its
// own first step (first_step is the forward's). steps_per_interval is
// bounded as step_size's cut is.
TEST(Ode, TimesInY0sDtypeTinySpansAndTheBackwardsFirstStep) {
  auto f = [](const Tensor&, const Tensor& y) { return -y; };
  auto refused = [](auto&& fn, const char* what) {
    const std::string m = tgtest::error_message(fn);
    EXPECT_NE(m.find("odeint"), std::string::npos) << m;
    EXPECT_NE(m.find(what), std::string::npos) << m;
  };
  for (auto m : {ode::Method::RK4, ode::Method::Dopri5}) {
    ode::OdeOptions o;
    o.method = m;
    o.rtol = 1e-2;
    o.atol = 1e-3;
    refused(
        [&] {
          ode::odeint(f, tg::ones({1}, tg::TensorOptions().dtype(tg::kFloat16)), exact_times({0.0, 1e5}), o);
        },
        "not finite in y0's dtype Float16");
    refused([&] { ode::odeint(f, tg::ones({1}), exact_times({0.0, 1e39}), o); }, "not finite in y0's dtype Float32");
    refused(
        [&] {
          ode::odeint(f, tg::ones({1}), exact_times({1.0, 1.0 + 1e-10, 2.0}), o);
        },
        "not strictly monotonic in y0's dtype Float32");
  }
  Tensor y0 = tg::tensor({1.0, 2.0}).to(tg::kFloat64);
  for (auto m : {ode::Method::Dopri5, ode::Method::Tsit5}) {
    ode::OdeOptions o;
    o.method = m;
    Tensor ys = ode::odeint(f, y0, exact_times({0.0, 5e-324}), o);
    EXPECT_EQ(max_abs(ys.select(0, 1) - y0), 0.0) << int(m);
  }
  ode::OdeOptions o;
  o.method = ode::Method::RK4;
  o.steps_per_interval = int64_t(1e12) + 1;
  refused([&] { ode::odeint(f, y0, exact_times({0.0, 1.0}), o); }, "steps_per_interval");
  // first_step 1e-16 on [0, 10]: the forward solve takes it; backwards from
  // t = 10 it would not move (10 - 1e-16 == 10).
  Tensor a = tg::full({}, 0.5, f64).requires_grad_();
  auto g = [&](const Tensor&, const Tensor& y) { return -a * y; };
  o = ode::OdeOptions();
  o.first_step = 1e-16;
  o.rtol = 1e-10;
  o.atol = 1e-12;
  o.params = {a};
  std::vector<double> grads;
  for (auto mode : {ode::Gradient::Backprop, ode::Gradient::Adjoint}) {
    o.gradient = mode;
    Tensor ys = ode::odeint(g, y0, exact_times({0.0, 10.0}), o);
    grads.push_back(ag::grad({tg::sum(ys.select(0, 1))}, {a})[0].item<double>());
  }
  const double exact = -10.0 * std::exp(-5.0) * 3.0;  // d/da of 3 exp(-10 a) at a = 0.5
  EXPECT_NEAR(grads[0], exact, 1e-7);
  EXPECT_NEAR(grads[1], exact, 1e-7);
}

// The adjoint's params: views of one buffer that share no element, also
// interleaved ones (a matrix's columns, whose extents overlap), are accepted
// with the backprop gradients; views sharing an element are refused.
TEST(Ode, AdjointParamsMayInterleaveButNotShare) {
  Tensor M = tg::tensor({0.3, -0.2, 0.1, 0.4}, {2, 2}).to(tg::kFloat64).requires_grad_();
  Tensor c0 = M.select(1, 0), c1 = M.select(1, 1);
  auto f = [&](const Tensor&, const Tensor& y) { return -(c0 * y) + c1 * tg::sin(y); };
  Tensor y0 = tg::tensor({0.5, -1.0}).to(tg::kFloat64);
  ode::OdeOptions o;
  o.rtol = 1e-10;
  o.atol = 1e-12;
  std::vector<Tensor> grads;
  for (auto mode : {ode::Gradient::Backprop, ode::Gradient::Adjoint}) {
    o.gradient = mode;
    o.params = {c0, c1};
    Tensor ys = ode::odeint(f, y0, times({0.0, 1.0, 2.0}), o);
    grads.push_back(ag::grad({tg::sum(ys * ys)}, {M})[0]);
  }
  EXPECT_GT(max_abs(grads[0]), 1e-3);
  EXPECT_LT(max_abs(grads[1] - grads[0]), 1e-7);
  o.params = {M.select(1, 0), M.select(0, 0)};  // share M[0][0]
  const std::string m = tgtest::error_message([&] { ode::odeint(f, y0, times({0.0, 1.0}), o); });
  EXPECT_NE(m.find("overlapping"), std::string::npos) << m;
}

// A complex parameter gets the adjoint's gradient too (as backprop's; it
// was left out as not floating), and max_steps bounds each interval's
// backward solve, as torchdiffeq's, whose errors say they are the backward's.
TEST(Ode, AdjointTakesComplexParamsAndCountsStepsPerInterval) {
  const Tensor z = tg::view_as_complex(tg::tensor({0.3, -0.4}, {1, 2}).to(tg::kFloat64)).squeeze().clone();
  z.requires_grad_();
  auto f = [&](const Tensor&, const Tensor& y) {
    const Tensor r = tg::view_as_real(z.view({1}));
    return -(y * r.select(1, 0)) + tg::sin(y) * r.select(1, 1);
  };
  const Tensor y0 = tg::tensor({1.0, 0.5}).to(tg::kFloat64);
  ode::OdeOptions o;
  o.rtol = 1e-10;
  o.atol = 1e-12;
  o.params = {z};
  for (auto method : {ode::Method::Dopri5, ode::Method::Tsit5}) {
    o.method = method;
    std::vector<Tensor> g;
    for (auto mode : {ode::Gradient::Backprop, ode::Gradient::Adjoint}) {
      o.gradient = mode;
      Tensor ys = ode::odeint(f, y0, times({0.0, 0.5, 1.0}), o);
      g.push_back(ag::grad({tg::sum(ys * ys)}, {z})[0]);
      ASSERT_TRUE(g.back().defined());
      ASSERT_EQ(g.back().dtype(), tg::kComplex128);
    }
    const Tensor d = tg::view_as_real((g[1] - g[0]).view({1}));
    EXPECT_GT(max_abs(tg::view_as_real(g[0].view({1}))), 1e-2);
    EXPECT_LT(max_abs(d), 1e-7) << "adjoint " << tg::view_as_real(g[1].view({1}));
  }
  // A fast oscillator over 40 outputs: the backward's intervals need far
  // fewer steps each than the forward's whole solve, which sets max_steps.
  const Tensor k = tg::full({}, 1.0, f64).requires_grad_();
  auto osc = [&](const Tensor&, const Tensor& y) {
    return tg::stack({y.select(0, 1) * (10 * k), -(y.select(0, 0) * (10 * k))}, 0);
  };
  ode::OdeOptions a;
  a.rtol = 1e-8;
  a.atol = 1e-10;
  a.gradient = ode::Gradient::Adjoint;
  a.params = {k};
  const Tensor t = tg::linspace(0, 20, 40, f64);
  const Tensor y1 = tg::tensor({1.0, 0.0}).to(tg::kFloat64);
  ode::OdeStats st;
  (void)ode::odeint(osc, y1, t, a, &st);
  a.max_steps = st.accepted + st.rejected + 50;
  Tensor ys = ode::odeint(osc, y1, t, a);
  const Tensor gk = ag::grad({tg::sum(ys.select(1, 0))}, {k})[0];
  EXPECT_TRUE(std::isfinite(gk.item<double>()));
  // An error inside the backward solve says where it came from.
  bool refuse = false;
  auto picky = [&](const Tensor& tt, const Tensor& y) {
    TG_CHECK(!refuse, "picky f: refused");
    return osc(tt, y);
  };
  a.max_steps = 100000;
  ys = ode::odeint(picky, y1, t.narrow(0, 0, 3), a);
  refuse = true;
  const std::string m = tgtest::error_message([&] { (void)ag::grad({tg::sum(ys)}, {k}); });
  EXPECT_NE(m.find("picky f: refused"), std::string::npos) << m;
  EXPECT_NE(m.find("adjoint's backward solve"), std::string::npos) << m;
}

// The adjoint's step control: by default the error norm covers the
// parameters' gradients too (as torchdiffeq's and JAX's); adjoint_seminorm
// leaves them out, for fewer evaluations. Both agree with backprop.
TEST(Ode, AdjointSeminormIsOptInAndTakesFewerSteps) {
  const Tensor w = tg::tensor({1.5, -0.7, 0.4}).to(tg::kFloat64).requires_grad_();
  int64_t calls = 0;
  auto f = [&](const Tensor&, const Tensor& y) {
    ++calls;
    return tg::tanh(y * w.select(0, 0)) * w.select(0, 1) + tg::sin(y) * tg::exp(w.select(0, 2) * y);
  };
  const Tensor y0 = tg::tensor({0.5, -1.0, 0.25}).to(tg::kFloat64);
  for (auto method : {ode::Method::Dopri5, ode::Method::Tsit5}) {
    ode::OdeOptions o;
    o.method = method;
    o.rtol = 1e-7;
    o.atol = 1e-9;
    o.params = {w};
    Tensor ys = ode::odeint(f, y0, times({0.0, 1.0, 3.0}), o);
    const Tensor want = ag::grad({tg::sum(ys * ys)}, {w})[0];
    o.gradient = ode::Gradient::Adjoint;
    std::vector<int64_t> backward_calls;
    for (bool semi : {false, true}) {
      o.adjoint_seminorm = semi;
      ys = ode::odeint(f, y0, times({0.0, 1.0, 3.0}), o);
      calls = 0;
      const Tensor got = ag::grad({tg::sum(ys * ys)}, {w})[0];
      backward_calls.push_back(calls);
      EXPECT_LT(max_abs(got - want), 1e-5 * max_abs(want)) << "seminorm " << semi;
    }
    EXPECT_GT(backward_calls[0], backward_calls[1]) << "the full norm takes more steps here";
  }
}

// The full norm takes each part's RMS and the largest (as torchdiffeq's):
// a big parameter f barely reads does not dilute y's and dL/dy's error, so
// it never takes fewer steps than the seminorm. Parameters narrower than
// the state (float32, complex64 beside float64) stay out of it. Views of
// one buffer in other dtypes are compared in bytes.
TEST(Ode, AdjointNormPartsNarrowParamsAndViewsInOtherDtypes) {
  const Tensor k = tg::tensor({1.3}).to(tg::kFloat64).requires_grad_();
  const Tensor big = tg::full({1000}, 0.5, f64).requires_grad_();
  const Tensor narrow = tg::tensor({0.7}).to(tg::kFloat32).requires_grad_();
  int64_t calls = 0;
  auto f = [&](const Tensor&, const Tensor& y) {
    ++calls;
    const Tensor extra = tg::sum(big) * 1e-9 + narrow.select(0, 0).to(tg::kFloat64) * y.select(0, 0) * 1e-3;
    return tg::stack({y.select(0, 1), -(k.select(0, 0) * tg::sin(y.select(0, 0))) + extra}, 0);
  };
  const Tensor y0 = tg::tensor({1.0, 0.5}).to(tg::kFloat64);
  ode::OdeOptions o;
  o.rtol = 1e-9;
  o.atol = 1e-11;
  o.params = {k, big, narrow};
  Tensor ys = ode::odeint(f, y0, times({0.0, 10.0}), o);
  const std::vector<Tensor> want = ag::grad({tg::sum(ys * ys)}, {k, narrow});
  o.gradient = ode::Gradient::Adjoint;
  std::vector<int64_t> counted;
  for (bool semi : {false, true}) {
    o.adjoint_seminorm = semi;
    ys = ode::odeint(f, y0, times({0.0, 10.0}), o);
    calls = 0;
    const std::vector<Tensor> got = ag::grad({tg::sum(ys * ys)}, {k, narrow});
    counted.push_back(calls);
    EXPECT_LT(max_abs(got[0] - want[0]), 1e-6 * max_abs(want[0])) << "seminorm " << semi;
    EXPECT_LT(max_abs(got[1].to(tg::kFloat64) - want[1].to(tg::kFloat64)), 1e-4 * max_abs(want[1].to(tg::kFloat64)))
        << "seminorm " << semi;
  }
  EXPECT_GE(counted[0], counted[1]) << "the full norm took fewer steps than the seminorm";
  EXPECT_LT(counted[0], 4 * counted[1]) << "the float32 parameter's rounding drove the steps";
  // A complex view of real memory: compared in bytes with a real view.
  const Tensor base = tg::tensor({0.3, -0.2, 0.5, 0.1}).to(tg::kFloat64).requires_grad_();
  auto g = [&](const Tensor& r, const Tensor& c) {
    return [r, c](const Tensor&, const Tensor& y) {
      const Tensor cr = tg::view_as_real(c).reshape({2});
      return -(y * r.select(0, 0)) + tg::sin(y) * r.select(0, 1) + y * cr.select(0, 0) - cr.select(0, 1);
    };
  };
  const Tensor c = tg::view_as_complex(base.view({2, 2})).narrow(0, 1, 1);  // the bytes of base[2:4]
  ode::OdeOptions a;
  a.gradient = ode::Gradient::Adjoint;
  a.params = {base.narrow(0, 2, 2), c};  // the same bytes
  const std::string m = tgtest::error_message([&] { ode::odeint(g(a.params[0], c), y0, times({0.0, 1.0}), a); });
  EXPECT_NE(m.find("overlapping"), std::string::npos) << m;
  const Tensor r = base.narrow(0, 0, 2);  // disjoint bytes: accepted, as backprop's
  a.params = {r, c};
  const Tensor got = ag::grad({tg::sum(ode::odeint(g(r, c), y0, times({0.0, 1.0}), a))}, {base})[0];
  a.gradient = ode::Gradient::Backprop;
  const Tensor ref = ag::grad({tg::sum(ode::odeint(g(r, c), y0, times({0.0, 1.0}), a))}, {base})[0];
  EXPECT_LT(max_abs(got - ref), 1e-5) << got << " against " << ref;
}

TEST(Ode, BadArgumentsAreRefusedNamingOdeint) {
  auto f = [](const Tensor&, const Tensor& y) { return -y; };
  Tensor y0 = tg::ones({2}, f64);
  auto message = [](auto&& fn) { return tgtest::error_message(fn); };
  auto has = [&](auto&& fn, const char* what) {
    const std::string m = message(fn);
    EXPECT_NE(m.find("odeint"), std::string::npos) << m;
    EXPECT_NE(m.find(what), std::string::npos) << m;
  };
  has([&] { ode::odeint(f, y0, times({0.0, 1.0, 0.5})); }, "strictly");
  has([&] { ode::odeint(f, y0, times({0.0, 0.0})); }, "strictly");
  has([&] { ode::odeint(f, y0, tg::zeros({2, 2}, f64)); }, "1-D");
  has([&] { ode::odeint(f, tg::ones({2}, tg::TensorOptions().dtype(tg::kInt64)), times({0.0, 1.0})); }, "floating");
  has(
      [&] {
        ode::odeint([](const Tensor&, const Tensor& y) { return y.sum(); }, y0, times({0.0, 1.0}));
      },
      "must match y");
  has(
      [&] {
        ode::odeint([](const Tensor&, const Tensor& y) { return y * NAN; }, y0, times({0.0, 1.0}));
      },
      "not finite");
  ode::OdeOptions o;
  o.max_steps = 3;
  o.rtol = o.atol = 1e-12;
  has([&] { ode::odeint(f, y0, times({0.0, 100.0}), o); }, "max_steps");
  o = ode::OdeOptions();
  o.rtol = o.atol = 0;
  has([&] { ode::odeint(f, y0, times({0.0, 1.0}), o); }, "rtol");
  o = ode::OdeOptions();
  o.method = ode::Method::RK4;
  o.steps_per_interval = 0;
  has([&] { ode::odeint(f, y0, times({0.0, 1.0}), o); }, "steps_per_interval");
  // One time: y0 alone, no evaluation. The library is usable afterwards.
  ode::OdeStats st;
  Tensor one = ode::odeint(f, y0, times({0.3}), {}, &st);
  EXPECT_EQ(one.sizes(), tg::IntList({1, 2}));
  EXPECT_EQ(st.evaluations, 0);
  EXPECT_NEAR(ode::odeint(f, y0, times({0.0, 1.0})).select(0, 1).select(0, 0).item<double>(), std::exp(-1.0), 1e-6);
}

// OdeOptions::graphed_adjoint on `dev`, against the eager adjoint, for each
// method: on CUDA the backward solve calls f only to capture its two graphs
// (with the parameters' part and without) and gives the eager gradients; an
// f that reads the GPU from the host cannot be captured and is called at
// every evaluation, with the eager numbers. On the CPU the option is
// ignored: f at every evaluation, the same numbers.
void graphed_adjoint_matches_eager(const tg::Device& dev) {
  const auto o64 = f64.device(dev);
  const bool gpu = dev.is_cuda();
  tg::manual_seed(11);
  Tensor W1 = (tg::randn({16, 2}, o64) * 0.5).requires_grad_(), b1 = (tg::randn({16}, o64) * 0.1).requires_grad_();
  Tensor W2 = (tg::randn({2, 16}, o64) * 0.5).requires_grad_();
  Tensor y0 = tg::randn({32, 2}, o64).requires_grad_(), t = tg::linspace(0, 2, 6, o64);
  int calls = 0;
  bool host_read = false;
  auto f = [&](const Tensor&, const Tensor& y) {
    ++calls;
    Tensor h = tg::tanh(tg::matmul(y, W1.t()) + b1);
    if (host_read) {  // a read of the GPU from the host
      const double sum = tg::sum(h).item<double>();
      EXPECT_TRUE(std::isfinite(sum));
    }
    return tg::matmul(h, W2.t());
  };
  const std::vector<Tensor> wrt{W1, b1, W2, y0};
  for (auto m : {ode::Method::Dopri5, ode::Method::Tsit5, ode::Method::RK4}) {
    ode::OdeOptions o;
    o.method = m;
    o.rtol = 1e-8;
    o.atol = 1e-10;
    o.steps_per_interval = 8;
    o.gradient = ode::Gradient::Adjoint;
    o.params = {W1, b1, W2};
    auto grads = [&](bool graphed) {
      o.graphed_adjoint = graphed;
      Tensor ys = ode::odeint(f, y0, t, o);
      calls = 0;  // the backward's calls
      return ag::grad({tg::sum(ys * ys * ys)}, wrt);
    };
    host_read = false;
    const std::vector<Tensor> eager = grads(false);
    const int eager_calls = calls;
    const std::vector<Tensor> graphed = grads(true);
    const int graphed_calls = calls;
    EXPECT_GT(eager_calls, 40) << int(m);
    if (gpu) {
      EXPECT_LE(graphed_calls, 2) << int(m);  // the captures only
    } else {
      EXPECT_EQ(graphed_calls, eager_calls) << int(m);
    }
    for (size_t i = 0; i < wrt.size(); ++i) {
      const double scale = max_abs(eager[i]), diff = max_abs(graphed[i] - eager[i]);
      EXPECT_GT(scale, 1e-3) << int(m) << " " << i;
      // A replay runs the eager call's kernels; a product under capture may
      // take another algorithm (another summation order).
      EXPECT_LE(diff, (gpu ? 1e-10 : 0.0) * scale) << int(m) << " gradient " << i << ": " << diff << " for " << scale;
    }
    host_read = true;
    const std::vector<Tensor> fallback = grads(true);
    EXPECT_EQ(calls, eager_calls + (gpu ? 1 : 0)) << int(m);  // the failed capture's call, then every evaluation
    for (size_t i = 0; i < wrt.size(); ++i)
      EXPECT_EQ(max_abs(fallback[i] - eager[i]), 0.0) << int(m) << " gradient " << i;
  }
}

TEST(Ode, GraphedAdjointIsTheEagerOneOnTheCpu) { graphed_adjoint_matches_eager(tg::Device(tg::kCPU)); }

}  // namespace

namespace {

TEST(OdeGpu, GraphedAdjointReplaysFAndAgreesWithTheEagerOne) {
  REQUIRE_GPU();
  graphed_adjoint_matches_eager(tg::Device(tg::kCUDA, 0));
}

// A fixed-step solve and its gradient, captured in a CUDA graph: the replay
// gives the eager values (nothing in it reads the GPU from the host).
TEST(OdeGpu, CapturedRk4SolveAndGradientReplayAsEager) {
  REQUIRE_GPU();
  const auto cuda = tg::TensorOptions().device(tg::Device(tg::kCUDA, 0));
  tg::manual_seed(5);
  Tensor W = (tg::randn({2, 2}, cuda) * 0.5).requires_grad_();
  Tensor y0 = tg::randn({64, 2}, cuda), t = tg::linspace(0, 2, 5, cuda);
  auto f = [&](const Tensor&, const Tensor& y) { return tg::tanh(tg::matmul(y, W.t())); };
  ode::OdeOptions o;
  o.method = ode::Method::RK4;
  o.steps_per_interval = 10;
  auto step = [&] {
    Tensor ys = ode::odeint(f, y0, t, o);
    Tensor g = ag::grad({tg::sum(ys * ys)}, {W})[0];
    return std::vector<Tensor>{ys, g};
  };
  tg::cuda::CUDAGraph graph;
  std::vector<Tensor> captured = capture_after_warmup(graph, step);
  // New inputs in place, then the replay against an eager solve of them:
  // the graph recomputes rather than keeping the captured call's values.
  for (int round = 0; round < 2; ++round) {
    {
      ag::NoGradGuard ng;
      y0.copy_(tg::randn({64, 2}, cuda));
      W.copy_(tg::randn({2, 2}, cuda) * 0.5);
    }
    graph.replay();
    std::vector<Tensor> eager = step();
    tg::cuda::synchronize();
    for (size_t i = 0; i < eager.size(); ++i) {
      // float32 products may round differently in a capture (another
      // algorithm's summation order): relative to the values' size
      const double scale = max_abs(eager[i].to(tg::Device(tg::kCPU))),
                   diff = max_abs((captured[i] - eager[i]).to(tg::Device(tg::kCPU)));
      EXPECT_GT(scale, 1e-3) << i;
      EXPECT_LE(diff, 1e-5 * scale) << "output " << i << " of round " << round << ": max |captured - eager| " << diff
                                    << " for values up to " << scale;
    }
  }
}

}  // namespace
