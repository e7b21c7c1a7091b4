#include <tapegrad/optim/optimizer.h>
#include "autograd/nn/grads.h"
#include "tensor/kernels.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <tuple>

#include <string>

#include <tapegrad/autograd/grad_mode.h>
#include <tapegrad/cuda/graph.h>
#include <tapegrad/tensor/error.h>
#include <tapegrad/tensor/ops.h>

namespace tg::optim {

Optimizer::Optimizer(std::vector<Tensor> params, double lr, const char* name)
    : params_(std::move(params)), lr_(lr), name_(name) {
  TG_CHECK(lr >= 0, name_, ": the learning rate must be >= 0, got ", lr);
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    TG_CHECK(p.defined() && p.is_floating_point() && p.is_leaf(), name_, ": parameter ", i,
             " must be a floating-point leaf tensor", p.defined() ? "" : " (it is undefined)");
    for (size_t j = 0; j < i; ++j)
      TG_CHECK(params_[j].impl() != p.impl(), name_, ": parameter ", i, " is the same tensor as parameter ", j);
  }
}

Optimizer::~Optimizer() {
  if (registered_)
    for (const Tensor& p : params_) cuda::unregister_static(p);
}

void Optimizer::zero_grad(bool set_to_none) { nn::detail::zero_grads(params_, set_to_none); }

void Optimizer::set_lr(double lr) {
  TG_CHECK(lr >= 0, name_, ": the learning rate must be >= 0, got ", lr);
  lr_ = lr;
  if (device_lr_.defined()) {
    autograd::NoGradGuard no_grad;
    device_lr_.fill_(lr);  // a kernel on the current stream: no host sync
  }
}

void Optimizer::register_static() {
  for (size_t i = 0; i < params_.size(); ++i)
    cuda::register_static(params_[i], std::string(name_) + " parameter " + std::to_string(i));
  registered_ = true;
}

void Optimizer::init_fused(bool capturable) {
  std::string why;
  const Device dev = params_.empty() ? Device(kCPU) : params_[0].device();
  for (size_t i = 0; i < params_.size() && why.empty(); ++i) {
    const Tensor& p = params_[i];
    if (!p.is_cuda()) why = "parameter " + std::to_string(i) + " is on the CPU";
    else if (p.device() != dev) why = "parameters 0 and " + std::to_string(i) + " are on different devices";
    else if (p.dtype() != kFloat32 && p.dtype() != kFloat64)
      why = "parameter " + std::to_string(i) + " is " + std::string(to_string(p.dtype()));
    else if (!p.is_contiguous()) why = "parameter " + std::to_string(i) + " is not contiguous";
  }
  if (params_.empty()) why = "there are no parameters";
  if (why.empty() && !kernels::backend(dev, name_).multi_tensor_adam) why = "the backend has no multi-tensor update";
  TG_CHECK(!capturable || why.empty(), name_, ": capturable needs float32/float64 contiguous parameters on "
           "one CUDA device (the multi-tensor update), but ", why);
  if (!why.empty()) return;
  fused_ = true;
  auto opt = TensorOptions().dtype(kFloat64).device(dev);
  device_steps_ = tg::zeros({int64_t(params_.size())}, opt);
  device_lr_ = tg::full({}, lr_, opt);
  if (capturable) register_static();
}

std::vector<size_t> Optimizer::with_grads(bool dense_only) const {
  std::vector<size_t> present;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& g = params_[i].grad();
    if (!g.defined()) continue;
    TG_CHECK(!dense_only || !g.is_sparse(), name_, ": parameter ", i, " has a sparse gradient; ", name_,
             " needs dense gradients");
    present.push_back(i);
  }
  return present;
}

void Optimizer::increment_device_steps(const std::vector<size_t>& present) {
  if (present.size() == params_.size()) {
    device_steps_.add_(1.0);
    return;
  }
  for (size_t i : present) device_steps_.narrow(0, int64_t(i), 1).add_(1.0);
}

