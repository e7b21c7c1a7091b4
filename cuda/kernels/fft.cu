// CUDA backend, FFT family: cuFFT over the last 1 to 3 dims of contiguous
// data, with plans cached per thread (cuda/runtime/libraries.cpp, as
// PyTorch's plan cache) and work areas from the call's launch encoder (the
// graph's own memory under capture, so the transforms are capturable).
// Transforms over other dims run on a permuted contiguous copy; more than
// three dims go three at a time (the transform is separable).
#include <algorithm>
#include <cstdint>
#include <numeric>

#include <tapegrad/cuda/device.h>
#include <tapegrad/tensor/ops.h>
#include <tapegrad/tensor/raw.h>
#include "cuda/runtime/libraries.h"
#include "tensor/kernels.h"
#include "tensor/op_util.h"

#include "loops.cuh"
#include "register.h"

namespace tg::cuda {
namespace {

// The permutation that puts `group` (sorted) last, the other dims first in
// order; the identity when they are last already.
IntList perm_last(int64_t ndim, const IntList& group) {
  IntList p;
  for (int64_t d = 0; d < ndim; ++d)
    if (std::find(group.begin(), group.end(), d) == group.end()) p.push_back(d);
  p.insert(p.end(), group.begin(), group.end());
  return p;
}
IntList inverse_perm(const IntList& p) {
  IntList q(p.size());
  for (size_t i = 0; i < p.size(); ++i)
    q[size_t(p[i])] = int64_t(i);
  return q;
}
bool is_identity(const IntList& p) {
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] != int64_t(i)) return false;
  return true;
}
// The last (up to) three of `dims`, taken off it.
IntList take_group(IntList& dims) {
  const size_t k = std::min<size_t>(3, dims.size());
  IntList g(dims.end() - long(k), dims.end());
  dims.resize(dims.size() - k);
  return g;
}

bool aligned16(const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; }

// One cuFFT call: x and y contiguous with the transformed dims last; signal
// the transformed sizes (real ones for R2C and C2R). cuFFT refuses data that
// is not 16-byte aligned (CUFFT_INVALID_VALUE: a Float64 view at an odd
// offset, say): such an input is copied first.
void run_plan(cufftType type, const Tensor& y, const Tensor& x_in, const IntList& signal, bool forward,
              const char* op) {
  TG_INTERNAL_ASSERT(aligned16(y), op, ": a cuFFT output that is not 16-byte aligned");
  const Tensor x = aligned16(x_in) ? x_in : raw::clone(x_in);
  const int device = y.device().index();
  DeviceGuard g(device);
  cudaStream_t s = stream_of(y);
  LaunchEncoder access(s);
  access.read(x);
  access.write(y);
  long long n[3] = {1, 1, 1};
  long long points = 1;
  for (size_t i = 0; i < signal.size(); ++i) {
    n[i] = signal[i];
    points *= signal[i];
  }
  const Tensor& real_side = type == CUFFT_C2R || type == CUFFT_Z2D ? y : x;
  const long long batch = real_side.numel() / points;
  const lib::FftPlan plan = lib::cufft_plan(device, type, int(signal.size()), n, batch, access.recording(), op);
  TG_CUFFT_CHECK(cufftSetStream(plan.handle, s), op);
  TG_CUFFT_CHECK(cufftSetWorkArea(plan.handle, plan.work ? access.workspace(plan.work) : nullptr), op);
  void* in = x.data_ptr();
  void* out = y.data_ptr();
  const int dir = forward ? CUFFT_FORWARD : CUFFT_INVERSE;
  switch (type) {
    case CUFFT_C2C:
      TG_CUFFT_CHECK(cufftExecC2C(plan.handle, static_cast<cufftComplex*>(in), static_cast<cufftComplex*>(out), dir),
                     op);
      break;
    case CUFFT_Z2Z:
      TG_CUFFT_CHECK(
          cufftExecZ2Z(plan.handle, static_cast<cufftDoubleComplex*>(in), static_cast<cufftDoubleComplex*>(out), dir),
          op);
      break;
    case CUFFT_R2C:
      TG_CUFFT_CHECK(cufftExecR2C(plan.handle, static_cast<cufftReal*>(in), static_cast<cufftComplex*>(out)), op);
      break;
    case CUFFT_D2Z:
      TG_CUFFT_CHECK(
          cufftExecD2Z(plan.handle, static_cast<cufftDoubleReal*>(in), static_cast<cufftDoubleComplex*>(out)), op);
      break;
    case CUFFT_C2R:
      TG_CUFFT_CHECK(cufftExecC2R(plan.handle, static_cast<cufftComplex*>(in), static_cast<cufftReal*>(out)), op);
      break;
    case CUFFT_Z2D:
      TG_CUFFT_CHECK(
          cufftExecZ2D(plan.handle, static_cast<cufftDoubleComplex*>(in), static_cast<cufftDoubleReal*>(out)), op);
      break;
  }
}

