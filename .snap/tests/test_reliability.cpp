// Reliability: graphs of any depth are built, differentiated and freed
// without recursion (also on a thread with a 256 KiB stack); metadata calls
// on undefined tensors throw; the functional API with create_graph stays
// differentiable with respect to x; the no-grad_fn error names create_graph;
// a child forked after the parent used the GPU runs CPU autograd.
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>

#include "reference.h"

namespace {

using tg::Tensor;
namespace ag = tg::autograd;

// Sanitizer builds (Debug, instrumented) run the same graphs at a smaller
// depth so the suite stays within CI's budget; the 256 KiB-stack case keeps
// a depth that recursion could never survive there either.
#ifdef TAPEGRAD_SANITIZE_BUILD
constexpr int64_t kLongChain = 200000;
constexpr int64_t kDeepChain = 50000;
#else
constexpr int64_t kLongChain = 10000000;
constexpr int64_t kDeepChain = 1000000;
#endif

Tensor scalar(double v) { return tg::scalar_tensor(v, tg::TensorOptions().dtype(tg::kFloat64)); }

// Runs fn on a new thread whose stack is `bytes` large; rethrows its error.
void run_on_small_stack(size_t bytes, std::function<void()> fn) {
  struct Ctx {
    std::function<void()> fn;
    std::exception_ptr error;
  } ctx{std::move(fn), nullptr};
  pthread_attr_t attr;
  ASSERT_EQ(pthread_attr_init(&attr), 0);
  ASSERT_EQ(pthread_attr_setstacksize(&attr, bytes), 0);
  pthread_t th;
  auto entry = [](void* p) -> void* {
    auto* c = static_cast<Ctx*>(p);
    try {
      c->fn();
    } catch (...) {
      c->error = std::current_exception();
    }
    return nullptr;
  };
  ASSERT_EQ(pthread_create(&th, &attr, entry, &ctx), 0);
  pthread_join(th, nullptr);
  pthread_attr_destroy(&attr);
  if (ctx.error) std::rethrow_exception(ctx.error);
}

TEST(Depth, LongChainIsBuiltDifferentiatedAndFreedOnTheMainThread) {
  Tensor x = scalar(0.5).requires_grad_();
  std::weak_ptr<ag::Node> first;
  {
    Tensor y = x;
    for (int64_t i = 0; i < kLongChain; ++i) {
      y = (i % 2 == 0) ? y + 0.5 : y - 0.25;
      if (i == 0) first = y.grad_fn();
    }
    EXPECT_DOUBLE_EQ(y.item<double>(), 0.5 + 0.25 * double(kLongChain / 2));
    y.backward();
    EXPECT_DOUBLE_EQ(x.grad().item<double>(), 1.0);
    EXPECT_FALSE(first.expired());  // y still holds the whole chain
  }
  EXPECT_TRUE(first.expired()) << "the chain was not freed";
}

TEST(Depth, DeepChainWithCreateGraphThenSecondBackwardThenFreed) {
  const double N = double(kDeepChain);
  Tensor x = scalar(0.5).requires_grad_();
  Tensor a = scalar(1.0).requires_grad_();
  std::weak_ptr<ag::Node> first;
  {
    Tensor y = x;
    for (int64_t i = 0; i < kDeepChain; ++i) {
      y = y * a;  // saves both inputs: the chain also runs through saved variables
      if (i % 1000 == 999) y = y.unsqueeze(0).squeeze(0);  // chains of views too
      if (i == 0) first = y.grad_fn();
    }
    // y = x a^N: dy/da = N x a^(N-1) = N / 2, recorded (create_graph).
    Tensor ga = ag::grad({y}, {a}, {}, std::nullopt, /*create_graph=*/true)[0];
    EXPECT_TRUE(ga.requires_grad());
    EXPECT_DOUBLE_EQ(ga.item<double>(), N * 0.5);
    // d(ga)/dx = N a^(N-1) = N; d(ga)/da = N (N-1) x a^(N-2) = N (N-1) / 2.
    auto g2 = ag::grad({ga}, {x, a});
    EXPECT_DOUBLE_EQ(g2[0].item<double>(), N);
    EXPECT_DOUBLE_EQ(g2[1].item<double>(), N * (N - 1) * 0.5);
  }
  EXPECT_TRUE(first.expired()) << "the chain was not freed";
}

TEST(Depth, DeepGraphIsFreedOnAThreadWithA256KiBStack) {
  // A chain through saved variables (sin saves its input), saved-tensor
  // hooks (the payload holds a tensor with a grad_fn), tensor hooks that
  // capture tensors of the chain, and views; built and differentiated on the
  // main thread, its last reference dropped on a 256 KiB stack.
  Tensor x = scalar(0.3).requires_grad_();
  std::weak_ptr<ag::Node> first;
  auto root = std::make_shared<Tensor>();
  std::atomic<int> hook_calls{0};
  {
    ag::SavedTensorHooksGuard hooks([](const Tensor& t) { return std::any(t); },
                                    [](const std::any& p) { return std::any_cast<Tensor>(p); });
    Tensor y = x;
    for (int64_t i = 0; i < kDeepChain; ++i) {
      Tensor prev = y;
      y = tg::sin(y) + 0.0;
      if (i % 997 == 0) {
        y.register_hook([prev, &hook_calls](const Tensor&) {
          hook_calls++;
          return Tensor();
        });
        y = y.view({1}).view({});
      }
      if (i == 0) first = y.grad_fn();
    }
    *root = y;
  }
  Tensor g = ag::grad({*root}, {x}, {}, /*retain_graph=*/true)[0];
  EXPECT_TRUE(std::isfinite(g.item<double>()));
  EXPECT_GT(hook_calls.load(), 0);
  EXPECT_FALSE(first.expired());
  run_on_small_stack(256 * 1024, [&] { root.reset(); });
  EXPECT_TRUE(first.expired()) << "the graph was not freed";
  // Built, differentiated and freed on the small stack too.
  run_on_small_stack(256 * 1024, [&] {
    Tensor z = x;
    for (int64_t i = 0; i < kDeepChain / 4; ++i)
      z = tg::exp(z) * 0.0 + z;  // dz/dx = 1
    Tensor gz = ag::grad({z}, {x})[0];
    if (gz.item<double>() != 1.0) throw std::runtime_error("wrong gradient on the small stack");
  });
}

// ---- what a new user hit ---------------------------------------------------------

TEST(NewUser, MetadataOfAnUndefinedTensorThrows) {
  Tensor x = tg::ones({2, 3}).requires_grad_();
  const Tensor& never = x.grad();  // no backward yet
  ASSERT_FALSE(never.defined());
  EXPECT_ERROR_CONTAINS(never.dim(), "dim: called on an undefined tensor");
  EXPECT_ERROR_CONTAINS(never.sizes(), "sizes: called on an undefined tensor");
  EXPECT_ERROR_CONTAINS(never.numel(), "numel: called on an undefined tensor");
  EXPECT_ERROR_CONTAINS(never.size(0), "size: called on an undefined tensor");
  EXPECT_ERROR_CONTAINS(never.stride(0), "stride: called on an undefined tensor");
  EXPECT_ERROR_CONTAINS(never.strides(), "strides: called on an undefined tensor");
  EXPECT_ERROR_CONTAINS(never.dtype(), "dtype: called on an undefined tensor");
  EXPECT_ERROR_CONTAINS(never.device(), "device: called on an undefined tensor");
  EXPECT_ERROR_CONTAINS(never.is_contiguous(), "is_contiguous: called on an undefined tensor");
  EXPECT_ERROR_CONTAINS(never.is_sparse(), "is_sparse: called on an undefined tensor");
  EXPECT_ERROR_CONTAINS(never.is_floating_point(), "dtype: called on an undefined tensor");
  EXPECT_ERROR_CONTAINS(never.options(), "dtype: called on an undefined tensor");
  EXPECT_ERROR_CONTAINS(never.data_ptr(), "data_ptr: called on an undefined tensor");
  EXPECT_ERROR_CONTAINS(never.version(), "version: called on an undefined tensor");
  EXPECT_ERROR_CONTAINS(never.detach(), "detach: called on an undefined tensor");
  EXPECT_ERROR_CONTAINS(never.item<float>(), "item");
  EXPECT_ERROR_CONTAINS(never.clone(), "clone");
  EXPECT_ERROR_CONTAINS(Tensor().is_cuda(), "device: called on an undefined tensor");
  EXPECT_ERROR_CONTAINS(Tensor().storage_offset(), "storage_offset: called on an undefined");
  // Calls that make sense on an undefined tensor still answer.
  EXPECT_FALSE(never.requires_grad());
  EXPECT_TRUE(never.is_leaf());
  // The library is usable afterwards.
  tg::sum(x * x).backward();
  EXPECT_EQ(x.grad().dim(), 2);
  EXPECT_DOUBLE_EQ(x.grad().sum().item<double>(), 12.0);
}

// d/dx of the Hessian of sum(x^4) is 24x (on the diagonal); the same for
// every function of the functional API, against closed forms.
TEST(NewUser, FunctionalApiWithCreateGraphIsDifferentiableInX) {
  auto opts = tg::TensorOptions().dtype(tg::kFloat64);
  Tensor x = tg::tensor({0.5, -1.0, 2.0}, {3}, opts).requires_grad_();
  const std::vector<double> xv = {0.5, -1.0, 2.0};
  auto quartic = [](const Tensor& t) { return (t * t * t * t).sum(); };
  auto cube = [](const Tensor& t) { return t * t * t; };

  {  // hessian: H = diag(12 x^2); d sum(H) / dx = 24 x.
    Tensor H = ag::hessian(quartic, x, /*create_graph=*/true);
    ASSERT_TRUE(H.requires_grad());
    Tensor g = ag::grad({H.sum()}, {x})[0];
    tgtest::expect_values(g, {24 * xv[0], 24 * xv[1], 24 * xv[2]}, 1e-12, "d hessian/dx");
  }
  {  // jacobian of x^3: diag(3 x^2); d sum(J) / dx = 6 x.
    Tensor J = ag::jacobian(cube, x, true);
    Tensor g = ag::grad({J.sum()}, {x})[0];
    tgtest::expect_values(g, {6 * xv[0], 6 * xv[1], 6 * xv[2]}, 1e-12, "d jacobian/dx");
  }
  Tensor v = tg::tensor({1.0, 2.0, 3.0}, {3}, opts);
  {  // vjp of x^3 with v: 3 x^2 v; d sum / dx = 6 x v. Also the value x^3.
    auto [y, g1] = ag::vjp(cube, x, v, true);
    Tensor g = ag::grad({g1.sum() + y.sum()}, {x})[0];
    std::vector<double> e;
    for (int i = 0; i < 3; ++i)
      e.push_back(6 * xv[i] * (i + 1) + 3 * xv[i] * xv[i]);
    tgtest::expect_values(g, e, 1e-12, "d vjp/dx");
  }
  {  // jvp of x^3 with v: 3 x^2 v; d sum / dx = 6 x v.
    auto [y, jv] = ag::jvp(cube, x, v, true);
    Tensor g = ag::grad({jv.sum()}, {x})[0];
    tgtest::expect_values(g, {6 * xv[0] * 1, 6 * xv[1] * 2, 6 * xv[2] * 3}, 1e-12, "d jvp/dx");
  }
  {  // hvp of sum(x^4) with v: 12 x^2 v; d sum / dx = 24 x v.
    auto [y, hv] = ag::hvp(quartic, x, v, true);
    Tensor g = ag::grad({hv.sum()}, {x})[0];
    tgtest::expect_values(g, {24 * xv[0] * 1, 24 * xv[1] * 2, 24 * xv[2] * 3}, 1e-12, "d hvp/dx");
  }
  // per_sample_hessian of f(x)[b] = sum_j x[b, j]^4: H[b, 0] = diag(12 x^2);
  // d sum(H) / dx = 24 x, for both strategies.
  Tensor X = tg::tensor({0.5, -1.0, 2.0, 1.5}, {2, 2}, opts).requires_grad_();
  auto rowwise = [](const Tensor& t) { return (t * t * t * t).sum({1}, true); };
  for (auto s : {ag::HessianStrategy::Rows, ag::HessianStrategy::BatchedCotangents}) {
    Tensor H = ag::per_sample_hessian(rowwise, X, s, true);
    Tensor g = ag::grad({H.sum()}, {X})[0];
    tgtest::expect_values(g, {12.0, -24.0, 48.0, 36.0}, 1e-12, "d per_sample_hessian/dx");
  }
  // Without create_graph the results carry no history, as before.
  EXPECT_FALSE(ag::hessian(quartic, x).requires_grad());
  // x that does not require grad: results are still differentiable in what
  // fn closes over.
  Tensor w = tg::tensor({2.0}, {1}, opts).requires_grad_();
  Tensor xc = x.detach();
  Tensor H = ag::hessian([&](const Tensor& t) { return (w * t * t * t * t).sum(); }, xc, true);
  Tensor gw = ag::grad({H.sum()}, {w})[0];
  double e = 0;
  for (double xi : xv)
    e += 12 * xi * xi;
  EXPECT_NEAR(gw.item<double>(), e, 1e-12);
}

TEST(NewUser, NoGradFnErrorNamesCreateGraph) {
  Tensor x = tg::ones({3}).requires_grad_();
  Tensor g = ag::grad({(x * x).sum()}, {x})[0];  // no create_graph
  EXPECT_ERROR_CONTAINS(ag::grad({g.sum()}, {x}), "create_graph=true");
  EXPECT_ERROR_CONTAINS(g.sum().backward(), "create_graph=true");
  // With create_graph the same second derivative works: d sum(2x)/dx = 2.
  Tensor g2 = ag::grad({(x * x).sum()}, {x}, {}, std::nullopt, true)[0];
  tgtest::expect_values(ag::grad({g2.sum()}, {x})[0], {2, 2, 2}, 0, "second derivative");
}

// A child forked after the parent used the GPU and ran backward (on the CPU
// and on the device worker): the child's CPU forward, backward and double
// backward are right and touch no CUDA; CUDA in the child is a tg::Error
// that says why, not a crash or a hang (alarm: a hang fails the test).
TEST(Fork, ChildRunsCpuAutogradAfterTheParentUsedTheGpu) {
  const bool gpu = tg::cuda::is_available();
  const auto f64 = tg::TensorOptions().dtype(tg::kFloat64);
  if (gpu) {
    Tensor g = tg::randn({1024}, f64.device(tg::Device(tg::kCUDA, 0))).requires_grad_();
    (tg::sin(g) * g).sum().backward();
    tg::cuda::synchronize();
  }
  Tensor big = tg::randn({1 << 20}, f64);
  const double parent_sum = tg::sin(big).sum().item<double>();  // the CPU thread pool is up
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::alarm(120);
    int code = 0;
    try {
      Tensor x = tg::linspace(-2.0, 3.0, 41, f64).requires_grad_();
      Tensor y = (tg::sin(x) * x).sum();
      Tensor gx = ag::grad({y}, {x}, {}, std::nullopt, /*create_graph=*/true)[0];
      Tensor ggx = ag::grad({gx.sum()}, {x})[0];
      const auto xs = x.detach().to_vector<double>(), g1 = gx.detach().to_vector<double>(),
                 g2 = ggx.to_vector<double>();
      for (size_t i = 0; i < xs.size(); ++i) {
        if (std::abs(g1[i] - (std::sin(xs[i]) + xs[i] * std::cos(xs[i]))) > 1e-12) code = 2;
        if (std::abs(g2[i] - (2 * std::cos(xs[i]) - xs[i] * std::sin(xs[i]))) > 1e-12) code = 3;
      }
      (tg::sin(x) * x).sum().backward();
      if (!x.grad().defined() || !tg::allclose(x.grad(), gx.detach())) code = 4;
      const double child_sum = tg::sin(big).sum().item<double>();  // the thread pool works in the child
      if (std::abs(child_sum - parent_sum) > 1e-9 * (1 + std::abs(parent_sum))) code = 5;
      if (gpu) {
        try {
          (void)tg::ones({2}, f64.device(tg::Device(tg::kCUDA, 0)));
          code = 6;
        } catch (const tg::Error& e) {
          if (!std::strstr(e.what(), "forked")) code = 7;
        }
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: %s\n", e.what());
      code = 8;
    }
    std::fflush(nullptr);
    ::_exit(code);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died (signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0)
                                 << "; 14 = the 120 s alarm: it hung)";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "2/3: wrong first/second derivative, 4: backward, 5: thread pool, "
                                       "6: CUDA worked after fork, 7: its error does not say why, 8: threw";
}

}  // namespace
