// CUDA graphs (docs/GRAPHS.md): capture and replay of forward, backward and
// double backward; private pools; capture-illegal ops. GPU tests skip with a
// message without a GPU.
#include <algorithm>
#include <any>
#include <cmath>
#include <optional>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <random>
#include <set>

#include "graphs/fusion.h"
#include "tensor/env.h"
#include "reference.h"

#include <tapegrad/tensor/raw.h>

namespace {

using tg::Tensor;
namespace ag = tg::autograd;
namespace cu = tg::cuda;

const tg::Device kGpu(tg::kCUDA, 0);
const tg::Device kCpu(tg::kCPU);

using tgtest::replays;

struct Mlp {
  Tensor w1, b1, w2, b2;
  explicit Mlp(uint64_t seed, int64_t in = 2, int64_t width = 16) {
    tg::manual_seed(seed);
    auto o = tg::TensorOptions().dtype(tg::kFloat64);
    w1 = (tg::randn({width, in}, o) * 0.5).to(kGpu).requires_grad_();
    b1 = (tg::randn({width}, o) * 0.1).to(kGpu).requires_grad_();
    w2 = (tg::randn({1, width}, o) * 0.5).to(kGpu).requires_grad_();
    b2 = tg::zeros({1}, o).to(kGpu).requires_grad_();
  }
  Tensor operator()(const Tensor& x) const { return tg::linear(tg::tanh(tg::linear(x, w1, b1)), w2, b2); }
  std::vector<Tensor> params() const { return {w1, b1, w2, b2}; }
};

// One training-style step: loss and its gradients into the parameters.
std::vector<Tensor> mlp_step(const Mlp& m, const Tensor& x) {
  Tensor loss = m(x).square().mean();
  std::vector<Tensor> out = ag::grad({loss}, m.params());
  out.insert(out.begin(), loss);
  return out;
}

// The PINN step: u(x), its Laplacian by double backward (create_graph), the
// residual loss, and the loss's gradients into the parameters.
std::vector<Tensor> pinn_step(const Mlp& m, const Tensor& x_in) {
  Tensor x = x_in.detach().requires_grad_();
  Tensor u = m(x);
  Tensor du = ag::grad({u.sum()}, {x}, {}, std::nullopt, /*create_graph=*/true)[0];
  Tensor lap;
  for (int64_t j = 0; j < x.size(1); ++j) {
    Tensor dj = ag::grad({du.select(1, j).sum()}, {x}, {}, std::nullopt, true)[0].select(1, j);
    lap = lap.defined() ? lap + dj : dj;
  }
  Tensor f = tg::sin(x.detach().select(1, 0)) * 2.0;
  Tensor loss = (lap - f).square().mean();
  // b2 does not reach the Laplacian: its gradient is not asked for.
  std::vector<Tensor> out = ag::grad({loss}, {m.w1, m.b1, m.w2});
  out.insert(out.begin(), loss);
  return out;
}

// The same step with the Laplacian in Taylor mode (the forward Laplacian:
// one forward pass carrying the value, the first derivatives and the sum of
// the second ones; no host copies, so the whole step captures).
std::vector<Tensor> pinn_step_taylor(const Mlp& m, const Tensor& x) {
  Tensor lap = ag::laplacian(m, x, /*create_graph=*/true).select(1, 0);
  Tensor f = tg::sin(x.select(1, 0)) * 2.0;
  Tensor loss = (lap - f).square().mean();
  std::vector<Tensor> out = ag::grad({loss}, {m.w1, m.b1, m.w2});
  out.insert(out.begin(), loss);
  return out;
}

// Per-sample Hessians in Taylor mode of a product (its cross terms select
// coefficient rows by index tensors whose range is known: nothing is read
// back, so it captures), with create_graph, the loss's gradients.
std::vector<Tensor> hessian_step_taylor(const Mlp& m, const Tensor& x) {
  auto fn = [&m](const Tensor& z) { return m(z) * tg::sin(z.sum({1}, true)); };
  Tensor h = ag::per_sample_hessian(fn, x, ag::HessianStrategy::Taylor, /*create_graph=*/true);
  Tensor loss = h.square().mean();
  std::vector<Tensor> out = ag::grad({loss}, {m.w1, m.b1, m.w2});
  out.insert(out.begin(), loss);
  out.push_back(ag::per_sample_hessian(fn, x, ag::HessianStrategy::Taylor));  // and without: the probe, then the pass
  return out;
}

// Captures `step` into `a`, then into `b`; returns what each capture returned.
template <class Step>
std::pair<std::vector<Tensor>, std::vector<Tensor>> capture_each(cu::CUDAGraph& a, cu::CUDAGraph& b, const Step& step) {
  std::pair<std::vector<Tensor>, std::vector<Tensor>> out;
  {
    cu::Graph capture(a);
    out.first = step();
  }
  {
    cu::Graph capture(b);
    out.second = step();
  }
  return out;
}

// Replay against eager: bitwise equal. The replay runs the kernels the
// eager step runs, in the same order (eagerly the backward's nodes run on the
// device worker, under capture on the capturing thread: both take the nodes
// in the same order), so even the double backward's sums agree exactly.
void expect_same(const std::vector<Tensor>& a, const std::vector<Tensor>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    Tensor x = a[i].to(kCpu), y = b[i].to(kCpu);
    EXPECT_TRUE(tg::equal(x, y)) << what << " output " << i << ": max |diff| "
                                 << tg::amax(tg::abs(x - y)).item<double>();
  }
}

// Replays `a` and `b` (captured by capture_each, returning `out_a` and
// `out_b`) `times` times each, in turn; then both outputs equal a fresh eager
// step's.
template <class Step>
void replay_each_and_compare(cu::CUDAGraph& a, const std::vector<Tensor>& out_a, const char* what_a, cu::CUDAGraph& b,
                             const std::vector<Tensor>& out_b, const char* what_b, int times, const Step& step) {
  for (int r = 0; r < times; ++r) {
    a.replay();
    b.replay();
  }
  const std::vector<Tensor> eager = step();
  expect_same(out_a, eager, what_a);
  expect_same(out_b, eager, what_b);
}

// Runs `step` once (warm-up), captures it with fusion and without, replays
// each `times` times and compares both with a fresh eager step (bitwise);
// returns how many nodes the fused graph's fusion removed (none in the other).
template <class Step> size_t fused_against_unfused(const Step& step, int times) {
  (void)step();
  cu::CUDAGraph fused, plain;
  plain.set_fusion(false);
  auto [a, p] = capture_each(fused, plain, step);
  EXPECT_EQ(plain.fused_nodes(), 0u);
  replay_each_and_compare(fused, a, "fused graph", plain, p, "unfused graph", times, step);
  return fused.fused_nodes();
}

// Two branches' inputs on the GPU after manual_seed(seed): x1, x2 [1024, 64]
// and w1, w2 [64, 64] (times 0.125), float32.
struct BranchInputs {
  Tensor x1, x2, w1, w2;
};
BranchInputs branch_inputs(uint64_t seed) {
  tg::manual_seed(seed);
  const auto f32 = tg::TensorOptions().dtype(tg::kFloat32);
  return {tg::randn({1024, 64}, f32).to(kGpu), tg::randn({1024, 64}, f32).to(kGpu),
          (tg::randn({64, 64}, f32) * 0.125).to(kGpu), (tg::randn({64, 64}, f32) * 0.125).to(kGpu)};
}

// Captures `step` once on static input x (after an eager warm-up on the
// capture stream, as with PyTorch), then replays it for `n` new inputs and
// checks every replay against the eager step on the same values.
template <class Step> void replay_equals_eager(Step step, int n, const char* what) {
  n = replays(n);
  Mlp m(7);
  Tensor x = tg::rand({64, 2}, tg::TensorOptions().dtype(tg::kFloat64)).to(kGpu);
  cu::CUDAGraph graph;
  std::vector<Tensor> out = capture_after_warmup(graph, [&] { return step(m, x); });
  EXPECT_FALSE(cu::is_current_stream_capturing());
  const void* loss_addr = out[0].data_ptr();
  for (int r = 0; r < n; ++r) {
    tg::manual_seed(100 + uint64_t(r));
    Tensor fresh = tg::rand({64, 2}, tg::TensorOptions().dtype(tg::kFloat64)).to(kGpu);
    x.copy_(fresh);
    graph.replay();
    std::vector<Tensor> eager = step(m, fresh);
    expect_same(out, eager, std::string(what) + " replay " + std::to_string(r));
    if (::testing::Test::HasFailure()) return;
  }
  EXPECT_EQ(out[0].data_ptr(), loss_addr);  // static outputs keep their addresses
}

TEST(GraphsGpu, MlpForwardAndBackwardReplayEqualsEager) {
  REQUIRE_GPU();
  replay_equals_eager(mlp_step, 100, "mlp");
}

TEST(GraphsGpu, PinnStepWithDoubleBackwardReplayEqualsEager) {
  REQUIRE_GPU();
  replay_equals_eager(pinn_step, 100, "pinn");
}

