#include <tapegrad/optim/optimizer.h>
#include "nn/grads.h"
#include "optim/kernels.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <functional>
#include <tuple>
#include <unordered_map>

#include <string>

#include <tapegrad/autograd/grad_mode.h>
#include <tapegrad/cuda/graph.h>
#include <tapegrad/tensor/error.h>
#include <tapegrad/tensor/ops.h>
#include <tapegrad/tensor/scalar_type.h>

namespace tg::optim {

Optimizer::Optimizer(std::vector<Tensor> params, double lr, const char* name)
    : Optimizer(std::vector<ParamGroup>{ParamGroup{std::move(params)}}, lr, 0.0, name) {}

Optimizer::Optimizer(std::vector<ParamGroup> groups, double lr, double weight_decay, const char* name)
    : default_lr_(lr), name_(name) {
  default_weight_decay_ = weight_decay;
  TG_CHECK(std::isfinite(lr) && lr >= 0, name_, ": the learning rate must be finite and >= 0, got ", lr);
  TG_CHECK(!groups.empty(), name_,
           ": got an empty parameter list; give it the tensors to optimize (e.g. model.parameters())");
  for (ParamGroup& g : groups)
    add_group(std::move(g));
}

void Optimizer::add_group(ParamGroup group) {
  const size_t g = groups_.size();
  TG_CHECK(!group.params.empty(), name_, ": ", g == 0 ? "got an empty parameter list" : "parameter group ",
           g == 0 ? "" : std::to_string(g), g == 0 ? "" : " is empty",
           "; give it the tensors to optimize (e.g. model.parameters())");
  const double lr = group.lr.value_or(default_lr_), wd = group.weight_decay.value_or(default_weight_decay_);
  TG_CHECK(std::isfinite(lr) && lr >= 0 && std::isfinite(wd) && wd >= 0, name_, ": parameter group ", g,
           " needs lr and weight_decay finite and >= 0, got ", lr, " and ", wd);
  std::unordered_map<const void*, size_t> seen;
  for (size_t i = 0; i < params_.size(); ++i)
    seen.emplace(params_[i].impl(), i);
  const size_t begin = params_.size();
  for (size_t k = 0; k < group.params.size(); ++k) {
    const Tensor& p = group.params[k];
    const size_t i = begin + k;
    TG_CHECK(p.defined() && is_differentiable(p.dtype()) && p.is_leaf(), name_, ": parameter ", i,
             " must be a floating-point leaf tensor", p.defined() ? "" : " (it is undefined)");
    auto [it, fresh] = seen.emplace(p.impl(), i);
    TG_CHECK(fresh, name_, ": parameter ", i, " is the same tensor as parameter ", it->second,
             " (a parameter may be in one group only)");
  }
  for (Tensor& p : group.params) {
    params_.push_back(std::move(p));
    group_of_.push_back(g);
    t_.push_back(0);
  }
  groups_.push_back(Group{begin, params_.size(), lr, wd, std::nullopt, default_momentum_, Tensor()});
  for (StateList& st : state_)
    st.list->resize(params_.size());
}

void Optimizer::add_param_group(ParamGroup group) {
  TG_CHECK(!cuda::is_current_stream_capturing(), name_, ": add_param_group during CUDA graph capture");
  const size_t first = params_.size();
  if (fused_) {
    const std::string why = fused_obstacle(group.params, first);  // checked before anything changes
    TG_CHECK(why.empty(), name_, ": the new group cannot join the multi-tensor update (", why,
             "); give it float32/float64 contiguous parameters on ", params_[0].device());
  }
  add_group(std::move(group));
  if (fused_) {
    auto opt = TensorOptions().dtype(kFloat64).device(params_[0].device());
    device_steps_ = tg::cat({device_steps_, tg::zeros({int64_t(params_.size() - first)}, opt)});
    groups_.back().device_options = device_options_of(groups_.back());
    if (registered_)
      for (size_t i = first; i < params_.size(); ++i)
        cuda::register_static(params_[i], std::string(name_) + " parameter " + std::to_string(i));
  }
  on_params_added(first);
}

std::vector<Tensor> Optimizer::group_params(size_t g) const {
  TG_CHECK(g < groups_.size(), name_, ": no parameter group ", g, " (there are ", groups_.size(), ")");
  return std::vector<Tensor>(params_.begin() + int64_t(groups_[g].begin), params_.begin() + int64_t(groups_[g].end));
}

double Optimizer::lr(size_t g) const {
  TG_CHECK(g < groups_.size(), name_, ": no parameter group ", g, " (there are ", groups_.size(), ")");
  return groups_[g].lr;
}

double Optimizer::weight_decay(size_t g) const {
  TG_CHECK(g < groups_.size(), name_, ": no parameter group ", g, " (there are ", groups_.size(), ")");
  return groups_[g].weight_decay;
}

double Optimizer::initial_lr(size_t g) {
  TG_CHECK(g < groups_.size(), name_, ": no parameter group ", g, " (there are ", groups_.size(), ")");
  if (!groups_[g].initial_lr) groups_[g].initial_lr = groups_[g].lr;
  return *groups_[g].initial_lr;
}

Optimizer::~Optimizer() {
  if (registered_)
    for (const Tensor& p : params_)
      cuda::unregister_static(p);
}

void Optimizer::zero_grad(bool set_to_none) { nn::detail::zero_grads(params_, set_to_none); }

void Optimizer::set_lr(double lr) {
  for (size_t g = 0; g < groups_.size(); ++g)
    set_lr(g, lr);
}

void Optimizer::set_lr(size_t g, double lr) {
  TG_CHECK(g < groups_.size(), name_, ": no parameter group ", g, " (there are ", groups_.size(), ")");
  TG_CHECK(std::isfinite(lr) && lr >= 0, name_, ": the learning rate must be finite and >= 0, got ", lr);
  groups_[g].lr = lr;
  if (groups_[g].device_options.defined()) {
    autograd::NoGradGuard no_grad;
    groups_[g].device_options.narrow(0, 0, 1).fill_(lr);  // a kernel on the current stream: no host sync
  }
}

double Optimizer::momentum(size_t g) const {
  TG_CHECK(has_momentum(), name_,
           " has no momentum to read or set (SGD and RMSprop have one when built with "
           "momentum > 0; Adam, AdamW, Adamax, NAdam and RAdam have beta1)");
  TG_CHECK(g < groups_.size(), name_, ": no parameter group ", g, " (there are ", groups_.size(), ")");
  return groups_[g].momentum;
}

void Optimizer::set_momentum(size_t g, double m) {
  (void)momentum(g);  // the checks
  TG_CHECK(m >= 0 && (!*momentum_is_beta_ || m < 1), name_, ": the ", *momentum_is_beta_ ? "beta1" : "momentum",
           " must be in ", *momentum_is_beta_ ? "[0, 1)" : "[0, inf)", ", got ", m);
  groups_[g].momentum = m;
  if (groups_[g].device_options.defined()) {
    autograd::NoGradGuard no_grad;
    groups_[g].device_options.narrow(0, 1, 1).fill_(m);
  }
}

void Optimizer::enable_momentum(double value, bool is_beta) {
  momentum_is_beta_ = is_beta;
  default_momentum_ = value;
  for (Group& g : groups_)
    g.momentum = value;
}

Tensor Optimizer::device_options_of(const Group& g) const {
  return tg::tensor(std::vector<double>{g.lr, g.momentum}, {2}, TensorOptions().dtype(kFloat64))
      .to(params_[0].device());
}

void Optimizer::add_number_state(const char* name, std::function<Tensor(size_t)> get,
                                 std::function<void(size_t, const Tensor&)> set, double lo, double hi) {
  numbers_.push_back({name, std::move(get), std::move(set), lo, hi});
}

void Optimizer::add_flag_option(const char* name, bool* value) { flags_.emplace_back(name, value); }

void Optimizer::claim_rates(const std::shared_ptr<int>& token, const char* who, bool constructing) {
  const std::shared_ptr<void> current = scheduler_.lock();
  TG_CHECK(constructing || !current || current.get() == token.get() || scheduler_steps_ != steps_, who, ": ",
           scheduler_name_, " already set ", name_, "'s learning rates at this optimizer step (", steps_,
           " steps taken); chained schedulers would leave the last one's rate, silently, so two schedulers may ",
           "not step one optimizer in the same epoch: combine them (SequentialLR, or one LambdaLR whose factor is ",
           "their product) or step one of them only");
  scheduler_ = token;
  scheduler_name_ = who;
  scheduler_steps_ = steps_;
}

void Optimizer::add_state(const char* name, std::vector<Tensor>* per_param, bool needed, double init) {
  per_param->resize(params_.size());
  state_.push_back({name, per_param, needed, init});
}

namespace {
Tensor f64(double v) { return tg::full({}, v, TensorOptions().dtype(kFloat64)); }
// The one number under `key` (an error naming it when absent).
double read(const std::unordered_map<std::string, const Tensor*>& state, const std::string& key, const char* name) {
  auto it = state.find(key);
  TG_CHECK(it != state.end(), name, ": the state has no '", key,
           "'; was it saved by this kind of optimizer with these groups?");
  const Tensor& t = *it->second;
  TG_CHECK(t.defined() && t.numel() == 1, name, ": state '", key, "' must hold one number, got ",
           t.defined() ? "shape " + shape_str(t.sizes()) : std::string("an undefined tensor"));
  return t.to(Device(kCPU)).to(kFloat64).item<double>();
}
// A count (steps, groups, parameters): an integer in [0, 2^53] (what a
// Float64 holds exactly), refused otherwise (NaN, inf, 1e30, -1, 2.5).
int64_t read_count(const std::unordered_map<std::string, const Tensor*>& state, const std::string& key,
                   const char* name) {
  const double v = read(state, key, name);
  TG_CHECK(v >= 0 && v <= 9007199254740992.0 && v == std::floor(v), name, ": state '", key,
           "' must be an integer count in [0, 2^53], got ", v,
           "; the state is damaged or not one that state_dict() saved: load an intact one");
  return int64_t(v);
}
// An option that must be finite and in [lo, hi] (lr, weight_decay, momentum, ...).
double read_in(const std::unordered_map<std::string, const Tensor*>& state, const std::string& key, const char* name,
               double lo, double hi) {
  const double v = read(state, key, name);
  TG_CHECK(std::isfinite(v) && v >= lo && v <= hi, name, ": state '", key, "' must be finite and in [", lo, ", ", hi,
           "], got ", v, "; the state is damaged or not one that state_dict() saved: load an intact one");
  return v;
}
}  // namespace

NamedTensors Optimizer::state_dict() const {
  NamedTensors out;
  out.emplace_back("steps", f64(double(steps_)));
  out.emplace_back("param_groups", f64(double(groups_.size())));
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::string k = "param_groups." + std::to_string(g) + ".";
    out.emplace_back(k + "params", f64(double(groups_[g].end - groups_[g].begin)));
    out.emplace_back(k + "lr", f64(groups_[g].lr));
    out.emplace_back(k + "weight_decay", f64(groups_[g].weight_decay));
    if (groups_[g].initial_lr) out.emplace_back(k + "initial_lr", f64(*groups_[g].initial_lr));
    if (has_momentum()) out.emplace_back(k + "momentum", f64(groups_[g].momentum));
  }
  // Fused, the device counts are the true ones (replays of a captured step
  // advance them, not t_).
  const std::vector<double> steps =
      fused_ ? device_steps_.to(Device(kCPU)).to_vector<double>() : std::vector<double>(t_.begin(), t_.end());
  for (size_t i = 0; i < params_.size(); ++i) {
    const std::string k = "state." + std::to_string(i) + ".";
    out.emplace_back(k + "step", f64(steps[i]));
    for (const StateList& st : state_)
      if ((*st.list)[i].defined()) out.emplace_back(k + st.name, (*st.list)[i]);
    for (const NumberState& n : numbers_)
      out.emplace_back(k + n.name, n.get(i));
  }
  for (size_t g = 0; g < groups_.size(); ++g)
    for (const auto& [name, value] : flags_)
      out.emplace_back("param_groups." + std::to_string(g) + "." + name, f64(*value ? 1.0 : 0.0));
  save_extra_state(out);
  return out;
}

