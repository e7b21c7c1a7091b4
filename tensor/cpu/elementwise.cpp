// CPU elementwise kernels: copy/convert, fill, binary, compare, unary, where.
#include <cmath>
#include <cstring>
#include <limits>

#include <Eigen/Core>

#include "tensor/activation_math.h"
#include "tensor/cpu/cpu_kernels.h"
#include "tensor/cpu/loops.h"

namespace tg::cpu {
namespace {

using kernels::BinaryOp;
using kernels::CompareOp;
using kernels::UnaryOp;

// ---- conversions ---------------------------------------------------------------
template <class T>
constexpr bool is_half_v = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

template <class D, class S>
inline D convert(S s) {
  if constexpr (is_half_v<S>) {
    return convert<D>(float(s));
  } else if constexpr (is_half_v<D>) {
    return D(float(s));
  } else if constexpr (std::is_same_v<D, bool>) {
    return s != S(0);
  } else {
    return static_cast<D>(s);
  }
}

template <class F>
void dispatch_all(ScalarType t, F&& f) {
  switch (t) {
    case ScalarType::Float32: f(float{}); return;
    case ScalarType::Float64: f(double{}); return;
    case ScalarType::BFloat16: f(BFloat16{}); return;
    case ScalarType::Float16: f(Half{}); return;
    case ScalarType::Int64: f(int64_t{}); return;
    case ScalarType::Bool: f(bool{}); return;
  }
}

template <class D, class S>
void copy_typed(const Tensor& dst, const Tensor& src) {
  Tensor ops[2] = {dst, src};
  for_each(ops, 2, [](char** p, const int64_t* s, int64_t n) {
    if (s[0] == sizeof(D) && s[1] == sizeof(S)) {
      D* o = reinterpret_cast<D*>(p[0]);
      const S* a = reinterpret_cast<const S*>(p[1]);
      if constexpr (std::is_same_v<D, S>) {
        std::memcpy(o, a, size_t(n) * sizeof(D));
      } else {
        for (int64_t i = 0; i < n; ++i) o[i] = convert<D>(a[i]);
      }
      return;
    }
    for (int64_t i = 0; i < n; ++i)
      *reinterpret_cast<D*>(p[0] + i * s[0]) =
          convert<D>(*reinterpret_cast<const S*>(p[1] + i * s[1]));
  });
}

void copy_kernel(const Tensor& dst, const Tensor& src) {
  dispatch_all(dst.dtype(), [&](auto d) {
    dispatch_all(src.dtype(), [&](auto s) {
      copy_typed<decltype(d), decltype(s)>(dst, src);
    });
  });
}

void fill_kernel(const Tensor& dst, Scalar v) {
  dispatch_all(dst.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T value = v.is_integral() ? convert<T>(v.to_int()) : convert<T>(v.to_double());
    Tensor ops[1] = {dst};
    for_each(ops, 1, [value](char** p, const int64_t* s, int64_t n) {
      if (s[0] == sizeof(T)) {
        T* o = reinterpret_cast<T*>(p[0]);
        for (int64_t i = 0; i < n; ++i) o[i] = value;
      } else {
        for (int64_t i = 0; i < n; ++i)
          *reinterpret_cast<T*>(p[0] + i * s[0]) = value;
      }
    });
  });
}

// ---- binary --------------------------------------------------------------------
template <class T>
inline T ipow(T base, T e) {
  if (e < 0) {
    if (base == 1) return 1;
    if (base == -1) return (e % 2 == 0) ? 1 : -1;
    return 0;
  }
  T r = 1;
  while (e) {
    if (e & 1) r *= base;
    base *= base;
    e >>= 1;
  }
  return r;
}

// Functor types (not function pointers) so each loop inlines its op.
struct AddF {
  template <class T> T operator()(T a, T b) const { return a + b; }
};
struct SubF {
  template <class T> T operator()(T a, T b) const { return a - b; }
};
struct MulF {
  template <class T> T operator()(T a, T b) const { return a * b; }
};
struct DivF {
  template <class T> T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) return b == 0 ? T(0) : a / b;
    else return a / b;
  }
};
struct PowF {
  template <class T> T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) return ipow(a, b);
    else return std::pow(a, b);
  }
};
// NaN-propagating, as torch.maximum/minimum.
struct MaxF {
  template <class T> T operator()(T a, T b) const {
    if constexpr (!std::is_integral_v<T>)
      if (a != a || b != b) return std::numeric_limits<T>::quiet_NaN();
    return a > b ? a : b;
  }
};
struct MinF {
  template <class T> T operator()(T a, T b) const {
    if constexpr (!std::is_integral_v<T>)
      if (a != a || b != b) return std::numeric_limits<T>::quiet_NaN();
    return a < b ? a : b;
  }
};

