// Exact Gaussian-process regression: an RBF kernel
//   k(a, b) = sf2 exp(-(a - b)^2 / (2 ell^2)),  K = k(X, X) + sn2 I,
// with its three hyperparameters as log-parameters theta = (log ell,
// log sf2, log sn2), fitted by minimizing the negative log marginal likelihood
//   NLML = 0.5 y^T K^-1 y + 0.5 log det K + n/2 log 2 pi
// (through the Cholesky factor: K^-1 y by cholesky_solve, log det K as
// 2 sum log diag L) with L-BFGS. Then the Hessian of the NLML in theta, by
// forward over reverse, gives the Laplace approximation of theta's posterior
// (flat prior): covariance H^-1, standard deviations sqrt(diag H^-1).
//
// The data: n = 200 points of sin(x) on [-3, 3] with noise std 0.1, float64,
// on the GPU when there is one. Exits non-zero when the learned noise std is
// not near 0.1, the gradient at the optimum is not small, or the Hessian is
// not symmetric positive definite (or disagrees with reverse over reverse).
#include <cmath>
#include <cstdio>

#include <tapegrad/tapegrad.h>

using tg::Tensor;
namespace ag = tg::autograd;

namespace {

constexpr double kPi = 3.14159265358979323846;

struct GP {
  Tensor sqdist;  // [n, n]: (x_i - x_j)^2, fixed
  Tensor y;       // [n, 1]
  Tensor eye;     // [n, n]

  // The NLML at theta [3] = (log ell, log sf2, log sn2).
  Tensor nlml(const Tensor& theta) const {
    const int64_t n = y.size(0);
    Tensor log_ell = theta[0], log_sf2 = theta[1], log_sn2 = theta[2];
    // exp(log sf2 - d^2 / (2 ell^2)), with 1 / (2 ell^2) = 0.5 exp(-2 log ell).
    Tensor K = tg::exp(log_sf2 - sqdist * (tg::exp(log_ell * -2.0) * 0.5)) + eye * tg::exp(log_sn2);
    Tensor L = tg::linalg::cholesky(K);
    Tensor alpha = tg::linalg::cholesky_solve(y, L);  // K^-1 y
    Tensor fit = (y * alpha).sum() * 0.5;
    Tensor half_logdet = tg::log(tg::diagonal(L, 0, -2, -1)).sum();  // 0.5 log det K
    return fit + half_logdet + 0.5 * double(n) * std::log(2 * kPi);
  }
};

double at(const Tensor& m, int64_t i, int64_t j) { return m[i][j].item<double>(); }

}  // namespace

