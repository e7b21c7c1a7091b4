// The autograd layer's CPU kernels (kernels.h): mul's backward, the fused
// backward of activation_grad and the order-2 Taylor rule; the other slots
// fall back to the public ops.
#include <algorithm>
#include <type_traits>

#include "autograd/kernels/kernels.h"
#include "autograd/kernels/taylor2.h"
#include "tensor/cpu/loops.h"
#include "tensor/env.h"
#include "tensor/cpu/vmath.h"

namespace tg::autograd::kernels {
namespace {

using cpu::dispatch_compute;
using cpu::parallel_for;

void mul_backward_kernel(const Tensor& ga, const Tensor& gb, const Tensor& g, const Tensor& a, const Tensor& b) {
  dispatch_compute(g.dtype(), "mul backward", [&](auto tag) {
    using T = decltype(tag);
    T* oa = static_cast<T*>(ga.data_ptr());
    T* ob = static_cast<T*>(gb.data_ptr());
    const T* gp = static_cast<const T*>(g.data_ptr());
    const T* ap = static_cast<const T*>(a.data_ptr());
    const T* bp = static_cast<const T*>(b.data_ptr());
    parallel_for(g.numel(), cpu::elementwise_grain(2), [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        const T gv = gp[i];
        oa[i] = gv * bp[i];
        ob[i] = gv * ap[i];
      }
    });
  });
}

// The vector math's kernels take float tanh, sigmoid and silu: true and
// *v its name for those.
bool vector_act(Activation act, cpu::VAct* v) {
  switch (act) {
    case Activation::Tanh: *v = cpu::VAct::Tanh; return true;
    case Activation::Sigmoid: *v = cpu::VAct::Sigmoid; return true;
    case Activation::Silu: *v = cpu::VAct::Silu; return true;
    default: return false;
  }
}

// The activation's derivative of one order over a block of m <= kBlock
// contiguous elements times a contiguous g: out = g * act^(order)(x), as
// activation_grad's CPU kernel computes it (the vector math for float
// tanh, sigmoid and silu; the element math else).
constexpr int64_t kBlock = 256;
template <class T> void act_grad_block(Activation act, int order, T* out, const T* g, const T* x, int64_t m) {
  if constexpr (std::is_same_v<T, float>) {
    if (cpu::VAct a; vector_act(act, &a)) {
      cpu::vmath_kernels().act_grad_f32(a, order, out, g, 1, x, m);
      return;
    }
  }
  for (int64_t i = 0; i < m; ++i)
    out[i] = g[i] * activation_derivative<T>(act, order, x[i]);
}

// f(T{}) for Float32 or Float64 (the fused activation kernels' dtypes).
template <class F> void dispatch_real(ScalarType dt, const char* op, F&& f) {
  if (dt == kFloat32) return f(float{});
  TG_INTERNAL_ASSERT(dt == kFloat64, op, ": Float32 or Float64 expected, got ", dt);
  f(double{});
}

// activation_grad_product (kernels.h): out = (g * g2) * act^(order)(x),
// operands of out's shape, any strides (expanded views too); contiguous
// runs go kBlock elements at a time through act_grad_block.
void activation_grad_product_kernel(Activation act, int order, const Tensor& out, const Tensor& g, const Tensor& g2,
                                    const Tensor& x) {
  dispatch_real(out.dtype(), "activation_grad_product", [&](auto tag) {
    using T = decltype(tag);
    Tensor ops[4] = {out, g, g2, x};
    cpu::for_each(
        ops, 4,
        [act, order](char** p, const int64_t* s, int64_t n) {
          T prod[kBlock];
          for (int64_t i0 = 0; i0 < n; i0 += kBlock) {
            const int64_t m = std::min(kBlock, n - i0);
            auto at = [&](int op, int64_t i) { return *reinterpret_cast<const T*>(p[op] + (i0 + i) * s[op]); };
            for (int64_t i = 0; i < m; ++i)
              prod[i] = at(1, i) * at(2, i);
            T* o = reinterpret_cast<T*>(p[0] + i0 * s[0]);
            if (s[0] == int64_t(sizeof(T)) && s[3] == int64_t(sizeof(T))) {
              act_grad_block<T>(act, order, o, prod, reinterpret_cast<const T*>(p[3]) + i0, m);
            } else {
              for (int64_t i = 0; i < m; ++i)
                *reinterpret_cast<T*>(p[0] + (i0 + i) * s[0]) =
                    prod[i] * activation_derivative<T>(act, order, at(3, i));
            }
          }
        },
        true, cpu::kCostTranscendental);
  });
}

// activation_grad_pair (kernels.h): both gradients of activation_grad in one
// pass over contiguous operands, kBlock elements at a time.
void activation_grad_pair_kernel(Activation act, int order, const Tensor& out0, const Tensor& out1, const Tensor& gg,
                                 const Tensor& g, const Tensor& x) {
  dispatch_real(out0.dtype(), "activation_grad_pair", [&](auto tag) {
    using T = decltype(tag);
    T *o0 = out0.data_ptr<T>(), *o1 = out1.data_ptr<T>();
    const T *pgg = gg.data_ptr<T>(), *pg = g.data_ptr<T>(), *px = x.data_ptr<T>();
    parallel_for(x.numel(), cpu::elementwise_grain(2 * cpu::kCostTranscendental), [&](int64_t b, int64_t e) {
      T prod[kBlock];
      for (int64_t i0 = b; i0 < e; i0 += kBlock) {
        const int64_t m = std::min(kBlock, e - i0);
        act_grad_block<T>(act, order, o0 + i0, pgg + i0, px + i0, m);
        for (int64_t i = 0; i < m; ++i)
          prod[i] = pgg[i0 + i] * pg[i0 + i];
        act_grad_block<T>(act, order + 1, o1 + i0, prod, px + i0, m);
      }
    });
  });
}

// Taylor mode, order 2 (kernels.h, taylor2.h): f(T{}, begin, end,
// S, P, q, pa, pb, derivs) over chunks of the elements s — S per row of
// `full` (out or dx), P per row of x.
template <class F>
void taylor2_loop(int kind, int64_t k, const Tensor& full, const Tensor& x, const Taylor2Derivatives& d,
                  const Tensor& pa, const Tensor& pb, F&& f) {
  const int64_t rows = x.size(0), q = rows - k, S = rows ? full.numel() / rows : 0, P = rows ? x.numel() / rows : 0;
  const int64_t* ia = kind == 2 ? pa.data_ptr<int64_t>() : nullptr;
  const int64_t* ib = kind == 2 ? pb.data_ptr<int64_t>() : nullptr;
  dispatch_compute(full.dtype(), "taylor2_unary", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T>) {
      auto ptr = [](const Tensor& t) { return t.defined() ? t.data_ptr<T>() : static_cast<const T*>(nullptr); };
      const Taylor2Derivs<T> derivs{ptr(d.d1), ptr(d.d2), ptr(d.z), d.act, d.order};
      parallel_for(
          S, std::max<int64_t>(256, cpu::elementwise_grain(cpu::kCostTranscendental) / std::max<int64_t>(rows, 1)),
          [&](int64_t b, int64_t e) { f(tag, b, e, S, P, q, ia, ib, derivs); });
    } else {
      TG_INTERNAL_ASSERT(false, "taylor2_unary: integer dtype");
    }
  });
}

