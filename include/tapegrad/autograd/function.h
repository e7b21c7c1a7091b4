// Custom differentiable functions, as LibTorch's torch::autograd::Function:
//
//   struct Cube : tg::autograd::Function<Cube> {
//     static Tensor forward(AutogradContext* ctx, Tensor x) {
//       ctx->save_for_backward({x});
//       return x * x * x;
//     }
//     static variable_list backward(AutogradContext* ctx, variable_list g) {
//       Tensor x = ctx->get_saved_variables()[0];
//       return {g[0] * 3 * x * x};
//     }
//   };
//   Tensor y = Cube::apply(x);
//
// forward runs under no-grad; backward returns one gradient per argument of
// forward (undefined for non-tensor arguments or inputs without a gradient;
// with a variable_list argument, one per tensor, the lists flattened)
// and is recorded when it runs under create_graph, so it is differentiable
// again. A struct with `static constexpr bool once_differentiable = true;`
// runs backward without recording; differentiating its gradients again is
// an error naming the function (and giving its
// `static constexpr const char* once_differentiable_hint` where it has one:
// what its users should do instead). ctx->needs_input_grad(i) is false for inputs
// that need no gradient, including those edge trimming removes.
//
// Forward mode (forward_ad): a struct with
//   static variable_list jvp(AutogradContext* ctx, variable_list tangents)
// gets one tangent per tensor input (zeros where an input has none) and
// returns one per output; it runs after forward, with grad mode on (so
// forward over reverse works when its ops are differentiable). jvp reads
// what forward saved with ctx->get_saved_variables() (as backward does; also
// when nothing requires grad and no backward is recorded) and anything else
// from ctx->saved_data. Without jvp, a tangent reaching the function is an
// error naming it.
//
// Taylor mode (forward_ad::taylor_level of order K >= 2): a struct with
//   static std::vector<variable_list> taylor(AutogradContext* ctx,
//                                            std::vector<variable_list> coefficients)
// gets coefficients[j - 1][i], input i's normalized Taylor coefficient c_j
// ([layout.rows(j)] + its shape; zeros where it has none), and returns the
// outputs' the same way (c_2's c_1 c_1 products: forward_ad::taylor_cross).
// Without it, such a level reaching the function is an error naming it
// (jvp alone is not enough: it gives only the first coefficients).
#pragma once

#include <any>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <unordered_map>
#include <unordered_set>

#include <tapegrad/autograd/autograd_meta.h>
#include <tapegrad/autograd/forward_ad.h>
#include <tapegrad/autograd/grad_mode.h>
#include <tapegrad/autograd/saved_variable.h>

namespace tg::autograd {

/// What a custom Function saves in forward for its backward (docs/AUTOGRAD.md "Custom functions").
class AutogradContext {
 public:
  /// Saves tensors (checked for in-place changes) and gets them back in backward.
  void save_for_backward(variable_list to_save) { to_save_ = std::move(to_save); }
  /// The tensors save_for_backward saved (checked for in-place changes), in
  /// backward and in jvp / taylor.
  variable_list get_saved_variables() const;
  /// In-place modified inputs (forward must return them).
  void mark_dirty(const variable_list& inputs);
  /// Outputs that never get a gradient.
  void mark_non_differentiable(const variable_list& outputs);
  /// Whether forward input i (counting tensor arguments only) needs a gradient
  /// in the backward running now (in forward: whether it requires grad).
  bool needs_input_grad(size_t i) const;
  std::unordered_map<std::string, std::any> saved_data;  ///< anything else backward needs

