// The autograd layer's CUDA kernels (kernels.h): mul's backward, a slice's
// backward, the fused product of an activation derivative and the order-2
// Taylor rule. Each launch goes through a LaunchEncoder naming what it reads
// and writes (cuda/launch.h); mul's backward and the activation product are
// fusable steps of a captured graph (cuda/kernels/functors.cuh).
#include <algorithm>

#include "autograd/kernels/kernels.h"
#include "autograd/kernels/taylor2.h"
#include "cuda/kernels/functors.cuh"
#include "cuda/kernels/loops.cuh"
#include <tapegrad/cuda/device.h>

namespace tg::autograd::kernels {
namespace {

using namespace tg::cuda;
using tg::kernels::dispatch_bytes;
using tg::kernels::dispatch_compute;

template <class T>
__global__ void mul_backward_kernel_impl(T* ga, T* gb, const T* g, const T* a, const T* b, int64_t n) {
  wait_for_predecessors();
  const int64_t stride = int64_t(blockDim.x) * gridDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    mul_backward_at<T>(ga, gb, g, a, b, i);
}

// embed: out [outer, n, inner] contiguous, g [outer, len, inner] with
// strides (go, gn, gi) in elements; zero bytes are zero in every dtype. I:
// the index arithmetic's type, uint32_t when every index fits (64-bit
// division is several times dearer: a diagonal's backward into 10^4 64 x 64
// matrices took 0.3 ms in it).
template <class U, class I>
__global__ void embed_kernel_impl(U* out, const U* g, I n, I inner, I start, I step, I len, int64_t go, int64_t gn,
                                  int64_t gi, I total) {
  wait_for_predecessors();
  const I stride = I(blockDim.x) * gridDim.x;
  for (I i = I(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const I in = i % inner, t = i / inner, c = t % n, o = t / n;
    U v{};
    if (c >= start) {
      const I d = c - start;
      if (d % step == 0 && d / step < len) v = g[int64_t(o) * go + int64_t(d / step) * gn + int64_t(in) * gi];
    }
    out[i] = v;
  }
}

// The stride of dims [lo, hi) of t taken as one dim, or -1 when they do not
// collapse (a size-1 dim collapses with anything; an empty range is stride 0).
int64_t collapsed_stride(const Tensor& t, int64_t lo, int64_t hi) {
  int64_t stride = 0, span = 1;  // span: elements covered by the dims after the current one
  bool any = false;
  for (int64_t d = hi - 1; d >= lo; --d) {
    const int64_t size = t.sizes()[size_t(d)], st = t.strides()[size_t(d)];
    if (size == 1) continue;
    if (!any) {
      stride = st;
      any = true;
    } else if (st != stride * span) {
      return -1;
    }
    span *= size;
  }
  return stride;
}

bool embed_kernel(const Tensor& out, const Tensor& g, int64_t dim, int64_t start, int64_t step) {
  const int64_t nd = out.dim();
  const int64_t go = collapsed_stride(g, 0, dim), gi = collapsed_stride(g, dim + 1, nd);
  if (go < 0 || gi < 0 || !out.is_contiguous() || step < 1) return false;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d)
    outer *= out.sizes()[size_t(d)];
  for (int64_t d = dim + 1; d < nd; ++d)
    inner *= out.sizes()[size_t(d)];
  const int64_t n = out.sizes()[size_t(dim)], len = g.sizes()[size_t(dim)], total = out.numel();
  if (total == 0) return true;
  DeviceGuard dg(out.device().index());
  cudaStream_t s = stream_of(out);
  LaunchEncoder access(s);
  access.write(out);
  access.read(g);
  dispatch_bytes(element_size(out.dtype()), [&](auto u) {
    using U = decltype(u);
    auto run = [&](auto idx) {
      using I = decltype(idx);
      launch_pdl(&embed_kernel_impl<U, I>, grid_for(total), kBlock, s, out.device().index(), "slice backward",
                 static_cast<U*>(out.data_ptr()), static_cast<const U*>(g.data_ptr()), I(n), I(inner), I(start),
                 I(step), I(len), go, g.strides()[size_t(dim)], gi, I(total));
    };
    // 32 bits when total + the grid's stride stays below 2^32 (start and
    // len are at most n; a slice's step may exceed it).
    if (total + int64_t(kBlock) * 65536 < int64_t(UINT32_MAX) && step < int64_t(UINT32_MAX) && start <= n)
      run(uint32_t{});
    else run(int64_t{});
  });
  return true;
}

void mul_backward_kernel(const Tensor& ga, const Tensor& gb, const Tensor& g, const Tensor& a, const Tensor& b) {
  const int64_t n = g.numel();
  if (n == 0) return;
  dispatch_compute(g.dtype(), "mul backward", [&](auto tag) {
    using T = decltype(tag);
    DeviceGuard dg(g.device().index());
    T* pga = static_cast<T*>(ga.data_ptr());
    LaunchEncoder access(stream_of(g));
    access.write(ga);
    access.write(gb);
    for (const Tensor* t : {&g, &a, &b})
      access.read(*t);
    launch_pdl(&mul_backward_kernel_impl<T>, grid_for(n), kBlock, stream_of(g), g.device().index(), "mul backward", pga,
               static_cast<T*>(gb.data_ptr()), static_cast<const T*>(g.data_ptr()), static_cast<const T*>(a.data_ptr()),
               static_cast<const T*>(b.data_ptr()), n);
    if (access.recording()) {
      fusion::Step st;
      st.kind = fusion::kMulBackward;
      st.nops = 5;
      st.nout = 2;
      const Tensor* t[5] = {&ga, &gb, &g, &a, &b};
      for (int o = 0; o < 5; ++o)
        st.ptr[o] = static_cast<char*>(t[o]->data_ptr());
      access.fusable(reinterpret_cast<const void*>(&mul_backward_kernel_impl<T>), &pga, sizeof(pga), g.dtype(), n, st);
    }
  });
}

// ---- activation derivatives ------------------------------------------------------------

void activation_grad_product_kernel(Activation act, int order, const Tensor& out, const Tensor& g, const Tensor& g2,
                                    const Tensor& x) {
  Tensor ops[4] = {out, g, g2, x};
  tg::kernels::dispatch_floating(out.dtype(), "activation_grad", [&](auto tag) {
    launch(ops, 4, "activation_grad", ActivationGradProductFn<decltype(tag)>{act, order});
  });
}

// ---- Taylor mode, order 2 (kernels.h, taylor2.h) ----------------------------------
// One thread per element s, looping over the coefficient rows (coalesced
// across threads: row r of every s is contiguous).
// x's rows are [rows, P] (P = S, or their period when broadcast).
template <class T>
__global__ void taylor2_unary_k(int kind, int64_t k, int64_t q, int64_t S, int64_t P, T* __restrict__ o,
                                const T* __restrict__ x, Taylor2Derivs<T> d, const int64_t* __restrict__ pa,
                                const int64_t* __restrict__ pb) {
  for (int64_t s = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; s < S; s += int64_t(gridDim.x) * blockDim.x)
    taylor2_forward_at<T>(kind, k, q, S, P, s, o, x, d, pa, pb);
}

template <class T>
__global__ void taylor2_unary_backward_k(int kind, int64_t k, int64_t q, int64_t S, int64_t P, T* __restrict__ dx,
                                         T* __restrict__ dd1, T* __restrict__ dd2, const T* __restrict__ g,
                                         const T* __restrict__ x, Taylor2Derivs<T> d, const int64_t* __restrict__ pa,
                                         const int64_t* __restrict__ pb) {
  for (int64_t s = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; s < S; s += int64_t(gridDim.x) * blockDim.x)
    taylor2_backward_at<T>(kind, k, q, S, P, s, dx, dd1, dd2, g, x, d, pa, pb);
}

// The launch geometry and arguments both kernels share: S elements (out's
// or dx's per row), P per row of x, the pairs, the derivatives; calls
// run(T{}, blocks, S, P, q, pa, pb, derivs).
template <class F>
void taylor2_launch(int kind, int64_t k, const Tensor& full, const Tensor& x, const Taylor2Derivatives& d,
                    const Tensor& pa, const Tensor& pb, F&& run) {
  const int64_t rows = x.size(0), q = rows - k, S = rows ? full.numel() / rows : 0, P = rows ? x.numel() / rows : 0;
  if (S == 0) return;
  DeviceGuard guard(full.device().index());
  const int64_t* ia = kind == 2 ? pa.data_ptr<int64_t>() : nullptr;
  const int64_t* ib = kind == 2 ? pb.data_ptr<int64_t>() : nullptr;
  const unsigned blocks = unsigned(std::min<int64_t>((S + 255) / 256, int64_t(1) << 20));  // grid-stride beyond
  auto go = [&](auto tag) {
    using T = decltype(tag);
    auto ptr = [](const Tensor& t) { return t.defined() ? t.data_ptr<T>() : static_cast<const T*>(nullptr); };
    run(tag, blocks, S, P, q, ia, ib, Taylor2Derivs<T>{ptr(d.d1), ptr(d.d2), ptr(d.z), d.act, d.order});
  };
  tg::kernels::dispatch_floating(full.dtype(), "taylor2_unary", go);
  TG_CUDA_CHECK(cudaGetLastError(), "taylor2_unary");
}

void taylor2_unary_kernel(int kind, int64_t k, const Tensor& out, const Tensor& x, const Taylor2Derivatives& d,
                          const Tensor& pa, const Tensor& pb) {
  LaunchEncoder access(stream_of(out));
  access.write(out);
  for (const Tensor* t : {&x, &d.d1, &d.d2, &d.z, &pa, &pb})
    access.read(*t);
  taylor2_launch(kind, k, out, x, d, pa, pb,
                 [&](auto tag, unsigned blocks, int64_t S, int64_t P, int64_t q, const int64_t* ia, const int64_t* ib,
                     auto derivs) {
                   using T = decltype(tag);
                   taylor2_unary_k<T><<<blocks, 256, 0, stream_of(out)>>>(kind, k, q, S, P, out.data_ptr<T>(),
                                                                          x.data_ptr<T>(), derivs, ia, ib);
                 });
}

void taylor2_unary_backward_kernel(int kind, int64_t k, const Tensor& dx, const Tensor& dd1, const Tensor& dd2,
                                   const Tensor& g, const Tensor& x, const Taylor2Derivatives& d, const Tensor& pa,
                                   const Tensor& pb) {
  LaunchEncoder access(stream_of(dx));
  for (const Tensor* t : {&dx, &dd1, &dd2})
    access.write(*t);
  for (const Tensor* t : {&g, &x, &d.d1, &d.d2, &d.z, &pa, &pb})
    access.read(*t);
  taylor2_launch(kind, k, dx, x, d, pa, pb,
                 [&](auto tag, unsigned blocks, int64_t S, int64_t P, int64_t q, const int64_t* ia, const int64_t* ib,
                     auto derivs) {
                   using T = decltype(tag);
                   taylor2_unary_backward_k<T><<<blocks, 256, 0, stream_of(dx)>>>(
                       kind, k, q, S, P, dx.data_ptr<T>(), dd1.data_ptr<T>(),
                       d.z.defined() ? nullptr : dd2.data_ptr<T>(), g.data_ptr<T>(), x.data_ptr<T>(), derivs, ia, ib);
                 });
}

}  // namespace

const DerivativeKernels* cuda_derivative_kernels() {
  static const DerivativeKernels k = [] {
    DerivativeKernels t{};
    t.mul_backward = mul_backward_kernel;
    t.embed = embed_kernel;
    t.activation_grad_product = activation_grad_product_kernel;
    t.taylor2_unary = taylor2_unary_kernel;
    t.taylor2_unary_backward = taylor2_unary_backward_kernel;
    return t;
  }();
  return &k;
}

}  // namespace tg::autograd::kernels
