// CUDA backend, elementwise family: copy/convert, fill, binary, compare,
// unary, where, and copies between devices; and the backend table itself.
// The functors that a captured graph's fused kernel also runs are in
// functors.cuh; that kernel is in fused.cu.
// loops.cuh runs them: operand sets dense along one dim (after size-1 dims
// are dropped and adjacent dims merged) take the linear kernel, 16-byte
// vectorized when aligned; others the strided kernel with the offset
// calculator. Kernels run on the current stream of the output's device.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <tapegrad/cuda/allocator.h>
#include <tapegrad/cuda/device.h>
#include <tapegrad/cuda/capture.h>
#include "tensor/element_math.h"
#include "tensor/taylor2.h"
#include "tensor/kernels.h"
#include <tapegrad/tensor/ops.h>
#include <tapegrad/tensor/raw.h>

#include "functors.cuh"
#include "loops.cuh"
#include "register.h"

namespace tg::cuda {
namespace {

// ---- copy, fill, where ----------------------------------------------------------------

void copy_kernel(const Tensor& dst, const Tensor& src) {
  Tensor ops[2] = {dst, src};
  dispatch_all(dst.dtype(), [&](auto d) {
    dispatch_all(src.dtype(), [&](auto s) { launch(ops, 2, "copy", CopyFn<decltype(d), decltype(s)>{}); });
  });
}

void fill_kernel(const Tensor& dst, Scalar v) {
  // The value's bytes in dst's dtype, converted on the host by the CPU kernels.
  Tensor one = tg::empty({}, TensorOptions().dtype(dst.dtype()));
  kernels::cpu_backend().fill(one, v);
  Tensor ops[1] = {dst};
  dispatch_bytes(element_size(dst.dtype()), [&](auto u) {
    using U = decltype(u);
    launch(ops, 1, "fill_", FillFn<U>{*static_cast<U*>(one.data_ptr())});
  });
}

template <class U> struct WhereFn {
  __device__ void operator()(char* const* p, const int64_t* off) const {
    bool c = *reinterpret_cast<const bool*>(p[1] + off[1]);
    *reinterpret_cast<U*>(p[0] + off[0]) = *reinterpret_cast<const U*>(c ? p[2] + off[2] : p[3] + off[3]);
  }
};

void where_kernel(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  Tensor ops[4] = {out, cond, a, b};
  dispatch_bytes(element_size(out.dtype()), [&](auto u) { launch(ops, 4, "where", WhereFn<decltype(u)>{}); });
}

// ---- binary and compare --------------------------------------------------------------

void binary_kernel(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  Tensor ops[3] = {out, a, b};
  dispatch_compute(out.dtype(), "binary", [&](auto tag) { launch(ops, 3, "binary", BinaryFn<decltype(tag)>{op}); });
}

void binary_scalar_kernel(BinaryOp op, const Tensor& out, const Tensor& a, double sd, int64_t si) {
  Tensor ops[2] = {out, a};
  dispatch_compute(out.dtype(), "binary", [&](auto tag) {
    using T = decltype(tag);
    const T s = std::is_integral<T>::value ? T(si) : T(sd);
    launch(ops, 2, "binary", BinaryScalarFn<T>{op, s});
  });
}

void add_scaled_kernel(const Tensor& out, const Tensor& a, const Tensor& b, double alpha, int64_t ialpha) {
  Tensor ops[3] = {out, a, b};
  dispatch_compute(out.dtype(), "add_", [&](auto tag) {
    using T = decltype(tag);
    launch(ops, 3, "add_", AddScaledFn<T>{std::is_integral<T>::value ? T(ialpha) : T(alpha)});
  });
}

template <class T> __global__ void add_n_kernel_impl(AddNArgs<T> p, int64_t n) {
  wait_for_predecessors();
  const int64_t stride = int64_t(blockDim.x) * gridDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    add_n_at<T>(p.out, p.a, p.s, p.k, i);
}

template <class T>
__global__ void mul_backward_kernel_impl(T* ga, T* gb, const T* g, const T* a, const T* b, int64_t n) {
  wait_for_predecessors();
  const int64_t stride = int64_t(blockDim.x) * gridDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    mul_backward_at<T>(ga, gb, g, a, b, i);
}

void add_n_kernel(const Tensor& out, const Tensor& a, const std::vector<Tensor>& s) {
  const int64_t n = out.numel();
  if (n == 0) return;
  dispatch_compute(out.dtype(), "add_n", [&](auto tag) {
    using T = decltype(tag);
    AddNArgs<T> p{};
    p.out = static_cast<T*>(out.data_ptr());
    p.a = static_cast<const T*>(a.data_ptr());
    p.k = int(s.size());
    for (size_t j = 0; j < s.size(); ++j)
      p.s[j] = static_cast<const T*>(s[j].data_ptr());
    DeviceGuard dg(out.device().index());
    LaunchEncoder access(stream_of(out));
    access.write(out);
    access.read(a);
    for (const Tensor& t : s)
      access.read(t);
    launch_pdl(&add_n_kernel_impl<T>, grid_for(n), kBlock, stream_of(out), out.device().index(), "add_n", p, n);
    if (access.recording()) {
      fusion::Step st;
      st.kind = fusion::kAddN;
      st.nops = int8_t(2 + p.k);
      st.ptr[0] = reinterpret_cast<char*>(p.out);
      st.ptr[1] = reinterpret_cast<char*>(const_cast<T*>(p.a));
      for (int j = 0; j < p.k; ++j)
        st.ptr[2 + j] = reinterpret_cast<char*>(const_cast<T*>(p.s[j]));
      access.fusable(reinterpret_cast<const void*>(&add_n_kernel_impl<T>), &p, sizeof(p), out.dtype(), n, st);
    }
  });
}

// copy_n: block row y copies pair y (grid-stride over its elements).
template <class T> struct CopyNArgs {
  T* dst[kernels::kMaxCopyN];
  const T* src[kernels::kMaxCopyN];
  int64_t n[kernels::kMaxCopyN];
};

template <class T> __global__ void copy_n_kernel_impl(const __grid_constant__ CopyNArgs<T> p) {
  wait_for_predecessors();
  const int j = blockIdx.y;
  const int64_t n = p.n[j];
  T* d = p.dst[j];
  const T* s = p.src[j];
  const int64_t stride = int64_t(blockDim.x) * gridDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    d[i] = s[i];
}

void copy_n_kernel(const std::vector<Tensor>& dst, const std::vector<Tensor>& src) {
  if (dst.empty()) return;
  TG_INTERNAL_ASSERT(dst.size() == src.size() && dst.size() <= kernels::kMaxCopyN, "copy_n: bad lists");
  dispatch_compute(dst[0].dtype(), "copy_n", [&](auto tag) {
    using T = decltype(tag);
    CopyNArgs<T> p{};
    int64_t most = 0;
    for (size_t j = 0; j < dst.size(); ++j) {
      p.dst[j] = static_cast<T*>(dst[j].data_ptr());
      p.src[j] = static_cast<const T*>(src[j].data_ptr());
      p.n[j] = dst[j].numel();
      most = std::max(most, p.n[j]);
    }
    if (most == 0) return;
    DeviceGuard dg(dst[0].device().index());
    cudaStream_t s = stream_of(dst[0]);
    LaunchEncoder access(s);
    for (size_t j = 0; j < dst.size(); ++j) {
      access.write(dst[j]);
      access.read(src[j]);
    }
    const dim3 grid(std::min(grid_for(most), 1024u), unsigned(dst.size()));
    launch_pdl(&copy_n_kernel_impl<T>, grid, kBlock, s, dst[0].device().index(), "copy_n", p);
  });
}

// embed: out [outer, n, inner] contiguous, g [outer, len, inner] with
// strides (go, gn, gi) in elements; zero bytes are zero in every dtype.
template <class U>
__global__ void embed_kernel_impl(U* out, const U* g, int64_t n, int64_t inner, int64_t start, int64_t step,
                                  int64_t len, int64_t go, int64_t gn, int64_t gi, int64_t total) {
  wait_for_predecessors();
  const int64_t stride = int64_t(blockDim.x) * gridDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int64_t in = i % inner, t = i / inner, c = t % n, o = t / n, d = c - start;
    U v = 0;
    if (d >= 0 && d % step == 0 && d / step < len) v = g[o * go + (d / step) * gn + in * gi];
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
    launch_pdl(&embed_kernel_impl<U>, grid_for(total), kBlock, s, out.device().index(), "slice backward",
               static_cast<U*>(out.data_ptr()), static_cast<const U*>(g.data_ptr()), n, inner, start, step, len, go,
               g.strides()[size_t(dim)], gi, total);
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

template <class T> struct CompareFn {
  CompareOp op;
  __device__ void operator()(char* const* p, const int64_t* off) const {
    T x = *reinterpret_cast<const T*>(p[1] + off[1]);
    T y = *reinterpret_cast<const T*>(p[2] + off[2]);
    bool r = kernels::compare_apply(op, x, y);
    *reinterpret_cast<bool*>(p[0] + off[0]) = r;
  }
};

void compare_kernel(CompareOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  Tensor ops[3] = {out, a, b};
  dispatch_compute(a.dtype(), "compare", [&](auto tag) { launch(ops, 3, "compare", CompareFn<decltype(tag)>{op}); });
}

// ---- unary ----------------------------------------------------------------------------

void unary_kernel(UnaryOp op, const Tensor& out, const Tensor& x, const kernels::UnaryParams& prm) {
  Tensor ops[2] = {out, x};
  dispatch_compute(out.dtype(), "unary", [&](auto tag) {
    using T = decltype(tag);
    launch(ops, 2, "unary", UnaryFn<T>{op, {T(prm.a), T(prm.b), prm.has_a, prm.has_b}});
  });
}

// ---- activation derivatives ------------------------------------------------------------

void activation_grad_kernel(Activation act, int order, const Tensor& out, const Tensor& g, const Tensor& x) {
  Tensor ops[3] = {out, g, x};
  if (out.dtype() == ScalarType::Float64) launch(ops, 3, "activation_grad", ActivationGradFn<double>{act, order});
  else launch(ops, 3, "activation_grad", ActivationGradFn<float>{act, order});
}

void activation_grad_product_kernel(Activation act, int order, const Tensor& out, const Tensor& g, const Tensor& g2,
                                    const Tensor& x) {
  Tensor ops[4] = {out, g, g2, x};
  if (out.dtype() == ScalarType::Float64)
    launch(ops, 4, "activation_grad", ActivationGradProductFn<double>{act, order});
  else launch(ops, 4, "activation_grad", ActivationGradProductFn<float>{act, order});
}

// ---- Taylor mode, order 2 (kernels.h, tensor/taylor2.h) ----------------------------------
// One thread per element s, looping over the coefficient rows (coalesced
// across threads: row r of every s is contiguous).
// x's rows are [rows, P] (P = S, or their period when broadcast).
template <class T>
__global__ void taylor2_unary_k(int kind, int64_t k, int64_t q, int64_t S, int64_t P, T* __restrict__ o,
                                const T* __restrict__ x, kernels::Taylor2Derivs<T> d, const int64_t* __restrict__ pa,
                                const int64_t* __restrict__ pb) {
  for (int64_t s = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; s < S; s += int64_t(gridDim.x) * blockDim.x)
    kernels::taylor2_forward_at<T>(kind, k, q, S, P, s, o, x, d, pa, pb);
}

template <class T>
__global__ void taylor2_unary_backward_k(int kind, int64_t k, int64_t q, int64_t S, int64_t P, T* __restrict__ dx,
                                         T* __restrict__ dd1, T* __restrict__ dd2, const T* __restrict__ g,
                                         const T* __restrict__ x, kernels::Taylor2Derivs<T> d,
                                         const int64_t* __restrict__ pa, const int64_t* __restrict__ pb) {
  for (int64_t s = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; s < S; s += int64_t(gridDim.x) * blockDim.x)
    kernels::taylor2_backward_at<T>(kind, k, q, S, P, s, dx, dd1, dd2, g, x, d, pa, pb);
}

// The launch geometry and arguments both kernels share: S elements (out's
// or dx's per row), P per row of x, the pairs, the derivatives; calls
// run(T{}, blocks, S, P, q, pa, pb, derivs).
template <class F>
void taylor2_launch(int kind, int64_t k, const Tensor& full, const Tensor& x, const kernels::Taylor2Derivatives& d,
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
    run(tag, blocks, S, P, q, ia, ib, kernels::Taylor2Derivs<T>{ptr(d.d1), ptr(d.d2), ptr(d.z), d.act, d.order});
  };
  if (full.dtype() == ScalarType::Float64) go(double{});
  else go(float{});
  TG_CUDA_CHECK(cudaGetLastError(), "taylor2_unary");
}

void taylor2_unary_kernel(int kind, int64_t k, const Tensor& out, const Tensor& x, const kernels::Taylor2Derivatives& d,
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
                                   const Tensor& g, const Tensor& x, const kernels::Taylor2Derivatives& d,
                                   const Tensor& pa, const Tensor& pb) {
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

// ---- between devices --------------------------------------------------------------------
void copy_across(const Tensor& dst, const Tensor& src, bool non_blocking) {
  size_t bytes = size_t(dst.numel()) * element_size(dst.dtype());
  if (bytes == 0) return;
  if (dst.is_cuda() && src.is_cuda()) {
    DeviceGuard g(dst.device().index());
    detail::check_not_capturing("to (a copy between GPUs)", dst.device().index());
    TG_CUDA_CHECK(cudaMemcpyPeer(dst.data_ptr(), dst.device().index(), src.data_ptr(), src.device().index(), bytes),
                  "to");
    return;
  }
  int dev = dst.is_cuda() ? dst.device().index() : src.device().index();
  DeviceGuard g(dev);
  const Stream stream = current_stream(dev);
  cudaStream_t s = static_cast<cudaStream_t>(stream.handle());
  const Tensor& host = dst.is_cuda() ? src : dst;
  const bool pinned = host.is_pinned();
  // Under capture only an asynchronous copy from or to pinned memory is a
  // graph node; anything else reads or stages host memory now.
  if (!(pinned && non_blocking))
    detail::check_not_capturing(dst.is_cuda() ? "to (a copy from host memory that is not pinned, "
                                                "or not non_blocking)"
                                              : "to (a copy to the host)",
                                stream);
  LaunchEncoder access(s);
  access.write(dst);
  access.read(src);
  TG_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), bytes,
                                dst.is_cuda() ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, s),
                "to");
  if (pinned) {
    // Truly asynchronous: the pinned block is not reused before the copy is
    // done, and without non_blocking the caller gets the usual guarantee.
    // Under capture the copy is a graph node that runs at every replay: the
    // graph owns the block until it is reset (an event recorded now could
    // not be queried).
    auto storage = host.impl()->storage();
    if (!detail::keep_alive_with_capture(stream, std::shared_ptr<void>(storage.get(), [storage](void*) {})))
      record_host_use(storage->data(), stream);
    if (!non_blocking) {
      TG_CUDA_CHECK(cudaStreamSynchronize(s), "to");
      detail::raise_bad_index();
    }
  } else if (!dst.is_cuda()) {
    // Device to pageable host memory: the host reads the result next.
    TG_CUDA_CHECK(cudaStreamSynchronize(s), "to");
    detail::raise_bad_index();
  }
  // Host to device from pageable memory: the source is staged before
  // cudaMemcpyAsync returns, so it may be freed or changed right after.
}