void Optimizer::check_capturable_step() const {
  if (fused_ || params_.empty() || !params_[0].is_cuda()) return;
  if (cuda::is_current_stream_capturing())
    TG_ERROR(name_, ": step() under CUDA graph capture needs the multi-tensor update (float32/float64 "
             "contiguous parameters on one CUDA device); these parameters do not allow it, and a "
             "per-tensor step would bake the step count and learning rate into the graph");
}

namespace {
// The fused update's lists for the parameters of `present` of one dtype.
kernels::TensorLists lists_of(const std::vector<Tensor>& params, const std::vector<size_t>& present, ScalarType dt,
                              const std::vector<Tensor>* s1, const std::vector<Tensor>* s2,
                              const std::vector<Tensor>* s3) {
  kernels::TensorLists l;
  for (size_t i : present) {
    if (params[i].dtype() != dt) continue;
    l.param.push_back(params[i]);
    l.grad.push_back(params[i].grad().contiguous());
    if (s1) l.state1.push_back((*s1)[i]);
    if (s2) l.state2.push_back((*s2)[i]);
    if (s3) l.state3.push_back((*s3)[i]);
    l.step_index.push_back(int64_t(i));
  }
  return l;
}

// Creates the state tensors of parameter i that are missing (zeros); under
// capture that would put them in the graph's pool and zero them on every
// replay, so there it is an error.
void ensure_state(const char* name, const Tensor& p, size_t i, std::initializer_list<Tensor*> state) {
  for (Tensor* t : state) {
    if (t->defined()) continue;
    TG_CHECK(!cuda::is_current_stream_capturing(), name, ": parameter ", i, " has no optimizer state yet, and "
             "creating it under CUDA graph capture would reset it on every replay; construct the optimizer "
             "with capturable = true (the state is made up front), or run one step before capturing");
    *t = tg::zeros_like(p);
  }
}
}  // namespace

SGD::SGD(std::vector<Tensor> params, SGDOptions options)
    : Optimizer(std::move(params), options.lr, "SGD"), o_(options), buf_(params_.size()), t_(params_.size(), 0) {
  TG_CHECK(o_.momentum >= 0 && o_.weight_decay >= 0, "SGD: momentum and weight_decay must be >= 0, got ",
           o_.momentum, " and ", o_.weight_decay);
  TG_CHECK(!o_.nesterov || (o_.momentum > 0 && o_.dampening == 0),
           "SGD: Nesterov momentum needs momentum > 0 and dampening = 0");
  init_fused(o_.capturable);
  if (o_.capturable && o_.momentum != 0)
    for (size_t i = 0; i < params_.size(); ++i) buf_[i] = tg::zeros_like(params_[i]);
}

void SGD::step() {
  autograd::NoGradGuard no_grad;
  check_capturable_step();
  const std::vector<size_t> present = with_grads(fused_);
  for (size_t i : present) ++t_[i];
  if (fused_) {
    if (!present.empty()) {
      if (o_.momentum != 0)
        for (size_t i : present) ensure_state(name_, params_[i], i, {&buf_[i]});
      increment_device_steps(present);
      const kernels::SGDUpdate u{o_.momentum, o_.dampening, o_.weight_decay, o_.nesterov};
      const auto& be = kernels::backend(params_[0].device(), name_);
      for (ScalarType dt : {kFloat32, kFloat64}) {
        kernels::TensorLists l = lists_of(params_, present, dt, o_.momentum != 0 ? &buf_ : nullptr, nullptr, nullptr);
        if (!l.param.empty()) be.multi_tensor_sgd(l, device_steps_, device_lr_, u);
      }
    }
    ++steps_;
    return;
  }
  for (size_t i : present) {
    const Tensor& p = params_[i];
    const Tensor& g = p.grad();
    Tensor d = o_.weight_decay != 0 ? g.add(p, o_.weight_decay) : g;
    if (o_.momentum != 0) {
      if (t_[i] == 1 || !buf_[i].defined()) {
        buf_[i] = d.clone();
      } else {
        buf_[i].mul_(o_.momentum);
        buf_[i].add_(d, 1 - o_.dampening);
      }
      d = o_.nesterov ? d.add(buf_[i], o_.momentum) : buf_[i];
    }
    p.add_(d, -lr_);
  }
  ++steps_;
}

