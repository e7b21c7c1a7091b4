// Optimizers and learning-rate schedulers (docs/OPTIM.md), shaped like
// LibTorch's torch::optim: an optimizer holds the parameters and its state,
// step() updates every parameter that has a gradient (under no-grad, in
// place: parameters keep their addresses), zero_grad() clears the gradients.
// The update rules are PyTorch's (torch.optim.SGD, Adam, AdamW, RMSprop,
// Adagrad, Adamax, NAdam, RAdam). On CUDA,
// float32/float64 parameters on one device are updated by multi-tensor
// kernels (a few launches per step), with the step counts and the learning
// rate in device memory, so a step can be captured in a CUDA graph;
// `capturable` creates the state up front and registers the parameters as
// static (docs/OPTIM.md "Fused and capturable").
#pragma once

#include <cstdint>
#include <array>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <tapegrad/tensor/arg.h>
#include <tapegrad/tensor/tensor.h>

namespace tg::optim {

namespace detail {
struct TensorLists;  // a multi-tensor update's lists (optim/kernels.h)
}  // namespace detail

/// Tensors by name (as tg::nn::NamedTensors): an optimizer's state dict.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

/// A parameter group (PyTorch's param_groups entry): its parameters and the
/// options it sets for them; an unset option takes the optimizer's.
struct ParamGroup {
  std::vector<Tensor> params;                         ///< the group's parameters
  std::optional<double> lr = std::nullopt;            ///< its learning rate
  std::optional<double> weight_decay = std::nullopt;  ///< its weight decay
};

/// The base of every optimizer.
class Optimizer {
 public:
  /// Optimizes `params` (floating-point leaves) with learning rate `lr`.
  Optimizer(std::vector<Tensor> params, double lr, const char* name);
  /// Optimizes parameter groups; lr and weight_decay are the defaults of
  /// the groups that do not set their own.
  Optimizer(std::vector<ParamGroup> groups, double lr, double weight_decay, const char* name);
  virtual ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;
  /// One update of every parameter that has a gradient.
  virtual void step() = 0;
  /// Drops the gradients (set_to_none), or zeroes them in place.
  void zero_grad(bool set_to_none = true);
  /// The parameters, in the order given (the groups' one after another).
  const std::vector<Tensor>& parameters() const { return params_; }
  /// The learning rate of group 0.
  double lr() const { return groups_[0].lr; }
  /// Sets the learning rate of every group.
  void set_lr(double lr);
  /// @name Parameter groups (torch.optim's param_groups)
  ///@{
  /// How many groups there are.
  size_t num_param_groups() const { return groups_.size(); }
  /// The parameters of group g.
  std::vector<Tensor> group_params(size_t g) const;
  /// The learning rate of group g.
  double lr(size_t g) const;
  /// Sets the learning rate of group g (on the device too: no host sync).
  void set_lr(size_t g, double lr);
  /// The weight decay of group g.
  double weight_decay(size_t g) const;
  /// The rate schedulers start from (PyTorch's initial_lr): set by the first
  /// scheduler made for this optimizer to the rate at that time.
  double initial_lr(size_t g);
  /// Whether the optimizer has a momentum that schedulers may set: SGD's and
  /// RMSprop's momentum (when built with momentum > 0) or β1 of Adam, AdamW,
  /// Adamax, NAdam and RAdam (what OneCycleLR cycles).
  bool has_momentum() const { return momentum_is_beta_.has_value(); }
  /// Group g's momentum (or β1); an error when has_momentum() is false.
  double momentum(size_t g) const;
  /// Sets group g's momentum (or β1; on the device too, no host sync: a
  /// captured step reads it when replayed).
  void set_momentum(size_t g, double momentum);
  /// Adds a group (PyTorch's add_param_group): its parameters must be new
  /// to the optimizer; on CUDA it joins the multi-tensor update when the
  /// optimizer has one (and must qualify when capturable).
  void add_param_group(ParamGroup group);
  ///@}
  /// @name Saving and resuming
  ///@{
  /// The state that resuming needs, by name: each group's options
  /// ("param_groups.<g>.lr", ...), each parameter's state
  /// ("state.<i>.exp_avg", "state.<i>.step", ...) and the step count
  /// ("steps"); save it with nn::save_safetensors beside the model.
  NamedTensors state_dict() const;
  /// Restores a state_dict() of an optimizer of the same kind over
  /// parameters of the same groups and shapes (every name is checked):
  /// the next step() is bitwise the one the saved optimizer would take.
  void load_state_dict(const NamedTensors& state);
  ///@}
  /// How many steps were taken.
  int64_t steps() const { return steps_; }
  /// The optimizer's name ("Adam", ...), as errors give it.
  const char* name() const { return name_; }
  /// Registers every parameter (and so its .grad) as static for CUDA graphs
  /// (tg::cuda::register_static), named "<optimizer> parameter <i>"; undone
  /// when the optimizer is destroyed. Capturable optimizers do it at
  /// construction.
  void register_static();
  /// Whether step() runs the multi-tensor update: every parameter float32 or
  /// float64, contiguous, on one CUDA device.
  bool fused() const { return fused_; }

