// tg::linalg workloads (issue 46), on the GPU when there is one, else the CPU;
// peers (PyTorch, JAX) in bench/peers/linalg_peers.py, which runs this
// program with --benchmark_format=json and prints one table.
// - GP: the negative log marginal likelihood of exact GP regression (RBF
//   kernel, theta = (log ell, log sf2, log sn2), float64, n 1-D points):
//   BM_GpNlmlGrad its value and gradient in theta (one backward pass),
//   BM_GpHessian the 3 x 3 Hessian in theta by forward over reverse
//   (autograd::hessian, JacobianMode::Forward).
// - Batched: B SPD 64 x 64 float32 matrices A and right-hand sides b [B, 64, 1]:
//   BM_BatchedCholSolveLogdet the forward L = cholesky(A), x = cholesky_solve(b, L),
//   logdet = 2 sum log diag L; BM_BatchedCholSolveLogdetGrad the forward and
//   the gradient of sum(x) + sum(logdet) in A and b.
// Each iteration is timed by wall clock up to a device synchronize (manual
// time); run with --benchmark_repetitions=N for medians. The counter
// peak_MiB is one call's peak of allocated device memory (inputs included). With
// TG_BENCH_PROFILE=1 the first timed call of each workload after its warm-up
// is bracketed by cuda::profiler_start/stop (for ncu --profile-from-start
// off: scripts/gpu.sh lprofile). On the CPU the large
// sizes are skipped with a message (a 2-core CPU takes minutes on them); set
// TG_BENCH_CPU_BIG=1 to run them anyway.
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <set>
#include <string>
#include <typeinfo>

#include <benchmark/benchmark.h>

#include <tapegrad/tapegrad.h>