Adam::Adam(std::vector<Tensor> params, AdamOptions options) : Adam(std::move(params), options, false, "Adam") {}

Adam::Adam(std::vector<Tensor> params, AdamOptions options, bool decoupled, const char* name)
    : Optimizer(std::move(params), options.lr, name),
      o_(options),
      decoupled_(decoupled),
      m_(params_.size()),
      v_(params_.size()),
      vmax_(params_.size()),
      t_(params_.size(), 0) {
  TG_CHECK(o_.beta1 >= 0 && o_.beta1 < 1 && o_.beta2 >= 0 && o_.beta2 < 1, name_,
           ": betas must be in [0, 1), got ", o_.beta1, " and ", o_.beta2);
  TG_CHECK(o_.eps >= 0 && o_.weight_decay >= 0, name_, ": eps and weight_decay must be >= 0");
  init_fused(o_.capturable);
  if (o_.capturable)
    for (size_t i = 0; i < params_.size(); ++i) {
      m_[i] = tg::zeros_like(params_[i]);
      v_[i] = tg::zeros_like(params_[i]);
      if (o_.amsgrad) vmax_[i] = tg::zeros_like(params_[i]);
    }
}

void Adam::step() {
  autograd::NoGradGuard no_grad;
  check_capturable_step();
  const std::vector<size_t> present = with_grads(true);
  if (fused_) {
    if (!present.empty()) {
      for (size_t i : present) {
        ensure_state(name_, params_[i], i, {&m_[i], &v_[i]});
        if (o_.amsgrad) ensure_state(name_, params_[i], i, {&vmax_[i]});
        ++t_[i];
      }
      increment_device_steps(present);
      const kernels::AdamUpdate u{o_.beta1, o_.beta2, o_.eps, o_.weight_decay, o_.amsgrad, decoupled_};
      const auto& be = kernels::backend(params_[0].device(), name_);
      for (ScalarType dt : {kFloat32, kFloat64}) {
        kernels::TensorLists l = lists_of(params_, present, dt, &m_, &v_, o_.amsgrad ? &vmax_ : nullptr);
        if (!l.param.empty()) be.multi_tensor_adam(l, device_steps_, device_lr_, u);
      }
    }
    ++steps_;
    return;
  }
  for (size_t i : present) {
    const Tensor& p = params_[i];
    Tensor g = p.grad();
    if (!m_[i].defined()) {
      m_[i] = tg::zeros_like(p);
      v_[i] = tg::zeros_like(p);
      if (o_.amsgrad) vmax_[i] = tg::zeros_like(p);
    }
    const int64_t t = ++t_[i];
    if (o_.weight_decay != 0) {
      if (decoupled_) p.mul_(1 - lr_ * o_.weight_decay);
      else g = g.add(p, o_.weight_decay);
    }
    m_[i].mul_(o_.beta1);
    m_[i].add_(g, 1 - o_.beta1);
    v_[i].mul_(o_.beta2);
    v_[i].add_(g * g, 1 - o_.beta2);
    const double bc1 = 1 - std::pow(o_.beta1, double(t)), bc2 = 1 - std::pow(o_.beta2, double(t));
    Tensor second = v_[i];
    if (o_.amsgrad) {
      vmax_[i].copy_(tg::maximum(vmax_[i], v_[i]));
      second = vmax_[i];
    }
    Tensor denom = tg::sqrt(second) / std::sqrt(bc2) + o_.eps;
    p.add_(m_[i] / denom, -lr_ / bc1);
  }
  ++steps_;
}

AdamOptions AdamW::AdamWDefaults() {
  AdamOptions o;
  o.weight_decay = 1e-2;
  return o;
}

AdamW::AdamW(std::vector<Tensor> params, AdamOptions options) : Adam(std::move(params), options, true, "AdamW") {}

// ---- L-BFGS ---------------------------------------------------------------------------

