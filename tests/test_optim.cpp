// optim (docs/OPTIM.md): every update rule against a scalar double-precision
// reference of PyTorch's formulas over several steps with changing
// gradients; schedulers against their closed forms.
#include <cmath>

#include "reference.h"

namespace {

using tg::Tensor;
namespace optim = tg::optim;

const auto kF64 = tg::TensorOptions().dtype(tg::kFloat64);

// A parameter and the gradient of step k (a fixed function of k and p, so the
// reference can recompute it).
std::vector<double> grad_at(int k, const std::vector<double>& p) {
  std::vector<double> g(p.size());
  for (size_t i = 0; i < p.size(); ++i)
    g[i] = std::sin(double(k + 1) * (double(i) + 0.5)) + 0.3 * p[i];
  return g;
}

// Runs `steps` steps of `opt` on a parameter starting at p0 and returns the
// values after each step.
// On `dev` (CUDA: the multi-tensor update, asserted).
template <class Make>
std::vector<std::vector<double>> run(Make make, const std::vector<double>& p0, int steps,
                                     tg::Device dev = tg::Device(tg::kCPU)) {
  Tensor p = tg::tensor(p0, {int64_t(p0.size())}, kF64).to(dev).requires_grad_();
  auto opt = make(std::vector<Tensor>{p});
  if (dev.is_cuda()) {
    EXPECT_TRUE(opt->fused());
  }
  std::vector<std::vector<double>> out;
  for (int k = 0; k < steps; ++k) {
    opt->zero_grad();
    p.mutable_grad() = tg::tensor(grad_at(k, p.to_vector<double>()), {int64_t(p0.size())}, kF64).to(dev);
    opt->step();
    out.push_back(p.to_vector<double>());
  }
  return out;
}

void expect_near_all(const std::vector<std::vector<double>>& got, const std::vector<std::vector<double>>& want,
                     const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k)
    for (size_t i = 0; i < got[k].size(); ++i)
      EXPECT_NEAR(got[k][i], want[k][i], 1e-13 * (1 + std::abs(want[k][i]))) << what << " step " << k << " elem " << i;
}

const std::vector<double> kP0{0.5, -1.25, 2.0, 0.0, 3.5};

void sgd_matches_reference(tg::Device dev) {
  struct Case {
    optim::SGDOptions o;
    const char* what;
  };
  std::vector<Case> cases{{{0.1, 0, 0, 0, false}, "plain"},
                          {{0.1, 0.9, 0, 0, false}, "momentum"},
                          {{0.05, 0.9, 0.1, 0.01, false}, "momentum, dampening, weight decay"},
                          {{0.05, 0.8, 0, 0.02, true}, "nesterov, weight decay"}};
  for (const Case& c : cases) {
    auto got = run([&](std::vector<Tensor> ps) { return std::make_unique<optim::SGD>(ps, c.o); }, kP0, 6, dev);
    std::vector<double> p = kP0, buf;
    std::vector<std::vector<double>> want;
    for (int k = 0; k < 6; ++k) {
      std::vector<double> g = grad_at(k, p);
      for (size_t i = 0; i < p.size(); ++i)
        g[i] += c.o.weight_decay * p[i];
      if (c.o.momentum != 0) {
        if (buf.empty()) {
          buf = g;
        } else {
          for (size_t i = 0; i < p.size(); ++i)
            buf[i] = c.o.momentum * buf[i] + (1 - c.o.dampening) * g[i];
        }
        for (size_t i = 0; i < p.size(); ++i)
          g[i] = c.o.nesterov ? g[i] + c.o.momentum * buf[i] : buf[i];
      }
      for (size_t i = 0; i < p.size(); ++i)
        p[i] -= c.o.lr * g[i];
      want.push_back(p);
    }
    expect_near_all(got, want, c.what);
  }
}

TEST(Optim, SgdMatchesTheReferenceInEveryMode) {
  sgd_matches_reference(tg::Device(tg::kCPU));
  EXPECT_ERROR_CONTAINS(optim::SGD({tg::zeros({1}).requires_grad_()}, {0.1, 0, 0, 0, true}), "Nesterov");
}