TEST(GraphsGpu, PinnStepWithTaylorLaplacianReplayEqualsEager) {
  REQUIRE_GPU();
  replay_equals_eager(pinn_step_taylor, 100, "pinn (Taylor)");
  // And the two Laplacians agree (the double backward's and Taylor mode's).
  Mlp m(7);
  Tensor x = tg::rand({64, 2}, tg::TensorOptions().dtype(tg::kFloat64)).to(kGpu);
  std::vector<Tensor> a = pinn_step(m, x), b = pinn_step_taylor(m, x);
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(tg::allclose(a[i].to(kCpu), b[i].to(kCpu), 1e-10, 1e-12)) << "output " << i;
}

TEST(GraphsGpu, TaylorHessianStepReplayEqualsEager) {
  REQUIRE_GPU();
  replay_equals_eager(hessian_step_taylor, 20, "Taylor Hessian");
}

// Two branches on two side streams meet on a third, forward and backward.
TEST(GraphsGpu, BranchesOnSideStreamsCapturedWithBackward) {
  REQUIRE_GPU();
  auto step = [](const Mlp& m, const Tensor& x) {
    cu::Stream cur = cu::current_stream(), s1 = cu::stream_from_pool(), s2 = cu::stream_from_pool();
    s1.wait_stream(cur);
    s2.wait_stream(cur);
    Tensor a, b;
    {
      cu::StreamGuard g(s1);
      a = tg::tanh(tg::linear(x, m.w1, m.b1));
    }
    {
      cu::StreamGuard g(s2);
      b = tg::sin(tg::linear(x, m.w1));
    }
    cur.wait_stream(s1);
    cur.wait_stream(s2);
    Tensor loss = tg::linear(a * b, m.w2, m.b2).square().mean();
    std::vector<Tensor> out = ag::grad({loss}, m.params());
    out.insert(out.begin(), loss);
    return out;
  };
  replay_equals_eager(step, 20, "branches");
}

// grad() under capture in leaves whose AccumulateGrad nodes an earlier graph
// keeps alive: they were made on the legacy default stream, outside the
// capture (which that stream cannot join), so their gradients are received
// on the capturing stream. The capture succeeds, the replay gives the eager
// gradients, and the earlier graph still differentiates.
TEST(GraphsGpu, GradUnderCaptureInLeavesAnEarlierGraphHolds) {
  REQUIRE_GPU();
  Mlp m(31);
  tg::manual_seed(32);
  const auto o = tg::TensorOptions().dtype(tg::kFloat64).device(kGpu);
  ASSERT_TRUE(cu::current_stream().is_default());
  Tensor held = m(tg::randn({8, 2}, o)).square().sum();  // the leaves' AccumulateGrad, on the default stream
  Tensor x = tg::randn({16, 2}, o);
  cu::CUDAGraph graph;
  std::vector<Tensor> captured = capture_after_warmup(graph, [&] { return mlp_step(m, x); });
  for (int round = 0; round < 2; ++round) {
    {
      ag::NoGradGuard ng;
      x.copy_(tg::randn({16, 2}, o));
    }
    graph.replay();
    std::vector<Tensor> eager = mlp_step(m, x);
    cu::synchronize();
    ASSERT_EQ(captured.size(), eager.size());
    for (size_t i = 0; i < eager.size(); ++i) {
      const double scale = tg::amax(tg::abs(eager[i])).item<double>(),
                   diff = tg::amax(tg::abs(captured[i] - eager[i])).item<double>();
      EXPECT_GT(scale, 1e-6) << i;
      EXPECT_LE(diff, 1e-12 * scale) << "output " << i << " of round " << round;
    }
  }
  std::vector<Tensor> g = ag::grad({held}, m.params());
  for (const Tensor& t : g)
    EXPECT_TRUE(std::isfinite(tg::sum(t).item<double>()));
}

// Each op that would synchronize with the host names itself, ends the
// capture; afterwards a new capture and eager work succeed.
TEST(GraphsGpu, CaptureIllegalOpsThrowAndLeaveEverythingUsable) {
  REQUIRE_GPU();
  Tensor x = tg::ones({4, 4}).to(kGpu);
  Tensor pinned = tg::ones({4, 4}).pin_memory();
  tg::Tensor idx = tg::tensor({0, 1, 1, 0}, {2, 2}, tg::TensorOptions().dtype(tg::kInt64)).to(kGpu);
  tg::Tensor vals = tg::ones({2}).to(kGpu);
  tg::Tensor rows = tg::zeros({1, 4}, tg::TensorOptions().dtype(tg::kInt64).device(kGpu));
  std::vector<std::pair<std::string, std::function<void()>>> illegal = {
      {"item", [&] { (void)(x * 2.0).sum().item<float>(); }},
      {"to (a copy to the host)", [&] { (void)x.to(kCpu); }},
      {"to (a copy from host memory that is not pinned", [&] { (void)tg::ones({3}).to(kGpu); }},
      {"cuda::synchronize", [] { cu::synchronize(); }},
      {"Stream::synchronize", [] { cu::current_stream().synchronize(); }},
      {"Stream::query", [] { (void)cu::current_stream().query(); }},
      {"Event::synchronize",
       [] {
         cu::Event e;
         e.record();
         e.synchronize();
       }},
      {"Event::query",
       [] {
         cu::Event e;
         e.record();
         (void)e.query();
       }},
      {"coalesce",
       [&] {
         (void)tg::raw::sparse_coo_tensor(idx, vals, {2, 2}, false).coalesce();
       }},
      {"sparse_coo_tensor",
       [&] {
         (void)tg::sparse_coo_tensor(idx, vals, {2, 2});
       }},
      {"scatter_add", [&] { (void)tg::scatter_add(x, 0, rows, x.narrow(0, 0, 1)); }},
      {"index_select", [&] { (void)tg::index_select(x, 0, rows.select(0, 0)); }},
  };
  for (auto& [name, fn] : illegal) {
    SCOPED_TRACE(name);
    cu::CUDAGraph g;
    bool thrown = false;
    try {
      cu::Graph capture(g);
      (void)(x + 1.0);  // some captured work first
      fn();
    } catch (const tg::Error& e) {
      thrown = true;
      std::string msg = e.what();
      EXPECT_NE(msg.find("cannot run while a CUDA graph is being captured"), std::string::npos) << msg;
      EXPECT_NE(msg.find(name.substr(0, name.find(' ') == std::string::npos ? name.size() : name.find(' '))),
                std::string::npos)
          << msg;
    }
    EXPECT_TRUE(thrown);
    EXPECT_FALSE(cu::is_current_stream_capturing());
    EXPECT_FALSE(g.has_graph());
    // A new capture works, and so does eager work.
    cu::CUDAGraph g2;
    Tensor y;
    {
      cu::Graph capture(g2);
      y = x * 3.0;
    }
    g2.replay();
    EXPECT_EQ(tgtest::values(y), std::vector<double>(16, 3.0));
    EXPECT_EQ((x + 1.0).sum().item<float>(), 32.0f);
  }
  (void)pinned;
}

// Private pools: what a graph reserved is reused by every replay (no growth),
// kept while the graph lives, returned on reset; two graphs share one pool.
TEST(GraphsGpu, PoolsAreReusedAcrossReplaysSharedAndReturnedOnReset) {
  REQUIRE_GPU();
  Mlp m(3);
  Tensor x = tg::rand({256, 2}, tg::TensorOptions().dtype(tg::kFloat64)).to(kGpu);
  {
    cu::Stream side = cu::stream_from_pool();
    side.wait_stream(cu::current_stream());
    cu::StreamGuard g(side);
    mlp_step(m, x);
  }
  cu::synchronize();
  cu::CUDAGraph g1, g2;
  std::vector<Tensor> out1, out2;
  {
    cu::Graph capture(g1);
    out1 = mlp_step(m, x);
  }
  const cu::MempoolId pool = g1.pool();
  const int64_t pool_after_one = cu::memory_stats(pool).reserved_bytes;
  EXPECT_GT(pool_after_one, 0);
  {
    cu::Graph capture(g2, pool);  // shares g1's pool
    out2 = pinn_step(m, x);
  }
  EXPECT_EQ(g2.pool(), pool);
  const int64_t reserved = cu::memory_stats().reserved_bytes;
  for (int i = 0, n = replays(1000); i < n; ++i) {
    g1.replay();
    g2.replay();
  }
  cu::synchronize();
  EXPECT_EQ(cu::memory_stats().reserved_bytes, reserved) << "replays must not allocate";
  expect_same({out1[0]}, {mlp_step(m, x)[0]}, "g1 after the replays");
  expect_same({out2[0]}, {pinn_step(m, x)[0]}, "g2 after the replays");
  // Outputs of the graphs are tensors of the pool: it is returned once both
  // graphs are reset and the outputs are gone.
  out1.clear();
  out2.clear();
  g1.reset();
  EXPECT_GT(cu::memory_stats(pool).reserved_bytes, 0);  // g2 still uses it
  g2.reset();
  cu::empty_cache();
  EXPECT_EQ(cu::memory_stats(pool).reserved_bytes, 0);
}

