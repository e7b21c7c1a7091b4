// RMSprop, Adagrad, Adamax, NAdam and RAdam: torch.optim's single-tensor
// update rules, written with tensor ops (any device, any float dtype).
#include <cmath>
#include <map>

#include <tapegrad/autograd/grad_mode.h>
#include <tapegrad/optim/optimizer.h>
#include <tapegrad/tensor/error.h>
#include <tapegrad/tensor/ops.h>

#include "optim/kernels.h"

namespace tg::optim {

namespace {
std::vector<ParamGroup> one_group(std::vector<Tensor> params) { return {ParamGroup{std::move(params)}}; }
const char* rule_name(Adaptive::Rule r) {
  switch (r) {
    case Adaptive::Rule::kRMSprop: return "RMSprop";
    case Adaptive::Rule::kAdagrad: return "Adagrad";
    case Adaptive::Rule::kAdamax: return "Adamax";
    case Adaptive::Rule::kNAdam: return "NAdam";
    case Adaptive::Rule::kRAdam: return "RAdam";
  }
  return "?";
}
// Adam's moments: m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2.
void adam_moments(const Tensor& m, const Tensor& v, const Tensor& g, double b1, double b2) {
  m.mul_(b1);
  m.add_(g, 1 - b1);
  v.mul_(b2);
  v.add_(g * g, 1 - b2);
}
// NAdam's momentum factor of step t (optim/kernels.h).
double nadam_mu(double beta1, const AdaptiveOptions& o, int64_t t) {
  return detail::nadam_mu(beta1, o.momentum_decay, double(t));
}
Tensor f64(double v) { return tg::full({}, v, TensorOptions().dtype(kFloat64)); }
}  // namespace

Adaptive::Adaptive(Rule rule, std::vector<ParamGroup> groups, AdaptiveOptions options, const char* name)
    : Optimizer(std::move(groups), options.lr, options.weight_decay, name), rule_(rule), o_(options) {
  TG_CHECK(
      o_.eps >= 0 && std::isfinite(o_.weight_decay()) && o_.weight_decay >= 0 && o_.momentum >= 0 && o_.lr_decay >= 0,
      name_, ": eps, weight_decay, momentum and lr_decay must be >= 0, got ", o_.eps, ", ", o_.weight_decay, ", ",
      o_.momentum, " and ", o_.lr_decay);
  // PyTorch's rules: alpha >= 0 (above 1 allowed, NaN not), each beta in [0, 1).
  TG_CHECK(o_.alpha >= 0, name_, ": alpha must be >= 0 (any number from 0 up; NaN is not one), got ", o_.alpha);
  TG_CHECK(o_.beta1 >= 0 && o_.beta1 < 1 && o_.beta2 >= 0 && o_.beta2 < 1, name_,
           ": beta1 and beta2 must be in [0, 1), got ", o_.beta1, " and ", o_.beta2);
  TG_CHECK(rule_ != Rule::kAdagrad || o_.initial_accumulator_value >= 0, name_, ": invalid initial_accumulator_value ",
           o_.initial_accumulator_value,
           "; it must be >= 0 (the sum of squared gradients starts there: a negative one makes its square root NaN)");
  TG_CHECK(std::isfinite(o_.momentum_decay) && o_.momentum_decay >= 0, name_,
           ": momentum_decay must be finite and >= 0, got ", o_.momentum_decay);
  TG_CHECK(!o_.decoupled_weight_decay || rule_ == Rule::kNAdam || rule_ == Rule::kRAdam, name_,
           ": decoupled_weight_decay is an option of NAdam and RAdam (as PyTorch's); for ", name_,
           " leave it false (weight_decay is added to the gradient)");
  // state names as torch.optim's
  switch (rule_) {
    case Rule::kRMSprop:
      add_state("square_avg", &s1_);
      add_state("momentum_buffer", &s2_, o_.momentum > 0);
      add_state("grad_avg", &s3_, o_.centered);
      break;
    case Rule::kAdagrad: add_state("sum", &s1_, true, o_.initial_accumulator_value); break;
    case Rule::kAdamax:
      add_state("exp_avg", &s1_);
      add_state("exp_inf", &s2_);
      break;
    case Rule::kNAdam:
    case Rule::kRAdam:
      add_state("exp_avg", &s1_);
      add_state("exp_avg_sq", &s2_);
      break;
  }
  if (rule_ == Rule::kRMSprop) {
    if (o_.momentum > 0) enable_momentum(o_.momentum, false);
  } else if (rule_ != Rule::kAdagrad) {
    enable_momentum(o_.beta1, true);
  }
  if (rule_ == Rule::kNAdam)  // PyTorch's mu_product, saved: with a scheduled beta1 it is not a function of t
    add_number_state(
        "mu_product", [this](size_t i) { return mu_product_of(i); },
        [this](size_t i, const Tensor& v) { set_mu_product(i, v); }, 0.0, 1.0);
  if (rule_ == Rule::kNAdam || rule_ == Rule::kRAdam)
    add_flag_option("decoupled_weight_decay", &o_.decoupled_weight_decay.value);
  init_fused(o_.capturable);
  on_params_added(0);
}

std::vector<std::vector<Tensor>*> Adaptive::used_states() {
  switch (rule_) {
    case Rule::kRMSprop: return {&s1_, o_.momentum > 0 ? &s2_ : nullptr, o_.centered ? &s3_ : nullptr};
    case Rule::kAdagrad: return {&s1_};
    default: return {&s1_, &s2_};
  }
}

void Adaptive::on_params_added(size_t first_new) {
  mu_product_.resize(params_.size(), 1.0);
  mu_steps_.resize(params_.size(), 0);
  autograd::NoGradGuard no_grad;
  if (fused_ && rule_ == Rule::kNAdam) {  // slot 0 of a new parameter: the empty product
    Tensor fresh = tg::ones({int64_t(2 * (params_.size() - first_new))},
                            TensorOptions().dtype(kFloat64).device(params_[0].device()));
    device_mu_product_ = device_mu_product_.defined() ? tg::cat({device_mu_product_, fresh}) : fresh;
  }
  if (!o_.capturable) return;
  const double init = rule_ == Rule::kAdagrad ? o_.initial_accumulator_value() : 0.0;
  for (std::vector<Tensor>* list : used_states())
    if (list)
      for (size_t i = first_new; i < params_.size(); ++i)
        (*list)[i] = tg::full_like(stepped(i), init);
}

double Adaptive::mu_product_after(size_t i, int64_t n) {
  if (mu_steps_[i] != n) {  // resumed without it: the product of n factors at today's beta1 (bounded time)
    mu_product_[i] = detail::nadam_mu_product(groups_[group_of_[i]].momentum, o_.momentum_decay, n);
    mu_steps_[i] = n;
  }
  return mu_product_[i];
}

// The slot of parameter i's product after t steps (optim/kernels.h).
static int64_t slot_of(size_t i, int64_t t) { return 2 * int64_t(i) + (t & 1); }

Tensor Adaptive::mu_product_of(size_t i) {
  if (!fused_) return f64(mu_product_after(i, t_[i]));
  const int64_t t = int64_t(device_steps_.narrow(0, int64_t(i), 1).to(Device(kCPU)).item<double>());
  return device_mu_product_.narrow(0, slot_of(i, t), 1).reshape({}).to(Device(kCPU));
}

void Adaptive::set_mu_product(size_t i, const Tensor& v) {
  const Tensor value = v.to(Device(kCPU)).to(kFloat64).reshape({});
  mu_product_[i] = value.item<double>();
  mu_steps_[i] = t_[i];
  if (fused_) {
    autograd::NoGradGuard no_grad;
    device_mu_product_.narrow(0, slot_of(i, t_[i]), 1).copy_(value.reshape({1}));
  }
}

void Adaptive::on_state_loaded() {
  if (fused_ && rule_ == Rule::kNAdam)
    detail::cuda_multi_tensor_updates()->nadam_products(device_steps_, device_mu_product_, o_.beta1, o_.momentum_decay);
}

void Adaptive::step() {
  autograd::NoGradGuard no_grad;
  check_capturable_step();
  const std::vector<size_t> present = with_grads(true);
  if (fused_) {
    const detail::MultiTensorUpdates& be = *detail::cuda_multi_tensor_updates();
    const double init = rule_ == Rule::kAdagrad ? o_.initial_accumulator_value() : 0.0;
    fused_step_over(present, used_states(), init, [&](const detail::TensorLists& l, const Group& grp) {
      const detail::AdaptiveUpdate u{
          int(rule_),  o_.alpha,    o_.beta2,          o_.eps,      grp.weight_decay,
          o_.momentum, o_.lr_decay, o_.momentum_decay, o_.centered, o_.decoupled_weight_decay,
          nullptr};
      be.adaptive(l, device_steps_, grp.device_options, device_mu_product_, u);
    });
    ++steps_;
    return;
  }
  for (size_t i : present) {
    const Tensor p = stepped(i);
    const Group& grp = groups_[group_of_[i]];
    const double lr = grp.lr, b1 = grp.momentum;  // b1: RMSprop's momentum, the others' beta1
    Tensor g = stepped_grad(i);
    if (grp.weight_decay != 0) {  // PyTorch's order: the decoupled decay before the update
      if (o_.decoupled_weight_decay) p.mul_(1 - lr * grp.weight_decay);
      else g = g.add(p, grp.weight_decay);
    }
    const int64_t t = ++t_[i];
    auto state = [&](Tensor& s, double init = 0) -> Tensor& {
      if (!s.defined()) s = tg::full_like(p, init);
      return s;
    };
    switch (rule_) {
      case Rule::kRMSprop: {
        Tensor& sq = state(s1_[i]);
        sq.mul_(o_.alpha());
        sq.add_(g * g, 1 - o_.alpha);
        Tensor avg;
        if (o_.centered) {
          Tensor& ga = state(s3_[i]);
          ga.mul_(o_.alpha());
          ga.add_(g, 1 - o_.alpha);
          avg = tg::sqrt(sq - ga * ga);
        } else {
          avg = tg::sqrt(sq);
        }
        avg = avg + o_.eps();
        if (o_.momentum > 0) {
          Tensor& buf = state(s2_[i]);
          buf.mul_(b1);
          buf.add_(g / avg);
          p.add_(buf, -lr);
        } else {
          p.add_(g / avg, -lr);
        }
        break;
      }
      case Rule::kAdagrad: {
        Tensor& sum = state(s1_[i], o_.initial_accumulator_value);
        const double clr = lr / (1 + double(t - 1) * o_.lr_decay);
        sum.add_(g * g);
        p.add_(g / (tg::sqrt(sum) + o_.eps()), -clr);
        break;
      }
      case Rule::kAdamax: {
        Tensor& m = state(s1_[i]);
        Tensor& u = state(s2_[i]);
        m.mul_(b1);
        m.add_(g, 1 - b1);
        u.copy_(tg::maximum(u * o_.beta2(), tg::abs(g) + o_.eps()));
        p.add_(m / u, -lr / (1 - std::pow(b1, double(t))));
        break;
      }
      case Rule::kNAdam: {
        Tensor& m = state(s1_[i]);
        Tensor& v = state(s2_[i]);
        mu_product_after(i, t - 1);
        const double mu = nadam_mu(b1, o_, t), mu_next = nadam_mu(b1, o_, t + 1);
        mu_product_[i] *= mu;
        mu_steps_[i] = t;
        adam_moments(m, v, g, b1, o_.beta2);
        Tensor denom = tg::sqrt(v / (1 - std::pow(o_.beta2(), double(t)))) + o_.eps();
        p.add_(g / denom, -lr * (1 - mu) / (1 - mu_product_[i]));
        p.add_(m / denom, -lr * mu_next / (1 - mu_product_[i] * mu_next));
        break;
      }
      case Rule::kRAdam: {
        Tensor& m = state(s1_[i]);
        Tensor& v = state(s2_[i]);
        adam_moments(m, v, g, b1, o_.beta2);
        const double bc1 = 1 - std::pow(b1, double(t)), bc2 = 1 - std::pow(o_.beta2, double(t));
        const double rho_inf = 2 / (1 - o_.beta2) - 1;
        const double rho_t = rho_inf - 2 * double(t) * std::pow(o_.beta2, double(t)) / bc2;
        Tensor corrected = m / bc1;
        if (rho_t > 5) {
          const double rect = std::sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t));
          p.add_(corrected * lr * (std::sqrt(bc2) / (tg::sqrt(v) + o_.eps())) * rect, -1.0);
        } else {
          p.add_(corrected * lr, -1.0);
        }
        break;
      }
    }
  }
  ++steps_;
}

