// CUDA backend for sparse COO tensors: coalesce (CUB radix sort of the linear
// indices, a head-flag scan, then one deterministic sum per unique index),
// sparse @ dense through cuSPARSE (COO SpMM, row-major dense operands) or, in
// deterministic mode, a kernel that sums each output in entry order, and a
// vectorized lower bound (Thrust).
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <cusparse.h>
#include <thrust/binary_search.h>
#include <thrust/execution_policy.h>
#include <thrust/iterator/counting_iterator.h>

#include "cuda/runtime/check.h"
#include "cuda/runtime/libraries.h"
#include "tensor/op_util.h"

#include "loops.cuh"
#include "register.h"

namespace tg::cuda {
namespace {

constexpr int kThreads = 256;
unsigned blocks_for(int64_t n) { return unsigned(std::min<int64_t>((n + kThreads - 1) / kThreads, 1 << 20)); }

__global__ void iota_k(int64_t* p, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] = i;
}

__global__ void head_flags_k(const int64_t* keys, int64_t* flags, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    flags[i] = (i == 0 || keys[i] != keys[i - 1]) ? 1 : 0;
}

// starts[s] = first sorted position of segment s; starts[u] = n.
__global__ void starts_k(const int64_t* flags, const int64_t* seg, int64_t* starts, int64_t n, int64_t u) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    if (flags[i]) starts[seg[i] - 1] = i;
    if (i == 0) starts[u] = n;
  }
}

// The sparse sizes, passed by value (a kernel parameter: no host tensor to
// copy, so the coalesce of unique indices can be captured).
constexpr int kMaxSparseDims = 64;
struct SparseSizes {
  int64_t v[kMaxSparseDims];
};

__global__ void unravel_k(const int64_t* keys, const int64_t* starts, SparseSizes sizes, int sd, int64_t* out,
                          int64_t u) {
  for (int64_t s = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; s < u; s += int64_t(gridDim.x) * blockDim.x) {
    int64_t l = keys[starts[s]];
    for (int d = sd - 1; d >= 0; --d) {
      out[d * u + s] = l % sizes.v[d];
      l /= sizes.v[d];
    }
  }
}

// Each output element sums its segment's rows in sorted (= original) order.
template <class T>
__global__ void segment_sum_k(const T* values, const int64_t* perm, const int64_t* starts, T* out, int64_t u,
                              int64_t D) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < u * D; t += int64_t(gridDim.x) * blockDim.x) {
    int64_t s = t / D, c = t % D;
    T acc = 0;
    for (int64_t p = starts[s]; p < starts[s + 1]; ++p)
      acc += values[perm[p] * D + c];
    out[t] = acc;
  }
}

