// Elementwise throughput over 16M floats against memcpy of the same bytes.
// Bytes moved per iteration: memcpy 2N*4 (read + write); binary 3N*4;
// unary 2N*4. Reported as GB/s (bytes_per_second). The Step* rows: the
// latency of one op at a small training step's sizes ([1024, 64]: a CPU
// PINN step's activations), where the fork-join of a parallel loop counts.
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include <tapegrad/tapegrad.h>

namespace {

constexpr int64_t kN = int64_t(1) << 24;  // 16M floats = 64 MiB per tensor

void BM_Memcpy(benchmark::State& state) {
  std::vector<float> a(kN, 1.0f), b(kN);
  for (auto _ : state) {
    std::memcpy(b.data(), a.data(), kN * sizeof(float));
    benchmark::DoNotOptimize(b.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 2 * kN * int64_t(sizeof(float)));
}

// Out-of-place ops allocate their result; the _ variants write into an
// existing tensor, as memcpy does, to compare the kernels alone.
void BM_Add(benchmark::State& state) {
  tg::Tensor a = tg::rand({kN}), b = tg::rand({kN});
  for (auto _ : state)
    benchmark::DoNotOptimize(tg::add(a, b).data_ptr());
  state.SetBytesProcessed(state.iterations() * 3 * kN * 4);
}
void BM_Mul(benchmark::State& state) {
  tg::Tensor a = tg::rand({kN}), b = tg::rand({kN});
  for (auto _ : state)
    benchmark::DoNotOptimize(tg::mul(a, b).data_ptr());
  state.SetBytesProcessed(state.iterations() * 3 * kN * 4);
}
void BM_Tanh(benchmark::State& state) {
  tg::Tensor a = tg::rand({kN});
  for (auto _ : state)
    benchmark::DoNotOptimize(tg::tanh(a).data_ptr());
  state.SetBytesProcessed(state.iterations() * 2 * kN * 4);
}
void BM_AddInPlace(benchmark::State& state) {
  tg::Tensor a = tg::rand({kN}), b = tg::rand({kN});
  for (auto _ : state)
    benchmark::DoNotOptimize(a.add_(b).data_ptr());
  state.SetBytesProcessed(state.iterations() * 3 * kN * 4);
}
void BM_MulInPlace(benchmark::State& state) {
  tg::Tensor a = tg::ones({kN}), b = tg::ones({kN});
  for (auto _ : state)
    benchmark::DoNotOptimize(a.mul_(b).data_ptr());
  state.SetBytesProcessed(state.iterations() * 3 * kN * 4);
}
void BM_AddBroadcastRow(benchmark::State& state) {
  tg::Tensor a = tg::rand({kN / 1024, 1024}), b = tg::rand({1024});
  for (auto _ : state)
    benchmark::DoNotOptimize(tg::add(a, b).data_ptr());
  state.SetBytesProcessed(state.iterations() * 2 * kN * 4);
}
void BM_AddTransposed(benchmark::State& state) {
  tg::Tensor a = tg::rand({4096, 4096}), b = tg::rand({4096, 4096}).t();
  for (auto _ : state)
    benchmark::DoNotOptimize(tg::add(a, b).data_ptr());
  state.SetBytesProcessed(state.iterations() * 3 * kN * 4);
}
void BM_Sum(benchmark::State& state) {
  tg::Tensor a = tg::rand({kN});
  for (auto _ : state)
    benchmark::DoNotOptimize(tg::sum(a).data_ptr());
  state.SetBytesProcessed(state.iterations() * kN * 4);
}

// A CPU PINN step's sizes: B = 1024 rows, width 64.
void BM_StepAdd(benchmark::State& state) {
  tg::Tensor a = tg::rand({1024, 64}), b = tg::rand({1024, 64});
  for (auto _ : state)
    benchmark::DoNotOptimize(tg::add(a, b).data_ptr());
}
void BM_StepTanh(benchmark::State& state) {
  tg::Tensor a = tg::rand({1024, 64});
  for (auto _ : state)
    benchmark::DoNotOptimize(tg::tanh(a).data_ptr());
}
void BM_StepMatmul(benchmark::State& state) {  // x W^T: [1024, 64] x [64, 64]
  tg::Tensor a = tg::rand({1024, 64}), w = tg::rand({64, 64});
  for (auto _ : state)
    benchmark::DoNotOptimize(tg::matmul(a, w.t()).data_ptr());
}
void BM_StepWeightGrad(benchmark::State& state) {  // g^T x: [64, 1024] x [1024, 64]
  tg::Tensor g = tg::rand({1024, 64}), x = tg::rand({1024, 64});
  for (auto _ : state)
    benchmark::DoNotOptimize(tg::matmul(g.t(), x).data_ptr());
}
void BM_StepSumRows(benchmark::State& state) {  // a bias gradient
  tg::Tensor g = tg::rand({1024, 64});
  for (auto _ : state)
    benchmark::DoNotOptimize(tg::sum(g, {0}).data_ptr());
}

}  // namespace

BENCHMARK(BM_Memcpy)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Add)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Mul)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Tanh)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_AddInPlace)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_MulInPlace)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_AddBroadcastRow)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_AddTransposed)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Sum)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_StepAdd)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_StepTanh)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_StepMatmul)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_StepWeightGrad)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_StepSumRows)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_MAIN();