 private:
  template <class T> friend struct Function;
  friend class CppNodeBase;
  variable_list to_save_;
  std::vector<SavedVariable> saved_;
  std::unordered_set<const TensorImpl*> dirty_, non_differentiable_;
  std::weak_ptr<Node> node_;
  std::vector<bool> forward_needs_;
};

/// The node of a custom function (type-erased part).
class CppNodeBase : public Node {
 public:
  /// A node named `name`; once_differentiable makes its backward not differentiable.
  /// `hint`: what the error of differentiating it again advises (null: the
  /// custom-function author's fix).
  explicit CppNodeBase(std::string name, bool once_differentiable, const char* hint = nullptr)
      : name_(std::move(name)), once_differentiable_(once_differentiable), hint_(hint) {}
  variable_list apply(variable_list&& grads) override;
  std::string name() const override { return name_; }
  void release_variables() override;
  bool apply_on_undefined() const override { return true; }

  AutogradContext ctx_;                     ///< the context forward filled
  std::vector<InputMetadata> output_info_;  ///< the forward outputs (for zero gradients)
  size_t num_args_ = 0;                     ///< forward arguments (tensor and not)
  std::vector<int64_t> tensor_arg_;         ///< argument index of each tensor input

  /// Set by apply(): outputs, saves, and history after forward ran.
  void wrap_outputs(const variable_list& inputs, variable_list& outputs);

 protected:
  /// Runs the user's backward.
  virtual variable_list call_backward(variable_list&& grads) = 0;

