// optim's parameter groups, state dicts (a stopped run resumes bitwise),
// RMSprop, Adagrad, Adamax, NAdam and RAdam step by step against PyTorch's
// update rules written out in doubles (1e-12), the schedulers' closed forms
// and gradient clipping.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>

#include "optim/kernels.h"
#include "reference.h"

namespace {

using tg::Tensor;
namespace optim = tg::optim;
namespace nn = tg::nn;
const auto kF64 = tg::TensorOptions().dtype(tg::kFloat64);
using V = std::vector<double>;

V vals(const Tensor& t) { return tgtest::values(t); }
Tensor param(V v) { return tg::tensor(v, {int64_t(v.size())}, kF64).requires_grad_(); }
// The gradient fed at step k to element j: varied signs and sizes.
double grad_at(int k, size_t j) { return std::sin(1.3 * k + 0.7 * double(j)) * (1 + 0.5 * double(j)); }
void feed(const Tensor& p, int k) {
  V g(size_t(p.numel()));
  for (size_t j = 0; j < g.size(); ++j)
    g[j] = grad_at(k, j);
  p.mutable_grad() = tg::tensor(g, {int64_t(g.size())}, kF64);
}
void expect_near(const V& got, const V& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t j = 0; j < got.size(); ++j)
    EXPECT_NEAR(got[j], want[j], 1e-12 * (1 + std::fabs(want[j]))) << what << " element " << j;
}

// PyTorch's single-tensor rules in doubles, one parameter vector.
struct Reference {
  std::string rule;
  optim::AdaptiveOptions o;
  V p, s1, s2, s3;
  double mu_product = 1;
  double t = 0;  // the step count (a double: a resumed state may hold 1e12)
  void step(int k) {
    ++t;
    const size_t n = p.size();
    if (s1.empty()) {
      s1.assign(n, rule == "Adagrad" ? o.initial_accumulator_value() : 0.0);
      s2.assign(n, 0.0);
      s3.assign(n, 0.0);
    }
    const double b1 = o.beta1, b2 = o.beta2, lr = o.lr;
    const double mu = b1 * (1 - 0.5 * std::pow(0.96, t * o.momentum_decay));
    const double mu_next = b1 * (1 - 0.5 * std::pow(0.96, (t + 1) * o.momentum_decay));
    if (rule == "NAdam") mu_product *= mu;
    for (size_t j = 0; j < n; ++j) {
      double g = grad_at(k, j);
      if (o.decoupled_weight_decay) p[j] *= 1 - lr * o.weight_decay;  // PyTorch 2's, before the update
      else g += o.weight_decay * p[j];
      if (rule == "RMSprop") {
        s1[j] = o.alpha * s1[j] + (1 - o.alpha) * g * g;
        double avg;
        if (o.centered) {
          s3[j] = o.alpha * s3[j] + (1 - o.alpha) * g;
          avg = std::sqrt(s1[j] - s3[j] * s3[j]) + o.eps;
        } else {
          avg = std::sqrt(s1[j]) + o.eps;
        }
        if (o.momentum > 0) {
          s2[j] = o.momentum * s2[j] + g / avg;
          p[j] -= lr * s2[j];
        } else {
          p[j] -= lr * g / avg;
        }
      } else if (rule == "Adagrad") {
        s1[j] += g * g;
        p[j] -= lr / (1 + (t - 1) * o.lr_decay) * g / (std::sqrt(s1[j]) + o.eps);
      } else if (rule == "Adamax") {
        s1[j] = b1 * s1[j] + (1 - b1) * g;
        s2[j] = std::max(b2 * s2[j], std::fabs(g) + o.eps);
        p[j] -= lr / (1 - std::pow(b1, t)) * s1[j] / s2[j];
      } else if (rule == "NAdam") {
        s1[j] = b1 * s1[j] + (1 - b1) * g;
        s2[j] = b2 * s2[j] + (1 - b2) * g * g;
        const double denom = std::sqrt(s2[j] / (1 - std::pow(b2, t))) + o.eps;
        p[j] -= lr * (1 - mu) / (1 - mu_product) * g / denom;
        p[j] -= lr * mu_next / (1 - mu_product * mu_next) * s1[j] / denom;
      } else {  // RAdam
        s1[j] = b1 * s1[j] + (1 - b1) * g;
        s2[j] = b2 * s2[j] + (1 - b2) * g * g;
        const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
        const double rho_inf = 2 / (1 - b2) - 1, rho_t = rho_inf - 2 * t * std::pow(b2, t) / bc2;
        if (rho_t > 5) {
          const double rect = std::sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t));
          p[j] -= s1[j] / bc1 * lr * std::sqrt(bc2) / (std::sqrt(s2[j]) + o.eps) * rect;
        } else {
          p[j] -= s1[j] / bc1 * lr;
        }
      }
    }
  }
};

std::unique_ptr<optim::Optimizer> make_groups(const std::string& rule, std::vector<optim::ParamGroup> gs,
                                              optim::AdaptiveOptions o) {
  if (rule == "RMSprop") return std::make_unique<optim::RMSprop>(std::move(gs), o);
  if (rule == "Adagrad") return std::make_unique<optim::Adagrad>(std::move(gs), o);
  if (rule == "Adamax") return std::make_unique<optim::Adamax>(std::move(gs), o);
  if (rule == "NAdam") return std::make_unique<optim::NAdam>(std::move(gs), o);
  return std::make_unique<optim::RAdam>(std::move(gs), o);
}

std::unique_ptr<optim::Optimizer> make(const std::string& rule, std::vector<Tensor> ps, optim::AdaptiveOptions o) {
  return make_groups(rule, {optim::ParamGroup{std::move(ps)}}, o);
}

// The options each rule has, all set (one case beside the defaults).
optim::AdaptiveOptions all_options(optim::AdaptiveOptions o) {
  o.weight_decay = 0.1;
  o.momentum = 0.8;
  o.centered = true;
  o.lr_decay = 0.05;
  o.initial_accumulator_value = 0.3;
  o.alpha = 0.9;
  o.beta1 = 0.8;
  o.beta2 = 0.95;
  o.eps = 1e-6;
  o.momentum_decay = 0.01;
  return o;
}

TEST(OptimRules, NewOptimizersFollowPyTorchsUpdateRulesStepByStep) {
  struct Case {
    std::string rule;
    optim::AdaptiveOptions o;
  };
  optim::AdaptiveOptions base;
  base.lr = 0.05;
  std::vector<Case> cases;
  for (const char* rule : {"RMSprop", "Adagrad", "Adamax", "NAdam", "RAdam"}) {
    cases.push_back({rule, base});
    cases.push_back({rule, all_options(base)});
  }
  for (const Case& c : cases) {
    V start = {0.5, -1.2, 2.0, 0.03};
    Tensor p = param(start);
    auto opt = make(c.rule, {p}, c.o);
    Reference ref{c.rule, c.o, start, {}, {}, {}};
    for (int k = 1; k <= 12; ++k) {  // RAdam's rectification starts at step 6 with these betas
      feed(p, k);
      opt->step();
      ref.step(k);
      expect_near(vals(p), ref.p, c.rule + " step " + std::to_string(k) + (c.o.momentum > 0 ? " (all options)" : ""));
    }
  }
  // capturable needs the multi-tensor update.
  EXPECT_ERROR_CONTAINS(optim::RAdam({tg::ones({2}, kF64).requires_grad_()},
                                     [] {
                                       optim::AdaptiveOptions o;
                                       o.capturable = true;
                                       return o;
                                     }()),
                        "RAdam: capturable needs float32/float64 contiguous parameters on one CUDA device");
}

