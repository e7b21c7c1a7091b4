// The autograd layer's CPU kernels (kernels.h): mul's backward and the
// order-2 Taylor rule; the other slots fall back to the public ops.
#include <algorithm>
#include <type_traits>

#include "autograd/kernels/kernels.h"
#include "autograd/kernels/taylor2.h"
#include "tensor/cpu/loops.h"

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
    parallel_for(g.numel(), 16384, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        const T gv = gp[i];
        oa[i] = gv * bp[i];
        ob[i] = gv * ap[i];
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
      parallel_for(S, std::max<int64_t>(256, 32768 / std::max<int64_t>(rows, 1)),
                   [&](int64_t b, int64_t e) { f(tag, b, e, S, P, q, ia, ib, derivs); });
    } else {
      TG_INTERNAL_ASSERT(false, "taylor2_unary: integer dtype");
    }
  });
}

void taylor2_unary_kernel(int kind, int64_t k, const Tensor& out, const Tensor& x, const Taylor2Derivatives& d,
                          const Tensor& pa, const Tensor& pb) {
  taylor2_loop(kind, k, out, x, d, pa, pb,
               [&](auto tag, int64_t b, int64_t e, int64_t S, int64_t P, int64_t q, const int64_t* ia,
                   const int64_t* ib, const auto& derivs) {
                 using T = decltype(tag);
                 T* o = out.data_ptr<T>();
                 const T* xp = x.data_ptr<T>();
                 for (int64_t s = b; s < e; ++s)
                   taylor2_forward_at<T>(kind, k, q, S, P, s, o, xp, derivs, ia, ib);
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
                 for (int64_t s = b; s < e; ++s)
                   taylor2_backward_at<T>(kind, k, q, S, P, s, o, o1, o2, gp, xp, derivs, ia, ib);
               });
}

}  // namespace

const DerivativeKernels& cpu_derivative_kernels() {
  static const DerivativeKernels k = [] {
    DerivativeKernels t{};
    t.mul_backward = mul_backward_kernel;
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