 private:
  std::string name_;
  bool once_differentiable_;
  const char* hint_;
};

namespace detail {
template <class T, class = void> struct is_once_differentiable : std::false_type {};
template <class T>
struct is_once_differentiable<T, std::void_t<decltype(T::once_differentiable)>>
    : std::bool_constant<T::once_differentiable> {};
/// A once-differentiable function's advice to its users
/// (`static constexpr const char* once_differentiable_hint`), or null.
template <class T, class = void> struct once_differentiable_hint { static constexpr const char* value = nullptr; };
template <class T> struct once_differentiable_hint<T, std::void_t<decltype(T::once_differentiable_hint)>> {
  static constexpr const char* value = T::once_differentiable_hint;
};

/// "Scale" -> "ScaleBackward" (namespaces dropped).
std::string function_node_name(const char* mangled);

template <class T> class CppNode final : public CppNodeBase {
 public:
  CppNode()
      : CppNodeBase(function_node_name(typeid(T).name()), is_once_differentiable<T>::value,
                    once_differentiable_hint<T>::value) {}

 protected:
  variable_list call_backward(variable_list&& grads) override { return T::backward(&ctx_, std::move(grads)); }
};

// The tensor arguments: a Tensor is one input, a variable_list one input per
// element (then `flat` is set: backward returns one gradient per tensor).
inline void collect(variable_list&, std::vector<int64_t>&, int64_t&, bool&) {}
template <class A, class... Rest>
void collect(variable_list& ts, std::vector<int64_t>& idx, int64_t& pos, bool& flat, const A& a, const Rest&... rest) {
  if constexpr (std::is_same_v<std::decay_t<A>, Tensor>) {
    ts.push_back(a);
    idx.push_back(pos);
  } else if constexpr (std::is_same_v<std::decay_t<A>, variable_list>) {
    for (const Tensor& t : a) {
      ts.push_back(t);
      idx.push_back(pos);
    }
    flat = true;
  }
  ++pos;
  collect(ts, idx, pos, flat, rest...);
}

template <class T, class = void> struct has_jvp : std::false_type {};
template <class T>
struct has_jvp<T, std::void_t<decltype(T::jvp(std::declval<AutogradContext*>(), std::declval<variable_list>()))>>
    : std::true_type {};

template <class T, class = void> struct has_taylor : std::false_type {};
template <class T>
struct has_taylor<
    T, std::void_t<decltype(T::taylor(std::declval<AutogradContext*>(), std::declval<std::vector<variable_list>>()))>>
    : std::true_type {};

/// Whether a Taylor level of order >= 2 is active.
bool taylor_active();
/// The inputs' Taylor coefficients, [j - 1][input] (zeros where none).
std::vector<variable_list> input_coefficients(const variable_list& inputs);
/// Stacks the coefficients taylor returned into the outputs' tangents.
void set_output_coefficients(const std::string& fn, variable_list& outputs,
                             const std::vector<variable_list>& coefficients);
/// The error for a function without a Taylor rule in a Taylor level.
[[noreturn]] void no_taylor(const std::string& fn);

/// Whether forward mode is on and an input carries a tangent.
bool any_tangent(const variable_list& inputs);
/// The inputs' tangents (zeros for floating inputs without one).
variable_list input_tangents(const variable_list& inputs);
/// Gives the outputs the tangents jvp returned (checked), named `fn`.
void set_output_tangents(const std::string& fn, variable_list& outputs, const variable_list& tangents);
/// The error for a function without jvp that met a tangent.
[[noreturn]] void no_jvp(const std::string& fn);

inline variable_list to_list(Tensor t) { return {std::move(t)}; }
inline variable_list to_list(variable_list v) { return v; }
}  // namespace detail

template <class T>
/// A custom differentiable function: T has static forward(ctx, args...) and backward(ctx, grads) (as LibTorch's
/// torch::autograd::Function).
struct Function {
  template <class... Args>
  /// Runs forward and records the node when an input requires grad.
  static auto apply(Args&&... args) {
    variable_list inputs;
    std::vector<int64_t> tensor_arg;
    int64_t pos = 0;
    bool flat = false;
    detail::collect(inputs, tensor_arg, pos, flat, args...);
    if (flat) {  // list arguments: gradients are counted per tensor
      pos = int64_t(inputs.size());
      for (size_t i = 0; i < inputs.size(); ++i)
        tensor_arg[i] = int64_t(i);
    }
    bool record = is_grad_enabled();
    bool any = false;
    for (const Tensor& t : inputs)
      any |= impl::requires_grad(t);
    record = record && any;

    auto node = std::make_shared<detail::CppNode<T>>();
    node->num_args_ = size_t(pos);
    node->tensor_arg_ = tensor_arg;
    edge_list edges;
    for (const Tensor& t : inputs)
      edges.push_back(record ? impl::gradient_edge(t) : Edge());
    node->set_next_edges(std::move(edges));
    node->ctx_.node_ = node;
    for (const Tensor& t : inputs)
      node->ctx_.forward_needs_.push_back(impl::requires_grad(t));

    const bool fw = detail::any_tangent(inputs);
    using Out = decltype(T::forward(&node->ctx_, std::forward<Args>(args)...));
    Out out = [&] {
      AutoGradMode no_grad(false);
      forward_ad::detail::Suspend no_tangents;  // jvp gives the outputs theirs
      return T::forward(&node->ctx_, std::forward<Args>(args)...);
    }();
    variable_list outs = detail::to_list(out);
    if (record) node->wrap_outputs(inputs, outs);
    if (fw && detail::taylor_active()) {
      if constexpr (detail::has_taylor<T>::value) {
        std::vector<variable_list> coefficients = detail::input_coefficients(inputs);
        {
          forward_ad::detail::Suspend pause;
          coefficients = T::taylor(&node->ctx_, std::move(coefficients));
        }
        detail::set_output_coefficients(node->name(), outs, coefficients);
      } else {
        detail::no_taylor(node->name());
      }
    } else if (fw) {
      if constexpr (detail::has_jvp<T>::value) {
        variable_list tangents = detail::input_tangents(inputs);  // read before the pause
        {
          forward_ad::detail::Suspend pause;
          tangents = T::jvp(&node->ctx_, std::move(tangents));
        }
        detail::set_output_tangents(node->name(), outs, tangents);
      } else {
        detail::no_jvp(node->name());
      }
    }
    if (!record) node->ctx_.to_save_.clear();  // kept for jvp / taylor only
    if constexpr (std::is_same_v<Out, Tensor>) return outs[0];
    else return outs;
  }
};

}  // namespace tg::autograd
