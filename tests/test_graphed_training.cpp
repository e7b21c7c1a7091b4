// Graphed training (docs/GRAPHS.md "Static tensors", docs/OPTIM.md "Fused
// and capturable"): a whole PINN training step — forward, Laplacian by
// double backward, loss backward into static .grad, zero_grad and a
// capturable Adam step — captured once and replayed equals the eager steps
// bit for bit; static tensors cannot move while a graph depends on them.
// GPU tests skip with a message without a GPU.
#include <cmath>

#include "reference.h"

namespace {

using tg::Tensor;
namespace ag = tg::autograd;
namespace cu = tg::cuda;
namespace optim = tg::optim;

const tg::Device kGpu(tg::kCUDA, 0);
const auto kF64 = tg::TensorOptions().dtype(tg::kFloat64);

// A Poisson-style PINN loss on collocation points x: mean((Δu - f)^2), the
// Laplacian by double backward.
Tensor pinn_loss(tg::nn::Module& net, const Tensor& x_in) {
  Tensor x = x_in.detach().requires_grad_();
  Tensor u = net.forward(x);
  Tensor du = ag::grad({u.sum()}, {x}, {}, std::nullopt, /*create_graph=*/true)[0];
  Tensor lap;
  for (int64_t j = 0; j < x.size(1); ++j) {
    Tensor dj = ag::grad({du.select(1, j).sum()}, {x}, {}, std::nullopt, true)[0].select(1, j);
    lap = lap.defined() ? lap + dj : dj;
  }
  Tensor f = tg::sin(x.detach().select(1, 0) * 3.0) * tg::sin(x.detach().select(1, 1) * 3.0);
  return (lap - f).square().mean();
}

// One training step; returns the loss (detached).
Tensor train_step(tg::nn::Module& net, optim::Optimizer& opt, const Tensor& x) {
  opt.zero_grad(/*set_to_none=*/false);
  Tensor loss = pinn_loss(net, x);
  loss.backward();
  opt.step();
  return loss.detach();
}

struct Trainer {
  std::shared_ptr<tg::nn::SequentialImpl> net;
  std::unique_ptr<optim::Adam> opt;
};

Trainer make_trainer() {
  tg::manual_seed(42);
  Trainer r;
  r.net = tg::nn::MLP({2, 24, 24, 1}, "tanh", kF64);
  r.net->to(kGpu);
  optim::AdamOptions o;
  o.lr = 2e-3;
  o.capturable = true;
  r.opt = std::make_unique<optim::Adam>(r.net->parameters(), o);
  return r;
}

Tensor points(int64_t n) { return (tg::rand({n, 2}, kF64) * 2.0 - 1.0).to(kGpu); }

// 200 steps, eager against one captured step replayed, from the same seed,
// with fresh collocation points each step and a learning-rate change half
// way (the rate lives on the device: set_lr between replays is seen by the
// graph): every loss and the final parameters are bitwise equal.
TEST(GraphedTrainingGpu, WholePinnStepWithCapturableAdamEqualsEager) {
  REQUIRE_GPU();
  Trainer eager = make_trainer(), graphed = make_trainer();
  ASSERT_TRUE(graphed.opt->fused());
  const int64_t n = 256;
  const int steps = tgtest::replays(200);
  std::vector<Tensor> xs;
  tg::manual_seed(7);
  for (int k = 0; k < steps + 3; ++k)
    xs.push_back(points(n));

  // Warm-up (3 steps) on both, the graphed one on a side stream, then capture.
  Tensor x_static = xs[0].clone();
  std::vector<double> eager_losses, graphed_losses;
  for (int k = 0; k < 3; ++k)
    eager_losses.push_back(train_step(*eager.net, *eager.opt, xs[size_t(k)]).item<double>());
  cu::Stream side = cu::stream_from_pool();
  side.wait_stream(cu::current_stream());
  {
    cu::StreamGuard g(side);
    for (int k = 0; k < 3; ++k) {
      x_static.copy_(xs[size_t(k)]);
      graphed_losses.push_back(train_step(*graphed.net, *graphed.opt, x_static).item<double>());
    }
  }
  cu::current_stream().wait_stream(side);
  cu::CUDAGraph graph;
  Tensor loss_static;
  {
    cu::Graph capture(graph);
    loss_static = train_step(*graphed.net, *graphed.opt, x_static);
  }
  for (int k = 3; k < steps + 3; ++k) {
    if (k == steps / 2 + 3) {
      eager.opt->set_lr(5e-4);
      graphed.opt->set_lr(5e-4);
    }
    eager_losses.push_back(train_step(*eager.net, *eager.opt, xs[size_t(k)]).item<double>());
    x_static.copy_(xs[size_t(k)]);
    graph.replay();
    graphed_losses.push_back(loss_static.item<double>());
  }
  ASSERT_EQ(eager_losses.size(), graphed_losses.size());
  for (size_t k = 0; k < eager_losses.size(); ++k)
    ASSERT_EQ(eager_losses[k], graphed_losses[k]) << "step " << k;
  auto pe = eager.net->named_parameters(), pg = graphed.net->named_parameters();
  ASSERT_EQ(pe.size(), pg.size());
  for (size_t i = 0; i < pe.size(); ++i)
    EXPECT_TRUE(tg::equal(pe[i].second, pg[i].second)) << pe[i].first;
  // It trained: the loss fell (over the full run; the sanitizer runs a few
  // steps only).
  if (steps >= 100) {
    EXPECT_LT(eager_losses.back(), eager_losses.front());
  }
}

// While a graph recorded them, static parameters and their .grad cannot
// move: the operations that would move them throw naming the tensor, a
// .grad replaced behind the library's back is caught by replay(), and
// putting it back makes replay work again; after reset() they may move.
TEST(GraphedTrainingGpu, StaticTensorsCannotMoveWhileAGraphDependsOnThem) {
  REQUIRE_GPU();
  Trainer r = make_trainer();
  Tensor x = points(64);
  cu::Stream side = cu::stream_from_pool();
  side.wait_stream(cu::current_stream());
  {
    cu::StreamGuard g(side);
    train_step(*r.net, *r.opt, x);
  }
  cu::current_stream().wait_stream(side);
  Tensor w0 = r.net->parameters()[0];
  EXPECT_EQ(cu::static_name(w0), "Adam parameter 0");
  EXPECT_FALSE(cu::static_in_use(w0));  // no graph yet
  cu::CUDAGraph graph;
  {
    cu::Graph capture(graph);
    train_step(*r.net, *r.opt, x);
  }
  EXPECT_TRUE(cu::static_in_use(w0));
  EXPECT_ERROR_CONTAINS(r.opt->zero_grad(/*set_to_none=*/true),
                        "zero_grad(set_to_none=true): the .grad of the static tensor 'Adam parameter 0'");
  EXPECT_TRUE(w0.grad().defined());  // nothing was dropped
  EXPECT_ERROR_CONTAINS(r.net->to(tg::kFloat32), "Module::to: the data of the static tensor 'Adam parameter 0'");
  EXPECT_EQ(w0.dtype(), tg::kFloat64);
  {  // create_graph would replace the .grad (out of place)
    Tensor l = r.net->forward(x).sum();
    EXPECT_ERROR_CONTAINS(l.backward({}, std::nullopt, /*create_graph=*/true),
                          "AccumulateGrad: the .grad (create_graph accumulates out of place) of the static "
                          "tensor 'Adam parameter ");
  }
  const Tensor g0 = w0.grad();
  w0.mutable_grad() = g0.clone();
  EXPECT_ERROR_CONTAINS(graph.replay(),
                        "replay: the static tensor 'Adam parameter 0' moved since the capture "
                        "(its .grad was at");
  w0.mutable_grad() = g0;  // back where the graph writes it
  graph.replay();
  tg::cuda::synchronize();
  graph.reset();
  EXPECT_FALSE(cu::static_in_use(w0));
  r.opt->zero_grad(/*set_to_none=*/true);
  EXPECT_FALSE(w0.grad().defined());
  // Eager work goes on: a step from scratch.
  train_step(*r.net, *r.opt, x);
  EXPECT_TRUE(w0.grad().defined());
}

// A step that would create optimizer state under capture is refused (the
// zeros would be captured and reset the state on every replay); the error
// leaves eager work usable.
TEST(GraphedTrainingGpu, StateCreatedUnderCaptureIsRefused) {
  REQUIRE_GPU();
  tg::manual_seed(3);
  auto net = tg::nn::MLP({2, 8, 1}, "tanh", kF64);
  net->to(kGpu);
  optim::Adam opt(net->parameters());  // not capturable: state made at the first step
  Tensor x = points(16);
  net->forward(x).sum().backward();
  cu::CUDAGraph graph;
  EXPECT_ERROR_CONTAINS(([&] {
                          cu::Graph capture(graph);
                          opt.step();
                        }()),
                        "Adam: parameter 0 has no optimizer state yet");
  opt.step();  // eagerly: fine
  EXPECT_EQ(opt.steps(), 1);
}

}  // namespace

