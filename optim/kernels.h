// Internal: the optimizers' multi-tensor updates (docs/OPTIM.md "Fused and
// capturable"), the seam between optim/ and a device. One list entry per
// parameter; every tensor of an update is contiguous, on one device, of one
// dtype (Float32 or Float64). `steps` is a Float64 tensor of per-parameter
// step counts (already incremented for this step) and step_index[i] the
// entry of parameter i; `lr` the group's Float64 [2] {learning rate,
// momentum or β1} (Optimizer::Group::device_options): both read when the
// kernel runs, so a captured update stays right on replay. The momentum and
// β1 in the structs below are not read from there: SGD's and RMSprop's
// momentum there only says whether the optimizer keeps momentum buffers.
#pragma once

#include <cstdint>
#include <vector>

#include <tapegrad/tensor/tensor.h>

namespace tg::optim::detail {

struct AdamUpdate {
  double beta2, eps, weight_decay;
  bool amsgrad, decoupled;  // decoupled: AdamW's weight decay
};
struct SGDUpdate {
  double momentum, dampening, weight_decay;
  bool nesterov;
};
// RMSprop, Adagrad, Adamax, NAdam, RAdam (rule: Adaptive::Rule's order).
// mu_product: NAdam's running products of the momentum factors, two slots
// per parameter (Float64 [2P]; slot step % 2 holds the product of `step`
// factors), so every block of an update reads the previous step's slot and
// the first block of each tensor writes the new one without a race.
struct AdaptiveUpdate {
  int rule;
  double alpha, beta2, eps, weight_decay, momentum, lr_decay, momentum_decay;
  bool centered;
  double* mu_product;
};
struct TensorLists {
  std::vector<Tensor> param, grad, state1, state2, state3;  // state: Adam m, v, vmax; SGD buf
  std::vector<int64_t> step_index;
};

// Adam/AdamW: state1 = m, state2 = v, state3 = max v (amsgrad). SGD: state1
// = the momentum buffer (a step count of 1 initialises it with the
// gradient). Adaptive: RMSprop square_avg, momentum_buffer, grad_avg;
// Adagrad sum; Adamax exp_avg, exp_inf; NAdam and RAdam exp_avg, exp_avg_sq.
// nadam_products sets each parameter's mu_product slot of its step count to
// the product of that many factors (a resumed state), as the updates would.
// norm_partials: per block of the gradients, sum |g|^p (p finite) or max |g|
// (p infinite) as a Float64 [blocks] tensor (one element, 0, when every
// gradient is empty); clip_scale works out the p-norm from them in every
// block, writes it to `total` (0-dim, float32/float64) and multiplies each
// gradient by min(max_norm / (norm + 1e-6), 1).
struct MultiTensorUpdates {
  void (*adam)(const TensorLists& l, const Tensor& steps, const Tensor& lr, const AdamUpdate& u);
  void (*sgd)(const TensorLists& l, const Tensor& steps, const Tensor& lr, const SGDUpdate& u);
  void (*adaptive)(const TensorLists& l, const Tensor& steps, const Tensor& lr, const Tensor& mu_product,
                   const AdaptiveUpdate& u);
  void (*nadam_products)(const Tensor& steps, const Tensor& mu_product, double beta1, double momentum_decay);
  Tensor (*norm_partials)(const std::vector<Tensor>& grads, double p);
  void (*clip_scale)(const std::vector<Tensor>& grads, const Tensor& partials, double p, double max_norm,
                     const Tensor& total);
};

// The GPU's updates: defined by optim/multi_tensor.cu, null from
// optim/no_cuda.cpp (chosen at link time). The CPU has none: the optimizers
// run their per-tensor ops there.
const MultiTensorUpdates* cuda_multi_tensor_updates();

}  // namespace tg::optim::detail
