// Engine benchmarks:
// - Engine overhead: a chain of N scalar (0-dim, f32) mul+add pairs,
//   x = x * w + b, forward + backward into w and b, against the same forward
//   under no-grad. Per pair: (fwd+bwd - nograd fwd) / N; the counter
//   "us_per_pair" is each benchmark's time per pair.
// - Edge trimming: the Hessian benchmark's algorithm scaled for CPU (MLP
//   2 -> 256 x4 -> 3, tanh, B = 1000): jacobian rows grad(pred[:, i], x,
//   create_graph), then Hessian rows grad(jac_i[:, j], x, create_graph), with
//   trimming on (arg 1) and off (arg 0).
#include <benchmark/benchmark.h>

#include <cmath>

#include <tapegrad/tapegrad.h>

namespace {

using tg::Tensor;
namespace ag = tg::autograd;

void per_pair(benchmark::State& state, int64_t n) {
  state.counters["us_per_pair"] = benchmark::Counter(double(n) * double(state.iterations()),
                                                     benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void chain(const Tensor& x0, const Tensor& w, const Tensor& b, int64_t n, Tensor& out) {
  Tensor x = x0;
  for (int64_t i = 0; i < n; ++i)
    x = x * w + b;
  out = x;
}

void BM_ChainNoGrad(benchmark::State& state) {
  int64_t n = state.range(0);
  Tensor x = tg::scalar_tensor(1.0), w = tg::scalar_tensor(0.999), b = tg::scalar_tensor(0.001);
  tg::NoGradGuard no_grad;
  Tensor out;
  for (auto _ : state) {
    chain(x, w, b, n, out);
    benchmark::DoNotOptimize(out.data_ptr());
  }
  per_pair(state, n);
}

void BM_ChainForwardBackward(benchmark::State& state) {
  int64_t n = state.range(0);
  Tensor x = tg::scalar_tensor(1.0);
  Tensor w = tg::scalar_tensor(0.999).requires_grad_();
  Tensor b = tg::scalar_tensor(0.001).requires_grad_();
  Tensor out;
  for (auto _ : state) {
    chain(x, w, b, n, out);
    out.backward();
  }
  per_pair(state, n);
}

BENCHMARK(BM_ChainNoGrad)->Arg(1000)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ChainForwardBackward)->Arg(1000)->Unit(benchmark::kMicrosecond);

struct Mlp {
  std::vector<Tensor> w, b;
  Mlp() {
    tg::manual_seed(0);
    std::vector<int64_t> dims{2, 256, 256, 256, 256, 3};
    for (size_t i = 0; i + 1 < dims.size(); ++i) {
      double scale = 1.0 / std::sqrt(double(dims[i]));
      w.push_back((tg::randn({dims[i + 1], dims[i]}) * scale).requires_grad_());
      b.push_back(tg::zeros({dims[i + 1]}).requires_grad_());
    }
  }
  Tensor operator()(const Tensor& x) const {
    Tensor h = x;
    for (size_t i = 0; i < w.size(); ++i) {
      h = tg::linear(h, w[i], b[i]);
      if (i + 1 < w.size()) h = tg::tanh(h);
    }
    return h;
  }
};

// The grad-rows Hessian of the PINN benchmark: [B, 3, 2, 2].
Tensor hessian_rows(const Mlp& mlp, const Tensor& x) {
  Tensor pred = mlp(x);
  Tensor ones = tg::ones({x.size(0)});
  std::vector<Tensor> rows;
  for (int64_t i = 0; i < 3; ++i) {
    Tensor jac = ag::grad({pred.select(1, i)}, {x}, {ones}, true, true)[0];  // [B, 2]
    for (int64_t j = 0; j < 2; ++j)
      rows.push_back(ag::grad({jac.select(1, j)}, {x}, {ones}, true, true)[0]);
  }
  return tg::stack(rows, 1).view({x.size(0), 3, 2, 2});
}

void BM_HessianRows(benchmark::State& state) {
  bool trimming = state.range(0) != 0;
  Mlp mlp;
  tg::manual_seed(1);
  Tensor x = tg::rand({1000, 2}).requires_grad_();
  ag::set_edge_trimming(trimming);
  for (auto _ : state) {
    Tensor h = hessian_rows(mlp, x);
    benchmark::DoNotOptimize(h.data_ptr());
  }
  ag::set_edge_trimming(true);
  state.SetLabel(trimming ? "trimming on" : "trimming off");
}

BENCHMARK(BM_HessianRows)->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond)->MinTime(2.0);

}  // namespace

BENCHMARK_MAIN();
