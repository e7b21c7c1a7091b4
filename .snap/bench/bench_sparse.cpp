// Sparse gradient accumulation against densifying first, CPU and
// GPU. Workload: an embedding table [V = 200000, 64] f32 looked up K times
// (4096 random rows each) in one loss; backward accumulates K gradients into
// the table's .grad:
// - Sparse: embedding(..., sparse = true): each gradient is a COO tensor of
//   4096 rows; the engine concatenates them (InputBuffer, sparse + sparse),
//   and the step ends with coalesce() (what an optimizer reads);
// - Dense: embedding(..., sparse = false): each gradient is a dense [V, 64]
//   table (zeros + scatter-add), accumulated in place.
// - DenseDeterministic: the dense path in deterministic mode (the scatter-add
//   sorts the targets and sums each in order instead of using atomics): the
//   cost of tg::use_deterministic_algorithms on embedding backward.
// Counters: peak_MiB = the allocator's peak during one iteration above what
// was live before it (CPU allocator or CUDA caching allocator), and grad_MiB,
// the bytes .grad holds at the end.
#include <benchmark/benchmark.h>

#include <tapegrad/tapegrad.h>

namespace {

using tg::Tensor;
constexpr int64_t kV = 200000, kDim = 64, kRows = 4096;

int64_t live_bytes(const tg::Device& d) {
  return d.is_cpu() ? tg::cpu_allocator_stats().live_bytes : tg::cuda::memory_stats(d.index()).allocated_bytes;
}
int64_t peak_bytes(const tg::Device& d) {
  return d.is_cpu() ? tg::cpu_allocator_stats().peak_bytes : tg::cuda::memory_stats(d.index()).peak_allocated_bytes;
}
void reset_peak(const tg::Device& d) {
  if (d.is_cpu()) tg::reset_cpu_peak_bytes();
  else tg::cuda::reset_peak_memory_stats(d.index());
}
void sync(const tg::Device& d) {
  if (d.is_cuda()) tg::cuda::synchronize();
}

int64_t grad_bytes(const Tensor& g) {
  if (!g.is_sparse()) return g.numel() * int64_t(tg::element_size(g.dtype()));
  return g._indices().numel() * 8 + g._values().numel() * int64_t(tg::element_size(g.dtype()));
}

void run(benchmark::State& state, const tg::Device& d, bool sparse, bool deterministic = false) {
  if (d.is_cuda() && !tg::cuda::is_available()) return state.SkipWithError("no CUDA GPU here");
  tg::DeterministicGuard mode(deterministic);
  const int64_t K = state.range(0);
  tg::manual_seed(0);
  Tensor w = tg::randn({kV, kDim}, tg::TensorOptions().device(d)).requires_grad_(true);
  std::vector<Tensor> rows;
  for (int64_t k = 0; k < K; ++k)
    rows.push_back((tg::rand({kRows}, tg::TensorOptions().device(d)) * double(kV)).to(tg::kInt64));
  auto step = [&] {
    w.mutable_grad() = Tensor();
    Tensor loss;
    for (int64_t k = 0; k < K; ++k) {
      Tensor l = tg::embedding(w, rows[size_t(k)], sparse).sum();
      loss = loss.defined() ? loss + l : l;
    }
    loss.backward();
    if (sparse) w.mutable_grad() = w.grad().coalesce();
    sync(d);
  };
  step();  // warm-up
  double peak = 0, gb = 0;
  for (auto _ : state) {
    w.mutable_grad() = Tensor();
    sync(d);
    int64_t before = live_bytes(d);
    reset_peak(d);
    step();
    peak = double(peak_bytes(d) - before);
    gb = double(grad_bytes(w.grad()));
  }
  state.counters["peak_MiB"] = peak / (1 << 20);
  state.counters["grad_MiB"] = gb / (1 << 20);
}

void BM_EmbeddingGradSparse_Cpu(benchmark::State& s) { run(s, tg::Device(tg::kCPU), true); }
void BM_EmbeddingGradDense_Cpu(benchmark::State& s) { run(s, tg::Device(tg::kCPU), false); }
void BM_EmbeddingGradSparse_Cuda(benchmark::State& s) { run(s, tg::Device(tg::kCUDA, 0), true); }
void BM_EmbeddingGradDense_Cuda(benchmark::State& s) { run(s, tg::Device(tg::kCUDA, 0), false); }
void BM_EmbeddingGradDenseDeterministic_Cuda(benchmark::State& s) { run(s, tg::Device(tg::kCUDA, 0), false, true); }

BENCHMARK(BM_EmbeddingGradSparse_Cpu)->Arg(1)->Arg(8)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_EmbeddingGradDense_Cpu)->Arg(1)->Arg(8)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_EmbeddingGradSparse_Cuda)->Arg(1)->Arg(8)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_EmbeddingGradDense_Cuda)->Arg(1)->Arg(8)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_EmbeddingGradDenseDeterministic_Cuda)->Arg(1)->Arg(8)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
