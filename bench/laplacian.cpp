// The Laplacian benchmark (the PINN-in-high-dimension case): per-sample
// Laplacians of an MLP 100 -> 256 x4 -> 1 (tanh) at batch B, in two modes:
//   lap      the Laplacian only;
//   lap+bwd  then L.sum().backward() into the weights (a PINN loss step).
// Strategies: `laplacian` = tg::autograd::laplacian (Taylor mode, the
// forward Laplacian: one forward pass carrying the 100 first derivatives and
// one running sum of second derivatives); `trace` = the trace of per_sample_hessian(...,
// ForwardOverReverse) (the full Hessians, then their diagonals); `rows` =
// the trace of per_sample_hessian(..., Rows) (the algorithm PyTorch users
// write: 1 + n backward passes); `hutchinson` = laplacian_estimate with
// --samples Rademacher directions (its cost does not grow with n; its
// max |diff| is the estimate's error against the first exact strategy run). Prints median ms over --runs after
// --warmup and the peak device memory above what was allocated before, or
// JSON (--json) for bench/peers/laplacian_peers.py.
//
//   laplacian [--device cuda|cpu] [--batch 4096] [--inputs 100] [--width 256] [--depth 4]
//             [--strategy laplacian,trace,rows,hutchinson] [--samples 16] [--mode lap,lap+bwd]
//             [--runs 20] [--warmup 3] [--json]
#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <tapegrad/tapegrad.h>

#include "device_memory.h"

