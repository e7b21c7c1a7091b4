// CUDA elementwise functors that both their own kernels (elementwise.cu,
// through loops.cuh's launch) and the fused kernel of a captured graph
// (fused.cu) run; when vectorizable, each declares its element size
// (kElemSize). They know nothing of graphs: which fused step each one is
// lives beside the fused kernel (fused_steps.cuh).
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "tensor/element_math.h"
#include "tensor/kernels.h"

#include "dtypes.cuh"

namespace tg::cuda {

using kernels::BinaryOp;
using kernels::CompareOp;
using kernels::UnaryOp;

template <class D, class S> struct CopyFn {
  static constexpr int kElemSize = sizeof(D) == sizeof(S) ? int(sizeof(D)) : 0;
  __device__ void operator()(char* const* p, const int64_t* off) const {
    *reinterpret_cast<D*>(p[0] + off[0]) = convert<D>(*reinterpret_cast<const S*>(p[1] + off[1]));
  }
};

template <class U> struct FillFn {
  static constexpr int kElemSize = sizeof(U);
  U bits;
  __device__ void operator()(char* const* p, const int64_t* off) const { *reinterpret_cast<U*>(p[0] + off[0]) = bits; }
};

template <class T> struct BinaryFn {
  static constexpr int kElemSize = sizeof(T);
  BinaryOp op;
  __device__ T apply(T a, T b) const { return kernels::binary_apply(op, a, b); }
  __device__ void operator()(char* const* p, const int64_t* off) const {
    *reinterpret_cast<T*>(p[0] + off[0]) =
        apply(*reinterpret_cast<const T*>(p[1] + off[1]), *reinterpret_cast<const T*>(p[2] + off[2]));
  }
};

// out = a (op) s, the scalar by value (no 0-dim tensor, no fill kernel).
template <class T> struct BinaryScalarFn {
  static constexpr int kElemSize = sizeof(T);
  BinaryOp op;
  T s;
  __device__ void operator()(char* const* p, const int64_t* off) const {
    *reinterpret_cast<T*>(p[0] + off[0]) = kernels::binary_apply(op, *reinterpret_cast<const T*>(p[1] + off[1]), s);
  }
};

// a * b rounded on its own (never contracted into an fma with a later add),
// so a fused a + alpha * b rounds as mul then add.
__device__ inline float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ inline double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ inline int64_t mul_rn(int64_t a, int64_t b) { return a * b; }

template <class T> struct AddScaledFn {
  static constexpr int kElemSize = sizeof(T);
  T alpha;
  __device__ void operator()(char* const* p, const int64_t* off) const {
    *reinterpret_cast<T*>(p[0] + off[0]) =
        *reinterpret_cast<const T*>(p[1] + off[1]) + mul_rn(*reinterpret_cast<const T*>(p[2] + off[2]), alpha);
  }
};

// The engine's deferred accumulation: out = ((a + s0) + s1) + ..., the
// summands' pointers by value (at most kMaxAddN), contiguous operands.
template <class T> struct AddNArgs {
  T* out;
  const T* a;
  const T* s[kernels::kMaxAddN];
  int k;
};

// One element of add_n and of mul backward (their kernels and the fused one).
template <class T> __device__ inline void add_n_at(T* out, const T* a, const T* const* s, int k, int64_t i) {
  T acc = a[i];
  for (int j = 0; j < k; ++j)
    acc = acc + s[j][i];
  out[i] = acc;
}
template <class T> __device__ inline void mul_backward_at(T* ga, T* gb, const T* g, const T* a, const T* b, int64_t i) {
  const T gv = g[i];
  ga[i] = gv * b[i];
  gb[i] = gv * a[i];
}

// The complex dtypes' functors (T = tg::complex<R>; the math in
// thrust::complex, element_math.h). Never fused into a graph's kernel.
template <class T> struct ComplexBinaryFn {
  static constexpr int kElemSize = sizeof(T);
  BinaryOp op;
  __device__ void operator()(char* const* p, const int64_t* off) const {
    *reinterpret_cast<T*>(p[0] + off[0]) = kernels::binary_complex_apply(op, *reinterpret_cast<const T*>(p[1] + off[1]),
                                                                         *reinterpret_cast<const T*>(p[2] + off[2]));
  }
};
template <class T> struct ComplexUnaryFn {
  static constexpr int kElemSize = sizeof(T);
  UnaryOp op;
  __device__ void operator()(char* const* p, const int64_t* off) const {
    *reinterpret_cast<T*>(p[0] + off[0]) = kernels::unary_complex_apply(op, *reinterpret_cast<const T*>(p[1] + off[1]));
  }
};
template <class T> struct ComplexActivationGradFn {
  static constexpr int kElemSize = sizeof(T);
  Activation act;
  int order;
  __device__ void operator()(char* const* p, const int64_t* off) const {
    const T g = *reinterpret_cast<const T*>(p[1] + off[1]);
    const T d = kernels::activation_derivative_complex(act, order, *reinterpret_cast<const T*>(p[2] + off[2]));
    *reinterpret_cast<T*>(p[0] + off[0]) = kernels::from_math(kernels::to_math(g) * kernels::to_math(d));
  }
};
template <class T> struct ComplexEqualFn {  // eq (ne: negated)
  bool ne;
  __device__ void operator()(char* const* p, const int64_t* off) const {
    const bool same = *reinterpret_cast<const T*>(p[1] + off[1]) == *reinterpret_cast<const T*>(p[2] + off[2]);
    *reinterpret_cast<bool*>(p[0] + off[0]) = same != ne;
  }
};

template <class T> struct UnaryFn {
  static constexpr int kElemSize = sizeof(T);
  UnaryOp op;
  kernels::UnaryArgs<T> args;
  __device__ void operator()(char* const* p, const int64_t* off) const {
    *reinterpret_cast<T*>(p[0] + off[0]) = kernels::unary_apply(op, *reinterpret_cast<const T*>(p[1] + off[1]), args);
  }
};

template <class T> struct ActivationGradFn {
  static constexpr int kElemSize = sizeof(T);
  Activation act;
  int order;
  __device__ void operator()(char* const* p, const int64_t* off) const {
    T g = *reinterpret_cast<const T*>(p[1] + off[1]);
    T x = *reinterpret_cast<const T*>(p[2] + off[2]);
    *reinterpret_cast<T*>(p[0] + off[0]) = g * kernels::activation_derivative<T>(act, order, x);
  }
};

// (g * g2) * act^(order)(x): the mul that precedes a higher derivative,
// fused (as mul then activation_grad would round it, in T).
template <class T> struct ActivationGradProductFn {
  static constexpr int kElemSize = sizeof(T);
  Activation act;
  int order;
  __device__ void operator()(char* const* p, const int64_t* off) const {
    T g = *reinterpret_cast<const T*>(p[1] + off[1]) * *reinterpret_cast<const T*>(p[2] + off[2]);
    T x = *reinterpret_cast<const T*>(p[3] + off[3]);
    *reinterpret_cast<T*>(p[0] + off[0]) = g * kernels::activation_derivative<T>(act, order, x);
  }
};

}  // namespace tg::cuda