// out[i] = f(a[i], b[i]); contiguous and scalar-operand fast paths.
template <class T, class R, class F>
void binary_loop(const Tensor& out, const Tensor& a, const Tensor& b, F f) {
  Tensor ops[3] = {out, a, b};
  for_each(ops, 3, [f](char** p, const int64_t* s, int64_t n) {
    R* o = reinterpret_cast<R*>(p[0]);
    const T* x = reinterpret_cast<const T*>(p[1]);
    const T* y = reinterpret_cast<const T*>(p[2]);
    if (s[0] == sizeof(R) && s[1] == sizeof(T) && s[2] == sizeof(T)) {
      for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], y[i]);
    } else if (s[0] == sizeof(R) && s[1] == sizeof(T) && s[2] == 0) {
      const T yv = *y;
      for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], yv);
    } else if (s[0] == sizeof(R) && s[1] == 0 && s[2] == sizeof(T)) {
      const T xv = *x;
      for (int64_t i = 0; i < n; ++i) o[i] = f(xv, y[i]);
    } else {
      for (int64_t i = 0; i < n; ++i)
        *reinterpret_cast<R*>(p[0] + i * s[0]) =
            f(*reinterpret_cast<const T*>(p[1] + i * s[1]),
              *reinterpret_cast<const T*>(p[2] + i * s[2]));
    }
  });
}

void binary_kernel(BinaryOp op, const Tensor& out, const Tensor& a,
                   const Tensor& b) {
  dispatch_compute(out.dtype(), "binary", [&](auto tag) {
    using T = decltype(tag);
    switch (op) {
      case BinaryOp::Add: return binary_loop<T, T>(out, a, b, AddF{});
      case BinaryOp::Sub: return binary_loop<T, T>(out, a, b, SubF{});
      case BinaryOp::Mul: return binary_loop<T, T>(out, a, b, MulF{});
      case BinaryOp::Div: return binary_loop<T, T>(out, a, b, DivF{});
      case BinaryOp::Pow: return binary_loop<T, T>(out, a, b, PowF{});
      case BinaryOp::Max: return binary_loop<T, T>(out, a, b, MaxF{});
      case BinaryOp::Min: return binary_loop<T, T>(out, a, b, MinF{});
    }
  });
}

// out = g * act^(order)(x). The switch on (act, order) is hoisted out of the
// loop so each instance vectorises.
template <class T, Activation A, int K>
void activation_grad_typed(const Tensor& out, const Tensor& g, const Tensor& x) {
  binary_loop<T, T>(out, g, x,
                    [](T gv, T xv) { return gv * kernels::activation_derivative<T>(A, K, xv); });
}

template <class T, Activation A>
void activation_grad_order(int order, const Tensor& out, const Tensor& g, const Tensor& x) {
  switch (order) {
    case 0: return activation_grad_typed<T, A, 0>(out, g, x);
    case 1: return activation_grad_typed<T, A, 1>(out, g, x);
    case 2: return activation_grad_typed<T, A, 2>(out, g, x);
    case 3: return activation_grad_typed<T, A, 3>(out, g, x);
    default: return activation_grad_typed<T, A, 4>(out, g, x);
  }
}

void activation_grad_kernel(Activation act, int order, const Tensor& out, const Tensor& g,
                            const Tensor& x) {
  dispatch_compute(out.dtype(), "activation_grad", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T>) {
      switch (act) {
        case Activation::Silu: return activation_grad_order<T, Activation::Silu>(order, out, g, x);
        case Activation::Sigmoid: return activation_grad_order<T, Activation::Sigmoid>(order, out, g, x);
        case Activation::Tanh: return activation_grad_order<T, Activation::Tanh>(order, out, g, x);
        case Activation::Relu: return activation_grad_order<T, Activation::Relu>(order, out, g, x);
      }
    } else {
      TG_INTERNAL_ASSERT(false, "activation_grad: integer dtype");
    }
  });
}

