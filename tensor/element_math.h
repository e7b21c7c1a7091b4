// Internal: the element math of every elementwise kernel, written once and
// called from the CPU kernels (tensor/elementwise.cpp) and the CUDA
// kernels (cuda/kernels/elementwise.cu) alike: binary and unary ops with
// their NaN and integer rules, comparisons, and the activations' derivatives
// of orders 0..4 as closed forms (docs/AUTOGRAD.md).
// With s = sigmoid(x), u = s (1 - s), a = 1 - 2 s, t = tanh(x), v = 1 - t^2:
//   silu     x s | s + x u | u (2 + x a) | u (a (3 + x a) - 2 x u) | u (4 a^2 + x a^3 - 8 x a u - 8 u)
//   sigmoid  s   | u       | u a         | u (a^2 - 2 u)           | u a (a^2 - 8 u)
//   tanh     t   | v       | -2 t v      | v (6 t^2 - 2)           | v t (16 - 24 t^2)
//   relu     max(x, 0) | [x > 0] | 0 ...
#pragma once

#include <cmath>
#include <type_traits>
#include <utility>

#if defined(__CUDACC__)
#include <thrust/complex.h>
#else
#include <complex>
#endif

#include "tensor/kernels.h"

#if defined(__CUDACC__)
#define TG_HOST_DEVICE __host__ __device__
#else
#define TG_HOST_DEVICE
#endif

