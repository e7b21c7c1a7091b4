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

#include <cmath>
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
// decoupled: NAdam's and RAdam's decoupled_weight_decay (p *= 1 - lr wd first).
struct AdaptiveUpdate {
  int rule;
  double alpha, beta2, eps, weight_decay, momentum, lr_decay, momentum_decay;
  bool centered, decoupled;
  double* mu_product;
};

#ifdef __CUDACC__
#define TG_OPTIM_HD __host__ __device__
#else
#define TG_OPTIM_HD
#endif
// NAdam's momentum factor of step k: beta1 (1 - 0.5 * 0.96^(k psi)), one
// expression for the CPU and the GPU.
TG_OPTIM_HD inline double nadam_mu(double beta1, double psi, double k) {
  return beta1 * (1 - 0.5 * ::pow(0.96, k * psi));
}
// The step counts up to which nadam_mu_product multiplies the factors one by
// one, as the updates do (so bitwise as an uninterrupted run).
constexpr int64_t kNAdamExactSteps = int64_t(1) << 20;
// The product of the factors of steps 1..n (psi >= 0) in bounded time: the
// first kNAdamExactSteps one by one, the other m of steps a..n at once,
// beta1^m prod (1 - q^k / 2) with q = 0.96^psi, whose log is (from log(1 - x)
// = -sum x^j / j, summed over k as geometric series)
// m log beta1 - sum_j 2^-j / j q^(a j) (1 - q^(m j)) / (1 - q^j),
// at most 64 terms (each under half the one before).
TG_OPTIM_HD inline double nadam_mu_product(double beta1, double psi, int64_t n) {
  const int64_t exact = n < kNAdamExactSteps ? n : kNAdamExactSteps;
  double prod = 1;
  for (int64_t k = 1; k <= exact; ++k)
    prod = prod * nadam_mu(beta1, psi, double(k));
  if (exact == n || prod == 0) return prod;  // beta1 = 0, or underflowed
  const double m = double(n - exact), a = double(exact + 1), log_q = psi * ::log(0.96);
  double log_rest = m * ::log(beta1), half_j = 1;
  for (int j = 1; j <= 64; ++j) {
    half_j *= 0.5;
    const double ratio = log_q == 0 ? m : ::expm1(m * j * log_q) / ::expm1(j * log_q);
    const double term = half_j / j * ::exp(a * j * log_q) * ratio;
    log_rest -= term;
    if (term <= 1e-17 * ::fabs(log_rest)) break;
  }
  return prod * ::exp(log_rest);
}

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
