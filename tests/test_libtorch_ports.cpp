// LibTorch programs ported by renaming only (issue 50): each was written
// against LibTorch's C++ API, then `torch::` became `tg::`, `TORCH_MODULE`
// `TG_MODULE` and `c10::nullopt` `std::nullopt`; nothing else changed. They
// train and must reach what the same programs reach in LibTorch.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <optional>

#include <tapegrad/tapegrad.h>

namespace {

#ifdef TAPEGRAD_SANITIZE_BUILD
constexpr int kScale = 8;  // sanitizers run 10-30x slower: fewer steps, weaker claims
#else
constexpr int kScale = 1;
#endif

// ---- a small classifier (three Gaussian blobs), as LibTorch's examples write one ----

struct ClassifierImpl : tg::nn::Module {
  ClassifierImpl(int64_t in, int64_t hidden, int64_t classes)
      : fc1(register_module("fc1", tg::nn::Linear(in, hidden))),
        fc2(register_module("fc2", tg::nn::Linear(hidden, classes))),
        drop(register_module("drop", tg::nn::Dropout(0.1))) {}

  tg::Tensor forward(tg::Tensor x) { return fc2(drop(tg::relu(fc1(x)))); }

  tg::nn::Linear fc1, fc2;
  tg::nn::Dropout drop;
};
TG_MODULE(Classifier);

TEST(LibtorchPorts, ClassifierTrainsWithRenamesOnly) {
  tg::manual_seed(0);
  const int64_t n = 300;
  auto centers = tg::tensor({-2.0, 0.0, 2.0, 0.0, 0.0, 2.5}, {3, 2});
  auto labels = tg::randint(0, 3, {n});
  auto x = centers.index({labels}) + 0.4 * tg::randn({n, 2});

  Classifier model(2, 32, 3);
  tg::optim::Adam optimizer(model->parameters(), tg::optim::AdamOptions(1e-2).weight_decay(1e-4));
  model->train();
  double first = 0, last = 0;
  for (int epoch = 0; epoch < 150 / kScale; ++epoch) {
    optimizer.zero_grad();
    auto logits = model(x);
    auto loss = tg::nn::functional::cross_entropy(logits, labels);
    loss.backward();
    optimizer.step();
    if (epoch == 0) first = loss.item<double>();
    last = loss.item<double>();
  }
  model->eval();
  tg::NoGradGuard no_grad;
  auto pred = model(x).argmax(1);
  const double accuracy = double(pred.eq(labels).sum().item<int64_t>()) / double(n);
  EXPECT_LT(last, first);
  if (kScale == 1) {
    EXPECT_GT(accuracy, 0.95) << "loss " << first << " -> " << last;
    EXPECT_LT(last, 0.2);
  }
  // eval(): Dropout is the identity, so two evaluations agree exactly.
  EXPECT_TRUE(tg::equal(model(x), model(x)));
}

// ---- samples/pinn_poisson, written as a LibTorch user would ----

constexpr double kPi = 3.14159265358979323846;

struct PinnImpl : tg::nn::Module {
  PinnImpl() {
    net = register_module("net", tg::nn::Sequential(tg::nn::Linear(2, 32), tg::nn::Tanh(), tg::nn::Linear(32, 32),
                                                    tg::nn::Tanh(), tg::nn::Linear(32, 1)));
  }
  // u = x (1 - x) y (1 - y) N(x, y): zero on the boundary of the unit square.
  tg::Tensor forward(tg::Tensor xy) {
    auto x = xy.select(1, 0), y = xy.select(1, 1);
    return x * (1 - x) * y * (1 - y) * net->forward(xy).select(1, 0);
  }
  tg::nn::Sequential net{nullptr};
};
TG_MODULE(Pinn);

TEST(LibtorchPorts, PinnPoissonTrainsWithRenamesOnly) {
  tg::manual_seed(11);
  Pinn model;
  model->to(tg::kFloat64);
  tg::optim::Adam opt(model->parameters(), tg::optim::AdamOptions(1e-2));
  auto exact = [](tg::Tensor xy) { return tg::sin(kPi * xy.select(1, 0)) * tg::sin(kPi * xy.select(1, 1)); };
  const int steps = 200 / kScale;
  double first = 0, last = 0;
  for (int step = 0; step < steps; ++step) {
    auto xy = tg::rand({128, 2}, tg::kFloat64).requires_grad_(true);
    auto u = model(xy);
    auto g = tg::autograd::grad({u.sum()}, {xy}, {}, std::nullopt, /*create_graph=*/true)[0];
    auto uxx = tg::autograd::grad({g.select(1, 0).sum()}, {xy}, {}, true, true)[0].select(1, 0);
    auto uyy = tg::autograd::grad({g.select(1, 1).sum()}, {xy}, {}, true, true)[0].select(1, 1);
    auto f = 2 * kPi * kPi * exact(xy.detach());
    auto loss = (-(uxx + uyy) - f).pow(2).mean();
    opt.zero_grad();
    loss.backward();
    opt.step();
    if (step == 0) first = loss.item<double>();
    last = loss.item<double>();
  }
  EXPECT_LT(last, first);
  if (kScale == 1) {
    // The residual falls by over 10x (97 -> 4.6 in 200 steps), and the solution approaches
    // sin(pi x) sin(pi y) (6% relative L2 error on a 32 x 32 grid).
    EXPECT_LT(last, first / 10) << first << " -> " << last;
    auto t = tg::arange(32, tg::kFloat64) / 31.0;
    auto grid =
        tg::stack({t.view({32, 1}).expand({32, 32}).reshape({-1}), t.view({1, 32}).expand({32, 32}).reshape({-1})}, 1);
    tg::NoGradGuard no_grad;
    auto pred = model(grid), ref = exact(grid);
    const double rel = std::sqrt((pred - ref).pow(2).sum().item<double>() / ref.pow(2).sum().item<double>());
    EXPECT_LT(rel, 0.1) << "loss " << first << " -> " << last;
    std::printf("pinn port: loss %.3e -> %.3e, relative L2 error %.3e\n", first, last, rel);
  }
}

}  // namespace
