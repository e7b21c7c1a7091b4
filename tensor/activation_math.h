// Internal: the activations' derivatives of orders 0..4 as closed forms,
// shared by the CPU and CUDA kernels of activation_grad (docs/AUTOGRAD.md).
// With s = sigmoid(x), u = s (1 - s), a = 1 - 2 s, t = tanh(x), v = 1 - t^2:
//   silu     x s | s + x u | u (2 + x a) | u (a (3 + x a) - 2 x u) | u (4 a^2 + x a^3 - 8 x a u - 8 u)
//   sigmoid  s   | u       | u a         | u (a^2 - 2 u)           | u a (a^2 - 8 u)
//   tanh     t   | v       | -2 t v      | v (6 t^2 - 2)           | v t (16 - 24 t^2)
//   relu     max(x, 0) | [x > 0] | 0 ...
#pragma once

#include <cmath>

#include "tensor/kernels.h"

#if defined(__CUDACC__)
#define TG_HOST_DEVICE __host__ __device__
#else
#define TG_HOST_DEVICE
#endif

namespace tg::kernels {

template <class T>
TG_HOST_DEVICE inline T activation_derivative(Activation act, int k, T x) {
  using std::exp;
  using std::tanh;
  switch (act) {
    case Activation::Silu:
    case Activation::Sigmoid: {
      T s = T(1) / (T(1) + exp(-x));
      T u = s * (T(1) - s), a = T(1) - T(2) * s;
      if (act == Activation::Sigmoid) {
        switch (k) {
          case 0: return s;
          case 1: return u;
          case 2: return u * a;
          case 3: return u * (a * a - T(2) * u);
          default: return u * a * (a * a - T(8) * u);
        }
      }
      switch (k) {
        case 0: return x * s;
        case 1: return s + x * u;
        case 2: return u * (T(2) + x * a);
        case 3: return u * (a * (T(3) + x * a) - T(2) * x * u);
        default: return u * (T(4) * a * a + x * a * a * a - T(8) * x * a * u - T(8) * u);
      }
    }
    case Activation::Tanh: {
      T t = tanh(x), v = T(1) - t * t;
      switch (k) {
        case 0: return t;
        case 1: return v;
        case 2: return T(-2) * t * v;
        case 3: return v * (T(6) * t * t - T(2));
        default: return v * t * (T(16) - T(24) * t * t);
      }
    }
    case Activation::Relu:
      if (k == 0) return x > T(0) ? x : T(0);
      if (k == 1) return x > T(0) ? T(1) : T(0);
      return T(0);
  }
  return T(0);
}

}  // namespace tg::kernels
