// The neural ODE benchmark of issue 49 (docs/PERFORMANCE.md "odeint"): f an
// MLP 2 -> 64 -> 64 -> 2 (tanh), 256 initial states, outputs at 50 times in
// [0, 10], float32; the forward solve and the gradient of mean(y^2) over
// every output in f's parameters and y0:
//   rk4     21 equal steps between outputs (1029 steps: at least the
//           peers' 1000), by backpropagation; eager, and graphed on CUDA
//           (the whole solve and gradient replayed as one CUDA graph)
//   dopri5  rtol 1e-5, atol 1e-6; gradient by backpropagation and by the
//           adjoint; eager (it reads its error estimates on the host); on
//           CUDA the adjoint once more with OdeOptions::graphed_adjoint
//           (the backward's evaluations of f and its vector-Jacobian
//           product replayed from a CUDA graph), and the forward solve once
//           more with f = tg::cuda::graphed(mlp) (recorded once, replayed at
//           every evaluation; no gradient: its outputs have no history);
//           the adjoint's backward error norm over the whole augmented
//           state (the peers' default), then once more with the seminorm
//   tsit5   as dopri5
// bench/peers/odeint_peers.py runs torchdiffeq, JAX's odeint and diffrax on
// the same problem.
//
// Graphed rows also report the graph's nodes per step on its longest chain
// (after fusion) and how many nodes fusion removed.
//
//   odeint_bench [--batch 256] [--times 50] [--steps 5] [--repeats 3] [--device cuda|cpu] [--json]
//                [--profile rk4|rk4-grad|dopri5|dopri5-grad]
#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <tapegrad/tapegrad.h>

#include "step_timing.h"

using tg::Tensor;
namespace ode = tg::ode;

