// The losses and the functional forms of the layers (docs/NN.md "Losses"),
// tg::nn::functional as torch.nn.functional: every one is a formula of
// differentiable ops, so its gradients (and theirs, to any order) follow.
#pragma once

#include <string>

#include <cstdint>
#include <optional>

#include <tapegrad/tensor/arg.h>
#include <tapegrad/tensor/grid.h>
#include <tapegrad/tensor/tensor.h>

namespace tg::nn {

/// How a loss reduces its per-element values: none (the values, input's
/// shape), their mean, or their sum; kBatchMean (kl_div only) divides the
/// sum by the batch size (input.size(0)).
enum class Reduction { kNone, kMean, kSum, kBatchMean };

// The losses' options, LibTorch's names and chained setters
// (`CrossEntropyLossOptions().label_smoothing(0.1)`; in functional also
// as LibTorch's XFuncOptions), taken by the loss modules and beside the
// positional forms of the functional losses.
/// mse_loss's: reduction.
struct MSELossOptions {
  TG_ARG(MSELossOptions, Reduction, reduction) = Reduction::kMean;  ///< how the values are reduced
};
/// l1_loss's: reduction.
struct L1LossOptions {
  TG_ARG(L1LossOptions, Reduction, reduction) = Reduction::kMean;  ///< how the values are reduced
};
/// smooth_l1_loss's: reduction, beta.
struct SmoothL1LossOptions {
  TG_ARG(SmoothL1LossOptions, Reduction, reduction) = Reduction::kMean;  ///< how the values are reduced
  TG_ARG(SmoothL1LossOptions, double, beta) = 1.0;                       ///< where the quadratic part ends
};
/// huber_loss's: reduction, delta.
struct HuberLossOptions {
  TG_ARG(HuberLossOptions, Reduction, reduction) = Reduction::kMean;  ///< how the values are reduced
  TG_ARG(HuberLossOptions, double, delta) = 1.0;                      ///< where the quadratic part ends
};
/// nll_loss's: weight, ignore_index, reduction.
struct NLLLossOptions {
  TG_ARG(NLLLossOptions, Tensor, weight);                           ///< per-class weights, or undefined
  TG_ARG(NLLLossOptions, int64_t, ignore_index) = -100;             ///< targets that count nothing
  TG_ARG(NLLLossOptions, Reduction, reduction) = Reduction::kMean;  ///< how the values are reduced
};
/// cross_entropy's: weight, ignore_index, reduction, label_smoothing.
struct CrossEntropyLossOptions {
  TG_ARG(CrossEntropyLossOptions, Tensor, weight);                           ///< per-class weights, or undefined
  TG_ARG(CrossEntropyLossOptions, int64_t, ignore_index) = -100;             ///< targets that count nothing
  TG_ARG(CrossEntropyLossOptions, Reduction, reduction) = Reduction::kMean;  ///< how the values are reduced
  TG_ARG(CrossEntropyLossOptions, double, label_smoothing) = 0.0;            ///< mixed-in uniform share
};
/// binary_cross_entropy's: weight, reduction.
struct BCELossOptions {
  TG_ARG(BCELossOptions, Tensor, weight);                           ///< per-element weights, or undefined
  TG_ARG(BCELossOptions, Reduction, reduction) = Reduction::kMean;  ///< how the values are reduced
};
/// binary_cross_entropy_with_logits's: weight, reduction, pos_weight.
struct BCEWithLogitsLossOptions {
  TG_ARG(BCEWithLogitsLossOptions, Tensor, weight);                           ///< per-element weights, or undefined
  TG_ARG(BCEWithLogitsLossOptions, Reduction, reduction) = Reduction::kMean;  ///< how the values are reduced
  TG_ARG(BCEWithLogitsLossOptions, Tensor, pos_weight);                       ///< the positive term's weight
};
/// kl_div's: reduction, log_target.
struct KLDivLossOptions {
  TG_ARG(KLDivLossOptions, Reduction, reduction) = Reduction::kMean;  ///< how the values are reduced
  TG_ARG(KLDivLossOptions, bool, log_target) = false;                 ///< target holds log-probabilities
};

namespace functional {

/// @name The losses' options under LibTorch's functional names
///@{
using MSELossFuncOptions = MSELossOptions;                                 ///< LibTorch's name
using L1LossFuncOptions = L1LossOptions;                                   ///< LibTorch's name
using SmoothL1LossFuncOptions = SmoothL1LossOptions;                       ///< LibTorch's name
using HuberLossFuncOptions = HuberLossOptions;                             ///< LibTorch's name
using NLLLossFuncOptions = NLLLossOptions;                                 ///< LibTorch's name
using CrossEntropyFuncOptions = CrossEntropyLossOptions;                   ///< LibTorch's name
using BinaryCrossEntropyFuncOptions = BCELossOptions;                      ///< LibTorch's name
using BinaryCrossEntropyWithLogitsFuncOptions = BCEWithLogitsLossOptions;  ///< LibTorch's name
using KLDivFuncOptions = KLDivLossOptions;                                 ///< LibTorch's name
///@}

/// @name Losses (input first, then target; shapes must match unless said)
///@{
/// (input - target)^2, reduced.
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::kMean);
/// |input - target|, reduced.
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::kMean);
/// 0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (d = input - target); beta = 0 is l1_loss.
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::kMean,
                      double beta = 1.0);