IntList sizes_of(const Tensor& t, const IntList& dims) {
  IntList s;
  for (int64_t d : dims)
    s.push_back(t.size(d));
  return s;
}

void fft_c2c_kernel(const Tensor& out, const Tensor& in, const IntList& dims, bool forward) {
  const cufftType type = in.dtype() == kComplex64 ? CUFFT_C2C : CUFFT_Z2Z;
  IntList rest = dims;
  Tensor src = in;
  while (!rest.empty()) {
    const IntList group = take_group(rest);
    const IntList p = perm_last(in.dim(), group);
    const bool trailing = is_identity(p);
    const Tensor x = trailing ? src : raw::contiguous(raw::permute(src, p));
    const Tensor y = trailing && rest.empty() ? out : tg::detail::new_empty(x.sizes(), x.dtype(), x.device());
    run_plan(type, y, x, sizes_of(src, group), forward, "fft");
    const Tensor back = trailing ? y : raw::permute(y, inverse_perm(p));
    if (rest.empty()) {
      if (!back.is_same(out)) raw::copy_(out, back);
    } else {
      src = raw::contiguous(back);
    }
  }
}

void fft_r2c_kernel(const Tensor& out, const Tensor& in, const IntList& dims) {
  const cufftType type = in.dtype() == kFloat32 ? CUFFT_R2C : CUFFT_D2Z;
  IntList rest = dims;
  const IntList group = take_group(rest);  // holds the onesided dim, last
  const IntList p = perm_last(in.dim(), group);
  const bool trailing = is_identity(p);
  const Tensor x = trailing ? in : raw::contiguous(raw::permute(in, p));
  IntList ysizes = x.sizes();
  ysizes.back() = ysizes.back() / 2 + 1;
  const Tensor y = trailing && rest.empty() ? out : tg::detail::new_empty(ysizes, out.dtype(), out.device());
  run_plan(type, y, x, sizes_of(in, group), true, "rfft");
  const Tensor back = trailing ? y : raw::permute(y, inverse_perm(p));
  if (rest.empty()) {
    if (!back.is_same(out)) raw::copy_(out, back);
    return;
  }
  fft_c2c_kernel(out, raw::contiguous(back), rest, true);
}

void fft_c2r_kernel(const Tensor& out, const Tensor& in, const IntList& dims, double scale) {
  const cufftType type = in.dtype() == kComplex64 ? CUFFT_C2R : CUFFT_Z2D;
  IntList rest = dims;
  const IntList group = take_group(rest);  // holds the onesided dim, last
  // The other dims first, into a buffer of our own: cuFFT's C2R writes its
  // input. The scale is applied on the way (to the input: linear).
  Tensor work;
  if (rest.empty()) {
    work = scale != 1 ? raw::mul(in, Scalar(scale)) : raw::clone(in);
  } else {
    work = tg::detail::new_empty(in.sizes(), in.dtype(), in.device());
    fft_c2c_kernel(work, in, rest, false);
    if (scale != 1) raw::mul_(work, Scalar(scale));
  }
  const IntList p = perm_last(in.dim(), group);
  const bool trailing = is_identity(p);
  const Tensor x = trailing ? work : raw::contiguous(raw::permute(work, p));
  const IntList signal = sizes_of(out, group);
  IntList ysizes = x.sizes();
  ysizes.back() = signal.back();
  const Tensor y = trailing ? out : tg::detail::new_empty(ysizes, out.dtype(), out.device());
  run_plan(type, y, x, signal, false, "irfft");
  if (!trailing) raw::copy_(out, raw::permute(y, inverse_perm(p)));
}

}  // namespace

void register_fft(kernels::Backend& b) {
  b.fft_c2c = fft_c2c_kernel;
  b.fft_r2c = fft_r2c_kernel;
  b.fft_c2r = fft_c2r_kernel;
}

}  // namespace tg::cuda
