// The Hessian benchmark, tapegrad's main job: per-sample input
// Hessians of a PINN-style MLP 2 -> 512 x6 -> 3 (inputs x, y; outputs u, v,
// p) at batch B, H [B, 3, 2, 2], in two modes:
//   hess      the Hessian only;
//   hess+bwd  then H.sum().backward() into the weights, as PINN training does.
// Strategies: `rows`, the reference algorithm PyTorch users write (grad rows
// with create_graph), `batched` (batched cotangents) and `forward` (forward
// over reverse), through tg::autograd::per_sample_hessian on the network as
// an opaque function; and
// `general` (Taylor mode, HessianStrategy::Taylor); and `taylor`,
// tg::autograd::mlp_taylor, the same Taylor pass given the MLP's weights
// (recorded only in hess+bwd). Prints a table (or --json): median ms over --runs
// after --warmup, peak device memory, the GEMM FLOPs of one run and their
// floor at the cuBLAS rate measured here for the layer's shape, and the max
// error against a float64 run of the reference path on --check samples.
//
//   hessian [--device cuda|cpu] [--batch B] [--width 512] [--depth 6]
//           [--act silu,tanh,relu] [--precision fp32,tf32] [--mode hess,hess+bwd]
//           [--strategy rows,batched,forward,general,taylor] [--runs 20] [--warmup 3] [--check 64]
//           [--trimming on|off] [--deterministic on|off] [--json] [--out FILE]
// Defaults: on a GPU B = 10000 and every combination; on the CPU B = 256,
// silu, fp32, 5 runs (the README's main command runs it either way).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <fstream>
#include <string>
#include <type_traits>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <tapegrad/tapegrad.h>
#include <tapegrad/tensor/raw.h>

#include "../device_memory.h"

namespace {

using tg::Tensor;
namespace ag = tg::autograd;

struct Options {
  bool cuda = false;
  int64_t batch = 0, width = 512, depth = 6;
  std::vector<std::string> acts, precisions, modes{"hess", "hess+bwd"},
      strategies{"rows", "batched", "forward", "general", "taylor"};
  int runs = 0, warmup = 3;
  int64_t check = 64;
  bool trimming = true, json = false, deterministic = false;
  std::string out;  // also write the JSON here
};

// Arguments (CLI11). Defaults depend on the device: on a GPU B = 10000 and
// every combination, on the CPU B = 256, silu, fp32, 5 runs.
Options parse(int argc, char** argv) {
  CLI::App app{"tapegrad Hessian benchmark: per-sample input Hessians of an MLP 2 -> W x D -> 3"};
  app.option_defaults()->delimiter(',');
  Options o;
  std::string dev = tg::cuda::is_available() ? "cuda" : "cpu", trimming = "on", deterministic = "off";
  int64_t batch = 0;
  int runs = 0;
  app.add_option("--device", dev, "cuda or cpu")->check(CLI::IsMember({"cuda", "cpu"}));
  app.add_option("--batch", batch, "batch size B (default 10000 on a GPU, 256 on the CPU)")->check(CLI::PositiveNumber);
  app.add_option("--width", o.width, "hidden width")->check(CLI::PositiveNumber);
  app.add_option("--depth", o.depth, "hidden layers")->check(CLI::PositiveNumber);
  app.add_option("--act", o.acts, "activations")->check(CLI::IsMember({"silu", "tanh", "relu"}));
  app.add_option("--precision", o.precisions, "GEMM precisions")->check(CLI::IsMember({"fp32", "tf32"}));
  app.add_option("--mode", o.modes, "hess, hess+bwd")->check(CLI::IsMember({"hess", "hess+bwd"}));
  app.add_option("--strategy", o.strategies,
                 "rows, batched, forward (forward over reverse), general (Taylor mode), taylor (mlp_taylor)")
      ->check(CLI::IsMember({"rows", "batched", "forward", "general", "taylor"}));
  app.add_option("--runs", runs, "timed runs (default 20 on a GPU, 5 on the CPU)")->check(CLI::PositiveNumber);
  app.add_option("--warmup", o.warmup, "warm-up runs")->check(CLI::NonNegativeNumber);
  app.add_option("--check", o.check, "samples checked against float64")->check(CLI::PositiveNumber);
  app.add_option("--trimming", trimming, "edge trimming")->check(CLI::IsMember({"on", "off"}));
  app.add_option("--deterministic", deterministic, "deterministic algorithms")->check(CLI::IsMember({"on", "off"}));
  app.add_flag("--json", o.json, "print JSON instead of the table");
  app.add_option("--out", o.out, "also write the JSON to this file");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e));
  }
  if (dev == "cuda" && !tg::cuda::is_available()) {
    std::cerr << "hessian: --device cuda but no CUDA GPU is available\n";
    std::exit(2);
  }
  o.cuda = dev == "cuda";
  o.batch = batch ? batch : (o.cuda ? 10000 : 256);
  o.runs = runs ? runs : (o.cuda ? 20 : 5);
  if (o.acts.empty())
    o.acts = o.cuda ? std::vector<std::string>{"silu", "tanh", "relu"} : std::vector<std::string>{"silu"};
  if (o.precisions.empty())
    o.precisions = o.cuda ? std::vector<std::string>{"fp32", "tf32"} : std::vector<std::string>{"fp32"};
  o.trimming = trimming == "on";
  o.deterministic = deterministic == "on";
  o.check = std::min(o.check, o.batch);
  return o;
}