void coalesce_kernel(const Tensor& lin, const Tensor& values, const IntList& sparse_sizes, Tensor& out_indices,
                     Tensor& out_values, bool unique) {
  const char* op = "coalesce";
  Device dev = lin.device();
  DeviceGuard g(dev.index());
  // The unique count sizes the result: read on the host, so not capturable
  // (its callers, raw::coalesce and scatter_add_sorted, refuse a capture
  // first), unless the caller knows the indices are unique.
  cudaStream_t s = stream_of(lin);
  const int64_t n = lin.numel(), D = values.numel() / std::max<int64_t>(n, 1);
  const int sd = int(sparse_sizes.size());
  TG_CHECK(sd <= kMaxSparseDims, op, ": at most ", kMaxSparseDims, " sparse dims are supported on CUDA, got ", sd);
  int64_t total = shape_numel(sparse_sizes);
  int bits = 1;
  while (bits < 63 && (int64_t(1) << bits) < total)
    ++bits;
  Tensor keys = tg::detail::new_empty({n}, kInt64, dev), perm_in = tg::detail::new_empty({n}, kInt64, dev);
  Tensor perm = tg::detail::new_empty({n}, kInt64, dev);
  Tensor flags = tg::detail::new_empty({n}, kInt64, dev), seg = tg::detail::new_empty({n}, kInt64, dev);
  LaunchEncoder access(s);  // the sort's and the scan's temporary storage too
  access.read(lin);
  access.read(values);
  for (const Tensor* t : {&keys, &perm_in, &perm, &flags, &seg})
    access.write(*t);
  iota_k<<<blocks_for(n), kThreads, 0, s>>>(perm_in.data_ptr<int64_t>(), n);
  // CUB radix sort is stable: equal keys keep their original order. Its
  // temporary storage is never null (null asks for the size).
  size_t bytes = 0;
  TG_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, lin.data_ptr<int64_t>(), keys.data_ptr<int64_t>(),
                                                perm_in.data_ptr<int64_t>(), perm.data_ptr<int64_t>(), n, 0, bits, s),
                op);
  void* tmp = access.workspace(std::max<size_t>(bytes, 1));
  TG_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(tmp, bytes, lin.data_ptr<int64_t>(), keys.data_ptr<int64_t>(),
                                                perm_in.data_ptr<int64_t>(), perm.data_ptr<int64_t>(), n, 0, bits, s),
                op);
  head_flags_k<<<blocks_for(n), kThreads, 0, s>>>(keys.data_ptr<int64_t>(), flags.data_ptr<int64_t>(), n);
  bytes = 0;
  TG_CUDA_CHECK(cub::DeviceScan::InclusiveSum(nullptr, bytes, flags.data_ptr<int64_t>(), seg.data_ptr<int64_t>(), n, s),
                op);
  void* tmp2 = access.workspace(std::max<size_t>(bytes, 1));
  TG_CUDA_CHECK(cub::DeviceScan::InclusiveSum(tmp2, bytes, flags.data_ptr<int64_t>(), seg.data_ptr<int64_t>(), n, s),
                op);
  int64_t u = n;  // the number of unique indices: the host needs it for the shapes
  if (!unique) {
    TG_CUDA_CHECK(cudaMemcpyAsync(&u, seg.data_ptr<int64_t>() + (n - 1), sizeof(int64_t), cudaMemcpyDeviceToHost, s),
                  op);
    TG_CUDA_CHECK(cudaStreamSynchronize(s), op);
  }
  Tensor starts = tg::detail::new_empty({u + 1}, kInt64, dev);
  out_indices = tg::detail::new_empty({int64_t(sd), u}, kInt64, dev);
  IntList vs = values.sizes();
  vs[0] = u;
  out_values = tg::detail::new_empty(vs, values.dtype(), dev);
  access.write(starts);
  access.write(out_indices);
  access.write(out_values);
  starts_k<<<blocks_for(n), kThreads, 0, s>>>(flags.data_ptr<int64_t>(), seg.data_ptr<int64_t>(),
                                              starts.data_ptr<int64_t>(), n, u);
  SparseSizes sizes{};
  for (int d = 0; d < sd; ++d)
    sizes.v[d] = sparse_sizes[size_t(d)];
  unravel_k<<<blocks_for(u), kThreads, 0, s>>>(keys.data_ptr<int64_t>(), starts.data_ptr<int64_t>(), sizes, sd,
                                               out_indices.data_ptr<int64_t>(), u);
  kernels::dispatch_compute(values.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    segment_sum_k<T><<<blocks_for(u * D), kThreads, 0, s>>>(static_cast<const T*>(values.data_ptr()),
                                                            perm.data_ptr<int64_t>(), starts.data_ptr<int64_t>(),
                                                            static_cast<T*>(out_values.data_ptr()), u, D);
  });
  TG_CUDA_CHECK(cudaGetLastError(), op);
}

// ---- cuSPARSE -------------------------------------------------------------------------
// The handle is this thread's (cuda/runtime/libraries.h); SpMM's buffer comes from
// the launch encoder (the graph's own memory under capture).

// Descriptors destroyed on every path (errors included).
struct SpMMDescs {
  cusparseSpMatDescr_t a = nullptr;
  cusparseDnMatDescr_t b = nullptr, c = nullptr;
  ~SpMMDescs() {
    if (a) cusparseDestroySpMat(a);
    if (b) cusparseDestroyDnMat(b);
    if (c) cusparseDestroyDnMat(c);
  }
};

// out[r, c] = sum over row r's entries j (in order) of values[j] *
// dense[cols[j], c]: one thread per output, no atomics, so bitwise
// reproducible (deterministic mode; cuSPARSE's row-major COO algorithm does
// not promise that).
template <class T>
__global__ void spmm_rows_k(const int64_t* starts, const int64_t* cols, const T* values, const T* dense, T* out,
                            int64_t n, int64_t k) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < n * k; t += int64_t(gridDim.x) * blockDim.x) {
    int64_t r = t / k, c = t % k;
    T acc = 0;
    for (int64_t j = starts[r]; j < starts[r + 1]; ++j)
      acc += values[j] * dense[cols[j] * k + c];
    out[t] = acc;
  }
}

