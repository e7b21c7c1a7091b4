// Internal: the CPU vector math's kernels (tensor/cpu/vmath.h), included once
// per instruction set by tensor/cpu/vmath_{generic,avx2,avx512}.cpp with
// TG_VMATH_ISA naming it. Those for an extended set rename Eigen
// (TG_VMATH_EIGEN_NS) so that none of its inline functions, emitted with that
// set's instructions, can be merged with another file's copy by the linker
// (scripts/check_gemm_isa.sh checks the objects).
#ifndef TG_VMATH_ISA
#error "define TG_VMATH_ISA before including vmath_impl.h"
#endif
#ifdef TG_VMATH_EIGEN_NS
#define Eigen TG_VMATH_EIGEN_NS
#endif
#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <limits>

#include "tensor/cpu/vmath.h"

namespace tg::cpu {
namespace TG_VMATH_ISA {
namespace {

template <class T> using Map = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <class T> using ConstMap = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

// Elements per block of the kernels below.
constexpr int64_t kBlock = 256;

// out = vec(x), but f(x[i]) where needs(x[i]): inputs, rare, where Eigen's
// packet form is not libm's (subnormal inputs of log and rsqrt, subnormal or
// zero results of exp). A block holding one keeps a copy of its inputs, as
// out may be x (an in-place op); the others run vec alone. (Eigen 3.4's
// select is not vectorized: it evaluated both sides with libm, element by
// element.)
template <class T, class V, class N, class F> void scalar_where(T* out, const T* x, int64_t n, V vec, N needs, F f) {
  T copy[kBlock];
  for (int64_t i = 0; i < n; i += kBlock) {
    const int64_t m = n - i < kBlock ? n - i : kBlock;
    bool any = false;
    for (int64_t j = 0; j < m; ++j)
      any |= needs(x[i + j]);
    if (!any) {
      vec(out + i, x + i, m);
      continue;
    }
    std::copy(x + i, x + i + m, copy);
    vec(out + i, copy, m);
    for (int64_t j = 0; j < m; ++j)
      if (needs(copy[j])) out[i + j] = f(copy[j]);
  }
}

template <class T> bool subnormal(T v) {
  const T a = v < T(0) ? -v : v;
  return a != T(0) && a < std::numeric_limits<T>::min();
}

// Each form agrees with the element math (tensor/element_math.h) at the
// special values (the special-value tests check both paths):
template <class T> void unary(VUnary f, T* out, const T* x, int64_t n) {
  ConstMap<T> a(x, n);
  Map<T> o(out, n);
  switch (f) {
    case VUnary::Exp: {
      // Eigen's packet exp is not libm's where the result is subnormal or
      // 0 (a denormal at -inf; 0 below -87.3 in the AVX-512 build).
      const T tail = sizeof(T) == 4 ? T(-87) : T(-708);
      scalar_where(
          out, x, n, [](T* po, const T* px, int64_t m) { Map<T>(po, m) = ConstMap<T>(px, m).exp(); },
          [tail](T v) { return v < tail; }, [](T v) { return std::exp(v); });
      return;
    }
    case VUnary::Log:
      scalar_where(
          out, x, n, [](T* po, const T* px, int64_t m) { Map<T>(po, m) = ConstMap<T>(px, m).log(); }, subnormal<T>,
          [](T v) { return std::log(v); });
      return;
    case VUnary::Sin: o = a.sin(); return;
    case VUnary::Cos: o = a.cos(); return;
    case VUnary::Tanh:
      if constexpr (sizeof(T) == 4) {
        // Eigen's float tanh (a rational form) is up to 4.7 ulp off near
        // |x| = 5.7 (6.5 in the baseline build); 1 - 2 / (exp(2|x|) + 1)
        // keeps the error near one ulp from |x| = 0.625 up (exp overflows
        // to inf: 1). NaN takes the second form: NaN. Both into blocks,
        // then each element reads x before writing out (out may be x).
        T small[kBlock], big[kBlock];
        for (int64_t i = 0; i < n; i += kBlock) {
          const int64_t m = n - i < kBlock ? n - i : kBlock;
          const ConstMap<T> xb(x + i, m);
          Map<T>(small, m) = xb.tanh();
          Map<T>(big, m) = T(1) - T(2) / ((T(2) * xb.abs()).exp() + T(1));
          for (int64_t j = 0; j < m; ++j)
            out[i + j] = std::fabs(x[i + j]) < T(0.625) ? small[j] : std::copysign(big[j], x[i + j]);
        }
      } else {
        o = a.tanh();
      }
      return;
    // 1 / (1 + exp(-x)) as the element math: Eigen's logistic clamps, giving
    // a denormal (2.9e-39) where the sigmoid underflows to 0 (x = -inf, -104).
    // Below -80 it is libm's exp(x) (the AVX-512 build's exp(-x) overflows
    // early: 0 where the sigmoid is subnormal, x in [-88.7, -87.4]), and 0
    // where the element math's exp(-x) overflows.
    case VUnary::Sigmoid: {
      const T far = sizeof(T) == 4 ? T(-80) : T(-700);
      const T lo = sizeof(T) == 4 ? T(-88.72283935546875) : T(-709.782712893384);
      scalar_where(
          out, x, n,
          [](T* po, const T* px, int64_t m) { Map<T>(po, m) = (T(1) + (-ConstMap<T>(px, m)).exp()).inverse(); },
          [far](T v) { return v < far; }, [lo](T v) { return v < lo ? T(0) : std::exp(v); });
      return;
    }
    case VUnary::Rsqrt:
      scalar_where(
          out, x, n, [](T* po, const T* px, int64_t m) { Map<T>(po, m) = ConstMap<T>(px, m).rsqrt(); }, subnormal<T>,
          [](T v) { return T(1) / std::sqrt(v); });
      return;
    case VUnary::Reciprocal: o = a.inverse(); return;
  }
}

void unary_f32(VUnary f, float* out, const float* x, int64_t n) { unary<float>(f, out, x, n); }
void unary_f64(VUnary f, double* out, const double* x, int64_t n) { unary<double>(f, out, x, n); }

// act^(K) of the tanh and logistic families on a block of at most kBlock
// elements: the polynomials are activation_derivative's (element_math.h).
using Block = Eigen::Array<float, Eigen::Dynamic, 1, 0, kBlock, 1>;

template <VAct A, int K> Block derivative_block(const ConstMap<float>& x) {
  using T = float;
  if constexpr (A == VAct::Tanh) {
    const Block t = x.tanh();
    const Block v = T(1) - t * t;
    if constexpr (K == 0) return t;
    else if constexpr (K == 1) return v;
    else if constexpr (K == 2) return T(-2) * t * v;
    else if constexpr (K == 3) return v * (T(6) * t * t - T(2));
    else return v * t * (T(16) - T(24) * t * t);
  } else {
    // 1 / (1 + exp(-x)) as the element math computes it (Eigen's logistic
    // gives 2.9e-39, not 0, at -inf: silu there would be -inf, not NaN).
    const Block sg = (T(1) + (-x).exp()).inverse();
    const Block u = sg * (T(1) - sg), a = T(1) - T(2) * sg;
    if constexpr (A == VAct::Sigmoid) {
      if constexpr (K == 0) return sg;
      else if constexpr (K == 1) return u;
      else if constexpr (K == 2) return u * a;
      else if constexpr (K == 3) return u * (a * a - T(2) * u);
      else return u * a * (a * a - T(8) * u);
    } else if constexpr (K == 0) {  // silu
      return x * sg;
    } else {
      Block r;
      if constexpr (K == 1) r = sg + x * u;
      else if constexpr (K == 2) r = u * (T(2) + x * a);
      else if constexpr (K == 3) r = u * (a * (T(3) + x * a) - T(2) * x * u);
      else r = u * (T(4) * a * a + x * a * a * a - T(8) * x * a * u - T(8) * u);
      // Where the sigmoid saturates (u = 0) the x u terms are 0, also at
      // x = +-inf (inf * 0): silu' is then s, the higher derivatives 0.
      const int64_t m = x.size();
      for (int64_t j = 0; j < m; ++j)
        r[j] = u[j] == T(0) ? (K == 1 ? sg[j] : T(0)) : r[j];
      return r;
    }
  }
}

template <VAct A, int K> void act_grad_run(float* out, const float* g, int64_t g_step, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; i += kBlock) {
    const int64_t m = n - i < kBlock ? n - i : kBlock;
    const Block d = derivative_block<A, K>(ConstMap<float>(x + i, m));
    if (g_step == 0) Map<float>(out + i, m) = *g * d;
    else Map<float>(out + i, m) = ConstMap<float>(g + i, m) * d;
  }
}

template <VAct A>
void act_grad_order(int order, float* out, const float* g, int64_t g_step, const float* x, int64_t n) {
  switch (order) {
    case 0: return act_grad_run<A, 0>(out, g, g_step, x, n);
    case 1: return act_grad_run<A, 1>(out, g, g_step, x, n);
    case 2: return act_grad_run<A, 2>(out, g, g_step, x, n);
    case 3: return act_grad_run<A, 3>(out, g, g_step, x, n);
    default: return act_grad_run<A, 4>(out, g, g_step, x, n);
  }
}

void act_grad_f32(VAct act, int order, float* out, const float* g, int64_t g_step, const float* x, int64_t n) {
  switch (act) {
    case VAct::Tanh: return act_grad_order<VAct::Tanh>(order, out, g, g_step, x, n);
    case VAct::Sigmoid: return act_grad_order<VAct::Sigmoid>(order, out, g, g_step, x, n);
    case VAct::Silu: return act_grad_order<VAct::Silu>(order, out, g, g_step, x, n);
  }
}

}  // namespace

const VMathKernels kernels{TG_VMATH_ISA_NAME, unary_f32, unary_f64, act_grad_f32};

}  // namespace TG_VMATH_ISA
}  // namespace tg::cpu

#ifdef TG_VMATH_EIGEN_NS
#undef Eigen
#endif
