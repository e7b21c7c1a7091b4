// Shared by the training samples (pinn_poisson, sparse_poisson, pinn_unet,
// neural_ode): Adam, a tanh MLP given as a flat list of weights and biases,
// and "--name value" command-line options.
#pragma once

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <tapegrad/tapegrad.h>

namespace sample {

using tg::Tensor;

// "--name value" pairs into the variables registered with add(); an unknown
// name, or a name without a value, exits with status 2 naming it.
class Options {
 public:
  Options& add(const std::string& name, int64_t* v) {
    set_[name] = [v](const char* s) { *v = std::atoll(s); };
    return *this;
  }
  Options& add(const std::string& name, double* v) {
    set_[name] = [v](const char* s) { *v = std::atof(s); };
    return *this;
  }
  Options& add(const std::string& name, std::string* v) {
    set_[name] = [v](const char* s) { *v = s; };
    return *this;
  }
  Options& add(const std::string& name, bool* v) {
    set_[name] = [v](const char* s) { *v = std::atoi(s) != 0; };
    return *this;
  }
  void parse(int argc, char** argv) const {
    for (int i = 1; i < argc; i += 2) {
      auto it = set_.find(argv[i]);
      if (it == set_.end() || i + 1 >= argc) {
        std::fprintf(stderr, "%s option %s\n", it == set_.end() ? "unknown" : "no value for", argv[i]);
        std::exit(2);
      }
      it->second(argv[i + 1]);
    }
  }

 private:
  std::map<std::string, std::function<void(const char*)>> set_;
};

struct Adam {
  std::vector<Tensor> params, m, v;
  double lr, b1 = 0.9, b2 = 0.999, eps = 1e-8;
  int t = 0;
  Adam(std::vector<Tensor> p, double lr_) : params(std::move(p)), lr(lr_) {
    for (auto& q : params) {
      m.push_back(tg::zeros_like(q));
      v.push_back(tg::zeros_like(q));
    }
  }
  void step() {
    tg::NoGradGuard no_grad;
    ++t;
    const double c1 = 1 - std::pow(b1, t), c2 = 1 - std::pow(b2, t);
    for (size_t i = 0; i < params.size(); ++i) {
      Tensor g = params[i].grad();
      m[i] = m[i] * b1 + g * (1 - b1);
      v[i] = v[i] * b2 + tg::square(g) * (1 - b2);
      params[i].sub_((m[i] / c1) / (tg::sqrt(v[i] / c2) + eps) * lr);
      params[i].mutable_grad() = Tensor();
    }
  }
};

// Float64 weights [out, in] ~ N(0, 1/in) and zero biases for layer sizes
// {in, hidden..., out}, drawn from the global generator: w0, b0, w1, b1, ...
inline std::vector<Tensor> tanh_mlp_params(const std::vector<int64_t>& sizes) {
  auto f64 = tg::TensorOptions().dtype(tg::kFloat64);
  std::vector<Tensor> params;
  for (size_t l = 0; l + 1 < sizes.size(); ++l) {
    params.push_back((tg::randn({sizes[l + 1], sizes[l]}, f64) / std::sqrt(double(sizes[l]))).requires_grad_());
    params.push_back(tg::zeros({sizes[l + 1]}, f64).requires_grad_());
  }
  return params;
}

// tanh between the layers, none after the last.
inline Tensor tanh_mlp(const std::vector<Tensor>& params, const Tensor& x) {
  Tensor h = x;
  const size_t layers = params.size() / 2;
  for (size_t l = 0; l < layers; ++l) {
    h = tg::linear(h, params[2 * l], params[2 * l + 1]);
    if (l + 1 < layers) h = tg::tanh(h);
  }
  return h;
}

}  // namespace sample
