// The Poisson PINN of pinn_poisson (-Δu = f on the unit square, u = 0 on the
// boundary, f = 2π² sin(πx) sin(πy), exact solution sin(πx) sin(πy)) trained
// with the whole step as one CUDA graph: fresh collocation points drawn,
// forward, Laplacian by double backward, loss backward into the static
// .grad, zero_grad and a capturable Adam step, all captured once and
// replayed. The same training runs eagerly from the same seed, and the two
// must end with bitwise equal parameters (same kernels, and the graph's
// random draws advance on every replay as the eager ones do). Then L-BFGS
// with a strong-Wolfe line search refines the result on fixed points (the
// usual PINN recipe). Prints progress and the relative L2 error on a grid;
// exits non-zero if the error is above 1e-2 or the two trainings differ.
// Without a GPU it trains eagerly on the CPU and says so.
//
//   pinn_graphed [steps]   (default 1500 Adam steps on the GPU, 600 on the CPU)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include <tapegrad/tapegrad.h>

using tg::Tensor;
namespace ag = tg::autograd;
namespace cu = tg::cuda;

namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr int64_t kPoints = 256;

Tensor exact(const Tensor& xy) { return tg::sin(xy.select(1, 0) * kPi) * tg::sin(xy.select(1, 1) * kPi); }

struct Pinn {
  std::shared_ptr<tg::nn::SequentialImpl> net;
  std::unique_ptr<tg::optim::Adam> adam;
  tg::Device dev;

  Pinn(tg::Device d) : dev(d) {
    tg::manual_seed(11);
    net = tg::nn::MLP({2, 32, 32, 1}, "tanh", tg::kFloat64);
    net->to(dev);
    tg::optim::AdamOptions o;
    o.lr = 5e-3;
    o.capturable = dev.is_cuda();  // state up front, parameters static
    adam = std::make_unique<tg::optim::Adam>(net->parameters(), o);
  }
  // u = x (1 - x) y (1 - y) N(x, y): the boundary condition holds exactly.
  Tensor u(const Tensor& xy) {
    Tensor x = xy.select(1, 0), y = xy.select(1, 1);
    return x * (1.0 - x) * y * (1.0 - y) * net->forward(xy).select(1, 0);
  }
  // Mean squared residual of -Δu - f at the points xy.
  Tensor loss(const Tensor& xy_in) {
    Tensor xy = xy_in.detach().requires_grad_();
    Tensor g = ag::grad({u(xy).sum()}, {xy}, {}, std::nullopt, /*create_graph=*/true)[0];
    Tensor uxx = ag::grad({g.select(1, 0).sum()}, {xy}, {}, true, true)[0].select(1, 0);
    Tensor uyy = ag::grad({g.select(1, 1).sum()}, {xy}, {}, true, true)[0].select(1, 1);
    return tg::square(-(uxx + uyy) - exact(xy.detach()) * (2 * kPi * kPi)).mean();
  }
  // One Adam step on fresh random points; returns the loss before it.
  Tensor step() {
    adam->zero_grad(/*set_to_none=*/false);
    Tensor l = loss(tg::rand({kPoints, 2}, tg::TensorOptions().dtype(tg::kFloat64).device(dev)));
    l.backward();
    adam->step();
    return l.detach();
  }
  double error() {
    Tensor t = tg::arange(64, tg::TensorOptions().dtype(tg::kFloat64)) / 63.0;
    Tensor grid =
        tg::stack({t.view({64, 1}).expand({64, 64}).reshape({-1}), t.view({1, 64}).expand({64, 64}).reshape({-1})}, 1)
            .to(dev);
    tg::NoGradGuard no_grad;
    Tensor ref = exact(grid);
    return std::sqrt(tg::square(u(grid) - ref).sum().item<double>() / tg::square(ref).sum().item<double>());
  }
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Adam for `steps` steps; graphed: 3 warm-up steps on a side stream, one
// captured, the rest replays.
void train(Pinn& p, int steps, bool graphed, const char* what) {
  tg::manual_seed(12);  // the collocation points: the same draws for both
  auto t0 = std::chrono::steady_clock::now();
  auto report = [&](int it, const Tensor& l) {
    if (it % 500 == 0 || it == steps - 1)
      std::printf("  %s step %4d  residual loss %.4e\n", what, it, l.item<double>());
  };
  if (!graphed) {
    for (int it = 0; it < steps; ++it)
      report(it, p.step());
  } else {
    const int warmup = 3;
    cu::Stream side = cu::stream_from_pool();
    side.wait_stream(cu::current_stream());
    {
      cu::StreamGuard g(side);
      for (int it = 0; it < warmup; ++it)
        report(it, p.step());
    }
    cu::current_stream().wait_stream(side);
    cu::CUDAGraph graph;
    Tensor loss;
    {
      cu::Graph capture(graph);
      loss = p.step();
    }
    cu::synchronize();
    auto r0 = std::chrono::steady_clock::now();
    for (int it = warmup; it < steps; ++it) {
      graph.replay();
      if (it % 500 == 0 || it == steps - 1) report(it, loss);
    }
    cu::synchronize();
    // The line python/samples/pinn_graphed.py prints too (docs/PERFORMANCE.md).
    std::printf("  graphed: %.4f ms per replayed step\n", 1e3 * seconds_since(r0) / std::max(1, steps - warmup));
  }
  if (p.dev.is_cuda()) cu::synchronize();
  std::printf("  %s: %d Adam steps in %.2f s, relative L2 error %.3e\n", what, steps, seconds_since(t0), p.error());
}

}  // namespace

int main(int argc, char** argv) {
  const bool gpu = cu::is_available();
  const int steps = argc > 1 ? std::atoi(argv[1]) : gpu ? 1500 : 600;
  const tg::Device dev = gpu ? tg::Device(tg::kCUDA, 0) : tg::Device(tg::kCPU);
  std::printf("Poisson PINN, MLP 2 -> 32 -> 32 -> 1 (tanh), %lld points per step, float64, on %s\n", (long long)kPoints,
              gpu ? "the GPU" : "the CPU (no GPU here: eager only)");
  Pinn graphed(dev);
  bool same = true;
  if (gpu) {
    Pinn eager(dev);
    train(eager, steps, false, "eager  ");
    train(graphed, steps, true, "graphed");
    auto a = eager.net->named_parameters(), b = graphed.net->named_parameters();
    for (size_t i = 0; i < a.size(); ++i)
      same = same && tg::equal(a[i].second, b[i].second);
    std::printf("graphed and eager parameters bitwise equal: %s\n", same ? "yes" : "NO");
  } else {
    train(graphed, steps, false, "eager");
  }

  // L-BFGS with a strong-Wolfe line search on 1024 fixed points.
  Tensor fixed = tg::rand({1024, 2}, tg::TensorOptions().dtype(tg::kFloat64)).to(dev);
  tg::optim::LBFGSOptions lo;
  lo.max_iter = 200;
  lo.history_size = 50;
  lo.strong_wolfe = true;
  tg::optim::LBFGS lbfgs(graphed.net->parameters(), lo);
  const double before = graphed.error();
  const double first = lbfgs.step([&] {
    lbfgs.zero_grad();
    Tensor l = graphed.loss(fixed);
    l.backward();
    return l;
  });
  const double after = graphed.error();
  std::printf("L-BFGS: loss %.4e at the start, %lld evaluations; relative L2 error %.3e -> %.3e\n", first,
              (long long)lbfgs.evaluations(), before, after);
  return after < 1e-2 && same ? 0 : 1;
}
