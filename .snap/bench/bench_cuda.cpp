// GPU benchmarks, built when the CUDA backend is.
// - Elementwise bandwidth against a device-to-device cudaMemcpyAsync of the
//   same bytes (64M floats = 256 MiB per tensor), GB/s from CUDA events. The
//   "Misaligned" variants start one element into their storage, so they take
//   the generic (scalar) loop instead of the 16-byte vectorized one.
// - GEMM: tg::mm against cublasSgemm called directly, f32 (no TF32), TFLOP/s.
// - Engine overhead: the chain of bench_autograd (x = x * w + b, N = 1000
//   one-element tensors) on the GPU; forward + backward minus the no-grad
//   forward, per pair, wall time up to a device synchronize.
#include <functional>
#include <memory>

#include <benchmark/benchmark.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <tapegrad/tapegrad.h>

namespace {

using tg::Tensor;
const tg::Device kGpu(tg::kCUDA, 0);
constexpr int64_t kN = int64_t(1) << 26;

tg::TensorOptions gpu_f32() { return tg::TensorOptions().device(kGpu); }

// Times `f` with events on the current stream (manual time).
template <class F> void timed(benchmark::State& state, F&& f) {
  if (!tg::cuda::is_available()) {
    state.SkipWithError("no CUDA GPU here");
    return;
  }
  tg::cuda::Event start(true), stop(true);
  f();  // warm-up (allocations, cuBLAS handles)
  for (auto _ : state) {
    start.record();
    f();
    stop.record();
    stop.synchronize();
    state.SetIterationTime(double(start.elapsed_time(stop)) / 1e3);
  }
}

void bytes(benchmark::State& state, int64_t per_iter) { state.SetBytesProcessed(state.iterations() * per_iter); }

void BM_CudaMemcpyD2D(benchmark::State& state) {
  if (!tg::cuda::is_available()) return state.SkipWithError("no CUDA GPU here");
  Tensor a = tg::ones({kN}, gpu_f32()), b = tg::empty({kN}, gpu_f32());
  auto s = static_cast<cudaStream_t>(tg::cuda::current_stream().handle());
  timed(state, [&] { cudaMemcpyAsync(b.data_ptr(), a.data_ptr(), kN * 4, cudaMemcpyDeviceToDevice, s); });
  bytes(state, 2 * kN * 4);
}
void BM_CudaCopy(benchmark::State& state) {  // the copy kernel, not the copy engine
  if (!tg::cuda::is_available()) return state.SkipWithError("no CUDA GPU here");
  Tensor a = tg::ones({kN}, gpu_f32()), b = tg::empty({kN}, gpu_f32());
  timed(state, [&] { b.copy_(a); });
  bytes(state, 2 * kN * 4);
}
void BM_CudaAddInPlace(benchmark::State& state) {
  if (!tg::cuda::is_available()) return state.SkipWithError("no CUDA GPU here");
  Tensor a = tg::zeros({kN}, gpu_f32()), b = tg::ones({kN}, gpu_f32());
  timed(state, [&] { a.add_(b); });
  bytes(state, 3 * kN * 4);
}
void BM_CudaAddOut(benchmark::State& state) {  // allocates its result (cached)
  if (!tg::cuda::is_available()) return state.SkipWithError("no CUDA GPU here");
  Tensor a = tg::zeros({kN}, gpu_f32()), b = tg::ones({kN}, gpu_f32());
  timed(state, [&] { benchmark::DoNotOptimize(tg::add(a, b).data_ptr()); });
  bytes(state, 3 * kN * 4);
}
void BM_CudaMulScalar(benchmark::State& state) {
  if (!tg::cuda::is_available()) return state.SkipWithError("no CUDA GPU here");
  Tensor a = tg::ones({kN}, gpu_f32());
  timed(state, [&] { a.mul_(1.0f); });
  bytes(state, 2 * kN * 4);
}
void BM_CudaTanh(benchmark::State& state) {
  if (!tg::cuda::is_available()) return state.SkipWithError("no CUDA GPU here");
  Tensor a = tg::ones({kN}, gpu_f32());
  timed(state, [&] { benchmark::DoNotOptimize(tg::tanh(a).data_ptr()); });
  bytes(state, 2 * kN * 4);
}
void BM_CudaAddInPlaceF64(benchmark::State& state) {
  if (!tg::cuda::is_available()) return state.SkipWithError("no CUDA GPU here");
  auto o = gpu_f32().dtype(tg::kFloat64);
  Tensor a = tg::zeros({kN / 2}, o), b = tg::ones({kN / 2}, o);
  timed(state, [&] { a.add_(b); });
  bytes(state, 3 * kN * 4);
}
void BM_CudaAddInPlaceMisaligned(benchmark::State& state) {
  if (!tg::cuda::is_available()) return state.SkipWithError("no CUDA GPU here");
  Tensor a = tg::zeros({kN + 1}, gpu_f32()).narrow(0, 1, kN);
  Tensor b = tg::ones({kN + 1}, gpu_f32()).narrow(0, 1, kN);
  timed(state, [&] { a.add_(b); });
  bytes(state, 3 * kN * 4);
}

// ---- GEMM --------------------------------------------------------------------------
// Shapes (m, k, n): square 4096, and the Hessian benchmark's hidden layer
// (B = 10000 rows through 512 x 512).
void gemm_args(benchmark::internal::Benchmark* b) {
  b->Args({4096, 4096, 4096})->Args({10000, 512, 512})->Args({512, 10000, 512});
}
void flops(benchmark::State& state) {
  state.counters["TFLOPs"] = benchmark::Counter(2.0 * double(state.range(0)) * double(state.range(1)) *
                                                    double(state.range(2)) * double(state.iterations()) / 1e12,
                                                benchmark::Counter::kIsRate);
}

void BM_CudaMm(benchmark::State& state) {
  if (!tg::cuda::is_available()) return state.SkipWithError("no CUDA GPU here");
  tg::cuda::set_allow_tf32(false);
  int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  Tensor a = tg::randn({m, k}).to(kGpu), b = tg::randn({k, n}).to(kGpu);
  timed(state, [&] { benchmark::DoNotOptimize(tg::mm(a, b).data_ptr()); });
  flops(state);
}
void BM_CublasSgemmDirect(benchmark::State& state) {
  if (!tg::cuda::is_available()) return state.SkipWithError("no CUDA GPU here");
  int m = int(state.range(0)), k = int(state.range(1)), n = int(state.range(2));
  Tensor a = tg::randn({m, k}).to(kGpu), b = tg::randn({k, n}).to(kGpu);
  Tensor c = tg::empty({m, n}, gpu_f32());
  cublasHandle_t h;
  cublasCreate(&h);
  cublasSetStream(h, static_cast<cudaStream_t>(tg::cuda::current_stream().handle()));
  cublasSetMathMode(h, CUBLAS_DEFAULT_MATH);
  const float one = 1, zero = 0;
  // Row-major C = A B as column-major C^T = B^T A^T.
  timed(state, [&] {
    cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, b.data_ptr<float>(), n, a.data_ptr<float>(), k, &zero,
                c.data_ptr<float>(), n);
  });
  cublasDestroy(h);
  flops(state);
}

