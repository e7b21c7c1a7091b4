// Newton-CG on the extended Rosenbrock function with Hessian-vector products:
// each Newton step solves H p = -g by conjugate gradients, where every H v is
// one double-backward pass (grad of g . v), never forming H. Starts at the
// classic (-1.2, 1, -1.2, 1, ...) in 20 dimensions and must reach the
// minimum (all ones) to 1e-10. Exits non-zero otherwise.
#include <cmath>
#include <cstdio>

#include <tapegrad/tapegrad.h>

using tg::Tensor;
namespace ag = tg::autograd;

namespace {

// The extended Rosenbrock function: n / 2 coupled pairs (x_2i, x_2i+1).
Tensor rosenbrock(const Tensor& x) {
  Tensor a = x.slice(0, 0, std::nullopt, 2), b = x.slice(0, 1, std::nullopt, 2);
  return (tg::square(b - tg::square(a)) * 100.0 + tg::square(1.0 - a)).sum();
}

double inner(const Tensor& a, const Tensor& b) { return (a * b).sum().item<double>(); }

}  // namespace

int main() {
  const int64_t n = 20;
  auto f64 = tg::TensorOptions().dtype(tg::kFloat64);
  Tensor x = tg::zeros({n}, f64);
  for (int64_t i = 0; i < n; ++i)
    x.narrow(0, i, 1).fill_(i % 2 == 0 ? -1.2 : 1.0);
  int hvps = 0;
  for (int it = 0; it < 100; ++it) {
    Tensor xl = x.detach().requires_grad_();
    Tensor fx = rosenbrock(xl);
    Tensor g = ag::grad({fx}, {xl}, {}, std::nullopt, /*create_graph=*/true)[0];
    const double gnorm = std::sqrt(inner(g, g));
    std::printf("iter %2d  f = %.6e  |grad| = %.3e\n", it, fx.item<double>(), gnorm);
    if (gnorm < 1e-12) break;
    auto hvp = [&](const Tensor& v) {
      ++hvps;
      return ag::grad({(g * v).sum()}, {xl}, {}, /*retain_graph=*/true)[0];
    };
    // Truncated CG on H p = -g; stop on negative curvature.
    Tensor gd = g.detach();
    Tensor p = tg::zeros_like(gd), r = -gd, d = r.clone();
    double rr = inner(r, r);
    for (int k = 0; k < 2 * n && std::sqrt(rr) > 1e-3 * std::min(1.0, gnorm) * gnorm; ++k) {
      Tensor hd = hvp(d);
      double curv = inner(d, hd);
      if (curv <= 0) {
        if (k == 0) p = -gd;
        break;
      }
      double alpha = rr / curv;
      p = p + d * alpha;
      r = r - hd * alpha;
      double rr_new = inner(r, r);
      d = r + d * (rr_new / rr);
      rr = rr_new;
    }
    // Backtracking (Armijo) line search.
    double step = 1.0, f0 = fx.item<double>(), slope = inner(gd, p);
    Tensor next = x + p;
    while (rosenbrock(next).item<double>() > f0 + 1e-4 * step * slope && step > 1e-10) {
      step *= 0.5;
      next = x + p * step;
    }
    x = next.detach();
  }
  const double err = tg::amax(tg::abs(x - 1.0)).item<double>();
  std::printf("Newton-CG: %d Hessian-vector products, max |x - 1| = %.3e\n", hvps, err);
  if (!(err < 1e-10)) {
    std::printf("FAILED: did not reach the minimum\n");
    return 1;
  }
  return 0;
}
