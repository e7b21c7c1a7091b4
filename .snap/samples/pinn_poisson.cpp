// A physics-informed network for the Poisson problem -Δu = f on the unit
// square with u = 0 on the boundary, f = 2π² sin(πx) sin(πy), whose solution
// is u* = sin(πx) sin(πy). The network N (2 -> 32 -> 32 -> 1, tanh) is
// wrapped as u = x (1 - x) y (1 - y) N(x, y) so the boundary condition holds
// exactly; the loss is the mean squared residual of -Δu - f at random
// collocation points, with Δu from double backward (grad of grad, with
// create_graph), trained with Adam. Prints progress and the final relative
// L2 error on a grid; exits non-zero if it is above 2e-2.
#include <cmath>
#include <cstdio>

#include <tapegrad/tapegrad.h>

#include "sample_util.h"

using tg::Tensor;
namespace ag = tg::autograd;

namespace {
constexpr double kPi = 3.14159265358979323846;
}  // namespace

int main() {
  auto f64 = tg::TensorOptions().dtype(tg::kFloat64);
  tg::manual_seed(11);
  std::vector<Tensor> params = sample::tanh_mlp_params({2, 32, 32, 1});
  auto u = [&](const Tensor& xy) {
    Tensor h = sample::tanh_mlp(params, xy);
    Tensor x = xy.select(1, 0), y = xy.select(1, 1);
    return x * (1.0 - x) * y * (1.0 - y) * h.select(1, 0);
  };
  auto exact = [](const Tensor& xy) { return tg::sin(xy.select(1, 0) * kPi) * tg::sin(xy.select(1, 1) * kPi); };
  sample::Adam opt(params, 5e-3);
  const int steps = 1500;
  const int64_t n = 256;
  for (int it = 0; it <= steps; ++it) {
    Tensor xy = tg::rand({n, 2}, f64).requires_grad_();
    Tensor uu = u(xy);
    Tensor g = ag::grad({uu.sum()}, {xy}, {}, std::nullopt, /*create_graph=*/true)[0];
    Tensor uxx = ag::grad({g.select(1, 0).sum()}, {xy}, {}, true, true)[0].select(1, 0);
    Tensor uyy = ag::grad({g.select(1, 1).sum()}, {xy}, {}, true, true)[0].select(1, 1);
    Tensor f = exact(xy.detach()) * (2 * kPi * kPi);
    Tensor loss = tg::square(-(uxx + uyy) - f).mean();
    if (it == steps) break;
    loss.backward();
    opt.step();
    if (it % 250 == 0) std::printf("step %4d  residual loss %.4e\n", it, loss.item<double>());
  }
  // Relative L2 error on a 64 x 64 grid.
  Tensor t = tg::arange(64, f64) / 63.0;
  Tensor grid =
      tg::stack({t.view({64, 1}).expand({64, 64}).reshape({-1}), t.view({1, 64}).expand({64, 64}).reshape({-1})}, 1);
  Tensor pred, ref = exact(grid);
  {
    tg::NoGradGuard no_grad;
    pred = u(grid);
  }
  const double rel = std::sqrt(tg::square(pred - ref).sum().item<double>() / tg::square(ref).sum().item<double>());
  std::printf("relative L2 error against sin(pi x) sin(pi y): %.3e\n", rel);
  return rel < 2e-2 ? 0 : 1;
}