void Optimizer::load_state_dict(const NamedTensors& state) {
  TG_CHECK(!cuda::is_current_stream_capturing(), name_, ": load_state_dict during CUDA graph capture");
  std::unordered_map<std::string, const Tensor*> by_name;
  for (const auto& [k, t] : state) {
    const bool fresh = by_name.emplace(k, &t).second;
    TG_CHECK(fresh, name_, ": the state has the key '", k,
             "' more than once; a state_dict() holds each key once: load an intact one");
  }
  // Everything is read and checked first (counts, rates, shapes, ranges):
  // a refused state changes nothing.
  const double inf = INFINITY;
  const int64_t n_groups = read_count(by_name, "param_groups", name_);
  TG_CHECK(n_groups == int64_t(groups_.size()), name_, ": the state has ", n_groups,
           " parameter groups, this optimizer ", groups_.size());
  const int64_t steps = read_count(by_name, "steps", name_);
  struct GroupState {
    double lr, weight_decay;
    std::optional<double> initial_lr, momentum;
  };
  std::vector<GroupState> gs;
  size_t known = 2 + 3 * groups_.size();
  std::vector<std::optional<bool>> flags(flags_.size());
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::string k = "param_groups." + std::to_string(g) + ".";
    const int64_t n = read_count(by_name, k + "params", name_);
    TG_CHECK(n == int64_t(groups_[g].end - groups_[g].begin), name_, ": group ", g, " of the state has ", n,
             " parameters, this optimizer's ", groups_[g].end - groups_[g].begin);
    gs.push_back({read_in(by_name, k + "lr", name_, 0, inf), read_in(by_name, k + "weight_decay", name_, 0, inf),
                  std::nullopt, std::nullopt});
    if (by_name.count(k + "initial_lr")) {
      gs.back().initial_lr = read_in(by_name, k + "initial_lr", name_, 0, inf);
      ++known;
    }
    if (has_momentum() && by_name.count(k + "momentum")) {
      const double m = read_in(by_name, k + "momentum", name_, 0, inf);
      TG_CHECK(!*momentum_is_beta_ || m < 1, name_, ": state '", k + "momentum", "' is ", m,
               ", out of range: beta1 must be in [0, 1)");
      gs.back().momentum = m;
      ++known;
    }
    for (size_t f = 0; f < flags_.size(); ++f) {
      const std::string key = k + flags_[f].first;
      if (!by_name.count(key)) continue;
      const double v = read(by_name, key, name_);
      TG_CHECK(v == 0 || v == 1, name_, ": state '", key, "' must be 0 or 1, got ", v);
      TG_CHECK(!flags[f] || *flags[f] == (v == 1), name_, ": state '", key, "' is ", v,
               ", another group's differs; this optimizer holds one ", flags_[f].first, " for all groups");
      flags[f] = v == 1;
      ++known;
    }
  }
  std::vector<int64_t> t(params_.size());
  std::vector<std::string> missing(params_.size());  // a state tensor the rule needs, absent
  std::vector<std::string> present(params_.size());  // one that is there
  for (size_t i = 0; i < params_.size(); ++i) {
    const std::string k = "state." + std::to_string(i) + ".";
    t[i] = read_count(by_name, k + "step", name_);
    ++known;
    for (const StateList& st : state_) {
      auto it = by_name.find(k + st.name);
      if (it == by_name.end()) {
        if (st.needed && missing[i].empty()) missing[i] = k + st.name;
        continue;
      }
      ++known;
      if (present[i].empty()) present[i] = k + st.name;
      const Tensor& v = *it->second;
      TG_CHECK(v.defined() && v.is_floating_point(), name_, ": state '", k + st.name,
               "' must be a floating-point tensor, got ",
               v.defined() ? std::string(to_string(v.dtype())) : std::string("an undefined one"));
      // (A complex parameter's state has its parts' shape, [..., 2].)
      TG_CHECK(v.sizes() == stepped(i).sizes(), name_, ": state '", k + st.name, "' has shape ", shape_str(v.sizes()),
               ", parameter ", i, " ", shape_str(params_[i].sizes()),
               is_complex(params_[i].dtype()) ? " (complex: its state has its parts' shape, a last dim of 2)" : "");
    }
    for (const NumberState& n : numbers_)
      if (by_name.count(k + n.name)) {
        (void)read_in(by_name, k + n.name, name_, n.lo, n.hi);
        ++known;
      }
  }
  const std::map<std::string, const Tensor*> sorted(by_name.begin(), by_name.end());
  known += check_extra_state(sorted);
  TG_CHECK(known == state.size(), name_, ": the state has ", state.size() - known,
           " entries this optimizer does not know (saved by another kind of optimizer?)");
  // A parameter with state (steps taken, or any state tensor) needs every
  // tensor its rule reads: a missing one would restart as zeros, silently.
  for (size_t i = 0; i < params_.size(); ++i)
    TG_CHECK(missing[i].empty() || (t[i] == 0 && present[i].empty()), name_, ": the state has no '", missing[i],
             "', which ", name_, " (with these options) needs for parameter ", i, ", whose state has ",
             present[i].empty() ? "'state." + std::to_string(i) + ".step' = " + std::to_string(t[i])
                                : "'" + present[i] + "'",
             "; the state is damaged or was saved by an optimizer with other options: load a complete one");
  autograd::NoGradGuard no_grad;
  steps_ = steps;
  for (size_t g = 0; g < groups_.size(); ++g) {
    set_lr(g, gs[g].lr);
    groups_[g].weight_decay = gs[g].weight_decay;
    groups_[g].initial_lr = gs[g].initial_lr;
    if (gs[g].momentum) set_momentum(g, *gs[g].momentum);
  }
  for (size_t f = 0; f < flags_.size(); ++f)
    if (flags[f]) *flags_[f].second = *flags[f];
  t_ = t;
  for (size_t i = 0; i < params_.size(); ++i) {
    const std::string k = "state." + std::to_string(i) + ".";
    for (const StateList& st : state_) {
      auto it = by_name.find(k + st.name);
      Tensor& dst = (*st.list)[i];
      if (it == by_name.end()) {
        // Not yet made when saved: as fresh (fused, the tensor keeps its
        // address for captured steps and takes the rule's starting value).
        if (fused_ && dst.defined()) dst.fill_(st.init);
        else dst = Tensor();
        continue;
      }
      if (!dst.defined()) dst = tg::zeros_like(stepped(i));
      dst.copy_(*it->second);
    }
  }
  if (fused_) {
    std::vector<double> steps_d(t_.begin(), t_.end());
    device_steps_.copy_(tg::tensor(steps_d, {int64_t(steps_d.size())}, TensorOptions().dtype(kFloat64)));
  }
  load_extra_state(sorted);
  on_state_loaded();
  for (size_t i = 0; i < params_.size(); ++i)
    for (const NumberState& n : numbers_) {
      auto it = by_name.find("state." + std::to_string(i) + "." + n.name);
      if (it != by_name.end()) n.set(i, *it->second);
    }
}

