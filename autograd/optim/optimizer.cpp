#include <tapegrad/optim/optimizer.h>

#include <algorithm>
#include <cmath>

#include <tapegrad/autograd/grad_mode.h>
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

void Optimizer::zero_grad(bool set_to_none) {
  for (const Tensor& p : params_) {
    if (!p.grad().defined()) continue;
    if (set_to_none) {
      p.mutable_grad() = Tensor();
    } else {
      autograd::NoGradGuard no_grad;
      p.grad().zero_();
    }
  }
}

void Optimizer::set_lr(double lr) {
  TG_CHECK(lr >= 0, name_, ": the learning rate must be >= 0, got ", lr);
  lr_ = lr;
}

SGD::SGD(std::vector<Tensor> params, SGDOptions options)
    : Optimizer(std::move(params), options.lr, "SGD"), o_(options), buf_(params_.size()) {
  TG_CHECK(o_.momentum >= 0 && o_.weight_decay >= 0, "SGD: momentum and weight_decay must be >= 0, got ",
           o_.momentum, " and ", o_.weight_decay);
  TG_CHECK(!o_.nesterov || (o_.momentum > 0 && o_.dampening == 0),
           "SGD: Nesterov momentum needs momentum > 0 and dampening = 0");
}

void SGD::step() {
  autograd::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    const Tensor& g = p.grad();
    if (!g.defined()) continue;
    Tensor d = o_.weight_decay != 0 ? g.add(p, o_.weight_decay) : g;
    if (o_.momentum != 0) {
      if (!buf_[i].defined()) {
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
}

void Adam::step() {
  autograd::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    TG_CHECK(!g.is_sparse(), name_, ": parameter ", i, " has a sparse gradient; Adam needs dense gradients");
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
