// CUDA backend, FFT family: cuFFT over the last 1 to 3 dims of contiguous
// data, with plans cached per thread (cuda/runtime/libraries.cpp, as
// PyTorch's plan cache) and work areas from the call's launch encoder (the
// graph's own memory under capture, so the transforms are capturable).
// Transforms over other dims run on a permuted contiguous copy; more than
// three dims go three at a time (the transform is separable).
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

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

// ---- the input of a C2R: gathered, scaled and zero-padded in one pass --------------------
// Division by a fixed divisor as a multiply-high and a shift (Granlund and
// Montgomery; numerators below 2^31): the gather's index arithmetic, a few
// instructions per element where a division is tens.
struct FastDiv {
  uint32_t d = 1, mul = 0, shift = 0;
  FastDiv() = default;
  explicit FastDiv(uint32_t divisor) : d(divisor) {
    while ((uint64_t(1) << shift) < d)
      ++shift;
    mul = uint32_t(((uint64_t(1) << 32) * ((uint64_t(1) << shift) - d)) / d + 1);
  }
  __device__ uint32_t div(uint32_t n) const { return (__umulhi(n, mul) + n) >> shift; }
};

constexpr int kPadDims = 8;  // leading dims of the input (after merging)
struct PadArgs {
  int nd = 0;                // leading dims
  FastDiv size[kPadDims];    // their sizes, innermost last
  int64_t stride[kPadDims];  // the input's strides along them (elements)
  int64_t last_stride = 0;   // along the spectrum's dim
  FastDiv full;              // entries per output row
  uint32_t m = 0;            // entries per input row (m <= full)
};

// out [rows, full] (contiguous) = scale * in[row, k] for k < m, else 0; in
// given by its leading dims' sizes and strides.
template <class V, class R> __global__ void c2r_pad_k(V* out, const V* in, PadArgs p, uint32_t total, R scale) {
  const uint32_t step = blockDim.x * gridDim.x;
  for (uint32_t t = blockIdx.x * blockDim.x + threadIdx.x; t < total; t += step) {
    uint32_t row = p.full.div(t);
    const uint32_t k = t - row * p.full.d;
    V v{R(0), R(0)};
    if (k < p.m) {
      int64_t off = int64_t(k) * p.last_stride;
      for (int d = p.nd - 1; d >= 0; --d) {
        const uint32_t q = p.size[d].div(row);
        off += int64_t(row - q * p.size[d].d) * p.stride[d];
        row = q;
      }
      const V x = in[off];
      v.x = x.x * scale;
      v.y = x.y * scale;
    }
    out[t] = v;
  }
}

// work (contiguous, the spectrum's dim last, `full` entries) = scale * in
// zero-padded along it. False when the sizes are past the kernel's 32-bit
// indexing or its dims (the caller pads with tensor ops instead).
bool c2r_pad(const Tensor& work, const Tensor& in, double scale) {
  const int64_t d_last = in.dim() - 1, total = work.numel();
  if (total == 0) return true;
  if (total >= (int64_t(1) << 31)) return false;
  // The leading dims, merged where the input's strides allow, size 1 dropped.
  std::vector<std::pair<int64_t, int64_t>> dims;  // (size, stride), outermost first
  for (int64_t d = 0; d < d_last; ++d) {
    if (in.size(d) == 1) continue;
    if (!dims.empty() && dims.back().second == in.stride(d) * in.size(d))
      dims.back() = {dims.back().first * in.size(d), in.stride(d)};
    else dims.push_back({in.size(d), in.stride(d)});
  }
  if (int64_t(dims.size()) > kPadDims) return false;
  PadArgs p;
  p.nd = int(dims.size());
  for (int d = 0; d < p.nd; ++d) {
    p.size[d] = FastDiv(uint32_t(dims[size_t(d)].first));
    p.stride[d] = dims[size_t(d)].second;
  }
  p.last_stride = in.stride(d_last);
  p.full = FastDiv(uint32_t(work.size(d_last)));
  p.m = uint32_t(in.size(d_last));
  DeviceGuard g(work.device().index());
  cudaStream_t s = stream_of(work);
  LaunchEncoder access(s);
  access.read(in);
  access.write(work);
  const unsigned blocks = unsigned(std::min<int64_t>((total + 255) / 256, 65536));
  if (work.dtype() == kComplex64)
    c2r_pad_k<float2, float><<<blocks, 256, 0, s>>>(static_cast<float2*>(work.data_ptr()),
                                                    static_cast<const float2*>(in.data_ptr()), p, uint32_t(total),
                                                    float(scale));
  else
    c2r_pad_k<double2, double><<<blocks, 256, 0, s>>>(
        static_cast<double2*>(work.data_ptr()), static_cast<const double2*>(in.data_ptr()), p, uint32_t(total), scale);
  TG_CUDA_CHECK(cudaGetLastError(), "irfft");
  return true;
}