namespace {

// A graphed MLP with derivatives captured to order 2: its value, first
// derivative (grad with create_graph) and the gradients of a loss built from
// that derivative equal eager ones; gradcheck and gradgradcheck pass through
// the replayed graphs.
TEST(GraphedTrainingGpu, GraphedCallableFirstAndSecondDerivativesEqualEager) {
  REQUIRE_GPU();
  tg::manual_seed(8);
  auto net = tg::nn::MLP({2, 16, 16, 1}, "tanh", kF64);
  net->to(kGpu);
  Tensor sample = points(32).requires_grad_();
  cu::GraphedOptions go;
  go.max_order = 2;
  auto graphed = cu::make_graphed_callables({cu::Callable(net)}, {{sample}}, go)[0];
  EXPECT_EQ(graphed.name(), "Sequential");
  std::vector<Tensor> params = net->parameters();
  auto loss_and_grads = [&](const std::function<Tensor(const Tensor&)>& f, const Tensor& x_in) {
    Tensor x = x_in.detach().requires_grad_();
    Tensor u = f(x);
    Tensor du = ag::grad({u.sum()}, {x}, {}, std::nullopt, /*create_graph=*/true)[0];
    Tensor loss = du.square().sum() + u.mean();
    std::vector<Tensor> wrt = params;
    wrt.push_back(x);
    std::vector<Tensor> out = ag::grad({loss}, wrt);
    out.insert(out.begin(), {u.detach(), du.detach(), loss.detach()});
    return out;
  };
  for (int k = 0; k < 3; ++k) {
    Tensor x = points(32);
    auto want = loss_and_grads([&](const Tensor& t) { return net->forward(t); }, x);
    auto got = loss_and_grads([&](const Tensor& t) { return graphed(t); }, x);
    ASSERT_EQ(want.size(), got.size());
    // The value and first derivative run the eager kernels: exactly equal.
    EXPECT_TRUE(tg::equal(want[0], got[0])) << "u, call " << k;
    EXPECT_TRUE(tg::equal(want[1], got[1])) << "du, call " << k;
    // Second-order sums meet in another order (the graphed path adds the
    // level-2 and level-1 contributions in the engine): close, not bitwise.
    for (size_t i = 2; i < want.size(); ++i) {
      const double scale = 1 + tg::amax(tg::abs(want[i])).item<double>();
      EXPECT_LT(tg::amax(tg::abs(want[i] - got[i])).item<double>(), 1e-12 * scale) << "entry " << i << " call " << k;
    }
  }
  // Level 1 replays twice per call: for du, and for u.mean()'s gradient
  // (level 0's backward) in the loss backward.
  EXPECT_EQ(graphed.replays(0), 3);
  EXPECT_EQ(graphed.replays(1), 6);
  EXPECT_EQ(graphed.replays(2), 3);
  // Finite differences through the replays (f64). Each analytic derivative
  // is taken right after its own call: a graphed callable keeps one call's
  // values (gradcheck's interleaving of calls would be refused as stale).
  Tensor x = points(32);
  auto sum_u = [&](const Tensor& at) {
    tg::NoGradGuard no_grad;
    return graphed(at).sum().item<double>();
  };
  auto grad_at = [&](const Tensor& at) {
    Tensor xr = at.detach().clone().requires_grad_();
    return ag::grad({graphed(xr).sum()}, {xr})[0];
  };
  Tensor g1 = grad_at(x).reshape({-1});
  const double h = 1e-6;
  for (int64_t idx : {0, 7, 33, 63}) {
    Tensor e = tg::zeros({64}, kF64).to(kGpu);
    e.narrow(0, idx, 1).fill_(1.0);
    e = e.view({32, 2});
    const double num = (sum_u(x + e * h) - sum_u(x - e * h)) / (2 * h);
    EXPECT_NEAR(g1.narrow(0, idx, 1).item<double>(), num, 1e-7) << "d/dx element " << idx;
  }
  // A Hessian-vector product by double backward (level 2) against central
  // differences of the gradient along v.
  Tensor v = points(32);
  Tensor xr = x.clone().requires_grad_();
  Tensor gx = ag::grad({graphed(xr).sum()}, {xr}, {}, std::nullopt, /*create_graph=*/true)[0];
  Tensor hv = ag::grad({(gx * v).sum()}, {xr})[0];
  const double hh = 1e-5;
  Tensor hv_num = (grad_at(x + v * hh) - grad_at(x - v * hh)) / (2 * hh);
  EXPECT_LT(tg::amax(tg::abs(hv - hv_num)).item<double>(), 1e-6);
}

// The PINN loss through a graphed callable: the Laplacian as n
// second-derivative calls of one first-derivative call (each keeps its own
// values: one instance each, captured on its first call), then their
// gradient into the parameters (order 3). Equal to eager to 1e-12, for
// n = 2 and 3, over several steps (the first captures, the later replay).
TEST(GraphedTrainingGpu, GraphedCallableServesThePinnLaplacian) {
  REQUIRE_GPU();
  for (int64_t n : {2, 3}) {
    tg::manual_seed(20 + uint64_t(n));
    auto net = tg::nn::MLP({n, 16, 16, 1}, "tanh", kF64);
    net->to(kGpu);
    auto pts = [&] { return (tg::rand({24, n}, kF64) * 2.0 - 1.0).to(kGpu); };
    cu::GraphedOptions go;
    go.max_order = 3;
    auto graphed = cu::make_graphed_callables({cu::Callable(net)}, {{pts().requires_grad_()}}, go)[0];
    std::vector<Tensor> params = net->parameters();
    auto loss_grads = [&](const std::function<Tensor(const Tensor&)>& f, const Tensor& x_in) {
      Tensor x = x_in.detach().requires_grad_();
      Tensor u = f(x);
      Tensor du = ag::grad({u.sum()}, {x}, {}, std::nullopt, /*create_graph=*/true)[0];
      Tensor lap;
      for (int64_t d = 0; d < n; ++d) {
        Tensor dd = ag::grad({du.select(1, d).sum()}, {x}, {}, std::nullopt, true)[0].select(1, d);
        lap = lap.defined() ? lap + dd : dd;
      }
      Tensor loss = tg::square(lap - tg::sin(x.detach().select(1, 0))).mean();
      // The Laplacian does not reach the last bias: no gradient (zeros here).
      std::vector<Tensor> out = ag::grad({loss}, params, {}, std::nullopt, false, /*allow_unused=*/true);
      for (size_t i = 0; i < out.size(); ++i)
        if (!out[i].defined()) out[i] = tg::zeros_like(params[i]);
      out.insert(out.begin(), {lap.detach(), loss.detach()});
      return out;
    };
    for (int step = 0; step < 3; ++step) {
      Tensor x = pts();
      auto want = loss_grads([&](const Tensor& t) { return net->forward(t); }, x);
      auto got = loss_grads([&](const Tensor& t) { return graphed(t); }, x);
      ASSERT_EQ(want.size(), got.size());
      for (size_t i = 0; i < want.size(); ++i) {
        const double scale = 1 + tg::amax(tg::abs(want[i])).item<double>();
        EXPECT_LT(tg::amax(tg::abs(want[i] - got[i])).item<double>(), 1e-12 * scale)
            << "n " << n << " step " << step << " entry " << i << " (0: Laplacian, 1: loss, then parameters)";
      }
    }
    EXPECT_EQ(graphed.replays(0), 3) << n;
    EXPECT_EQ(graphed.replays(2), 3 * n) << n;  // n second-derivative calls per step
    EXPECT_EQ(graphed.replays(3), 3 * n) << n;  // each differentiated once by the loss
    // Still refused: differentiating a step's values after the next forward.
    Tensor x1 = pts().requires_grad_();
    Tensor du1 = ag::grad({graphed(x1).sum()}, {x1}, {}, std::nullopt, true)[0];
    Tensor x2 = pts().requires_grad_();
    (void)graphed(x2);
    EXPECT_ERROR_CONTAINS(ag::grad({du1.sum()}, {x1}), "this call's intermediate values were overwritten");
  }
}

// Without a GPU the graphed APIs say what they need (runs everywhere).
TEST(GraphedTraining, WithoutAGpuGraphedCallablesSaySo) {
  if (cu::is_available()) GTEST_SKIP() << "a GPU is here: GraphedTrainingGpu covers it";
  cu::Callable square([](const std::vector<Tensor>& a) { return std::vector<Tensor>{a[0] * a[0]}; });
  EXPECT_ERROR_CONTAINS(cu::make_graphed_callables({square}, {{tg::ones({2})}}),
                        "make_graphed_callables: CUDA graphs need a GPU, and none is available");
}

// Misuse that needs no GPU to detect (runs everywhere).
TEST(GraphedTraining, BadArgumentsAreNamed) {
  cu::Callable square([](const std::vector<Tensor>& a) { return std::vector<Tensor>{a[0] * a[0]}; });
  EXPECT_ERROR_CONTAINS(cu::make_graphed_callables({square, square}, {{tg::ones({2})}}),
                        "make_graphed_callables: 2 callables but 1 sample argument lists");
  cu::GraphedOptions o;
  o.max_order = -1;
  EXPECT_ERROR_CONTAINS(cu::make_graphed_callables({square}, {{tg::ones({2})}}, o),
                        "make_graphed_callables: max_order must be >= 0, got -1");
  EXPECT_ERROR_CONTAINS(cu::register_static(Tensor(), "w"), "register_static: 'w' is an undefined tensor");
  EXPECT_EQ(cu::static_name(tg::ones({1})), "");
  EXPECT_FALSE(cu::static_in_use(tg::ones({1})));
}

// What a graphed callable cannot do says so and names it.
TEST(GraphedTrainingGpu, GraphedCallableErrorsNameTheCallable) {
  REQUIRE_GPU();
  tg::manual_seed(9);
  auto net = tg::nn::MLP({2, 8, 1}, "tanh", kF64);
  net->to(kGpu);
  Tensor sample = points(16).requires_grad_();
  auto g = cu::make_graphed_callables({cu::Callable(net)}, {{sample}})[0];  // max_order 1
  EXPECT_ERROR_CONTAINS(g(points(8).requires_grad_()),
                        "graphed callable 'Sequential': argument 0 is Float64 [8, 2] on cuda:0, but the graphs "
                        "were captured for Float64 [16, 2] on cuda:0");
  EXPECT_ERROR_CONTAINS(g(points(16)), "argument 0 does not require grad, but the sample argument did");
  {  // beyond max_order
    Tensor x = points(16).requires_grad_();
    Tensor du = ag::grad({g(x).sum()}, {x}, {}, std::nullopt, true)[0];
    EXPECT_ERROR_CONTAINS(ag::grad({du.sum()}, {x}),
                          "a derivative of order 2 was asked for, but only orders up "
                          "to 1 were captured");
  }
  {  // a stale call
    Tensor x1 = points(16).requires_grad_(), x2 = points(16).requires_grad_();
    Tensor y1 = g(x1), y2 = g(x2);
    EXPECT_ERROR_CONTAINS(ag::grad({y1.sum()}, {x1}),
                          "this call's intermediate values were overwritten by a "
                          "later call");
    EXPECT_EQ(ag::grad({y2.sum()}, {x2})[0].sizes(), x2.sizes());  // the latest call differentiates
  }
  // A host sync cannot be captured; a CPU argument is refused.
  cu::Callable syncs([](const std::vector<Tensor>& a) { return std::vector<Tensor>{a[0] * a[0].sum().item<double>()}; },
                     {}, "syncs");
  EXPECT_ERROR_CONTAINS(cu::make_graphed_callables({syncs}, {{sample}}),
                        "make_graphed_callables: callable 'syncs' cannot be graphed: ");
  EXPECT_ERROR_CONTAINS(cu::make_graphed_callables({cu::Callable(net)}, {{sample.to(tg::Device(tg::kCPU))}}),
                        "callable 'Sequential' cannot be graphed: argument 0 is Float64 [16, 2] on cpu");
  // Eager work goes on.
  EXPECT_EQ(net->forward(sample).sizes(), (tg::IntList{16, 1}));
}

}  // namespace