std::vector<std::vector<double>> adam_reference(const optim::AdamOptions& o, bool decoupled, int steps) {
  std::vector<double> p = kP0, m(p.size(), 0), v(p.size(), 0), vmax(p.size(), 0);
  std::vector<std::vector<double>> want;
  for (int k = 0; k < steps; ++k) {
    std::vector<double> g = grad_at(k, p);
    const int t = k + 1;
    for (size_t i = 0; i < p.size(); ++i) {
      if (decoupled) p[i] *= 1 - o.lr * o.weight_decay;
      else g[i] += o.weight_decay * p[i];
      m[i] = o.beta1 * m[i] + (1 - o.beta1) * g[i];
      v[i] = o.beta2 * v[i] + (1 - o.beta2) * g[i] * g[i];
      vmax[i] = std::max(vmax[i], v[i]);
      const double bc1 = 1 - std::pow(o.beta1, t), bc2 = 1 - std::pow(o.beta2, t);
      const double denom = std::sqrt(o.amsgrad ? vmax[i] : v[i]) / std::sqrt(bc2) + o.eps;
      p[i] -= o.lr / bc1 * m[i] / denom;
    }
    want.push_back(p);
  }
  return want;
}

void adam_matches_reference(tg::Device dev, bool capturable) {
  for (bool amsgrad : {false, true}) {
    for (double wd : {0.0, 0.05}) {
      optim::AdamOptions o;
      o.lr = 0.05;
      o.weight_decay = wd;
      o.amsgrad = amsgrad;
      o.capturable = capturable;
      const std::string what = std::string(amsgrad ? "amsgrad" : "adam") + " wd " + std::to_string(wd);
      expect_near_all(run([&](std::vector<Tensor> ps) { return std::make_unique<optim::Adam>(ps, o); }, kP0, 8, dev),
                      adam_reference(o, false, 8), "Adam " + what);
      expect_near_all(run([&](std::vector<Tensor> ps) { return std::make_unique<optim::AdamW>(ps, o); }, kP0, 8, dev),
                      adam_reference(o, true, 8), "AdamW " + what);
    }
  }
}

TEST(Optim, AdamAndAdamWMatchTheReference) {
  adam_matches_reference(tg::Device(tg::kCPU), false);
  EXPECT_EQ(optim::AdamW::AdamWDefaults().weight_decay, 1e-2);
  // capturable needs the multi-tensor update, which is CUDA's.
  optim::AdamOptions o;
  o.capturable = true;
  EXPECT_ERROR_CONTAINS(optim::Adam({tg::zeros({2}).requires_grad_()}, o),
                        "Adam: capturable needs float32/float64 contiguous parameters on one CUDA device "
                        "(the multi-tensor update), but parameter 0 is on the CPU");
}

// The multi-tensor CUDA updates (fused) against the same references, plain
// and capturable (state up front, parameters registered static).
TEST(OptimGpu, MultiTensorUpdatesMatchTheReference) {
  REQUIRE_GPU();
  const tg::Device gpu(tg::kCUDA, 0);
  sgd_matches_reference(gpu);
  adam_matches_reference(gpu, false);
  adam_matches_reference(gpu, true);
}

// Many parameters of two dtypes and several launches' worth (more than one
// kernel argument list), some without gradients: the fused step equals the
// per-tensor step on the CPU; zero_grad(set_to_none=false) zeroes them all.
TEST(OptimGpu, MultiTensorStepOverManyParametersEqualsThePerTensorStep) {
  REQUIRE_GPU();
  const tg::Device gpu(tg::kCUDA, 0);
  tg::manual_seed(5);
  std::vector<Tensor> cpu, dev;
  for (int i = 0; i < 130; ++i) {
    auto dt = i % 3 == 0 ? tg::kFloat32 : tg::kFloat64;
    int64_t n = i % 7 == 0 ? 0 : 1 + (i * 37) % 5000;  // zero-size ones too
    Tensor p = tg::randn({n}, tg::TensorOptions().dtype(dt));
    cpu.push_back(p.clone().requires_grad_());
    dev.push_back(p.to(gpu).requires_grad_());
  }
  optim::AdamOptions o;
  o.lr = 0.01;
  o.weight_decay = 0.01;
  optim::AdamW a_cpu(cpu, o), a_dev(dev, o);
  ASSERT_TRUE(a_dev.fused());
  ASSERT_FALSE(a_cpu.fused());
  for (int k = 0; k < 3; ++k) {
    for (size_t i = 0; i < cpu.size(); ++i) {
      if ((i + size_t(k)) % 5 == 0) {  // no gradient this step
        cpu[i].mutable_grad() = Tensor();
        dev[i].mutable_grad() = Tensor();
        continue;
      }
      Tensor g = tg::randn(cpu[i].sizes(), cpu[i].options());
      cpu[i].mutable_grad() = g;
      dev[i].mutable_grad() = g.to(gpu);
    }
    a_cpu.step();
    a_dev.step();
  }
  for (size_t i = 0; i < cpu.size(); ++i) {
    const double tol = cpu[i].dtype() == tg::kFloat32 ? 2e-6 : 1e-13;
    auto want = cpu[i].to_vector<double>(), got = dev[i].to(tg::Device(tg::kCPU)).to_vector<double>();
    ASSERT_EQ(want.size(), got.size());
    for (size_t j = 0; j < want.size(); ++j)
      ASSERT_NEAR(got[j], want[j], tol * (1 + std::abs(want[j]))) << "parameter " << i << " element " << j;
  }
  a_dev.zero_grad(/*set_to_none=*/false);
  for (size_t i = 0; i < dev.size(); ++i)
    if (dev[i].grad().defined()) {
      EXPECT_EQ(tg::abs(dev[i].grad()).sum().item<double>(), 0.0) << "parameter " << i;
    }
}

