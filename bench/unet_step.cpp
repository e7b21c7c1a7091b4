// The physics-informed U-Net training step, eager and as one replayed CUDA
// graph (docs/PERFORMANCE.md "A physics-informed U-Net step"): nn::UNet2d
// (4 levels of 32-64-128-256 channels, two 3 x 3 convolutions with
// GroupNorm(8) and GELU per level, 2 x 2 average pooling, bilinear
// upsampling with concatenated skips, a 1 x 1 head; float32, no TF32) on a
// batch of 16 fields [x, y, a] on a grid of --grid points a side. The loss
// is the data misfit plus the mean square of the residual u_xx + u_yy + f,
// the derivatives taken by autograd with respect to the input's coordinate
// channels (double backward through every convolution); then the gradient
// of the loss in the parameters and a capturable Adam step.
//
//   unet_step [--grid 64] [--batch 16] [--steps 20] [--repeats 3] [--device cuda|cpu] [--json] [--profile]
//   unet_step --conv [--n 16] [--c 64] [--hw 64] [--json]   conv2d alone: forward, backward, double backward
//   unet_step --part conv|gn|gelu|up|pool|cat [--grid 128]    one piece under the step's passes
//
// bench/peers/unet_peers.py runs the same step in PyTorch (eager, under
// torch.cuda.graph) and JAX (jit) with the same fields (its docstring).
#include <cmath>
#include <cstdio>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <tapegrad/tapegrad.h>

#include "step_timing.h"

