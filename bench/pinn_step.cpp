// The PINN training step, eager and as one replayed CUDA graph (docs/PERFORMANCE.md
// "A PINN step"). The step: u = MLP(x) (2 -> width x depth -> 1, tanh), the
// Laplacian u_xx + u_yy by double backward (grad with create_graph, then one
// grad per input dimension; --laplacian taylor: autograd::laplacian, the
// forward Laplacian in Taylor mode), the residual loss mean((lap - f)^2), its
// gradients into the weights, and an SGD update in place (or, with
// --optimizer adam, loss.backward() into .grad and a capturable Adam step,
// the gradients zeroed in place first). Graphed: the whole
// step captured once on a side stream and replayed; the collocation points
// are refreshed by copying into the captured input.
//
//   pinn_step [--batch 1024] [--width 64] [--depth 4] [--steps 200] [--dtype f32|f64] [--optimizer sgd|adam]
//             [--laplacian backward|taylor] (--optimizer sgd-multi: optim::SGD's multi-tensor step)
//             [--device cuda|cpu] [--json] [--out FILE] [--dump FILE.dot]
//
// Prints ms per step (median of --repeats timings of --steps steps each) for
// eager and graphed; bench/peers/pinn_peers.py runs the same step in PyTorch
// (eager, and the whole step under torch.cuda.graph) and JAX (jit). The
// JSON also holds the peak bytes one eager step allocates (eager_peak_mib)
// and the captured graph's pool (pool_mib).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <tapegrad/tapegrad.h>

#include "device_memory.h"
#include "step_timing.h"

namespace {

using tg::Tensor;
namespace ag = tg::autograd;

struct Options {
  int64_t batch = 1024, width = 64, depth = 4;
  int steps = 200, repeats = 5;
  std::string dtype = "f32", device = "cuda", out, dump, optimizer = "sgd", laplacian = "backward";
  bool json = false, no_eager = false, profile = false;
};

struct Net {
  std::vector<Tensor> w, b;
  // Every weight and bias except the last bias, which the Laplacian does not see.
  std::vector<Tensor> trained;
};

Net make_net(const Options& o, tg::Device dev, tg::ScalarType dt) {
  tg::manual_seed(1234);
  Net n;
  std::vector<int64_t> sizes{2};
  for (int64_t i = 0; i < o.depth; ++i)
    sizes.push_back(o.width);
  sizes.push_back(1);
  auto opt = tg::TensorOptions().dtype(dt);
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    double scale = 1.0 / std::sqrt(double(sizes[i]));
    n.w.push_back((tg::randn({sizes[i + 1], sizes[i]}, opt) * scale).to(dev).requires_grad_());
    n.b.push_back((tg::randn({sizes[i + 1]}, opt) * 0.1).to(dev).requires_grad_());
  }
  for (size_t i = 0; i < n.w.size(); ++i) {
    n.trained.push_back(n.w[i]);
    if (i + 1 < n.w.size()) n.trained.push_back(n.b[i]);
  }
  return n;
}

Tensor mlp(const Net& n, const Tensor& x) {
  Tensor h = x;
  for (size_t i = 0; i + 1 < n.w.size(); ++i)
    h = tg::tanh(tg::linear(h, n.w[i], n.b[i]));
  return tg::linear(h, n.w.back(), n.b.back());
}

// The residual loss on collocation points x with source term f; the
// Laplacian by double backward, or (taylor) in Taylor mode.
Tensor pinn_loss(const Net& n, const Tensor& x_in, const Tensor& f, bool taylor) {
  if (taylor) {  // no gradient into x is needed: x does not require grad
    Tensor lap = ag::laplacian([&](const Tensor& xx) { return mlp(n, xx); }, x_in, /*create_graph=*/true);
    return (lap.select(1, 0) - f).square().mean();
  }
  Tensor x = x_in.detach().requires_grad_();
  Tensor u = mlp(n, x);
  Tensor du = ag::grad({u.sum()}, {x}, {}, std::nullopt, /*create_graph=*/true)[0];
  Tensor lap;
  for (int64_t j = 0; j < x.size(1); ++j) {
    Tensor dj = ag::grad({du.select(1, j).sum()}, {x}, {}, std::nullopt, true)[0].select(1, j);
    lap = lap.defined() ? lap + dj : dj;
  }
  return (lap - f).square().mean();
}