void Optimizer::register_static() {
  for (size_t i = 0; i < params_.size(); ++i)
    cuda::register_static(params_[i], std::string(name_) + " parameter " + std::to_string(i));
  registered_ = true;
}

std::string Optimizer::fused_obstacle(const std::vector<Tensor>& params, size_t first) const {
  const Device dev = params_[0].device();
  for (size_t k = 0; k < params.size(); ++k) {
    const Tensor& p = params[k];
    if (!p.defined()) continue;  // add_group's checks name it
    const std::string i = std::to_string(first + k);
    if (!p.is_cuda()) return "parameter " + i + " is on the CPU";
    if (p.device() != dev) return "parameters 0 and " + i + " are on different devices";
    // A complex parameter is stepped as its parts (stepped()).
    const ScalarType parts = real_type(p.dtype());
    if (parts != kFloat32 && parts != kFloat64) return "parameter " + i + " is " + std::string(to_string(p.dtype()));
    if (!p.is_contiguous()) return "parameter " + i + " is not contiguous";
  }
  if (!detail::cuda_multi_tensor_updates()) return "the build has no multi-tensor update";
  return "";
}

void Optimizer::init_fused(bool capturable) {
  const std::string why = fused_obstacle(params_, 0);
  TG_CHECK(!capturable || why.empty(), name_,
           ": capturable needs float32/float64 contiguous parameters on "
           "one CUDA device (the multi-tensor update), but ",
           why);
  if (!why.empty()) return;
  fused_ = true;
  auto opt = TensorOptions().dtype(kFloat64).device(params_[0].device());
  device_steps_ = tg::zeros({int64_t(params_.size())}, opt);
  for (Group& g : groups_)
    g.device_options = device_options_of(g);
  if (capturable) register_static();
}