// The activation's derivatives at z (d.z) for a block of elements
// [s0, s0 + m), m <= kBlock, orders d.order + first .. + first + count - 1
// into out[0..count): the vector math's kernels (tensor/cpu/vmath.h) for
// float tanh, sigmoid and silu up to order 4 (libm's scalar tanhf and expm1f
// took 46% of a CPU PINN step with the Taylor Laplacian), else the element
// math one by one.
template <class T>
void derivative_block(const Taylor2Derivs<T>& d, int first, int count, int64_t s0, int64_t m, T (*out)[kBlock]) {
  if constexpr (std::is_same_v<T, float>) {
    if (cpu::VAct a; vector_act(d.act, &a) && d.order + first + count - 1 <= 4) {
      const float one = 1;
      for (int c = 0; c < count; ++c)
        cpu::vmath_kernels().act_grad_f32(a, d.order + first + c, out[c], &one, 0, d.z + s0, m);
      return;
    }
  }
  for (int c = 0; c < count; ++c)
    for (int64_t i = 0; i < m; ++i)
      out[c][i] = activation_derivative<T>(d.act, d.order + first + c, d.z[s0 + i]);
}

// f(s, a, i) for each element s of [b, e), a[c][i] its derivative of order
// d.order + 1 + c (c < N), taken kBlock elements at a time.
template <int N, class T, class F> void with_derivatives(const Taylor2Derivs<T>& d, int64_t b, int64_t e, F&& f) {
  T a[N][kBlock];
  for (int64_t s0 = b; s0 < e; s0 += kBlock) {
    const int64_t m = std::min(kBlock, e - s0);
    derivative_block<T>(d, 1, N, s0, m, a);
    for (int64_t i = 0; i < m; ++i)
      f(s0 + i, a, i);
  }
}