// A stream forked from the capturing one allocates from the graph's pool
// too (the capture, not the stream, names the pool).
TEST(GraphsGpu, ForkedStreamsAllocateFromTheGraphsPool) {
  REQUIRE_GPU();
  Tensor x = tg::ones({1024}).to(kGpu);
  cu::CUDAGraph g;
  Tensor y;
  {
    cu::Graph capture(g);
    cu::Stream side = cu::stream_from_pool();
    side.wait_stream(cu::current_stream());
    {
      cu::StreamGuard on_side(side);
      y = x * 2.0;  // 4 KiB allocated by the side stream
    }
    cu::current_stream().wait_stream(side);
  }
  EXPECT_GE(cu::memory_stats(g.pool()).allocated_bytes, 4096);
  g.replay();
  EXPECT_EQ(tgtest::values(y), std::vector<double>(1024, 2.0));
}

// Random numbers under capture: each replay draws fresh numbers, and the
// sequence over the replays is the one eager steps draw from the same seed.
TEST(GraphsGpu, RandomNumbersAdvancePerReplayAsEagerSteps) {
  REQUIRE_GPU();
  auto step = [] {
    Tensor u = tg::rand({1000}, tg::TensorOptions().device(kGpu));
    Tensor n = tg::randn({3, 7}, tg::TensorOptions().dtype(tg::kFloat64).device(kGpu));
    return std::vector<Tensor>{u, n, tg::where(tg::gt(u, 0.5), n.sum(), 0.0)};  // a dropout-like mask
  };
  step();  // warm up
  tg::manual_seed(42);
  cu::CUDAGraph g;
  std::vector<Tensor> out;
  {
    cu::Graph capture(g);
    out = step();
  }
  std::vector<std::vector<std::vector<double>>> replayed;
  for (int r = 0; r < 3; ++r) {
    g.replay();
    replayed.push_back({tgtest::values(out[0]), tgtest::values(out[1]), tgtest::values(out[2])});
  }
  EXPECT_NE(replayed[0][0], replayed[1][0]);  // fresh numbers per replay
  tg::manual_seed(42);
  for (int r = 0; r < 3; ++r) {
    std::vector<Tensor> e = step();
    EXPECT_EQ(tgtest::values(e[0]), replayed[size_t(r)][0]) << "replay " << r;
    EXPECT_EQ(tgtest::values(e[1]), replayed[size_t(r)][1]) << "replay " << r;
    EXPECT_EQ(tgtest::values(e[2]), replayed[size_t(r)][2]) << "replay " << r;
  }
}

// Saved-tensor hooks inside the graph: the pack hook's copy or cast is
// captured into the forward, the unpack into the backward. A deep, wide MLP
// whose saved activations dominate its memory.
struct DeepMlp {
  std::vector<Tensor> w, b;
  DeepMlp(uint64_t seed, int64_t width, int layers) {
    tg::manual_seed(seed);
    auto o = tg::TensorOptions().dtype(tg::kFloat64);
    for (int l = 0; l < layers; ++l) {
      w.push_back((tg::randn({width, width}, o) * (1.0 / std::sqrt(double(width)))).to(kGpu).requires_grad_());
      b.push_back((tg::randn({width}, o) * 0.1).to(kGpu).requires_grad_());
    }
  }
  std::vector<Tensor> step(const Tensor& x) const {
    Tensor h = x;
    for (size_t l = 0; l < w.size(); ++l)
      h = tg::tanh(tg::linear(h, w[l], b[l]));
    Tensor loss = h.square().mean();
    std::vector<Tensor> params = w;
    params.insert(params.end(), b.begin(), b.end());
    std::vector<Tensor> out = ag::grad({loss}, params);
    out.insert(out.begin(), loss);
    return out;
  }
};

// Rows of the deep step's batch: its activations (1.25 MiB) are large blocks
// of the allocator, each its own segment in the pool.
constexpr int64_t kDeepRows = 1280;

// Captures the deep step under `hooks` (none when null), replays it on fresh
// inputs against the eager step under the same hooks (bitwise: the same
// kernels), and returns the graph pool's reserved bytes, its peak memory.
int64_t replay_with_hooks(const DeepMlp& m, const ag::SavedTensorHooks* hooks, const char* what,
                          bool offloads = false) {
  auto step = [&](const Tensor& x) {
    std::optional<ag::SavedTensorHooksGuard> guard;
    if (hooks) guard.emplace(*hooks);
    return m.step(x);
  };
  auto o = tg::TensorOptions().dtype(tg::kFloat64);
  Tensor x = tg::rand({kDeepRows, 128}, o).to(kGpu);
  cu::Stream side = cu::stream_from_pool();
  side.wait_stream(cu::current_stream());
  {
    cu::StreamGuard g(side);
    step(x);
  }
  cu::current_stream().wait_stream(side);
  const int64_t pinned_before = cu::host_memory_stats().allocated_bytes;
  cu::CUDAGraph graph;
  graph.set_reuse_delay(0);  // the pool's size is then the step's peak memory
  std::vector<Tensor> out;
  {
    cu::Graph capture(graph);
    out = step(x);
  }
  if (!offloads) {
    EXPECT_EQ(cu::host_memory_stats().allocated_bytes, pinned_before) << what;
  }
  for (int r = 0, n = replays(5); r < n; ++r) {
    tg::manual_seed(200 + uint64_t(r));
    Tensor fresh = tg::rand({kDeepRows, 128}, o).to(kGpu);
    x.copy_(fresh);
    graph.replay();
    expect_same(out, step(fresh), std::string(what) + " replay " + std::to_string(r));
    if (::testing::Test::HasFailure()) break;
  }
  const int64_t reserved = cu::memory_stats(graph.pool()).reserved_bytes;
  // The graph owns the pinned buffers of its copies until it is reset.
  const int64_t pinned_live = cu::host_memory_stats().allocated_bytes;
  out.clear();
  graph.reset();
  if (offloads) {
    // Each layer offloads its input, output and weight: four activations at least
    EXPECT_GE(pinned_live - pinned_before, 4 * kDeepRows * 128 * 8) << what;
    EXPECT_LE(cu::host_memory_stats().allocated_bytes, pinned_before) << what;
  }
  return reserved;
}

TEST(GraphsGpu, SavedTensorHooksRunInsideTheGraph) {
  REQUIRE_GPU();
  const DeepMlp m(11, 128, 4);  // four saved activations of 1.25 MiB each
  const int64_t plain = replay_with_hooks(m, nullptr, "no hooks");
  const ag::SavedTensorHooks offload = ag::hooks::offload_to_cpu();
  const int64_t offloaded = replay_with_hooks(m, &offload, "offload_to_cpu", /*offloads=*/true);
  const ag::SavedTensorHooks bf16 = ag::hooks::cast(tg::kBFloat16);
  const int64_t cast = replay_with_hooks(m, &bf16, "cast(bf16)");
  // A user pair of capturable ops: keep the saved tensor scaled by 2.
  const ag::SavedTensorHooks scaled{[](const Tensor& t) -> std::any { return t * 2.0; },
                                    [](const std::any& p) { return std::any_cast<const Tensor&>(p) * 0.5; }};
  replay_with_hooks(m, &scaled, "user hooks");
  // Offloaded activations leave the device: the graph's peak memory (its
  // pool, which keeps every block the capture used) is lower.
  EXPECT_LT(offloaded, plain) << "offload " << offloaded << " B, none " << plain << " B";
  EXPECT_LT(cast, plain) << "bf16 " << cast << " B, none " << plain << " B";
  // Offloading the activations under capture and replaying gives the
  // gradients of the plain step.
  Tensor x = tg::rand({kDeepRows, 128}, tg::TensorOptions().dtype(tg::kFloat64)).to(kGpu);
  std::vector<Tensor> with;
  {
    ag::SavedTensorHooksGuard g(offload);
    with = m.step(x);
  }
  expect_same(with, m.step(x), "offload vs none, eager");
}

// backward() under capture accumulates into .grad: a .grad that did not
// exist is allocated from the pool and rewritten by every replay at the same
// address; an existing .grad zeroed inside the capture is accumulated into
// in place (AccumulateGrad's in-place path), also at a fixed address.
TEST(GraphsGpu, BackwardIntoStaticGradsAcrossReplays) {
  REQUIRE_GPU();
  Mlp m(5);
  Tensor x = tg::rand({64, 2}, tg::TensorOptions().dtype(tg::kFloat64)).to(kGpu);
  auto eager_grads = [&](const Tensor& in) {
    std::vector<Tensor> g = ag::grad({m(in).square().mean()}, m.params());
    return g;
  };
  for (bool existing : {false, true}) {
    SCOPED_TRACE(existing ? ".grad zeroed in the capture" : ".grad allocated by the capture");
    cu::Stream side = cu::stream_from_pool();
    side.wait_stream(cu::current_stream());
    {
      cu::StreamGuard g(side);
      m(x).square().mean().backward();  // warm-up
    }
    cu::current_stream().wait_stream(side);
    for (const Tensor& p : m.params()) {
      if (existing) p.grad().zero_();
      else p.mutable_grad() = Tensor();
    }
    cu::CUDAGraph graph;
    {
      cu::Graph capture(graph);
      if (existing)
        for (const Tensor& p : m.params())
          p.grad().zero_();
      m(x).square().mean().backward();
    }
    std::vector<const void*> addr;
    for (const Tensor& p : m.params())
      addr.push_back(p.grad().data_ptr());
    for (int r = 0, n = replays(5); r < n; ++r) {
      tg::manual_seed(300 + uint64_t(r));
      Tensor fresh = tg::rand({64, 2}, tg::TensorOptions().dtype(tg::kFloat64)).to(kGpu);
      x.copy_(fresh);
      graph.replay();
      std::vector<Tensor> grads;
      for (const Tensor& p : m.params())
        grads.push_back(p.grad());
      expect_same(grads, eager_grads(fresh), "replay " + std::to_string(r));
      for (size_t i = 0; i < addr.size(); ++i)
        EXPECT_EQ(m.params()[i].grad().data_ptr(), addr[i]);
      if (::testing::Test::HasFailure()) return;
    }
  }
}