namespace {
Tensor real_form(const Tensor& t) { return t.defined() && is_complex(t.dtype()) ? tg::view_as_real(t) : t; }
}  // namespace
Tensor Optimizer::stepped(size_t i) const { return real_form(params_[i]); }
Tensor Optimizer::stepped_grad(size_t i) const {
  const Tensor& g = params_[i].grad();
  TG_CHECK(!g.defined() || g.dtype() == params_[i].dtype(), name_, ": parameter ", i, " is ", params_[i].dtype(),
           " but its .grad is ", g.dtype(), " (assigned through mutable_grad()?); give it a gradient of its dtype");
  return real_form(g);
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

void Optimizer::fused_step_over(const std::vector<size_t>& present, const std::vector<std::vector<Tensor>*>& states,
                                double init,
                                const std::function<void(const detail::TensorLists&, const Group&)>& update) {
  if (present.empty()) return;
  for (size_t i : present) {
    for (std::vector<Tensor>* list : states) {
      if (!list || (*list)[i].defined()) continue;
      // Made under capture, the state would be in the graph's pool and reset by every replay.
      TG_CHECK(!cuda::is_current_stream_capturing(), name_, ": parameter ", i,
               " has no optimizer state yet, and "
               "creating it under CUDA graph capture would reset it on every replay; construct the optimizer "
               "with capturable = true (the state is made up front), or run one step before capturing");
      (*list)[i] = tg::full_like(stepped(i), init);
    }
    ++t_[i];
  }
  increment_device_steps(present);
  for (const Group& grp : groups_)
    for (ScalarType dt : {kFloat32, kFloat64}) {
      detail::TensorLists l;  // the group's parameters of this dtype
      for (size_t i : present) {
        if (i < grp.begin || i >= grp.end || stepped(i).dtype() != dt) continue;
        l.param.push_back(stepped(i));
        l.grad.push_back(stepped_grad(i).contiguous());
        std::vector<Tensor>* out[3] = {&l.state1, &l.state2, &l.state3};
        for (size_t k = 0; k < states.size() && k < 3; ++k)
          if (states[k]) out[k]->push_back((*states[k])[i]);
        l.step_index.push_back(int64_t(i));
      }
      if (!l.param.empty()) update(l, grp);
    }
}

SGD::SGD(std::vector<Tensor> params, SGDOptions options)
    : SGD(std::vector<ParamGroup>{ParamGroup{std::move(params)}}, options) {}

SGD::SGD(std::vector<ParamGroup> groups, SGDOptions options)
    : Optimizer(std::move(groups), options.lr, options.weight_decay, "SGD"), o_(options) {
  TG_CHECK(std::isfinite(o_.momentum()) && o_.momentum >= 0 && std::isfinite(o_.weight_decay()) &&
               o_.weight_decay >= 0 && !std::isnan(o_.dampening()),
           "SGD: momentum and weight_decay must be finite and >= 0 and dampening not NaN, got ", o_.momentum, " and ",
           o_.weight_decay);
  TG_CHECK(!o_.nesterov || (o_.momentum > 0 && o_.dampening == 0),
           "SGD: Nesterov momentum needs momentum > 0 and dampening = 0");
  add_state("momentum_buffer", &buf_, o_.momentum != 0);
  if (o_.momentum > 0) enable_momentum(o_.momentum, false);
  init_fused(o_.capturable);
  on_params_added(0);
}

void SGD::on_params_added(size_t first_new) {
  if (o_.capturable && o_.momentum != 0)
    for (size_t i = first_new; i < params_.size(); ++i)
      buf_[i] = tg::zeros_like(stepped(i));
}

void SGD::step() {
  autograd::NoGradGuard no_grad;
  check_capturable_step();
  const std::vector<size_t> present = with_grads(fused_);
  if (fused_) {
    const detail::MultiTensorUpdates& be = *detail::cuda_multi_tensor_updates();
    fused_step_over(present, {o_.momentum != 0 ? &buf_ : nullptr}, 0.0,
                    [&](const detail::TensorLists& l, const Group& grp) {
                      be.sgd(l, device_steps_, grp.device_options,
                             detail::SGDUpdate{o_.momentum, o_.dampening, grp.weight_decay, o_.nesterov});
                    });
    ++steps_;
    return;
  }
  for (size_t i : present) {
    ++t_[i];
    const Tensor p = stepped(i);
    const Tensor g = stepped_grad(i);
    const Group& grp = groups_[group_of_[i]];
    Tensor d = grp.weight_decay != 0 ? g.add(p, grp.weight_decay) : g;
    if (o_.momentum != 0) {
      if (t_[i] == 1 || !buf_[i].defined()) {
        buf_[i] = d.clone();
      } else {
        buf_[i].mul_(grp.momentum);
        buf_[i].add_(d, 1 - o_.dampening);
      }
      d = o_.nesterov ? d.add(buf_[i], grp.momentum) : buf_[i];
    }
    p.add_(d, -grp.lr);
  }
  ++steps_;
}

Adam::Adam(std::vector<Tensor> params, AdamOptions options)
    : Adam(std::vector<ParamGroup>{ParamGroup{std::move(params)}}, options, false, "Adam") {}

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions options) : Adam(std::move(groups), options, false, "Adam") {}

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions options, bool decoupled, const char* name)
    : Optimizer(std::move(groups), options.lr, options.weight_decay, name), o_(options), decoupled_(decoupled) {
  TG_CHECK(o_.beta1 >= 0 && o_.beta1 < 1 && o_.beta2 >= 0 && o_.beta2 < 1, name_, ": betas must be in [0, 1), got ",
           o_.beta1, " and ", o_.beta2);
  TG_CHECK(o_.eps >= 0 && std::isfinite(o_.weight_decay()) && o_.weight_decay >= 0, name_,
           ": eps must be >= 0 and weight_decay finite and >= 0");
  add_state("exp_avg", &m_);
  add_state("exp_avg_sq", &v_);
  add_state("max_exp_avg_sq", &vmax_, o_.amsgrad);
  enable_momentum(o_.beta1, true);
  init_fused(o_.capturable);
  on_params_added(0);
}

