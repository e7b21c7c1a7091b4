// Learning-rate schedulers: each moves its optimizer's lr (set_lr) as
// PyTorch's scheduler of the same name.
#include <tapegrad/optim/optimizer.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include <tapegrad/tensor/error.h>
#include <tapegrad/tensor/ops.h>

namespace tg::optim {

LRScheduler::LRScheduler(Optimizer& opt, const char* name) : opt_(opt), name_(name) {
  for (size_t g = 0; g < opt.num_param_groups(); ++g)
    base_.push_back(opt.initial_lr(g));
}

void LRScheduler::check_group(size_t g) const {
  TG_CHECK(g < base_.size(), name_, ": no parameter group ", g, " (it schedules ", base_.size(), ")");
}

double LRScheduler::base(size_t g) const {
  check_group(g);
  return base_[g];
}

void LRScheduler::set_initial_lr(size_t g, double lr) {
  check_group(g);
  base_[g] = lr;
  opt_.groups_[g].initial_lr = lr;
}

void LRScheduler::step() {
  TG_CHECK(epoch_ < std::numeric_limits<int64_t>::max(), name_, ": the epoch ", epoch_,
           " is the largest an int64 holds; it cannot advance (set_epoch to a smaller one)");
  set_epoch(epoch_ + 1);
}

void LRScheduler::set_epoch(int64_t epoch) {
  TG_CHECK(epoch >= 0, name_, ".set_epoch: the epoch must be >= 0, got ", epoch);
  apply(epoch, false);
}

namespace {
// The entry `key` of a scheduler's state: defined, `dim`-dimensional (size
// `n` for one dim) and of a floating or integer dtype; as Float64 on the CPU.
Tensor state_entry(const NamedTensors& state, const std::string& key, int64_t dim, int64_t n, const char* who) {
  const Tensor* found = nullptr;
  int64_t copies = 0;
  for (const auto& kv : state)
    if (kv.first == key) {
      found = &kv.second;
      ++copies;
    }
  TG_CHECK(copies <= 1, who, ".load_state_dict: \"", key, "\" is in the state ", copies,
           " times; pass one state_dict()");
  if (found) {
    const Tensor& v = *found;
    TG_CHECK(v.defined() && v.dim() == dim && (dim == 0 || v.size(0) == n), who, ".load_state_dict: \"", key,
             "\" must be ", dim == 0 ? std::string("a 0-dim tensor") : "a tensor of " + std::to_string(n) + " values",
             v.defined() ? ", got sizes " + shape_str(v.sizes()) : ", got an undefined tensor");
    TG_CHECK(!is_complex(v.dtype()) && v.dtype() != kBool, who, ".load_state_dict: \"", key,
             "\" must be a real number, got ", v.dtype());
    return v.to(Device(kCPU)).to(kFloat64).contiguous();
  }
  std::string keys;
  for (const auto& kv : state)
    keys += (keys.empty() ? "\"" : ", \"") + kv.first + "\"";
  TG_ERROR(who, ".load_state_dict: no \"", key, "\" in the state (it has ", keys.empty() ? "none" : keys,
           "); pass the scheduler's own state_dict()");
}
// A count saved as a double: finite, integral, in [0, 2^53].
int64_t state_count(const Tensor& v, const char* key, const char* who) {
  const double d = v.item<double>();
  TG_CHECK(std::isfinite(d) && d >= 0 && d == std::floor(d) && d <= 9007199254740992.0, who, ".load_state_dict: \"",
           key, "\" must be a whole number in [0, 2^53], got ", d);
  return int64_t(d);
}
}  // namespace

NamedTensors LRScheduler::state_dict() const {
  return {{"last_epoch", tg::full({}, double(epoch_), kInt64)},
          {"base_lrs", tg::tensor(base_, {int64_t(base_.size())}, kFloat64)}};
}

void LRScheduler::load_state_dict(const NamedTensors& state) {
  const int64_t groups = int64_t(base_.size());
  const int64_t epoch = state_count(state_entry(state, "last_epoch", 0, 0, name_), "last_epoch", name_);
  Tensor b = state_entry(state, "base_lrs", 1, groups, name_);
  std::vector<double> base(static_cast<size_t>(groups));
  for (int64_t g = 0; g < groups; ++g) {
    base[size_t(g)] = b.data_ptr<double>()[g];
    TG_CHECK(std::isfinite(base[size_t(g)]) && base[size_t(g)] >= 0, name_, ".load_state_dict: group ", g,
             "'s base rate is ", base[size_t(g)], "; it must be finite and >= 0");
  }
  const std::vector<double> old = base_;
  base_ = base;
  try {
    apply(epoch, false);  // checks every rate before it sets any
  } catch (...) {
    base_ = old;
    throw;
  }
  for (int64_t g = 0; g < groups; ++g)
    opt_.groups_[size_t(g)].initial_lr = base_[size_t(g)];
}

void LRScheduler::apply(int64_t epoch, bool constructing) {
  TG_CHECK(base_.size() == opt_.num_param_groups(), name_, ": the optimizer has ", opt_.num_param_groups(),
           " parameter groups, the scheduler was made for ", base_.size(),
           "; make the scheduler after add_param_group");
  // Every rate and momentum first: a refused epoch changes nothing.
  std::vector<double> lrs(base_.size());
  std::vector<std::optional<double>> moms(base_.size());
  for (size_t g = 0; g < base_.size(); ++g) {
    lrs[g] = lr_at(g, epoch);
    TG_CHECK(std::isfinite(lrs[g]) && lrs[g] >= 0, name_, ": group ", g, "'s rate at epoch ", epoch, " is ", lrs[g],
             "; a learning rate must be finite and >= 0 (check the schedule's arguments and the epoch)");
    moms[g] = momentum_at(g, epoch);
    if (moms[g]) {
      const bool beta = opt_.momentum_is_beta_.value_or(false);
      TG_CHECK(opt_.has_momentum() && std::isfinite(*moms[g]) && *moms[g] >= 0 && (!beta || *moms[g] < 1), name_,
               ": group ", g, "'s momentum at epoch ", epoch, " is ", *moms[g], "; ", opt_.name(),
               !opt_.has_momentum() ? " has no momentum"
               : beta               ? "'s beta1 must be in [0, 1)"
                                    : "'s momentum must be finite and >= 0");
    }
  }
  opt_.claim_rates(token_, name_, constructing);
  epoch_ = epoch;
  for (size_t g = 0; g < base_.size(); ++g) {
    opt_.set_lr(g, lrs[g]);
    if (moms[g]) opt_.set_momentum(g, *moms[g]);
  }
}

StepLR::StepLR(Optimizer& opt, int64_t step_size, double gamma)
    : LRScheduler(opt, "StepLR"), step_size_(step_size), gamma_(gamma) {
  TG_CHECK(step_size > 0, "StepLR: step_size must be positive, got ", step_size);
  apply(0, true);
}
double StepLR::lr_at(size_t g, int64_t e) const { return base(g) * std::pow(gamma_, double(e / step_size_)); }

CosineAnnealingLR::CosineAnnealingLR(Optimizer& opt, int64_t t_max, double eta_min)
    : LRScheduler(opt, "CosineAnnealingLR"), eta_min_(eta_min), t_max_(t_max) {
  TG_CHECK(t_max > 0, "CosineAnnealingLR: t_max must be positive, got ", t_max);
  apply(0, true);
}
double CosineAnnealingLR::lr_at(size_t g, int64_t e) const {
  const double pi = std::acos(-1.0);
  return eta_min_ + (base(g) - eta_min_) * (1 + std::cos(pi * double(e) / double(t_max_))) / 2;
}

LambdaLR::LambdaLR(Optimizer& opt, std::function<double(int64_t)> lambda)
    : LambdaLR(opt, std::vector<std::function<double(int64_t)>>(opt.num_param_groups(), lambda)) {}
LambdaLR::LambdaLR(Optimizer& opt, std::vector<std::function<double(int64_t)>> lambdas)
    : LRScheduler(opt, "LambdaLR"), lambdas_(std::move(lambdas)) {
  TG_CHECK(lambdas_.size() == num_groups(), "LambdaLR: ", lambdas_.size(), " lambdas for ", num_groups(),
           " parameter groups; give one per group (or a single lambda for all)");
  for (size_t i = 0; i < lambdas_.size(); ++i)
    TG_CHECK(lambdas_[i] != nullptr, "LambdaLR: lambda ", i, " is empty");
  apply(0, true);
}
double LambdaLR::lr_at(size_t g, int64_t e) const {
  const double b = base(g);  // checks g first
  return b * lambdas_[g](e);
}

ExponentialLR::ExponentialLR(Optimizer& opt, double gamma) : LRScheduler(opt, "ExponentialLR"), gamma_(gamma) {
  TG_CHECK(gamma > 0, "ExponentialLR: gamma must be > 0, got ", gamma);
  apply(0, true);
}
double ExponentialLR::lr_at(size_t g, int64_t e) const { return base(g) * std::pow(gamma_, double(e)); }

LinearLR::LinearLR(Optimizer& opt, double start_factor, double end_factor, int64_t total_iters)
    : LRScheduler(opt, "LinearLR"), start_(start_factor), end_(end_factor), total_(total_iters) {
  TG_CHECK(start_factor > 0 && start_factor <= 1 && end_factor >= 0 && end_factor <= 1,
           "LinearLR: start_factor must be in (0, 1] and end_factor in [0, 1], got ", start_factor, " and ",
           end_factor);
  TG_CHECK(total_iters > 0, "LinearLR: total_iters must be positive, got ", total_iters);
  apply(0, true);
}
double LinearLR::lr_at(size_t g, int64_t e) const {
  const double f = start_ + (end_ - start_) * double(std::min(e, total_)) / double(total_);
  return base(g) * f;
}

OneCycleLR::OneCycleLR(Optimizer& opt, double max_lr, int64_t total_steps, double pct_start, bool cos_anneal,
                       double div_factor, double final_div_factor, bool three_phase, bool cycle_momentum,
                       double base_momentum, double max_momentum)
    : OneCycleLR(opt, std::vector<double>(opt.num_param_groups(), max_lr), total_steps, pct_start, cos_anneal,
                 div_factor, final_div_factor, three_phase, cycle_momentum, base_momentum, max_momentum) {}

OneCycleLR::OneCycleLR(Optimizer& opt, std::vector<double> max_lrs, int64_t total_steps, double pct_start,
                       bool cos_anneal, double div_factor, double final_div_factor, bool three_phase,
                       bool cycle_momentum, double base_momentum, double max_momentum)
    : LRScheduler(opt, "OneCycleLR"),
      total_(total_steps),
      cos_(cos_anneal),
      max_(std::move(max_lrs)),
      div_(div_factor),
      final_div_(final_div_factor),
      cycle_momentum_(cycle_momentum),
      max_momentum_(max_momentum) {
  TG_CHECK(total_steps > 0, "OneCycleLR: total_steps must be positive, got ", total_steps);
  TG_CHECK(pct_start > 0 && pct_start < 1, "OneCycleLR: pct_start must be in (0, 1), got ", pct_start);
  TG_CHECK(max_.size() == base_.size(), "OneCycleLR: got ", max_.size(), " max_lr values for ", base_.size(),
           " parameter groups");
  for (double m : max_)
    TG_CHECK(m > 0, "OneCycleLR: max_lr must be > 0, got ", m);
  TG_CHECK(div_factor > 0 && final_div_factor > 0, "OneCycleLR: div_factor and final_div_factor must be > 0");
  TG_CHECK(!cycle_momentum || opt.has_momentum(), "OneCycleLR: cycle_momentum needs an optimizer with a momentum ",
           "(SGD or RMSprop built with momentum > 0) or beta1 (Adam, AdamW, Adamax, NAdam, RAdam); ", opt.name(),
           " has none: pass cycle_momentum = false");
  TG_CHECK(!cycle_momentum || (base_momentum >= 0 && base_momentum <= max_momentum),
           "OneCycleLR: need 0 <= ", "base_momentum <= max_momentum, got ", base_momentum, " and ", max_momentum);
  const double up = pct_start * double(total_steps) - 1, low = 1 / div_factor, end = low / final_div_factor;
  if (three_phase) {
    phase_end_ = {up, 2 * pct_start * double(total_steps) - 2, double(total_steps) - 1};
    lr_end_ = {1.0, low, end};
    mom_end_ = {base_momentum, max_momentum, max_momentum};
  } else {
    phase_end_ = {up, double(total_steps) - 1};
    lr_end_ = {1.0, end};
    mom_end_ = {base_momentum, max_momentum};
  }
  double start = 0;  // each phase from the end of the one before: a phase of no length divides by 0
  for (size_t k = 0; k < phase_end_.size(); ++k) {
    TG_CHECK(phase_end_[k] > start, "OneCycleLR: phase ", k + 1, " of ", phase_end_.size(), " would span steps ", start,
             " to ", phase_end_[k], ", no length (total_steps = ", total_steps, ", pct_start = ", pct_start,
             ", pct_start * total_steps = ", pct_start * double(total_steps),
             "); raise total_steps or move pct_start so that every phase spans at least one step");
    start = phase_end_[k];
  }
  apply(0, true);
  // PyTorch's OneCycleLR sets each group's initial_lr to max_lr / div_factor
  // (a scheduler made after it, e.g. SequentialLR's next child, starts there).
  for (size_t g = 0; g < base_.size(); ++g)
    set_initial_lr(g, max_[g] * low);
}

double OneCycleLR::along(int64_t e, double start, const std::vector<double>& ends) const {
  TG_CHECK(e <= total_, "OneCycleLR: stepped ", e, " times, past total_steps = ", total_,
           "; make total_steps the number of batches you train");
  double start_step = 0;
  for (size_t k = 0; k < phase_end_.size(); ++k) {
    const double end_step = phase_end_[k], end_value = ends[k];
    if (double(e) <= end_step || k + 1 == phase_end_.size()) {
      const double pct = (double(e) - start_step) / (end_step - start_step);
      if (cos_) return end_value + (start - end_value) / 2 * (std::cos(std::acos(-1.0) * pct) + 1);
      // At e = total_steps (after the last of the total_steps step() calls)
      // the last phase has ended: a linear phase stays at its end value
      // (PyTorch's extrapolates past it, below zero for small final rates;
      // the cosine, as PyTorch's, turns back symmetrically).
      return (end_value - start) * std::min(pct, 1.0) + start;
    }
    start_step = end_step;
    start = end_value;
  }
  return start;
}

double OneCycleLR::lr_at(size_t g, int64_t e) const {
  check_group(g);
  std::vector<double> ends(lr_end_.size());
  for (size_t k = 0; k < ends.size(); ++k)
    ends[k] = max_[g] * lr_end_[k];
  return along(e, max_[g] / div_, ends);
}

std::optional<double> OneCycleLR::momentum_at(size_t g, int64_t e) const {
  check_group(g);
  if (!cycle_momentum_) return std::nullopt;
  return along(e, max_momentum_, mom_end_);
}

SequentialLR::SequentialLR(Optimizer& opt, std::vector<std::shared_ptr<LRScheduler>> schedulers,
                           std::vector<int64_t> milestones)
    : LRScheduler(opt, "SequentialLR"), schedulers_(std::move(schedulers)), milestones_(std::move(milestones)) {
  TG_CHECK(!schedulers_.empty() && schedulers_.size() == milestones_.size() + 1, "SequentialLR: got ",
           schedulers_.size(), " schedulers for ", milestones_.size(), " milestones; give one more scheduler");
  for (size_t k = 0; k < milestones_.size(); ++k)
    TG_CHECK(milestones_[k] > (k ? milestones_[k - 1] : 0), "SequentialLR: milestones must increase from > 0, got ",
             milestones_[k], " at ", k);
  // The children's rates are read per group: each must schedule this optimizer, with its groups.
  for (size_t k = 0; k < schedulers_.size(); ++k) {
    const auto& s = schedulers_[k];
    TG_CHECK(s != nullptr, "SequentialLR: scheduler ", k, " is null");
    TG_CHECK(&s->optimizer() == &opt, "SequentialLR: scheduler ", k, " (", s->name(), ") schedules another optimizer (",
             s->optimizer().name(), " at ", static_cast<const void*>(&s->optimizer()), ", not ", opt.name(), " at ",
             static_cast<const void*>(&opt), "); make every scheduler for the optimizer given to SequentialLR");
    TG_CHECK(s->num_groups() == base_.size(), "SequentialLR: scheduler ", k, " (", s->name(), ") was made for ",
             s->num_groups(), " parameter groups, the optimizer has ", base_.size(),
             "; make the schedulers after add_param_group");
  }
  apply(0, true);
}
std::pair<size_t, int64_t> SequentialLR::current(int64_t e) const {
  size_t k = 0;
  while (k < milestones_.size() && e >= milestones_[k])
    ++k;
  return {k, e - (k ? milestones_[k - 1] : 0)};
}
double SequentialLR::lr_at(size_t g, int64_t e) const {
  const auto [k, local] = current(e);
  return schedulers_[k]->lr_at(g, local);
}
std::optional<double> SequentialLR::momentum_at(size_t g, int64_t e) const {
  const auto [k, local] = current(e);
  return schedulers_[k]->momentum_at(g, local);
}

ReduceLROnPlateau::ReduceLROnPlateau(Optimizer& opt, double factor, int64_t patience, double threshold,
                                     int64_t cooldown, double min_lr, const std::string& mode,
                                     const std::string& threshold_mode, double eps)
    : ReduceLROnPlateau(opt, factor, patience, threshold, cooldown, std::vector<double>(opt.num_param_groups(), min_lr),
                        mode, threshold_mode, eps) {}
ReduceLROnPlateau::ReduceLROnPlateau(Optimizer& opt, double factor, int64_t patience, double threshold,
                                     int64_t cooldown, std::vector<double> min_lrs, const std::string& mode,
                                     const std::string& threshold_mode, double eps)
    : opt_(opt),
      factor_(factor),
      threshold_(threshold),
      eps_(eps),
      best_(mode == "max" ? -INFINITY : INFINITY),  // PyTorch's start: the first finite metric improves on it
      min_lrs_(std::move(min_lrs)),
      max_mode_(mode == "max"),
      abs_threshold_(threshold_mode == "abs"),
      patience_(patience),
      cooldown_(cooldown) {
  TG_CHECK(min_lrs_.size() == opt.num_param_groups(), "ReduceLROnPlateau: ", min_lrs_.size(), " min_lr values for ",
           opt.num_param_groups(), " parameter groups; give one per group (or one number for all)");
  // The first min_lr that is not finite and >= 0 (0 when all are) goes through the check below.
  const auto bad_min_lr =
      std::find_if(min_lrs_.begin(), min_lrs_.end(), [](double m) { return !(std::isfinite(m) && m >= 0); });
  const double min_lr = bad_min_lr == min_lrs_.end() ? 0.0 : *bad_min_lr;
  TG_CHECK(factor > 0 && factor < 1, "ReduceLROnPlateau: factor must be in (0, 1), got ", factor);
  TG_CHECK(patience >= 0 && cooldown >= 0, "ReduceLROnPlateau: patience and cooldown must be >= 0, got ", patience,
           " and ", cooldown);
  TG_CHECK(mode == "min" || mode == "max", "ReduceLROnPlateau: mode must be \"min\" or \"max\", got \"", mode, "\"");
  TG_CHECK(threshold_mode == "rel" || threshold_mode == "abs",
           "ReduceLROnPlateau: threshold_mode must be \"rel\" or \"abs\", got \"", threshold_mode, "\"");
  TG_CHECK(std::isfinite(threshold) && threshold >= 0 && std::isfinite(min_lr) && min_lr >= 0 && std::isfinite(eps) &&
               eps >= 0,
           "ReduceLROnPlateau: threshold, min_lr and eps must be finite and >= 0, got ", threshold, ", ", min_lr,
           " and ", eps);
  opt.claim_rates(token_, "ReduceLROnPlateau", true);
}

NamedTensors ReduceLROnPlateau::state_dict() const {
  return {{"best", tg::full({}, best_, kFloat64)},
          {"num_bad_epochs", tg::full({}, double(bad_epochs_), kInt64)},
          {"cooldown_counter", tg::full({}, double(cooldown_left_), kInt64)}};
}

void ReduceLROnPlateau::load_state_dict(const NamedTensors& state) {
  const char* who = "ReduceLROnPlateau";
  const double best = state_entry(state, "best", 0, 0, who).item<double>();
  TG_CHECK(!std::isnan(best), who, ".load_state_dict: \"best\" is NaN");
  const int64_t bad = state_count(state_entry(state, "num_bad_epochs", 0, 0, who), "num_bad_epochs", who);
  const int64_t cool = state_count(state_entry(state, "cooldown_counter", 0, 0, who), "cooldown_counter", who);
  TG_CHECK(cool <= cooldown_, who, ".load_state_dict: \"cooldown_counter\" is ", cool,
           ", more than this scheduler's cooldown (", cooldown_, ")");
  best_ = best;
  bad_epochs_ = bad;
  cooldown_left_ = cool;
}

// PyTorch's is_better: a NaN metric is never better.
bool ReduceLROnPlateau::better(double a) const {
  if (max_mode_) return abs_threshold_ ? a > best_ + threshold_ : a > best_ * (1 + threshold_);
  return abs_threshold_ ? a < best_ - threshold_ : a < best_ * (1 - threshold_);
}

void ReduceLROnPlateau::step(double metric) {
  // Claimed first, before anything changes (a refused step leaves the scheduler as it was).
  opt_.claim_rates(token_, "ReduceLROnPlateau", false);
  if (better(metric)) {
    best_ = metric;
    bad_epochs_ = 0;
  } else {
    ++bad_epochs_;
  }
  if (cooldown_left_ > 0) {
    --cooldown_left_;
    bad_epochs_ = 0;
  }
  if (bad_epochs_ > patience_) {
    for (size_t g = 0; g < opt_.num_param_groups(); ++g) {  // each group's own rate
      const double old_lr = opt_.lr(g), new_lr = std::max(old_lr * factor_, min_lrs_[g]);
      if (old_lr - new_lr > eps_) opt_.set_lr(g, new_lr);
    }
    cooldown_left_ = cooldown_;
    bad_epochs_ = 0;
  }
}

}  // namespace tg::optim