namespace tg::kernels {

// Integer arithmetic wraps (two's complement), as PyTorch's: computed on the
// unsigned type, where overflow is defined (signed overflow is undefined
// behaviour, which the sanitizers make fatal). Floating point as written.
template <class T> constexpr bool kWraps = std::is_integral_v<T> && !std::is_same_v<T, bool>;
template <class T> TG_HOST_DEVICE inline T wrap_add(T a, T b) {
  if constexpr (kWraps<T>) return T(std::make_unsigned_t<T>(a) + std::make_unsigned_t<T>(b));
  else return a + b;
}
template <class T> TG_HOST_DEVICE inline T wrap_sub(T a, T b) {
  if constexpr (kWraps<T>) return T(std::make_unsigned_t<T>(a) - std::make_unsigned_t<T>(b));
  else return a - b;
}
template <class T> TG_HOST_DEVICE inline T wrap_mul(T a, T b) {
  if constexpr (kWraps<T>) return T(std::make_unsigned_t<T>(a) * std::make_unsigned_t<T>(b));
  else return a * b;
}
template <class T> TG_HOST_DEVICE inline T wrap_neg(T a) {
  if constexpr (kWraps<T>) return T(std::make_unsigned_t<T>(0) - std::make_unsigned_t<T>(a));
  else return -a;
}

// Integer power; negative exponents give 0 except for bases 1 and -1.
template <class T> TG_HOST_DEVICE inline T ipow(T base, T e) {
  if (e < 0) {
    if (base == 1) return 1;
    if (base == -1) return (e % 2 == 0) ? 1 : -1;
    return 0;
  }
  T r = 1;
  while (e) {
    if (e & 1) r = wrap_mul(r, base);
    base = wrap_mul(base, base);
    e >>= 1;
  }
  return r;
}

// The binary element formulas binary.def's forward column names.
// No trap on integer division by 0, nor on the minimum over -1.
template <class T> TG_HOST_DEVICE inline T div_elem(T a, T b) {
  if constexpr (std::is_integral_v<T>) return b == 0 ? T(0) : b == T(-1) ? wrap_neg(a) : a / b;
  else return a / b;
}
template <class T> TG_HOST_DEVICE inline T pow_elem(T a, T b) {
  using std::pow;
  if constexpr (std::is_integral_v<T>) return ipow(a, b);
  else if (b == T(0)) return T(1);  // 0^0 = 1 (complex pow would give exp(0 log 0) = NaN)
  else return pow(a, b);
}
// float-only ops: the op layer converts integers (an integer T returns a).
template <class T> TG_HOST_DEVICE inline T atan2_elem(T a, T b) {
  using std::atan2;
  if constexpr (std::is_integral_v<T>) return a;
  else return atan2(a, b);
}
template <class T> TG_HOST_DEVICE inline T hypot_elem(T a, T b) {
  using std::hypot;
  if constexpr (std::is_integral_v<T>) return a;
  else return hypot(a, b);
}
// fmod: the sign of a (C's); remainder: the sign of b (Python's), as
// PyTorch computes it: fmod shifted by b when the signs differ. Integer
// division by 0 is refused by the op layer; -1 never traps.
template <bool kRemainder, class T> TG_HOST_DEVICE inline T fmod_elem(T a, T b) {
  T r;
  if constexpr (std::is_integral_v<T>) r = (b == 0 || b == T(-1)) ? T(0) : T(a % b);
  else {
    using std::fmod;
    r = fmod(a, b);
  }
  if constexpr (kRemainder)
    if (r != T(0) && ((r < T(0)) != (b < T(0)))) r = r + b;
  return r;
}
// maximum, minimum: NaN propagates, as torch.maximum/minimum.
template <bool kMax, class T> TG_HOST_DEVICE inline T extremum_elem(T a, T b) {
  if constexpr (!std::is_integral_v<T>)
    if (a != a || b != b) return a != a ? a : b;
  if constexpr (kMax) return a > b ? a : b;
  else return a < b ? a : b;
}

// The forward column of binary.def.
template <BinaryOp Op, class T> TG_HOST_DEVICE inline T binary_fn(T a, T b) {
#define TG_BINARY(name, Kernel, arg, form, float_only, forward, ...) \
  if constexpr (Op == BinaryOp::Kernel) return forward;
#include <tapegrad/tensor/binary.def>
#undef TG_BINARY
  return T(0);
}

template <class T> TG_HOST_DEVICE inline T binary_apply(BinaryOp op, T a, T b) {
  switch (op) {
#define TG_BINARY(name, Kernel, ...) \
  case BinaryOp::Kernel:             \
    return binary_fn<BinaryOp::Kernel>(a, b);
#include <tapegrad/tensor/binary.def>
#undef TG_BINARY
  }
  return T(0);
}

template <class T> TG_HOST_DEVICE inline bool compare_apply(CompareOp op, T a, T b) {
  switch (op) {
    case CompareOp::Eq: return a == b;
    case CompareOp::Ne: return a != b;
    case CompareOp::Lt: return a < b;
    case CompareOp::Le: return a <= b;
    case CompareOp::Gt: return a > b;
    case CompareOp::Ge: return a >= b;
  }
  return false;
}

// floor, ceil, round (halves to even) and trunc; integers are unchanged.
enum class RoundMode { Floor, Ceil, Nearest, Trunc };
template <RoundMode M, class T> TG_HOST_DEVICE inline T to_integer(T x) {
  if constexpr (std::is_integral_v<T>) {
    return x;
  } else {
    using std::ceil;
    using std::floor;
    using std::rint;
    using std::trunc;
    if constexpr (M == RoundMode::Floor) return floor(x);
    else if constexpr (M == RoundMode::Ceil) return ceil(x);
    else if constexpr (M == RoundMode::Nearest) return rint(x);  // the default rounding: halves to even
    else return trunc(x);
  }
}

// The unary ops' parameters in the compute type (UnaryParams: softplus a =
// beta, b = threshold; clamp a = lo, b = hi where has_a / has_b).
template <class T> struct UnaryArgs {
  T a, b;
  bool has_a, has_b;
};

// Ops defined for floating-point inputs only (the op layer gives Int64/Bool
// inputs a Float32 result).
constexpr bool is_float_only(UnaryOp op) {
  switch (op) {
#define TG_UNARY(name, Kernel, float_only, ...) \
  case UnaryOp::Kernel:                         \
    return float_only;
#include <tapegrad/tensor/unary.def>
#undef TG_UNARY
    case UnaryOp::Clamp: return false;
    default: return true;
  }
}

// The element formula of op Op: those of unary.def, then the ops with
// parameters.
template <UnaryOp Op, class T> TG_HOST_DEVICE inline T unary_fn(T x, const UnaryArgs<T>& p) {
  // The math functions a unary.def formula may call (float and double
  // overloads, host and device).
  using std::acos;
  using std::acosh;
  using std::asin;
  using std::asinh;
  using std::atan;
  using std::atanh;
  using std::cbrt;
  using std::cos;
  using std::cosh;
  using std::erf;
  using std::exp;
  using std::exp2;
  using std::expm1;
  using std::log;
  using std::log10;
  using std::log1p;
  using std::log2;
  using std::sin;
  using std::sinh;
  using std::sqrt;
  using std::tan;
  using std::tanh;
  constexpr bool kInt = std::is_integral_v<T>;
  (void)p;
  if constexpr (false) {
  }
#define TG_UNARY(name, Kernel, float_only, forward, ...)            \
  else if constexpr (Op == UnaryOp::Kernel) {                       \
    if constexpr (float_only && kInt) return x; /* never reached */ \
    else return forward;                                            \
  }
#include <tapegrad/tensor/unary.def>
#undef TG_UNARY
  else if constexpr (Op == UnaryOp::Clamp) {
    if constexpr (!kInt)
      if (x != x) return x;
    // Written so that a NaN bound gives NaN (as a NaN tensor bound does, and
    // PyTorch's): x >= NaN and x <= NaN are false.
    if (p.has_a && !(x >= p.a)) x = p.a;
    if constexpr (!kInt)
      if (x != x) return x;  // a NaN min stays (integer tensors take float bounds as Float32)
    if (p.has_b && !(x <= p.b)) x = p.b;
    return x;
  } else if constexpr (kInt) {
    return x;  // float-only ops never see integers (the op layer converts)
  } else if constexpr (Op == UnaryOp::Gelu) {
    return T(0.5) * x * (T(1) + erf(x * T(0.70710678118654752440)));
  } else if constexpr (Op == UnaryOp::GeluTanh) {
    T inner = T(0.79788456080286535588) * (x + T(0.044715) * x * x * x);
    return T(0.5) * x * (T(1) + tanh(inner));
  } else if constexpr (Op == UnaryOp::Softplus) {
    T z = p.a * x;
    return z > p.b ? x : log1p(exp(z)) / p.a;
  } else {
    return x;
  }
}

// Calls f(std::integral_constant<UnaryOp, op>{}), so the caller instantiates
// its loop for the one op (the CPU kernels; the GPU switches per element).
template <class F> inline void visit_unary(UnaryOp op, F&& f) {
  switch (op) {
#define TG_UNARY(name, Kernel, ...) \
  case UnaryOp::Kernel:             \
    return f(std::integral_constant<UnaryOp, UnaryOp::Kernel>{});
#include <tapegrad/tensor/unary.def>
#undef TG_UNARY
#define TG_CASE(o) \
  case UnaryOp::o: return f(std::integral_constant<UnaryOp, UnaryOp::o>{});
    TG_CASE(Gelu) TG_CASE(GeluTanh) TG_CASE(Softplus) TG_CASE(Clamp)
#undef TG_CASE
  }
}
template <class F> inline void visit_binary(BinaryOp op, F&& f) {
  switch (op) {
#define TG_BINARY(name, Kernel, ...) \
  case BinaryOp::Kernel:             \
    return f(std::integral_constant<BinaryOp, BinaryOp::Kernel>{});
#include <tapegrad/tensor/binary.def>
#undef TG_BINARY
  }
}

template <class T> TG_HOST_DEVICE inline T unary_apply(UnaryOp op, T x, const UnaryArgs<T>& p) {
  switch (op) {
#define TG_UNARY(name, Kernel, ...) \
  case UnaryOp::Kernel:             \
    return unary_fn<UnaryOp::Kernel>(x, p);
#include <tapegrad/tensor/unary.def>
#undef TG_UNARY
#define TG_CASE(o) \
  case UnaryOp::o: return unary_fn<UnaryOp::o>(x, p);
    TG_CASE(Gelu) TG_CASE(GeluTanh) TG_CASE(Softplus) TG_CASE(Clamp)
#undef TG_CASE
  }
  return x;
}

template <class T> TG_HOST_DEVICE inline T activation_derivative(Activation act, int k, T x) {
  using std::erf;
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
      // Where the sigmoid saturates (u = 0) the x u terms are 0, also at
      // x = +-inf (inf * 0): silu' is then s, the higher derivatives 0.
      if constexpr (std::is_arithmetic_v<T>) {
        if (k >= 1 && u == T(0)) return k == 1 ? s : T(0);
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
    case Activation::Relu:  // ordered types only: the op layer refuses complex relu
      if constexpr (std::is_arithmetic_v<T>) {
        if (k == 0) return x > T(0) ? x : T(0);
        if (k == 1) return x > T(0) ? T(1) : T(0);
      }
      return T(0);
    case Activation::Gelu:  // exact: x Phi(x); real types only (gelu has no complex kernel)
      if constexpr (std::is_arithmetic_v<T>) {
        // gelu^(k) = x Phi^(k) + k Phi^(k-1), Phi' = phi, phi' = -x phi.
        const T pdf = T(0.39894228040143267794) * exp(T(-0.5) * x * x), x2 = x * x;
        const T cdf = T(0.5) * (T(1) + erf(x * T(0.70710678118654752440)));
        // Where phi underflows, x phi and phi's polynomials are 0 (x^k may
        // have overflowed: inf * 0).
        if (k >= 1 && pdf == T(0)) return k == 1 ? cdf : T(0);
        switch (k) {
          case 0: return T(0.5) * x * (T(1) + erf(x * T(0.70710678118654752440)));
          case 1: return cdf + x * pdf;
          case 2: return pdf * (T(2) - x2);
          case 3: return pdf * x * (x2 - T(4));
          default: return pdf * ((T(7) - x2) * x2 - T(4));
        }
      }
      return T(0);
  }
  return T(0);
}

// ---- complex (Complex64, Complex128) ---------------------------------------------
// The complex element math runs on the platform's complex type: std::complex
// on the host, thrust::complex in CUDA code (the same functions, host and
// device). tg::complex<R> has their layout; the kernels convert element by
// element with to_math / from_math. The ops whose def line says C take
// complex operands; their forward formula is written so that it compiles for
// that type (the math functions by argument-dependent lookup).
template <class T> struct is_complex_t : std::false_type {};
template <class R> struct is_complex_t<complex<R>> : std::true_type {};
#if defined(__CUDACC__)
template <class R> using math_complex = thrust::complex<R>;
#else
template <class R> using math_complex = std::complex<R>;
#endif
template <class R> TG_HOST_DEVICE inline math_complex<R> to_math(complex<R> z) { return math_complex<R>(z.re, z.im); }
template <class R> TG_HOST_DEVICE inline complex<R> from_math(const math_complex<R>& z) {
  return complex<R>(z.real(), z.imag());
}

// Whether a unary (binary) op has a complex kernel: its def line's cx column
// is C (abs's A: the op layer computes the modulus).
constexpr bool takes_complex(UnaryOp op) {
  switch (op) {
#define TG_UNARY(name, Kernel, float_only, forward, derivative, saves, taylor, lo, hi, cx) \
  case UnaryOp::Kernel:                                                                    \
    return #cx[0] == 'C';
#include <tapegrad/tensor/unary.def>
#undef TG_UNARY
    default: return false;
  }
}
constexpr bool takes_complex(BinaryOp op) {
  switch (op) {
#define TG_BINARY(name, Kernel, arg, form, float_only, forward, d_a, d_b, saves_a, saves_b, taylor, composite, sample, \
                  lo, hi, cx)                                                                                          \
  case BinaryOp::Kernel:                                                                                               \
    return #cx[0] == 'C';
#include <tapegrad/tensor/binary.def>
#undef TG_BINARY
  }
  return false;
}