const kernels::Backend& backend() {
  static const kernels::Backend b = [] {
    kernels::Backend t{};
    t.copy = copy_kernel;
    t.fill = fill_kernel;
    t.binary = binary_kernel;
    t.binary_scalar = binary_scalar_kernel;
    t.add_scaled = add_scaled_kernel;
    t.add_n = add_n_kernel;
    t.copy_n = copy_n_kernel;
    t.embed = embed_kernel;
    t.mul_backward = mul_backward_kernel;
    t.compare = compare_kernel;
    t.unary = unary_kernel;
    t.where = where_kernel;
    t.copy_across = copy_across;
    t.activation_grad = activation_grad_kernel;
    t.activation_grad_product = activation_grad_product_kernel;
    t.taylor2_unary = taylor2_unary_kernel;
    t.taylor2_unary_backward = taylor2_unary_backward_kernel;
    register_reduce_index_random(t);
    register_gemm(t);
    register_sparse(t);
    register_optim(t);
    return t;
  }();
  return b;
}

}  // namespace

bool pdl_enabled(int device) {
  static const std::vector<bool> on = [] {
    const bool allowed = tg::detail::switched_on<tg::detail::OffSwitch::kCudaPdl>();
    std::vector<bool> v(size_t(device_count()), false);
    for (int d = 0; d < int(v.size()); ++d) {
      int major = 0;
      if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d) == cudaSuccess)
        v[size_t(d)] = allowed && major >= 9;
    }
    return v;
  }();
  return device >= 0 && size_t(device) < on.size() && on[size_t(device)];
}
}  // namespace tg::cuda

namespace tg::kernels {
const Backend* cuda_backend() { return &cuda::backend(); }
}  // namespace tg::kernels