// set_momentum (what OneCycleLR drives) changes the momentum or beta1 each
// rule uses: an optimizer set to x steps as one built with x, for every
// rule with one, and Adagrad has none. A NAdam whose beta1 moved resumes
// bitwise, because its mu_product is saved (PyTorch's state name).
TEST(OptimRules, SetMomentumIsTheMomentumOrBeta1) {
  optim::AdaptiveOptions o;
  o.lr = 0.05;
  o.momentum = 0.5;
  for (const char* rule : {"RMSprop", "Adamax", "NAdam", "RAdam"}) {
    Tensor a = param({0.5, -1.2, 2.0}), b = param({0.5, -1.2, 2.0});
    auto moved = make(rule, {a}, o);
    optim::AdaptiveOptions built = o;
    if (std::string(rule) == "RMSprop") built.momentum = 0.7;
    else built.beta1 = 0.7;
    auto fresh = make(rule, {b}, built);
    ASSERT_TRUE(moved->has_momentum()) << rule;
    moved->set_momentum(0, 0.7);
    for (int k = 1; k <= 8; ++k) {
      feed(a, k);
      feed(b, k);
      moved->step();
      fresh->step();
    }
    EXPECT_EQ(vals(a), vals(b)) << rule;
  }
  EXPECT_FALSE(optim::Adagrad({param({1.0})}, o).has_momentum());
  Tensor a = param({1.0}), b = param({1.0});
  optim::Adam moved({a}), fresh({b}, optim::AdamOptions{1e-3, 0.7});
  moved.set_momentum(0, 0.7);
  for (int k = 1; k <= 5; ++k) {
    feed(a, k);
    feed(b, k);
    moved.step();
    fresh.step();
  }
  EXPECT_EQ(vals(a), vals(b)) << "Adam";
  // NAdam with beta1 moved every step, stopped and resumed.
  Tensor p = param({0.5, -1.2, 2.0});
  optim::NAdam run({p}, o);
  for (int k = 1; k <= 5; ++k) {
    run.set_momentum(0, 0.9 - 0.02 * k);
    feed(p, k);
    run.step();
  }
  const optim::NamedTensors state = run.state_dict();
  bool saved = false;
  for (const auto& [name, t] : state)
    saved = saved || (name == "state.0.mu_product" && t.numel() == 1);
  EXPECT_TRUE(saved) << "state.0.mu_product";
  Tensor twin = p.detach().clone().requires_grad_();
  optim::NAdam resumed({twin}, o);
  resumed.load_state_dict(state);
  EXPECT_DOUBLE_EQ(resumed.momentum(0), 0.8);
  feed(p, 6);
  feed(twin, 6);
  run.step();
  resumed.step();
  EXPECT_EQ(vals(p), vals(twin));
}

TEST(OptimGroups, EachGroupHasItsOwnRateAndDecay) {
  Tensor a = param({1.0, -2.0}), b = param({0.5}), c = param({3.0});
  optim::SGDOptions so;
  so.lr = 0.1;
  so.weight_decay = 0.01;
  optim::SGD sgd({{{a}}, {{b}, 0.5, 0.2}}, so);
  EXPECT_EQ(sgd.num_param_groups(), 2u);
  EXPECT_EQ(sgd.lr(1), 0.5);
  EXPECT_EQ(sgd.weight_decay(0), 0.01);
  feed(a, 1);
  feed(b, 1);
  sgd.step();
  expect_near(vals(a), {1.0 - 0.1 * (grad_at(1, 0) + 0.01 * 1.0), -2.0 - 0.1 * (grad_at(1, 1) + 0.01 * -2.0)},
              "group 0");
  expect_near(vals(b), {0.5 - 0.5 * (grad_at(1, 0) + 0.2 * 0.5)}, "group 1");
  sgd.add_param_group({{c}, 1.0});
  EXPECT_EQ(sgd.num_param_groups(), 3u);
  EXPECT_EQ(sgd.weight_decay(2), 0.01);
  feed(c, 2);
  a.mutable_grad() = Tensor();
  b.mutable_grad() = Tensor();
  sgd.step();
  expect_near(vals(c), {3.0 - 1.0 * (grad_at(2, 0) + 0.01 * 3.0)}, "added group");
  sgd.set_lr(0.3);
  EXPECT_EQ(sgd.lr(2), 0.3);
  EXPECT_ERROR_CONTAINS(sgd.add_param_group({{a}}), "SGD: parameter 3 is the same tensor as parameter 0");
  EXPECT_ERROR_CONTAINS(sgd.add_param_group({{}}), "SGD: parameter group 3 is empty");
  EXPECT_ERROR_CONTAINS(sgd.lr(7), "SGD: no parameter group 7 (there are 3)");
  EXPECT_EQ(sgd.num_param_groups(), 3u);  // the refused groups changed nothing
  // Adam and AdamW per group: decoupled decay uses the group's rate and decay.
  Tensor x = param({1.0}), y = param({1.0});
  optim::AdamOptions ao;
  ao.lr = 0.1;
  optim::AdamW adamw({{{x}, 0.1, 0.5}, {{y}, 0.01, 0.0}}, ao);
  feed(x, 1);
  feed(y, 1);
  adamw.step();
  // step 1: m / (sqrt(v) + eps) with bias correction = sign(g) (|g| >> eps)
  const double g = grad_at(1, 0), u = g / (std::fabs(g) + 1e-8);
  expect_near(vals(x), {1.0 * (1 - 0.1 * 0.5) - 0.1 * u}, "AdamW group 0");
  expect_near(vals(y), {1.0 - 0.01 * u}, "AdamW group 1");
}

// Trains a small MLP, stopping after `stop` of `total` steps to save and
// reload everything into fresh objects (as a new process would).
V train(const std::string& kind, int total, int stop, bool load_optimizer = true) {
  auto build = [&](uint64_t seed) {
    tg::manual_seed(seed);
    return nn::MLP({2, 8, 1}, "tanh", kF64);
  };
  auto make_opt = [&](nn::Module& net) -> std::unique_ptr<optim::Optimizer> {
    auto ps = net.parameters();
    std::vector<optim::ParamGroup> groups = {{{ps[0], ps[1]}, 0.02}, {{ps[2], ps[3]}, 0.01, 0.05}};
    if (kind == "Adam") return std::make_unique<optim::Adam>(groups, optim::AdamOptions{});
    if (kind == "SGD") return std::make_unique<optim::SGD>(groups, optim::SGDOptions{0.01, 0.9});
    optim::AdaptiveOptions o;
    o.lr = 0.01;
    return std::make_unique<optim::NAdam>(groups, o);
  };
  Tensor x = tg::tensor({0.1, 0.2, -0.3, 0.5, 0.9, -0.7}, {3, 2}, kF64), y = tg::tensor({0.3, -0.1, 0.2}, {3, 1}, kF64);
  auto net = build(1);
  auto opt = make_opt(*net);
  auto sched = std::make_unique<optim::OneCycleLR>(*opt, 0.05, total);
  const std::string dir = ::testing::TempDir();
  for (int k = 0; k < total; ++k) {
    if (k == stop) {
      nn::save(*net, dir + "tg_resume_model.safetensors");
      nn::save_safetensors(dir + "tg_resume_optim.safetensors", opt->state_dict());
      const int64_t epoch = sched->epoch();
      sched.reset();
      opt.reset();
      net = build(99);  // other weights: the load must replace them
      nn::load(*net, dir + "tg_resume_model.safetensors");
      opt = make_opt(*net);
      if (load_optimizer) opt->load_state_dict(nn::load_safetensors(dir + "tg_resume_optim.safetensors"));
      sched = std::make_unique<optim::OneCycleLR>(*opt, 0.05, total);
      sched->set_epoch(epoch);
      std::remove((dir + "tg_resume_model.safetensors").c_str());
      std::remove((dir + "tg_resume_optim.safetensors").c_str());
    }
    opt->zero_grad();
    Tensor loss = tg::square((*net)(x)-y).mean();
    loss.backward();
    optim::clip_grad_norm_(net->parameters(), 0.5);
    opt->step();
    sched->step();
  }
  V out;
  for (const Tensor& p : net->parameters())
    for (double v : vals(p))
      out.push_back(v);
  return out;
}

