// The layers (docs/NN.md): Linear, Sequential, an MLP builder and the
// activation modules, named as LibTorch's.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include <tapegrad/nn/module.h>
#include <tapegrad/nn/options.h>
#include <tapegrad/tensor/device.h>

namespace tg::nn {

/// y = x W^T + b, W [out, in] and b [out] initialised as LibTorch's
/// (kaiming_uniform with a = sqrt(5), i.e. U(-1/sqrt(in), 1/sqrt(in)), for
/// both; from the global generator: manual_seed makes it reproducible).
class LinearImpl : public Module {
 public:
  /// in_features -> out_features; `options` gives the dtype and device.
  LinearImpl(int64_t in_features, int64_t out_features, bool bias = true, TensorOptions options = TensorOptions());
  /// From LibTorch's options.
  explicit LinearImpl(const LinearOptions& o) : LinearImpl(o.in_features, o.out_features, o.bias) {}
  Tensor forward(const Tensor& x) override;  ///< linear(x, weight, bias)
  std::string extra_repr() const override;   ///< "Linear(in_features=.., out_features=.., bias=..)"
  Tensor weight;                             ///< [out_features, in_features]
  Tensor bias;                               ///< [out_features], undefined without bias
};
TG_MODULE(Linear);

/// Runs its modules in order.
class SequentialImpl : public Module {
 public:
  SequentialImpl();
  /// The modules, named "0", "1", ...
  explicit SequentialImpl(std::vector<std::shared_ptr<Module>> modules);
  /// The modules given one by one, as LibTorch's: `Sequential(Linear(2, 64), Tanh(), Linear(64, 1))`.
  template <class M0, class... M, class = detail::IfModules<M0, M...>>
  explicit SequentialImpl(M0&& m0, M&&... m)
      : SequentialImpl(detail::modules_of(std::forward<M0>(m0), std::forward<M>(m)...)) {}
  /// Appends a module (named by its position).
  void push_back(std::shared_ptr<Module> m);
  Tensor forward(const Tensor& x) override;  ///< each module on the previous one's output
  /// How many modules it holds.
  size_t size() const { return modules_.size(); }
  /// The i-th module (a tg::Error past the end).
  const std::shared_ptr<Module>& operator[](size_t i) const;

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};
TG_MODULE(Sequential);

/// An elementwise activation as a module (no parameters).
class ActivationImpl : public Module {
 public:
  /// `name` is its type name, `fn` the function.
  ActivationImpl(std::string name, std::function<Tensor(const Tensor&)> fn);
  Tensor forward(const Tensor& x) override;  ///< fn(x)

 private:
  std::function<Tensor(const Tensor&)> fn_;
};
TG_MODULE(Activation);

/// tanh.
struct TanhImpl : ActivationImpl {
  TanhImpl();  ///< the module
};
TG_MODULE(Tanh);
/// x * sigmoid(x).
struct SiLUImpl : ActivationImpl {
  SiLUImpl();  ///< the module
};
TG_MODULE(SiLU);
/// max(x, 0).
struct ReLUImpl : ActivationImpl {
  ReLUImpl();  ///< the module
};
TG_MODULE(ReLU);
/// x * Phi(x) (exact), or its tanh approximation.
struct GELUImpl : ActivationImpl {
  explicit GELUImpl(bool tanh_approximation = false);  ///< the module
};
TG_MODULE(GELU);
/// log(1 + exp(beta x)) / beta, linear above `threshold`.
struct SoftplusImpl : ActivationImpl {
  explicit SoftplusImpl(double beta = 1.0, double threshold = 20.0);  ///< the module
};
TG_MODULE(Softplus);
/// 1 / (1 + exp(-x)).
struct SigmoidImpl : ActivationImpl {
  SigmoidImpl();  ///< the module
};
TG_MODULE(Sigmoid);

/// x where x > 0, else negative_slope x.
struct LeakyReLUImpl : ActivationImpl {
  explicit LeakyReLUImpl(double negative_slope = 0.01);  ///< the module
};
TG_MODULE(LeakyReLU);
/// x where x > 0, else alpha (e^x - 1).
struct ELUImpl : ActivationImpl {
  explicit ELUImpl(double alpha = 1.0);  ///< the module
};
TG_MODULE(ELU);
/// x - tanh(x).
struct TanhshrinkImpl : ActivationImpl {
  TanhshrinkImpl();  ///< the module
};
TG_MODULE(Tanhshrink);
/// The activation module named `name` ("tanh", "silu", "relu", "gelu",
/// "softplus", "sigmoid", "leaky_relu", "elu", "tanhshrink"); an error lists
/// them otherwise.
std::shared_ptr<Module> make_activation(const std::string& name);

/// A multilayer perceptron as a Sequential: Linear(sizes[0] -> sizes[1]),
/// activation, ..., Linear(sizes[n-2] -> sizes[n-1]) (no activation after
/// the last layer). E.g. MLP({2, 64, 64, 1}, "tanh").
Sequential MLP(const std::vector<int64_t>& sizes, const std::string& activation = "tanh",
               TensorOptions options = TensorOptions());

}  // namespace tg::nn