// Parameters without a gradient are left alone; parameters keep their
// addresses; bad parameters are refused naming the optimizer.
TEST(Optim, StepSkipsParametersWithoutGradientsAndUpdatesInPlace) {
  Tensor a = tg::ones({3}, kF64).requires_grad_(), b = tg::ones({2}, kF64).requires_grad_();
  optim::Adam opt({a, b});
  const void* addr = a.data_ptr();
  (a * 2.0).sum().backward();
  opt.step();
  EXPECT_EQ(a.data_ptr(), addr);
  EXPECT_LT(a.to_vector<double>()[0], 1.0);
  EXPECT_EQ(b.to_vector<double>(), (std::vector<double>{1.0, 1.0}));
  EXPECT_EQ(opt.steps(), 1);
  EXPECT_ERROR_CONTAINS(optim::SGD({tg::ones({2}, tg::TensorOptions().dtype(tg::kInt64))}), "SGD: parameter 0");
  EXPECT_ERROR_CONTAINS(optim::SGD({a, a}), "is the same tensor as parameter 0");
  EXPECT_ERROR_CONTAINS(optim::SGD({b, a, b}), "SGD: parameter 2 is the same tensor as parameter 0");
  EXPECT_ERROR_CONTAINS(optim::SGD(std::vector<Tensor>{}), "SGD: got an empty parameter list");
  EXPECT_ERROR_CONTAINS(optim::Adam(std::vector<Tensor>{}), "Adam: got an empty parameter list");
  EXPECT_ERROR_CONTAINS(optim::LBFGS({}), "LBFGS: got an empty parameter list");
  EXPECT_ERROR_CONTAINS(optim::Adam({a}, optim::AdamOptions{0.1, 1.0}), "betas must be in [0, 1)");
}

// An MLP fitted to sin with Adam: the loss falls by two orders of magnitude.
TEST(Optim, AdamTrainsAnMlp) {
  tg::manual_seed(0);
  auto net = tg::nn::MLP({1, 32, 32, 1}, "tanh", kF64);
  Tensor x = tg::rand({128, 1}, kF64) * 6.0 - 3.0, y = tg::sin(x);
  optim::AdamOptions o;
  o.lr = 1e-2;
  optim::Adam opt(net->parameters(), o);
  double first = 0, last = 0;
  for (int k = 0; k < 400; ++k) {
    opt.zero_grad();
    Tensor loss = ((*net)(x)-y).square().mean();
    loss.backward();
    opt.step();
    (k == 0 ? first : last) = loss.item<double>();
  }
  EXPECT_LT(last, first / 100) << "first " << first << " last " << last;
}

