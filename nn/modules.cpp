#include <tapegrad/nn/modules.h>

#include <tapegrad/nn/functional.h>

#include <cmath>
#include <optional>
#include <typeinfo>

#include <tapegrad/autograd/forward_ad.h>
#include <tapegrad/autograd/function.h>
#include <tapegrad/autograd/grad_mode.h>
#include <tapegrad/tensor/error.h>
#include <tapegrad/tensor/ops.h>

#include "autograd/fused_mlp.h"
#include "tensor/env.h"
#include "tensor/kernels.h"

namespace tg::nn {

LinearImpl::LinearImpl(int64_t in_features, int64_t out_features, bool has_bias, TensorOptions options)
    : Module("Linear") {
  TG_CHECK(in_features > 0 && out_features > 0, "Linear: in_features and out_features must be positive, got ",
           in_features, " and ", out_features);
  // U(-1/sqrt(in), 1/sqrt(in)) for both, as LibTorch's reset_parameters.
  const double bound = 1.0 / std::sqrt(double(in_features));
  auto uniform = [&](const IntList& sizes) {
    autograd::NoGradGuard no_grad;
    return tg::rand(sizes, options) * (2 * bound) - bound;
  };
  weight = register_parameter("weight", uniform({out_features, in_features}));
  if (has_bias) bias = register_parameter("bias", uniform({out_features}));
}

Tensor LinearImpl::forward(const Tensor& x) { return tg::linear(x, weight, bias); }

std::string LinearImpl::extra_repr() const {
  return "Linear(in_features=" + std::to_string(weight.size(1)) + ", out_features=" + std::to_string(weight.size(0)) +
         ", bias=" + (bias.defined() ? "true" : "false") + ")";
}

SequentialImpl::SequentialImpl() : Module("Sequential") {}

SequentialImpl::SequentialImpl(std::vector<std::shared_ptr<Module>> modules) : SequentialImpl() {
  for (auto& m : modules)
    push_back(std::move(m));
}

void SequentialImpl::push_back(std::shared_ptr<Module> m) {
  register_module(std::to_string(modules_.size()), m);
  modules_.push_back(std::move(m));
}

namespace {

// The layers of a small MLP in one launch (the backend's mlp_forward;
// TG_FUSED_MLP=0 turns it off), recorded as one node whose backward is one
// launch too (autograd::fused_mlp): modules exactly
// Linear, then an activation of one kind (tanh, sigmoid, silu, relu) and a
// Linear in turn, optionally ending with the activation; x contiguous on a
// device with the kernel, of the layers' Float32/Float64 dtype. Undefined
// where it does not apply: the layers then run one by one, as recorded.
Tensor fused_mlp_forward(const std::vector<std::shared_ptr<Module>>& modules, const Tensor& x) {
  if (modules.size() < 2 || !x.defined() || x.device().type() == kCPU || x.is_sparse() || x.dim() < 1 ||
      x.numel() == 0 || (x.dtype() != kFloat32 && x.dtype() != kFloat64) || !x.is_contiguous() ||
      !tg::detail::switched_on<tg::detail::OffSwitch::kFusedMlp>())
    return {};
  const kernels::Backend& be = kernels::backend(x.device(), "Sequential");
  if (!be.mlp_forward || autograd::forward_ad::is_active() || autograd::detail::taylor_active()) return {};
  std::vector<Tensor> weights, biases;
  std::optional<tg::Activation> act;
  bool last_act = false;
  for (size_t i = 0; i < modules.size(); ++i) {
    const Module& m = *modules[i];
    if (i % 2 == 0) {
      if (typeid(m) != typeid(LinearImpl)) return {};
      const auto& l = static_cast<const LinearImpl&>(m);
      for (const Tensor* t : {&l.weight, &l.bias})
        if (t->defined() && (t->device() != x.device() || t->dtype() != x.dtype())) return {};
      weights.push_back(l.weight);
      biases.push_back(l.bias);
      continue;
    }
    tg::Activation a;
    if (typeid(m) == typeid(TanhImpl)) a = tg::Activation::Tanh;
    else if (typeid(m) == typeid(SigmoidImpl)) a = tg::Activation::Sigmoid;
    else if (typeid(m) == typeid(SiLUImpl)) a = tg::Activation::Silu;
    else if (typeid(m) == typeid(ReLUImpl)) a = tg::Activation::Relu;
    else return {};
    if (act && *act != a) return {};
    act = a;
    last_act = i + 1 == modules.size();
  }
  if (!act || !weights.front().defined() || weights.front().dim() != 2 || x.sizes().back() != weights.front().size(1) ||
      !weights.back().defined() || weights.back().dim() != 2)
    return {};
  const int64_t rows = x.numel() / x.sizes().back();
  IntList shape = x.sizes();
  shape.back() = weights.back().size(0);
  // (A 2-D x as it is: no reshape nodes around the MLP's.)
  const bool flat = x.dim() == 2;
  const Tensor out =
      autograd::fused_mlp(*act, last_act, flat ? x : x.reshape({rows, x.sizes().back()}), weights, biases);
  return !out.defined() || flat ? out : out.reshape(shape);
}

}  // namespace

Tensor SequentialImpl::forward(const Tensor& x) {
  if (Tensor y = fused_mlp_forward(modules_, x); y.defined()) return y;
  Tensor h = x;
  for (auto& m : modules_)
    h = m->forward(h);
  return h;
}

ActivationImpl::ActivationImpl(std::string name, std::function<Tensor(const Tensor&)> fn)
    : Module(std::move(name)), fn_(std::move(fn)) {}
Tensor ActivationImpl::forward(const Tensor& x) { return fn_(x); }

TanhImpl::TanhImpl() : ActivationImpl("Tanh", [](const Tensor& x) { return tg::tanh(x); }) {}
SiLUImpl::SiLUImpl() : ActivationImpl("SiLU", [](const Tensor& x) { return tg::silu(x); }) {}
ReLUImpl::ReLUImpl() : ActivationImpl("ReLU", [](const Tensor& x) { return tg::relu(x); }) {}
GELUImpl::GELUImpl(bool tanh_approximation)
    : ActivationImpl(
          "GELU", [tanh_approximation](const Tensor& x) { return tg::gelu(x, tanh_approximation ? "tanh" : "none"); }) {
}
SoftplusImpl::SoftplusImpl(double beta, double threshold)
    : ActivationImpl("Softplus", [beta, threshold](const Tensor& x) { return tg::softplus(x, beta, threshold); }) {}
SigmoidImpl::SigmoidImpl() : ActivationImpl("Sigmoid", [](const Tensor& x) { return tg::sigmoid(x); }) {}
LeakyReLUImpl::LeakyReLUImpl(double slope)
    : ActivationImpl("LeakyReLU", [slope](const Tensor& x) { return functional::leaky_relu(x, slope); }) {}
ELUImpl::ELUImpl(double alpha)
    : ActivationImpl("ELU", [alpha](const Tensor& x) { return functional::elu(x, alpha); }) {}
TanhshrinkImpl::TanhshrinkImpl()
    : ActivationImpl("Tanhshrink", [](const Tensor& x) { return functional::tanhshrink(x); }) {}

std::shared_ptr<Module> make_activation(const std::string& name) {
  if (name == "tanh") return std::make_shared<TanhImpl>();
  if (name == "silu") return std::make_shared<SiLUImpl>();
  if (name == "relu") return std::make_shared<ReLUImpl>();
  if (name == "gelu") return std::make_shared<GELUImpl>();
  if (name == "softplus") return std::make_shared<SoftplusImpl>();
  if (name == "sigmoid") return std::make_shared<SigmoidImpl>();
  if (name == "leaky_relu") return std::make_shared<LeakyReLUImpl>();
  if (name == "elu") return std::make_shared<ELUImpl>();
  if (name == "tanhshrink") return std::make_shared<TanhshrinkImpl>();
  TG_ERROR("make_activation: unknown activation '", name,
           "'; expected tanh, silu, relu, gelu, softplus, sigmoid, leaky_relu, elu or tanhshrink");
}

const std::shared_ptr<Module>& SequentialImpl::operator[](size_t i) const {
  TG_CHECK(i < modules_.size(), "Sequential: no module ", i, " (it holds ", modules_.size(), ")");
  return modules_[i];
}

Sequential MLP(const std::vector<int64_t>& sizes, const std::string& activation, TensorOptions options) {
  TG_CHECK(sizes.size() >= 2, "MLP: give at least the input and output sizes, got ", sizes.size(), " sizes");
  make_activation(activation);  // a bad name fails before any layer is made
  auto seq = std::make_shared<SequentialImpl>();
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    seq->push_back(std::make_shared<LinearImpl>(sizes[i], sizes[i + 1], true, options));
    if (i + 2 < sizes.size()) seq->push_back(make_activation(activation));
  }
  return seq;
}

}  // namespace tg::nn