namespace {

using tg::Tensor;
namespace ag = tg::autograd;

using tgbench::allocated;
using tgbench::peak;
using tgbench::reset_peak;
using tgbench::sync;

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tapegrad Laplacian benchmark: per-sample Laplacians of an MLP n -> W x D -> 1 (tanh)"};
  app.option_defaults()->delimiter(',');
  std::string dev = tg::cuda::is_available() ? "cuda" : "cpu";
  int64_t batch = 0, inputs = 100, width = 256, depth = 4, samples = 16;
  int runs = 0, warmup = 3;
  bool json = false;
  std::vector<std::string> strategies{"laplacian", "trace", "rows"}, modes{"lap", "lap+bwd"};
  app.add_option("--device", dev, "cuda or cpu")->check(CLI::IsMember({"cuda", "cpu"}));
  app.add_option("--batch", batch, "batch size B (default 4096 on a GPU, 64 on the CPU)")->check(CLI::PositiveNumber);
  app.add_option("--inputs", inputs, "input dimension n")->check(CLI::PositiveNumber);
  app.add_option("--width", width, "hidden width")->check(CLI::PositiveNumber);
  app.add_option("--depth", depth, "hidden layers")->check(CLI::PositiveNumber);
  app.add_option("--strategy", strategies, "laplacian, trace, rows, hutchinson")
      ->check(CLI::IsMember({"laplacian", "trace", "rows", "hutchinson"}));
  app.add_option("--samples", samples, "hutchinson: directions per point")->check(CLI::PositiveNumber);
  app.add_option("--mode", modes, "lap, lap+bwd")->check(CLI::IsMember({"lap", "lap+bwd"}));
  app.add_option("--runs", runs, "timed runs (default 20 on a GPU, 3 on the CPU)")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "warm-up runs")->check(CLI::NonNegativeNumber);
  app.add_flag("--json", json, "print JSON");
  CLI11_PARSE(app, argc, argv);
  const bool cuda = dev == "cuda";
  if (cuda && !tg::cuda::is_available()) {
    std::cerr << "laplacian: --device cuda but no CUDA GPU is available\n";
    return 1;
  }
  if (batch == 0) batch = cuda ? 4096 : 64;
  if (runs == 0) runs = cuda ? 20 : 3;
  const tg::Device d = cuda ? tg::Device(tg::kCUDA, 0) : tg::Device(tg::kCPU);

  tg::manual_seed(1234);
  std::vector<Tensor> w, b;
  std::vector<int64_t> sizes{inputs};
  for (int64_t l = 0; l < depth; ++l)
    sizes.push_back(width);
  sizes.push_back(1);
  for (size_t l = 0; l + 1 < sizes.size(); ++l) {
    w.push_back((tg::randn({sizes[l + 1], sizes[l]}) * std::sqrt(1.0 / double(sizes[l]))).to(d).requires_grad_());
    b.push_back((tg::randn({sizes[l + 1]}) * 0.1).to(d).requires_grad_());
  }
  auto mlp = [&](const Tensor& x) {
    Tensor h = x;
    for (size_t l = 0; l + 1 < w.size(); ++l)
      h = tg::tanh(tg::linear(h, w[l], b[l]));
    return tg::linear(h, w.back(), b.back());
  };
  Tensor x = (tg::rand({batch, inputs}) * 2 - 1).to(d);
  auto trace = [&](const Tensor& h) {  // [B, 1, n, n] -> [B, 1]
    Tensor eye = tg::zeros({inputs, inputs});
    for (int64_t j = 0; j < inputs; ++j)
      eye.select(0, j).narrow(0, j, 1).fill_(1.0);
    return (h * eye.to(d)).sum({2, 3});
  };
  const std::string where = cuda ? tg::cuda::get_device_properties(0).name : std::string("CPU");
  Tensor ref;
  nlohmann::json rows = nlohmann::json::array();
  if (!json)
    std::printf(
        "tapegrad Laplacian benchmark on %s: MLP %lld -> %lld x%lld -> 1 (tanh), B = %lld, median of %d runs\n"
        "mode     strategy   median ms     min ms   peak MiB    max |diff|\n",
        where.c_str(), (long long)inputs, (long long)width, (long long)depth, (long long)batch, runs);
  for (const auto& mode : modes) {
    const bool bwd = mode == "lap+bwd";
    for (const auto& s : strategies) {
      auto lap = [&] {
        if (s == "laplacian") return ag::laplacian(mlp, x, bwd);
        if (s == "hutchinson") return ag::laplacian_estimate(mlp, x, samples, ag::Directions::Rademacher, bwd).value;
        auto strat = s == "trace" ? ag::HessianStrategy::ForwardOverReverse : ag::HessianStrategy::Rows;
        return trace(ag::per_sample_hessian(mlp, x, strat, bwd));
      };
      auto run = [&] {
        Tensor l = lap();
        if (bwd) {
          l.sum().backward();
          for (auto* ps : {&w, &b})
            for (Tensor& p : *ps)
              p.mutable_grad() = Tensor();
        }
        return l.detach();
      };
      try {  // a strategy that does not fit (the exact ones at large n) is reported, the others still run
        for (int i = 0; i < warmup; ++i)
          run();
        sync(cuda);
        int64_t base = allocated(cuda);
        reset_peak(cuda);
        Tensor l = run();
        sync(cuda);
        double peak_mib = double(peak(cuda) - base) / double(1 << 20);
        if (!ref.defined() && s != "hutchinson") ref = l;
        const double diff = ref.defined() ? tg::amax(tg::abs(l - ref)).item<double>() : std::nan("");
        std::vector<double> ms;
        for (int i = 0; i < runs; ++i) {
          auto t0 = std::chrono::steady_clock::now();
          run();
          sync(cuda);
          ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        }
        std::sort(ms.begin(), ms.end());
        double med = ms[ms.size() / 2];
        if (json)
          rows.push_back({{"mode", mode},
                          {"strategy", s},
                          {"median_ms", med},
                          {"min_ms", ms.front()},
                          {"peak_mib", peak_mib},
                          {"max_diff", diff}});
        else
          std::printf("%-8s %-10s %9.2f %10.2f %10.1f %13.3g\n", mode.c_str(), s.c_str(), med, ms.front(), peak_mib,
                      diff);
      } catch (const std::exception& e) {
        const std::string what = std::string(e.what()).substr(0, 300);
        if (json) rows.push_back({{"mode", mode}, {"strategy", s}, {"error", what}});
        else std::printf("%-8s %-10s failed: %s\n", mode.c_str(), s.c_str(), what.c_str());
      }
    }
  }
  if (json)
    std::cout << nlohmann::json{{"device", where},
                                {"inputs", inputs},
                                {"batch", batch},
                                {"samples", samples},
                                {"results", rows}}
                     .dump()
              << "\n";
  return 0;
}