TEST(OptimState, AStoppedRunResumesBitwise) {
  for (const char* kind : {"Adam", "SGD", "NAdam"}) {
    const V straight = train(kind, 12, -1), resumed = train(kind, 12, 5);
    EXPECT_EQ(straight, resumed) << kind;  // bitwise
    EXPECT_NE(straight, train(kind, 12, 5, false)) << kind << ": the optimizer's state matters (the test can fail)";
  }
  // Loading checks everything first and names what does not match.
  Tensor a = param({1.0, 2.0}), b = param({1.0});
  optim::Adam adam({a});
  feed(a, 1);
  adam.step();
  optim::Adam other({b});
  EXPECT_ERROR_CONTAINS(other.load_state_dict(adam.state_dict()),
                        "state 'state.0.exp_avg' has shape [2], parameter 0 [1]");
  optim::SGD sgd({a});
  EXPECT_ERROR_CONTAINS(sgd.load_state_dict(adam.state_dict()), "entries this optimizer does not know");
  // A state missing an entry is refused before anything changes.
  optim::NamedTensors partial;
  for (const auto& [k, v] : adam.state_dict())
    if (k != "param_groups.0.weight_decay") partial.emplace_back(k, k == "param_groups.0.lr" ? v * 10.0 : v);
  optim::Adam fresh({param({1.0, 2.0})});
  EXPECT_ERROR_CONTAINS(fresh.load_state_dict(partial), "Adam: the state has no 'param_groups.0.weight_decay'");
  EXPECT_EQ(fresh.lr(), optim::AdamOptions().lr);
  EXPECT_EQ(fresh.steps(), 0);
  optim::Adam two(std::vector<optim::ParamGroup>{{{a}}, {{b}}});
  EXPECT_ERROR_CONTAINS(two.load_state_dict(adam.state_dict()), "the state has 1 parameter groups, this optimizer 2");
}

TEST(OptimSchedulers, NewSchedulersFollowPyTorchsClosedForms) {
  Tensor p = param({0.0});
  auto lr_after = [&](optim::Optimizer& opt, optim::LRScheduler& s, int steps) {
    V got = {opt.lr()};
    for (int e = 0; e < steps; ++e) {
      s.step();
      got.push_back(opt.lr());
    }
    return got;
  };
  {
    optim::SGD opt({p}, {0.5});
    optim::LambdaLR s(opt, [](int64_t e) { return 1.0 / double(e + 1); });
    expect_near(lr_after(opt, s, 3), {0.5, 0.25, 0.5 / 3, 0.125}, "LambdaLR");
  }
  {
    optim::SGD opt({p}, {0.5});
    optim::ExponentialLR s(opt, 0.9);
    expect_near(lr_after(opt, s, 3), {0.5, 0.45, 0.405, 0.3645}, "ExponentialLR");
  }
  {
    optim::SGD opt({p}, {0.3});
    optim::LinearLR s(opt, 0.5, 1.0, 4);
    expect_near(lr_after(opt, s, 5), {0.15, 0.1875, 0.225, 0.2625, 0.3, 0.3}, "LinearLR");
  }
  {
    // OneCycleLR(max_lr=1, total_steps=10): up over pct 0.3 (steps 0..2),
    // then down to 1/25/1e4 at step 9, cosine, as PyTorch computes it; the
    // momentum the other way, 0.95 down to 0.85 and back.
    optim::SGD opt({p}, {0.1, 0.9});
    optim::OneCycleLR s(opt, 1.0, 10);
    const double lo = 1.0 / 25, fin = lo / 1e4, pi = std::acos(-1.0);
    auto cosine = [&](double a, double b, double pct) { return b + (a - b) / 2 * (std::cos(pi * pct) + 1); };
    V want;
    for (int e = 0; e <= 9; ++e)
      want.push_back(e <= 2 ? cosine(lo, 1.0, e / 2.0) : cosine(1.0, fin, (e - 2) / 7.0));
    EXPECT_NEAR(opt.momentum(0), 0.95, 1e-15);
    expect_near(lr_after(opt, s, 9), want, "OneCycleLR");
    for (int e = 0; e <= 9; ++e) {
      s.set_epoch(e);
      const double m = e <= 2 ? cosine(0.95, 0.85, e / 2.0) : cosine(0.85, 0.95, (e - 2) / 7.0);
      EXPECT_NEAR(opt.momentum(0), m, 1e-15) << "momentum at epoch " << e;
    }
    EXPECT_ERROR_CONTAINS(s.set_epoch(11), "OneCycleLR: stepped 11 times, past total_steps = 10");
    // Three phases, linear: beta1 of Adam 0.9 -> 0.8 over steps 0..2, back to 0.9 at 4, then held.
    Tensor r = param({0.0});
    optim::Adam adam({r});
    optim::OneCycleLR three(adam, 1.0, 10, 0.3, /*cos_anneal=*/false, 25, 1e4, /*three_phase=*/true, true, 0.8, 0.9);
    const V beta1 = {0.9, 0.85, 0.8, 0.85, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9};
    for (int e = 0; e <= 9; ++e) {
      three.set_epoch(e);
      EXPECT_NEAR(adam.momentum(0), beta1[size_t(e)], 1e-15) << "beta1 at epoch " << e;
    }
    // Without a momentum to cycle: an error that says what to do; or cycle_momentum = false.
    optim::SGD plain({p}, {0.1});
    EXPECT_FALSE(plain.has_momentum());
    EXPECT_ERROR_CONTAINS(optim::OneCycleLR(plain, 1.0, 10),
                          "OneCycleLR: cycle_momentum needs an optimizer with a momentum (SGD or RMSprop built with "
                          "momentum > 0) or beta1 (Adam, AdamW, Adamax, NAdam, RAdam); SGD has none: pass "
                          "cycle_momentum = false");
    optim::OneCycleLR lr_only(plain, 1.0, 10, 0.3, true, 25, 1e4, false, /*cycle_momentum=*/false);
    EXPECT_NEAR(plain.lr(), 1.0 / 25, 1e-15);
    EXPECT_ERROR_CONTAINS(plain.momentum(0), "SGD has no momentum to read or set");
    EXPECT_ERROR_CONTAINS(adam.set_momentum(0, 1.0), "Adam: the beta1 must be in [0, 1), got 1");
    // A max_lr per group: the same curve, scaled.
    Tensor q = param({0.0});
    optim::SGD two(std::vector<optim::ParamGroup>{{{p}}, {{q}}}, {0.1, 0.5});
    optim::OneCycleLR per(two, {1.0, 0.1}, 10);
    for (int e = 1; e <= 9; ++e) {
      per.step();
      EXPECT_NEAR(two.lr(0), want[size_t(e)], 1e-15);
      EXPECT_NEAR(two.lr(1), 0.1 * want[size_t(e)], 1e-15);
    }
    EXPECT_ERROR_CONTAINS(optim::OneCycleLR(two, std::vector<double>{1.0}, 10),
                          "got 1 max_lr values for 2 parameter groups");
  }
  {
    // SequentialLR: LinearLR warm-up for 2 epochs, then ExponentialLR from its epoch 0.
    optim::SGD opt({p}, {1.0});
    auto warm = std::make_shared<optim::LinearLR>(opt, 0.5, 1.0, 2);
    auto decay = std::make_shared<optim::ExponentialLR>(opt, 0.5);
    optim::SequentialLR s(opt, {warm, decay}, {2});
    expect_near(lr_after(opt, s, 4), {0.5, 0.75, 1.0, 0.5, 0.25}, "SequentialLR");
    s.set_epoch(1);
    EXPECT_DOUBLE_EQ(opt.lr(), 0.75);
  }
  {
    // Groups: each from its own initial rate.
    Tensor q = param({0.0});
    optim::SGD opt({{{p}, 1.0}, {{q}, 0.1}}, {});
    optim::StepLR s(opt, 1, 0.5);
    s.step();
    EXPECT_DOUBLE_EQ(opt.lr(0), 0.5);
    EXPECT_DOUBLE_EQ(opt.lr(1), 0.05);
  }
}