 protected:
  /// Parameter i as the update rules step it: a complex parameter as its
  /// parts (view_as_real, [..., 2]: each part stepped as a real parameter,
  /// as PyTorch's optimizers do), a real one itself. Its state has that
  /// shape too.
  Tensor stepped(size_t i) const;
  /// Parameter i's gradient as stepped() (undefined when it has none).
  Tensor stepped_grad(size_t i) const;
  /// Sets up the multi-tensor update when the parameters allow it; with
  /// `capturable`, requires it (else throws naming the parameter).
  void init_fused(bool capturable);
  /// Why `params` (numbered from `first`) cannot join the multi-tensor
  /// update with the optimizer's ("" if they can).
  std::string fused_obstacle(const std::vector<Tensor>& params, size_t first) const;
  /// Registers per-parameter state (one entry per parameter, undefined until
  /// used) under `name` for state_dict and add_param_group. `needed`: the
  /// rule reads it (with these options), so load_state_dict refuses a state
  /// in which a parameter that has state (a step count > 0 or any state
  /// tensor) lacks it; `init`: its fresh value (Adagrad's
  /// initial_accumulator_value), given to a parameter without state on load.
  void add_state(const char* name, std::vector<Tensor>* per_param, bool needed = true, double init = 0);
  /// Called with the new parameter count after add_param_group (states of
  /// add_state are resized already).
  virtual void on_params_added(size_t first_new) { (void)first_new; }
  /// Called at the end of load_state_dict (t_ and the states restored),
  /// before the number states of add_number_state are set.
  virtual void on_state_loaded() {}
  /// Registers a per-parameter number (NAdam's mu_product) under `name` for
  /// state_dict ("state.<i>.<name>", 0-dim, from get(i)); load_state_dict
  /// refuses a saved one outside [lo, hi] and hands it to set(i, value) (an
  /// absent one is left to on_state_loaded).
  void add_number_state(const char* name, std::function<Tensor(size_t)> get,
                        std::function<void(size_t, const Tensor&)> set, double lo, double hi);
  /// State beyond the per-parameter lists (L-BFGS's history), appended to
  /// state_dict() under keys of the optimizer's own.
  virtual void save_extra_state(NamedTensors& out) const { (void)out; }
  /// Checks the entries save_extra_state wrote (present, shapes, ranges:
  /// throwing for a damaged state) without changing anything, and returns
  /// how many entries of `state` it takes.
  virtual size_t check_extra_state(const std::map<std::string, const Tensor*>& state) const {
    (void)state;
    return 0;
  }
  /// Restores them (called after every check passed).
  virtual void load_extra_state(const std::map<std::string, const Tensor*>& state) { (void)state; }
  /// Registers an optimizer-wide on/off option saved with every group
  /// ("param_groups.<g>.<name>", 0 or 1, as PyTorch's param_groups hold
  /// it); load_state_dict sets it from a state that has it.
  void add_flag_option(const char* name, bool* value);
  /// Makes the groups' momentum settable (has_momentum), starting at
  /// `value`; `is_beta`: it must stay below 1 (β1).
  void enable_momentum(double value, bool is_beta);
  /// One group: parameters [begin, end) and their options.
  struct Group {
    size_t begin;                      ///< its first parameter's index
    size_t end;                        ///< one past its last parameter's index
    double lr;                         ///< its learning rate
    double weight_decay;               ///< its weight decay
    std::optional<double> initial_lr;  ///< set by the first scheduler
    double momentum = 0;               ///< its momentum or β1 (when has_momentum)
    Tensor device_options;             ///< fused: {lr, momentum} on the device (Float64 [2])
  };
  std::vector<Group> groups_;        ///< the parameter groups
  std::vector<size_t> group_of_;     ///< each parameter's group
  std::vector<int64_t> t_;           ///< per-parameter step counts
  double default_weight_decay_ = 0;  ///< for groups that do not set theirs
  /// The parameters that have a gradient; throws for a sparse one when
  /// `dense_only`.
  std::vector<size_t> with_grads(bool dense_only) const;
  /// Adds one to the device step count of each parameter of `present`.
  void increment_device_steps(const std::vector<size_t>& present);
  /// Throws when a non-fused step() runs under CUDA graph capture.
  void check_capturable_step() const;
  /// The fused step of the parameters of `present`: makes their missing
  /// state tensors of `states` (null: unused) filled with `init` (an error
  /// under capture), counts the step on the host and the device, then calls
  /// `update(lists, group)` once per group and dtype that has parameters.
  void fused_step_over(const std::vector<size_t>& present, const std::vector<std::vector<Tensor>*>& states, double init,
                       const std::function<void(const detail::TensorLists&, const Group&)>& update);

