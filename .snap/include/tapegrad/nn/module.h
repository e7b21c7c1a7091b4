// Modules (docs/NN.md): parameters, buffers and submodules by name, shaped
// like LibTorch's torch::nn::Module so that porting is renaming.
//
// - A module registers its parameters, buffers and children in its
//   constructor; named_parameters() and state_dict() list them in
//   registration order with dotted names ("layers.0.weight").
// - to(device) / to(dtype) move or cast every parameter and buffer in place
//   of its tensor (the handles a module keeps stay valid, as with LibTorch's
//   set_data), gradients included.
// - load_state_dict copies values into the existing tensors (no-grad, in
//   place): shapes must match, dtypes and devices are converted.
#pragma once

#include <iosfwd>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <tapegrad/tensor/tensor.h>

namespace tg::nn {

/// Tensors by name, in registration order (a state dict, named parameters).
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

/// The base of every module.
class Module : public std::enable_shared_from_this<Module> {
 public:
  /// `type_name` names the module in errors and printouts ("Linear").
  explicit Module(std::string type_name = "Module");
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  /// The module's type name.
  const std::string& type_name() const { return type_name_; }
  /// The computation; modules that are not Tensor -> Tensor throw a
  /// tg::Error naming themselves.
  virtual Tensor forward(const Tensor& x);
  /// forward(x).
  Tensor operator()(const Tensor& x) { return forward(x); }

  /// @name Contents (registration order; recurse: include the children's)
  ///@{

  /// Parameters with their dotted names.
  NamedTensors named_parameters(bool recurse = true) const;
  /// The parameters alone.
  std::vector<Tensor> parameters(bool recurse = true) const;
  /// Buffers (state that is not trained) with their dotted names.
  NamedTensors named_buffers(bool recurse = true) const;
  /// The buffers alone.
  std::vector<Tensor> buffers(bool recurse = true) const;
  /// The direct submodules with their names.
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const;
  /// The direct submodules.
  std::vector<std::shared_ptr<Module>> children() const;
  /// Every submodule below this one, depth first, with dotted names.
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_modules() const;
  ///@}

  /// One line describing the module itself, e.g. "Linear(in_features=2,
  /// out_features=64, bias=true)"; the type name by default.
  virtual std::string extra_repr() const { return type_name_; }

  /// @name Mode, placement, gradients and state
  ///@{

  /// Training mode on or off, for this module and every submodule.
  virtual void train(bool on = true);
  /// train(false).
  void eval() { train(false); }
  /// Whether the module is in training mode.
  bool is_training() const { return training_; }
  /// Moves every parameter and buffer (and gradient) to `device`, in place.
  void to(Device device);
  /// Casts every floating-point parameter and buffer (and gradient) to `dtype`, in place; complex ones to the
  /// complex dtype of `dtype` (Complex128 for Float64).
  void to(ScalarType dtype);
  /// Drops every parameter's gradient (set_to_none), or zeroes it in place.
  void zero_grad(bool set_to_none = true);
  /// Parameters and buffers by dotted name (aliases without history).
  NamedTensors state_dict() const;
  /// Copies `state` into the parameters and buffers by name. strict: every
  /// name must match both ways (errors list the missing and unexpected ones).
  void load_state_dict(const NamedTensors& state, bool strict = true);
  ///@}

 protected:
  /// Registers a parameter (a leaf that requires grad when `requires_grad`)
  /// and returns its handle.
  Tensor register_parameter(const std::string& name, Tensor t, bool requires_grad = true);
  /// Registers a buffer and returns its handle.
  Tensor register_buffer(const std::string& name, Tensor t);
  /// Registers a submodule and returns it; a module that holds this one
  /// (itself, or an ancestor: a cycle) is refused with a tg::Error naming the path.
  template <class M> std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    add_child(name, m);
    return m;
  }

 private:
  void add_child(const std::string& name, std::shared_ptr<Module> m);
  void check_new_name(const std::string& name) const;
  void check_not_ancestor(const std::string& name, const Module& m) const;
  template <class F> void for_each_tensor(F&& f);
  std::string type_name_;
  NamedTensors params_, buffers_;
  // `own` and the children's tensors of the same kind (named_parameters, named_buffers).
  NamedTensors named_tensors(const NamedTensors& own, NamedTensors (Module::*of)(bool) const, bool recurse) const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

/// Prints the module tree as LibTorch does: the module, then its children
/// indented, each "(name): ...".
std::ostream& operator<<(std::ostream& os, const Module& m);

}  // namespace tg::nn