TEST(OptimClip, ClipGradNormAndValue) {
  Tensor a = param({3.0, 0.0}), b = param({4.0}), c = param({1.0});
  a.mutable_grad() = tg::tensor({3.0, 0.0}, {2}, kF64);
  b.mutable_grad() = tg::tensor({-4.0}, {1}, kF64);
  Tensor total = optim::clip_grad_norm_({a, b, c}, 1.0);  // c has no gradient
  EXPECT_NEAR(total.item<double>(), 5.0, 1e-15);
  const double s = 1.0 / (5.0 + 1e-6);
  expect_near(vals(a.grad()), {3 * s, 0}, "clipped a");
  expect_near(vals(b.grad()), {-4 * s}, "clipped b");
  // Below the bound nothing changes; the infinity norm is the largest |g|.
  EXPECT_NEAR(optim::clip_grad_norm_({a, b}, 10.0, INFINITY).item<double>(), 4 * s, 1e-15);
  expect_near(vals(b.grad()), {-4 * s}, "unclipped b");
  // An empty gradient adds nothing, under every norm; only empty ones: 0.
  Tensor e = tg::zeros({0}, kF64).requires_grad_();
  e.mutable_grad() = tg::zeros({0}, kF64);
  EXPECT_NEAR(optim::clip_grad_norm_({e, b}, 10.0, INFINITY).item<double>(), 4 * s, 1e-15);
  EXPECT_EQ(optim::clip_grad_norm_({e}, 1.0, INFINITY).item<double>(), 0.0);
  b.mutable_grad() = tg::tensor({NAN}, {1}, kF64);
  EXPECT_ERROR_CONTAINS(optim::clip_grad_norm_({a, b}, 1.0, 2.0, true), "the total norm of the gradients is nan");
  a.mutable_grad() = tg::tensor({3.0, -0.2}, {2}, kF64);
  optim::clip_grad_value_({a}, 0.5);
  expect_near(vals(a.grad()), {0.5, -0.2}, "clip_grad_value_");
}

// On a GPU: groups in the multi-tensor update (one launch list per group,
// its rate on the device) equal the per-tensor step on the CPU; a fused
// optimizer resumes bitwise; clip_grad_norm_ and dropout replay in a CUDA graph.
TEST(OptimGpu, GroupsResumeClipAndDropoutOnTheGpu) {
  REQUIRE_GPU();
  const tg::Device gpu(tg::kCUDA, 0);
  tg::manual_seed(3);
  std::vector<Tensor> cpu, dev;
  for (int i = 0; i < 6; ++i) {
    Tensor p = tg::randn({17 + i}, kF64);
    cpu.push_back(p.clone().requires_grad_());
    dev.push_back(p.to(gpu).requires_grad_());
  }
  auto groups = [](const std::vector<Tensor>& ps) {
    return std::vector<optim::ParamGroup>{{{ps[0], ps[1]}, 0.05, 0.1}, {{ps[2], ps[3]}, 0.01}};
  };
  optim::AdamOptions o;
  o.lr = 0.02;
  optim::AdamW a_cpu(groups(cpu), o), a_dev(groups(dev), o);
  ASSERT_TRUE(a_dev.fused());
  a_cpu.add_param_group({{cpu[4], cpu[5]}, 0.03});
  a_dev.add_param_group({{dev[4], dev[5]}, 0.03});
  auto step_both = [&](int k) {
    for (size_t i = 0; i < cpu.size(); ++i) {
      Tensor g = tg::randn(cpu[i].sizes(), kF64);
      cpu[i].mutable_grad() = g;
      dev[i].mutable_grad() = g.to(gpu);
    }
    a_cpu.step();
    a_dev.step();
    (void)k;
  };
  for (int k = 0; k < 3; ++k)
    step_both(k);
  a_dev.set_lr(1, 0.002);
  a_cpu.set_lr(1, 0.002);
  step_both(3);
  for (size_t i = 0; i < cpu.size(); ++i)
    expect_near(vals(dev[i]), vals(cpu[i]), "fused group parameter " + std::to_string(i));
  // Resume: a fresh fused optimizer loaded from the state takes the same step, bitwise.
  std::vector<Tensor> twin;
  for (const Tensor& p : dev)
    twin.push_back(p.detach().clone().requires_grad_());
  std::vector<optim::ParamGroup> tg3 = groups(twin);
  tg3.push_back({{twin[4], twin[5]}, 0.03});
  optim::AdamW resumed(tg3, o);
  resumed.load_state_dict(a_dev.state_dict());
  for (size_t i = 0; i < dev.size(); ++i) {
    Tensor g = tg::randn(dev[i].sizes(), kF64).to(gpu);
    dev[i].mutable_grad() = g;
    twin[i].mutable_grad() = g.clone();
  }
  a_dev.step();
  resumed.step();
  for (size_t i = 0; i < dev.size(); ++i)
    EXPECT_TRUE(tg::equal(dev[i], twin[i])) << "resumed parameter " << i;
  // clip_grad_norm_ under capture: replays clip fresh gradients as eagerly.
  namespace cu = tg::cuda;
  std::vector<Tensor> ps = {dev[0], dev[1]};
  auto fill = [&](double scale) {
    dev[0].mutable_grad().copy_(tg::full({17}, scale, kF64));
    dev[1].mutable_grad().copy_(tg::full({18}, -scale, kF64));
  };
  fill(1.0);
  cu::Stream side = cu::stream_from_pool();
  side.wait_stream(cu::current_stream());
  {
    cu::StreamGuard sg(side);
    optim::clip_grad_norm_(ps, 1.0);  // warm-up
  }
  cu::current_stream().wait_stream(side);
  cu::CUDAGraph graph;
  Tensor total;
  {
    cu::Graph capture(graph);
    total = optim::clip_grad_norm_(ps, 1.0);
  }
  for (double scale : {0.01, 2.0, 5.0}) {
    fill(scale);
    graph.replay();
    const double norm = scale * std::sqrt(35.0), c = std::min(1.0, 1.0 / (norm + 1e-6));
    EXPECT_NEAR(total.item<double>(), norm, 1e-12 * norm);
    EXPECT_NEAR(vals(dev[0].grad())[0], scale * c, 1e-12);
    EXPECT_NEAR(vals(dev[1].grad())[3], -scale * c, 1e-12);
  }
  // Dropout in a graph: each replay draws a new mask (the generator's
  // offset advances on the device), each mask zeroes about p of the elements.
  nn::Dropout drop(0.5);
  Tensor x = tg::ones({4096}, kF64).to(gpu);
  side.wait_stream(cu::current_stream());
  {
    cu::StreamGuard sg(side);
    drop(x);
  }
  cu::current_stream().wait_stream(side);
  cu::CUDAGraph dg;
  Tensor y;
  {
    cu::Graph capture(dg);
    y = drop(x);
  }
  dg.replay();
  const V first = vals(y);
  dg.replay();
  const V second = vals(y);
  EXPECT_NE(first, second) << "a replayed dropout must draw a new mask";
  for (const V* m : {&first, &second}) {
    double kept = 0;
    for (double e : *m)
      kept += e != 0;
    EXPECT_NEAR(kept / 4096, 0.5, 0.05);
  }
}