tg::Activation activation_kind(const std::string& a) {
  if (a == "silu") return tg::Activation::Silu;
  if (a == "tanh") return tg::Activation::Tanh;
  return tg::Activation::Relu;
}

Tensor activation(const std::string& a, const Tensor& h) {
  if (a == "silu") return tg::silu(h);
  if (a == "tanh") return tg::tanh(h);
  return tg::relu(h);
}

struct Mlp {
  std::vector<Tensor> w, b;
  std::string act;
  Tensor operator()(const Tensor& x) const {
    Tensor h = x;
    for (size_t l = 0; l < w.size(); ++l) {
      h = tg::linear(h, w[l], b[l]);
      if (l + 1 < w.size()) h = activation(act, h);
    }
    return h;
  }
  Mlp to(tg::Device d, tg::ScalarType t) const {
    Mlp m{{}, {}, act};
    for (size_t l = 0; l < w.size(); ++l) {
      m.w.push_back(w[l].detach().to(d).to(t).requires_grad_());
      m.b.push_back(b[l].detach().to(d).to(t).requires_grad_());
    }
    return m;
  }
};

Mlp make_mlp(const Options& o, const std::string& act, tg::Device d) {
  tg::manual_seed(1234);
  Mlp m{{}, {}, act};
  std::vector<int64_t> sizes{2};
  for (int64_t l = 0; l < o.depth; ++l)
    sizes.push_back(o.width);
  sizes.push_back(3);
  for (size_t l = 0; l + 1 < sizes.size(); ++l) {
    double scale = std::sqrt(1.0 / double(sizes[l]));  // LeCun normal
    m.w.push_back(tg::randn({sizes[l + 1], sizes[l]}) * scale);
    m.b.push_back(tg::randn({sizes[l + 1]}) * 0.1);
  }
  return m.to(d, tg::kFloat32);
}

using tgbench::allocated;
using tgbench::peak;
using tgbench::reset_peak;
using tgbench::sync;

// ms of one GEMM of the hidden layer's shape [B, W] x [W, W], for the floor.
double gemm_rate_flops_per_ms(const Options& o, tg::Device d) {
  Tensor a = tg::randn({o.batch, o.width}).to(d), b = tg::randn({o.width, o.width}).to(d);
  for (int i = 0; i < 3; ++i)
    tg::mm(a, b);
  sync(o.cuda);
  const int reps = o.cuda ? 50 : 3;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i)
    tg::mm(a, b);
  sync(o.cuda);
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / reps;
  return 2.0 * double(o.batch) * double(o.width) * double(o.width) / ms;
}

