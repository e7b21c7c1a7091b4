// Optimizers and learning-rate schedulers (docs/OPTIM.md), shaped like
// LibTorch's torch::optim: an optimizer holds the parameters and its state,
// step() updates every parameter that has a gradient (under no-grad, in
// place: parameters keep their addresses), zero_grad() clears the gradients.
// The update rules are PyTorch's (torch.optim.SGD, Adam, AdamW). On CUDA,
// float32/float64 parameters on one device are updated by multi-tensor
// kernels (a few launches per step), with the step counts and the learning
// rate in device memory, so a step can be captured in a CUDA graph;
// `capturable` creates the state up front and registers the parameters as
// static (docs/OPTIM.md "Fused and capturable").
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include <tapegrad/tensor/tensor.h>

namespace tg::optim {

/// The base of every optimizer.
class Optimizer {
 public:
  /// Optimizes `params` (floating-point leaves) with learning rate `lr`.
  Optimizer(std::vector<Tensor> params, double lr, const char* name);
  virtual ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;
  /// One update of every parameter that has a gradient.
  virtual void step() = 0;
  /// Drops the gradients (set_to_none), or zeroes them in place.
  void zero_grad(bool set_to_none = true);
  /// The parameters, in the order given.
  const std::vector<Tensor>& parameters() const { return params_; }
  /// The learning rate (schedulers set it).
  double lr() const { return lr_; }
  /// Sets the learning rate.
  void set_lr(double lr);
  /// How many steps were taken.
  int64_t steps() const { return steps_; }
  /// Registers every parameter (and so its .grad) as static for CUDA graphs
  /// (tg::cuda::register_static), named "<optimizer> parameter <i>"; undone
  /// when the optimizer is destroyed. Capturable optimizers do it at
  /// construction.
  void register_static();
  /// Whether step() runs the multi-tensor update: every parameter float32 or
  /// float64, contiguous, on one CUDA device.
  bool fused() const { return fused_; }

 protected:
  /// Sets up the multi-tensor update when the parameters allow it; with
  /// `capturable`, requires it (else throws naming the parameter).
  void init_fused(bool capturable);
  /// The parameters that have a gradient; throws for a sparse one when
  /// `dense_only`.
  std::vector<size_t> with_grads(bool dense_only) const;
  /// Adds one to the device step count of each parameter of `present`.
  void increment_device_steps(const std::vector<size_t>& present);
  /// Throws when a non-fused step() runs under CUDA graph capture.
  void check_capturable_step() const;

  std::vector<Tensor> params_;  ///< what is optimized
  double lr_;                   ///< the learning rate
  int64_t steps_ = 0;           ///< step() calls so far
  const char* name_;            ///< for errors
  bool fused_ = false;          ///< step() runs the multi-tensor update
  Tensor device_steps_;         ///< fused: Float64 [P] per-parameter step counts on the device
  Tensor device_lr_;            ///< fused: Float64 0-dim learning rate on the device
  bool registered_ = false;     ///< register_static() was called
};

/// SGD's settings (torch.optim.SGD's).
struct SGDOptions {
  double lr = 1e-3;         ///< learning rate
  double momentum = 0;      ///< momentum factor
  double dampening = 0;     ///< dampening of the momentum
  double weight_decay = 0;  ///< L2 penalty added to the gradient
  bool nesterov = false;    ///< Nesterov momentum (needs momentum > 0, dampening 0)
  bool capturable = false;  ///< state up front, parameters static: step() may be captured
};

/// Stochastic gradient descent with momentum, Nesterov and weight decay.
class SGD : public Optimizer {
 public:
  /// The optimizer over `params`.
  SGD(std::vector<Tensor> params, SGDOptions options = {});
  void step() override;  ///< p -= lr * (momentum-averaged gradient + weight decay)

 private:
  SGDOptions o_;
  std::vector<Tensor> buf_;  // momentum buffers (undefined until first used)
  std::vector<int64_t> t_;   // per-parameter step counts
};

/// Adam's and AdamW's settings (torch.optim.Adam's).
struct AdamOptions {
  double lr = 1e-3;         ///< learning rate
  double beta1 = 0.9;       ///< decay of the first moment
  double beta2 = 0.999;     ///< decay of the second moment
  double eps = 1e-8;        ///< added to the denominator
  double weight_decay = 0;  ///< Adam: L2 added to the gradient; AdamW: decoupled decay
  bool amsgrad = false;     ///< keep the maximum of the second moment
  bool capturable = false;  ///< state up front, parameters static: step() may be captured
};

/// Adam (Kingma and Ba), with AMSGrad as an option.
class Adam : public Optimizer {
 public:
  /// The optimizer over `params`.
  Adam(std::vector<Tensor> params, AdamOptions options = {});
  void step() override;  ///< one bias-corrected Adam update