// A sparse operand under capture: mm of a coalesced sparse matrix (cuSPARSE,
// its buffer from the graph's pool) and its gradient into the dense operand.
TEST(GraphsGpu, SparseMmAndItsBackwardReplayEqualEager) {
  REQUIRE_GPU();
  auto o = tg::TensorOptions().dtype(tg::kFloat64);
  Tensor idx = tg::tensor({0, 0, 1, 2, 3, 3, 1, 3, 0, 2, 1, 3}, {2, 6}, tg::TensorOptions().dtype(tg::kInt64));
  Tensor s = tg::sparse_coo_tensor(idx, tg::randn({6}, o), {4, 4}).coalesce().to(kGpu);
  Tensor d = tg::randn({4, 3}, o).to(kGpu);
  auto step = [&](const Tensor& dense) {
    Tensor leaf = dense.detach().requires_grad_();
    Tensor y = tg::mm(s, leaf);
    Tensor g = ag::grad({tg::tanh(y).sum()}, {leaf})[0];
    return std::vector<Tensor>{y, g};
  };
  cu::Stream side = cu::stream_from_pool();
  side.wait_stream(cu::current_stream());
  {
    cu::StreamGuard g(side);
    step(d);
  }
  cu::current_stream().wait_stream(side);
  cu::CUDAGraph graph;
  std::vector<Tensor> out;
  {
    cu::Graph capture(graph);
    out = step(d);
  }
  for (int r = 0, n = replays(5); r < n; ++r) {
    Tensor fresh = tg::randn({4, 3}, o).to(kGpu);
    d.copy_(fresh);
    graph.replay();
    // cuSPARSE's COO product does not promise bitwise reproducibility from
    // run to run (it may sum a row's entries in any order): equal to 1e-13.
    std::vector<Tensor> eager = step(fresh);
    for (size_t i = 0; i < out.size(); ++i)
      EXPECT_TRUE(tg::allclose(out[i].to(kCpu), eager[i].to(kCpu), 1e-13, 1e-13)) << "replay " << r << " output " << i;
    if (::testing::Test::HasFailure()) return;
  }
  // The dense reference: the same product with the sparse matrix densified.
  EXPECT_TRUE(tg::allclose(out[0].to(kCpu), tg::mm(s.to_dense(), d).to(kCpu), 1e-12, 1e-12));
}

TEST(GraphsGpu, KeptGraphCanBeDumpedAndInstantiatedLater) {
  REQUIRE_GPU();
  Tensor x = tg::ones({8}).to(kGpu);
  cu::CUDAGraph g(/*keep_graph=*/true);
  Tensor y;
  {
    cu::Graph capture(g);
    y = tg::exp(x) * 2.0;
  }
  EXPECT_NE(g.raw_graph(), nullptr);
  EXPECT_ERROR_CONTAINS(g.replay(), "replay: no instantiated graph");
  std::string path = ::testing::TempDir() + "tapegrad_graph.dot";
  g.debug_dump(path);
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_NE(ss.str().find("digraph"), std::string::npos);
  g.instantiate();
  EXPECT_NE(g.raw_graph_exec(), nullptr);
  x.fill_(0.0);
  g.replay();
  EXPECT_EQ(tgtest::values(y), std::vector<double>(8, 2.0));
  std::remove(path.c_str());
}

// Chains of small elementwise kernels in a captured graph become single
// nodes of the fused kernel; its replay equals the unfused graph's and the
// eager step's bitwise (f32, where contracting a*w+b into an fma would show).
TEST(GraphsGpu, ElementwiseChainsFuseAndReplayEqualsEager) {
  REQUIRE_GPU();
  tg::manual_seed(3);
  const auto f32 = tg::TensorOptions().dtype(tg::kFloat32);
  const Tensor x = tg::randn({1000}, f32).to(kGpu);
  const Tensor w = (tg::rand({1000}, f32) * 0.2 + 0.9).to(kGpu).requires_grad_();
  const Tensor b = (tg::randn({1000}, f32) * 0.01).to(kGpu).requires_grad_();
  const Tensor s = tg::full({1}, 0.5, f32).to(kGpu);  // broadcast: one element read by all
  auto step = [&] {
    Tensor y = x;
    for (int i = 0; i < 100; ++i) {
      y = y * w + b;
      if (i % 10 == 9) y = tg::tanh(y) + s;
    }
    std::vector<Tensor> out = ag::grad({y.square().sum()}, {w, b});
    out.insert(out.begin(), y);
    return out;
  };
  EXPECT_GT(fused_against_unfused(step, 1), 300u) << "the forward and the backward chains fuse";

  // 202 kernels in a line (the last two in place): groups of 16 steps, 13 nodes.
  auto line_step = [&] {
    tg::NoGradGuard no_grad;
    Tensor y = x;
    for (int i = 0; i < 100; ++i)
      y = y * w + b;
    y.add_(y);
    y.mul_(w);
    return y;
  };
  cu::CUDAGraph line;
  Tensor y;
  {
    cu::Graph capture(line);
    y = line_step();
  }
  EXPECT_EQ(line.fused_nodes(), 202u - 13u);
  line.replay();
  const Tensor ye = line_step();
  expect_same({y}, {ye}, "line");
}

// A small product's kernel takes the elementwise steps after it into its
// launch (a head, fusion::Head): they run in the thread that stored each
// output element. Replays equal the unfused graph's and the eager step's
// bitwise, forward and backward, f32 and f64; a step that writes the
// product's input, or reads one of its outputs for every element, stays
// apart.
TEST(GraphsGpu, SmallProductsTakeTheStepsAfterThemIntoTheirLaunch) {
  REQUIRE_GPU();
  tg::manual_seed(11);
  for (const tg::ScalarType dt : {tg::kFloat32, tg::kFloat64}) {
    SCOPED_TRACE(tg::to_string(dt));
    const auto o = tg::TensorOptions().dtype(dt);
    const Tensor x = tg::randn({256, 64}, o).to(kGpu), c = tg::randn({256, 64}, o).to(kGpu);
    const Tensor w = (tg::randn({64, 64}, o) * 0.125).to(kGpu).requires_grad_();
    const Tensor b = (tg::randn({64}, o) * 0.1).to(kGpu).requires_grad_();
    const Tensor w2 = (tg::randn({2, 64}, o) * 0.125).to(kGpu).requires_grad_();
    {
      // 256 x 64 x 64 multiply-adds: the small-product kernel, the bias in
      // it; then tanh, * 2 and + c after it: one launch.
      auto step = [&] {
        tg::NoGradGuard ng;
        return std::vector<Tensor>{tg::tanh(tg::linear(x, w, b)) * 2.0 + c};
      };
      EXPECT_EQ(fused_against_unfused(step, 2), 3u) << "the product and the three steps after it: one node";
    }
    {
      // Two layers, their gradients (products with the bias, accumulating
      // products, the activation's derivative after a product).
      auto step = [&] {
        Tensor h = tg::tanh(tg::linear(x, w, b));
        Tensor y = tg::linear(h, w2);
        std::vector<Tensor> out = ag::grad({(y * y).sum()}, {w, b, w2});
        out.push_back(y);
        return out;
      };
      EXPECT_GT(fused_against_unfused(step, 2), 0u);
    }
    {
      // The product's input written after it (read by every thread): apart.
      Tensor in = x.clone(), y;
      cu::CUDAGraph g;
      {
        tg::NoGradGuard ng;
        cu::Graph capture(g);
        y = tg::linear(in, w.detach(), b.detach());
        in.mul_(2.0);
      }
      EXPECT_EQ(g.fused_nodes(), 0u);
      in.copy_(x);
      g.replay();
      tg::NoGradGuard ng;
      expect_same({y, in}, {tg::linear(x, w.detach(), b.detach()), x * 2.0}, "input written after");
    }
  }
}

