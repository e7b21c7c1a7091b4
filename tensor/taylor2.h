// Taylor mode's fused order-2 rule (kernels.h taylor2_unary and its
// backward) for one element s: the CPU and CUDA kernels call these with the
// element's base pointers (row r of s at p[r * S]; x's at x[r * P], P = S or,
// for x's rows broadcast over the shape's outer part, their period).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define TG_TAYLOR2_FN __host__ __device__ inline
#else
#define TG_TAYLOR2_FN inline
#endif

namespace tg::kernels {

// out = [d1 x1; d1 x2 + d2 / 2 * cross]; kind as in kernels.h.
template <class T>
TG_TAYLOR2_FN void taylor2_forward(int kind, int64_t k, int64_t q, int64_t S, int64_t P, T* o, const T* x, T a1,
                                   T a2, const int64_t* pa, const int64_t* pb) {
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
    for (int64_t r = 0; r < q; ++r) o[(k + r) * S] = a1 * x[(k + r) * P] + h2 * x[pa[r] * P] * x[pb[r] * P];
}

// dx (rows), dd1 = sum_rows g x, dd2 = sum_second_rows g2 * cross / 2.
template <class T>
TG_TAYLOR2_FN void taylor2_backward(int kind, int64_t k, int64_t q, int64_t S, int64_t P, T* dx, T* dd1, T* dd2,
                                    const T* g, const T* x, T a1, T a2, const int64_t* pa, const int64_t* pb) {
  const T h2 = a2 * T(0.5);
  T s1 = 0, s2 = 0;
  for (int64_t r = 0; r < k + q; ++r) s1 += g[r * S] * x[r * P];
  for (int64_t r = 0; r < q; ++r) dx[(k + r) * S] = g[(k + r) * S] * a1;
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
    for (int64_t a = 0; a < k; ++a) dx[a * S] = g[a * S] * a1;
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

}  // namespace tg::kernels
