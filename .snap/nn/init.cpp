#include <tapegrad/nn/init.h>

#include <cmath>

#include <tapegrad/autograd/grad_mode.h>
#include <tapegrad/tensor/error.h>
#include <tapegrad/tensor/ops.h>

namespace tg::nn::init {

namespace {

void check(const Tensor& t, const char* op) {
  TG_CHECK(t.defined() && t.is_floating_point(), op, ": needs a defined floating-point tensor");
}

// fan_in, fan_out as torch.nn.init's.
std::pair<double, double> fans(const Tensor& t, const char* op) {
  check(t, op);
  TG_CHECK(t.dim() >= 2, op, ": fan in and fan out need a tensor of at least 2 dimensions, got shape ", t.sizes());
  double receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d)
    receptive *= double(t.size(d));
  return {double(t.size(1)) * receptive, double(t.size(0)) * receptive};
}

double fan(const Tensor& t, const std::string& mode, const char* op) {
  auto [in, out] = fans(t, op);
  TG_CHECK(mode == "fan_in" || mode == "fan_out", op, ": mode must be fan_in or fan_out, got '", mode, "'");
  return mode == "fan_in" ? in : out;
}

}  // namespace

double calculate_gain(const std::string& nl, double param) {
  if (nl == "linear" || nl == "sigmoid" || nl == "conv1d" || nl == "conv2d" || nl == "conv3d") return 1;
  if (nl == "tanh") return 5.0 / 3;
  if (nl == "relu") return std::sqrt(2.0);
  if (nl == "leaky_relu") return std::sqrt(2.0 / (1 + param * param));
  if (nl == "selu") return 3.0 / 4;
  TG_ERROR("calculate_gain: unknown nonlinearity '", nl, "'; expected linear, sigmoid, tanh, relu, leaky_relu or selu");
}

const Tensor& uniform_(const Tensor& t, double a, double b) {
  check(t, "uniform_");
  TG_CHECK(a <= b, "uniform_: needs a <= b, got ", a, " and ", b);
  autograd::NoGradGuard no_grad;
  return t.copy_(tg::rand(t.sizes(), t.options()) * (b - a) + a);
}

const Tensor& normal_(const Tensor& t, double mean, double std) {
  check(t, "normal_");
  TG_CHECK(std >= 0, "normal_: std must be >= 0, got ", std);
  autograd::NoGradGuard no_grad;
  return t.copy_(tg::randn(t.sizes(), t.options()) * std + mean);
}

const Tensor& constant_(const Tensor& t, double value) {
  TG_CHECK(t.defined(), "constant_: needs a defined tensor");
  autograd::NoGradGuard no_grad;
  return t.fill_(value);
}

const Tensor& zeros_(const Tensor& t) { return constant_(t, 0); }

const Tensor& xavier_uniform_(const Tensor& t, double gain) {
  auto [in, out] = fans(t, "xavier_uniform_");
  const double a = gain * std::sqrt(6.0 / (in + out));
  return uniform_(t, -a, a);
}

const Tensor& xavier_normal_(const Tensor& t, double gain) {
  auto [in, out] = fans(t, "xavier_normal_");
  return normal_(t, 0, gain * std::sqrt(2.0 / (in + out)));
}

const Tensor& kaiming_uniform_(const Tensor& t, double a, const std::string& mode, const std::string& nl) {
  const double b = calculate_gain(nl, a) * std::sqrt(3.0 / fan(t, mode, "kaiming_uniform_"));
  return uniform_(t, -b, b);
}

const Tensor& kaiming_normal_(const Tensor& t, double a, const std::string& mode, const std::string& nl) {
  return normal_(t, 0, calculate_gain(nl, a) / std::sqrt(fan(t, mode, "kaiming_normal_")));
}

}  // namespace tg::nn::init
