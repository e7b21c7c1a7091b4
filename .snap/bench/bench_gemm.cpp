// f32 GEMM through tg::mm against Eigen called directly (single-threaded:
// Eigen parallelises only with OpenMP, which we do not build with) on
// 512x512x512 and 10000x512x512. Reported in GFLOP/s (items_per_second).
#include <benchmark/benchmark.h>

#include <Eigen/Core>

#include <tapegrad/tapegrad.h>

namespace {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

void set_flops(benchmark::State& state, int64_t m, int64_t k, int64_t n) {
  state.SetItemsProcessed(state.iterations() * 2 * m * k * n);
  state.counters["GFLOP/s"] =
      benchmark::Counter(double(2 * m * k * n) * double(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}

void BM_EigenDirect(benchmark::State& state) {
  int64_t m = state.range(0), k = 512, n = 512;
  RowMat a = RowMat::Random(m, k), b = RowMat::Random(k, n), c(m, n);
  for (auto _ : state) {
    c.noalias() = a * b;
    benchmark::DoNotOptimize(c.data());
  }
  set_flops(state, m, k, n);
}

void BM_TapegradMm(benchmark::State& state) {
  int64_t m = state.range(0), k = 512, n = 512;
  tg::Tensor a = tg::rand({m, k}), b = tg::rand({k, n});
  for (auto _ : state)
    benchmark::DoNotOptimize(tg::mm(a, b).data_ptr());
  set_flops(state, m, k, n);
}

void BM_TapegradMmTransposedB(benchmark::State& state) {  // x @ w^T, as linear
  int64_t m = state.range(0), k = 512, n = 512;
  tg::Tensor a = tg::rand({m, k}), w = tg::rand({n, k});
  for (auto _ : state)
    benchmark::DoNotOptimize(tg::mm(a, w.t()).data_ptr());
  set_flops(state, m, k, n);
}

}  // namespace

BENCHMARK(BM_EigenDirect)->Arg(512)->Arg(10000)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_TapegradMm)->Arg(512)->Arg(10000)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_TapegradMmTransposedB)->Arg(512)->Arg(10000)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