// L-BFGS: on a quadratic 0.5 x^T A x - b^T x (A symmetric positive definite)
// it reaches the minimizer, where A x = b; with the strong-Wolfe line search
// it also solves Rosenbrock's function; bad use is refused.
TEST(Optim, LbfgsSolvesAQuadraticAndRosenbrock) {
  tg::manual_seed(21);
  const int64_t n = 10;
  Tensor m = tg::randn({n, n}, kF64);
  Tensor a = tg::mm(m, m.t()) + tg::eye(n, kF64), b = tg::randn({n}, kF64);
  for (bool wolfe : {true, false}) {
    SCOPED_TRACE(wolfe ? "strong Wolfe" : "fixed steps");
    Tensor x = tg::zeros({n}, kF64).requires_grad_();
    optim::LBFGSOptions o;
    o.strong_wolfe = wolfe;
    o.max_iter = 200;
    o.max_eval = 400;
    o.tolerance_grad = 1e-11;
    o.tolerance_change = 1e-14;
    o.lr = wolfe ? 1.0 : 0.5;
    optim::LBFGS opt({x}, o);
    auto closure = [&] {
      opt.zero_grad();
      Tensor loss = 0.5 * tg::dot(x, tg::matmul(a, x)) - tg::dot(b, x);
      loss.backward();
      return loss;
    };
    for (int s = 0; s < 5; ++s)
      opt.step(closure);
    // From |b| ~ 2 to about sqrt(machine epsilon): below that the loss (~10)
    // cannot tell the iterates apart.
    Tensor residual = tg::matmul(a, x.detach()) - b;
    EXPECT_LT(tg::amax(tg::abs(residual)).item<double>(), 1e-6) << opt.evaluations() << " evaluations";
  }
  Tensor xy = tg::tensor({-1.5, 2.0}, {2}, kF64).requires_grad_();
  optim::LBFGSOptions o;
  o.strong_wolfe = true;
  o.max_iter = 500;
  o.max_eval = 1000;
  o.tolerance_grad = 1e-12;
  o.tolerance_change = 1e-16;
  optim::LBFGS opt({xy}, o);
  auto rosen = [&] {
    opt.zero_grad();
    Tensor u = xy.select(0, 0), v = xy.select(0, 1);
    Tensor loss = (1.0 - u).square() + 100.0 * (v - u.square()).square();
    loss.backward();
    return loss;
  };
  const double first = opt.step(rosen);
  EXPECT_NEAR(first, 6.25 + 100 * 0.0625, 1e-12);  // f(-1.5, 2)
  for (int s = 0; s < 3; ++s)
    opt.step(rosen);
  EXPECT_NEAR(xy.to_vector<double>()[0], 1.0, 1e-8);  // 1.6e-9 and 3.2e-9 off, 53 evaluations
  EXPECT_NEAR(xy.to_vector<double>()[1], 1.0, 1e-8);
  EXPECT_ERROR_CONTAINS(opt.step(), "LBFGS: step() needs a closure");
  EXPECT_ERROR_CONTAINS(optim::LBFGS({xy, tg::zeros({1}).requires_grad_()}), "one dtype and device");
  EXPECT_ERROR_CONTAINS(optim::LBFGS({xy, tg::zeros({1}, tg::TensorOptions().dtype(tg::kComplex64)).requires_grad_()}),
                        "one dtype and device");
  // A complex parameter beside a real one of its parts' dtype (as PyTorch's
  // LBFGS: one vector of the values): |z - (2 - i)|^2 + |r - 3|^2 solved.
  Tensor z = tg::zeros({2}, tg::TensorOptions().dtype(tg::kComplex128)).requires_grad_(),
         r = tg::zeros({3}, kF64).requires_grad_();
  const Tensor target = tg::complex_from(tg::full({2}, 2.0, kF64), tg::full({2}, -1.0, kF64));
  optim::LBFGSOptions mixed;
  mixed.strong_wolfe = true;
  optim::LBFGS both({z, r}, mixed);
  auto quad = [&] {
    both.zero_grad();
    Tensor loss = tg::abs(z - target).square().sum() + (r - 3.0).square().sum();
    loss.backward();
    return loss;
  };
  for (int s = 0; s < 3; ++s)
    both.step(quad);
  EXPECT_LT(tg::amax(tg::abs(z.detach() - target)).item<double>(), 1e-8);
  EXPECT_LT(tg::amax(tg::abs(r.detach() - 3.0)).item<double>(), 1e-8);
}

TEST(Optim, SchedulersFollowTheirClosedForms) {
  Tensor p = tg::zeros({1}).requires_grad_();
  optim::SGD opt({p}, {1.0});
  optim::StepLR step(opt, 3, 0.5);
  std::vector<double> lrs;
  for (int e = 0; e < 7; ++e) {
    step.step();
    lrs.push_back(opt.lr());
  }
  EXPECT_EQ(lrs, (std::vector<double>{1, 1, 0.5, 0.5, 0.5, 0.25, 0.25}));
  // A scheduler starts from the group's initial_lr, which the first scheduler
  // of an optimizer sets (PyTorch's): a fresh optimizer for the next one.
  optim::SGD opt2({p}, {2.0});
  optim::CosineAnnealingLR cos(opt2, 4, 0.1);
  const double pi = std::acos(-1.0);
  for (int e = 1; e <= 4; ++e) {
    cos.step();
    EXPECT_NEAR(opt2.lr(), 0.1 + 1.9 * (1 + std::cos(pi * e / 4)) / 2, 1e-15) << e;
  }
  EXPECT_NEAR(opt2.lr(), 0.1, 1e-15);
  opt.set_lr(1.0);
  optim::ReduceLROnPlateau plateau(opt, 0.5, /*patience=*/2, 1e-4, /*cooldown=*/1, /*min_lr=*/0.2);
  // Improves, then stalls: the rate halves after 3 epochs without improvement,
  // waits one (cooldown), halves again, and stops at min_lr.
  std::vector<double> got;
  for (double metric : {1.0, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5}) {
    plateau.step(metric);
    got.push_back(opt.lr());
  }
  EXPECT_EQ(got, (std::vector<double>{1, 1, 1, 1, 0.5, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25, 0.25}));
  plateau.step(0.5);
  plateau.step(0.5);
  plateau.step(0.5);
  plateau.step(0.5);
  EXPECT_EQ(opt.lr(), 0.2);
}