  std::vector<Tensor> params_;  ///< what is optimized
  double default_lr_;           ///< for groups that do not set theirs
  int64_t steps_ = 0;           ///< step() calls so far
  const char* name_;            ///< for errors
  bool fused_ = false;          ///< step() runs the multi-tensor update
  Tensor device_steps_;         ///< fused: Float64 [P] per-parameter step counts on the device
  bool registered_ = false;     ///< register_static() was called
 private:
  friend class LRScheduler;
  friend class ReduceLROnPlateau;
  struct NumberState {
    std::string name;
    std::function<Tensor(size_t)> get;
    std::function<void(size_t, const Tensor&)> set;
    double lo, hi;  // its range
  };
  struct StateList {
    std::string name;
    std::vector<Tensor>* list;
    bool needed;  // the rule reads it
    double init;  // its fresh value
  };
  std::vector<StateList> state_;
  std::vector<NumberState> numbers_;
  std::vector<std::pair<std::string, bool*>> flags_;
  // The scheduler that last set the rates (alive while its token is), its
  // name and steps_ then: another live one setting them at the same step
  // count is refused (chained schedulers, docs/OPTIM.md).
  std::weak_ptr<void> scheduler_;
  const char* scheduler_name_ = nullptr;
  int64_t scheduler_steps_ = -1;
  void claim_rates(const std::shared_ptr<int>& token, const char* who, bool constructing);
  std::optional<bool> momentum_is_beta_;  // set when has_momentum
  double default_momentum_ = 0;           // for groups added later
  Tensor device_options_of(const Group& g) const;
  void add_group(ParamGroup group);
};

/// SGD's settings (torch.optim.SGD's).
struct SGDOptions {
  /// The options in their order (each with PyTorch's default); chain the setters for the rest:
  /// `SGDOptions(1e-3).momentum(...)`.
  SGDOptions(double lr = 1e-3, double momentum = 0, double dampening = 0, double weight_decay = 0,
             bool nesterov = false, bool capturable = false)
      : lr(lr),
        momentum(momentum),
        dampening(dampening),
        weight_decay(weight_decay),
        nesterov(nesterov),
        capturable(capturable) {}
  /// @name The options (fields, LibTorch's getters `o.lr()` and chained setters `o.lr(v)`)
  ///@{
  TG_ARG(SGDOptions, double, lr);            ///< learning rate
  TG_ARG(SGDOptions, double, momentum);      ///< momentum factor
  TG_ARG(SGDOptions, double, dampening);     ///< dampening of the momentum
  TG_ARG(SGDOptions, double, weight_decay);  ///< L2 penalty added to the gradient
  TG_ARG(SGDOptions, bool, nesterov);        ///< Nesterov momentum (needs momentum > 0, dampening 0)
  TG_ARG(SGDOptions, bool, capturable);      ///< state up front, parameters static: step() may be captured
  ///@}
};

/// Stochastic gradient descent with momentum, Nesterov and weight decay.
class SGD : public Optimizer {
 public:
  /// The optimizer over `params`.
  SGD(std::vector<Tensor> params, SGDOptions options = SGDOptions());
  /// The optimizer over parameter groups (options: the defaults).
  SGD(std::vector<ParamGroup> groups, SGDOptions options = SGDOptions());
  void step() override;  ///< p -= lr * (momentum-averaged gradient + weight decay)
 private:
  void on_params_added(size_t first_new) override;
  SGDOptions o_;
  std::vector<Tensor> buf_;  // momentum buffers (undefined until first used)
};

/// Adam's and AdamW's settings (torch.optim.Adam's).
struct AdamOptions {
  /// The options in their order (each with PyTorch's default); chain the setters for the rest:
  /// `AdamOptions(1e-3).beta1(...)`.
  AdamOptions(double lr = 1e-3, double beta1 = 0.9, double beta2 = 0.999, double eps = 1e-8, double weight_decay = 0,
              bool amsgrad = false, bool capturable = false)
      : lr(lr),
        beta1(beta1),
        beta2(beta2),
        eps(eps),
        weight_decay(weight_decay),
        amsgrad(amsgrad),
        capturable(capturable) {}
  /// @name The options (fields, LibTorch's getters `o.lr()` and chained setters `o.lr(v)`)
  ///@{
  TG_ARG(AdamOptions, double, lr);            ///< learning rate
  TG_ARG(AdamOptions, double, beta1);         ///< decay of the first moment
  TG_ARG(AdamOptions, double, beta2);         ///< decay of the second moment
  TG_ARG(AdamOptions, double, eps);           ///< added to the denominator
  TG_ARG(AdamOptions, double, weight_decay);  ///< Adam: L2 added to the gradient; AdamW: decoupled decay
  TG_ARG(AdamOptions, bool, amsgrad);         ///< keep the maximum of the second moment
  TG_ARG(AdamOptions, bool, capturable);      ///< state up front, parameters static: step() may be captured
  ///@}
  /// (beta1, beta2) at once, as LibTorch's `betas(std::make_tuple(0.9, 0.999))`.
  AdamOptions& betas(const std::tuple<double, double>& b) {
    beta1 = std::get<0>(b);
    beta2 = std::get<1>(b);
    return *this;
  }
  /// (beta1, beta2).
  std::tuple<double, double> betas() const { return {beta1, beta2}; }
};

/// Adam (Kingma and Ba), with AMSGrad as an option.
class Adam : public Optimizer {
 public:
  /// The optimizer over `params`.
  Adam(std::vector<Tensor> params, AdamOptions options = AdamOptions());
  /// The optimizer over parameter groups (options: the defaults).
  Adam(std::vector<ParamGroup> groups, AdamOptions options = AdamOptions());
  void step() override;  ///< one bias-corrected Adam update
 protected:
  /// decoupled: AdamW's weight decay (p *= 1 - lr * weight_decay first).
  Adam(std::vector<ParamGroup> groups, AdamOptions options, bool decoupled, const char* name);