void expect_close(const Tensor& got, const Tensor& want, const std::string& what) {
  const double tol = want.dtype() == tg::kFloat32 ? 2e-6 : 1e-12;
  const V g = vals(got), w = vals(want);
  ASSERT_EQ(g.size(), w.size()) << what;
  for (size_t j = 0; j < g.size(); ++j)
    ASSERT_NEAR(g[j], w[j], tol * (1 + std::fabs(w[j]))) << what << " element " << j;
}

// RMSprop, Adagrad, Adamax, NAdam and RAdam on a GPU take the multi-tensor
// update (one kernel per group and dtype), with and without capturable: 12
// steps (RAdam rectifies from step 6) over two groups of float32 and float64
// parameters, some without a gradient at some steps and one of size 0,
// equal the per-tensor step on the CPU, also when a group's momentum (or
// beta1) moves; a captured step replays them too; a fused NAdam resumed
// from its state (its mu_product saved) steps bitwise as the original.
TEST(OptimGpu, AdaptiveRulesAreMultiTensorAndCapturable) {
  REQUIRE_GPU();
  namespace cu = tg::cuda;
  const tg::Device gpu(tg::kCUDA, 0);
  optim::AdaptiveOptions base;
  base.lr = 0.05;
  for (const char* rule : {"RMSprop", "Adagrad", "Adamax", "NAdam", "RAdam"})
    for (bool all : {false, true})
      for (bool capturable : {false, true}) {
        SCOPED_TRACE(std::string(rule) + (all ? " all options" : " defaults") + (capturable ? " capturable" : ""));
        tg::manual_seed(11);
        std::vector<Tensor> cpu, dev;
        const int64_t sizes[] = {5, 300, 0, 7, 4100, 3};
        for (int i = 0; i < 6; ++i) {
          Tensor p = tg::randn({sizes[i]}, tg::TensorOptions().dtype(i == 3 ? tg::kFloat32 : tg::kFloat64));
          cpu.push_back(p.clone().requires_grad_());
          dev.push_back(p.to(gpu).requires_grad_());
        }
        auto groups = [](const std::vector<Tensor>& ps) {
          return std::vector<optim::ParamGroup>{{{ps[0], ps[1], ps[2]}, 0.02, 0.05}, {{ps[3], ps[4], ps[5]}}};
        };
        optim::AdaptiveOptions o = all ? all_options(base) : base;
        auto o_cpu = make_groups(rule, groups(cpu), o);
        o.capturable = capturable;
        auto o_dev = make_groups(rule, groups(dev), o);
        ASSERT_TRUE(o_dev->fused());
        auto feed_both = [&](int k) {
          for (size_t i = 0; i < cpu.size(); ++i) {
            if (!capturable && (i + size_t(k)) % 4 == 1) {  // no gradient this step
              cpu[i].mutable_grad() = Tensor();
              dev[i].mutable_grad() = Tensor();
              continue;
            }
            Tensor g = tg::randn(cpu[i].sizes(), cpu[i].options());
            cpu[i].mutable_grad() = g;
            if (dev[i].grad().defined()) dev[i].mutable_grad().copy_(g.to(gpu));
            else dev[i].mutable_grad() = g.to(gpu);
          }
        };
        // Group 1's momentum (or beta1) moves at step 6, read on the device by a replay too.
        auto move_momentum = [&](int k) {
          if (k != 6 || !o_dev->has_momentum()) return;
          o_cpu->set_momentum(1, 0.6);
          o_dev->set_momentum(1, 0.6);
        };
        if (!capturable) {
          for (int k = 1; k <= 12; ++k) {
            feed_both(k);
            move_momentum(k);
            o_cpu->step();
            o_dev->step();
          }
        } else {  // step 1 eagerly, steps 2 to 12 replayed
          feed_both(1);
          o_cpu->step();
          o_dev->step();
          cu::CUDAGraph graph;
          {
            cu::Graph capture(graph);
            o_dev->step();
          }
          for (int k = 2; k <= 12; ++k) {
            feed_both(k);
            move_momentum(k);
            o_cpu->step();
            graph.replay();
          }
        }
        for (size_t i = 0; i < cpu.size(); ++i)
          expect_close(dev[i], cpu[i], "parameter " + std::to_string(i));
        if (capturable) {  // the saved step counts are the device's: 1 eager step + 11 replays
          bool found = false;
          for (const auto& [name, t] : o_dev->state_dict())
            if (name == "state.0.step") {
              found = true;
              EXPECT_EQ(t.item<double>(), 12.0);
            }
          EXPECT_TRUE(found);
        }
        if (std::string(rule) != "NAdam" || capturable) continue;
        // Resume: a fresh fused NAdam from the state takes the same step bitwise.
        std::vector<Tensor> twin;
        for (const Tensor& p : dev)
          twin.push_back(p.detach().clone().requires_grad_());
        auto resumed = make_groups(rule, groups(twin), o);
        resumed->load_state_dict(o_dev->state_dict());
        for (size_t i = 0; i < dev.size(); ++i) {
          Tensor g = tg::randn(dev[i].sizes(), dev[i].options());
          dev[i].mutable_grad() = g;
          twin[i].mutable_grad() = g.clone();
        }
        o_dev->step();
        resumed->step();
        for (size_t i = 0; i < dev.size(); ++i)
          EXPECT_TRUE(tg::equal(dev[i], twin[i])) << "resumed parameter " << i;
      }
}

// clip_grad_norm_ over many CUDA gradients of two dtypes (several launches'
// worth, some of size 0) takes the multi-tensor norm and scaling: the norms
// (2, 1, 3, infinity) and clipped gradients equal the CPU's; a NaN gives a
// NaN norm and NaN gradients, or an error when asked.
TEST(OptimGpu, ClipGradNormIsMultiTensor) {
  REQUIRE_GPU();
  const tg::Device gpu(tg::kCUDA, 0);
  tg::manual_seed(8);
  for (double p : {2.0, 1.0, 3.0, double(INFINITY)}) {
    SCOPED_TRACE("p = " + std::to_string(p));
    std::vector<Tensor> cpu, dev;
    for (int i = 0; i < 110; ++i) {
      const int64_t n = i % 9 == 0 ? 0 : 1 + (i * 53) % 6000;
      Tensor q = tg::zeros({n}, tg::TensorOptions().dtype(i % 4 == 1 ? tg::kFloat32 : tg::kFloat64));
      cpu.push_back(q.clone().requires_grad_());
      dev.push_back(q.to(gpu).requires_grad_());
      Tensor g = tg::randn({n}, q.options());
      cpu.back().mutable_grad() = g;
      dev.back().mutable_grad() = g.to(gpu);
    }
    const double want = optim::clip_grad_norm_(cpu, 1.5, p).item<double>();
    Tensor total = optim::clip_grad_norm_(dev, 1.5, p);
    EXPECT_EQ(total.dtype(), tg::kFloat64);  // the first gradient's
    EXPECT_TRUE(total.is_cuda());
    const double got = total.item<double>();
    EXPECT_GT(want, 1.5);  // so the gradients were scaled
    EXPECT_NEAR(got, want, 1e-12 * want);
    for (size_t i = 0; i < cpu.size(); ++i)
      expect_close(dev[i].grad(), cpu[i].grad(), "gradient " + std::to_string(i));
  }
  Tensor a = tg::ones({10}, kF64).to(gpu).requires_grad_(), b = tg::ones({3}, kF64).to(gpu).requires_grad_();
  a.mutable_grad() = tg::full({10}, 2.0, kF64).to(gpu);
  b.mutable_grad() = tg::tensor({1.0, NAN, 1.0}, {3}, kF64).to(gpu);
  EXPECT_ERROR_CONTAINS(optim::clip_grad_norm_({a, b}, 1.0, 2.0, true), "the total norm of the gradients is nan");
  EXPECT_TRUE(std::isnan(optim::clip_grad_norm_({a, b}, 1.0).item<double>()));
  EXPECT_TRUE(std::isnan(vals(a.grad())[0]));
  // Float32 first: the norm comes back as float32; only empty gradients: 0.
  Tensor f = tg::ones({4}, tg::TensorOptions().device(gpu)).requires_grad_();
  f.mutable_grad() = tg::full({4}, 3.0, tg::TensorOptions().device(gpu));
  Tensor nf = optim::clip_grad_norm_({f}, 100.0);
  EXPECT_EQ(nf.dtype(), tg::kFloat32);
  EXPECT_EQ(nf.item<double>(), 6.0);
  EXPECT_EQ(vals(f.grad())[2], 3.0);
  Tensor e = tg::zeros({0}, kF64).to(gpu).requires_grad_();
  e.mutable_grad() = tg::zeros({0}, kF64).to(gpu);
  for (double q : {2.0, double(INFINITY)})
    EXPECT_EQ(optim::clip_grad_norm_({e}, 1.0, q).item<double>(), 0.0);
}