void compare_kernel(CompareOp op, const Tensor& out, const Tensor& a,
                    const Tensor& b) {
  dispatch_compute(a.dtype(), "compare", [&](auto tag) {
    using T = decltype(tag);
    switch (op) {
      case CompareOp::Eq:
        return binary_loop<T, bool>(out, a, b, [](T x, T y) { return x == y; });
      case CompareOp::Ne:
        return binary_loop<T, bool>(out, a, b, [](T x, T y) { return x != y; });
      case CompareOp::Lt:
        return binary_loop<T, bool>(out, a, b, [](T x, T y) { return x < y; });
      case CompareOp::Le:
        return binary_loop<T, bool>(out, a, b, [](T x, T y) { return x <= y; });
      case CompareOp::Gt:
        return binary_loop<T, bool>(out, a, b, [](T x, T y) { return x > y; });
      case CompareOp::Ge:
        return binary_loop<T, bool>(out, a, b, [](T x, T y) { return x >= y; });
    }
  });
}

// ---- unary -----------------------------------------------------------------------
template <class T>
using ArrayMap = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <class T>
using ConstArrayMap = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

// f: scalar function; v: Eigen array expression used on contiguous runs
// (vectorized exp/log/tanh/...), or nullptr_t to use f there too.
template <class T, class F, class V>
void unary_loop(const Tensor& out, const Tensor& x, F f, V v) {
  Tensor ops[2] = {out, x};
  for_each(ops, 2, [f, v](char** p, const int64_t* s, int64_t n) {
    if (s[0] == sizeof(T) && s[1] == sizeof(T)) {
      T* o = reinterpret_cast<T*>(p[0]);
      const T* a = reinterpret_cast<const T*>(p[1]);
      if constexpr (!std::is_same_v<V, std::nullptr_t>) {
        ArrayMap<T>(o, n) = v(ConstArrayMap<T>(a, n));
      } else {
        for (int64_t i = 0; i < n; ++i) o[i] = f(a[i]);
      }
      return;
    }
    for (int64_t i = 0; i < n; ++i)
      *reinterpret_cast<T*>(p[0] + i * s[0]) =
          f(*reinterpret_cast<const T*>(p[1] + i * s[1]));
  });
}

template <class T>
T sign_of(T x) {
  if constexpr (!std::is_integral_v<T>)
    if (x != x) return x;
  return T((x > T(0)) - (x < T(0)));
}

template <class T>
void unary_float(UnaryOp op, const Tensor& out, const Tensor& x,
                 const kernels::UnaryParams& prm) {
  using std::nullptr_t;
  const T kSqrt1_2 = T(0.70710678118654752440);
  const T kSqrt2OverPi = T(0.79788456080286535588);
  switch (op) {
    case UnaryOp::Exp:
      return unary_loop<T>(out, x, [](T a) { return std::exp(a); },
                           [](const auto& a) { return a.exp(); });
    case UnaryOp::Log:
      return unary_loop<T>(out, x, [](T a) { return std::log(a); },
                           [](const auto& a) { return a.log(); });
    case UnaryOp::Sin:
      return unary_loop<T>(out, x, [](T a) { return std::sin(a); },
                           [](const auto& a) { return a.sin(); });
    case UnaryOp::Cos:
      return unary_loop<T>(out, x, [](T a) { return std::cos(a); },
                           [](const auto& a) { return a.cos(); });
    case UnaryOp::Tanh:
      return unary_loop<T>(out, x, [](T a) { return std::tanh(a); },
                           [](const auto& a) { return a.tanh(); });
    case UnaryOp::Sigmoid:
      return unary_loop<T>(out, x, [](T a) { return T(1) / (T(1) + std::exp(-a)); },
                           [](const auto& a) { return a.logistic(); });
    case UnaryOp::Silu:
      // One formula for both paths (and CUDA's): silu(-inf) is NaN, as -inf / inf.
      return unary_loop<T>(out, x, [](T a) { return a / (T(1) + std::exp(-a)); },
                           [](const auto& a) { return a / (T(1) + (-a).exp()); });
    case UnaryOp::Erf:
      return unary_loop<T>(out, x, [](T a) { return std::erf(a); }, nullptr);
    case UnaryOp::Gelu:
      return unary_loop<T>(
          out, x,
          [kSqrt1_2](T a) { return T(0.5) * a * (T(1) + std::erf(a * kSqrt1_2)); },
          nullptr);
    case UnaryOp::GeluTanh:
      return unary_loop<T>(
          out, x,
          [kSqrt2OverPi](T a) {
            T inner = kSqrt2OverPi * (a + T(0.044715) * a * a * a);
            return T(0.5) * a * (T(1) + std::tanh(inner));
          },
          nullptr);
    case UnaryOp::Softplus: {
      T beta = T(prm.a), threshold = T(prm.b);
      return unary_loop<T>(
          out, x,
          [beta, threshold](T a) {
            T z = beta * a;
            return z > threshold ? a : std::log1p(std::exp(z)) / beta;
          },
          nullptr);
    }
    case UnaryOp::Sqrt:  // scalar std::sqrt (vectorized by the compiler): Eigen's
                         // packet sqrt of float gives NaN for +inf
      return unary_loop<T>(out, x, [](T a) { return std::sqrt(a); }, nullptr);
    case UnaryOp::Rsqrt:
      return unary_loop<T>(out, x, [](T a) { return T(1) / std::sqrt(a); },
                           [](const auto& a) { return a.rsqrt(); });
    case UnaryOp::Reciprocal:
      return unary_loop<T>(out, x, [](T a) { return T(1) / a; },
                           [](const auto& a) { return a.inverse(); });
    default:
      TG_INTERNAL_ASSERT(false, "unary op not float-only");
  }
}