 private:
  void on_params_added(size_t first_new) override;
  AdamOptions o_;
  bool decoupled_;
  std::vector<Tensor> m_, v_, vmax_;  // moments (undefined until first used)
};

/// AdamW's options with PyTorch's defaults (lr 1e-3, weight_decay 1e-2).
struct AdamWOptions : AdamOptions {
  /// The options with learning rate `lr` (a bare rate converts: `AdamW(params, 1e-3)` keeps weight decay 1e-2).
  AdamWOptions(double lr = 1e-3) : AdamOptions(lr) { weight_decay = 1e-2; }  // NOLINT: as LibTorch's
  /// Options given as AdamOptions, as they are.
  AdamWOptions(const AdamOptions& o) : AdamOptions(o) {}  // NOLINT: implicit
};

/// AdamW: Adam with decoupled weight decay (default 1e-2, as PyTorch's).
class AdamW : public Adam {
 public:
  /// The optimizer over `params`; weight_decay defaults to 1e-2.
  AdamW(std::vector<Tensor> params, AdamWOptions options = AdamWOptions());
  /// The optimizer over parameter groups.
  AdamW(std::vector<ParamGroup> groups, AdamWOptions options = AdamWOptions());
  /// AdamOptions with weight_decay = 1e-2.
  static AdamOptions AdamWDefaults();
};

/// L-BFGS's settings (torch.optim.LBFGS's).
struct LBFGSOptions {
  /// The options in their order (each with PyTorch's default); chain the setters for the rest:
  /// `LBFGSOptions(1e-3).max_iter(...)`.
  LBFGSOptions(double lr = 1, int64_t max_iter = 20, int64_t max_eval = 0, double tolerance_grad = 1e-7,
               double tolerance_change = 1e-9, int64_t history_size = 100, bool strong_wolfe = false)
      : lr(lr),
        max_iter(max_iter),
        max_eval(max_eval),
        tolerance_grad(tolerance_grad),
        tolerance_change(tolerance_change),
        history_size(history_size),
        strong_wolfe(strong_wolfe) {}
  /// @name The options (fields, LibTorch's getters `o.lr()` and chained setters `o.lr(v)`)
  ///@{
  TG_ARG(LBFGSOptions, double, lr);                ///< step length (the line search's first trial)
  TG_ARG(LBFGSOptions, int64_t, max_iter);         ///< iterations per step()
  TG_ARG(LBFGSOptions, int64_t, max_eval);         ///< closure calls per step() (0: max_iter * 5 / 4)
  TG_ARG(LBFGSOptions, double, tolerance_grad);    ///< stop when max |gradient| is at most this
  TG_ARG(LBFGSOptions, double, tolerance_change);  ///< stop when the step or the loss change is below this
  TG_ARG(LBFGSOptions, int64_t, history_size);     ///< curvature pairs kept
  TG_ARG(LBFGSOptions, bool, strong_wolfe);        ///< line search with the strong Wolfe conditions (else fixed steps)
  ///@}
  /// LibTorch's line_search_fn: "strong_wolfe" or none (fixed steps); another name is refused.
  LBFGSOptions& line_search_fn(const std::optional<std::string>& fn);
  /// "strong_wolfe" or none.
  std::optional<std::string> line_search_fn() const {
    return strong_wolfe ? std::optional<std::string>("strong_wolfe") : std::nullopt;
  }
};

/// Limited-memory BFGS over all parameters as one vector, optionally with a
/// strong-Wolfe line search (the usual choice for PINNs after Adam). Each
/// step() runs up to max_iter iterations, calling `closure` (which must zero
/// the gradients, compute the loss, call backward and return the loss) to
/// evaluate; the loss and gradient norms are read on the host.
class LBFGS : public Optimizer {
 public:
  /// The optimizer over `params`.
  LBFGS(std::vector<Tensor> params, LBFGSOptions options = LBFGSOptions());
  /// Not available: L-BFGS needs a closure (step(closure)); throws.
  void step() override;
  /// Up to max_iter iterations; returns the loss of the first evaluation.
  double step(const std::function<Tensor()>& closure);
  /// Closure calls so far, over all steps.
  int64_t evaluations() const { return evals_; }