// The forward formula of a unary op that takes complex inputs (others return
// z: never reached, the op layer refuses them).
template <UnaryOp Op, class R> TG_HOST_DEVICE inline complex<R> unary_complex_fn(complex<R> z) {
  using T = math_complex<R>;
  const T x = to_math(z);
  (void)x;
  if constexpr (false) {}
#define TG_UNARY_CX_R(Kernel, forward)
#define TG_UNARY_CX_A(Kernel, forward) /* abs: the op layer's (a real result) */
#define TG_UNARY_CX_C(Kernel, forward) else if constexpr (Op == UnaryOp::Kernel) return from_math<R>(forward);
#define TG_UNARY(name, Kernel, float_only, forward, derivative, saves, taylor, lo, hi, cx) \
  TG_UNARY_CX_##cx(Kernel, forward)
#include <tapegrad/tensor/unary.def>
#undef TG_UNARY
#undef TG_UNARY_CX_C
#undef TG_UNARY_CX_A
#undef TG_UNARY_CX_R
  return z;
}
template <class R> TG_HOST_DEVICE inline complex<R> unary_complex_apply(UnaryOp op, complex<R> z) {
  switch (op) {
#define TG_UNARY(name, Kernel, ...) \
  case UnaryOp::Kernel:             \
    return unary_complex_fn<UnaryOp::Kernel>(z);
#include <tapegrad/tensor/unary.def>
#undef TG_UNARY
    default: return z;
  }
}