void fft_c2r_kernel(const Tensor& out, const Tensor& in, const IntList& dims, double scale) {
  const cufftType type = in.dtype() == kComplex64 ? CUFFT_C2R : CUFFT_Z2D;
  IntList rest = dims;
  const IntList group = take_group(rest);  // holds the onesided dim, last
  // The buffer cuFFT's C2R writes (its input): in, with any strides, scaled
  // (the transform is linear) and, when short, zeros appended. (A fill of
  // the tail and a strided scaled copy, through the elementwise kernels'
  // general indexing, took 61 us at 128 x 128 where the gather takes one
  // pass.)
  const int64_t last = dims.back(), full = out.size(last) / 2 + 1, m = in.size(last);
  Tensor work;
  if (!rest.empty() && m == full && scale == 1 && in.is_contiguous()) {
    work = in;  // the transforms over the other dims come first and do not write it
  } else {
    IntList sizes = in.sizes();
    sizes[size_t(last)] = full;
    work = tg::detail::new_empty(sizes, in.dtype(), in.device());
    // One gather when the spectrum's dim is last (the usual case), else
    // (or past 32-bit sizes) a fill, then a scaled copy into the head.
    if (last != in.dim() - 1 || !c2r_pad(work, in, scale)) {
      const Tensor head = m < full ? raw::narrow(work, last, 0, m) : work;
      if (m < full) raw::zero_(work);
      if (scale != 1)
        kernels::backend(in.device(), "irfft")
            .binary_scalar(kernels::BinaryOp::Mul, raw::view_as_real(head), raw::view_as_real(in), scale, 0);
      else raw::copy_(head, in);
    }
  }
  if (!rest.empty()) {  // the other dims, into a buffer of our own
    Tensor done = tg::detail::new_empty(work.sizes(), work.dtype(), work.device());
    fft_c2c_kernel(done, work, rest, false);
    work = done;
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

// ---- the mode mixing of a 2-D spectral convolution ----------------------------------------
// out (dense) is zeroed by one memset; then each kept mode is a small
// product, out[n, :] = x[n, :] w (in x out), over the n: a block per mode
// (and chunk of n) stages that mode's weights and inputs in shared memory
// (their reads are scattered: each element of a mode lies in a different
// line) and writes the outputs. A thread per kept output reading the
// weights itself read them line by line, 77 us at 128 x 128 (H200). Weights
// too large to stage take that path.
struct MixArgs {
  int64_t n, oc, h, in, m1, m2;
  int64_t so[4], sx[4], sa[4], sb[4];
};

// Where kept mode `mode` (2 m1 rows of m2 columns: the top rows, then the
// bottom ones) lies: its row of out and x, its weight and the row in it.
struct Mode {
  int64_t row, wr, c;
  bool top;
};
__device__ inline Mode mode_of(const MixArgs& p, int64_t mode) {
  Mode m;
  m.c = mode % p.m2;
  const int64_t kr = mode / p.m2;
  m.top = kr < p.m1;
  m.wr = m.top ? kr : kr - p.m1;
  m.row = m.top ? kr : p.h - 2 * p.m1 + kr;
  return m;
}

// 32-bit index arithmetic inside a block (the host checks the sizes): its
// divisions are a few instructions where 64-bit ones are a hundred, which
// bounded this kernel (19 us at both grids on an H200, under ncu).
template <class R>
__global__ void spectral_mix2d_staged_k(R* y, const R* x, const R* a, const R* b, MixArgs p, int chunk, int chunks) {
  extern __shared__ unsigned char smem[];
  const int in = int(p.in), oc = int(p.oc), n = int(p.n);
  R* ws = reinterpret_cast<R*>(smem);  // [in, out] complex
  R* xs = ws + 2 * in * oc;            // [chunk, in] complex
  const Mode m = mode_of(p, blockIdx.x);
  const int64_t* st = m.top ? p.sa : p.sb;
  const R* w = (m.top ? a : b) + 2 * (m.wr * st[2] + m.c * st[3]);
  for (int e = threadIdx.x; e < in * oc; e += blockDim.x) {
    const int i = e / oc, o = e - i * oc;
    const R* src = w + 2 * (i * st[0] + o * st[1]);
    ws[2 * e] = src[0];
    ws[2 * e + 1] = src[1];
  }
  const R* xm = x + 2 * (m.row * p.sx[2] + m.c * p.sx[3]);
  R* ym = y + 2 * (m.row * p.so[2] + m.c * p.so[3]);
  for (int k = blockIdx.y; k < chunks; k += gridDim.y) {
    const int n0 = k * chunk, nc = chunk < n - n0 ? chunk : n - n0;
    __syncthreads();  // the previous chunk's reads of xs are done (and ws is staged)
    for (int e = threadIdx.x; e < nc * in; e += blockDim.x) {
      const int nn = e / in, i = e - nn * in;
      const R* src = xm + 2 * ((n0 + nn) * p.sx[0] + i * p.sx[1]);
      xs[2 * e] = src[0];
      xs[2 * e + 1] = src[1];
    }
    __syncthreads();
    for (int e = threadIdx.x; e < nc * oc; e += blockDim.x) {
      const int nn = e / oc, o = e - nn * oc;
      const R* xr = xs + 2 * nn * in;
      const R* wr = ws + 2 * o;
      R re = 0, im = 0;
#pragma unroll 8
      for (int i = 0; i < in; ++i) {
        const R ar = xr[2 * i], ai = xr[2 * i + 1], vr = wr[2 * i * oc], vi = wr[2 * i * oc + 1];
        re += ar * vr - ai * vi;
        im += ar * vi + ai * vr;
      }
      R* yo = ym + 2 * ((n0 + nn) * p.so[0] + o * p.so[1]);
      yo[0] = re;
      yo[1] = im;
    }
  }
}

template <class R>
__global__ void spectral_mix2d_k(R* y, const R* x, const R* a, const R* b, MixArgs p, int64_t total) {
  const int64_t step = int64_t(blockDim.x) * gridDim.x;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += step) {
    const int64_t o = t % p.oc, bi = (t / p.oc) % p.n;
    const Mode m = mode_of(p, t / (p.oc * p.n));
    const R* w = m.top ? a : b;
    const int64_t* st = m.top ? p.sa : p.sb;
    const R* xv = x + 2 * (bi * p.sx[0] + m.row * p.sx[2] + m.c * p.sx[3]);
    const R* wv = w + 2 * (o * st[1] + m.wr * st[2] + m.c * st[3]);
    const int64_t xs = 2 * p.sx[1], ws = 2 * st[0];
    R re = 0, im = 0;
#pragma unroll 4
    for (int64_t i = 0; i < p.in; ++i) {
      const R xr = xv[i * xs], xi = xv[i * xs + 1], vr = wv[i * ws], vi = wv[i * ws + 1];
      re += xr * vr - xi * vi;
      im += xr * vi + xi * vr;
    }
    R* yo = y + 2 * (bi * p.so[0] + o * p.so[1] + m.row * p.so[2] + m.c * p.so[3]);
    yo[0] = re;
    yo[1] = im;
  }
}

// Whether t's elements fill [data_ptr, data_ptr + numel) exactly (dense in
// some order of its dims).
bool dense(const Tensor& t) {
  IntList order(size_t(t.dim()));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int64_t i, int64_t j) { return t.stride(i) < t.stride(j); });
  int64_t expect = 1;
  for (int64_t d : order) {
    if (t.size(d) == 1) continue;
    if (t.stride(d) != expect) return false;
    expect *= t.size(d);
  }
  return true;
}