namespace {

// The parameters as one flat vector: gather the gradients, move along a
// direction, save and restore the values.
struct Flat {
  const std::vector<Tensor>& ps;
  Tensor grad() const {
    std::vector<Tensor> parts;
    for (const Tensor& p : ps)
      parts.push_back(p.grad().defined() ? p.grad().reshape({-1}) : tg::zeros({p.numel()}, p.options()));
    return tg::cat(parts, 0);
  }
  Tensor values() const {
    std::vector<Tensor> parts;
    for (const Tensor& p : ps) parts.push_back(p.detach().reshape({-1}));
    return tg::cat(parts, 0);
  }
  void add(double t, const Tensor& d) const {
    int64_t at = 0;
    for (const Tensor& p : ps) {
      p.add_(d.narrow(0, at, p.numel()).view(p.sizes()), t);
      at += p.numel();
    }
  }
  void set(const Tensor& x) const {
    int64_t at = 0;
    for (const Tensor& p : ps) {
      p.copy_(x.narrow(0, at, p.numel()).view(p.sizes()));
      at += p.numel();
    }
  }
};

double vdot(const Tensor& a, const Tensor& b) { return (a * b).sum().item<double>(); }
double max_abs(const Tensor& a) { return a.numel() ? tg::amax(tg::abs(a)).item<double>() : 0.0; }

// The minimizer of the cubic through (x1, f1, g1) and (x2, f2, g2), kept in
// [lo, hi]; the midpoint when the cubic has no minimum.
double cubic_min(double x1, double f1, double g1, double x2, double f2, double g2, double lo, double hi) {
  const double d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2);
  const double disc = d1 * d1 - g1 * g2;
  if (disc < 0) return (lo + hi) / 2;
  const double d2 = std::sqrt(disc);
  const double m = x1 <= x2 ? x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
                            : x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2));
  return std::min(std::max(m, lo), hi);
}

struct Trial {
  double t, f, gtd;
  Tensor g;
};

// A step length along d satisfying the strong Wolfe conditions (sufficient
// decrease c1, curvature c2): bracketing by cubic extrapolation, then
// zooming by cubic interpolation (Nocedal and Wright, algorithms 3.5 and
// 3.6). eval(t) returns the loss and flat gradient at x + t d.
Trial strong_wolfe(const std::function<std::pair<double, Tensor>(double)>& eval, double t, const Tensor& d,
                   double f, const Tensor& g, double gtd, double tolerance_change, int64_t* evals) {
  const double c1 = 1e-4, c2 = 0.9;
  const int max_ls = 25;
  const double d_norm = max_abs(d);
  auto at = [&](double s) {
    auto [fs, gs] = eval(s);
    ++*evals;
    return Trial{s, fs, vdot(gs, d), gs};
  };
  Trial prev{0, f, gtd, g}, cur = at(t);
  std::vector<Trial> br;  // the bracket: one point (done) or two
  bool done = false;
  int ls = 0;
  while (ls < max_ls) {
    if (cur.f > f + c1 * cur.t * gtd || (ls > 1 && cur.f >= prev.f)) {
      br = {prev, cur};
      break;
    }
    if (std::abs(cur.gtd) <= -c2 * gtd) {
      br = {cur};
      done = true;
      break;
    }
    if (cur.gtd >= 0) {
      br = {prev, cur};
      break;
    }
    const double next = cubic_min(prev.t, prev.f, prev.gtd, cur.t, cur.f, cur.gtd,
                                  cur.t + 0.01 * (cur.t - prev.t), cur.t * 10);
    prev = cur;
    cur = at(next);
    ++ls;
  }
  if (ls == max_ls) br = {Trial{0, f, gtd, g}, cur};
  if (br.size() == 1) return br[0];
  size_t lo = br[0].f <= br[1].f ? 0 : 1, hi = 1 - lo;
  bool insufficient = false;
  while (!done && ls < max_ls) {
    if (std::abs(br[1].t - br[0].t) * d_norm < tolerance_change) break;
    double s = cubic_min(br[0].t, br[0].f, br[0].gtd, br[1].t, br[1].f, br[1].gtd, std::min(br[0].t, br[1].t),
                         std::max(br[0].t, br[1].t));
    // Keep trials away from the bracket's ends (progress guard).
    const double bmax = std::max(br[0].t, br[1].t), bmin = std::min(br[0].t, br[1].t), eps = 0.1 * (bmax - bmin);
    if (std::min(bmax - s, s - bmin) < eps) {
      if (insufficient || s >= bmax || s <= bmin) {
        s = std::abs(s - bmax) < std::abs(s - bmin) ? bmax - eps : bmin + eps;
        insufficient = false;
      } else {
        insufficient = true;
      }
    } else {
      insufficient = false;
    }
    Trial n = at(s);
    ++ls;
    if (n.f > f + c1 * n.t * gtd || n.f >= br[lo].f) {
      br[hi] = n;
      lo = br[0].f <= br[1].f ? 0 : 1;
      hi = 1 - lo;
    } else {
      if (std::abs(n.gtd) <= -c2 * gtd) done = true;
      else if (n.gtd * (br[hi].t - br[lo].t) >= 0) br[hi] = br[lo];
      br[lo] = n;
    }
  }
  return br[lo];
}

}  // namespace