// nn::Sequential's small MLP in one launch (where nothing is recorded) is a
// head as well: a Runge-Kutta stage sum after it (y + (h/2) k, reading the
// MLP's input and output at each element) runs in its launch. Replays equal
// the unfused graph's and the eager step's bitwise, f32 and f64; a step that
// writes the MLP's input stays apart.
TEST(GraphsGpu, SmallMlpsTakeTheStepsAfterThemIntoTheirLaunch) {
  REQUIRE_GPU();
  const bool headed = tg::detail::switched_on<tg::detail::OffSwitch::kFusedMlp>() &&
                      tg::detail::switched_on<tg::detail::OffSwitch::kGraphHeads>();
  tg::manual_seed(12);
  for (const tg::ScalarType dt : {tg::kFloat32, tg::kFloat64}) {
    SCOPED_TRACE(tg::to_string(dt));
    const auto o = tg::TensorOptions().dtype(dt);
    tg::nn::Sequential f = tg::nn::MLP({2, 64, 64, 2}, "tanh", o);
    f->to(kGpu);
    const Tensor y = tg::randn({256, 2}, o).to(kGpu);
    {
      auto step = [&] {
        tg::NoGradGuard ng;
        const Tensor k1 = f->forward(y);
        const Tensor y2 = y + k1 * 0.05;
        const Tensor k2 = f->forward(y2);
        return std::vector<Tensor>{k1, y2, k2, y + (k1 + k2) * 0.05};
      };
      const size_t removed = fused_against_unfused(step, 2);
      if (headed) {
        EXPECT_EQ(removed, 5u) << "each MLP with the stage sum after it: one node";
      }
    }
    {
      // Recorded (MlpBackward): the saved forward is a head too; two stages
      // and their gradients into the parameters and the state.
      const Tensor y0 = y.clone().requires_grad_();
      std::vector<Tensor> wrt = f->parameters();
      wrt.push_back(y0);
      auto step = [&] {
        const Tensor k1 = f->forward(y0);
        const Tensor k2 = f->forward(y0 + k1 * 0.05);
        const Tensor y1 = y0 + (k1 + k2) * 0.05;
        std::vector<Tensor> out = ag::grad({(y1 * y1).sum()}, wrt);
        out.push_back(y1.detach());
        return out;
      };
      const size_t removed = fused_against_unfused(step, 2);
      if (headed) {
        EXPECT_GT(removed, 0u);
      }
    }
    {
      // The MLP's input written after it (read by the whole block): apart.
      Tensor in = y.clone(), k;
      cu::CUDAGraph g;
      {
        tg::NoGradGuard ng;
        cu::Graph capture(g);
        k = f->forward(in);
        in.mul_(2.0);
      }
      if (headed) {
        EXPECT_EQ(g.fused_nodes(), 0u);
      }
      in.copy_(y);
      g.replay();
      tg::NoGradGuard ng;
      expect_same({k, in}, {f->forward(y), y * 2.0}, "input written after");
    }
  }
}

// Kernels whose element i would read memory another element writes stay
// apart: a write that overlaps a read of shifted elements, a write over a
// one-element operand that every element reads, a write over a row read by
// every row.
TEST(GraphsGpu, OverlappingOperandsAreNotFused) {
  REQUIRE_GPU();
  const auto f32 = tg::TensorOptions().dtype(tg::kFloat32);
  const Tensor start = tg::arange(1001, f32).to(kGpu);
  {
    Tensor buf = start.clone();
    cu::CUDAGraph g;
    {
      cu::Graph capture(g);
      Tensor t = buf.narrow(0, 0, 1000) * 2.0;
      buf.narrow(0, 1, 1000).add_(t);
    }
    EXPECT_EQ(g.fused_nodes(), 0u);
    buf.copy_(start);
    g.replay();
    Tensor e = start.clone();
    e.narrow(0, 1, 1000).add_(e.narrow(0, 0, 1000) * 2.0);
    expect_same({buf}, {e}, "shifted write");
  }
  {
    Tensor c = start.narrow(0, 0, 1000).clone();
    const Tensor z = tg::ones({1000}, f32).to(kGpu);
    Tensor y;
    cu::CUDAGraph g;
    {
      cu::Graph capture(g);
      y = z * c.narrow(0, 0, 1);
      c.add_(1.0);
    }
    EXPECT_EQ(g.fused_nodes(), 0u);
    c.copy_(start.narrow(0, 0, 1000));
    g.replay();
    EXPECT_EQ(tgtest::values(y), std::vector<double>(1000, 0.0));
    EXPECT_EQ(tgtest::values(c.narrow(0, 0, 2)), (std::vector<double>{1.0, 2.0}));
  }
  {
    // A bias read along rows (periodic) fuses with what follows, unless a
    // step writes over it.
    const Tensor z = tg::randn({64, 8}, f32).to(kGpu);
    Tensor bias = tg::randn({8}, f32).to(kGpu), y;
    cu::CUDAGraph g;
    {
      cu::Graph capture(g);
      y = tg::tanh(z + bias) * 3.0;
    }
    EXPECT_EQ(g.fused_nodes(), 2u);
    g.replay();
    expect_same({y}, {tg::tanh(z + bias) * 3.0}, "bias, fused");
    Tensor rows = z.clone();
    cu::CUDAGraph h;
    {
      cu::Graph capture(h);
      y = rows + rows.select(0, 0);  // every row plus row 0
      rows.add_(1.0);
    }
    EXPECT_EQ(h.fused_nodes(), 0u);
    rows.copy_(z);
    h.replay();
    expect_same({y}, {z + z.select(0, 0)}, "bias written over");
  }
}

// ---- the fusion plan (no GPU needed) -----------------------------------------------------
namespace fu = tg::cuda::fusion;

char g_arena[1 << 16];  // fake device addresses

// A random DAG over n nodes numbered in a shuffled order: each pair in order
// is an edge with chance 1/one_in, each consecutive pair also with chance
// 1 - 1/chain_one_in.
std::vector<std::pair<size_t, size_t>> random_dag(std::mt19937& rng, size_t n, unsigned one_in, unsigned chain_one_in) {
  std::vector<size_t> label(n);  // node ids in a shuffled order
  for (size_t i = 0; i < n; ++i)
    label[i] = i;
  std::shuffle(label.begin(), label.end(), rng);
  std::vector<std::pair<size_t, size_t>> edges;
  for (size_t v = 1; v < n; ++v)
    for (size_t u = 0; u < v; ++u)
      if (rng() % one_in == 0 || (u + 1 == v && rng() % chain_one_in)) edges.emplace_back(label[u], label[v]);
  return edges;
}

// A recorded binary step out = a (op) b over n f32 elements at byte offsets.
fu::Recorded binary_at(int64_t n, size_t out, size_t a, size_t b, uint32_t scalar = 0) {
  fu::Recorded r{};
  r.dtype = tg::ScalarType::Float32;
  r.n = n;
  r.step.kind = fu::kBinary;
  r.step.nops = 3;
  r.step.ptr[0] = g_arena + out;
  r.step.ptr[1] = g_arena + a;
  r.step.ptr[2] = g_arena + b;
  r.step.scalar = scalar;
  return r;
}

TEST(GraphFusionPlan, ALineFusesInGroupsOfSixteen) {
  const size_t n = 40;
  std::vector<fu::Recorded> rec;
  std::vector<std::pair<size_t, size_t>> edges;
  for (size_t i = 0; i < n; ++i) {
    rec.push_back(binary_at(8, 64 * (i + 1), 64 * i, 8192));
    if (i) edges.emplace_back(i - 1, i);
  }
  std::vector<const fu::Recorded*> launch(n);
  for (size_t i = 0; i < n; ++i)
    launch[i] = &rec[i];
  const fu::Plan p = fu::plan(n, edges, launch);
  ASSERT_EQ(p.groups.size(), 3u);
  EXPECT_EQ(p.groups[0].size(), 16u);
  EXPECT_EQ(p.groups[1].size(), 16u);
  EXPECT_EQ(p.groups[2].size(), 8u);
  for (size_t i = 0; i < n; ++i)
    EXPECT_EQ(p.group_of[i], long(i / 16));
}

// Fusion is judged by the relaxed chain: a dependent line fuses to a
// third of its length, while two branches whose kernels sit next to each
// other in capture order (a0 G_a a1 | b0 G_b b1, G a GEMM) would be tied
// together by fusing a1 with b0 (5 nodes in a row against 3).
TEST(GraphFusionPlan, FusionIsJudgedByTheRelaxedChain) {
  auto depths = [](const std::vector<fu::Recorded>& rec, const std::vector<std::vector<fu::Access>>& other,
                   const std::vector<std::pair<size_t, size_t>>& edges) {
    std::vector<const fu::Recorded*> launch;
    std::vector<std::vector<fu::Access>> acc;
    for (size_t i = 0; i < rec.size(); ++i) {
      launch.push_back(rec[i].n ? &rec[i] : nullptr);
      acc.push_back(rec[i].n ? fu::accesses_of(rec[i]) : other[i]);
    }
    std::vector<const std::vector<fu::Access>*> access_of;
    for (const auto& a : acc)
      access_of.push_back(&a);
    return fu::fusion_depths(rec.size(), edges, access_of, fu::plan(rec.size(), edges, launch));
  };
  std::vector<fu::Recorded> line;
  std::vector<std::pair<size_t, size_t>> chain;
  for (size_t i = 0; i < 40; ++i) {
    line.push_back(binary_at(8, 64 * (i + 1), 64 * i, 8192));
    if (i) chain.emplace_back(i - 1, i);
  }
  const fu::FusionDepths l = depths(line, std::vector<std::vector<fu::Access>>(40), chain);
  EXPECT_EQ(l.unfused, 40u);
  EXPECT_EQ(l.fused, 3u);
  const fu::Recorded gemm{};  // not recorded: its accesses are given
  const std::vector<fu::Recorded> two{binary_at(8, 64, 0, 8192),      gemm, binary_at(8, 192, 128, 8192),
                                      binary_at(8, 1088, 1024, 8192), gemm, binary_at(8, 1216, 1152, 8192)};
  auto rd = [](size_t at) { return fu::Access{g_arena + at, 32, false}; };
  auto wr = [](size_t at) { return fu::Access{g_arena + at, 32, true}; };
  const std::vector<std::vector<fu::Access>> gemms{{}, {rd(64), wr(128)}, {}, {}, {rd(1088), wr(1152)}, {}};
  const fu::FusionDepths b = depths(two, gemms, {{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}});
  EXPECT_EQ(b.unfused, 3u);
  EXPECT_EQ(b.fused, 5u);
}