void spectral_mix2d_kernel(const Tensor& out, const Tensor& x, const Tensor& w1, const Tensor& w2) {
  TG_INTERNAL_ASSERT(dense(out), "spectral_mix2d: the CUDA kernel expected a dense output, got strides ",
                     shape_str(out.strides()));
  MixArgs p;
  p.n = out.size(0);
  p.oc = out.size(1);
  p.h = out.size(2);
  p.in = w1.size(0);
  p.m1 = w1.size(2);
  p.m2 = w1.size(3);
  for (int d = 0; d < 4; ++d) {
    p.so[d] = out.stride(d);
    p.sx[d] = x.stride(d);
    p.sa[d] = w1.stride(d);
    p.sb[d] = w2.stride(d);
  }
  DeviceGuard g(out.device().index());
  cudaStream_t s = stream_of(out);
  LaunchEncoder access(s);
  access.read(x);
  access.read(w1);
  access.read(w2);
  access.write(out);
  TG_CUDA_CHECK(cudaMemsetAsync(out.data_ptr(), 0, size_t(out.numel()) * element_size(out.dtype()), s),
                "spectral_mix2d");
  const int64_t modes = 2 * p.m1 * p.m2, total = p.n * p.oc * modes;
  if (total == 0) return;
  // Staged: the mode's weights and a chunk of n's inputs in 48 KB of shared
  // memory (the static limit), a chunk of at least one.
  const int64_t elem = int64_t(element_size(out.dtype())), budget = 48 * 1024;
  const int64_t wbytes = p.in * p.oc * elem;
  int64_t chunk = p.in > 0 ? std::min<int64_t>(p.n, (budget - wbytes) / (p.in * elem)) : p.n;
  // Some 512 blocks at least (a few per SM): the n cut into that many
  // chunks when the modes are fewer (each block stages its mode's weights).
  const int64_t cuts = std::max<int64_t>(1, (512 + modes - 1) / std::max<int64_t>(modes, 1));
  if (chunk > 0) chunk = std::min(chunk, std::max<int64_t>(1, (p.n + cuts - 1) / cuts));
  auto dispatch = [&](auto r) {
    using R = decltype(r);
    R* yp = static_cast<R*>(out.data_ptr());
    const R* xp = static_cast<const R*>(x.data_ptr());
    const R* ap = static_cast<const R*>(w1.data_ptr());
    const R* bp = static_cast<const R*>(w2.data_ptr());
    // (32-bit indices within a block: n, in x out and a chunk's elements.)
    if (p.in > 0 && chunk >= 1 && modes <= INT32_MAX && p.n <= INT32_MAX && p.in * p.oc <= INT32_MAX &&
        chunk * std::max(p.in, p.oc) <= INT32_MAX) {
      const int64_t chunks = (p.n + chunk - 1) / chunk;
      const dim3 grid(unsigned(modes), unsigned(std::min<int64_t>(chunks, 65535)), 1);
      const size_t shared = size_t(wbytes + chunk * p.in * elem);
      spectral_mix2d_staged_k<R><<<grid, 256, shared, s>>>(yp, xp, ap, bp, p, int(chunk), int(chunks));
    } else {
      const unsigned blocks = unsigned(std::min<int64_t>((total + 255) / 256, 65536));
      spectral_mix2d_k<R><<<blocks, 256, 0, s>>>(yp, xp, ap, bp, p, total);
    }
  };
  if (out.dtype() == kComplex64) dispatch(float{});
  else dispatch(double{});
  TG_CUDA_CHECK(cudaGetLastError(), "spectral_mix2d");
}

}  // namespace

void register_fft(kernels::Backend& b) {
  b.fft_c2c = fft_c2c_kernel;
  b.fft_r2c = fft_r2c_kernel;
  b.fft_c2r = fft_c2r_kernel;
  b.spectral_mix2d = spectral_mix2d_kernel;
}

}  // namespace tg::cuda
