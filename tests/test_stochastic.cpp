// Stochastic differential operators (issue 51 point 5): Hutchinson's
// Laplacian with Taylor-mode jets (laplacian_estimate) and the sparse
// stochastic Taylor derivative estimator (derivative_operator_estimate):
// unbiasedness at the expected rate, the variance against closed forms for
// a quadratic, exactness where it must hold, gradients through the estimate.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include <tapegrad/tapegrad.h>

#include "reference.h"

namespace {

using tg::Tensor;
namespace ag = tg::autograd;

const auto kF64 = tg::TensorOptions().dtype(tg::kFloat64);

double max_abs(const Tensor& t) { return tg::amax(tg::abs(t)).item<double>(); }
double mean_of(const Tensor& t) { return tg::mean(t).item<double>(); }
// The unbiased sample variance of every element of t.
double variance_of(const Tensor& t) {
  const Tensor c = t - tg::mean(t);
  return tg::sum(c * c).item<double>() / double(t.numel() - 1);
}

// f(x) = 0.5 x^T A x per row (A symmetric): H = A, the Laplacian trace(A).
struct Quadratic {
  Tensor a;
  explicit Quadratic(int64_t n) {
    tg::manual_seed(21);
    Tensor m = tg::randn({n, n}, kF64);
    a = (m + m.t()) * 0.5;
  }
  Tensor operator()(const Tensor& x) const { return (tg::matmul(x, a) * x).sum({1}, true) * 0.5; }
  double trace() const {
    double t = 0;
    for (int64_t i = 0; i < a.size(0); ++i)
      t += a.select(0, i).select(0, i).item<double>();
    return t;
  }
  double off_diagonal_squares() const {  // sum over i != j of A_ij^2
    double s = tg::sum(a * a).item<double>();
    for (int64_t i = 0; i < a.size(0); ++i)
      s -= std::pow(a.select(0, i).select(0, i).item<double>(), 2);
    return s;
  }
  double frobenius_squared() const { return tg::sum(a * a).item<double>(); }
};

TEST(Stochastic, HutchinsonIsUnbiasedWithTheClosedFormVariance) {
  const int64_t n = 12, B = 6000, k = 3;
  Quadratic f(n);
  const Tensor x = tg::randn({B, n}, kF64);  // any point: the Hessian is A everywhere
  for (auto [dirs, per_direction] : {std::pair{ag::Directions::Rademacher, 2 * f.off_diagonal_squares()},
                                     std::pair{ag::Directions::Gaussian, 2 * f.frobenius_squared()}}) {
    tg::manual_seed(5);
    ag::Estimate e = ag::laplacian_estimate(std::ref(f), x, k, dirs, false, /*variance=*/true);
    ASSERT_EQ(e.value.sizes(), (tg::IntList{B, 1}));
    ASSERT_EQ(e.variance.sizes(), (tg::IntList{B, 1}));
    // Each row is an independent estimate with variance per_direction / k.
    const double sigma2 = per_direction / double(k);
    EXPECT_NEAR(mean_of(e.value), f.trace(), 4 * std::sqrt(sigma2 / double(B)));
    EXPECT_NEAR(variance_of(e.value), sigma2, 0.1 * sigma2);
    // The reported variance estimates it, row by row (its mean: within 10%).
    EXPECT_NEAR(mean_of(e.variance), sigma2, 0.1 * sigma2);
    // Without the variance: the same draw gives the same value.
    tg::manual_seed(5);
    Tensor v = ag::laplacian_estimate(std::ref(f), x, k, dirs).value;
    EXPECT_LT(max_abs(v - e.value), 1e-10 * (1 + max_abs(e.value)));
    EXPECT_FALSE(ag::laplacian_estimate(std::ref(f), x, k, dirs).variance.defined());
  }
  // A diagonal Hessian: every Rademacher estimate is exact.
  Quadratic d(n);
  d.a = d.a * tg::eye(n, kF64);
  Tensor one = ag::laplacian_estimate(std::ref(d), x.narrow(0, 0, 50), 1).value;
  EXPECT_LT(max_abs(one - d.trace()), 1e-10 * (1 + std::abs(d.trace())));
}

// A non-polynomial fn of 10 inputs: the mean of independent estimates
// converges to the exact (Taylor-mode) Laplacian as 1 / sqrt(count), and
// the spread of one estimate falls as 1 / samples.
TEST(Stochastic, HutchinsonConvergesToTheExactLaplacianAtTheExpectedRate) {
  tg::manual_seed(22);
  const int64_t n = 10;
  Tensor w = tg::randn({n, 3}, kF64) * 0.5;
  auto fn = [&](const Tensor& x) {
    return tg::sin(tg::matmul(x, w)).sum({1}, true) + (tg::tanh(x) * x).sum({1}, true);
  };
  const Tensor point = tg::randn({1, n}, kF64);
  const double exact = ag::laplacian(fn, point).item<double>();
  const int64_t B = 4000;
  const Tensor x = point.expand({B, n}).contiguous();  // B independent estimates at one point
  double spread4 = 0;
  for (int64_t k : {4, 16}) {
    const Tensor est = ag::laplacian_estimate(fn, x, k).value;
    const double s2 = variance_of(est);
    EXPECT_NEAR(mean_of(est), exact, 4 * std::sqrt(s2 / double(B))) << "samples " << k;
    if (k == 4) spread4 = s2;
    else EXPECT_NEAR(spread4 / s2, 4.0, 0.8) << "the variance falls as 1 / samples";
  }
  EXPECT_ERROR_CONTAINS(ag::laplacian_estimate(fn, x, 0), "laplacian_estimate: samples must be positive, got 0");
  EXPECT_ERROR_CONTAINS(ag::laplacian_estimate(fn, tg::ones({3}, kF64), 2),
                        "laplacian_estimate: x must have shape [B, n], got [3]");
  EXPECT_ERROR_CONTAINS(ag::laplacian_estimate(fn, tg::ones({2, 3}, tg::TensorOptions().dtype(tg::kInt64)), 2),
                        "laplacian_estimate: x must be floating-point");
}

// With create_graph the estimate trains: for a fixed draw its gradient into
// the parameters fn closes over passes gradcheck (third derivatives).
TEST(Stochastic, HutchinsonEstimateIsDifferentiable) {
  tg::manual_seed(23);
  Tensor x = tg::randn({4, 3}, kF64);
  Tensor w1 = (tg::randn({5, 3}, kF64) * 0.8).requires_grad_(), w2 = (tg::randn({1, 5}, kF64) * 0.8).requires_grad_();
  auto loss = [&](const ag::variable_list& p) {
    auto u = [&](const Tensor& t) { return tg::linear(tg::tanh(tg::linear(t, p[0])), p[1]); };
    tg::manual_seed(99);  // the same directions at every call
    Tensor lap = ag::laplacian_estimate(u, x, 2, ag::Directions::Gaussian, /*create_graph=*/true).value;
    return (lap - 1.0).square().mean();
  };
  auto r = ag::gradcheck(loss, {w1, w2});
  EXPECT_TRUE(r.ok) << r.message;
  EXPECT_GT(tg::abs(ag::grad({loss({w1, w2})}, {w1})[0]).sum().item<double>(), 1e-4);
}

// The sparse estimator over an operator's terms: exact with every term,
// unbiased with fewer, its variance that of sampling without replacement.
TEST(Stochastic, SparseTermEstimatorIsUnbiasedAndExactWithEveryTerm) {
  const int64_t n = 6;
  // u = sum_i c_i x_i^2 x_0 ... a polynomial whose terms u_ii differ.
  auto u = [&](const Tensor& x) {
    Tensor s = tg::zeros({x.size(0), 1}, kF64);
    for (int64_t i = 0; i < n; ++i) {
      const Tensor xi = x.select(1, i).unsqueeze(1);
      s = s + xi * xi * xi * double(i + 1) + xi * xi * double(i);
    }
    return s;
  };
  tg::manual_seed(24);
  const Tensor x = tg::randn({3, n}, kF64);
  std::vector<ag::Partial> lap;
  for (int64_t i = 0; i < n; ++i)
    lap.push_back({{i, i}, 1.0});
  const Tensor exact = ag::derivative_operator(u, x, lap);
  EXPECT_LT(max_abs(ag::derivative_operator_estimate(u, x, lap, n) - exact), 1e-12 * (1 + max_abs(exact)));
  // u_ii = 6 (i + 1) x_i + 2 i at row 0; k = 2 of N = 6 terms, scaled by 3.
  const int64_t k = 2, draws = 3000;
  std::vector<double> terms;
  for (int64_t i = 0; i < n; ++i)
    terms.push_back(6.0 * double(i + 1) * x.select(0, 0).select(0, i).item<double>() + 2.0 * double(i));
  double mu = 0, s2 = 0;
  for (double t : terms)
    mu += t / double(n);
  for (double t : terms)
    s2 += (t - mu) * (t - mu) / double(n - 1);
  const double var_estimate = double(n * n) * s2 / double(k) * double(n - k) / double(n);  // finite population
  std::vector<double> got;
  tg::manual_seed(25);
  for (int64_t d = 0; d < draws; ++d)
    got.push_back(ag::derivative_operator_estimate(u, x.narrow(0, 0, 1), lap, k).item<double>());
  const Tensor g = tg::tensor(got, {draws}, kF64);
  EXPECT_NEAR(mean_of(g), exact.select(0, 0).item<double>(), 4 * std::sqrt(var_estimate / double(draws)));
  EXPECT_NEAR(variance_of(g), var_estimate, 0.12 * var_estimate);
  EXPECT_ERROR_CONTAINS(ag::derivative_operator_estimate(u, x, lap, 0), "samples must be in [1, 6]");
  EXPECT_ERROR_CONTAINS(ag::derivative_operator_estimate(u, x, lap, 7), "samples must be in [1, 6]");
  EXPECT_ERROR_CONTAINS(ag::derivative_operator_estimate(u, x, {}, 1), "no terms given");
  EXPECT_ERROR_CONTAINS(ag::derivative_operator_estimate(u, x.select(0, 0), lap, 1),
                        "derivative_operator_estimate: x must have shape [B, n]");
}

// A batch broadcast from one row (stride 0) is still a batch of rows to
// autograd: matmul's one-copy product for such an operand applies only to
// constants, so the gradient into an expanded leaf and a per-row tangent
// stay per row (they were the first row's: the adversary's finding).
TEST(Stochastic, ExpandedRowsKeepPerRowGradientsTangentsAndEstimates) {
  const Tensor h = tg::tensor({2.0, 1.0, 1.0, 2.0}, {2, 2}, kF64);
  Tensor x = tg::tensor({1.0, 2.0}, {1, 2}, kF64).expand({3, 2}).detach();
  x.requires_grad_(true);
  const Tensor go = tg::tensor({1.0, 0.0, 0.0, 1.0, 1.0, 1.0}, {3, 2}, kF64);
  const Tensor g = ag::grad({tg::matmul(x, h)}, {x}, {go})[0];
  EXPECT_LT(max_abs(g - tg::matmul(go, h.t())), 1e-15) << "the gradient of each row";
  {
    namespace fwd = tg::autograd::forward_ad;
    fwd::dual_level level;
    const Tensor xd = fwd::make_dual(tg::tensor({1.0, 2.0}, {1, 2}, kF64).expand({3, 2}), go);
    const Tensor t = fwd::unpack_dual(tg::matmul(xd, h)).tangent;
    ASSERT_TRUE(t.defined());
    EXPECT_LT(max_abs(t - tg::matmul(go, h)), 1e-15) << "the tangent of each row";
  }
  // 0.5 x^T H x: every Rademacher estimate is 4 +- 2 (trace 4, off-diagonal 1).
  auto quad = [&](const Tensor& t) { return (tg::matmul(t, h) * t).sum({1}, true) * 0.5; };
  const Tensor xe = tg::tensor({1.0, 2.0}, {1, 2}, kF64).expand({400, 2});
  tg::manual_seed(26);
  const Tensor est = ag::laplacian_estimate(quad, xe, 1).value;
  const Tensor two = tg::eq(est, 2.0), six = tg::eq(est, 6.0);
  EXPECT_EQ(tg::sum(tg::logical_or(two, six).to(tg::kInt64)).item<int64_t>(), 400) << "each estimate is 2 or 6";
  EXPECT_GT(tg::sum(two.to(tg::kInt64)).item<int64_t>(), 150);
  EXPECT_GT(tg::sum(six.to(tg::kInt64)).item<int64_t>(), 150);
  // The exact operators on the expanded batch: no false "mixes rows".
  EXPECT_LT(max_abs(ag::laplacian(quad, xe, /*create_graph=*/true) - 4.0), 1e-12);
  EXPECT_LT(max_abs(ag::derivative_operator(quad, xe, {{{0, 0}}, {{1, 1}}}) - 4.0), 1e-12);
}

// Captured in a CUDA graph, the estimate draws new directions on every
// replay: the replays' estimates differ, and their mean converges to the
// exact Laplacian; the sparse estimator refuses capture (its draw is on the
// host and would be fixed in the graph).
TEST(StochasticGpu, HutchinsonEstimateIsCapturableAndDrawsAnewOnEveryReplay) {
  REQUIRE_GPU();
  namespace cu = tg::cuda;
  const int64_t n = 12, B = 256, k = 4, replays = 200;
  Quadratic f(n);
  f.a = f.a.to(tg::Device(tg::kCUDA, 0));
  const Tensor x = tg::randn({B, n}, kF64).to(tg::Device(tg::kCUDA, 0));
  auto run = [&] { return ag::laplacian_estimate(std::ref(f), x, k).value; };
  cu::Stream side = cu::stream_from_pool();
  side.wait_stream(cu::current_stream());
  {
    cu::StreamGuard g(side);
    run();  // warm-up off the capture
  }
  cu::current_stream().wait_stream(side);
  cu::CUDAGraph graph;
  Tensor out;
  {
    cu::Graph capture(graph);
    out = run();
  }
  std::vector<double> means;
  Tensor first, sum = tg::zeros({B, 1}, kF64.device(tg::Device(tg::kCUDA, 0)));
  for (int64_t r = 0; r < replays; ++r) {
    graph.replay();
    if (r == 0) first = out.clone();
    sum = sum + out;
  }
  EXPECT_GT(max_abs(out - first), 1e-3);  // a new draw each replay
  const double sigma2 = 2 * f.off_diagonal_squares() / double(k);
  EXPECT_NEAR(mean_of(sum / double(replays)), f.trace(), 4 * std::sqrt(sigma2 / double(B * replays)));
  std::vector<ag::Partial> terms;
  for (int64_t i = 0; i < n; ++i)
    terms.push_back({{i, i}, 1.0});
  cu::CUDAGraph refused;
  EXPECT_ERROR_CONTAINS(([&] {
                          cu::Graph capture(refused);
                          return ag::derivative_operator_estimate(std::ref(f), x, terms, 3);
                        }()),
                        "capture");
}

}  // namespace