// ---- Issue 45: schedulers, state loading and NAdam ----

// SequentialLR reads a child's per-group rates only for a child of its
// optimizer with its group count (before: a heap over-read and a garbage
// rate); a scheduler asked for a group it does not have says so; the epoch
// cannot overflow; OneCycleLR refuses a phase of no length (before: 0 / 0).
TEST(OptimSchedulers, ChildrenEpochsAndPhasesAreChecked) {
  Tensor p = param({0.0}), q = param({0.0}), r = param({0.0});
  optim::SGD two(std::vector<optim::ParamGroup>{{{p}, 1.0}, {{q}, 0.5}}, {});
  optim::SGD one({r}, {2.0});
  auto mine = std::make_shared<optim::StepLR>(two, 2, 0.5);
  auto other = std::make_shared<optim::StepLR>(one, 2, 0.5);
  EXPECT_ERROR_CONTAINS(optim::SequentialLR(two, {mine, other}, {3}),
                        "SequentialLR: scheduler 1 (StepLR) schedules another optimizer (SGD at ");
  EXPECT_ERROR_CONTAINS(other->lr_at(1, 0), "StepLR: no parameter group 1 (it schedules 1)");
  EXPECT_DOUBLE_EQ(mine->lr_at(1, 2), 0.25);
  // A child made before add_param_group has fewer groups than the optimizer.
  Tensor a = param({0.0}), b = param({0.0});
  optim::SGD grows({a}, {1.0});
  auto early = std::make_shared<optim::ExponentialLR>(grows, 0.5);
  grows.add_param_group({{b}, 0.1});
  auto late = std::make_shared<optim::ExponentialLR>(grows, 0.9);
  EXPECT_ERROR_CONTAINS(optim::SequentialLR(grows, {early, late}, {2}),
                        "SequentialLR: scheduler 0 (ExponentialLR) was made for 1 parameter groups, the optimizer "
                        "has 2; make the schedulers after add_param_group");
  EXPECT_EQ(grows.lr(1), 0.1);  // untouched
  // The epoch: the largest one applies, stepping past it is an error that changes nothing.
  Tensor c = param({0.0});
  optim::SGD big({c}, {1.0});
  optim::StepLR st(big, 1000, 0.5);
  st.set_epoch(std::numeric_limits<int64_t>::max());
  EXPECT_EQ(big.lr(), 0.0);
  EXPECT_ERROR_CONTAINS(st.step(), "StepLR: the epoch 9223372036854775807 is the largest an int64 holds");
  EXPECT_EQ(st.epoch(), std::numeric_limits<int64_t>::max());
  EXPECT_ERROR_CONTAINS(st.set_epoch(-1), "StepLR.set_epoch: the epoch must be >= 0, got -1");
  st.set_epoch(3);
  EXPECT_EQ(big.lr(), 1.0);
  // OneCycleLR: pct_start * total_steps = 1 leaves the warm-up no step
  // (0 to 0), 0.5 a negative one; three phases of 5 steps at 0.6 leave the
  // last none (4 to 4).
  optim::SGD oc({c}, {0.1, 0.9});
  EXPECT_ERROR_CONTAINS(optim::OneCycleLR(oc, 1.0, 10, 0.1),
                        "OneCycleLR: phase 1 of 2 would span steps 0 to 0, no length");
  EXPECT_ERROR_CONTAINS(optim::OneCycleLR(oc, 1.0, 5, 0.1), "OneCycleLR: phase 1 of 2 would span steps 0 to -0.5");
  EXPECT_ERROR_CONTAINS(optim::OneCycleLR(oc, 1.0, 5, 0.6, true, 25, 1e4, /*three_phase=*/true),
                        "OneCycleLR: phase 3 of 3 would span steps 4 to 4, no length (total_steps = 5, pct_start = "
                        "0.6, pct_start * total_steps = 3); raise total_steps or move pct_start");
  EXPECT_EQ(oc.lr(), 0.1);
  optim::OneCycleLR fine(oc, 1.0, 5, 0.6);  // two phases: 0 to 2, 2 to 4
  fine.set_epoch(5);
  EXPECT_TRUE(std::isfinite(oc.lr()));
}

// Two schedulers stepping one optimizer in the same epoch are refused (the
// last one would win silently); each alone, one after the other, or as
// SequentialLR's children works.
TEST(OptimSchedulers, ChainedSchedulersAreRefused) {
  Tensor p = param({0.0});
  optim::SGD opt({p}, {1.0});
  optim::StepLR a(opt, 1, 0.5);
  {
    optim::ExponentialLR b(opt, 0.9);
    opt.step();  // no gradient: only counts
    a.step();
    EXPECT_DOUBLE_EQ(opt.lr(), 0.5);
    EXPECT_ERROR_CONTAINS(b.step(),
                          "ExponentialLR: StepLR already set SGD's learning rates at this optimizer step (1 steps "
                          "taken); chained schedulers would leave the last one's rate, silently");
    EXPECT_DOUBLE_EQ(opt.lr(), 0.5);  // refused: nothing changed
    EXPECT_EQ(b.epoch(), 0);
    a.step();  // the same scheduler again is fine
    EXPECT_DOUBLE_EQ(opt.lr(), 0.25);
  }
  opt.step();
  a.step();
  EXPECT_DOUBLE_EQ(opt.lr(), 0.125);
  optim::ReduceLROnPlateau plateau(opt, 0.5, 0);
  plateau.step(1.0);
  opt.step();
  plateau.step(2.0);
  EXPECT_ERROR_CONTAINS(a.step(), "StepLR: ReduceLROnPlateau already set SGD's learning rates");
  opt.step();
  a.step();
  EXPECT_ERROR_CONTAINS(plateau.step(1.0), "ReduceLROnPlateau: StepLR already set SGD's learning rates");
  // SequentialLR drives its children: stepping one of them too is chaining.
  Tensor q = param({0.0});
  optim::SGD o2({q}, {1.0});
  auto warm = std::make_shared<optim::LinearLR>(o2, 0.5, 1.0, 2);
  auto decay = std::make_shared<optim::ExponentialLR>(o2, 0.5);
  optim::SequentialLR seq(o2, {warm, decay}, {2});
  seq.step();
  EXPECT_DOUBLE_EQ(o2.lr(), 0.75);
  EXPECT_ERROR_CONTAINS(decay->step(), "ExponentialLR: SequentialLR already set SGD's learning rates");
  EXPECT_DOUBLE_EQ(o2.lr(), 0.75);
}