struct Row {
  std::string act, precision, mode, strategy;
  double median_ms = 0, min_ms = 0, peak_mib = 0, gflop = 0, floor_ms = 0, max_err = 0, ref_scale = 0;
};

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  const tg::Device dev = o.cuda ? tg::Device(tg::kCUDA, 0) : tg::Device(tg::kCPU);
  ag::set_edge_trimming(o.trimming);
  tg::use_deterministic_algorithms(o.deterministic);
  std::string where = o.cuda ? tg::cuda::get_device_properties(0).name : std::string("CPU");
  if (!o.json)
    std::printf(
        "tapegrad Hessian benchmark on %s: MLP 2 -> %lld x%lld -> 3, B = %lld, H [B, 3, 2, 2], "
        "median of %d runs after %d warm-up, trimming %s, deterministic %s\n",
        where.c_str(), (long long)o.width, (long long)o.depth, (long long)o.batch, o.runs, o.warmup,
        o.trimming ? "on" : "off", o.deterministic ? "on" : "off");
  tg::manual_seed(99);
  Tensor x = (tg::rand({o.batch, 2}) * 2 - 1).to(dev);
  std::vector<Row> rows;
  for (const auto& precision : o.precisions) {
    tg::cuda::set_allow_tf32(o.cuda && precision == "tf32");
    const double rate = gemm_rate_flops_per_ms(o, dev);
    for (const auto& act : o.acts) {
      Mlp mlp = make_mlp(o, act, dev);
      // The float64 reference on the first `check` samples: the rows path.
      Mlp mlp64 = mlp.to(dev, tg::kFloat64);
      Tensor x64 = x.narrow(0, 0, o.check).to(tg::kFloat64);
      Tensor ref = ag::per_sample_hessian(std::cref(mlp64), x64, ag::HessianStrategy::Rows);
      for (const auto& mode : o.modes) {
        for (const auto& strategy : o.strategies) {
          const bool bwd = mode == "hess+bwd";
          const auto s = strategy == "rows"      ? ag::HessianStrategy::Rows
                         : strategy == "forward" ? ag::HessianStrategy::ForwardOverReverse
                         : strategy == "general" ? ag::HessianStrategy::Taylor
                                                 : ag::HessianStrategy::BatchedCotangents;
          auto hessian = [&] {
            if (strategy != "taylor") return ag::per_sample_hessian(std::cref(mlp), x, s, /*create_graph=*/bwd);
            tg::autograd::AutoGradMode record(bwd);
            return ag::mlp_taylor(mlp.w, mlp.b, activation_kind(act), x).hessian;
          };
          auto run = [&] {
            Tensor h = hessian();
            if (bwd) {
              h.sum().backward();
              for (auto& w : mlp.w)
                w.mutable_grad() = Tensor();
              for (auto& b : mlp.b)
                b.mutable_grad() = Tensor();
            }
            return h.detach();
          };
          for (int i = 0; i < o.warmup; ++i)
            run();
          sync(o.cuda);
          Row r{act, precision, mode, strategy};
          // Peak memory and FLOPs of one run, then the timed runs.
          int64_t base = allocated(o.cuda);
          reset_peak(o.cuda);
          uint64_t f0 = tg::raw::gemm_flops();
          Tensor h = run();
          sync(o.cuda);
          r.gflop = double(tg::raw::gemm_flops() - f0) / 1e9;
          r.peak_mib = double(peak(o.cuda) - base) / (1 << 20);
          r.floor_ms = r.gflop * 1e9 / rate;
          Tensor diff = tg::abs(h.narrow(0, 0, o.check).to(tg::kFloat64) - ref);
          r.max_err = tg::amax(diff).item<double>();
          r.ref_scale = tg::amax(tg::abs(ref)).item<double>();
          h = Tensor();
          std::vector<double> ms;
          for (int i = 0; i < o.runs; ++i) {
            auto t0 = std::chrono::steady_clock::now();
            run();
            sync(o.cuda);
            ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
          }
          std::sort(ms.begin(), ms.end());
          r.median_ms = ms[ms.size() / 2];
          r.min_ms = ms.front();
          rows.push_back(r);
          if (!o.json) {
            if (rows.size() == 1)
              std::printf("%-5s %-4s %-8s %-8s %10s %10s %10s %10s %10s %12s\n", "act", "prec", "mode", "strategy",
                          "median ms", "min ms", "peak MiB", "GEMM GFLOP", "floor ms", "max err");
            std::printf("%-5s %-4s %-8s %-8s %10.2f %10.2f %10.1f %10.2f %10.2f %12.3g\n", act.c_str(),
                        precision.c_str(), mode.c_str(), strategy.c_str(), r.median_ms, r.min_ms, r.peak_mib, r.gflop,
                        r.floor_ms, r.max_err);
            std::fflush(stdout);
          }
        }
      }
    }
  }
  nlohmann::json doc = {{"device", where},
                        {"batch", o.batch},
                        {"width", o.width},
                        {"depth", o.depth},
                        {"runs", o.runs},
                        {"trimming", o.trimming},
                        {"deterministic", o.deterministic},
                        {"results", nlohmann::json::array()}};
  for (const Row& r : rows)
    doc["results"].push_back({{"act", r.act},
                              {"precision", r.precision},
                              {"mode", r.mode},
                              {"strategy", r.strategy},
                              {"median_ms", r.median_ms},
                              {"min_ms", r.min_ms},
                              {"peak_mib", r.peak_mib},
                              {"gemm_gflop", r.gflop},
                              {"floor_ms", r.floor_ms},
                              {"max_abs_err", r.max_err},
                              {"ref_max_abs", r.ref_scale}});
  if (o.json) std::cout << doc.dump(2) << "\n";
  if (!o.out.empty()) {
    std::ofstream f(o.out);
    f << doc.dump(2) << "\n";
    if (!f) {
      std::cerr << "hessian: cannot write " << o.out << "\n";
      return 1;
    }
    if (!o.json) std::printf("results written to %s\n", o.out.c_str());
  }
  return 0;
}