// The forward formula of a binary op that takes complex operands.
template <BinaryOp Op, class R> TG_HOST_DEVICE inline complex<R> binary_complex_fn(complex<R> za, complex<R> zb) {
  using T = math_complex<R>;
  const T a = to_math(za), b = to_math(zb);
  (void)a, (void)b;
  if constexpr (false) {}
#define TG_BINARY_CX_R(Kernel, forward)
#define TG_BINARY_CX_C(Kernel, forward) else if constexpr (Op == BinaryOp::Kernel) return from_math<R>(forward);
#define TG_BINARY(name, Kernel, arg, form, float_only, forward, d_a, d_b, saves_a, saves_b, taylor, composite, sample, \
                  lo, hi, cx)                                                                                          \
  TG_BINARY_CX_##cx(Kernel, forward)
#include <tapegrad/tensor/binary.def>
#undef TG_BINARY
#undef TG_BINARY_CX_C
#undef TG_BINARY_CX_R
  return za;
}
template <class R> TG_HOST_DEVICE inline complex<R> binary_complex_apply(BinaryOp op, complex<R> a, complex<R> b) {
  switch (op) {
#define TG_BINARY(name, Kernel, ...) \
  case BinaryOp::Kernel:             \
    return binary_complex_fn<BinaryOp::Kernel>(a, b);
#include <tapegrad/tensor/binary.def>
#undef TG_BINARY
  }
  return a;
}

// act^(k)(z) for a complex z: the real closed forms above hold for the
// holomorphic activations (silu, sigmoid, tanh), run on the platform's
// complex type; relu has no complex meaning (refused by the op layer).
template <class R> TG_HOST_DEVICE inline complex<R> activation_derivative_complex(Activation act, int k, complex<R> z) {
  return from_math<R>(activation_derivative<math_complex<R>>(act, k, to_math(z)));
}

}  // namespace tg::kernels
