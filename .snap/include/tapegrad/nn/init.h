// Initialisers (docs/NN.md "Initialisation"), as torch.nn.init: each fills a
// tensor in place under no-grad from the global generator (manual_seed makes
// it reproducible) and returns it. Fans: fan_in = size(1) * receptive field,
// fan_out = size(0) * receptive field (receptive field = product of the
// sizes after the first two); tensors need at least 2 dimensions.
#pragma once

#include <string>

#include <tapegrad/tensor/tensor.h>

namespace tg::nn::init {

/// The recommended gain of a nonlinearity: "linear", "sigmoid", "tanh" (5/3),
/// "relu" (sqrt 2), "leaky_relu" (sqrt(2 / (1 + param^2))), "selu" (3/4).
double calculate_gain(const std::string& nonlinearity, double param = 0.01);
/// U(a, b).
const Tensor& uniform_(const Tensor& t, double a = 0, double b = 1);
/// N(mean, std^2).
const Tensor& normal_(const Tensor& t, double mean = 0, double std = 1);
/// Every element `value`.
const Tensor& constant_(const Tensor& t, double value);
/// Every element 0.
const Tensor& zeros_(const Tensor& t);
/// U(-a, a) with a = gain sqrt(6 / (fan_in + fan_out)) (Glorot).
const Tensor& xavier_uniform_(const Tensor& t, double gain = 1);
/// N(0, s^2) with s = gain sqrt(2 / (fan_in + fan_out)) (Glorot).
const Tensor& xavier_normal_(const Tensor& t, double gain = 1);
/// U(-b, b) with b = gain(nonlinearity, a) sqrt(3 / fan) (He); mode "fan_in" or "fan_out".
const Tensor& kaiming_uniform_(const Tensor& t, double a = 0, const std::string& mode = "fan_in",
                               const std::string& nonlinearity = "leaky_relu");
/// N(0, s^2) with s = gain(nonlinearity, a) / sqrt(fan) (He).
const Tensor& kaiming_normal_(const Tensor& t, double a = 0, const std::string& mode = "fan_in",
                              const std::string& nonlinearity = "leaky_relu");

}  // namespace tg::nn::init