template <class T>
void unary_any(UnaryOp op, const Tensor& out, const Tensor& x,
               const kernels::UnaryParams& prm) {
  switch (op) {
    case UnaryOp::Neg:
      return unary_loop<T>(out, x, [](T a) { return T(-a); }, nullptr);
    case UnaryOp::Abs:
      return unary_loop<T>(out, x, [](T a) { return a < T(0) ? T(-a) : a; }, nullptr);
    case UnaryOp::Sign:
      return unary_loop<T>(out, x, [](T a) { return sign_of(a); }, nullptr);
    case UnaryOp::Square:
      return unary_loop<T>(out, x, [](T a) { return T(a * a); }, nullptr);
    case UnaryOp::Relu:  // relu(NaN) = NaN, as PyTorch
      return unary_loop<T>(out, x, [](T a) { return a < T(0) ? T(0) : a; }, nullptr);
    case UnaryOp::Clamp: {
      T lo = T(prm.a), hi = T(prm.b);
      bool has_lo = prm.has_a, has_hi = prm.has_b;
      return unary_loop<T>(
          out, x,
          [=](T a) {
            if constexpr (!std::is_integral_v<T>)
              if (a != a) return a;
            if (has_lo && a < lo) a = lo;
            if (has_hi && a > hi) a = hi;
            return a;
          },
          nullptr);
    }
    default:
      if constexpr (std::is_integral_v<T>) {
        TG_INTERNAL_ASSERT(false, "float-only unary op on an integer tensor");
      } else {
        unary_float<T>(op, out, x, prm);
      }
  }
}

void unary_kernel(UnaryOp op, const Tensor& out, const Tensor& x,
                  const kernels::UnaryParams& prm) {
  dispatch_compute(out.dtype(), "unary", [&](auto tag) {
    unary_any<decltype(tag)>(op, out, x, prm);
  });
}

// ---- where: moves bytes, so one instantiation per element size -------------------
template <class U>
void where_typed(const Tensor& out, const Tensor& cond, const Tensor& a,
                 const Tensor& b) {
  Tensor ops[4] = {out, cond, a, b};
  for_each(ops, 4, [](char** p, const int64_t* s, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      bool c = *reinterpret_cast<const bool*>(p[1] + i * s[1]);
      *reinterpret_cast<U*>(p[0] + i * s[0]) =
          *reinterpret_cast<const U*>(c ? p[2] + i * s[2] : p[3] + i * s[3]);
    }
  });
}

void where_kernel(const Tensor& out, const Tensor& cond, const Tensor& a,
                  const Tensor& b) {
  dispatch_bytes(element_size(out.dtype()),
                 [&](auto u) { where_typed<decltype(u)>(out, cond, a, b); });
}

}  // namespace

void register_elementwise(kernels::Backend& b) {
  b.copy = copy_kernel;
  b.fill = fill_kernel;
  b.binary = binary_kernel;
  b.compare = compare_kernel;
  b.unary = unary_kernel;
  b.where = where_kernel;
  b.activation_grad = activation_grad_kernel;
}

}  // namespace tg::cpu