// --- Loading and scheduling checks (issue 45, adversary findings) ---

using MakeOpt = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;

Tensor param3() { return tg::tensor(std::vector<double>{0.5, -1.0, 2.0}, {3}, kF64).requires_grad_(); }

// Three steps of `opt` on its parameters, with gradients that vary.
void three_steps(optim::Optimizer& opt) {
  for (int k = 0; k < 3; ++k) {
    for (const Tensor& p : opt.parameters())
      p.mutable_grad() = tg::tensor(grad_at(k, p.to_vector<double>()), {p.numel()}, kF64);
    opt.step();
  }
}

// A state dict's names and values, to compare one before and after.
std::vector<std::pair<std::string, std::vector<double>>> flat(const optim::NamedTensors& st) {
  std::vector<std::pair<std::string, std::vector<double>>> out;
  for (const auto& [k, v] : st)
    out.emplace_back(k, v.to(tg::kFloat64).contiguous().to_vector<double>());
  return out;
}

optim::NamedTensors without(const optim::NamedTensors& st, const std::string& key) {
  optim::NamedTensors out;
  for (const auto& [k, v] : st)
    if (k != key) out.emplace_back(k, v);
  return out;
}

TEST(OptimLoad, AStateMissingATensorTheRuleNeedsIsRefused) {
  struct Case {
    const char* what;
    MakeOpt make;
    std::vector<std::string> needed;  // every state tensor the rule reads with these options
  };
  optim::SGDOptions sgd;
  sgd.lr = 0.1;
  sgd.momentum = 0.9;
  optim::AdamOptions ams;
  ams.amsgrad = true;
  optim::AdaptiveOptions rms;
  rms.lr = 0.01;
  rms.momentum = 0.5;
  rms.centered = true;
  optim::AdaptiveOptions ada;
  ada.lr = 0.01;
  const std::vector<Case> cases{
      {"SGD", [&](std::vector<Tensor> ps) { return std::make_unique<optim::SGD>(ps, sgd); }, {"momentum_buffer"}},
      {"Adam", [](std::vector<Tensor> ps) { return std::make_unique<optim::Adam>(ps); }, {"exp_avg", "exp_avg_sq"}},
      {"Adam amsgrad",
       [&](std::vector<Tensor> ps) { return std::make_unique<optim::Adam>(ps, ams); },
       {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}},
      {"AdamW", [](std::vector<Tensor> ps) { return std::make_unique<optim::AdamW>(ps); }, {"exp_avg", "exp_avg_sq"}},
      {"RMSprop",
       [&](std::vector<Tensor> ps) { return std::make_unique<optim::RMSprop>(ps, rms); },
       {"square_avg", "momentum_buffer", "grad_avg"}},
      {"Adagrad", [&](std::vector<Tensor> ps) { return std::make_unique<optim::Adagrad>(ps, ada); }, {"sum"}},
      {"Adamax",
       [&](std::vector<Tensor> ps) { return std::make_unique<optim::Adamax>(ps, ada); },
       {"exp_avg", "exp_inf"}},
      {"NAdam",
       [&](std::vector<Tensor> ps) { return std::make_unique<optim::NAdam>(ps, ada); },
       {"exp_avg", "exp_avg_sq"}},
      {"RAdam",
       [&](std::vector<Tensor> ps) { return std::make_unique<optim::RAdam>(ps, ada); },
       {"exp_avg", "exp_avg_sq"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    // Parameter 0 takes three steps; parameter 1 none (no state: it loads as fresh).
    Tensor a = param3(), b = param3();
    auto saver = c.make({a, b});
    for (int k = 0; k < 3; ++k) {
      a.mutable_grad() = tg::tensor(grad_at(k, a.to_vector<double>()), {3}, kF64);
      saver->step();
    }
    const optim::NamedTensors saved = saver->state_dict();
    auto target = c.make({param3(), param3()});
    three_steps(*target);
    const auto before = flat(target->state_dict());
    for (const std::string& name : c.needed) {
      const std::string key = "state.0." + name;
      EXPECT_ERROR_CONTAINS(target->load_state_dict(without(saved, key)),
                            std::string(saver->name()) + ": the state has no '" + key + "'");
      EXPECT_EQ(flat(target->state_dict()), before) << "a refused state changed the optimizer (" << key << ")";
    }
    // Only the step count left for parameter 0: refused too, naming the first missing tensor.
    optim::NamedTensors step_only;
    for (const auto& [k, v] : saved)
      if (k.rfind("state.0.", 0) != 0 || k == "state.0.step" || k == "state.0.mu_product") step_only.emplace_back(k, v);
    EXPECT_ERROR_CONTAINS(target->load_state_dict(step_only),
                          "no 'state.0." + c.needed[0] + "', which " + saver->name() +
                              " (with these options) needs for parameter 0, whose state has 'state.0.step' = 3");
    EXPECT_EQ(flat(target->state_dict()), before);
    // The complete state loads, and the next steps are the saver's.
    target->load_state_dict(saved);
    EXPECT_EQ(flat(target->state_dict()), flat(saved));
  }
}

TEST(OptimLoad, AParameterWithoutStateLoadsAsFresh) {
  // Adagrad's sum restarts at initial_accumulator_value (not at 0) when the
  // loaded state has none for the parameter.
  optim::AdaptiveOptions o;
  o.lr = 0.1;
  o.initial_accumulator_value = 0.3;
  Tensor p = param3(), q = param3();
  optim::Adagrad used({p}, o), fresh({q}, o);
  three_steps(used);
  used.load_state_dict(fresh.state_dict());  // step 0, no sum
  EXPECT_EQ(flat(used.state_dict()), flat(fresh.state_dict()));
  // The same gradient moves both by the same amount: -0.1 g / (sqrt(0.3 + g^2) + 1e-8).
  const std::vector<double> g{1.0, -2.0, 0.5};
  std::vector<std::vector<double>> moved;
  for (optim::Adagrad* opt : {&used, &fresh}) {
    const Tensor& x = opt->parameters()[0];
    const std::vector<double> x0 = x.to_vector<double>();
    x.mutable_grad() = tg::tensor(g, {3}, kF64);
    opt->step();
    std::vector<double> d = x.to_vector<double>();
    for (size_t j = 0; j < d.size(); ++j)
      d[j] -= x0[j];
    moved.push_back(d);
  }
  for (size_t j = 0; j < g.size(); ++j) {
    const double want = -0.1 * g[j] / (std::sqrt(0.3 + g[j] * g[j]) + 1e-8);
    EXPECT_NEAR(moved[0][j], want, 1e-14) << "the loaded one, element " << j;
    EXPECT_NEAR(moved[1][j], want, 1e-14) << "the fresh one, element " << j;
  }
}

TEST(OptimLoad, ADuplicatedKeyIsNamed) {
  Tensor p = param3();
  optim::Adam adam({p});
  three_steps(adam);
  optim::NamedTensors st = adam.state_dict();
  const auto before = flat(st);
  st.push_back(st[3]);
  optim::Adam other({param3()});
  EXPECT_ERROR_CONTAINS(other.load_state_dict(st), "Adam: the state has the key '" + st[3].first + "' more than once");
  EXPECT_EQ(other.steps(), 0);
  EXPECT_DOUBLE_EQ(other.lr(), optim::AdamOptions().lr);
  other.load_state_dict(adam.state_dict());  // once each: loads
  EXPECT_EQ(flat(other.state_dict()), before);
}

TEST(OptimOptions, AdagradAndRmspropCheckTheirOptionsAsPyTorch) {
  optim::AdaptiveOptions o;
  o.initial_accumulator_value = -0.5;  // its first step's square root would be NaN
  EXPECT_ERROR_CONTAINS(optim::Adagrad({param3()}, o), "Adagrad: invalid initial_accumulator_value -0.5");
  o.initial_accumulator_value = NAN;
  EXPECT_ERROR_CONTAINS(optim::Adagrad({param3()}, o), "invalid initial_accumulator_value nan; it must be >= 0");
  o.initial_accumulator_value = 0;
  EXPECT_NO_THROW(optim::Adagrad({param3()}, o));
  // alpha: PyTorch's rule is alpha >= 0 (2 is allowed, NaN is not); the message says so.
  optim::AdaptiveOptions r;
  r.lr = 0.01;
  r.alpha = 2;
  Tensor p = param3();
  optim::RMSprop rms({p}, r);
  p.mutable_grad() = tg::tensor(std::vector<double>{1.0, 1.0, 1.0}, {3}, kF64);
  rms.step();  // square_avg = 2 * 0 + (1 - 2) * 1 = -1: sqrt is NaN, as PyTorch's
  EXPECT_TRUE(std::isnan(p.to_vector<double>()[0]));
  r.alpha = NAN;
  EXPECT_ERROR_CONTAINS(optim::RMSprop({param3()}, r), "RMSprop: alpha must be >= 0");
  r.alpha = -0.1;
  EXPECT_ERROR_CONTAINS(optim::RMSprop({param3()}, r),
                        "alpha must be >= 0 (any number from 0 up; NaN is not one), got -0.1");
  r.alpha = 0.99;
  r.beta1 = 1;
  EXPECT_ERROR_CONTAINS(optim::RMSprop({param3()}, r), "beta1 and beta2 must be in [0, 1), got 1 and 0.999");
}

TEST(OptimSchedulers, OneCycleLrSetsInitialLrAsPyTorch) {
  // PyTorch: OneCycleLR sets each group's initial_lr to max_lr / div_factor,
  // so the next child of a SequentialLR starts there (0.1 / 25 = 0.004).
  Tensor p = param3();
  optim::SGD opt({p}, {0.01});
  auto one = std::make_shared<optim::OneCycleLR>(opt, 0.1, 10, 0.3, true, 25, 1e4, false, /*cycle_momentum=*/false);
  EXPECT_DOUBLE_EQ(opt.initial_lr(0), 0.004);
  auto expo = std::make_shared<optim::ExponentialLR>(opt, 0.5);
  optim::SequentialLR seq(opt, {one, expo}, {4});
  EXPECT_DOUBLE_EQ(opt.lr(), 0.004);
  std::vector<double> lrs;
  for (int e = 1; e <= 6; ++e) {
    opt.step();
    seq.step();
    lrs.push_back(opt.lr());
  }
  EXPECT_DOUBLE_EQ(lrs[3], 0.004);  // epoch 4: ExponentialLR's epoch 0
  EXPECT_DOUBLE_EQ(lrs[4], 0.002);
  EXPECT_DOUBLE_EQ(lrs[5], 0.001);
  bool saved = false;
  for (const auto& [k, v] : opt.state_dict())
    if (k == "param_groups.0.initial_lr") {
      saved = true;
      EXPECT_DOUBLE_EQ(v.item<double>(), 0.004);
    }
  EXPECT_TRUE(saved);
}

TEST(OptimSchedulers, ANonFiniteRateIsRefused) {
  Tensor p = param3();
  optim::SGD opt({p}, {0.1});
  optim::ExponentialLR sched(opt, 10);
  sched.set_epoch(2);
  EXPECT_DOUBLE_EQ(opt.lr(), 10.0);
  EXPECT_ERROR_CONTAINS(sched.set_epoch(1000), "ExponentialLR: group 0's rate at epoch 1000 is inf");
  EXPECT_ERROR_CONTAINS(sched.set_epoch(1000), "a learning rate must be finite and >= 0");
  EXPECT_EQ(sched.epoch(), 2);
  EXPECT_DOUBLE_EQ(opt.lr(), 10.0);
  // What it leaves can be saved and loaded back.
  optim::SGD other({param3()}, {0.1});
  other.load_state_dict(opt.state_dict());
  EXPECT_DOUBLE_EQ(other.lr(), 10.0);
  optim::SGD opt2({param3()}, {0.1});
  optim::LambdaLR lambda(opt2, [](int64_t e) { return e == 3 ? INFINITY : 1.0; });
  lambda.step();
  lambda.step();
  EXPECT_ERROR_CONTAINS(lambda.step(), "LambdaLR: group 0's rate at epoch 3 is inf");
  EXPECT_EQ(lambda.epoch(), 2);
  EXPECT_DOUBLE_EQ(opt2.lr(), 0.1);
}

// L-BFGS's history is part of its state_dict (torch's d, t, old_dirs,
// old_stps, ro, H_diag, prev_flat_grad, prev_loss, n_iter, func_evals): a
// resumed run steps bitwise as the uninterrupted one; a damaged history is
// refused and changes nothing.
TEST(Optim, LbfgsResumesBitwiseFromItsStateDict) {
  for (bool wolfe : {false, true}) {
    auto make = [](double a0) {
      return std::vector<Tensor>{tg::tensor({a0, -0.5, 0.3}, {3}, kF64).requires_grad_(),
                                 tg::tensor({0.2, 0.7}, {1, 2}, kF64).requires_grad_()};
    };
    auto closure_for = [](optim::LBFGS& opt, const std::vector<Tensor>& ps) {
      return [&opt, ps]() {
        opt.zero_grad();
        Tensor l = tg::zeros({}, kF64);
        for (const Tensor& p : ps)
          l = l + (p * p * p * p).sum() + tg::sin(p).sum();
        l.backward();
        return l;
      };
    };
    optim::LBFGSOptions o(1.0, 3, 0, 1e-7, 1e-9, 4, wolfe);
    std::vector<Tensor> a = make(1.0);
    optim::LBFGS run(a, o);
    for (int k = 0; k < 2; ++k)
      run.step(closure_for(run, a));
    const optim::NamedTensors saved = run.state_dict();
    std::vector<Tensor> b = make(9.0);  // other values: copied in below
    {
      tg::NoGradGuard no_grad;
      for (size_t i = 0; i < a.size(); ++i)
        b[i].copy_(a[i]);
    }
    optim::LBFGS resumed(b, o);
    resumed.load_state_dict(saved);
    for (int k = 0; k < 3; ++k) {
      const double la = run.step(closure_for(run, a)), lb = resumed.step(closure_for(resumed, b));
      EXPECT_EQ(la, lb) << "step " << k << (wolfe ? " (strong Wolfe)" : "");
    }
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_TRUE(tg::equal(a[i], b[i])) << "parameter " << i;
    EXPECT_EQ(run.evaluations(), resumed.evaluations());
    // A damaged history: refused, nothing changed.
    optim::NamedTensors bad = run.state_dict();
    for (auto& [k, t] : bad)
      if (k == "lbfgs.old_dirs.0") t = tg::zeros({4}, kF64);
    const optim::NamedTensors before = resumed.state_dict();
    EXPECT_ERROR_CONTAINS(resumed.load_state_dict(bad),
                          "LBFGS: state 'lbfgs.old_dirs.0' must be a floating-point "
                          "vector of 5 elements (the parameters'), got [4]");
    optim::NamedTensors missing;
    for (const auto& [k, t] : run.state_dict())
      if (k != "lbfgs.H_diag") missing.emplace_back(k, t);
    EXPECT_ERROR_CONTAINS(resumed.load_state_dict(missing), "LBFGS: the state has no 'lbfgs.H_diag'");
    const optim::NamedTensors after = resumed.state_dict();
    ASSERT_EQ(before.size(), after.size());
    for (size_t i = 0; i < before.size(); ++i)
      EXPECT_TRUE(before[i].first == after[i].first && tg::equal(before[i].second, after[i].second)) << before[i].first;
  }
}

}  // namespace

TEST(OptimSchedulers, PerGroupLambdasAndMinLrsAsPyTorch) {
  // PyTorch's list forms: LambdaLR(opt, [f0, f1]), ReduceLROnPlateau(min_lr=[m0, m1]).
  Tensor a = param3(), b = param3();
  optim::SGD opt(std::vector<optim::ParamGroup>{{{a}, 0.1}, {{b}, 1.0}}, optim::SGDOptions(0.5));
  optim::LambdaLR sched(opt,
                        std::vector<std::function<double(int64_t)>>{[](int64_t e) { return std::pow(0.5, double(e)); },
                                                                    [](int64_t e) { return 1.0 / double(e + 1); }});
  std::vector<double> got;
  for (int e = 0; e < 3; ++e) {
    got.push_back(opt.lr(0));
    got.push_back(opt.lr(1));
    opt.step();
    sched.step();
  }
  EXPECT_EQ(got, (std::vector<double>{0.1, 1.0, 0.05, 0.5, 0.025, 1.0 / 3}));
  optim::SGD opt2(std::vector<optim::ParamGroup>{{{a}, 0.1}, {{b}, 1.0}}, optim::SGDOptions(0.5));
  EXPECT_ERROR_CONTAINS(optim::LambdaLR(opt2, std::vector<std::function<double(int64_t)>>{[](int64_t) { return 1.0; }}),
                        "LambdaLR: 1 lambdas for 2 parameter groups");
  optim::ReduceLROnPlateau plateau(opt2, 0.5, 0, 1e-4, 0, std::vector<double>{0.06, 0.3});
  for (double metric : {1.0, 2.0, 3.0, 4.0, 5.0})
    plateau.step(metric);
  EXPECT_EQ(opt2.lr(0), 0.06);
  EXPECT_EQ(opt2.lr(1), 0.3);
  EXPECT_ERROR_CONTAINS(optim::ReduceLROnPlateau(opt2, 0.5, 0, 1e-4, 0, std::vector<double>{0.1}),
                        "ReduceLROnPlateau: 1 min_lr values for 2 parameter groups");
  EXPECT_ERROR_CONTAINS(optim::ReduceLROnPlateau(opt2, 0.5, 0, 1e-4, 0, std::vector<double>{0.1, NAN}),
                        "min_lr and eps must be finite");
}