namespace {

using tg::Tensor;

struct Options {
  int64_t grid = 64, batch = 16, n = 16, c = 64, hw = 64;
  int steps = 20, repeats = 3;
  std::string device = "cuda";
  bool json = false, conv = false, profile = false;
  std::string part, mode = "rev";
};

double mib(size_t bytes) { return double(bytes) / double(1 << 20); }

// conv2d alone (3 x 3, padding 1, no bias): forward; input and weight
// gradients; the double backward of sum(gx v) with gx the input gradient.
nlohmann::json conv_rows(const Options& o, tg::Device dev) {
  namespace ag = tg::autograd;
  const auto f32 = tg::TensorOptions().device(dev);
  tg::manual_seed(0);
  Tensor x = tg::randn({o.n, o.c, o.hw, o.hw}, f32).requires_grad_();
  Tensor w = (tg::randn({o.c, o.c, 3, 3}, f32) / std::sqrt(9.0 * double(o.c))).detach().requires_grad_();
  Tensor go = tg::randn({o.n, o.c, o.hw, o.hw}, f32), v = tg::randn({o.n, o.c, o.hw, o.hw}, f32);
  nlohmann::json r = {{"n", o.n}, {"c", o.c}, {"hw", o.hw}};
  r["fwd_ms"] = tgbench::ms_per_step(o.steps, o.repeats, dev, [&] {
    ag::NoGradGuard g;
    tg::conv2d(x, w, {}, {1}, {1});
  });
  Tensor y = tg::conv2d(x, w, {}, {1}, {1});
  r["bwd_ms"] = tgbench::ms_per_step(o.steps, o.repeats, dev, [&] { ag::grad({y}, {x, w}, {go}, true); });
  r["dgrad_ms"] = tgbench::ms_per_step(o.steps, o.repeats, dev, [&] { ag::grad({y}, {x}, {go}, true); });
  r["wgrad_ms"] = tgbench::ms_per_step(o.steps, o.repeats, dev, [&] { ag::grad({y}, {w}, {go}, true); });
  Tensor gx = ag::grad({y}, {x}, {go}, true, true)[0];
  r["dbl_ms"] = tgbench::ms_per_step(o.steps, o.repeats, dev, [&] {
    ag::grad({tg::sum(gx * v)}, {x, w}, {}, true, false, true);
  });
  return r;
}

// One piece of the U-Net under the step's passes (forward; the input
// derivative with create_graph; its derivative with create_graph; the
// parameters' gradient of a loss of both), on [batch, 32, grid, grid]: where
// the step's time goes, piece by piece.
double part_ms(const Options& o, tg::Device dev) {
  namespace ag = tg::autograd;
  const auto f32 = tg::TensorOptions().device(dev);
  tg::manual_seed(0);
  const int64_t c = 32, g = o.grid;
  const bool up = o.part == "up";
  Tensor x = tg::randn({o.batch, c, up ? g / 2 : g, up ? g / 2 : g}, f32).requires_grad_();
  Tensor w = (tg::randn({c, c, 3, 3}, f32) * 0.05).requires_grad_(), b = tg::zeros({c}, f32).requires_grad_();
  Tensor gw = tg::ones({c}, f32).requires_grad_(), gb = tg::zeros({c}, f32).requires_grad_();
  auto piece = [&](const Tensor& t) -> Tensor {
    if (o.part == "conv") return tg::conv2d(t, w, b, {1}, {1});
    if (o.part == "gn") return tg::group_norm(t, 8, gw, gb);
    if (o.part == "gelu") return tg::gelu(t);
    if (o.part == "up") return tg::interpolate(t, {}, {2.0}, "bilinear", false);
    if (o.part == "pool") return tg::avg_pool2d(t, {2});
    if (o.part == "cat") return tg::cat({t, t * 2.0}, 1);
    throw std::runtime_error("unknown --part " + o.part + " (conv, gn, gelu, up, pool, cat)");
  };
  std::vector<Tensor> params = {w, b, gw, gb};
  return tgbench::ms_per_step(o.steps, o.repeats, dev, [&] {
    Tensor u = piece(x);
    Tensor ux = ag::grad({tg::sum(u)}, {x}, {}, true, true)[0];
    Tensor uxx = ux.requires_grad() ? ag::grad({tg::sum(ux)}, {x}, {}, true, true, true)[0] : Tensor();
    Tensor loss = tg::mean(u * u) + (uxx.defined() ? tg::mean(uxx * uxx) : tg::sum(u) * 0.0);
    ag::grad({loss}, params, {}, false, false, true);
  });
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"The physics-informed U-Net training step, eager and graphed"};
  app.add_option("--grid", o.grid, "points per side");
  app.add_option("--batch", o.batch, "fields per step");
  app.add_option("--steps", o.steps, "steps per timing");
  app.add_option("--repeats", o.repeats, "timings (the median is reported)");
  app.add_option("--device", o.device, "cuda or cpu");
  app.add_flag("--conv", o.conv, "time conv2d alone (forward, backward, double backward)");
  app.add_option("--n", o.n, "conv: batch");
  app.add_option("--c", o.c, "conv: channels in and out");
  app.add_option("--hw", o.hw, "conv: height and width");
  app.add_flag("--json", o.json, "print JSON");
  app.add_flag("--profile", o.profile,
               "bracket one replay with cuda::profiler_start/stop (ncu --profile-from-start off; scripts/gpu.sh "
               "uprofile)");
  app.add_option("--mode", o.mode,
                 "rev: uxx, uyy by two more backward passes (the peers' way); fwd: by forward over reverse");
  app.add_option("--part", o.part, "time one piece under the step's passes: conv, gn, gelu, up, pool, cat");
  CLI11_PARSE(app, argc, argv);
  const bool gpu = o.device == "cuda" && tg::cuda::is_available();
  const tg::Device dev = gpu ? tg::Device(tg::kCUDA, 0) : tg::Device(tg::kCPU);
  if (!o.part.empty()) {
    std::printf("part %-5s [%lld, 32, %lld, %lld]: %.3f ms per step's passes\n", o.part.c_str(), (long long)o.batch,
                (long long)o.grid, (long long)o.grid, part_ms(o, dev));
    return 0;
  }
  if (o.conv) {
    nlohmann::json r = conv_rows(o, dev);
    if (o.json) std::cout << r.dump(2) << "\n";
    else
      std::printf(
          "conv2d 3x3 [%lld, %lld, %lld, %lld]: forward %.3f ms, backward %.3f ms (input %.3f, weight %.3f), "
          "double backward %.3f ms\n",
          (long long)o.n, (long long)o.c, (long long)o.hw, (long long)o.hw, r["fwd_ms"].get<double>(),
          r["bwd_ms"].get<double>(), r["dgrad_ms"].get<double>(), r["wgrad_ms"].get<double>(),
          r["dbl_ms"].get<double>());
    return 0;
  }

  tg::manual_seed(0);
  const auto f32 = tg::TensorOptions().device(dev);
  tg::nn::UNet2d model(3, 1, {32, 64, 128, 256}, 8, f32);
  tg::optim::AdamOptions ao;
  ao.lr = 1e-3;
  ao.capturable = gpu;
  std::vector<Tensor> params = model->parameters();
  tg::optim::Adam adam(params, ao);
  // The fields (unet_peers.py's): r_k = k / (G - 1); x along the width, y
  // along the height; a = 1 + 0.5 sin(2 pi x + phi_b) sin(2 pi y) with
  // phi_b = 2 pi b / B; u = sin(pi x) sin(pi y), f = 2 pi^2 u.
  const int64_t G = o.grid, B = o.batch;
  Tensor r = tg::arange(G, f32.dtype(tg::kFloat32)) / double(G - 1);
  Tensor xg = r.view({1, 1, 1, G}).expand({B, 1, G, G}).contiguous();
  Tensor yg = r.view({1, 1, G, 1}).expand({B, 1, G, G}).contiguous();
  Tensor phase = tg::arange(B, f32.dtype(tg::kFloat32)).view({B, 1, 1, 1}) * (2 * M_PI / double(B));
  Tensor a = tg::sin(xg * (2 * M_PI) + phase) * tg::sin(yg * (2 * M_PI)) * 0.5 + 1.0;
  Tensor u_data = tg::sin(xg * M_PI) * tg::sin(yg * M_PI), f = u_data * (2 * M_PI * M_PI);
  Tensor xc = xg.detach().requires_grad_(), yc = yg.detach().requires_grad_();

