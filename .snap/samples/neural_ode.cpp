// A neural ODE (tg::ode::odeint) fitted to a trajectory it generates itself:
// a damped oscillator x'' = -w^2 x - 2 zeta w x' (w = 2, zeta = 0.1) as the
// state [x, v], observed at 40 times in [0, 10] from [2, 0]. The model is
// y' = f(y) with f an MLP 2 -> 64 -> 64 -> 2 (tanh), integrated by RK4 with
// 4 steps between observations (or Dormand-Prince, --method dopri5), its
// gradient by backpropagation through the solver or by the adjoint method
// (--adjoint), trained with Adam on windows of the trajectory (each window
// starts at an observed state and runs --window observations on), then
// judged on the whole trajectory from [2, 0]. Prints the loss as it falls;
// exits non-zero unless the final error (the RMS over the trajectory) is
// below --target and below a fifth of the first.
//
//   neural_ode [--iters 600] [--window 10] [--batch 16] [--lr 3e-3] [--target 0.1]
//              [--method rk4|dopri5] [--adjoint 0|1]
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <tapegrad/tapegrad.h>

#include "sample_util.h"

using tg::Tensor;
namespace ode = tg::ode;

namespace {

struct Args {
  int64_t iters = 600, window = 10, batch = 16;
  double lr = 3e-3, target = 0.1;
  std::string method = "rk4";
  bool adjoint = false;
};

Args parse(int argc, char** argv) {
  Args a;
  sample::Options()
      .add("--iters", &a.iters)
      .add("--window", &a.window)
      .add("--batch", &a.batch)
      .add("--lr", &a.lr)
      .add("--target", &a.target)
      .add("--method", &a.method)
      .add("--adjoint", &a.adjoint)
      .parse(argc, argv);
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  tg::manual_seed(3);
  const auto f32 = tg::TensorOptions().dtype(tg::kFloat32);
  const int64_t n = 40;
  Tensor t = tg::linspace(0, 10, n, f32);

  // The data: the true oscillator, solved finely.
  const double w = 2.0, zeta = 0.1;
  auto truth = [&](const Tensor&, const Tensor& y) {
    Tensor x = y.narrow(-1, 0, 1), v = y.narrow(-1, 1, 1);
    return tg::cat({v, x * (-w * w) - v * (2 * zeta * w)}, -1);
  };
  ode::OdeOptions fine;
  fine.method = ode::Method::RK4;
  fine.steps_per_interval = 50;
  const Tensor data = ode::odeint(truth, tg::tensor({2.0, 0.0}).to(tg::kFloat32), t, fine);  // [n, 2]

  // The model.
  auto mlp = tg::nn::MLP({2, 64, 64, 2}, "tanh", f32);
  std::vector<Tensor> params = mlp->parameters();
  auto f = [&](const Tensor&, const Tensor& y) { return mlp->forward(y); };
  ode::OdeOptions o;
  o.method = a.method == "dopri5" ? ode::Method::Dopri5 : ode::Method::RK4;
  o.steps_per_interval = 4;
  o.rtol = 1e-5;
  o.atol = 1e-6;
  o.gradient = a.adjoint ? ode::Gradient::Adjoint : ode::Gradient::Backprop;
  o.params = params;
  tg::optim::AdamOptions ao;
  ao.lr = a.lr;
  tg::optim::Adam adam(params, ao);

  auto whole_error = [&] {
    tg::autograd::NoGradGuard ng;
    Tensor pred = ode::odeint(f, data.select(0, 0), t, o);
    return std::sqrt(tg::mean((pred - data) * (pred - data)).item<double>());
  };
  const double first = whole_error();
  std::printf("neural ODE, %s, %s gradient: RMS error over the trajectory %.4f before training\n", a.method.c_str(),
              a.adjoint ? "adjoint" : "backprop", first);
  // Windows: a batch of start indices, each window's times relative to its
  // start (the dynamics are autonomous), its states as one batched solve.
  const int64_t win = std::min<int64_t>(a.window, n - 1);
  Tensor tw = t.narrow(0, 0, win + 1);
  for (int64_t it = 1; it <= a.iters; ++it) {
    Tensor starts = tg::floor(tg::rand({a.batch}) * double(n - win)).to(tg::kInt64);
    Tensor y0 = tg::index_select(data, 0, starts);  // [batch, 2]
    std::vector<Tensor> targets;
    for (int64_t k = 0; k <= win; ++k)
      targets.push_back(tg::index_select(data, 0, starts + k));
    Tensor target = tg::stack(targets, 0);  // [win + 1, batch, 2]
    adam.zero_grad();
    Tensor pred = ode::odeint(f, y0, tw, o);
    Tensor loss = tg::mean((pred - target) * (pred - target));
    tg::autograd::backward({loss});
    adam.step();
    if (it % 100 == 0 || it == 1) std::printf("  iter %4lld  window loss %.5f\n", (long long)it, loss.item<double>());
  }
  const double last = whole_error();
  std::printf("RMS error over the trajectory: %.4f (before: %.4f, target %.3g)\n", last, first, a.target);
  return last < a.target && last < 0.2 * first ? 0 : 1;
}