LBFGS::LBFGS(std::vector<Tensor> params, LBFGSOptions options)
    : Optimizer(std::move(params), options.lr, "LBFGS"), o_(options) {
  TG_CHECK(!params_.empty(), "LBFGS: got no parameters");
  for (size_t i = 1; i < params_.size(); ++i)
    TG_CHECK(params_[i].dtype() == params_[0].dtype() && params_[i].device() == params_[0].device(),
             "LBFGS: every parameter must have one dtype and device (they are one vector); parameter ", i,
             " is ", params_[i].dtype(), " on ", params_[i].device(), ", parameter 0 ", params_[0].dtype(),
             " on ", params_[0].device());
  TG_CHECK(o_.max_iter > 0 && o_.history_size > 0, "LBFGS: max_iter and history_size must be positive");
  if (o_.max_eval <= 0) o_.max_eval = o_.max_iter * 5 / 4;
}

void LBFGS::step() {
  TG_ERROR("LBFGS: step() needs a closure that re-evaluates the loss: call step(closure), with a closure "
           "that zeroes the gradients, computes the loss, calls backward and returns the loss");
}

double LBFGS::step(const std::function<Tensor()>& closure) {
  TG_CHECK(bool(closure), "LBFGS: step(closure) got an empty closure");
  const Flat flat{params_};
  auto evaluate = [&]() {
    Tensor loss;
    {
      autograd::EnableGradGuard grad_on;
      loss = closure();
    }
    TG_CHECK(loss.defined() && loss.numel() == 1, "LBFGS: the closure must return the loss (one element)");
    ++evals_;
    autograd::NoGradGuard no_grad;
    return std::make_pair(loss.item<double>(), flat.grad());
  };
  auto [loss, g] = evaluate();
  const double first_loss = loss;
  int64_t evals = 1;
  autograd::NoGradGuard no_grad;
  if (max_abs(g) <= o_.tolerance_grad) return first_loss;
  for (int64_t n = 1; n <= o_.max_iter; ++n) {
    ++iter_;
    if (iter_ == 1) {
      d_ = -g;
      old_y_.clear();
      old_s_.clear();
      ro_.clear();
      h_diag_ = 1;
    } else {
      // The newest curvature pair, kept when it is positive; then the
      // two-loop recursion for d = -H g.
      Tensor y = g - prev_g_, s = d_ * t_;
      const double ys = vdot(y, s);
      if (ys > 1e-10) {
        if (int64_t(old_y_.size()) == o_.history_size) {
          old_y_.erase(old_y_.begin());
          old_s_.erase(old_s_.begin());
          ro_.erase(ro_.begin());
        }
        old_y_.push_back(y);
        old_s_.push_back(s);
        ro_.push_back(1 / ys);
        h_diag_ = ys / vdot(y, y);
      }
      const size_t k = old_y_.size();
      std::vector<double> al(k);
      Tensor q = -g;
      for (size_t i = k; i-- > 0;) {
        al[i] = vdot(old_s_[i], q) * ro_[i];
        q.add_(old_y_[i], -al[i]);
      }
      Tensor r = q * h_diag_;
      for (size_t i = 0; i < k; ++i) {
        const double be = vdot(old_y_[i], r) * ro_[i];
        r.add_(old_s_[i], al[i] - be);
      }
      d_ = r;
    }
    prev_g_ = g.clone();
    prev_loss_ = loss;
    t_ = iter_ == 1 ? std::min(1.0, 1.0 / tg::sum(tg::abs(g)).item<double>()) * lr_ : lr_;
    const double gtd = vdot(g, d_);
    if (gtd > -o_.tolerance_change) break;  // not a descent direction any more
    int64_t ls_evals = 0;
    bool converged = false;
    if (o_.strong_wolfe) {
      const Tensor x0 = flat.values().clone();
      auto along = [&](double s) {
        flat.add(s, d_);
        auto r = evaluate();
        flat.set(x0);
        return r;
      };
      Trial best = strong_wolfe(along, t_, d_, loss, g, gtd, o_.tolerance_change, &ls_evals);
      t_ = best.t;
      loss = best.f;
      g = best.g;
      flat.add(t_, d_);
      converged = max_abs(g) <= o_.tolerance_grad;
    } else {
      flat.add(t_, d_);
      if (n != o_.max_iter) {
        std::tie(loss, g) = evaluate();
        converged = max_abs(g) <= o_.tolerance_grad;
        ls_evals = 1;
      }
    }
    evals += ls_evals;
    if (n == o_.max_iter || evals >= o_.max_eval || converged) break;
    if (max_abs(d_) * std::abs(t_) <= o_.tolerance_change) break;
    if (std::abs(loss - prev_loss_) < o_.tolerance_change) break;
  }
  ++steps_;
  return first_loss;
}