void spmm_deterministic(const Tensor& out, const Tensor& rows, const Tensor& cols, const Tensor& values,
                        const Tensor& dense, cudaStream_t s, LaunchEncoder& access) {
  const int64_t n = out.sizes()[0], k = out.sizes()[1], nnz = values.numel();
  // starts[r] = first entry of row r (rows are sorted); starts[n] = nnz.
  Tensor starts = tg::detail::new_empty({n + 1}, kInt64, out.device());
  access.write(starts);
  const int64_t* rp = rows.data_ptr<int64_t>();
  thrust::lower_bound(thrust::cuda::par_nosync.on(s), rp, rp + nnz, thrust::counting_iterator<int64_t>(0),
                      thrust::counting_iterator<int64_t>(n + 1), starts.data_ptr<int64_t>());
  if (n * k == 0) return;
  kernels::dispatch_compute(out.dtype(), "mm", [&](auto tag) {
    using T = decltype(tag);
    spmm_rows_k<T><<<blocks_for(n * k), kThreads, 0, s>>>(
        starts.data_ptr<int64_t>(), cols.data_ptr<int64_t>(), static_cast<const T*>(values.data_ptr()),
        static_cast<const T*>(dense.data_ptr()), static_cast<T*>(out.data_ptr()), n, k);
  });
  TG_CUDA_CHECK(cudaGetLastError(), "mm");
}

void spmm_kernel(const Tensor& out, const Tensor& rows, const Tensor& cols, const Tensor& values, const Tensor& dense) {
  const char* op = "mm";
  TG_CHECK(out.dtype() == kFloat32 || out.dtype() == kFloat64, op,
           ": sparse @ dense on CUDA supports Float32 and Float64, got ", out.dtype());
  DeviceGuard g(out.device().index());
  cudaStream_t s = stream_of(out);
  LaunchEncoder access(s);  // the product touches these, and its temporaries below
  access.write(out);
  for (const Tensor* t : {&rows, &cols, &values})
    access.add(fusion::storage_of(*t, false));
  access.read(dense);
  if (are_deterministic_algorithms_enabled()) return spmm_deterministic(out, rows, cols, values, dense, s, access);
  const int64_t n = out.sizes()[0], k = out.sizes()[1], m = dense.sizes()[0], nnz = values.numel();
  cudaDataType_t type = cuda_data_type(out.dtype());
  cusparseHandle_t h = lib::cusparse(out.device().index(), s, op);
  SpMMDescs d;
  TG_CUSPARSE_CHECK(cusparseCreateCoo(&d.a, n, m, nnz, rows.data_ptr(), cols.data_ptr(), values.data_ptr(),
                                      CUSPARSE_INDEX_64I, CUSPARSE_INDEX_BASE_ZERO, type),
                    op);
  TG_CUSPARSE_CHECK(cusparseCreateDnMat(&d.b, m, k, k, dense.data_ptr(), type, CUSPARSE_ORDER_ROW), op);
  TG_CUSPARSE_CHECK(cusparseCreateDnMat(&d.c, n, k, k, out.data_ptr(), type, CUSPARSE_ORDER_ROW), op);
  double one64 = 1, zero64 = 0;
  float one32 = 1, zero32 = 0;
  const void* alpha = type == CUDA_R_64F ? static_cast<const void*>(&one64) : &one32;
  const void* beta = type == CUDA_R_64F ? static_cast<const void*>(&zero64) : &zero32;
  // COO with row-major dense operands: COO_ALG4 (ALG_DEFAULT picks a
  // column-major algorithm for COO on some versions).
  cusparseSpMMAlg_t alg = CUSPARSE_SPMM_COO_ALG4;
  size_t bytes = 0;
  TG_CUSPARSE_CHECK(cusparseSpMM_bufferSize(h, CUSPARSE_OPERATION_NON_TRANSPOSE, CUSPARSE_OPERATION_NON_TRANSPOSE,
                                            alpha, d.a, d.b, beta, d.c, type, alg, &bytes),
                    op);
  void* buf = access.workspace(std::max<size_t>(bytes, 1));
  TG_CUSPARSE_CHECK(cusparseSpMM(h, CUSPARSE_OPERATION_NON_TRANSPOSE, CUSPARSE_OPERATION_NON_TRANSPOSE, alpha, d.a, d.b,
                                 beta, d.c, type, alg, buf),
                    op);
}

void lower_bound_kernel(const Tensor& out, const Tensor& sorted, const Tensor& values) {
  const int64_t n = sorted.numel(), m = values.numel();
  if (m == 0) return;
  DeviceGuard g(out.device().index());
  const int64_t* sp = sorted.data_ptr<int64_t>();
  const int64_t* vp = values.data_ptr<int64_t>();
  LaunchEncoder access(stream_of(out));
  access.write(out);
  access.read(sorted);
  access.read(values);
  thrust::lower_bound(thrust::cuda::par_nosync.on(stream_of(out)), sp, sp + n, vp, vp + m, out.data_ptr<int64_t>());
  TG_CUDA_CHECK(cudaGetLastError(), "lower_bound");
}

}  // namespace

void register_sparse(kernels::Backend& b) {
  b.coalesce = coalesce_kernel;
  b.spmm = spmm_kernel;
  b.lower_bound = lower_bound_kernel;
}

}  // namespace tg::cuda