int main() {
  const bool gpu = tg::cuda::is_available();
  const tg::Device dev = gpu ? tg::Device(tg::kCUDA, 0) : tg::Device(tg::kCPU);
  auto f64 = tg::TensorOptions().dtype(tg::kFloat64);
  const int64_t n = 200;
  const double noise_std = 0.1;
  std::printf("GP regression, RBF kernel, n = %lld noisy sine points, float64, on %s\n", (long long)n,
              gpu ? "the GPU" : "the CPU");

  // Data drawn on the CPU from a fixed seed, so every device sees the same.
  tg::manual_seed(46);
  Tensor x = tg::rand({n, 1}, f64) * 6.0 - 3.0;
  Tensor y = tg::sin(x) + tg::randn({n, 1}, f64) * noise_std;
  GP gp;
  gp.sqdist = tg::square(x - x.transpose(0, 1)).to(dev);
  gp.y = y.to(dev);
  gp.eye = tg::eye(n, f64).to(dev);

  // Start away from the answer: ell = 1, sf2 = 1, sn2 = 1 (noise std 1).
  Tensor theta = tg::zeros({3}, f64).to(dev).requires_grad_();
  tg::optim::LBFGSOptions lo;
  lo.max_iter = 200;
  lo.history_size = 20;
  lo.strong_wolfe = true;
  lo.tolerance_grad = 1e-9;
  lo.tolerance_change = 1e-12;
  tg::optim::LBFGS lbfgs({theta}, lo);
  const double first = lbfgs.step([&] {
    lbfgs.zero_grad();
    Tensor l = gp.nlml(theta);
    l.backward();
    return l;
  });

  Tensor th = theta.detach();
  Tensor value = gp.nlml(th);
  Tensor th_leaf = th.clone().requires_grad_();
  Tensor grad = ag::grad({gp.nlml(th_leaf)}, {th_leaf})[0];
  const double ell = std::exp(th[0].item<double>()), sf2 = std::exp(th[1].item<double>()),
               sn2 = std::exp(th[2].item<double>());
  const double gmax = tg::amax(tg::abs(grad)).item<double>();
  std::printf("L-BFGS: NLML %.6f -> %.6f in %lld evaluations, max |grad| = %.2e\n", first, value.item<double>(),
              (long long)lbfgs.evaluations(), gmax);
  std::printf("learned: lengthscale %.4f, signal variance %.4f, noise std %.4f (true %.4f)\n", ell, sf2, std::sqrt(sn2),
              noise_std);

  // The Hessian in theta: forward over reverse (one forward pass carrying the
  // three directions as a batch of tangents through the gradient).
  auto f = [&](const Tensor& t) { return gp.nlml(t); };
  Tensor H = ag::hessian(f, th, /*create_graph=*/false, ag::JacobianMode::Forward).to(tg::Device(tg::kCPU));
  // Reverse over reverse as the cross-check.
  Tensor Hr = ag::hessian(f, th, false, ag::JacobianMode::Reverse).to(tg::Device(tg::kCPU));
  const char* names[3] = {"log ell", "log sf2", "log sn2"};
  std::printf("Hessian of the NLML in (log ell, log sf2, log sn2):\n");
  for (int i = 0; i < 3; ++i)
    std::printf("  %-8s [%12.5f %12.5f %12.5f]\n", names[i], at(H, i, 0), at(H, i, 1), at(H, i, 2));
  const double asym = tg::amax(tg::abs(H - H.transpose(0, 1))).item<double>();
  const double scale = tg::amax(tg::abs(H)).item<double>();
  const double fwd_rev = tg::amax(tg::abs(H - Hr)).item<double>() / scale;

  // Positive definite iff its Cholesky factorization succeeds (info 0).
  Tensor Hs = (H + H.transpose(0, 1)) * 0.5;
  auto [LH, info] = tg::linalg::cholesky_ex(Hs);
  const bool pd = info.item<int64_t>() == 0;
  bool sd_ok = pd;
  if (pd) {
    Tensor cov = tg::linalg::cholesky_solve(tg::eye(3, f64), LH);
    std::printf("Laplace covariance of theta (H^-1):\n");
    for (int i = 0; i < 3; ++i)
      std::printf("  %-8s [%12.4e %12.4e %12.4e]\n", names[i], at(cov, i, 0), at(cov, i, 1), at(cov, i, 2));
    std::printf("standard deviations:");
    for (int i = 0; i < 3; ++i) {
      const double sd = std::sqrt(at(cov, i, i));
      sd_ok = sd_ok && std::isfinite(sd) && sd > 0;
      std::printf("  %s %.4f", names[i], sd);
    }
    // A 95% interval for the noise std from log sn2's: exp(0.5 (log sn2 +- 2 sd)).
    const double sd2 = std::sqrt(at(cov, 2, 2));
    std::printf("\nnoise std 95%% interval: [%.4f, %.4f]\n", std::exp(0.5 * (std::log(sn2) - 2 * sd2)),
                std::exp(0.5 * (std::log(sn2) + 2 * sd2)));
  }
  std::printf("Hessian: max asymmetry %.2e, forward-over-reverse vs reverse-over-reverse %.2e (relative), %s\n", asym,
              fwd_rev, pd ? "positive definite" : "NOT positive definite");

  const double noise = std::sqrt(sn2);
  bool ok = true;
  if (!(std::abs(noise - noise_std) < 0.2 * noise_std)) {
    std::printf("FAILED: learned noise std %.4f is not within 20%% of %.4f\n", noise, noise_std);
    ok = false;
  }
  if (!(gmax < 1e-4)) {
    std::printf("FAILED: the gradient at the optimum is not small (max |grad| = %.2e)\n", gmax);
    ok = false;
  }
  if (!(asym <= 1e-8 * scale) || !(fwd_rev < 1e-8)) {
    std::printf("FAILED: the Hessian is not symmetric or modes disagree\n");
    ok = false;
  }
  if (!pd || !sd_ok) {
    std::printf("FAILED: the Hessian is not positive definite\n");
    ok = false;
  }
  return ok ? 0 : 1;
}