// ---- engine overhead -------------------------------------------------------------------
constexpr int64_t kPairs = 1000;

void per_pair(benchmark::State& state) {
  state.counters["us_per_pair"] = benchmark::Counter(double(kPairs) * double(state.iterations()),
                                                     benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

Tensor chain(const Tensor& x0, const Tensor& w, const Tensor& b) {
  Tensor x = x0;
  for (int64_t i = 0; i < kPairs; ++i)
    x = x * w + b;
  return x;
}

void BM_CudaChainNoGrad(benchmark::State& state) {
  if (!tg::cuda::is_available()) return state.SkipWithError("no CUDA GPU here");
  Tensor x = tg::ones({1}, gpu_f32()), w = tg::full({1}, 0.999, gpu_f32()), b = tg::full({1}, 0.001, gpu_f32());
  tg::NoGradGuard no_grad;
  for (auto _ : state) {
    benchmark::DoNotOptimize(chain(x, w, b).data_ptr());
    tg::cuda::synchronize();
  }
  per_pair(state);
}
void BM_CudaChainForwardBackward(benchmark::State& state) {
  if (!tg::cuda::is_available()) return state.SkipWithError("no CUDA GPU here");
  Tensor x = tg::ones({1}, gpu_f32());
  Tensor w = tg::full({1}, 0.999, gpu_f32()).requires_grad_();
  Tensor b = tg::full({1}, 0.001, gpu_f32()).requires_grad_();
  for (auto _ : state) {
    chain(x, w, b).sum().backward();
    tg::cuda::synchronize();
  }
  per_pair(state);
}

// Floors for one tiny op: a bare kernel launch through the runtime (the
// delay kernel asked for 0 ms), an in-place add on [1] tensors, and an
// out-of-place mul (with its allocation); per op, up to a synchronize.
constexpr int kOps = 1000;
void per_op(benchmark::State& state) {
  state.counters["us_per_op"] = benchmark::Counter(double(kOps) * double(state.iterations()),
                                                   benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
void BM_CudaLaunchFloor(benchmark::State& state) {
  if (!tg::cuda::is_available()) return state.SkipWithError("no CUDA GPU here");
  tg::cuda::Stream s = tg::cuda::current_stream();
  for (auto _ : state) {
    for (int i = 0; i < kOps; ++i)
      tg::cuda::delay(s, 0.0);
    tg::cuda::synchronize();
  }
  per_op(state);
}
void BM_CudaTinyAddInPlace(benchmark::State& state) {
  if (!tg::cuda::is_available()) return state.SkipWithError("no CUDA GPU here");
  Tensor a = tg::zeros({1}, gpu_f32()), b = tg::ones({1}, gpu_f32());
  for (auto _ : state) {
    for (int i = 0; i < kOps; ++i)
      a.add_(b);
    tg::cuda::synchronize();
  }
  per_op(state);
}
void BM_CudaTinyMul(benchmark::State& state) {
  if (!tg::cuda::is_available()) return state.SkipWithError("no CUDA GPU here");
  Tensor a = tg::ones({1}, gpu_f32()), b = tg::ones({1}, gpu_f32());
  for (auto _ : state) {
    for (int i = 0; i < kOps; ++i)
      benchmark::DoNotOptimize(tg::mul(a, b).data_ptr());
    tg::cuda::synchronize();
  }
  per_op(state);
}

// Where the backward's time goes: the host time of backward() alone (it
// returns once every kernel is queued) against the same with the device
// synchronize; the difference is the device draining its queue.
void backward_only(benchmark::State& state, bool sync) {
  if (!tg::cuda::is_available()) return state.SkipWithError("no CUDA GPU here");
  Tensor x = tg::ones({1}, gpu_f32());
  Tensor w = tg::full({1}, 0.999, gpu_f32()).requires_grad_();
  Tensor b = tg::full({1}, 0.001, gpu_f32()).requires_grad_();
  for (auto _ : state) {
    state.PauseTiming();
    Tensor y = chain(x, w, b).sum();
    tg::cuda::synchronize();
    state.ResumeTiming();
    y.backward();
    if (sync) tg::cuda::synchronize();
  }
  per_pair(state);
}
void BM_CudaChainBackwardHostOnly(benchmark::State& state) { backward_only(state, false); }
void BM_CudaChainBackwardSynced(benchmark::State& state) { backward_only(state, true); }

// The same forward + backward (grad into w and b), captured once into a CUDA
// graph and replayed: what launch-bound steps cost without the host.
void BM_CudaChainForwardBackwardGraphed(benchmark::State& state) {
  if (!tg::cuda::is_available()) return state.SkipWithError("no CUDA GPU here");
  Tensor x = tg::ones({1}, gpu_f32());
  Tensor w = tg::full({1}, 0.999, gpu_f32()).requires_grad_();
  Tensor b = tg::full({1}, 0.001, gpu_f32()).requires_grad_();
  tg::cuda::CUDAGraph graph(/*keep_graph=*/true);
  std::vector<Tensor> grads;
  {
    tg::cuda::Graph capture(graph);
    grads = tg::autograd::grad({chain(x, w, b).sum()}, {w, b});
  }
  size_t nodes = 0;
  cudaGraphGetNodes(static_cast<cudaGraph_t>(graph.raw_graph()), nullptr, &nodes);
  graph.instantiate();
  state.counters["nodes_per_pair"] = double(nodes) / double(kPairs);
  for (auto _ : state) {
    graph.replay();
    tg::cuda::synchronize();
  }
  benchmark::DoNotOptimize(grads[0].data_ptr());
  per_pair(state);
}

// An optimizer's step (or a clip_grad_norm_) over 100 float32 parameters of
// 64 x 64: wall time per step (eager: launch and run, synchronized) and the
// nodes of one captured step. `make` builds the step over the parameters.
using StepMaker = std::function<std::function<void()>(const std::vector<Tensor>&)>;
void timed_step(benchmark::State& state, bool graphed, const StepMaker& make) {
  if (!tg::cuda::is_available()) return state.SkipWithError("no CUDA GPU here");
  tg::manual_seed(0);
  std::vector<Tensor> ps;
  for (int i = 0; i < 100; ++i) {
    Tensor p = tg::randn({64, 64}, gpu_f32()).requires_grad_();
    p.mutable_grad() = tg::randn({64, 64}, gpu_f32());
    ps.push_back(p);
  }
  std::function<void()> step = make(ps);
  step();
  tg::cuda::CUDAGraph graph(/*keep_graph=*/true);
  {
    tg::cuda::Graph capture(graph);
    step();
  }
  size_t nodes = 0;
  cudaGraphGetNodes(static_cast<cudaGraph_t>(graph.raw_graph()), nullptr, &nodes);
  graph.instantiate();
  state.counters["launches_per_step"] = double(nodes);
  for (auto _ : state) {
    if (graphed) graph.replay();
    else step();
    tg::cuda::synchronize();
  }
}
std::function<void()> adam_step(const std::vector<Tensor>& ps) {
  tg::optim::AdamOptions o;
  o.lr = 1e-3;
  o.capturable = true;
  auto opt = std::make_shared<tg::optim::Adam>(ps, o);
  return [opt] { opt->step(); };
}
void BM_CudaAdamStep100Params(benchmark::State& state) { timed_step(state, false, adam_step); }
void BM_CudaAdamStep100ParamsGraphed(benchmark::State& state) { timed_step(state, true, adam_step); }

// RMSprop, Adagrad, Adamax, NAdam, RAdam (the argument: Adaptive::Rule's
// order), capturable, PyTorch's default options otherwise.
void adaptive_step(benchmark::State& state, bool graphed) {
  const int rule = int(state.range(0));
  static const char* const names[] = {"RMSprop", "Adagrad", "Adamax", "NAdam", "RAdam"};
  state.SetLabel(names[rule]);
  timed_step(state, graphed, [rule](const std::vector<Tensor>& ps) -> std::function<void()> {
    tg::optim::AdaptiveOptions o;
    o.lr = 1e-3;
    o.capturable = true;
    auto opt = std::make_shared<tg::optim::Adaptive>(tg::optim::Adaptive::Rule(rule),
                                                     std::vector<tg::optim::ParamGroup>{{ps}}, o, names[rule]);
    return [opt] { opt->step(); };
  });
}
void BM_CudaAdaptiveStep100Params(benchmark::State& state) { adaptive_step(state, false); }
void BM_CudaAdaptiveStep100ParamsGraphed(benchmark::State& state) { adaptive_step(state, true); }

// clip_grad_norm_ (max_norm 1) over the 100 gradients.
std::function<void()> clip_step(const std::vector<Tensor>& ps) {
  return [ps] { tg::optim::clip_grad_norm_(ps, 1.0); };
}
void BM_CudaClipGradNorm100Params(benchmark::State& state) { timed_step(state, false, clip_step); }
void BM_CudaClipGradNorm100ParamsGraphed(benchmark::State& state) { timed_step(state, true, clip_step); }

}  // namespace

BENCHMARK(BM_CudaMemcpyD2D)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_CudaCopy)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_CudaAddInPlace)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_CudaAddOut)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_CudaMulScalar)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_CudaTanh)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_CudaAddInPlaceF64)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_CudaAddInPlaceMisaligned)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_CudaMm)->Apply(gemm_args)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_CublasSgemmDirect)->Apply(gemm_args)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_CudaChainNoGrad)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_CudaChainForwardBackward)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_CudaLaunchFloor)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_CudaTinyAddInPlace)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_CudaTinyMul)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_CudaChainBackwardHostOnly)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_CudaChainBackwardSynced)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_CudaChainForwardBackwardGraphed)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_CudaAdamStep100Params)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_CudaAdamStep100ParamsGraphed)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_CudaAdaptiveStep100Params)->DenseRange(0, 4)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_CudaAdaptiveStep100ParamsGraphed)->DenseRange(0, 4)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_CudaClipGradNorm100Params)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_CudaClipGradNorm100ParamsGraphed)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_MAIN();
