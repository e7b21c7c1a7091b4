// The layers (docs/NN.md): Linear, Sequential, an MLP builder and the
// activation modules, named as LibTorch's.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <tapegrad/nn/module.h>
#include <tapegrad/tensor/device.h>

namespace tg::nn {

/// y = x W^T + b, W [out, in] and b [out] initialised as LibTorch's
/// (kaiming_uniform with a = sqrt(5), i.e. U(-1/sqrt(in), 1/sqrt(in)), for
/// both; from the global generator: manual_seed makes it reproducible).
class Linear : public Module {
 public:
  /// in_features -> out_features; `options` gives the dtype and device.
  Linear(int64_t in_features, int64_t out_features, bool bias = true, TensorOptions options = TensorOptions());
  Tensor forward(const Tensor& x) override;  ///< linear(x, weight, bias)
  std::string extra_repr() const override;   ///< "Linear(in_features=.., out_features=.., bias=..)"
  Tensor weight;                             ///< [out_features, in_features]
  Tensor bias;                               ///< [out_features], undefined without bias
};

/// Runs its modules in order.
class Sequential : public Module {
 public:
  Sequential();
  /// The modules, named "0", "1", ...
  explicit Sequential(std::vector<std::shared_ptr<Module>> modules);
  /// Appends a module (named by its position).
  void push_back(std::shared_ptr<Module> m);
  Tensor forward(const Tensor& x) override;  ///< each module on the previous one's output
  /// How many modules it holds.
  size_t size() const { return modules_.size(); }
  /// The i-th module.
  const std::shared_ptr<Module>& operator[](size_t i) const { return modules_.at(i); }

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};

/// An elementwise activation as a module (no parameters).
class Activation : public Module {
 public:
  /// `name` is its type name, `fn` the function.
  Activation(std::string name, std::function<Tensor(const Tensor&)> fn);
  Tensor forward(const Tensor& x) override;  ///< fn(x)

 private:
  std::function<Tensor(const Tensor&)> fn_;
};

/// tanh.
struct Tanh : Activation {
  Tanh();  ///< the module
};
/// x * sigmoid(x).
struct SiLU : Activation {
  SiLU();  ///< the module
};
/// max(x, 0).
struct ReLU : Activation {
  ReLU();  ///< the module
};
/// x * Phi(x) (exact), or its tanh approximation.
struct GELU : Activation {
  explicit GELU(bool tanh_approximation = false);  ///< the module
};
/// log(1 + exp(beta x)) / beta, linear above `threshold`.
struct Softplus : Activation {
  explicit Softplus(double beta = 1.0, double threshold = 20.0);  ///< the module
};
/// 1 / (1 + exp(-x)).
struct Sigmoid : Activation {
  Sigmoid();  ///< the module
};

/// x where x > 0, else negative_slope x.
struct LeakyReLU : Activation {
  explicit LeakyReLU(double negative_slope = 0.01);  ///< the module
};
/// x where x > 0, else alpha (e^x - 1).
struct ELU : Activation {
  explicit ELU(double alpha = 1.0);  ///< the module
};
/// x - tanh(x).
struct Tanhshrink : Activation {
  Tanhshrink();  ///< the module
};
/// The activation module named `name` ("tanh", "silu", "relu", "gelu",
/// "softplus", "sigmoid", "leaky_relu", "elu", "tanhshrink"); an error lists
/// them otherwise.
std::shared_ptr<Module> make_activation(const std::string& name);

/// A multilayer perceptron as a Sequential: Linear(sizes[0] -> sizes[1]),
/// activation, ..., Linear(sizes[n-2] -> sizes[n-1]) (no activation after
/// the last layer). E.g. MLP({2, 64, 64, 1}, "tanh").
std::shared_ptr<Sequential> MLP(const std::vector<int64_t>& sizes, const std::string& activation = "tanh",
                                TensorOptions options = TensorOptions());

}  // namespace tg::nn
