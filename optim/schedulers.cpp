// Learning-rate schedulers: each moves its optimizer's lr (set_lr) as
// PyTorch's scheduler of the same name.
#include <tapegrad/optim/optimizer.h>

#include <cmath>

#include <tapegrad/tensor/error.h>

namespace tg::optim {

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
    : opt_(opt),
      factor_(factor),
      threshold_(threshold),
      min_lr_(min_lr),
      best_(0),
      patience_(patience),
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