// ReduceLROnPlateau scales each group's own rate (before: every group got
// group 0's), starts from best = +inf (-inf in mode max) so that a NaN
// metric is only a bad epoch (before: it became the best and no metric
// improved on it), and has PyTorch's modes, threshold modes and eps.
TEST(OptimSchedulers, ReduceLROnPlateauPerGroupAndNaN) {
  Tensor p = param({0.0}), q = param({0.0});
  optim::SGD opt(std::vector<optim::ParamGroup>{{{p}, 1.0}, {{q}, 0.1}}, {});
  optim::ReduceLROnPlateau plateau(opt, 0.5, /*patience=*/1);
  EXPECT_EQ(plateau.best(), INFINITY);
  V lr0, lr1;
  for (double m : {double(NAN), 1.0, 0.9, 0.9, 0.9}) {
    plateau.step(m);
    lr0.push_back(opt.lr(0));
    lr1.push_back(opt.lr(1));
  }
  EXPECT_EQ(lr0, (V{1, 1, 1, 1, 0.5}));
  EXPECT_EQ(lr1, (V{0.1, 0.1, 0.1, 0.1, 0.05}));
  EXPECT_EQ(plateau.best(), 0.9);
  // Mode max, absolute threshold 0.1: 1.25 is no improvement on 1.2.
  optim::SGD up_opt({param({0.0})}, {1.0});
  optim::ReduceLROnPlateau up(up_opt, 0.5, 0, 0.1, 0, 0, "max", "abs");
  EXPECT_EQ(up.best(), -INFINITY);
  V got;
  for (double m : {1.0, 1.2, 1.25, 1.4}) {
    up.step(m);
    got.push_back(up_opt.lr());
  }
  EXPECT_EQ(got, (V{1, 1, 0.5, 0.5}));
  EXPECT_EQ(up.best(), 1.4);
  // A change of at most eps (1e-8) is not made.
  optim::SGD tiny({param({0.0})}, {1.5e-8});
  optim::ReduceLROnPlateau near(tiny, 0.5, 0, 1e-4, 0, /*min_lr=*/1e-8);
  near.step(1.0);
  near.step(1.0);
  EXPECT_EQ(tiny.lr(), 1.5e-8);
  EXPECT_ERROR_CONTAINS(optim::ReduceLROnPlateau(tiny, 0.5, 0, 1e-4, 0, 0, "up"),
                        "ReduceLROnPlateau: mode must be \"min\" or \"max\", got \"up\"");
  EXPECT_ERROR_CONTAINS(optim::ReduceLROnPlateau(tiny, 0.5, 0, NAN), "threshold, min_lr and eps must be finite");
}

// load_state_dict refuses non-finite, negative, non-integral or huge counts
// and out-of-range options (before: int64_t(NaN) and int64_t(1e30), which
// are undefined, and steps overwritten before lr was checked) and changes
// nothing when it refuses: the optimizer then loads a good state.
TEST(OptimState, LoadRefusesBadNumbersAndChangesNothing) {
  optim::AdaptiveOptions o;
  o.lr = 0.01;
  Tensor a = param({1.0, 2.0});
  optim::NAdam src({a}, o);
  optim::StepLR sched(src, 10);  // so that the state has an initial_lr
  for (int k = 1; k <= 3; ++k) {
    feed(a, k);
    src.step();
  }
  const optim::NamedTensors good = src.state_dict();
  auto with = [&](const std::string& key, double v) {
    optim::NamedTensors st;
    bool found = false;
    for (const auto& [k, t] : good) {
      found = found || k == key;
      st.emplace_back(k, k == key ? tg::full({}, v, kF64) : t);
    }
    EXPECT_TRUE(found) << key;
    return st;
  };
  struct Bad {
    std::string key;
    double value;
    std::string message;
  };
  const std::string count = "' must be an integer count in [0, 2^53], got ";
  const std::string rate = "' must be finite and in [0, inf], got ";
  const std::vector<Bad> bads = {
      {"steps", NAN, "NAdam: state 'steps" + count + "nan"},
      {"steps", INFINITY, "state 'steps" + count + "inf"},
      {"steps", 1e30, "state 'steps" + count + "1e+30"},
      {"steps", -1, "state 'steps" + count + "-1"},
      {"state.0.step", 2.5, "state 'state.0.step" + count + "2.5"},
      {"state.0.step", -INFINITY, "state 'state.0.step" + count + "-inf"},
      {"state.0.step", 1e19, "state 'state.0.step" + count + "1e+19"},
      {"param_groups", NAN, "state 'param_groups" + count + "nan"},
      {"param_groups.0.params", 1.5, "state 'param_groups.0.params" + count + "1.5"},
      {"param_groups.0.lr", NAN, "NAdam: state 'param_groups.0.lr" + rate + "nan"},
      {"param_groups.0.lr", INFINITY, "state 'param_groups.0.lr" + rate + "inf"},
      {"param_groups.0.lr", -0.1, "state 'param_groups.0.lr" + rate + "-0.1"},
      {"param_groups.0.weight_decay", -1, "state 'param_groups.0.weight_decay" + rate + "-1"},
      {"param_groups.0.initial_lr", NAN, "state 'param_groups.0.initial_lr" + rate + "nan"},
      {"param_groups.0.momentum", NAN, "state 'param_groups.0.momentum" + rate + "nan"},
      {"param_groups.0.momentum", 1.0, "state 'param_groups.0.momentum' is 1, out of range: beta1 must be in [0, 1)"},
      {"state.0.mu_product", 1.5, "state 'state.0.mu_product' must be finite and in [0, 1], got 1.5"},
      {"state.0.mu_product", NAN, "state 'state.0.mu_product' must be finite and in [0, 1], got nan"},
      {"param_groups.0.decoupled_weight_decay", 0.5, "state 'param_groups.0.decoupled_weight_decay' must be 0 or 1"},
  };
  Tensor b = param({1.0, 2.0});
  optim::NAdam dst({b}, o);
  for (const Bad& bad : bads) {
    SCOPED_TRACE(bad.key + " = " + std::to_string(bad.value));
    EXPECT_ERROR_CONTAINS(dst.load_state_dict(with(bad.key, bad.value)), bad.message);
    EXPECT_EQ(dst.steps(), 0);
    EXPECT_EQ(dst.lr(), 0.01);
    EXPECT_DOUBLE_EQ(dst.momentum(0), 0.9);
    for (const auto& [k, t] : dst.state_dict()) {
      EXPECT_NE(k, "state.0.exp_avg");  // no moments were made
      EXPECT_NE(k, "param_groups.0.initial_lr");
      if (k == "state.0.step" || k == "param_groups.0.decoupled_weight_decay") {
        EXPECT_EQ(t.item<double>(), 0.0) << k;
      }
    }
  }
  dst.load_state_dict(good);  // still usable
  EXPECT_EQ(dst.steps(), 3);
  Tensor twin = a.detach().clone().requires_grad_();
  optim::NAdam resumed({twin}, o);
  resumed.load_state_dict(good);
  feed(a, 4);
  feed(twin, 4);
  src.step();
  resumed.step();
  EXPECT_EQ(vals(a), vals(twin));
}

// all_options(base) with decoupled_weight_decay.
optim::AdaptiveOptions decoupled_all_options(const optim::AdaptiveOptions& base) {
  optim::AdaptiveOptions o = all_options(base);
  o.decoupled_weight_decay = true;
  return o;
}

// NAdam's options with lr 0.01, beta1 and momentum_decay psi.
optim::AdaptiveOptions nadam_options(double beta1, double psi) {
  optim::AdaptiveOptions o;
  o.lr = 0.01;
  o.beta1 = beta1;
  o.momentum_decay = psi;
  return o;
}

// The state of a NAdam over `a` after one step (gradient feed(a, 1)), as a
// save without mu_product at step count n.
optim::NamedTensors nadam_state_at_step(const Tensor& a, const optim::AdaptiveOptions& o, double n) {
  optim::NAdam src({a}, o);
  feed(a, 1);
  src.step();
  optim::NamedTensors st;
  for (const auto& [k, t] : src.state_dict())
    if (k != "state.0.mu_product") st.emplace_back(k, k == "state.0.step" ? tg::full({}, n, kF64) : t);
  return st;
}

