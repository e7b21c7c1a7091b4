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

#include <cstddef>
#include <iosfwd>
#include <typeinfo>
#include <memory>
#include <string>
#include <type_traits>
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
  /// tg::Error naming themselves. A module may declare forward as
  /// LibTorch's instead (`Tensor forward(Tensor x)`, other arguments, not
  /// virtual): its holder calls that one. GCC reports such a hiding at
  /// this declaration (-Woverloaded-virtual, in -Wall from GCC 13); it is
  /// the LibTorch form and intended, so it is not reported.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Woverloaded-virtual"
#endif
  virtual Tensor forward(const Tensor& x);
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
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
  /// Registers the module a holder (Linear, Conv2d, ...) holds and returns
  /// the holder, as LibTorch's: `fc = register_module("fc", nn::Linear(2, 64));`.
  template <class H, class = typename std::decay_t<H>::ContainedType>
  std::decay_t<H> register_module(const std::string& name, H&& holder) {
    add_child(name, holder.ptr());
    return std::forward<H>(holder);
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

namespace detail {
[[noreturn]] void throw_empty_holder(const char* impl_name);
// Enabled when every M converts to std::shared_ptr<Module> (modules, holders).
template <class... M>
using IfModules = std::enable_if_t<(std::is_convertible<M, std::shared_ptr<Module>>::value && ...)>;
// The modules m... as one list (Sequential's and ModuleList's constructors).
template <class... M> std::vector<std::shared_ptr<Module>> modules_of(M&&... m) {
  return {std::shared_ptr<Module>(std::forward<M>(m))...};
}
}  // namespace detail

/// A shared handle to a module, as LibTorch's ModuleHolder: `nn::Linear`
/// holds a `std::shared_ptr<nn::LinearImpl>` (TG_MODULE declares the pair).
/// - `nn::Linear fc(2, 64)` makes the module (its constructor's arguments);
///   `nn::Linear fc{nullptr}` is empty until assigned (`fc = nn::Linear(2, 64)`
///   or `fc = register_module("fc", nn::Linear(2, 64))`); `nn::Linear fc;`
///   default-constructs the module where it has a default constructor.
/// - `fc->weight`, `fc->parameters()`: the module's members; `fc(x)` calls
///   `fc->forward(x)` with any arguments. An empty holder throws a tg::Error
///   naming the module type instead of dereferencing null.
/// - Copies share the module (it is a std::shared_ptr<Impl>): pass a holder
///   wherever a `std::shared_ptr<Module>` or `std::shared_ptr<Impl>` is taken.
template <class Impl> class ModuleHolder : public std::shared_ptr<Impl> {
 public:
  /// The module type.
  using ContainedType = Impl;
  /// A new module from its default constructor.
  ModuleHolder() : std::shared_ptr<Impl>(std::make_shared<Impl>()) {}
  /// An empty holder.
  ModuleHolder(std::nullptr_t) {}  // NOLINT: implicit, as LibTorch's
  /// Holds `module` (shared).
  ModuleHolder(std::shared_ptr<Impl> module) : std::shared_ptr<Impl>(std::move(module)) {}  // NOLINT
  /// A new module from its constructor's arguments (a holder or pointer of
  /// Impl alone is held, not nested: `Sequential(seq)` shares seq, while
  /// `Sequential(seq, Tanh())` makes a new Sequential holding both).
  template <class A0, class... A,
            class = std::enable_if_t<!std::is_same<std::decay_t<A0>, std::nullptr_t>::value &&
                                     !(sizeof...(A) == 0 && std::is_convertible<A0, std::shared_ptr<Impl>>::value) &&
                                     std::is_constructible<Impl, A0, A...>::value>>
  explicit ModuleHolder(A0&& a0, A&&... a)
      : std::shared_ptr<Impl>(std::make_shared<Impl>(std::forward<A0>(a0), std::forward<A>(a)...)) {}
  /// The module (a tg::Error if the holder is empty).
  Impl* operator->() const { return get(); }
  /// The module (a tg::Error if the holder is empty).
  Impl& operator*() const { return *get(); }
  /// The module's pointer (a tg::Error if the holder is empty).
  Impl* get() const {
    Impl* p = std::shared_ptr<Impl>::get();
    if (!p) detail::throw_empty_holder(typeid(Impl).name());
    return p;
  }
  /// The shared pointer it holds.
  const std::shared_ptr<Impl>& ptr() const { return *this; }
  /// Whether it holds no module.
  bool is_empty() const { return std::shared_ptr<Impl>::get() == nullptr; }
  /// The module's iteration (ModuleList: `for (auto& m : list)`).
  template <class I = Impl> auto begin() const -> decltype(std::declval<const I&>().begin()) { return get()->begin(); }
  /// The end of the module's iteration.
  template <class I = Impl> auto end() const -> decltype(std::declval<const I&>().end()) { return get()->end(); }
  /// The module's operator[] (Sequential, ModuleList, ModuleDict).
  template <class A> decltype(auto) operator[](A&& a) const { return (*get())[std::forward<A>(a)]; }
  /// forward(args...) of the module.
  template <class... A>
  auto operator()(A&&... a) const -> decltype(std::declval<Impl&>().forward(std::forward<A>(a)...)) {
    return get()->forward(std::forward<A>(a)...);
  }
};

/// Prints the module tree as LibTorch does: the module, then its children
/// indented, each "(name): ...".
std::ostream& operator<<(std::ostream& os, const Module& m);

}  // namespace tg::nn

/// Declares `Name` as the holder of `Name##Impl` (LibTorch's TORCH_MODULE):
/// `class NetImpl : public tg::nn::Module {...}; TG_MODULE(Net);`.
#define TG_MODULE(Name)                                     \
  class Name : public ::tg::nn::ModuleHolder<Name##Impl> {  \
   public:                                                  \
    using ::tg::nn::ModuleHolder<Name##Impl>::ModuleHolder; \
  }