 protected:
  /// decoupled: AdamW's weight decay (p *= 1 - lr * weight_decay first).
  Adam(std::vector<Tensor> params, AdamOptions options, bool decoupled, const char* name);

 private:
  AdamOptions o_;
  bool decoupled_;
  std::vector<Tensor> m_, v_, vmax_;  // moments (undefined until first used)
  std::vector<int64_t> t_;            // per-parameter step counts
};

/// AdamW: Adam with decoupled weight decay (default 1e-2, as PyTorch's).
class AdamW : public Adam {
 public:
  /// The optimizer over `params`; weight_decay defaults to 1e-2.
  AdamW(std::vector<Tensor> params, AdamOptions options = AdamWDefaults());
  /// AdamOptions with weight_decay = 1e-2.
  static AdamOptions AdamWDefaults();
};

/// L-BFGS's settings (torch.optim.LBFGS's).
struct LBFGSOptions {
  double lr = 1;                   ///< step length (the line search's first trial)
  int64_t max_iter = 20;           ///< iterations per step()
  int64_t max_eval = 0;            ///< closure calls per step() (0: max_iter * 5 / 4)
  double tolerance_grad = 1e-7;    ///< stop when max |gradient| is at most this
  double tolerance_change = 1e-9;  ///< stop when the step or the loss change is below this
  int64_t history_size = 100;      ///< curvature pairs kept
  bool strong_wolfe = false;       ///< line search with the strong Wolfe conditions (else fixed steps)
};

/// Limited-memory BFGS over all parameters as one vector, optionally with a
/// strong-Wolfe line search (the usual choice for PINNs after Adam). Each
/// step() runs up to max_iter iterations, calling `closure` (which must zero
/// the gradients, compute the loss, call backward and return the loss) to
/// evaluate; the loss and gradient norms are read on the host.
class LBFGS : public Optimizer {
 public:
  /// The optimizer over `params`.
  LBFGS(std::vector<Tensor> params, LBFGSOptions options = {});
  /// Not available: L-BFGS needs a closure (step(closure)); throws.
  void step() override;
  /// Up to max_iter iterations; returns the loss of the first evaluation.
  double step(const std::function<Tensor()>& closure);
  /// Closure calls so far, over all steps.
  int64_t evaluations() const { return evals_; }

 private:
  LBFGSOptions o_;
  int64_t evals_ = 0, iter_ = 0;
  Tensor d_, prev_g_;  // direction, previous gradient (flat)
  double t_ = 0, h_diag_ = 1, prev_loss_ = 0;
  std::vector<Tensor> old_y_, old_s_;
  std::vector<double> ro_;
};

/// Multiplies the learning rate by gamma every step_size epochs (StepLR).
class StepLR {
 public:
  /// Schedules `opt` from its current learning rate.
  StepLR(Optimizer& opt, int64_t step_size, double gamma = 0.1);
  /// One epoch done: sets lr = base * gamma^(epoch / step_size).
  void step();

 private:
  Optimizer& opt_;
  double base_;
  int64_t step_size_, epoch_ = 0;
  double gamma_;
};

/// Cosine annealing from the base rate to eta_min over t_max epochs
/// (CosineAnnealingLR's closed form).
class CosineAnnealingLR {
 public:
  /// Schedules `opt` from its current learning rate.
  CosineAnnealingLR(Optimizer& opt, int64_t t_max, double eta_min = 0);
  /// One epoch done: lr = eta_min + (base - eta_min) (1 + cos(pi epoch / t_max)) / 2.
  void step();

 private:
  Optimizer& opt_;
  double base_, eta_min_;
  int64_t t_max_, epoch_ = 0;
};

/// Lowers the learning rate when a metric stops improving
/// (ReduceLROnPlateau, mode "min", relative threshold).
class ReduceLROnPlateau {
 public:
  /// lr *= factor after `patience` epochs without a relative improvement of
  /// `threshold`, then waits `cooldown` epochs; never below min_lr.
  ReduceLROnPlateau(Optimizer& opt, double factor = 0.1, int64_t patience = 10, double threshold = 1e-4,
                    int64_t cooldown = 0, double min_lr = 0);
  /// One epoch done with `metric` (lower is better).
  void step(double metric);

 private:
  Optimizer& opt_;
  double factor_, threshold_, min_lr_, best_;
  int64_t patience_, cooldown_, bad_epochs_ = 0, cooldown_left_ = 0;
  bool has_best_ = false;
};

}  // namespace tg::optim
