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

// The complex dtypes (the op layer passes only the ops that take them).
template <class F> bool dispatch_complex(ScalarType t, F&& f) {
  return dispatch_device_if<is_complex>(t, std::forward<F>(f));
}

void binary_kernel(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  Tensor ops[3] = {out, a, b};
  if (dispatch_complex(out.dtype(), [&](auto tag) { launch(ops, 3, "binary", ComplexBinaryFn<decltype(tag)>{op}); }))
    return;
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

void add_n_kernel(const Tensor& out, const Tensor& a, const std::vector<Tensor>& s) {
  const int64_t n = out.numel();
  if (n == 0) return;
  if (is_complex(out.dtype())) {  // componentwise: the sums of the parts
    std::vector<Tensor> parts;
    for (const Tensor& t : s)
      parts.push_back(raw::view_as_real(t));
    return add_n_kernel(raw::view_as_real(out), raw::view_as_real(a), parts);
  }
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
  if (is_complex(dst[0].dtype())) {  // the parts
    std::vector<Tensor> d, s;
    for (size_t j = 0; j < dst.size(); ++j) {
      d.push_back(raw::view_as_real(dst[j]));
      s.push_back(raw::view_as_real(src[j]));
    }
    return copy_n_kernel(d, s);
  }
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
  if (dispatch_complex(a.dtype(), [&](auto tag) {  // eq and ne only (the op layer)
        launch(ops, 3, "compare", ComplexEqualFn<decltype(tag)>{op == CompareOp::Ne});
      }))
    return;
  dispatch_compute(a.dtype(), "compare", [&](auto tag) { launch(ops, 3, "compare", CompareFn<decltype(tag)>{op}); });
}

// ---- unary ----------------------------------------------------------------------------

void unary_kernel(UnaryOp op, const Tensor& out, const Tensor& x, const kernels::UnaryParams& prm) {
  Tensor ops[2] = {out, x};
  if (dispatch_complex(out.dtype(), [&](auto tag) { launch(ops, 2, "unary", ComplexUnaryFn<decltype(tag)>{op}); }))
    return;
  dispatch_compute(out.dtype(), "unary", [&](auto tag) {
    using T = decltype(tag);
    launch(ops, 2, "unary", UnaryFn<T>{op, {T(prm.a), T(prm.b), prm.has_a, prm.has_b}});
  });
}

// ---- activation derivatives ------------------------------------------------------------

void activation_grad_kernel(Activation act, int order, const Tensor& out, const Tensor& g, const Tensor& x) {
  Tensor ops[3] = {out, g, x};
  if (dispatch_complex(out.dtype(), [&](auto tag) {
        launch(ops, 3, "activation_grad", ComplexActivationGradFn<decltype(tag)>{act, order});
      }))
    return;
  dispatch_floating(out.dtype(), "activation_grad", [&](auto tag) {
    launch(ops, 3, "activation_grad", ActivationGradFn<decltype(tag)>{act, order});
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
    t.compare = compare_kernel;
    t.unary = unary_kernel;
    t.where = where_kernel;
    t.copy_across = copy_across;
    t.activation_grad = activation_grad_kernel;
    register_reduce_index_random(t);
    register_gemm(t);
    register_sparse(t);
    register_multi_tensor(t);
    register_fft(t);
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