// NAdam's mu_product after a loaded step count without one takes bounded
// time (before: one factor per past step, so a state at step 1e12 took
// hours): the first 2^20 factors one by one as the steps multiply them
// (bitwise), the rest in closed form, which agrees with the factor-by-factor
// product; a state at step 1e12 loads and steps at once, as PyTorch's
// formulas say.
TEST(OptimRules, NAdamMuProductOfAHugeStepCountTakesBoundedTime) {
  // psi = 1 and beta1 near 1 keep the product away from 0 over millions of steps.
  const double beta1 = 0.9999999, psi = 1.0;
  double loop = 1;
  for (int64_t k = 1; k <= 3000000; ++k) {
    loop *= beta1 * (1 - 0.5 * std::pow(0.96, double(k) * psi));
    if (k == 1000 || k == optim::detail::kNAdamExactSteps) {
      EXPECT_EQ(optim::detail::nadam_mu_product(beta1, psi, k), loop) << k;  // the same products
    }
    if (k == optim::detail::kNAdamExactSteps + 1 || k == 2000000 || k == 3000000) {
      const double got = optim::detail::nadam_mu_product(beta1, psi, k);
      EXPECT_NEAR(got, loop, 1e-9 * loop) << k;
      EXPECT_GT(got, 1e-7) << k;
    }
  }
  EXPECT_EQ(optim::detail::nadam_mu_product(0.0, psi, 5000000), 0.0);
  EXPECT_EQ(optim::detail::nadam_mu_product(0.9, 4e-3, 0), 1.0);
  // Through load_state_dict: a state without mu_product at step n.
  const optim::AdaptiveOptions o = nadam_options(beta1, psi);
  for (double n : {3e6, 1e12}) {
    SCOPED_TRACE("step " + std::to_string(n));
    Tensor a = param({0.5, -1.2, 2.0});
    const optim::NamedTensors st = nadam_state_at_step(a, o, n);
    V m, v;
    for (const auto& [k, t] : st) {
      if (k == "state.0.exp_avg") m = vals(t);
      if (k == "state.0.exp_avg_sq") v = vals(t);
    }
    Tensor b = param(vals(a));
    optim::NAdam dst({b}, o);
    const auto start = std::chrono::steady_clock::now();
    dst.load_state_dict(st);
    feed(b, 2);
    dst.step();
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(secs, 10.0);  // about 0.05 s: 2^20 factors
    Reference ref{"NAdam", o, vals(a), m, v, V(3, 0.0)};
    ref.t = n;
    ref.mu_product = n == 3e6 ? loop : 0.0;  // beta1^1e12 underflows
    ref.step(2);
    expect_near(vals(b), ref.p, "NAdam resumed at a huge step");
  }
}

// NAdam's and RAdam's decoupled_weight_decay (PyTorch 2): p *= 1 - lr wd
// before the update, instead of wd p added to the gradient; saved with the
// groups, restored by load_state_dict; the other rules refuse it.
TEST(OptimRules, DecoupledWeightDecayOfNAdamAndRAdam) {
  optim::AdaptiveOptions base;
  base.lr = 0.05;
  for (const char* rule : {"NAdam", "RAdam"}) {
    SCOPED_TRACE(rule);
    const optim::AdaptiveOptions o = decoupled_all_options(base);
    const V start = {0.5, -1.2, 2.0, 0.03};
    Tensor p = param(start), l2 = param(start);
    auto opt = make(rule, {p}, o);
    optim::AdaptiveOptions o_l2 = o;
    o_l2.decoupled_weight_decay = false;
    auto opt_l2 = make(rule, {l2}, o_l2);
    Reference ref{rule, o, start, {}, {}, {}};
    for (int k = 1; k <= 12; ++k) {
      feed(p, k);
      feed(l2, k);
      opt->step();
      opt_l2->step();
      ref.step(k);
      expect_near(vals(p), ref.p, std::string(rule) + " decoupled step " + std::to_string(k));
    }
    EXPECT_GT(std::fabs(vals(p)[2] - vals(l2)[2]), 1e-4);  // the option matters
    const optim::NamedTensors state = opt->state_dict();
    bool saved = false;
    for (const auto& [k, t] : state)
      saved = saved || (k == "param_groups.0.decoupled_weight_decay" && t.item<double>() == 1.0);
    EXPECT_TRUE(saved);
    Tensor twin = p.detach().clone().requires_grad_();
    auto resumed = make(rule, {twin}, o_l2);  // built without: the state sets it
    resumed->load_state_dict(state);
    feed(p, 13);
    feed(twin, 13);
    opt->step();
    resumed->step();
    EXPECT_EQ(vals(p), vals(twin));
  }
  optim::AdaptiveOptions o = base;
  o.decoupled_weight_decay = true;
  EXPECT_ERROR_CONTAINS(optim::RMSprop({param({1.0})}, o),
                        "RMSprop: decoupled_weight_decay is an option of NAdam and RAdam (as PyTorch's)");
  o.decoupled_weight_decay = false;
  o.momentum_decay = -1;
  EXPECT_ERROR_CONTAINS(optim::NAdam({param({1.0})}, o), "NAdam: momentum_decay must be finite and >= 0, got -1");
}

// On a GPU: the fused NAdam and RAdam with decoupled_weight_decay equal the
// per-tensor step on the CPU (float64 and float32); a fused NAdam loaded
// from a state without mu_product at a huge step count rebuilds it on the
// device in bounded time (nadam_mu_product) as the CPU does.
TEST(OptimGpu, DecoupledWeightDecayAndHugeNAdamStepsOnTheGpu) {
  REQUIRE_GPU();
  const tg::Device gpu(tg::kCUDA, 0);
  optim::AdaptiveOptions base;
  base.lr = 0.05;
  for (const char* rule : {"NAdam", "RAdam"}) {
    SCOPED_TRACE(rule);
    const optim::AdaptiveOptions o = decoupled_all_options(base);
    tg::manual_seed(4);
    std::vector<Tensor> cpu, dev;
    for (int i = 0; i < 3; ++i) {
      Tensor p = tg::randn({i == 1 ? 7 : 300}, tg::TensorOptions().dtype(i == 1 ? tg::kFloat32 : tg::kFloat64));
      cpu.push_back(p.clone().requires_grad_());
      dev.push_back(p.to(gpu).requires_grad_());
    }
    auto c = make(rule, cpu, o), d = make(rule, dev, o);
    ASSERT_TRUE(d->fused());
    for (int k = 1; k <= 8; ++k) {
      for (size_t i = 0; i < cpu.size(); ++i) {
        Tensor g = tg::randn(cpu[i].sizes(), cpu[i].options());
        cpu[i].mutable_grad() = g;
        dev[i].mutable_grad() = g.to(gpu);
      }
      c->step();
      d->step();
    }
    for (size_t i = 0; i < cpu.size(); ++i)
      expect_close(dev[i], cpu[i], "parameter " + std::to_string(i));
  }
  const optim::AdaptiveOptions o = nadam_options(0.9999999, 1.0);
  for (double n : {3e6, 1e12}) {
    SCOPED_TRACE("step " + std::to_string(n));
    Tensor a = param({0.5, -1.2, 2.0});
    const optim::NamedTensors st = nadam_state_at_step(a, o, n);
    Tensor on_cpu = param(vals(a)), on_gpu = param(vals(a)).detach().to(gpu).requires_grad_();
    optim::NAdam c({on_cpu}, o), d({on_gpu}, o);
    ASSERT_TRUE(d.fused());
    c.load_state_dict(st);
    d.load_state_dict(st);
    feed(on_cpu, 2);
    on_gpu.mutable_grad() = on_cpu.grad().to(gpu);
    c.step();
    d.step();
    expect_close(on_gpu, on_cpu, "NAdam resumed at a huge step");
  }
}

}  // namespace