 private:
  void save_extra_state(NamedTensors& out) const override;
  size_t check_extra_state(const std::map<std::string, const Tensor*>& state) const override;
  void load_extra_state(const std::map<std::string, const Tensor*>& state) override;
  LBFGSOptions o_;
  int64_t evals_ = 0, iter_ = 0;
  Tensor d_, prev_g_;  // direction, previous gradient (flat)
  double t_ = 0, h_diag_ = 1, prev_loss_ = 0;
  std::vector<Tensor> old_y_, old_s_;
  std::vector<double> ro_;
};

/// The settings of RMSprop, Adagrad, Adamax, NAdam and RAdam (set lr when
/// porting: PyTorch's defaults are 1e-2 for RMSprop and Adagrad, 2e-3 for
/// Adamax and NAdam, 1e-3 for RAdam).
struct AdaptiveOptions {
  /// The options in their order (each with PyTorch's default); chain the setters for the rest:
  /// `AdaptiveOptions(1e-3).alpha(...)`.
  AdaptiveOptions(double lr = 1e-3, double alpha = 0.99, double beta1 = 0.9, double beta2 = 0.999, double eps = 1e-8,
                  double weight_decay = 0, double momentum = 0, bool centered = false, double lr_decay = 0,
                  double initial_accumulator_value = 0, double momentum_decay = 4e-3,
                  bool decoupled_weight_decay = false, bool capturable = false)
      : lr(lr),
        alpha(alpha),
        beta1(beta1),
        beta2(beta2),
        eps(eps),
        weight_decay(weight_decay),
        momentum(momentum),
        centered(centered),
        lr_decay(lr_decay),
        initial_accumulator_value(initial_accumulator_value),
        momentum_decay(momentum_decay),
        decoupled_weight_decay(decoupled_weight_decay),
        capturable(capturable) {}
  /// @name The options (fields, LibTorch's getters `o.lr()` and chained setters `o.lr(v)`)
  ///@{
  TG_ARG(AdaptiveOptions, double, lr);            ///< learning rate
  TG_ARG(AdaptiveOptions, double, alpha);         ///< RMSprop: smoothing of the squared gradient
  TG_ARG(AdaptiveOptions, double, beta1);         ///< Adamax, NAdam, RAdam: first-moment decay
  TG_ARG(AdaptiveOptions, double, beta2);         ///< Adamax, NAdam, RAdam: second-moment decay
  TG_ARG(AdaptiveOptions, double, eps);           ///< added to the denominator (Adagrad: PyTorch's is 1e-10)
  TG_ARG(AdaptiveOptions, double, weight_decay);  ///< L2 penalty added to the gradient
  TG_ARG(AdaptiveOptions, double, momentum);      ///< RMSprop: momentum
  TG_ARG(AdaptiveOptions, bool, centered);        ///< RMSprop: divide by the estimated variance
  TG_ARG(AdaptiveOptions, double, lr_decay);      ///< Adagrad: lr / (1 + (t - 1) lr_decay)
  TG_ARG(AdaptiveOptions, double, initial_accumulator_value);  ///< Adagrad: the sum's start
  TG_ARG(AdaptiveOptions, double, momentum_decay);             ///< NAdam: psi of the momentum schedule
  TG_ARG(AdaptiveOptions, bool, decoupled_weight_decay);       ///< NAdam, RAdam: p *= 1 - lr wd first (AdamW's), not L2
  TG_ARG(AdaptiveOptions, bool, capturable);  ///< state up front, parameters static: step() may be captured
  ///@}
  /// (beta1, beta2) at once, as LibTorch's `betas(std::make_tuple(0.9, 0.999))`.
  AdaptiveOptions& betas(const std::tuple<double, double>& b) {
    beta1 = std::get<0>(b);
    beta2 = std::get<1>(b);
    return *this;
  }
  /// (beta1, beta2).
  std::tuple<double, double> betas() const { return {beta1, beta2}; }
};
/// RMSprop's options with PyTorch's defaults (lr 1e-2, alpha 0.99, eps 1e-8).
struct RMSpropOptions : AdaptiveOptions {
  /// The options with learning rate `lr`.
  RMSpropOptions(double lr = 1e-2) : AdaptiveOptions(lr) {}
  /// Options given as AdaptiveOptions, as they are.
  RMSpropOptions(const AdaptiveOptions& o) : AdaptiveOptions(o) {}  // NOLINT: implicit
};
/// Adagrad's options with PyTorch's defaults (lr 1e-2, eps 1e-10).
struct AdagradOptions : AdaptiveOptions {
  /// The options with learning rate `lr`.
  AdagradOptions(double lr = 1e-2) : AdaptiveOptions(lr) { eps = 1e-10; }
  /// Options given as AdaptiveOptions, as they are.
  AdagradOptions(const AdaptiveOptions& o) : AdaptiveOptions(o) {}  // NOLINT: implicit
};
/// Adamax's options with PyTorch's defaults (lr 2e-3).
struct AdamaxOptions : AdaptiveOptions {
  /// The options with learning rate `lr`.
  AdamaxOptions(double lr = 2e-3) : AdaptiveOptions(lr) {}
  /// Options given as AdaptiveOptions, as they are.
  AdamaxOptions(const AdaptiveOptions& o) : AdaptiveOptions(o) {}  // NOLINT: implicit
};
/// NAdam's options with PyTorch's defaults (lr 2e-3, momentum_decay 4e-3).
struct NAdamOptions : AdaptiveOptions {
  /// The options with learning rate `lr`.
  NAdamOptions(double lr = 2e-3) : AdaptiveOptions(lr) {}
  /// Options given as AdaptiveOptions, as they are.
  NAdamOptions(const AdaptiveOptions& o) : AdaptiveOptions(o) {}  // NOLINT: implicit
};
/// RAdam's options with PyTorch's defaults (lr 1e-3).
struct RAdamOptions : AdaptiveOptions {
  /// The options with learning rate `lr`.
  RAdamOptions(double lr = 1e-3) : AdaptiveOptions(lr) {}
  /// Options given as AdaptiveOptions, as they are.
  RAdamOptions(const AdaptiveOptions& o) : AdaptiveOptions(o) {}  // NOLINT: implicit
};
/// RMSprop, Adagrad, Adamax, NAdam and RAdam with PyTorch's update rules
/// (torch.optim's single-tensor forms): on CUDA one multi-tensor kernel per
/// group and dtype (fused(), capturable as Adam's); elsewhere a few tensor
/// ops per parameter.
class Adaptive : public Optimizer {
 public:
  /// Which rule.
  enum class Rule { kRMSprop, kAdagrad, kAdamax, kNAdam, kRAdam };
  /// The optimizer over parameter groups.
  Adaptive(Rule rule, std::vector<ParamGroup> groups, AdaptiveOptions options, const char* name);
  void step() override;  ///< one update of every parameter with a gradient
 private:
  void on_params_added(size_t first_new) override;
  void on_state_loaded() override;
  std::vector<std::vector<Tensor>*> used_states();  // the rule's state lists with these options
  double mu_product_after(size_t i, int64_t n);     // NAdam: parameter i's product of n factors (host)
  Tensor mu_product_of(size_t i);                   // NAdam: its product now, for state_dict
  void set_mu_product(size_t i, const Tensor& v);   // NAdam: from a state_dict
  Rule rule_;
  AdaptiveOptions o_;
  std::vector<Tensor> s1_, s2_, s3_;  // the rule's state (optim/adaptive.cpp)
  std::vector<double> mu_product_;    // NAdam: the product of the momentum factors so far,
  std::vector<int64_t> mu_steps_;     // of this many steps (recomputed when they disagree)
  Tensor device_mu_product_;          // NAdam fused: Float64 [2P], two slots per parameter (optim/kernels.h)
};
/// The options type of each rule (its PyTorch defaults).
template <Adaptive::Rule R> struct RuleOptionsOf;
/// RMSprop's.
template <> struct RuleOptionsOf<Adaptive::Rule::kRMSprop> { using type = RMSpropOptions; /**< its options */ };
/// Adagrad's.
template <> struct RuleOptionsOf<Adaptive::Rule::kAdagrad> { using type = AdagradOptions; /**< its options */ };
/// Adamax's.
template <> struct RuleOptionsOf<Adaptive::Rule::kAdamax> { using type = AdamaxOptions; /**< its options */ };
/// NAdam's.
template <> struct RuleOptionsOf<Adaptive::Rule::kNAdam> { using type = NAdamOptions; /**< its options */ };
/// RAdam's.
template <> struct RuleOptionsOf<Adaptive::Rule::kRAdam> { using type = RAdamOptions; /**< its options */ };

/// One of the rules as an optimizer: constructed from parameters or groups.
/// It takes its rule's options type, so a bare rate or `{}` keeps the
/// rule's other defaults (`Adagrad(params, 0.1)`: eps 1e-10).
template <Adaptive::Rule R> class AdaptiveRule : public Adaptive {
 public:
  /// RMSpropOptions, AdagradOptions, ...
  using Options = typename RuleOptionsOf<R>::type;
  /// The optimizer over `params` (options: the rule's PyTorch defaults, RMSpropOptions() ...).
  AdaptiveRule(std::vector<Tensor> params, Options options = Options());
  /// The optimizer over parameter groups.
  AdaptiveRule(std::vector<ParamGroup> groups, Options options = Options());
  /// The rule's PyTorch defaults (RMSpropOptions(), AdagradOptions(), ...).
  static AdaptiveOptions defaults();
};
/// RMSprop (torch.optim.RMSprop).
using RMSprop = AdaptiveRule<Adaptive::Rule::kRMSprop>;
/// Adagrad (torch.optim.Adagrad).
using Adagrad = AdaptiveRule<Adaptive::Rule::kAdagrad>;
/// Adamax (torch.optim.Adamax): Adam with the infinity norm.
using Adamax = AdaptiveRule<Adaptive::Rule::kAdamax>;
/// NAdam (torch.optim.NAdam): Adam with Nesterov momentum.
using NAdam = AdaptiveRule<Adaptive::Rule::kNAdam>;
/// RAdam (torch.optim.RAdam): Adam with the variance rectified.
using RAdam = AdaptiveRule<Adaptive::Rule::kRAdam>;
extern template class AdaptiveRule<Adaptive::Rule::kRMSprop>;
extern template class AdaptiveRule<Adaptive::Rule::kAdagrad>;
extern template class AdaptiveRule<Adaptive::Rule::kAdamax>;
extern template class AdaptiveRule<Adaptive::Rule::kNAdam>;
extern template class AdaptiveRule<Adaptive::Rule::kRAdam>;

/// The base of the epoch schedulers: each sets every group's rate to a
/// closed form of the epoch and the group's initial_lr (PyTorch's
/// chainable forms agree with these for one scheduler). The constructor
/// applies epoch 0. Two schedulers setting one optimizer's rates at the
/// same optimizer step (chained) are refused (docs/OPTIM.md).
class LRScheduler {
 public:
  /// Schedules `opt` (its groups' initial_lr are set if they are not yet).
  explicit LRScheduler(Optimizer& opt, const char* name = "LRScheduler");
  virtual ~LRScheduler() = default;
  /// One epoch (or batch, for OneCycleLR) done: applies the next epoch's rates.
  void step();
  /// The epoch the rates are at.
  int64_t epoch() const { return epoch_; }
  /// Jumps to `epoch` (resuming: the rates are those of that epoch).
  void set_epoch(int64_t epoch);
  /// The optimizer scheduled.
  const Optimizer& optimizer() const { return opt_; }
  /// The scheduler's state, as PyTorch's: "last_epoch" (Int64, 0-dim) and
  /// "base_lrs" (Float64, one initial rate per group).
  NamedTensors state_dict() const;
  /// Restores a state_dict() of a scheduler of the same schedule over as
  /// many groups (checked), and applies its epoch's rates.
  void load_state_dict(const NamedTensors& state);
  /// How many parameter groups it schedules (the optimizer's when made).
  size_t num_groups() const { return base_.size(); }
  /// Its name ("StepLR", ...), as errors give it.
  const char* name() const { return name_; }
  /// Group g's rate at `epoch`.
  virtual double lr_at(size_t g, int64_t epoch) const = 0;
  /// Group g's momentum at `epoch`, when the scheduler sets it (OneCycleLR).
  virtual std::optional<double> momentum_at(size_t g, int64_t epoch) const {
    (void)g;
    (void)epoch;
    return std::nullopt;
  }

