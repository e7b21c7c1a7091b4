// Internal: the grid family's kernel table (docs/ARCHITECTURE.md "Kernel
// tables per family"). One GridKernels per device, chosen at link time like
// kernels::LinalgKernels: the CPU table is tensor/grid.cpp's, the CUDA table
// cuda/kernels/grid.cu's (cuDNN when the build found it, through the library
// handles and workspaces of cuda/runtime/libraries.h), nullptr from
// cuda/kernels/stub.cpp without CUDA.
//
// Every slot is optional. Where a slot is null, or answers false (a shape,
// dtype or layout it does not take, or cuDNN found no algorithm), the op
// layer (tensor/grid.cpp) computes the same result as im2col + GEMM: the
// windows gathered by strided copies into columns, one batched GEMM per
// group (raw::matmul: Eigen on the CPU, cuBLAS on CUDA), and the columns
// added back (col2im) for the input gradient. The raw entries check every
// argument first; a slot sees:
//   - x [N, C, s...], w [O, C / groups, k...], y [N, O, o...] with 1 to 3
//     spatial dims, one floating dtype, one device, N >= 1, every other size
//     >= 1, any strides (a slot that needs a layout answers false);
//   - geometry lists of one entry per spatial dim.
// A slot writes its whole result into `out`, a fresh contiguous tensor. In
// deterministic mode (tg::use_deterministic_algorithms) a slot picks
// deterministic algorithms only, and answers false where it has none (the
// GEMM path is deterministic).
#pragma once

#include <tapegrad/tensor/device.h>
#include <tapegrad/tensor/tensor.h>

namespace tg::kernels {

struct ConvGeometry {
  IntList stride, padding, dilation;
  int64_t groups = 1;
};

// A linear resampling along one dim (grid.def's _resample_linear): the
// operands contiguous, Float32 or Float64, viewed as [outer, points,
// inner]; output point j := (1 - w1[j]) x[i0[j]] + w1[j] x[i1[j]] over `in`
// input points, the adjoint's point i := the sum over j in [off0[i],
// off0[i + 1]) of (1 - w1[j]) g[j], then over [off1[i], off1[i + 1]) of
// w1[j] g[j] (i0 and i1 are nondecreasing: each point's outputs are one
// run). i0, i1 Int64 [out], w1 Float64 [out], off0, off1 Int64 [in + 1],
// all on the operands' device; every size >= 1.
struct ResampleStencil {
  int64_t outer = 0, in = 0, out = 0, inner = 0;
  Tensor i0, i1, w1, off0, off1;
};

struct GridKernels {
  // out [N, O, o...] := the convolution of x by w.
  bool (*conv_forward)(const Tensor& out, const Tensor& x, const Tensor& w, const ConvGeometry& g) = nullptr;
  // out [N, C, s...] := the input gradient of that convolution for y.
  bool (*conv_backward_input)(const Tensor& out, const Tensor& y, const Tensor& w, const ConvGeometry& g) = nullptr;
  // out [O, C / groups, k...] := its weight gradient at x for y.
  bool (*conv_backward_weight)(const Tensor& out, const Tensor& x, const Tensor& y, const ConvGeometry& g) = nullptr;
  // The group primitives (grid.def's _group_*), arguments checked, numel >
  // 0; t, x, a, b as the op's (b undefined: none), scale and bias [N or 1, K]
  // or undefined (not both). out [N, groups] := the group sums of a * b;
  // out := x minus its group means; out := scale * t + bias.
  bool (*group_sum)(const Tensor& out, const Tensor& a, const Tensor& b, int64_t groups) = nullptr;
  bool (*group_center)(const Tensor& out, const Tensor& x, int64_t groups) = nullptr;
  bool (*group_affine)(const Tensor& out, const Tensor& t, const Tensor& scale, const Tensor& bias) = nullptr;
  // out [outer, out, inner] := x [outer, in, inner] resampled by st; out
  // [outer, in, inner] := the adjoint on g [outer, out, inner].
  bool (*resample_linear)(const Tensor& out, const Tensor& x, const ResampleStencil& st) = nullptr;
  bool (*resample_linear_backward)(const Tensor& out, const Tensor& g, const ResampleStencil& st) = nullptr;
};

// The family's table for a device (never null: the CPU's has no slots).
const GridKernels& grid_kernels(Device d);
// The CUDA table: cuda/kernels/grid.cu, or nullptr (cuda/kernels/stub.cpp).
const GridKernels* cuda_grid_kernels();

}  // namespace tg::kernels