namespace {

Tensor gpu_tensor(std::vector<double> v) { return tg::tensor(v, {int64_t(v.size())}, kF64).to(kGpu); }
std::vector<double> host(const Tensor& t) { return t.to(tg::Device(tg::kCPU)).to_vector<double>(); }

// The graphed-function cache: the first call of a signature runs eagerly,
// the second records, later ones replay; results equal eager ones, and an
// output still held survives the next replay.
TEST(GraphedTrainingGpu, GraphedFunctionRecordsOnceAndReplays) {
  REQUIRE_GPU();
  auto body = [](const std::vector<Tensor>& a) { return std::vector<Tensor>{tg::tanh(a[0]) * 2.0 + a[0].sum()}; };
  cu::GraphedFunction f = cu::graphed(body, {8, {0, 0}, "body"});
  std::vector<Tensor> held;
  for (int k = 0; k < 5; ++k) {
    Tensor x = gpu_tensor({0.1 * k, -0.5, 1.5 + k});
    Tensor y = f({x})[0];
    EXPECT_TRUE(tg::equal(y, body({x})[0])) << "call " << k;
    held.push_back(y);
  }
  for (int k = 0; k < 5; ++k)  // every output kept its call's values
    EXPECT_TRUE(tg::equal(held[size_t(k)], body({gpu_tensor({0.1 * k, -0.5, 1.5 + k})})[0])) << "held " << k;
  EXPECT_EQ(f.counters().warmups, 1);
  EXPECT_EQ(f.counters().recordings, 1);
  EXPECT_EQ(f.counters().replays, 4);
  EXPECT_EQ(f.counters().eager_calls, 0);
  // Another shape is another signature.
  f({gpu_tensor({1, 2})});
  f({gpu_tensor({3, 4})});
  EXPECT_EQ(f.counters().warmups, 2);
  EXPECT_EQ(f.counters().recordings, 2);
}

// The mutation check: writes to (a) nothing (above), (b) a static tensor,
// passed or not, (c) an output of an earlier graph of the same pool replay;
// (d) a write to an ordinary tensor runs eagerly and is not lost. Replays
// bump the version counters of what they write; a static argument that
// moved forces a re-record.
TEST(GraphedTrainingGpu, GraphedFunctionMutationCheck) {
  REQUIRE_GPU();
  // (b) a static argument, and a static tensor the function reads from outside.
  Tensor w = gpu_tensor({0, 0}), acc = gpu_tensor({0});
  cu::register_static(w, "w");
  cu::register_static(acc, "acc");
  auto step = [&](const std::vector<Tensor>& a) {
    a[1].add_(a[0]);       // the static argument
    acc.add_(a[0].sum());  // a static tensor from outside
    return std::vector<Tensor>{a[1] * 2.0};
  };
  cu::GraphedFunction fs = cu::graphed(step, {8, {0, 0}, "static"});
  double total = 0;
  for (int k = 0; k < 4; ++k) {
    const uint32_t v = w.impl()->version_counter()->current();
    Tensor out = fs({gpu_tensor({1.0 + k, 2.0}), w})[0];
    total += 3.0 + k;
    EXPECT_GT(w.impl()->version_counter()->current(), v) << "call " << k;
    EXPECT_EQ(host(out), (std::vector<double>{2 * (1.0 * (k + 1) + k * (k + 1) / 2.0), 4.0 * (k + 1)})) << k;
  }
  EXPECT_EQ(host(acc)[0], total);
  EXPECT_EQ(fs.counters().replays, 3);
  EXPECT_EQ(fs.counters().eager_calls, 0);
  // A different static tensor in w's place: a re-record, then replays.
  Tensor w2 = gpu_tensor({10, 10});
  cu::register_static(w2, "w2");
  Tensor out = fs({gpu_tensor({1, 1}), w2})[0];
  EXPECT_EQ(host(out), (std::vector<double>{22, 22}));
  EXPECT_EQ(fs.counters().re_records, 1);
  EXPECT_EQ(fs.counters().recordings, 2);

  // (c) a tree: f2 writes an output of f1 (same pool) in place.
  cu::GraphedFunction f1 =
      cu::graphed([](const std::vector<Tensor>& a) { return std::vector<Tensor>{a[0] + 1.0}; }, {8, {0, 0}, "f1"});
  cu::GraphedFunction f2 = cu::graphed(
      [](const std::vector<Tensor>& a) {
        a[0].mul_(2.0);
        return std::vector<Tensor>{a[0] + 0.5};
      },
      {8, f1.pool(), "f2"});
  for (int k = 0; k < 2; ++k)
    f1({gpu_tensor({0, 0})});  // f1 recorded: its outputs are the pool's
  for (int k = 0; k < 4; ++k) {
    Tensor y = f1({gpu_tensor({double(k), 1})})[0];
    Tensor z = f2({y})[0];
    EXPECT_EQ(host(y), (std::vector<double>{2.0 * (k + 1), 4})) << "y, call " << k;
    EXPECT_EQ(host(z), (std::vector<double>{2.0 * (k + 1) + 0.5, 4.5})) << "z, call " << k;
  }
  EXPECT_EQ(f2.counters().eager_calls, 0);
  EXPECT_GE(f2.counters().replays, 2);

  // (d) an ordinary tensor written: eager from the first call, nothing lost.
  Tensor buf = gpu_tensor({0, 0});
  cu::GraphedFunction fo = cu::graphed(
      [](const std::vector<Tensor>& a) {
        a[1].add_(a[0]);
        return std::vector<Tensor>{a[1] * 1.0};
      },
      {8, {0, 0}, "writes"});
  for (int k = 0; k < 3; ++k)
    fo({gpu_tensor({1, 2}), buf});
  EXPECT_EQ(host(buf), (std::vector<double>{3, 6}));
  EXPECT_EQ(fo.counters().recordings, 0);
  EXPECT_EQ(fo.counters().eager_calls, 2);
  ASSERT_EQ(fo.counters().eager_reasons.size(), 1u);
  EXPECT_NE(fo.counters().eager_reasons[0].find("writes: writes argument 1 (Float64 [2] on cuda:0), an ordinary "
                                                "tensor"),
            std::string::npos)
      << fo.counters().eager_reasons[0];
  for (const Tensor& t : {w, w2, acc})
    cu::unregister_static(t);
}

}  // namespace