/// 0.5 d^2 where |d| <= delta, else delta (|d| - 0.5 delta).
Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::kMean,
                  double delta = 1.0);
/// Negative log-likelihood of log-probabilities input [N, C] (or [C], or
/// [N, C, d...]) at class indices target (Int64 [N] / [] / [N, d...]):
/// -weight[t] input[n, t]; kMean divides by the summed weights of the
/// counted targets; targets equal to ignore_index count nothing.
Tensor nll_loss(const Tensor& input, const Tensor& target, const Tensor& weight = {},
                Reduction reduction = Reduction::kMean, int64_t ignore_index = -100);
/// nll_loss(log_softmax(input, 1), target) for class-index targets (Int64),
/// or -sum(target * log_softmax(input, 1)) over classes for class
/// probabilities (floating target of input's shape). label_smoothing eps
/// mixes the target with the uniform distribution: (1 - eps) target + eps / C.
Tensor cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight = {},
                     Reduction reduction = Reduction::kMean, int64_t ignore_index = -100, double label_smoothing = 0.0);
/// -(target log(input) + (1 - target) log(1 - input)), the logs clamped at
/// -100 (as PyTorch). Every input element must be in [0, 1] (an error
/// otherwise, read on the host: one sync on a GPU; under CUDA graph capture
/// the loss is NaN where input is out of range instead); weight must
/// broadcast to input's shape without changing it.
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight = {},
                            Reduction reduction = Reduction::kMean);
/// binary_cross_entropy(sigmoid(input), target) computed stably from logits;
/// pos_weight multiplies the positive term; weight and pos_weight must
/// broadcast to input's shape without changing it (pos_weight [C] for input [N, C]).
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, const Tensor& weight = {},
                                        Reduction reduction = Reduction::kMean, const Tensor& pos_weight = {});
/// target (log(target) - input) for log-probabilities input; log_target:
/// target holds log-probabilities too. kBatchMean is the mathematically
/// right reduction (PyTorch's kMean divides by the element count).
Tensor kl_div(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::kMean,
              bool log_target = false);
///@}

/// @name The losses with their options structs (LibTorch's forms)
///@{
/// mse_loss(input, target, o.reduction).
inline Tensor mse_loss(const Tensor& input, const Tensor& target, const MSELossOptions& o) {
  return mse_loss(input, target, Reduction(o.reduction));
}
/// l1_loss(input, target, o.reduction).
inline Tensor l1_loss(const Tensor& input, const Tensor& target, const L1LossOptions& o) {
  return l1_loss(input, target, Reduction(o.reduction));
}
/// smooth_l1_loss with o's reduction and beta.
inline Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, const SmoothL1LossOptions& o) {
  return smooth_l1_loss(input, target, o.reduction, o.beta);
}
/// huber_loss with o's reduction and delta.
inline Tensor huber_loss(const Tensor& input, const Tensor& target, const HuberLossOptions& o) {
  return huber_loss(input, target, o.reduction, o.delta);
}
/// nll_loss with o's weight, reduction and ignore_index.
inline Tensor nll_loss(const Tensor& input, const Tensor& target, const NLLLossOptions& o) {
  return nll_loss(input, target, o.weight, o.reduction, o.ignore_index);
}
/// cross_entropy with o's weight, reduction, ignore_index and label_smoothing.
inline Tensor cross_entropy(const Tensor& input, const Tensor& target, const CrossEntropyLossOptions& o) {
  return cross_entropy(input, target, o.weight, o.reduction, o.ignore_index, o.label_smoothing);
}
/// binary_cross_entropy with o's weight and reduction.
inline Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const BCELossOptions& o) {
  return binary_cross_entropy(input, target, o.weight, o.reduction);
}
/// binary_cross_entropy_with_logits with o's weight, reduction and pos_weight.
inline Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                               const BCEWithLogitsLossOptions& o) {
  return binary_cross_entropy_with_logits(input, target, o.weight, o.reduction, o.pos_weight);
}
/// kl_div with o's reduction and log_target.
inline Tensor kl_div(const Tensor& input, const Tensor& target, const KLDivLossOptions& o) {
  return kl_div(input, target, o.reduction, o.log_target);
}
///@}

/// @name Layers and activations
///@{
/// Rows of weight [num, dim...] at Int64 indices `input` (any shape):
/// [input..., dim...], as tg::embedding, with PyTorch's options.
/// padding_idx (in [-num, num), negative wraps): lookups of that row read it
/// but pass no gradient to weight. max_norm: first, in place under no-grad,
/// every row that input looks up whose norm_type-norm exceeds max_norm is
/// scaled by max_norm / (norm + 1e-7) (weight changes, as PyTorch's; this
/// costs a pass over the whole table per call).
Tensor embedding(const Tensor& input, const Tensor& weight, std::optional<int64_t> padding_idx = std::nullopt,
                 std::optional<double> max_norm = std::nullopt, double norm_type = 2.0, bool sparse = false);