TEST(GraphFusionPlan, OverlapsDependenciesAndSizesSplitGroups) {
  auto groups_of = [](const std::vector<fu::Recorded>& rec, const std::vector<std::pair<size_t, size_t>>& edges) {
    std::vector<const fu::Recorded*> launch;
    for (const auto& r : rec)
      launch.push_back(r.n ? &r : nullptr);
    return fu::plan(rec.size(), edges, launch).group_of;
  };
  // t = a * c; a[1:] += t (writes over a read shifted by one element): apart.
  EXPECT_EQ(groups_of({binary_at(8, 1024, 0, 512), binary_at(8, 4, 4, 1024)}, {{0, 1}}), (std::vector<long>{0, 1}));
  // In place on the same range: together.
  EXPECT_EQ(groups_of({binary_at(8, 1024, 0, 512), binary_at(8, 0, 0, 1024)}, {{0, 1}}), (std::vector<long>{0, 0}));
  // A one-element operand read by all, then written: apart.
  EXPECT_EQ(groups_of({binary_at(8, 1024, 0, 512, 1u << 2), binary_at(8, 512, 512, 2048)}, {{0, 1}}),
            (std::vector<long>{0, 1}));
  // Other element counts: apart.
  EXPECT_EQ(groups_of({binary_at(8, 1024, 0, 512), binary_at(4, 2048, 1024, 1024)}, {{0, 1}}),
            (std::vector<long>{0, 1}));
  // A node whose dependencies are in two groups starts its own; an
  // unrecorded node between two recorded ones separates them.
  fu::Recorded none{};
  EXPECT_EQ(
      groups_of({binary_at(8, 1024, 0, 0), binary_at(8, 2048, 0, 0), binary_at(8, 4096, 1024, 2048)}, {{0, 2}, {1, 2}}),
      (std::vector<long>{0, 1, 2}));
  EXPECT_EQ(groups_of({binary_at(8, 1024, 0, 0), none, binary_at(8, 4096, 1024, 1024)}, {{0, 1}, {1, 2}}),
            (std::vector<long>{0, -1, 1}));
}

// A small product as a head (fusion::Head): it starts a group and its
// steps follow it on the elements it stores, so they may read its output
// there, but not write its inputs (read by every thread) nor read its
// output at one element for all (another thread's).
fu::Recorded head_at(int64_t n, size_t out, size_t a, size_t b) {
  fu::Recorded r{};
  r.dtype = tg::ScalarType::Float32;
  r.n = n;
  r.head.kind = fu::kSmallGemmHead;
  r.head.out = g_arena + out;
  r.head.nreads = 2;
  r.head.read_begin[0] = g_arena + a;
  r.head.read_bytes[0] = 256;
  r.head.read_begin[1] = g_arena + b;
  r.head.read_bytes[1] = 256;
  return r;
}

TEST(GraphFusionPlan, AHeadStartsAGroupItsStepsFollowOnItsOutput) {
  auto groups_of = [](const std::vector<fu::Recorded>& rec) {
    std::vector<const fu::Recorded*> launch;
    std::vector<std::pair<size_t, size_t>> edges;
    for (size_t i = 0; i < rec.size(); ++i) {
      launch.push_back(&rec[i]);
      if (i) edges.emplace_back(i - 1, i);
    }
    return fu::plan(rec.size(), edges, launch).group_of;
  };
  // out (4096) = a (0) b (512); then t = out * c, u = t + d: one group.
  EXPECT_EQ(groups_of({head_at(8, 4096, 0, 512), binary_at(8, 8192, 4096, 1024), binary_at(8, 12288, 8192, 1536)}),
            (std::vector<long>{0, 0, 0}));
  // In place on the product's output: together.
  EXPECT_EQ(groups_of({head_at(8, 4096, 0, 512), binary_at(8, 4096, 4096, 1024)}), (std::vector<long>{0, 0}));
  // A step before the product: the product starts its own group.
  EXPECT_EQ(groups_of({binary_at(8, 8192, 1024, 1536), head_at(8, 4096, 0, 512)}), (std::vector<long>{0, 1}));
  // A step writing the product's input (read by every thread): apart.
  EXPECT_EQ(groups_of({head_at(8, 4096, 0, 512), binary_at(8, 0, 4096, 1024)}), (std::vector<long>{0, 1}));
  EXPECT_EQ(groups_of({head_at(8, 4096, 0, 512), binary_at(8, 520, 4096, 1024)}), (std::vector<long>{0, 1}));
  // One element of the output read by every index (another thread's): apart.
  EXPECT_EQ(groups_of({head_at(8, 4096, 0, 512), binary_at(8, 8192, 1024, 4096, 1u << 2)}), (std::vector<long>{0, 1}));
  // Another element count, or a second product: apart.
  EXPECT_EQ(groups_of({head_at(8, 4096, 0, 512), binary_at(4, 8192, 4096, 1024)}), (std::vector<long>{0, 1}));
  EXPECT_EQ(groups_of({head_at(8, 4096, 0, 512), head_at(8, 8192, 4096, 512)}), (std::vector<long>{0, 1}));
  // Its accesses: the output written, the inputs read.
  const std::vector<fu::Access> acc = fu::accesses_of(head_at(8, 4096, 0, 512));
  ASSERT_EQ(acc.size(), 3u);
  EXPECT_TRUE(acc[0].written);
  EXPECT_EQ(acc[0].begin, g_arena + 4096);
  EXPECT_EQ(acc[0].bytes, 32);
  EXPECT_FALSE(acc[1].written);
  EXPECT_EQ(acc[2].begin, g_arena + 512);
  // A recorded MLP's saved buffer (written by many threads): a step that
  // reads or writes it, even at its own element, stays apart; its accesses
  // include it, written.
  fu::Recorded mlp = head_at(8, 4096, 0, 512);
  mlp.head.written_begin = g_arena + 16384;
  mlp.head.written_bytes = 64;
  EXPECT_EQ(groups_of({mlp, binary_at(8, 8192, 4096, 1024)}), (std::vector<long>{0, 0}));
  EXPECT_EQ(groups_of({mlp, binary_at(8, 8192, 4096, 16384)}), (std::vector<long>{0, 1}));
  EXPECT_EQ(groups_of({mlp, binary_at(8, 16384, 4096, 1024)}), (std::vector<long>{0, 1}));
  const std::vector<fu::Access> macc = fu::accesses_of(mlp);
  ASSERT_EQ(macc.size(), 4u);
  EXPECT_TRUE(macc[3].written);
  EXPECT_EQ(macc[3].begin, g_arena + 16384);
  EXPECT_EQ(macc[3].bytes, 64);
}

