// A physics-informed network for a Poisson problem in d = 1000 dimensions,
// trained with Hutchinson's stochastic Laplacian (laplacian_estimate): each
// step costs `samples` Taylor-mode directions instead of the d an exact
// Laplacian takes.
//
// The problem is the inseparable benchmark of the stochastic Taylor
// derivative estimator paper (Shi et al., NeurIPS 2024) and of the
// high-dimensional PINN papers before it: on the unit ball, Δu = h with
// u = 0 on the sphere, where the exact solution is
//   u*(x) = (1 - |x|^2) s(x),   s(x) = sum_{i<d} c_i sin(x_i + cos(x_{i+1}) + x_{i+1} cos(x_i)),
// two-body terms that couple every pair of neighbouring coordinates. h is
// Δu* in closed form (checked below against tapegrad's exact Laplacian of
// u*). The c_i are drawn from N(0, 1) and then centred (sum c_i = 0): in
// the ball every x_i is O(1/sqrt(d)), so with uncentred c_i the constant
// sin(1) sum c_i would dominate s, and a network that learned a constant
// would already show a small relative error.
//
// The model is u = (1 - |x|^2) N(sqrt(d) x) (the boundary condition holds
// exactly; the inputs scaled to O(1)), N an MLP d -> 128 -> 128 -> 1
// (SiLU; --act tanh: an odd activation has no quadratic term at 0, and
// with its small initial biases the solution's even part is learned
// slowly), float32. The loss is the mean of ((Δ̂u - h) / (2d))^2 over points
// drawn uniformly in the ball, Δ̂u the estimate (Rademacher directions,
// create_graph), and Adam trains it. Prints the relative L2 error of u
// against u* on held-out points as it falls; exits non-zero if the closed
// form disagrees with the exact Laplacian or the final error is above
// --target.
//
//   pinn_highdim [--dims 1000] [--samples 16] [--batch 100] [--steps 5000] [--lr 3e-3] [--act silu]
//                [--target 0.1]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>

#include <tapegrad/tapegrad.h>

#include "sample_util.h"

using tg::Tensor;
namespace ag = tg::autograd;

namespace {

struct Args {
  int64_t dims = 1000, samples = 16, batch = 100, steps = 5000;
  double lr = 3e-3, target = 0.1;
  std::string act = "silu";
};

// n points uniform in the unit d-ball: a normal direction, radius U^(1/d).
Tensor ball(int64_t n, int64_t d, const tg::TensorOptions& o) {
  Tensor g = tg::randn({n, d}, o);
  Tensor r = tg::pow(tg::rand({n, 1}, o), 1.0 / double(d));
  return g * (r / tg::sqrt(tg::square(g).sum({1}, true)));
}

// The exact solution's pieces along the chain i = 0 .. d-2 (z_i couples x_i and x_{i+1}).
struct Exact {
  Tensor c;  // [d - 1]
  int64_t d;
  Tensor u(const Tensor& x) const {  // [B, d] -> [B]
    Tensor a = x.narrow(1, 0, d - 1), b = x.narrow(1, 1, d - 1);
    Tensor z = a + tg::cos(b) + b * tg::cos(a);
    return (1.0 - tg::square(x).sum({1})) * (tg::sin(z) * c).sum({1});
  }
  // Δu* = -2d s - 4 x.∇s + (1 - |x|^2) Δs, with, per i, the derivatives
  // dz/dx_i = 1 - x_{i+1} sin x_i, dz/dx_{i+1} = cos x_i - sin x_{i+1},
  // Δz = -x_{i+1} cos x_i - cos x_{i+1}.
  Tensor laplacian(const Tensor& x) const {
    Tensor a = x.narrow(1, 0, d - 1), b = x.narrow(1, 1, d - 1);
    Tensor z = a + tg::cos(b) + b * tg::cos(a);
    Tensor za = 1.0 - b * tg::sin(a), zb = tg::cos(a) - tg::sin(b);
    Tensor lz = -(b * tg::cos(a)) - tg::cos(b);
    Tensor sz = tg::sin(z), cz = tg::cos(z);
    Tensor s = (sz * c).sum({1});
    Tensor x_grad_s = (cz * (a * za + b * zb) * c).sum({1});
    Tensor lap_s = ((cz * lz - sz * (tg::square(za) + tg::square(zb))) * c).sum({1});
    return s * (-2.0 * double(d)) - x_grad_s * 4.0 + (1.0 - tg::square(x).sum({1})) * lap_s;
  }
};

}  // namespace