template <Adaptive::Rule R> AdaptiveOptions AdaptiveRule<R>::defaults() {
  switch (R) {
    case Adaptive::Rule::kRMSprop: return RMSpropOptions();
    case Adaptive::Rule::kAdagrad: return AdagradOptions();
    case Adaptive::Rule::kAdamax: return AdamaxOptions();
    case Adaptive::Rule::kNAdam: return NAdamOptions();
    case Adaptive::Rule::kRAdam: return RAdamOptions();
  }
  return AdaptiveOptions();
}

template <Adaptive::Rule R>
AdaptiveRule<R>::AdaptiveRule(std::vector<Tensor> params, Options o) : AdaptiveRule(one_group(std::move(params)), o) {}
template <Adaptive::Rule R>
AdaptiveRule<R>::AdaptiveRule(std::vector<ParamGroup> groups, Options o)
    : Adaptive(R, std::move(groups), o, rule_name(R)) {}
template class AdaptiveRule<Adaptive::Rule::kRMSprop>;
template class AdaptiveRule<Adaptive::Rule::kAdagrad>;
template class AdaptiveRule<Adaptive::Rule::kAdamax>;
template class AdaptiveRule<Adaptive::Rule::kNAdam>;
template class AdaptiveRule<Adaptive::Rule::kRAdam>;