 protected:
  /// Throws naming the scheduler unless g is one of its groups.
  void check_group(size_t g) const;
  /// Group g's initial_lr (checked).
  double base(size_t g) const;
  /// Sets group g's initial_lr, here and in the optimizer (OneCycleLR's
  /// max_lr / div_factor, as PyTorch's).
  void set_initial_lr(size_t g, double lr);
  /// Applies `epoch`'s rates (every one worked out before any is set);
  /// `constructing`: the scheduler takes the optimizer over.
  void apply(int64_t epoch, bool constructing);
  Optimizer& opt_;            ///< the optimizer scheduled
  std::vector<double> base_;  ///< each group's initial_lr
  int64_t epoch_ = 0;         ///< the current epoch
  const char* name_;          ///< for errors
  /// Alive as long as the scheduler: the optimizer's record of who set its rates.
  std::shared_ptr<int> token_ = std::make_shared<int>(0);
};
/// Multiplies the learning rate by gamma every step_size epochs (StepLR).
class StepLR : public LRScheduler {
 public:
  /// base * gamma^(epoch / step_size).
  StepLR(Optimizer& opt, int64_t step_size, double gamma = 0.1);
  double lr_at(size_t g, int64_t epoch) const override;  ///< the closed form
 private:
  int64_t step_size_;
  double gamma_;
};
/// Cosine annealing from the base rate to eta_min over t_max epochs
/// (CosineAnnealingLR's closed form).
class CosineAnnealingLR : public LRScheduler {
 public:
  /// eta_min + (base - eta_min) (1 + cos(pi epoch / t_max)) / 2.
  CosineAnnealingLR(Optimizer& opt, int64_t t_max, double eta_min = 0);
  double lr_at(size_t g, int64_t epoch) const override;  ///< the closed form
 private:
  double eta_min_;
  int64_t t_max_;
};
/// base * lambda(epoch) (LambdaLR).
class LambdaLR : public LRScheduler {
 public:
  /// lambda gives the factor of the base rate at each epoch.
  LambdaLR(Optimizer& opt, std::function<double(int64_t)> lambda);
  /// One lambda per parameter group, in order (PyTorch's list form).
  LambdaLR(Optimizer& opt, std::vector<std::function<double(int64_t)>> lambdas);
  double lr_at(size_t g, int64_t epoch) const override;  ///< base * lambda(epoch)
 private:
  std::vector<std::function<double(int64_t)>> lambdas_;  // one per group
};
/// base * gamma^epoch (ExponentialLR).
class ExponentialLR : public LRScheduler {
 public:
  /// The decay per epoch.
  ExponentialLR(Optimizer& opt, double gamma);
  double lr_at(size_t g, int64_t epoch) const override;  ///< base * gamma^epoch
 private:
  double gamma_;
};
/// The factor moves linearly from start_factor to end_factor over
/// total_iters epochs, then stays (LinearLR).
class LinearLR : public LRScheduler {
 public:
  /// PyTorch's defaults: 1/3 to 1 over 5 epochs.
  LinearLR(Optimizer& opt, double start_factor = 1.0 / 3, double end_factor = 1.0, int64_t total_iters = 5);
  double lr_at(size_t g, int64_t epoch) const override;  ///< base * the factor
 private:
  double start_, end_;
  int64_t total_;
};
/// The one-cycle policy (OneCycleLR): the rate from max_lr / div_factor up
/// to max_lr over pct_start of total_steps, then down to that /
/// final_div_factor, cosine (or linear) annealing; with cycle_momentum the
/// momentum (β1) the other way, from max_momentum down to base_momentum and
/// back (the optimizer must have one: has_momentum). Stepped once per batch.
class OneCycleLR : public LRScheduler {
 public:
  /// The schedule over total_steps steps, one max_lr for every group.
  OneCycleLR(Optimizer& opt, double max_lr, int64_t total_steps, double pct_start = 0.3, bool cos_anneal = true,
             double div_factor = 25, double final_div_factor = 1e4, bool three_phase = false,
             bool cycle_momentum = true, double base_momentum = 0.85, double max_momentum = 0.95);
  /// The schedule with a max_lr per parameter group (PyTorch's list form).
  OneCycleLR(Optimizer& opt, std::vector<double> max_lrs, int64_t total_steps, double pct_start = 0.3,
             bool cos_anneal = true, double div_factor = 25, double final_div_factor = 1e4, bool three_phase = false,
             bool cycle_momentum = true, double base_momentum = 0.85, double max_momentum = 0.95);
  double lr_at(size_t g, int64_t epoch) const override;  ///< PyTorch's phases
  /// max_momentum down to base_momentum and back (cycle_momentum), else none.
  std::optional<double> momentum_at(size_t g, int64_t epoch) const override;