/// x where x > 0, else negative_slope x.
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
/// x where x > 0, else alpha (e^x - 1).
Tensor elu(const Tensor& x, double alpha = 1.0);
/// x - tanh(x).
Tensor tanhshrink(const Tensor& x);
/// @name Every activation as LibTorch's torch::nn::functional names it
/// (each a composition of public ops: differentiable to every order)
///@{
Tensor relu(const Tensor& x);                                                  ///< max(x, 0)
Tensor relu6(const Tensor& x);                                                 ///< min(max(x, 0), 6)
Tensor gelu(const Tensor& x, const std::string& approximate = "none");         ///< tg::gelu
Tensor silu(const Tensor& x);                                                  ///< x sigmoid(x)
Tensor sigmoid(const Tensor& x);                                               ///< 1 / (1 + e^-x)
Tensor tanh(const Tensor& x);                                                  ///< tanh(x)
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0);  ///< tg::softplus
Tensor softmax(const Tensor& x, int64_t dim);                                  ///< along dim
Tensor log_softmax(const Tensor& x, int64_t dim);                              ///< along dim
Tensor softmin(const Tensor& x, int64_t dim);                                  ///< softmax(-x, dim)
Tensor logsigmoid(const Tensor& x);                                            ///< -softplus(-x)
Tensor selu(const Tensor& x);                      ///< scale elu(x, alpha), PyTorch's constants
Tensor celu(const Tensor& x, double alpha = 1.0);  ///< max(0, x) + min(0, alpha (e^(x/alpha) - 1))
Tensor mish(const Tensor& x);                      ///< x tanh(softplus(x))
Tensor hardtanh(const Tensor& x, double min_val = -1.0, double max_val = 1.0);  ///< clamp
Tensor hardsigmoid(const Tensor& x);                                            ///< clamp(x / 6 + 1/2, 0, 1)
Tensor hardswish(const Tensor& x);                                              ///< x hardsigmoid(x)
Tensor softsign(const Tensor& x);                                               ///< x / (1 + |x|)
Tensor softshrink(const Tensor& x, double lambda = 0.5);            ///< x -+ lambda outside [-lambda, lambda], else 0
Tensor hardshrink(const Tensor& x, double lambda = 0.5);            ///< x outside [-lambda, lambda], else 0
Tensor threshold(const Tensor& x, double threshold, double value);  ///< x where x > threshold, else value
Tensor glu(const Tensor& x, int64_t dim = -1);                      ///< a sigmoid(b), x split in halves a, b along dim
/// x / max(||x||_p along dim, eps), as F.normalize.
Tensor normalize(const Tensor& x, double p = 2.0, int64_t dim = 1, double eps = 1e-12);
///@}
/// Normalizes over the last dims (normalized_shape: their sizes) with the
/// biased variance: (x - mean) / sqrt(var + eps) * weight + bias (both optional).
Tensor layer_norm(const Tensor& x, const IntList& normalized_shape, const Tensor& weight = {}, const Tensor& bias = {},
                  double eps = 1e-5);
/// In training, each element zeroed with probability p and the rest scaled by
/// 1 / (1 - p) (the mask from the global generator: manual_seed makes it
/// reproducible); x itself otherwise.
Tensor dropout(const Tensor& x, double p = 0.5, bool training = true);
///@}

/// @name Grid ops (<tapegrad/tensor/grid.h>: convolutions, pooling, padding,
/// resampling, normalizations), as torch.nn.functional's
///@{
using tg::adaptive_avg_pool1d;
using tg::adaptive_avg_pool2d;
using tg::adaptive_avg_pool3d;
using tg::avg_pool1d;
using tg::avg_pool2d;
using tg::avg_pool3d;
using tg::batch_norm;
using tg::conv1d;
using tg::conv2d;
using tg::conv3d;
using tg::conv_transpose1d;
using tg::conv_transpose2d;
using tg::conv_transpose3d;
using tg::convolution;
using tg::fold;
using tg::group_norm;
using tg::instance_norm;
using tg::interpolate;
using tg::max_pool1d;
using tg::max_pool1d_with_indices;
using tg::max_pool2d;
using tg::max_pool2d_with_indices;
using tg::max_pool3d;
using tg::max_pool3d_with_indices;
using tg::pad;
using tg::pixel_shuffle;
using tg::pixel_unshuffle;
using tg::unfold;
///@}

}  // namespace functional
}  // namespace tg::nn

namespace tg {
/// LibTorch's reduction spellings (`torch::kSum` ports as `tg::kSum`).
inline constexpr nn::Reduction kNone = nn::Reduction::kNone;            ///< the values
inline constexpr nn::Reduction kMean = nn::Reduction::kMean;            ///< the mean
inline constexpr nn::Reduction kSum = nn::Reduction::kSum;              ///< the sum
inline constexpr nn::Reduction kBatchMean = nn::Reduction::kBatchMean;  ///< the sum over input.size(0)
}  // namespace tg