// Random DAGs with random recorded nodes over a few overlapping buffers: every
// group is well formed, and merging each group into one node leaves the
// graph acyclic.
TEST(GraphFusionPlan, RandomGraphsGiveWellFormedAcyclicGroups) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const size_t n = 2 + rng() % 40;
    const std::vector<std::pair<size_t, size_t>> edges = random_dag(rng, n, 4, 2);
    std::vector<fu::Recorded> rec(n);
    std::vector<const fu::Recorded*> launch(n, nullptr);
    for (size_t i = 0; i < n; ++i) {
      if (rng() % 5 == 0) continue;
      const int64_t count = rng() % 3 == 0 ? 4 : 8;
      auto at = [&] { return size_t(rng() % 12) * 16; };  // 16-byte steps over 32-byte operands: overlaps
      rec[i] = rng() % 6 == 0 ? head_at(count, at(), at(), at())
                              : binary_at(count, at(), at(), at(), rng() % 4 == 0 ? 1u << 2 : 0u);
      if (rng() % 3 == 0) rec[i].dtype = tg::ScalarType::Float64;
      launch[i] = &rec[i];
    }
    const fu::Plan p = fu::plan(n, edges, launch);
    std::vector<std::vector<size_t>> preds(n);
    for (const auto& [u, v] : edges)
      preds[v].push_back(u);
    for (const auto& g : p.groups) {
      ASSERT_FALSE(g.empty());
      ASSERT_LE(g.size(), size_t(fu::kMaxSteps));
      std::set<size_t> seen;
      for (size_t k = 0; k < g.size(); ++k) {
        const fu::Recorded& r = *launch[g[k]];
        EXPECT_EQ(r.n, launch[g[0]]->n);
        EXPECT_EQ(r.dtype, launch[g[0]]->dtype);
        if (k > 0) {
          for (size_t u : preds[g[k]])
            EXPECT_TRUE(seen.count(u)) << "a later member depends on an outside node";
        }
        seen.insert(g[k]);
      }
      // Written operand ranges meet others only as the same dense range.
      struct R {
        const char* b;
        int64_t len;
        bool w, shared;
        size_t member;
      };
      std::vector<R> rs;
      for (size_t k = 0; k < g.size(); ++k) {
        const fu::Recorded& r = *launch[g[k]];
        const int64_t e = r.dtype == tg::ScalarType::Float64 ? 8 : 4;
        if (r.head.kind != fu::kNoHead) {  // a head only starts a group
          EXPECT_EQ(k, 0u) << "trial " << trial;
          rs.push_back({r.head.out, r.n * e, true, false, k});
          for (int o = 0; o < r.head.nreads; ++o)
            rs.push_back({r.head.read_begin[o], r.head.read_bytes[o], false, true, k});
          continue;
        }
        for (int o = 0; o < r.step.nops; ++o) {
          const bool sc = (r.step.scalar >> o) & 1u;
          rs.push_back({r.step.ptr[o], (sc ? 1 : r.n) * e, o == 0, sc, k});
        }
      }
      for (size_t a = 0; a < rs.size(); ++a)
        for (size_t b = 0; b < rs.size(); ++b) {
          if (!rs[a].w || a == b) continue;
          const bool disjoint = rs[a].b + rs[a].len <= rs[b].b || rs[b].b + rs[b].len <= rs[a].b;
          const bool same = rs[a].b == rs[b].b && rs[a].len == rs[b].len && !rs[b].shared;
          EXPECT_TRUE(disjoint || same || rs[a].member == rs[b].member) << "trial " << trial;
        }
    }
    // The graph with each group as one node is acyclic (Kahn's order covers it).
    auto rep = [&](size_t v) { return p.group_of[v] >= 0 ? n + size_t(p.group_of[v]) : v; };
    const size_t total = n + p.groups.size();
    std::vector<std::set<size_t>> out(total);
    std::vector<size_t> indeg(total, 0);
    for (const auto& [u, v] : edges) {
      const size_t a = rep(u), b = rep(v);
      if (a != b && out[a].insert(b).second) ++indeg[b];
    }
    std::vector<size_t> order;
    for (size_t i = 0; i < total; ++i)
      if (indeg[i] == 0 && (i >= n || p.group_of[i] < 0)) order.push_back(i);
    for (size_t h = 0; h < order.size(); ++h)
      for (size_t b : out[order[h]])
        if (--indeg[b] == 0) order.push_back(b);
    size_t live = 0;
    for (size_t i = 0; i < total; ++i)
      live += i >= n || p.group_of[i] < 0;
    ASSERT_EQ(order.size(), live) << "trial " << trial << ": the fused graph has a cycle";
  }
}

// Two independent branches captured on one stream (GEMMs, their split-K
// workspaces, activations, a column reduction, a strided add): relaxed, the
// graph's longest chain is about half the capture's, and replays equal the
// unrelaxed graph's and the eager results bit for bit.
TEST(GraphsGpu, RelaxedDependenciesLetIndependentBranchesOverlap) {
  REQUIRE_GPU();
  const BranchInputs in = branch_inputs(5);
  // Every intermediate stays alive until the capture ends: memory the
  // allocator hands from one branch to the other would order them.
  std::vector<Tensor> keep;
  auto step = [&] {
    tg::NoGradGuard no_grad;
    Tensor a = in.x1, b = in.x2;
    for (int i = 0; i < 4; ++i) {
      a = keep.emplace_back(tg::tanh(keep.emplace_back(tg::matmul(a, in.w1))));
      b = keep.emplace_back(tg::tanh(keep.emplace_back(tg::matmul(b, in.w2))));
      Tensor ga = keep.emplace_back(tg::matmul(a.t(), in.x1));  // k = 1024: a long, thin product (split-K)
      Tensor gb = keep.emplace_back(tg::matmul(b.t(), in.x2));
      a = keep.emplace_back(a + keep.emplace_back(keep.emplace_back(ga.sum({0})) * 1e-3));      // a column reduction
      b = keep.emplace_back(b + keep.emplace_back(keep.emplace_back(gb.t().sum({1})) * 1e-3));  // strided
    }
    return std::vector<Tensor>{a, b};
  };
  (void)step();
  cu::CUDAGraph relaxed, plain;
  plain.set_relax_dependencies(false);
  auto [r, p] = capture_each(relaxed, plain, step);
  keep.clear();
  EXPECT_EQ(plain.depth(), 0u);
  ASSERT_GT(relaxed.captured_depth(), 20u);
  EXPECT_LE(relaxed.depth(), relaxed.captured_depth() / 2 + 1)
      << "captured " << relaxed.captured_depth() << ", relaxed " << relaxed.depth();
  replay_each_and_compare(relaxed, r, "relaxed graph", plain, p, "unrelaxed graph", replays(5), step);
}

// Branches whose nodes each stream more memory than the L2 holds are left
// as captured (their working sets would evict each other's): depth() 0, the
// replay equal to the eager step; the same step on small tensors is relaxed.
TEST(GraphsGpu, NodesStreamingPastTheL2StayAsCaptured) {
  REQUIRE_GPU();
  const int64_t l2 = cu::get_device_properties(0).l2_cache_size;
  ASSERT_GT(l2, 0);
  for (int64_t n : {int64_t(4096), l2 / 4 + 1024}) {  // floats: one operand of n is past the L2
    SCOPED_TRACE("n = " + std::to_string(n));
    Tensor x = tg::rand({n}, kGpu), y = tg::rand({n}, kGpu);
    std::vector<Tensor> keep;
    auto step = [&] {
      tg::NoGradGuard no_grad;
      Tensor a = x, b = y;
      for (int i = 0; i < 4; ++i) {
        a = keep.emplace_back(a * 1.5 + 0.25);
        b = keep.emplace_back(tg::tanh(b));
      }
      return std::vector<Tensor>{a, b};
    };
    const std::vector<Tensor> eager = step();
    keep.clear();
    cu::CUDAGraph graph;
    std::vector<Tensor> out;
    {
      cu::Graph capture(graph);
      out = step();
    }
    keep.clear();
    if (n > 4096) EXPECT_EQ(graph.depth(), 0u) << "relaxed although each node streams past the L2";
    else EXPECT_GT(graph.depth(), 0u) << "small nodes were not relaxed";
    graph.replay();
    for (size_t i = 0; i < out.size(); ++i)
      EXPECT_TRUE(tg::equal(out[i].to(tg::Device(tg::kCPU)), eager[i].to(tg::Device(tg::kCPU)))) << "output " << i;
  }
}

// Two branches captured one after the other on one stream, each freeing its
// temporaries as it goes: reused at once, the second branch's memory orders
// it after the first (depth as captured); with reuse delayed (the default)
// the branches stay apart. Both replay as the eager step, bit for bit.
TEST(GraphsGpu, DelayedReuseKeepsBranchesThatFreeMemoryApart) {
  REQUIRE_GPU();
  const BranchInputs in = branch_inputs(6);
  auto branch = [](Tensor h, const Tensor& w) {
    for (int i = 0; i < 6; ++i)
      h = tg::tanh(tg::matmul(h, w)) * 0.5 + h;
    return h;
  };
  auto step = [&] {
    tg::NoGradGuard no_grad;
    Tensor a = branch(in.x1, in.w1);
    Tensor b = branch(in.x2, in.w2);
    return std::vector<Tensor>{a, b};
  };
  (void)step();
  cu::CUDAGraph delayed, immediate;
  immediate.set_reuse_delay(0);
  EXPECT_EQ(delayed.reuse_delay(), cu::CUDAGraph::kDefaultReuseDelay);
  auto [d, i] = capture_each(delayed, immediate, step);
  ASSERT_GT(delayed.captured_depth(), 20u);
  EXPECT_LE(delayed.depth(), delayed.captured_depth() / 2 + 1)
      << "captured " << delayed.captured_depth() << ", relaxed " << delayed.depth();
  EXPECT_GT(immediate.depth(), delayed.captured_depth() / 2 + 1)
      << "reused at once, the second branch should wait for the first (relaxed " << immediate.depth() << ")";
  // The delayed pool keeps the first branch's temporaries apart from the second's.
  EXPECT_GT(cu::memory_stats(delayed.pool()).reserved_bytes, cu::memory_stats(immediate.pool()).reserved_bytes);
  replay_each_and_compare(delayed, d, "delayed reuse", immediate, i, "immediate reuse", replays(5), step);
}