StepLR::StepLR(Optimizer& opt, int64_t step_size, double gamma)
    : opt_(opt), base_(opt.lr()), step_size_(step_size), gamma_(gamma) {
  TG_CHECK(step_size > 0, "StepLR: step_size must be positive, got ", step_size);
}

void StepLR::step() {
  ++epoch_;
  opt_.set_lr(base_ * std::pow(gamma_, double(epoch_ / step_size_)));
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& opt, int64_t t_max, double eta_min)
    : opt_(opt), base_(opt.lr()), eta_min_(eta_min), t_max_(t_max) {
  TG_CHECK(t_max > 0, "CosineAnnealingLR: t_max must be positive, got ", t_max);
}

void CosineAnnealingLR::step() {
  ++epoch_;
  const double pi = std::acos(-1.0);
  opt_.set_lr(eta_min_ + (base_ - eta_min_) * (1 + std::cos(pi * double(epoch_) / double(t_max_))) / 2);
}

ReduceLROnPlateau::ReduceLROnPlateau(Optimizer& opt, double factor, int64_t patience, double threshold,
                                     int64_t cooldown, double min_lr)
    : opt_(opt), factor_(factor), threshold_(threshold), min_lr_(min_lr), best_(0), patience_(patience),
      cooldown_(cooldown) {
  TG_CHECK(factor > 0 && factor < 1, "ReduceLROnPlateau: factor must be in (0, 1), got ", factor);
  TG_CHECK(patience >= 0 && cooldown >= 0, "ReduceLROnPlateau: patience and cooldown must be >= 0");
}

void ReduceLROnPlateau::step(double metric) {
  if (!has_best_ || metric < best_ * (1 - threshold_)) {
    best_ = metric;
    has_best_ = true;
    bad_epochs_ = 0;
  } else {
    ++bad_epochs_;
  }
  if (cooldown_left_ > 0) {
    --cooldown_left_;
    bad_epochs_ = 0;
  }
  if (bad_epochs_ > patience_) {
    opt_.set_lr(std::max(opt_.lr() * factor_, min_lr_));
    cooldown_left_ = cooldown_;
    bad_epochs_ = 0;
  }
}

}  // namespace tg::optim