void taylor2_unary_kernel(int kind, int64_t k, const Tensor& out, const Tensor& x, const Taylor2Derivatives& d,
                          const Tensor& pa, const Tensor& pb) {
  taylor2_loop(kind, k, out, x, d, pa, pb,
               [&](auto tag, int64_t b, int64_t e, int64_t S, int64_t P, int64_t q, const int64_t* ia,
                   const int64_t* ib, const auto& derivs) {
                 using T = decltype(tag);
                 T* o = out.data_ptr<T>();
                 const T* xp = x.data_ptr<T>();
                 if (!derivs.z) {
                   for (int64_t s = b; s < e; ++s)
                     taylor2_forward_at<T>(kind, k, q, S, P, s, o, xp, derivs, ia, ib);
                   return;
                 }
                 with_derivatives<2>(derivs, b, e, [&](int64_t s, const T(*a)[kBlock], int64_t i) {
                   taylor2_forward<T>(kind, k, q, S, P, o + s, xp + (P == S ? s : s % P), a[0][i], a[1][i], ia, ib);
                 });
               });
}

void taylor2_unary_backward_kernel(int kind, int64_t k, const Tensor& dx, const Tensor& dd1, const Tensor& dd2,
                                   const Tensor& g, const Tensor& x, const Taylor2Derivatives& d, const Tensor& pa,
                                   const Tensor& pb) {
  taylor2_loop(kind, k, dx, x, d, pa, pb,
               [&](auto tag, int64_t b, int64_t e, int64_t S, int64_t P, int64_t q, const int64_t* ia,
                   const int64_t* ib, const auto& derivs) {
                 using T = decltype(tag);
                 T *o = dx.data_ptr<T>(), *o1 = dd1.data_ptr<T>(), *o2 = d.z.defined() ? nullptr : dd2.data_ptr<T>();
                 const T *gp = g.data_ptr<T>(), *xp = x.data_ptr<T>();
                 if (!derivs.z) {
                   for (int64_t s = b; s < e; ++s)
                     taylor2_backward_at<T>(kind, k, q, S, P, s, o, o1, o2, gp, xp, derivs, ia, ib);
                   return;
                 }
                 // As taylor2_backward_at with d.z: dd1 gets dz.
                 with_derivatives<3>(derivs, b, e, [&](int64_t s, const T(*a)[kBlock], int64_t i) {
                   T e1, e2;
                   taylor2_backward<T>(kind, k, q, S, P, o + s, &e1, &e2, gp + s, xp + (P == S ? s : s % P), a[0][i],
                                       a[1][i], ia, ib);
                   o1[s] = e1 * a[1][i] + e2 * a[2][i];
                 });
               });
}

}  // namespace

const DerivativeKernels& cpu_derivative_kernels() {
  static const DerivativeKernels k = [] {
    DerivativeKernels t{};
    t.mul_backward = mul_backward_kernel;
    if (tg::detail::switched_on<tg::detail::OffSwitch::kCpuFusedBackward>()) {
      t.activation_grad_product = activation_grad_product_kernel;
      t.activation_grad_pair = activation_grad_pair_kernel;
    }
    t.taylor2_unary = taylor2_unary_kernel;
    t.taylor2_unary_backward = taylor2_unary_backward_kernel;
    return t;
  }();
  return k;
}

const DerivativeKernels& derivative_kernels(Device d) {
  static const DerivativeKernels none{};
  if (!d.is_cuda()) return cpu_derivative_kernels();
  const DerivativeKernels* k = cuda_derivative_kernels();
  return k ? *k : none;
}

}  // namespace tg::autograd::kernels
