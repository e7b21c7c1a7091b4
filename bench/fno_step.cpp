// The FNO-2D training step, eager and as one replayed CUDA graph
// (docs/PERFORMANCE.md "An FNO step"): nn::FNO (width 32, 12 x 12 modes, 4
// Fourier layers, projection 128, float32) on a batch of 20 fields on a grid
// of --grid points a side, the relative L2 loss against targets (with
// --pino, plus the mean square of the output's spectral Laplacian, as a
// physics-informed neural operator's residual would add), backward, and a
// capturable Adam step (gradients zeroed in place first). Graphed: the whole
// step captured once on a side stream and replayed; the inputs are refreshed
// by copying into the captured ones.
//
//   fno_step [--grid 64] [--batch 20] [--width 32] [--modes 12] [--layers 4] [--pino]
//            [--steps 50] [--repeats 5] [--device cuda|cpu] [--json] [--profile] [--no-relax] [--tf32]
//
// Prints ms per step (median of --repeats timings of --steps steps) and the
// peak device memory; bench/peers/fno_peers.py runs the same step in PyTorch
// (eager, under torch.cuda.graph, torch.compile) and JAX (jit).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <tapegrad/tapegrad.h>

#include "step_timing.h"

namespace {

using tg::Tensor;

struct Options {
  int64_t grid = 64, batch = 20, width = 32, modes = 12, layers = 4;
  int steps = 50, repeats = 5;
  std::string device = "cuda";
  bool json = false, pino = false, profile = false, no_relax = false, tf32 = false;
};

// Mean over the batch of |pred - target| / |target|.
Tensor relative_l2(const Tensor& pred, const Tensor& target) {
  const int64_t b = pred.size(0);
  Tensor d = (pred - target).reshape({b, -1}), t = target.reshape({b, -1});
  return (tg::sqrt((d * d).sum({1})) / tg::sqrt((t * t).sum({1}))).mean();
}

// The spectral Laplacian of u [B, s, s, 1] (periodic): -(2 pi)^2 |k|^2 in
// Fourier space.
Tensor spectral_laplacian(const Tensor& u, const Tensor& k2) {
  const int64_t s = u.size(1);
  Tensor uf = tg::fft::rfft2(u.squeeze(-1));
  return tg::fft::irfft2(uf * k2, tg::IntList{s, s});
}

// Median over `repeats` of the ms per step of `steps` calls of `fn`.
template <class Fn> double ms_per_step(const Options& o, tg::Device dev, Fn fn) {
  return tgbench::ms_per_step(o.steps, o.repeats, dev, fn);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"The FNO-2D training step, eager and graphed"};
  app.add_option("--grid", o.grid, "points per side");
  app.add_option("--batch", o.batch, "fields per step");
  app.add_option("--width", o.width, "channels of the Fourier layers");
  app.add_option("--modes", o.modes, "modes per dim");
  app.add_option("--layers", o.layers, "Fourier layers");
  app.add_option("--steps", o.steps, "steps per timing");
  app.add_option("--repeats", o.repeats, "timings (the median is reported)");
  app.add_option("--device", o.device, "cuda or cpu");
  app.add_flag("--pino", o.pino, "add the mean square of the output's spectral Laplacian to the loss");
  app.add_flag("--json", o.json, "print JSON");
  app.add_flag("--tf32", o.tf32, "float32 GEMMs in TF32 (tg::cuda::set_allow_tf32; JAX's default on this GPU)");
  app.add_flag("--no-relax", o.no_relax, "keep the captured dependencies (CUDAGraph::set_relax_dependencies(false))");
  app.add_flag("--profile", o.profile,
               "bracket one replay with cuda::profiler_start/stop (ncu --profile-from-start off)");
  CLI11_PARSE(app, argc, argv);
  const bool gpu = o.device == "cuda" && tg::cuda::is_available();
  const tg::Device dev = gpu ? tg::Device(tg::kCUDA, 0) : tg::Device(tg::kCPU);
  if (gpu && o.tf32) tg::cuda::set_allow_tf32(true);