int main(int argc, char** argv) {
  Args a;
  sample::Options()
      .add("--dims", &a.dims)
      .add("--samples", &a.samples)
      .add("--batch", &a.batch)
      .add("--steps", &a.steps)
      .add("--lr", &a.lr)
      .add("--target", &a.target)
      .add("--act", &a.act)
      .parse(argc, argv);
  if (a.dims < 2 || a.samples < 1 || a.batch < 2 || a.steps < 0) {
    std::fprintf(stderr, "pinn_highdim: need --dims >= 2, --samples >= 1, --batch >= 2, --steps >= 0\n");
    return 2;
  }
  const int64_t d = a.dims;
  const tg::Device dev = tg::cuda::is_available() ? tg::Device(tg::kCUDA, 0) : tg::Device(tg::kCPU);
  const auto f32 = tg::TensorOptions().dtype(tg::kFloat32).device(dev);
  tg::manual_seed(5);
  Tensor c = tg::randn({d - 1}, f32);
  const Exact exact{c - c.mean(), d};

  // The closed form against tapegrad's exact (Taylor-mode) Laplacian of u*, in float64.
  {
    const auto f64 = f32.dtype(tg::kFloat64);
    const Exact e64{exact.c.to(tg::kFloat64), d};
    Tensor xc = ball(4, d, f64);
    Tensor ref = ag::laplacian([&](const Tensor& x) { return e64.u(x).unsqueeze(1); }, xc).squeeze(1);
    Tensor mine = e64.laplacian(xc);
    const double rel = tg::amax(tg::abs(mine - ref)).item<double>() / tg::amax(tg::abs(ref)).item<double>();
    std::printf("closed-form Laplacian of u* against the exact Laplacian (d = %lld, 4 points): rel. diff %.2e\n",
                (long long)d, rel);
    if (!(rel < 1e-10)) return 1;
  }

  auto net = tg::nn::MLP({d, 128, 128, 1}, a.act, f32);
  const double in_scale = std::sqrt(double(d));
  auto u = [&](const Tensor& x) {  // [B, d] -> [B, 1]
    return (1.0 - tg::square(x).sum({1}, true)) * net->forward(x * in_scale);
  };
  tg::optim::AdamOptions ao;
  ao.lr = a.lr;
  tg::optim::Adam adam(net->parameters(), ao);
  tg::optim::CosineAnnealingLR schedule(adam, std::max<int64_t>(a.steps, 1));

  Tensor x_test = ball(2000, d, f32), u_test = exact.u(x_test);
  auto error = [&] {
    ag::NoGradGuard no_grad;
    Tensor diff = u(x_test).squeeze(1) - u_test;
    return std::sqrt(tg::square(diff).sum().item<double>() / tg::square(u_test).sum().item<double>());
  };
  std::printf("d = %lld, %lld Rademacher directions per point (the exact Laplacian takes %lld), batch %lld, %s\n",
              (long long)d, (long long)a.samples, (long long)d, (long long)a.batch, dev.is_cuda() ? "CUDA" : "CPU");
  std::printf("step %5d  relative L2 error %.4e\n", 0, error());
  std::fflush(stdout);
  const auto t0 = std::chrono::steady_clock::now();
  const double scale = 1.0 / (2.0 * double(d));
  for (int64_t it = 1; it <= a.steps; ++it) {
    Tensor x = ball(a.batch, d, f32);
    Tensor lap = ag::laplacian_estimate(u, x, a.samples, ag::Directions::Rademacher, /*create_graph=*/true).value;
    Tensor loss = tg::square((lap.squeeze(1) - exact.laplacian(x)) * scale).mean();
    adam.zero_grad();
    loss.backward();
    adam.step();
    schedule.step();
    if (it % 250 == 0 || it == a.steps) {
      std::printf("step %5lld  loss %.4e  relative L2 error %.4e\n", (long long)it, loss.item<double>(), error());
      std::fflush(stdout);
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double err = error();
  std::printf("relative L2 error against u*: %.3e (target %.3g), %.1f ms per step\n", err, a.target,
              a.steps > 0 ? 1e3 * secs / double(a.steps) : 0.0);
  return err < a.target ? 0 : 1;
}
