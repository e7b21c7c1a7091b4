// Taylor mode's fused order-2 rule (autograd/kernels/kernels.h taylor2_unary and its
// backward) for one element s: the CPU and CUDA kernels call these with the
// element's base pointers (row r of s at p[r * S]; x's at x[r * P], P = S or,
// for x's rows broadcast over the shape's outer part, their period).
#pragma once

#include <cstdint>

#include "tensor/element_math.h"

#if defined(__CUDACC__)
#define TG_TAYLOR2_FN __host__ __device__ inline
#else
#define TG_TAYLOR2_FN inline
#endif

namespace tg::autograd::kernels {

using tg::kernels::activation_derivative;

// out = [d1 x1; d1 x2 + d2 / 2 * cross]; kind as in autograd/kernels/kernels.h.
template <class T>
TG_TAYLOR2_FN void taylor2_forward(int kind, int64_t k, int64_t q, int64_t S, int64_t P, T* o, const T* x, T a1, T a2,
                                   const int64_t* pa, const int64_t* pb) {
  const T h2 = a2 * T(0.5);
  T acc = 0;
  for (int64_t r = 0; r < k; ++r) {
    const T v = x[r * P];
    o[r * S] = a1 * v;
    if (kind == 0) o[(k + r) * S] = a1 * x[(k + r) * P] + h2 * v * v;
    else if (kind == 1) acc += v * v;
  }
  if (kind == 1) o[k * S] = a1 * x[k * P] + h2 * acc;
  if (kind == 2)
    for (int64_t r = 0; r < q; ++r)
      o[(k + r) * S] = a1 * x[(k + r) * P] + h2 * x[pa[r] * P] * x[pb[r] * P];
}

// dx (rows), dd1 = sum_rows g x, dd2 = sum_second_rows g2 * cross / 2.
template <class T>
TG_TAYLOR2_FN void taylor2_backward(int kind, int64_t k, int64_t q, int64_t S, int64_t P, T* dx, T* dd1, T* dd2,
                                    const T* g, const T* x, T a1, T a2, const int64_t* pa, const int64_t* pb) {
  const T h2 = a2 * T(0.5);
  T s1 = 0, s2 = 0;
  for (int64_t r = 0; r < k + q; ++r)
    s1 += g[r * S] * x[r * P];
  for (int64_t r = 0; r < q; ++r)
    dx[(k + r) * S] = g[(k + r) * S] * a1;
  if (kind == 0) {
    for (int64_t a = 0; a < k; ++a) {
      const T v = x[a * P], g2 = g[(k + a) * S];
      dx[a * S] = g[a * S] * a1 + g2 * v * a2;
      s2 += g2 * v * v;
    }
  } else if (kind == 1) {
    const T g2 = g[k * S];
    for (int64_t a = 0; a < k; ++a) {
      const T v = x[a * P];
      dx[a * S] = g[a * S] * a1 + g2 * v * a2;
      s2 += v * v;
    }
    s2 *= g2;
  } else {
    for (int64_t a = 0; a < k; ++a)
      dx[a * S] = g[a * S] * a1;
    for (int64_t r = 0; r < q; ++r) {
      const T g2 = g[(k + r) * S], va = x[pa[r] * P], vb = x[pb[r] * P];
      dx[pa[r] * S] += h2 * g2 * vb;
      dx[pb[r] * S] += h2 * g2 * va;
      s2 += g2 * va * vb;
    }
  }
  *dd1 = s1;
  *dd2 = s2 * T(0.5);
}

// Taylor2Derivatives as the kernels read it (pointers; z null:
// d1, d2 given).
template <class T> struct Taylor2Derivs {
  const T *d1, *d2, *z;
  Activation act;
  int order;
  TG_TAYLOR2_FN void at(int64_t s, T& a1, T& a2) const {
    if (z) {
      a1 = activation_derivative<T>(act, order + 1, z[s]);
      a2 = activation_derivative<T>(act, order + 2, z[s]);
    } else {
      a1 = d1[s];
      a2 = d2[s];
    }
  }
};

// Element s of taylor2_unary (x's rows [rows, P]: s reads x[s % P]).
template <class T>
TG_TAYLOR2_FN void taylor2_forward_at(int kind, int64_t k, int64_t q, int64_t S, int64_t P, int64_t s, T* o, const T* x,
                                      const Taylor2Derivs<T>& d, const int64_t* pa, const int64_t* pb) {
  T a1, a2;
  d.at(s, a1, a2);
  taylor2_forward<T>(kind, k, q, S, P, o + s, x + (P == S ? s : s % P), a1, a2, pa, pb);
}

// Element s of taylor2_unary_backward (with d.z: dd1 gets dz).
template <class T>
TG_TAYLOR2_FN void taylor2_backward_at(int kind, int64_t k, int64_t q, int64_t S, int64_t P, int64_t s, T* dx, T* dd1,
                                       T* dd2, const T* g, const T* x, const Taylor2Derivs<T>& d, const int64_t* pa,
                                       const int64_t* pb) {
  T a1, a2, e1, e2;
  d.at(s, a1, a2);
  taylor2_backward<T>(kind, k, q, S, P, dx + s, &e1, &e2, g + s, x + (P == S ? s : s % P), a1, a2, pa, pb);
  if (d.z) {
    dd1[s] = e1 * activation_derivative<T>(d.act, d.order + 2, d.z[s]) +
             e2 * activation_derivative<T>(d.act, d.order + 3, d.z[s]);
  } else {
    dd1[s] = e1;
    dd2[s] = e2;
  }
}

}  // namespace tg::autograd::kernels