// One training step; returns the loss. SGD: grad() and p -= lr g. With an
// optimizer (Adam, or SGD with --optimizer sgd-multi): zero .grad in place,
// backward, the optimizer's (multi-tensor) step.
Tensor step(const Net& n, const Tensor& x, const Tensor& f, double lr, tg::optim::Optimizer* opt, bool taylor) {
  if (opt) {
    opt->zero_grad(/*set_to_none=*/false);
    Tensor loss = pinn_loss(n, x, f, taylor);
    loss.backward();
    opt->step();
    return loss;
  }
  Tensor loss = pinn_loss(n, x, f, taylor);
  std::vector<Tensor> grads = ag::grad({loss}, n.trained);
  ag::NoGradGuard no_grad;
  for (size_t i = 0; i < grads.size(); ++i)
    n.trained[i].sub_(grads[i], lr);  // p -= lr * g
  return loss;
}

// Median over `repeats` of the ms per step of `steps` calls of `fn`.
template <class Fn> double ms_per_step(const Options& o, tg::Device dev, Fn fn) {
  return tgbench::ms_per_step(o.steps, o.repeats, dev, fn);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"The PINN training step, eager and graphed"};
  app.add_option("--batch", o.batch, "collocation points");
  app.add_option("--width", o.width, "hidden width");
  app.add_option("--depth", o.depth, "hidden layers");
  app.add_option("--steps", o.steps, "steps per timing");
  app.add_option("--repeats", o.repeats, "timings (the median is reported)");
  app.add_option("--dtype", o.dtype, "f32 or f64")->check(CLI::IsMember({"f32", "f64"}));
  app.add_option("--device", o.device, "cuda (when there is a GPU) or cpu")->check(CLI::IsMember({"cuda", "cpu"}));
  app.add_option("--optimizer", o.optimizer,
                 "sgd (grad and p -= lr g), sgd-multi (backward, optim::SGD's multi-tensor step) or adam "
                 "(backward, capturable Adam)")
      ->check(CLI::IsMember({"sgd", "sgd-multi", "adam"}));
  app.add_option("--laplacian", o.laplacian, "backward (double backward) or taylor (the forward Laplacian)")
      ->check(CLI::IsMember({"backward", "taylor"}));
  app.add_flag("--no-eager", o.no_eager, "time only the graphed step (for profiling)");
  app.add_flag("--profile", o.profile,
               "bracket one replay with cuda::profiler_start/stop (ncu --profile-from-start off)");
  app.add_flag("--json", o.json, "print the results as JSON");
  app.add_option("--out", o.out, "also write the JSON there");
  app.add_option("--dump", o.dump, "write the captured graph there (Graphviz DOT, every node)");
  CLI11_PARSE(app, argc, argv);

  const bool gpu = o.device == "cuda" && tg::cuda::is_available();
  const tg::Device dev = gpu ? tg::Device(tg::kCUDA, 0) : tg::Device(tg::kCPU);
  const tg::ScalarType dt = o.dtype == "f64" ? tg::kFloat64 : tg::kFloat32;
  const double lr = 1e-4;
  Net net = make_net(o, dev, dt);
  std::unique_ptr<tg::optim::Optimizer> adam;  // the optimizer, when one steps
  if (o.optimizer == "adam") {
    tg::optim::AdamOptions ao;
    ao.lr = lr;
    ao.capturable = gpu;
    adam = std::make_unique<tg::optim::Adam>(net.trained, ao);
  } else if (o.optimizer == "sgd-multi") {
    tg::optim::SGDOptions so;
    so.lr = lr;
    so.capturable = gpu;
    adam = std::make_unique<tg::optim::SGD>(net.trained, so);
  }
  auto opt = tg::TensorOptions().dtype(dt);
  Tensor x = (tg::rand({o.batch, 2}, opt) * 2.0 - 1.0).to(dev);
  Tensor f = tg::sin(x.select(1, 0) * 3.14159) * tg::sin(x.select(1, 1) * 3.14159);

  nlohmann::json result = {{"batch", o.batch},         {"width", o.width}, {"depth", o.depth},
                           {"optimizer", o.optimizer}, {"dtype", o.dtype}, {"device", gpu ? "cuda" : "cpu"},
                           {"laplacian", o.laplacian}};
  const bool taylor = o.laplacian == "taylor";
  for (int i = 0; i < 5; ++i)
    step(net, x, f, lr, adam.get(), taylor);  // warm-up: handles, cached blocks
  result["eager_ms"] = o.no_eager ? 0.0 : ms_per_step(o, dev, [&] { step(net, x, f, lr, adam.get(), taylor); });
  {  // the peak bytes one eager step allocates above what was live before it
    tgbench::sync(gpu);
    const int64_t base = tgbench::allocated(gpu);
    tgbench::reset_peak(gpu);
    step(net, x, f, lr, adam.get(), taylor);
    tgbench::sync(gpu);
    result["eager_peak_mib"] = double(tgbench::peak(gpu) - base) / double(1 << 20);
  }

  if (gpu) {
    namespace cu = tg::cuda;
    cu::CUDAGraph graph(/*keep_graph=*/true);
    Tensor loss = tgbench::capture_after_warmup(
        graph, [&] { return step(net, x, f, lr, adam.get(), taylor); }, [] {});
    if (!o.dump.empty()) graph.debug_dump(o.dump);
    result["fused_nodes"] = graph.fused_nodes();
    result["captured_depth"] = graph.captured_depth();  // longest chain of nodes, as captured
    result["depth"] = graph.depth();                    // and after relaxation
    result["pool_mib"] = double(cu::memory_stats(graph.pool()).reserved_bytes) / double(1 << 20);
    graph.instantiate();
    Tensor fresh = (tg::rand({o.batch, 2}, opt) * 2.0 - 1.0).to(dev);
    result["graphed_ms"] = ms_per_step(o, dev, [&] {
      x.copy_(fresh);  // new collocation points, as a training loop would
      graph.replay();
    });
    if (o.profile) tgbench::profile_replay(graph, dev);
    result["graphed_loss"] = loss.item<double>();
    if (!o.no_eager) result["speedup"] = result["eager_ms"].get<double>() / result["graphed_ms"].get<double>();
  }

  if (o.json) {
    std::cout << result.dump(2) << "\n";
  } else {
    std::printf("PINN step (MLP 2 -> %lld x%lld -> 1, tanh, B = %lld, %s, %s, %s, Laplacian by %s)\n",
                (long long)o.width, (long long)o.depth, (long long)o.batch, o.dtype.c_str(), gpu ? "cuda" : "cpu",
                o.optimizer.c_str(), o.laplacian.c_str());
    std::printf("  tapegrad eager    %8.3f ms/step\n", result["eager_ms"].get<double>());
    if (gpu)
      std::printf("  tapegrad graphed  %8.3f ms/step  (%.1fx; %zu nodes fused, longest chain %zu -> %zu)\n",
                  result["graphed_ms"].get<double>(), result.value("speedup", 0.0),
                  result.value("fused_nodes", size_t(0)), result.value("captured_depth", size_t(0)),
                  result.value("depth", size_t(0)));
  }
  if (!o.out.empty()) std::ofstream(o.out) << result.dump(2) << "\n";
  return 0;
}