void Adam::on_params_added(size_t first_new) {
  if (!o_.capturable) return;
  for (size_t i = first_new; i < params_.size(); ++i) {
    m_[i] = tg::zeros_like(stepped(i));
    v_[i] = tg::zeros_like(stepped(i));
    if (o_.amsgrad) vmax_[i] = tg::zeros_like(stepped(i));
  }
}

void Adam::step() {
  autograd::NoGradGuard no_grad;
  check_capturable_step();
  const std::vector<size_t> present = with_grads(true);
  if (fused_) {
    const detail::MultiTensorUpdates& be = *detail::cuda_multi_tensor_updates();
    fused_step_over(present, {&m_, &v_, o_.amsgrad ? &vmax_ : nullptr}, 0.0,
                    [&](const detail::TensorLists& l, const Group& grp) {
                      be.adam(l, device_steps_, grp.device_options,
                              detail::AdamUpdate{o_.beta2, o_.eps, grp.weight_decay, o_.amsgrad, decoupled_});
                    });
    ++steps_;
    return;
  }
  for (size_t i : present) {
    const Tensor p = stepped(i);
    Tensor g = stepped_grad(i);
    const Group& grp = groups_[group_of_[i]];
    if (!m_[i].defined()) {
      m_[i] = tg::zeros_like(p);
      v_[i] = tg::zeros_like(p);
    }
    if (o_.amsgrad && !vmax_[i].defined()) vmax_[i] = tg::zeros_like(p);
    const int64_t t = ++t_[i];
    if (grp.weight_decay != 0) {
      if (decoupled_) p.mul_(1 - grp.lr * grp.weight_decay);
      else g = g.add(p, grp.weight_decay);
    }
    const double b1 = grp.momentum;
    m_[i].mul_(b1);
    m_[i].add_(g, 1 - b1);
    v_[i].mul_(o_.beta2());
    v_[i].add_(g * g, 1 - o_.beta2);
    const double bc1 = 1 - std::pow(b1, double(t)), bc2 = 1 - std::pow(o_.beta2, double(t));
    Tensor second = v_[i];
    if (o_.amsgrad) {
      vmax_[i].copy_(tg::maximum(vmax_[i], v_[i]));
      second = vmax_[i];
    }
    Tensor denom = tg::sqrt(second) / std::sqrt(bc2) + o_.eps();
    p.add_(m_[i] / denom, -grp.lr / bc1);
  }
  ++steps_;
}

AdamOptions AdamW::AdamWDefaults() {
  AdamOptions o;
  o.weight_decay = 1e-2;
  return o;
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options)
    : Adam(std::vector<ParamGroup>{ParamGroup{std::move(params)}}, options, true, "AdamW") {}
AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions options) : Adam(std::move(groups), options, true, "AdamW") {}

}  // namespace tg::optim