namespace {

using tg::Tensor;
namespace ag = tg::autograd;

tg::Device device() { return tg::cuda::is_available() ? tg::Device(tg::kCUDA, 0) : tg::Device(tg::kCPU); }

void sync() {
  if (tg::cuda::is_available()) tg::cuda::synchronize();
}

// False (and the benchmark skipped, saying why) for a size too large for the
// CPU unless TG_BENCH_CPU_BIG is set.
bool size_ok(benchmark::State& state, bool big) {
  const char* env = std::getenv("TG_BENCH_CPU_BIG");
  if (big && !tg::cuda::is_available() && !(env && std::string(env) == "1")) {
    state.SkipWithError("CPU: skipped at this size (minutes on a small CPU; TG_BENCH_CPU_BIG=1 runs it)");
    return false;
  }
  return true;
}

// One call of f between profiler_start and profiler_stop, once per workload,
// when TG_BENCH_PROFILE=1 and there is a GPU.
template <class F> void profile_once(benchmark::State& state, F& f) {
  static std::set<std::string> done;
  const char* env = std::getenv("TG_BENCH_PROFILE");
  const std::string key = std::string(typeid(F).name()) + "/" + std::to_string(state.range(0));
  if (!env || std::string(env) != "1" || !tg::cuda::is_available() || !done.insert(key).second) return;
  f();
  sync();
  tg::cuda::profiler_start();
  f();
  sync();
  tg::cuda::profiler_stop();
}

// Times f (one warm-up call first: allocator caches, library handles).
template <class F> void timed(benchmark::State& state, F&& f) {
  f();
  sync();
  profile_once(state, f);
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    sync();
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  state.SetLabel(tg::cuda::is_available() ? "cuda" : "cpu");
  // Peak device memory of one call (the allocator's allocated bytes, inputs
  // included: torch.cuda.max_memory_allocated's measure), in MiB.
  if (tg::cuda::is_available()) {
    tg::cuda::synchronize();
    tg::cuda::reset_peak_memory_stats();
    f();
    sync();
    state.counters["peak_MiB"] = double(tg::cuda::memory_stats().peak_allocated_bytes) / (1 << 20);
  }
}

// The GP problem of samples/gp_regression.cpp at n points: a noisy sine on
// [-3, 3], evaluated at theta = (log 1, log 1, log 0.01).
struct GP {
  Tensor sqdist, y, eye, theta;
  explicit GP(int64_t n) {
    auto f64 = tg::TensorOptions().dtype(tg::kFloat64);
    tg::manual_seed(46);
    Tensor x = tg::rand({n, 1}, f64) * 6.0 - 3.0;
    const tg::Device dev = device();
    sqdist = tg::square(x - x.transpose(0, 1)).to(dev);
    y = (tg::sin(x) + tg::randn({n, 1}, f64) * 0.1).to(dev);
    eye = tg::eye(n, f64).to(dev);
    theta = tg::zeros({3}, f64);
    theta.narrow(0, 2, 1).fill_(std::log(0.01));
    theta = theta.to(dev);
  }
  Tensor nlml(const Tensor& t) const {
    const double n = double(y.size(0));
    Tensor K = tg::exp(t[1] - sqdist * (tg::exp(t[0] * -2.0) * 0.5)) + eye * tg::exp(t[2]);
    Tensor L = tg::linalg::cholesky(K);
    Tensor alpha = tg::linalg::cholesky_solve(y, L);
    return (y * alpha).sum() * 0.5 + tg::log(tg::diagonal(L, 0, -2, -1)).sum() +
           0.5 * n * std::log(2 * 3.14159265358979323846);
  }
};

void BM_GpNlmlGrad(benchmark::State& state) {
  const int64_t n = state.range(0);
  if (!size_ok(state, n > 1024)) return;
  GP gp(n);
  timed(state, [&] {
    Tensor t = gp.theta.detach().requires_grad_();
    Tensor v = gp.nlml(t);
    Tensor g = ag::grad({v}, {t})[0];
    benchmark::DoNotOptimize(g);
  });
}
BENCHMARK(BM_GpNlmlGrad)->Arg(256)->Arg(1024)->Arg(4096)->Arg(8192)->UseManualTime()->Unit(benchmark::kMillisecond);

void BM_GpHessian(benchmark::State& state) {
  const int64_t n = state.range(0);
  if (!size_ok(state, n > 1024)) return;
  GP gp(n);
  auto f = [&](const Tensor& t) { return gp.nlml(t); };
  timed(state, [&] {
    Tensor H = ag::hessian(f, gp.theta, false, ag::JacobianMode::Forward);
    benchmark::DoNotOptimize(H);
  });
}
BENCHMARK(BM_GpHessian)->Arg(256)->Arg(1024)->Arg(4096)->Arg(8192)->UseManualTime()->Unit(benchmark::kMillisecond);

// B SPD matrices M M^T / 64 + I (float32) and right-hand sides.
struct Batch {
  Tensor A, b;
  explicit Batch(int64_t B) {
    tg::manual_seed(7);
    Tensor M = tg::randn({B, 64, 64});
    A = (tg::matmul(M, M.transpose(-2, -1)) / 64.0 + tg::eye(64)).to(device());
    b = tg::randn({B, 64, 1}).to(device());
  }
};

// x = A^-1 b and log det A through one Cholesky factorization.
std::pair<Tensor, Tensor> chol_solve_logdet(const Tensor& A, const Tensor& b) {
  Tensor L = tg::linalg::cholesky(A);
  Tensor x = tg::linalg::cholesky_solve(b, L);
  Tensor logdet = tg::log(tg::diagonal(L, 0, -2, -1)).sum({-1}) * 2.0;
  return {x, logdet};
}

void BM_BatchedCholSolveLogdet(benchmark::State& state) {
  const int64_t B = state.range(0);
  if (!size_ok(state, B > 1000)) return;
  Batch d(B);
  tg::NoGradGuard no_grad;
  timed(state, [&] {
    auto [x, logdet] = chol_solve_logdet(d.A, d.b);
    benchmark::DoNotOptimize(x);
    benchmark::DoNotOptimize(logdet);
  });
}
BENCHMARK(BM_BatchedCholSolveLogdet)->Arg(100)->Arg(10000)->UseManualTime()->Unit(benchmark::kMillisecond);

void BM_BatchedCholSolveLogdetGrad(benchmark::State& state) {
  const int64_t B = state.range(0);
  if (!size_ok(state, B > 1000)) return;
  Batch d(B);
  timed(state, [&] {
    Tensor A = d.A.detach().requires_grad_(), b = d.b.detach().requires_grad_();
    auto [x, logdet] = chol_solve_logdet(A, b);
    auto g = ag::grad({x.sum() + logdet.sum()}, {A, b});
    benchmark::DoNotOptimize(g);
  });
}
BENCHMARK(BM_BatchedCholSolveLogdetGrad)->Arg(100)->Arg(10000)->UseManualTime()->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