  // --mode fwd: uxx and uyy as Hessian-vector products by forward over
  // reverse: the input dual along [e_x, e_y] (a batched level of two
  // directions: the coordinate channels' all-ones fields), one backward pass
  // for ux, uy carrying both tangents, whose tangents are H e_x and H e_y;
  // their xc and yc channels are uxx and uyy.
  const bool fwd = o.mode == "fwd";
  if (!fwd && o.mode != "rev") throw std::runtime_error("--mode: rev or fwd, got " + o.mode);
  Tensor inp = tg::cat({xg, yg, a}, 1).detach().requires_grad_();
  Tensor dirs = tg::zeros({2, B, 3, G, G}, f32.dtype(tg::kFloat32));
  dirs.select(0, 0).select(1, 0).fill_(1.0);
  dirs.select(0, 1).select(1, 1).fill_(1.0);
  auto step = [&] {
    namespace ag = tg::autograd;
    namespace fad = tg::autograd::forward_ad;
    adam.zero_grad(/*set_to_none=*/false);
    Tensor u, uxx, uyy;
    if (fwd) {
      fad::dual_level level(2);
      Tensor at = fad::make_dual(inp, dirs);
      Tensor ud = model->forward(at);
      Tensor hv = fad::unpack_dual(ag::grad({tg::sum(ud)}, {at}, {}, true, true)[0]).tangent;
      u = fad::unpack_dual(ud).primal;
      uxx = hv.select(0, 0).narrow(1, 0, 1);
      uyy = hv.select(0, 1).narrow(1, 1, 1);
    } else {
      u = model->forward(tg::cat({xc, yc, a}, 1));
      std::vector<Tensor> g1 = ag::grad({tg::sum(u)}, {xc, yc}, {}, true, true);
      uxx = ag::grad({tg::sum(g1[0])}, {xc}, {}, true, true)[0];
      uyy = ag::grad({tg::sum(g1[1])}, {yc}, {}, true, true)[0];
    }
    Tensor res = uxx + uyy + f, d = u - u_data;
    Tensor loss = tg::mean(d * d) + tg::mean(res * res);
    ag::backward({loss}, {}, std::nullopt, false, params);
    adam.step();
    return loss;
  };
  nlohmann::json result = {{"grid", G}, {"batch", B}, {"device", gpu ? "cuda" : "cpu"}, {"mode", o.mode}};
  for (int i = 0; i < 3; ++i) {
    const double l = step().item<double>();
    if (i == 0) result["first_loss"] = l;
    if (i == 2) result["third_loss"] = l;
  }
  if (gpu) tg::cuda::reset_peak_memory_stats();
  result["eager_ms"] = tgbench::ms_per_step(o.steps, o.repeats, dev, step);
  if (gpu) {
    namespace cu = tg::cuda;
    result["eager_peak_mib"] = mib(cu::memory_stats().peak_allocated_bytes);
    cu::CUDAGraph graph;
    Tensor loss = tgbench::capture_after_warmup(graph, step, [] { tg::cuda::reset_peak_memory_stats(); });
    result["graphed_ms"] = tgbench::ms_per_step(o.steps, o.repeats, dev, [&] { graph.replay(); });
    result["graphed_peak_mib"] = mib(cu::memory_stats().peak_allocated_bytes);
    result["graphed_loss"] = loss.item<double>();
    result["captured_depth"] = graph.captured_depth();  // 0 when the graph was not relaxed
    result["relaxed_depth"] = graph.depth();
    if (o.profile) tgbench::profile_replay(graph, dev);
  }
  if (o.json) {
    std::cout << result.dump(2) << "\n";
  } else {
    std::printf("physics-informed U-Net step (%lld x %lld grid, batch %lld, %s)\n", (long long)G, (long long)G,
                (long long)B, gpu ? "cuda" : "cpu");
    std::printf("  tapegrad eager    %8.3f ms/step\n", result["eager_ms"].get<double>());
    if (gpu) std::printf("  tapegrad graphed  %8.3f ms/step\n", result["graphed_ms"].get<double>());
  }
  return 0;
}