  tg::manual_seed(0);
  tg::nn::FNOOptions fo;
  fo.width = o.width;
  fo.modes = {o.modes, o.modes};
  fo.layers = o.layers;
  fo.options = tg::TensorOptions().device(dev);
  tg::nn::FNO model(fo);
  tg::optim::AdamOptions ao;
  ao.lr = 1e-3;
  ao.capturable = gpu;
  tg::optim::Adam adam(model->parameters(), ao);
  const auto f32 = tg::TensorOptions().device(dev);
  Tensor a = tg::rand({o.batch, o.grid, o.grid, 1}, f32), u = tg::rand({o.batch, o.grid, o.grid, 1}, f32);
  Tensor k1 = tg::fft::fftfreq(o.grid, 1.0 / double(o.grid), f32).view({o.grid, 1});
  Tensor k2 = tg::fft::rfftfreq(o.grid, 1.0 / double(o.grid), f32).view({1, o.grid / 2 + 1});
  const Tensor lap_factor = (k1 * k1 + k2 * k2) * (-4 * M_PI * M_PI);

  auto step = [&] {
    adam.zero_grad(/*set_to_none=*/false);
    Tensor pred = model->forward(a);
    Tensor loss = relative_l2(pred, u);
    if (o.pino) loss = loss + spectral_laplacian(pred, lap_factor).pow(2.0).mean() * 1e-8;
    loss.backward();
    adam.step();
    return loss;
  };
  nlohmann::json result = {{"grid", o.grid},   {"batch", o.batch}, {"width", o.width},
                           {"modes", o.modes}, {"pino", o.pino},   {"device", gpu ? "cuda" : "cpu"}};
  for (int i = 0; i < 3; ++i)
    step();
  if (gpu) tg::cuda::reset_peak_memory_stats();
  result["eager_ms"] = ms_per_step(o, dev, step);
  if (gpu) {
    namespace cu = tg::cuda;
    result["eager_peak_mib"] = double(cu::memory_stats().peak_allocated_bytes) / double(1 << 20);
    cu::CUDAGraph graph;
    graph.set_relax_dependencies(!o.no_relax);
    Tensor loss = tgbench::capture_after_warmup(graph, step, [] { tg::cuda::reset_peak_memory_stats(); });
    Tensor fresh_a = tg::rand({o.batch, o.grid, o.grid, 1}, f32), fresh_u = tg::rand({o.batch, o.grid, o.grid, 1}, f32);
    result["graphed_ms"] = ms_per_step(o, dev, [&] {
      a.copy_(fresh_a);
      u.copy_(fresh_u);
      graph.replay();
    });
    // The captured step's peak (what torch's max_memory_allocated over a
    // capture reports) and what the graph's pool holds.
    result["graphed_peak_mib"] = double(cu::memory_stats().peak_allocated_bytes) / double(1 << 20);
    result["graph_pool_mib"] = double(cu::memory_stats(graph.pool()).reserved_bytes) / double(1 << 20);
    if (o.profile) tgbench::profile_replay(graph, dev);
    result["graphed_loss"] = loss.item<double>();
  }
  if (o.json) {
    std::cout << result.dump(2) << "\n";
  } else {
    std::printf("FNO-2D step (%lld x %lld grid, batch %lld, width %lld, %lld modes, %lld layers%s, %s)\n",
                (long long)o.grid, (long long)o.grid, (long long)o.batch, (long long)o.width, (long long)o.modes,
                (long long)o.layers, o.pino ? ", PINO loss" : "", gpu ? "cuda" : "cpu");
    std::printf("  tapegrad eager    %8.3f ms/step\n", result["eager_ms"].get<double>());
    if (gpu) std::printf("  tapegrad graphed  %8.3f ms/step\n", result["graphed_ms"].get<double>());
  }
  return 0;
}