int main(int argc, char** argv) {
  int64_t batch = 256, times = 50, per_interval = 21;
  int steps = 5, repeats = 3;
  std::string device = "cuda";
  bool json = false;
  std::string profile;
  CLI::App app{"Neural ODE solves and gradients (issue 49's benchmark)"};
  app.add_option("--batch", batch, "initial states");
  app.add_option("--times", times, "output times in [0, 10]");
  app.add_option("--per-interval", per_interval, "rk4: steps between consecutive outputs");
  app.add_option("--steps", steps, "calls per timing");
  app.add_option("--repeats", repeats, "timings (the median is reported)");
  app.add_option("--device", device, "cuda or cpu");
  app.add_flag("--json", json, "print JSON");
  app.add_option("--profile", profile,
                 "bracket one call (rk4: one replay of its graph) with cuda::profiler_start/stop for ncu "
                 "--profile-from-start off, then stop (scripts/gpu.sh oprofile)")
      ->check(CLI::IsMember({"rk4", "rk4-grad", "dopri5", "dopri5-grad"}));
  CLI11_PARSE(app, argc, argv);
  const bool gpu = device == "cuda" && tg::cuda::is_available();
  const tg::Device dev = gpu ? tg::Device(tg::kCUDA, 0) : tg::Device(tg::kCPU);
  const auto f32 = tg::TensorOptions().device(dev);
  tg::manual_seed(0);
  auto mlp = tg::nn::MLP({2, 64, 64, 2}, "tanh", f32);
  std::vector<Tensor> params = mlp->parameters();
  Tensor y0 = tg::randn({batch, 2}, f32).requires_grad_();
  Tensor t = tg::linspace(0, 10, times, f32);
  auto f = [&](const Tensor&, const Tensor& y) { return mlp->forward(y); };
  std::vector<Tensor> wrt = params;
  wrt.push_back(y0);

  nlohmann::json rows = nlohmann::json::array();
  auto row = [&](const std::string& name, ode::OdeOptions o) {
    o.params = params;
    ode::OdeStats st;
    auto forward = [&] {
      tg::autograd::NoGradGuard ng;
      return ode::odeint(f, y0, t, o, &st);
    };
    auto gradient = [&] {
      Tensor ys = ode::odeint(f, y0, t, o);
      return tg::autograd::grad({tg::mean(ys * ys)}, wrt);
    };
    const bool rk = o.method == ode::Method::RK4, adj = o.gradient == ode::Gradient::Adjoint;
    if (!profile.empty()) {  // one call of the row asked for, nothing timed
      const bool grad = profile.size() > 5 && profile.substr(profile.size() - 5) == "-grad";
      if (adj || profile.substr(0, profile.find('-')) != name || !gpu) return;
      tg::cuda::CUDAGraph g;
      if (rk)
        tgbench::capture_after_warmup(
            g, [&] { return grad ? gradient().size() : forward().numel(); }, [] {});
      grad ? (void)gradient() : (void)forward();  // the eager call warmed up
      tgbench::sync(true);
      tg::cuda::profiler_start();
      rk ? g.replay() : grad ? (void)gradient() : (void)forward();
      tgbench::sync(true);
      tg::cuda::profiler_stop();
      return;
    }
    nlohmann::json r = {{"solver", name}};
    r["forward_ms"] = tgbench::ms_per_step(steps, repeats, dev, [&] { forward(); });
    r["evaluations"] = st.evaluations;
    r["gradient_ms"] = tgbench::ms_per_step(steps, repeats, dev, [&] { gradient(); });
    if (!gpu) {  // tensors made per call (each op makes at least one): the op count's proxy
      auto allocs = [](auto&& call) {
        const int64_t before = tg::cpu_allocator_stats().num_allocs;
        call();
        return tg::cpu_allocator_stats().num_allocs - before;
      };
      r["forward_allocs"] = allocs(forward);
      r["gradient_allocs"] = allocs(gradient);
    }
    if (gpu && rk) {  // fixed steps: the solve and its gradient as one CUDA graph
      tg::cuda::CUDAGraph gf, gg;
      tgbench::capture_after_warmup(gf, forward, [] {});
      r["forward_graphed_ms"] = tgbench::ms_per_step(steps, repeats, dev, [&] { gf.replay(); });
      tgbench::capture_after_warmup(gg, gradient, [] {});
      r["gradient_graphed_ms"] = tgbench::ms_per_step(steps, repeats, dev, [&] { gg.replay(); });
      const double n_steps = double(st.accepted);
      r["forward_depth_per_step"] = double(gf.depth()) / n_steps;
      r["gradient_depth_per_step"] = double(gg.depth()) / n_steps;
      r["fused_nodes"] = {gf.fused_nodes(), gg.fused_nodes()};
    }
    rows.push_back(r);
  };
  ode::OdeOptions rk4;
  rk4.method = ode::Method::RK4;
  rk4.steps_per_interval = per_interval;
  row("rk4", rk4);
  // The adaptive rows' options and names.
  auto adaptive = [](ode::Method m) {
    ode::OdeOptions o;
    o.method = m;
    o.rtol = 1e-5;
    o.atol = 1e-6;
    return o;
  };
  auto name_of = [](ode::Method m) { return std::string(m == ode::Method::Dopri5 ? "dopri5" : "tsit5"); };
  for (auto m : {ode::Method::Dopri5, ode::Method::Tsit5}) {
    ode::OdeOptions o = adaptive(m);
    const std::string name = name_of(m);
    row(name, o);
    o.gradient = ode::Gradient::Adjoint;
    row(name + " adjoint", o);
    if (gpu) {  // the backward's evaluations of f and its vector-Jacobian product replayed from CUDA graphs
      o.graphed_adjoint = true;
      row(name + " adjoint graphed_adjoint", o);
    }
    // The parameters' gradients out of the backward's error norm (torchdiffeq's
    // adjoint_options=dict(norm="seminorm")); the rows above use the full norm,
    // as the peers' defaults do.
    o.adjoint_seminorm = true;
    row(name + (gpu ? " adjoint graphed_adjoint seminorm" : " adjoint seminorm"), o);
  }
  if (!profile.empty()) return 0;
  if (gpu) {  // forward solves with f recorded once by tg::cuda::graphed and replayed at every evaluation and call
    tg::cuda::GraphedFunction mlp_graphed(
        [&](const std::vector<Tensor>& a) { return std::vector<Tensor>{mlp->forward(a[0])}; });
    auto fg = [&](const Tensor&, const Tensor& y) { return mlp_graphed({y})[0]; };
    for (auto m : {ode::Method::Dopri5, ode::Method::Tsit5}) {
      const ode::OdeOptions o = adaptive(m);
      ode::OdeStats st;
      nlohmann::json r = {{"solver", name_of(m) + " f graphed"}};
      r["forward_ms"] = tgbench::ms_per_step(steps, repeats, dev, [&] {
        tg::autograd::NoGradGuard ng;
        ode::odeint(fg, y0, t, o, &st);
      });
      r["evaluations"] = st.evaluations;
      r["gradient_ms"] = nullptr;  // f graphed so has no autograd history
      r["replays"] = mlp_graphed.counters().replays;
      rows.push_back(r);
    }
  }
  if (json) {
    std::cout << nlohmann::json{{"device", gpu ? "cuda" : "cpu"}, {"batch", batch}, {"rows", rows}}.dump(2) << "\n";
    return 0;
  }
  std::printf("neural ODE (MLP 2-64-64-2 tanh, %lld states, %lld outputs in [0, 10], float32, %s)\n", (long long)batch,
              (long long)times, gpu ? "cuda" : "cpu");
  for (const auto& r : rows) {
    std::printf("  %-16s forward %9.3f ms  gradient %9.3f ms  (%lld evaluations)",
                r["solver"].get<std::string>().c_str(), r["forward_ms"].get<double>(),
                r["gradient_ms"].is_number() ? r["gradient_ms"].get<double>() : NAN,
                (long long)r["evaluations"].get<int64_t>());
    if (r.contains("forward_graphed_ms"))
      std::printf("  graphed %9.3f / %9.3f ms (longest chain %.1f / %.1f nodes per step; fusion removed %zu / %zu)",
                  r["forward_graphed_ms"].get<double>(), r["gradient_graphed_ms"].get<double>(),
                  r["forward_depth_per_step"].get<double>(), r["gradient_depth_per_step"].get<double>(),
                  r["fused_nodes"][0].get<size_t>(), r["fused_nodes"][1].get<size_t>());
    if (r.contains("forward_allocs"))
      std::printf("  allocations %lld / %lld", (long long)r["forward_allocs"].get<int64_t>(),
                  (long long)r["gradient_allocs"].get<int64_t>());
    std::printf("\n");
  }
  return 0;
}
