#include <tapegrad/optim/optimizer.h>
#include "nn/grads.h"
#include "optim/kernels.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <tuple>
#include <unordered_map>

#include <string>

#include <tapegrad/autograd/grad_mode.h>
#include <tapegrad/cuda/graph.h>
#include <tapegrad/tensor/error.h>
#include <tapegrad/tensor/ops.h>

namespace tg::optim {

Optimizer::Optimizer(std::vector<Tensor> params, double lr, const char* name)
    : params_(std::move(params)), lr_(lr), name_(name) {
  TG_CHECK(lr >= 0, name_, ": the learning rate must be >= 0, got ", lr);
  TG_CHECK(!params_.empty(), name_,
           ": got an empty parameter list; give it the tensors to optimize (e.g. model.parameters())");
  std::unordered_map<const void*, size_t> seen;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    TG_CHECK(p.defined() && p.is_floating_point() && p.is_leaf(), name_, ": parameter ", i,
             " must be a floating-point leaf tensor", p.defined() ? "" : " (it is undefined)");
    auto [it, fresh] = seen.emplace(p.impl(), i);
    TG_CHECK(fresh, name_, ": parameter ", i, " is the same tensor as parameter ", it->second);
  }
}

Optimizer::~Optimizer() {
  if (registered_)
    for (const Tensor& p : params_)
      cuda::unregister_static(p);
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
  if (why.empty() && !detail::cuda_multi_tensor_updates()) why = "the build has no multi-tensor update";
  TG_CHECK(!capturable || why.empty(), name_,
           ": capturable needs float32/float64 contiguous parameters on "
           "one CUDA device (the multi-tensor update), but ",
           why);
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
  for (size_t i : present)
    device_steps_.narrow(0, int64_t(i), 1).add_(1.0);
}

void Optimizer::check_capturable_step() const {
  if (fused_ || params_.empty() || !params_[0].is_cuda()) return;
  if (cuda::is_current_stream_capturing())
    TG_ERROR(name_,
             ": step() under CUDA graph capture needs the multi-tensor update (float32/float64 "
             "contiguous parameters on one CUDA device); these parameters do not allow it, and a "
             "per-tensor step would bake the step count and learning rate into the graph");
}

namespace {
// The fused update's lists for the parameters of `present` of one dtype.
detail::TensorLists lists_of(const std::vector<Tensor>& params, const std::vector<size_t>& present, ScalarType dt,
                             const std::vector<Tensor>* s1, const std::vector<Tensor>* s2,
                             const std::vector<Tensor>* s3) {
  detail::TensorLists l;
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
    TG_CHECK(!cuda::is_current_stream_capturing(), name, ": parameter ", i,
             " has no optimizer state yet, and "
             "creating it under CUDA graph capture would reset it on every replay; construct the optimizer "
             "with capturable = true (the state is made up front), or run one step before capturing");
    *t = tg::zeros_like(p);
  }
}
}  // namespace

SGD::SGD(std::vector<Tensor> params, SGDOptions options)
    : Optimizer(std::move(params), options.lr, "SGD"), o_(options), buf_(params_.size()), t_(params_.size(), 0) {
  TG_CHECK(o_.momentum >= 0 && o_.weight_decay >= 0, "SGD: momentum and weight_decay must be >= 0, got ", o_.momentum,
           " and ", o_.weight_decay);
  TG_CHECK(!o_.nesterov || (o_.momentum > 0 && o_.dampening == 0),
           "SGD: Nesterov momentum needs momentum > 0 and dampening = 0");
  init_fused(o_.capturable);
  if (o_.capturable && o_.momentum != 0)
    for (size_t i = 0; i < params_.size(); ++i)
      buf_[i] = tg::zeros_like(params_[i]);
}

void SGD::step() {
  autograd::NoGradGuard no_grad;
  check_capturable_step();
  const std::vector<size_t> present = with_grads(fused_);
  for (size_t i : present)
    ++t_[i];
  if (fused_) {
    if (!present.empty()) {
      if (o_.momentum != 0)
        for (size_t i : present)
          ensure_state(name_, params_[i], i, {&buf_[i]});
      increment_device_steps(present);
      const detail::SGDUpdate u{o_.momentum, o_.dampening, o_.weight_decay, o_.nesterov};
      const detail::MultiTensorUpdates& be = *detail::cuda_multi_tensor_updates();
      for (ScalarType dt : {kFloat32, kFloat64}) {
        detail::TensorLists l = lists_of(params_, present, dt, o_.momentum != 0 ? &buf_ : nullptr, nullptr, nullptr);
        if (!l.param.empty()) be.sgd(l, device_steps_, device_lr_, u);
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
  TG_CHECK(o_.beta1 >= 0 && o_.beta1 < 1 && o_.beta2 >= 0 && o_.beta2 < 1, name_, ": betas must be in [0, 1), got ",
           o_.beta1, " and ", o_.beta2);
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
      const detail::AdamUpdate u{o_.beta1, o_.beta2, o_.eps, o_.weight_decay, o_.amsgrad, decoupled_};
      const detail::MultiTensorUpdates& be = *detail::cuda_multi_tensor_updates();
      for (ScalarType dt : {kFloat32, kFloat64}) {
        detail::TensorLists l = lists_of(params_, present, dt, &m_, &v_, o_.amsgrad ? &vmax_ : nullptr);
        if (!l.param.empty()) be.adam(l, device_steps_, device_lr_, u);
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

}  // namespace tg::optim