 private:
  double along(int64_t e, double start, const std::vector<double>& ends) const;
  int64_t total_;
  bool cos_;
  std::vector<double> max_;  // per group
  double div_, final_div_;
  bool cycle_momentum_;
  double max_momentum_;
  std::vector<double> phase_end_;  // each phase's last step
  std::vector<double> lr_end_;     // each phase's end rate, a fraction of max_lr (from 1 / div)
  std::vector<double> mom_end_;    // each phase's end momentum (from max_momentum)
};
/// Runs schedulers one after another, switching at the milestones; each
/// starts at its own epoch 0 (SequentialLR).
class SequentialLR : public LRScheduler {
 public:
  /// schedulers.size() == milestones.size() + 1, milestones increasing.
  SequentialLR(Optimizer& opt, std::vector<std::shared_ptr<LRScheduler>> schedulers, std::vector<int64_t> milestones);
  double lr_at(size_t g, int64_t epoch) const override;  ///< the current scheduler's rate
  /// The current scheduler's momentum.
  std::optional<double> momentum_at(size_t g, int64_t epoch) const override;

 private:
  std::pair<size_t, int64_t> current(int64_t epoch) const;  // the scheduler and its epoch
  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
  std::vector<int64_t> milestones_;
};
/// Lowers the learning rate when a metric stops improving
/// (ReduceLROnPlateau): each group's own rate, as PyTorch's.
class ReduceLROnPlateau {
 public:
  /// Each group's lr *= factor after `patience` epochs without an
  /// improvement of `threshold` (relative: "rel", or "abs"), then waits
  /// `cooldown` epochs; never below min_lr, and not when the change would
  /// be at most eps. mode "min": lower is better, "max": higher.
  ReduceLROnPlateau(Optimizer& opt, double factor = 0.1, int64_t patience = 10, double threshold = 1e-4,
                    int64_t cooldown = 0, double min_lr = 0, const std::string& mode = "min",
                    const std::string& threshold_mode = "rel", double eps = 1e-8);
  /// With one min_lr per parameter group, in order (PyTorch's list form).
  ReduceLROnPlateau(Optimizer& opt, double factor, int64_t patience, double threshold, int64_t cooldown,
                    std::vector<double> min_lrs, const std::string& mode = "min",
                    const std::string& threshold_mode = "rel", double eps = 1e-8);
  /// One epoch done with `metric` (a NaN one is never an improvement).
  void step(double metric);
  /// The best metric so far (+inf in mode "min", -inf in "max" before any).
  double best() const { return best_; }
  /// The optimizer scheduled.
  const Optimizer& optimizer() const { return opt_; }
  /// The scheduler's state, as PyTorch's: "best" (Float64), "num_bad_epochs"
  /// and "cooldown_counter" (Int64), all 0-dim. The rates themselves are the
  /// optimizer's (in its state_dict).
  NamedTensors state_dict() const;
  /// Restores a state_dict() (each entry checked: present, 0-dim, in range).
  void load_state_dict(const NamedTensors& state);

 private:
  bool better(double metric) const;
  Optimizer& opt_;
  double factor_, threshold_, eps_, best_;
  std::vector<double> min_lrs_;  // per group
  bool max_mode_, abs_threshold_;
  int64_t patience_, cooldown_, bad_epochs_ = 0, cooldown_left_ = 0;
  std::shared_ptr<int> token_ = std::make_shared<int>(0);  // for the optimizer's claim_rates
};

/// Scales the gradients of `params` so that their joint norm_type-norm is
/// at most max_norm (by max_norm / (norm + 1e-6) where above, as PyTorch's);
/// returns the norm before clipping as a 0-dim tensor on the gradients'
/// device. Nothing is read on the host (so it may be captured in a CUDA
/// graph) unless error_if_nonfinite asks for the check. On one CUDA device
/// (float32/float64, contiguous) a multi-tensor norm and scaling.
Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);
/// Clamps every gradient of `params` to [-clip_value, clip_value] in place.
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);

}  // namespace tg::optim