// ---- dependency relaxation (CPU: the rules) ---------------------------------------------
namespace relaxing {
using Acc = std::vector<fu::Access>;
fu::Access rd(size_t at, int64_t bytes) { return {g_arena + at, bytes, false}; }
fu::Access wr(size_t at, int64_t bytes) { return {g_arena + at, bytes, true}; }

// Reachability (n <= 64) over `edges`.
std::vector<uint64_t> reach(size_t n, const std::vector<std::pair<size_t, size_t>>& edges) {
  std::vector<std::vector<size_t>> succ(n);
  std::vector<size_t> indeg(n, 0);
  for (const auto& [u, v] : edges) {
    succ[u].push_back(v);
    ++indeg[v];
  }
  std::vector<size_t> order;
  for (size_t i = 0; i < n; ++i)
    if (!indeg[i]) order.push_back(i);
  for (size_t h = 0; h < order.size(); ++h)
    for (size_t v : succ[order[h]])
      if (--indeg[v] == 0) order.push_back(v);
  EXPECT_EQ(order.size(), n) << "cycle";
  std::vector<uint64_t> r(n, 0);  // r[u] bit v: u reaches v
  for (size_t h = order.size(); h-- > 0;) {
    const size_t u = order[h];
    for (size_t v : succ[u])
      r[u] |= r[v] | (uint64_t(1) << v);
  }
  return r;
}

bool conflict(const Acc& a, const Acc& b) {
  for (const auto& x : a)
    for (const auto& y : b)
      if ((x.written || y.written) && x.begin < y.begin + y.bytes && y.begin < x.begin + x.bytes) return true;
  return false;
}
}  // namespace relaxing

TEST(GraphRelaxPlan, TwoInterleavedChainsOnOneStreamBecomeTwoBranches) {
  using namespace relaxing;
  // One stream: a0 b0 a1 b1 ... ; chain a writes/reads [0, 64), chain b [64, 128).
  const size_t n = 20;
  std::vector<Acc> acc(n);
  std::vector<std::pair<size_t, size_t>> edges;
  for (size_t i = 0; i < n; ++i) {
    const size_t base = i % 2 ? 64 : 0;
    acc[i] = {rd(base, 64), wr(base, 64)};
    if (i) edges.emplace_back(i - 1, i);
  }
  std::vector<const Acc*> of;
  for (const Acc& a : acc)
    of.push_back(&a);
  const fu::Relaxed r = fu::relax(n, edges, of);
  EXPECT_EQ(r.depth_before, n);
  EXPECT_EQ(r.depth_after, n / 2);
  for (const auto& [u, v] : r.edges)
    EXPECT_EQ(u % 2, v % 2) << u << " -> " << v << " joins the chains";
  EXPECT_EQ(r.edges.size(), n - 2);
}

TEST(GraphRelaxPlan, ReadersBeforeAWriteAndUnknownNodesStayOrdered) {
  using namespace relaxing;
  // 0 writes x; 1 and 2 read x (concurrent); 3 writes x: after both readers.
  std::vector<Acc> acc = {{wr(0, 32)}, {rd(0, 32), wr(64, 8)}, {rd(0, 32), wr(128, 8)}, {wr(16, 8)}};
  std::vector<const Acc*> of;
  for (const Acc& a : acc)
    of.push_back(&a);
  fu::Relaxed r = fu::relax(4, {{0, 1}, {1, 2}, {2, 3}}, of);
  std::set<std::pair<size_t, size_t>> got(r.edges.begin(), r.edges.end());
  EXPECT_EQ(got, (std::set<std::pair<size_t, size_t>>{{0, 1}, {0, 2}, {1, 3}, {2, 3}, {0, 3}}));
  EXPECT_EQ(r.depth_after, 3u);
  // An unknown node (null) between independent nodes: a barrier.
  std::vector<Acc> acc2 = {{wr(0, 8)}, {wr(64, 8)}, {}, {wr(128, 8)}, {wr(192, 8)}};
  std::vector<const Acc*> of2 = {&acc2[0], &acc2[1], nullptr, &acc2[3], &acc2[4]};
  r = fu::relax(5, {{0, 1}, {1, 2}, {2, 3}, {3, 4}}, of2);
  got = std::set<std::pair<size_t, size_t>>(r.edges.begin(), r.edges.end());
  EXPECT_EQ(got, (std::set<std::pair<size_t, size_t>>{{0, 2}, {1, 2}, {2, 3}, {2, 4}}));
  EXPECT_EQ(r.depth_after, 2u + 1u);
}

// Random DAGs whose nodes touch random overlapping ranges (some unknown):
// every pair ordered before and conflicting (or with an unknown node) stays
// ordered; without unknown nodes every new edge joins a conflicting pair
// (ordered before, or racing before: then in the order captured); the
// result is acyclic.
TEST(GraphRelaxPlan, RandomGraphsKeepEveryConflictOrdered) {
  using namespace relaxing;
  std::mt19937 rng(11);
  for (int trial = 0; trial < 400; ++trial) {
    const size_t n = 2 + rng() % 60;
    const bool unknowns = trial % 2 == 0;
    const std::vector<std::pair<size_t, size_t>> edges = random_dag(rng, n, 6, 3);
    std::vector<Acc> acc(n);
    std::vector<const Acc*> of(n, nullptr);
    for (size_t i = 0; i < n; ++i) {
      if (unknowns && rng() % 7 == 0) continue;
      const int k = int(rng() % 4);
      for (int j = 0; j < k; ++j) {
        const size_t at = size_t(rng() % 24) * 8;
        const int64_t len = int64_t(8 * (1 + rng() % 4));
        acc[i].push_back(rng() % 3 == 0 ? wr(at, len) : rd(at, len));
      }
      of[i] = &acc[i];
    }
    const fu::Relaxed r = fu::relax(n, edges, of);
    const std::vector<uint64_t> before = reach(n, edges), after = reach(n, r.edges);
    for (size_t u = 0; u < n; ++u)
      for (size_t v = 0; v < n; ++v) {
        if (!((before[u] >> v) & 1u)) continue;
        const bool needed = !of[u] || !of[v] || conflict(acc[u], acc[v]);
        if (needed) {
          EXPECT_TRUE((after[u] >> v) & 1u) << "trial " << trial << ": " << u << " -> " << v << " lost";
        }
      }
    if (!unknowns)
      for (const auto& [u, v] : r.edges) {
        EXPECT_TRUE(conflict(acc[u], acc[v])) << "trial " << trial << ": " << u << " -> " << v << " needs nothing";
        EXPECT_FALSE((before[v] >> u) & 1u) << "trial " << trial << ": " << u << " -> " << v << " reversed";
      }
  }
}

TEST(GraphsGpu, CaptureOnTheLegacyDefaultStreamIsRefused) {
  REQUIRE_GPU();
  cu::CUDAGraph g;
  cu::StreamGuard guard(cu::default_stream());
  EXPECT_ERROR_CONTAINS(g.capture_begin(), "legacy default stream");
  EXPECT_FALSE(g.has_graph());
}

}  // namespace

namespace {
// Takes the device's free memory but `keep` bytes (within 64 MiB) in tensors.
std::vector<Tensor> fill_device_but(int64_t keep) {
  std::vector<Tensor> fill;
  for (int64_t chunk : {int64_t(1) << 30, int64_t(64) << 20}) {
    for (;;) {
      try {
        fill.push_back(tg::empty({chunk / 4}, tg::TensorOptions().device(kGpu)));
      } catch (const tg::Error&) {
        break;
      }
    }
  }
  for (int64_t freed = 0; freed < keep && !fill.empty(); fill.pop_back())
    freed += fill.back().numel() * 4;
  cu::empty_cache();  // the freed chunks go back to the device
  return fill;
}
}  // namespace

// Blocks whose reuse is delayed are reused when the device has no memory
// left: a capture that fits with immediate reuse fits with the delay.
// Whole-device: it fills the GPU, so ctest runs it alone.
TEST(GraphsGpuWholeDevice, HeldBlocksAreReusedWhenTheDeviceRunsOutOfMemory) {
  REQUIRE_GPU();
  const int64_t n = int64_t(8) << 20;  // 32 MiB of f32
  const Tensor x = tg::rand({n}, tg::TensorOptions().dtype(tg::kFloat32)).to(kGpu);
  auto step = [&] {
    Tensor y = x;
    for (int i = 0; i < 24; ++i)
      y = y * 0.5 + x;  // 48 temporaries of 32 MiB: 1.5 GiB in all
    return y;
  };
  const Tensor eager = step();
  cu::synchronize();
  std::vector<Tensor> fill = fill_device_but(int64_t(256) << 20);
  ASSERT_FALSE(fill.empty());
  cu::CUDAGraph g(/*keep_graph=*/true);  // instantiated below, once the device has room
  g.set_reuse_delay(size_t(1) << 40);    // never, unless memory runs out
  Tensor out;
  {
    cu::Graph capture(g);
    out = step();
  }
  const int64_t pool = cu::memory_stats(g.pool()).reserved_bytes;
  fill.clear();
  cu::empty_cache();
  // Less than the step's temporaries: held blocks were handed out again (and
  // more than the device had left, so without them the capture would fail).
  EXPECT_LT(pool, 48 * 4 * n) << "the held blocks were not reused";
  g.instantiate();
  g.replay();
  expect_same({out}, {eager}, "after reusing held blocks");
}