namespace {
std::vector<Tensor> grads_of(const std::vector<Tensor>& params, const char* op) {
  std::vector<Tensor> gs;
  for (size_t i = 0; i < params.size(); ++i) {
    TG_CHECK(params[i].defined(), op, ": parameter ", i, " is undefined");
    const Tensor& g = params[i].grad();
    if (!g.defined()) continue;
    TG_CHECK(!g.is_sparse(), op, ": parameter ", i, " has a sparse gradient; call to_dense() on it first");
    TG_CHECK(gs.empty() || g.device() == gs[0].device(), op, ": gradients on ", gs[0].device(), " and ", g.device());
    gs.push_back(g);
  }
  return gs;
}
}  // namespace

Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type, bool error_if_nonfinite) {
  TG_CHECK(norm_type > 0, "clip_grad_norm_: norm_type must be > 0 (or INFINITY), got ", norm_type);
  std::vector<Tensor> gs = grads_of(params, "clip_grad_norm_");
  autograd::NoGradGuard no_grad;
  if (gs.empty()) return tg::zeros({});
  // On one CUDA device (float32/float64, contiguous): the multi-tensor
  // partial norms, then one multi-tensor scaling that works out the norm
  // from them (two launches per kListSize gradients).
  const detail::MultiTensorUpdates* be = detail::cuda_multi_tensor_updates();
  bool fused = be != nullptr;
  for (const Tensor& g : gs)
    fused = fused && g.is_cuda() && g.device() == gs[0].device() && g.is_contiguous() &&
            (g.dtype() == kFloat32 || g.dtype() == kFloat64);
  auto check = [&](const Tensor& total) {
    const double v = total.item<double>();
    TG_CHECK(std::isfinite(v), "clip_grad_norm_: the total norm of the gradients is ", v,
             "; they cannot be clipped (error_if_nonfinite = true)");
  };
  if (fused) {
    Tensor part = be->norm_partials(gs, norm_type);
    if (error_if_nonfinite)  // the norm on its own first (this reads it on the host anyway)
      check(std::isinf(norm_type) ? tg::amax(part) : part.sum());
    Tensor total = tg::empty({}, gs[0].options());
    be->clip_scale(gs, part, norm_type, max_norm, total);
    return total;
  }
  // One norm per gradient, then the norm of the norms (every step on the device).
  std::vector<Tensor> norms;
  for (const Tensor& g : gs)
    if (g.numel() > 0)  // an empty one adds nothing (and has no max)
      norms.push_back(tg::norm((is_complex(g.dtype()) ? tg::abs(g) : g).to(kFloat64), norm_type).reshape({1}));
  Tensor total = norms.empty() ? tg::zeros({}, TensorOptions().dtype(kFloat64).device(gs[0].device()))
                               : tg::norm(tg::cat(norms), norm_type);
  if (error_if_nonfinite) check(total);
  Tensor coef = tg::clamp_max(max_norm / (total + 1e-6), 1.0);
  std::map<ScalarType, Tensor> coef_as;  // one conversion per gradient dtype
  for (const Tensor& g : gs) {
    Tensor& c = coef_as[g.dtype()];
    if (!c.defined()) c = coef.to(g.dtype());
    g.mul_(c);
  }
  return total.to(real_type(gs[0].dtype()));  // a complex gradient's norm is of its moduli
}

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  TG_CHECK(clip_value >= 0, "clip_grad_value_: clip_value must be >= 0, got ", clip_value);
  autograd::NoGradGuard no_grad;
  for (const Tensor& g : grads_of(params, "clip_grad_value_")) {
    TG_CHECK(!is_complex(g.dtype()), "clip_grad_value_: a ", g.dtype(), " gradient (shape ", shape_str(g.sizes()),
             ") has no order to clamp by (as PyTorch, which refuses it too); clip_grad_norm_ takes complex gradients");
    g.copy_(tg::clamp(g, -clip_value, clip_value));
  }
}

}  // namespace tg::optim
