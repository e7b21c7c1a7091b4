// Internal: the autograd layer's own kernels, the seam between its rules
// and a device (as tensor/kernels.h is the tensor ops'). A backward or
// Taylor rule runs them where the device has them and falls back to the
// public ops otherwise; none is a tensor op. Each device fills one table:
// autograd/kernels/cpu.cpp and, with CUDA, autograd/kernels/cuda.cu.
#pragma once

#include <cstdint>

#include <tapegrad/tensor/ops.h>
#include <tapegrad/tensor/tensor.h>

namespace tg::autograd::kernels {

// The op's first two derivatives for the order-2 Taylor kernels
// (taylor2_unary): given (d1, d2 [S], contiguous, the compute dtype), or —
// z defined — computed in the kernel from z [S]: d_j = act^(order + j)(z),
// with order + 3 <= tg::kernels::kMaxFusedActivationOrder (the backward's
// chain needs the third).
struct Taylor2Derivatives {
  Tensor d1, d2, z;
  Activation act = Activation::Tanh;
  int order = 0;
};

// Every slot is optional (null: the rule's composite runs).
struct DerivativeKernels {
  // mul's backward in one pass: ga = g * b and gb = g * a, every operand
  // contiguous, of one shape and compute dtype.
  void (*mul_backward)(const Tensor& ga, const Tensor& gb, const Tensor& g, const Tensor& a, const Tensor& b);
  // The backward of a slice in one pass: out (contiguous, any dtype) is
  // zero except positions start, start + step, ... along dim (g.size(dim)
  // of them), which take g's elements. Returns false (and writes nothing)
  // when g's dims before and after dim do not each collapse to one strided
  // dim.
  bool (*embed)(const Tensor& out, const Tensor& g, int64_t dim, int64_t start, int64_t step);
  // out = (g * g2) * act^(order)(x) in one pass (the unrecorded backward of
  // activation_grad), one shape and compute dtype (Float32/64).
  void (*activation_grad_product)(Activation act, int order, const Tensor& out, const Tensor& g, const Tensor& g2,
                                  const Tensor& x);
  // Both gradients of activation_grad(g, x, order) in one pass (its
  // unrecorded backward): out0 = gg * act^(order)(x), out1 = (gg * g) *
  // act^(order + 1)(x), every operand contiguous, of one shape and dtype
  // (Float32/64), order + 1 <= kMaxFusedActivationOrder.
  void (*activation_grad_pair)(Activation act, int order, const Tensor& out0, const Tensor& out1, const Tensor& gg,
                               const Tensor& g, const Tensor& x);
  // Taylor mode at order 2, one pass (autograd/ops/taylor.h): x [k + q, S]
  // contiguous holds the first (k rows) and second (q rows) coefficients,
  // d the op's first two derivatives d1, d2 [S] (Taylor2Derivatives);
  // writes out [k + q, S] = [d1 x1; d1 x2 + d2 / 2 * cross] with the cross
  // term by `kind`: 0 (q == k): row a is x1[a]^2; 1 (q == 1): the sum over a
  // of x1[a]^2; 2: row r is x1[pa[r]] x1[pb[r]] (pa, pb Int64 [q], on the
  // device). x may be [k + q, P] with P dividing S: element s reads x[:, s
  // % P] (rows broadcast over the shape's outer part). Float32/64.
  void (*taylor2_unary)(int kind, int64_t k, const Tensor& out, const Tensor& x, const Taylor2Derivatives& d,
                        const Tensor& pa, const Tensor& pb);
  // taylor2_unary's backward in one pass (not recorded): from g [k + q, S]
  // and its inputs (x as above), writes dx [k + q, S], dd1 [S] = the sum over
  // rows of g x, dd2 [S] = the sum over the second rows of g2 * cross / 2;
  // with d.z, the chain through the derivatives instead: dd1 = dz = that
  // dd1 * act^(order + 2)(z) + that dd2 * act^(order + 3)(z) (dd2 unused).
  void (*taylor2_unary_backward)(int kind, int64_t k, const Tensor& dx, const Tensor& dd1, const Tensor& dd2,
                                 const Tensor& g, const Tensor& x, const Taylor2Derivatives& d, const Tensor& pa,
                                 const Tensor& pb);
};

// The table of device d (the CPU's, or its GPU's when built with CUDA; an
// empty one otherwise).
const DerivativeKernels& derivative_kernels(Device d);

const DerivativeKernels& cpu_derivative_kernels();
// Defined by autograd/kernels/cuda.cu (null from no_cuda.cpp): chosen at
// link time, as tensor/kernels.h's backends.
const DerivativeKernels* cuda_derivative_kernels();

}  // namespace tg::autograd::kernels
