// cat, stack, index_select, gather, scatter_add; then their CPU kernels and
// the CPU's Philox random numbers.
#include <algorithm>
#include <tapegrad/cuda/capture.h>
#include "tensor/composite.h"
#include "tensor/op_util.h"
#include <cmath>
#include <cstring>
#include <numeric>
#include "tensor/cpu/loops.h"
#include <tapegrad/tensor/random.h>
#include "tensor/cpu/cpu_kernels.h"

namespace tg {

using detail::cast;

namespace {

void check_index_tensor(const Tensor& index, const char* op) {
  detail::check_defined(index, op, "index");
  TG_CHECK(index.dtype() == kInt64, op, ": index must be an Int64 tensor, got ", index.dtype());
}

// All index values in [0, size); names the first bad one.
void check_index_range(const Tensor& index, int64_t size, int64_t dim, const char* op) {
  if (index.numel() == 0) return;
  int64_t lo = 0, hi = 0;
  if (!index.impl()->storage()->known_index_range(index.impl()->version_counter().get(), index.version(), &lo, &hi)) {
    if (index.is_cuda())  // the range is read on the host: name the op, not item
      cuda::detail::check_not_capturing(op, index.device().index());
    lo = amin(index).item<int64_t>();
    hi = amax(index).item<int64_t>();
  }
  int64_t bad = lo < 0 ? lo : hi;
  TG_CHECK(lo >= 0 && hi < size, op, ": index ", bad, " is out of range for dim ", dim, " with size ", size);
}

// A filled CPU Int64 index on `device`, its values' range [lo, hi] noted.
// From pinned memory, asynchronously: a graph node under capture (the
// buffer is kept with the graph), no wait on the device otherwise.
Tensor place_index(const Tensor& cpu, int64_t lo, int64_t hi, Device device) {
  Tensor t = device.is_cpu() ? cpu : cpu.pin_memory().to(device, /*non_blocking=*/true);
  if (cpu.numel() > 0)
    t.impl()->storage()->set_known_index_range(lo, hi, t.impl()->version_counter().get(), t.version());
  return t;
}

}  // namespace

Tensor detail::index_tensor(const std::vector<int64_t>& v, Device device) {
  Tensor cpu = detail::new_empty({int64_t(v.size())}, kInt64, Device(kCPU));
  std::copy(v.begin(), v.end(), static_cast<int64_t*>(cpu.data_ptr()));
  if (v.empty()) return place_index(cpu, 0, 0, device);
  return place_index(cpu, *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end()), device);
}

// The caller checked the counts (>= 0) and their sum `total`; the index is
// allocated before it is filled, so an impossible total is the allocator's
// error; the loop runs over the given counts, or with one count (> 0) over
// no more than `total` positions.
Tensor detail::repeat_index(const int64_t* counts, int64_t ncounts, int64_t n, int64_t total, Device device) {
  Tensor cpu = detail::new_empty({total}, kInt64, Device(kCPU));
  int64_t* p = static_cast<int64_t*>(cpu.data_ptr());
  int64_t lo = -1, hi = 0;
  for (int64_t i = 0; i < n && total > 0; ++i) {
    const int64_t k = counts[ncounts == 1 ? 0 : i];
    if (k == 0) continue;
    lo = lo < 0 ? i : lo;
    hi = i;
    p = std::fill_n(p, k, i);
  }
  return place_index(cpu, lo, hi, device);
}

namespace detail {

void scatter_add_into(const Tensor& out, int64_t d, const Tensor& index, const Tensor& src) {
  if (index.numel() == 0) return;
  if (out.is_cuda() && are_deterministic_algorithms_enabled()) scatter_add_sorted(out, d, index, src);
  else kernels::backend(out.device(), "scatter_add").scatter_add(out, d, index, src);  // atomics on a GPU
}

void scatter_add_sorted(const Tensor& out, int64_t d, const Tensor& index, const Tensor& src) {
  if (index.numel() == 0) return;
  if (out.is_cuda())  // the sorted sum reads its unique count on the host
    cuda::detail::check_not_capturing(
        "scatter_add (deterministic mode: a sorted sum that reads "
        "its count on the host)",
        out.device().index());
  // The flattened targets below would land a bad index in another row:
  // the range is checked here (the sorted sum reads the host anyway).
  check_index_range(index, out.sizes()[size_t(d)], d, "scatter_add");
  const kernels::Backend& be = kernels::backend(out.device(), "scatter_add");
  // Each element's target position in out (contiguous): index * stride_d +
  // the element's coordinates in the other dims * their strides.
  const int64_t rank = index.dim();
  const TensorOptions i64 = TensorOptions().dtype(kInt64).device(out.device());
  Tensor target = raw::mul(index, Scalar(out.strides()[size_t(d)]));
  for (int64_t k = 0; k < rank; ++k) {
    if (k == d || index.sizes()[size_t(k)] == 1) continue;
    IntList shape(size_t(rank), 1);
    shape[size_t(k)] = index.sizes()[size_t(k)];
    Tensor coord = raw::mul(arange(index.sizes()[size_t(k)], i64), Scalar(out.strides()[size_t(k)]));
    target = raw::add(target, raw::view(coord, shape));
  }
  const int64_t n = index.numel();
  Tensor vals =
      raw::reshape(raw::contiguous(raw::as_strided(src, index.sizes(), src.strides(), src.storage_offset())), {n, 1});
  // A stable sort of the targets and one sum per target in element order
  // (coalesce), then one addition per distinct target: no two threads add
  // to one address, so the result is the same on every run.
  Tensor unique_targets, sums;
  be.coalesce(raw::contiguous(raw::reshape(target, {n})), vals, {out.numel()}, unique_targets, sums, false);
  be.scatter_add(raw::view(out, {out.numel(), 1}), 0, raw::view(unique_targets, {-1, 1}), sums);
}

}  // namespace detail

namespace raw {

Tensor cat(const std::vector<Tensor>& ts, int64_t dim) {
  TG_CHECK(!ts.empty(), "cat: expected a non-empty list of tensors");
  const Tensor& t0 = ts[0];
  detail::check_defined(t0, "cat", "tensor 0");
  TG_CHECK(t0.dim() > 0,
           "cat: zero-dimensional tensor 0 cannot be concatenated; "
           "use stack or unsqueeze first");
  int64_t d = detail::wrap_dim(dim, t0.dim(), "cat", t0.sizes());
  ScalarType rt = t0.dtype();
  int64_t total = 0;
  for (size_t i = 0; i < ts.size(); ++i) {
    const Tensor& t = ts[i];
    detail::check_defined(t, "cat", "a tensor in the list");
    detail::check_same_device(t0, t, "cat");
    TG_CHECK(t.dim() == t0.dim(), "cat: tensor ", i, " has shape ", shape_str(t.sizes()), " but tensor 0 has ",
             shape_str(t0.sizes()), " (different number of dims)");
    for (int64_t k = 0; k < t.dim(); ++k)
      TG_CHECK(k == d || t.sizes()[k] == t0.sizes()[k], "cat: sizes of tensors must match except in dim ", d,
               "; tensor ", i, " has shape ", shape_str(t.sizes()), " but tensor 0 has ", shape_str(t0.sizes()),
               " (dim ", k, ")");
    total += t.sizes()[d];
    rt = promote_types(rt, t.dtype());
  }
  IntList shape = t0.sizes();
  shape[d] = total;
  Tensor out = detail::new_empty(shape, rt, t0.device());
  const kernels::Backend& be = kernels::backend(t0.device(), "cat");
  int64_t off = 0;
  for (const Tensor& t : ts) {
    int64_t n = t.sizes()[d];
    if (n > 0) be.copy(out.narrow(d, off, n), t);
    off += n;
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& ts, int64_t dim) {
  TG_CHECK(!ts.empty(), "stack: expected a non-empty list of tensors");
  detail::check_defined(ts[0], "stack", "tensor 0");
  int64_t d = detail::wrap_insert_dim(dim, ts[0].dim(), "stack", ts[0].sizes());
  std::vector<Tensor> parts;
  parts.reserve(ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    detail::check_defined(ts[i], "stack", "a tensor in the list");
    detail::check_same_device(ts[0], ts[i], "stack");
    TG_CHECK(ts[i].sizes() == ts[0].sizes(), "stack: expected each tensor to be equal size, but got ",
             shape_str(ts[0].sizes()), " at entry 0 and ", shape_str(ts[i].sizes()), " at entry ", i);
    parts.push_back(ts[i].unsqueeze(d));
  }
  return raw::cat(parts, d);
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  detail::check_defined(x, "index_select");
  check_index_tensor(index, "index_select");
  detail::check_same_device(x, index, "index_select");
  TG_CHECK(index.dim() <= 1, "index_select: index must be 0-D or 1-D, got shape ", shape_str(index.sizes()));
  Tensor xs = x.dim() == 0 ? x.reshape({1}) : x;
  int64_t d = detail::wrap_dim(dim, xs.dim(), "index_select", x.sizes());
  int64_t n = xs.sizes()[d];
  check_index_range(index, n, d, "index_select");
  int64_t outer = 1, inner = 1, m = index.numel();
  for (int64_t k = 0; k < d; ++k)
    outer *= xs.sizes()[k];
  for (int64_t k = d + 1; k < xs.dim(); ++k)
    inner *= xs.sizes()[k];
  IntList shape = xs.sizes();
  shape[d] = m;
  Tensor out = detail::new_empty(shape, x.dtype(), x.device());
  if (out.numel() > 0)
    kernels::backend(x.device(), "index_select")
        .index_select(out.view({outer, m, inner}), xs.contiguous().view({outer, n, inner}), index.contiguous());
  return x.dim() == 0 ? out.view({}) : out;
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  detail::check_defined(x, "gather");
  check_index_tensor(index, "gather");
  detail::check_same_device(x, index, "gather");
  TG_CHECK(index.dim() == x.dim(),
           "gather: index must have the same number of dims "
           "as the input (",
           x.dim(), "), got index shape ", shape_str(index.sizes()));
  if (x.dim() == 0) return x.clone();
  int64_t d = detail::wrap_dim(dim, x.dim(), "gather", x.sizes());
  for (int64_t k = 0; k < x.dim(); ++k)
    TG_CHECK(k == d || index.sizes()[k] <= x.sizes()[k], "gather: index shape ", shape_str(index.sizes()),
             " is larger than input shape ", shape_str(x.sizes()), " at dim ", k);
  check_index_range(index, x.sizes()[d], d, "gather");
  Tensor out = detail::new_empty(index.sizes(), x.dtype(), x.device());
  IntList st = x.strides();
  st[d] = 0;
  if (out.numel() > 0)
    kernels::backend(x.device(), "gather")
        .gather(out, x.as_strided(index.sizes(), st), index, x.sizes()[d], x.strides()[d]);
  return out;
}

Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  detail::check_defined(x, "scatter_add");
  detail::check_defined(src, "scatter_add", "src");
  check_index_tensor(index, "scatter_add");
  detail::check_same_device(x, index, "scatter_add");
  detail::check_same_device(x, src, "scatter_add");
  TG_CHECK(src.dtype() == x.dtype(), "scatter_add: src dtype ", src.dtype(), " doesn't match self dtype ", x.dtype());
  TG_CHECK(index.dim() == x.dim() && src.dim() == x.dim(), "scatter_add: self ", shape_str(x.sizes()), ", index ",
           shape_str(index.sizes()), " and src ", shape_str(src.sizes()), " must have the same number of dims");
  if (x.dim() == 0) return raw::add(x, src);
  int64_t d = detail::wrap_dim(dim, x.dim(), "scatter_add", x.sizes());
  for (int64_t k = 0; k < x.dim(); ++k) {
    TG_CHECK(index.sizes()[k] <= src.sizes()[k], "scatter_add: index shape ", shape_str(index.sizes()),
             " is larger than src shape ", shape_str(src.sizes()), " at dim ", k);
    TG_CHECK(k == d || index.sizes()[k] <= x.sizes()[k], "scatter_add: index shape ", shape_str(index.sizes()),
             " is larger than self shape ", shape_str(x.sizes()), " at dim ", k);
  }
  check_index_range(index, x.sizes()[d], d, "scatter_add");
  ScalarType ct = detail::compute_type(x.dtype());
  TG_CHECK(x.dtype() != kBool, "scatter_add: Bool tensors are not supported");
  Tensor out = cast(x, ct).clone();
  detail::scatter_add_into(out, d, index, cast(src, ct));
  return cast(out, x.dtype());
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index, bool sparse_grad) {
  (void)sparse_grad;  // a property of the gradient only
  return raw::index_select(x, dim, index);
}

Tensor embedding(const Tensor& weight, const Tensor& indices, bool sparse) {
  (void)sparse;  // a property of the gradient only
  IntList shape = detail::embedding_shape(weight, indices);
  Tensor rows;
  try {
    rows = raw::index_select(weight, 0, raw::reshape(indices, {-1}));
  } catch (const Error& e) {
    throw Error(std::string("embedding: ") + e.what());
  }
  return raw::view(rows, shape);
}

// The sort runs over contiguous rows of the dim moved last; Bool sorts as
// Int64 and the reduced floating types as Float32 (the order is the same).
Tensor argsort(const Tensor& x, int64_t dim, bool descending) {
  detail::check_defined(x, "argsort");
  const Device dev = x.device();
  const int64_t d = detail::wrap_dim(dim, x.dim(), "argsort", x.sizes());  // a 0-dim tensor takes 0 and -1
  if (x.dim() == 0) return raw::to(tg::zeros({}, TensorOptions().dtype(kInt64)), dev);
  const ScalarType kt = compute_type(x.dtype());
  TG_CHECK(!x.is_sparse(), "argsort: not defined on sparse tensors; call to_dense() first");
  Tensor keys = raw::contiguous(raw::transpose(cast(x, kt), d, -1));
  Tensor out = detail::new_empty(keys.sizes(), kInt64, dev);
  const int64_t n = keys.dim() == 0 ? 1 : keys.size(-1);
  if (keys.numel() > 0)
    kernels::backend(dev, "argsort")
        .argsort(raw::view(out, {keys.numel() / n, n}), raw::view(keys, {keys.numel() / n, n}), descending);
  return raw::contiguous(raw::transpose(out, d, -1));
}

}  // namespace raw

}  // namespace tg

// ---- the CPU kernels -------------------------------------------------------------
// CPU index kernels (index_select, gather, scatter_add) and Philox random.

namespace tg::cpu {
namespace {

// An index out of range where the kernel runs: the op checked the range
// when it was called, so the index changed since (written in place, or a
// sparse tensor's indices written through _indices()), or it came from a
// path that trusts it. Nothing out of range is ever read or written.
[[noreturn]] void bad_index(const char* op, int64_t j, int64_t size) {
  TG_ERROR(op, ": index ", j, " is out of range for a dimension of size ", size,
           " (found by the kernel: the index tensor was changed after its range was checked, "
           "or a sparse tensor's indices were written in place; build indices afresh)");
}

void index_select_kernel(const Tensor& out, const Tensor& x, const Tensor& index) {
  int64_t outer = x.sizes()[0], n = x.sizes()[1], inner = x.sizes()[2];
  int64_t m = index.numel();
  size_t row = size_t(inner) * element_size(x.dtype());
  const char* src = static_cast<const char*>(x.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  const int64_t* idx = index.data_ptr<int64_t>();
  int64_t istride = index.dim() == 0 ? 0 : index.strides()[0];
  int64_t grain = std::max<int64_t>(1, kGrainSize / std::max<int64_t>(inner, 1));
  FirstBadIndex bad;
  parallel_for(outer * m, grain, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      int64_t o = t / m, j = t % m, i = idx[j * istride];
      if (i < 0 || i >= n) {
        bad.note(i);
        std::memset(dst + size_t(t) * row, 0, row);
        continue;
      }
      std::memcpy(dst + size_t(t) * row, src + size_t(o * n + i) * row, row);
    }
  });
  if (bad.any) bad_index("index_select", bad.value, n);
}

template <class U>
void gather_typed(const Tensor& out, const Tensor& x, const Tensor& index, int64_t dim_size, int64_t dim_stride) {
  Tensor ops[3] = {out, index, x};
  int64_t step = dim_stride * int64_t(sizeof(U));
  FirstBadIndex bad;
  for_each(ops, 3, [step, dim_size, &bad](char** p, const int64_t* s, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      int64_t j = *reinterpret_cast<const int64_t*>(p[1] + i * s[1]);
      if (j < 0 || j >= dim_size) {
        bad.note(j);
        *reinterpret_cast<U*>(p[0] + i * s[0]) = U{};
        continue;
      }
      *reinterpret_cast<U*>(p[0] + i * s[0]) = *reinterpret_cast<const U*>(p[2] + i * s[2] + j * step);
    }
  });
  if (bad.any) bad_index("gather", bad.value, dim_size);
}

void gather_kernel(const Tensor& out, const Tensor& x, const Tensor& index, int64_t dim_size, int64_t dim_stride) {
  dispatch_bytes(element_size(out.dtype()),
                 [&](auto u) { gather_typed<decltype(u)>(out, x, index, dim_size, dim_stride); });
}

// out[.., index[i], ..] += src[i] over index's shape; serial (targets repeat).
void scatter_add_kernel(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  IntList st = out.strides();
  st[size_t(dim)] = 0;
  Tensor target = out.as_strided(index.sizes(), st);
  Tensor src_view = src.as_strided(index.sizes(), src.strides());
  dispatch_compute(out.dtype(), "scatter_add", [&](auto tag) {
    using T = decltype(tag);
    int64_t step = out.strides()[size_t(dim)] * int64_t(sizeof(T));
    const int64_t size = out.sizes()[size_t(dim)];
    Tensor ops[3] = {target, index, src_view};
    for_each(
        ops, 3,
        [step, size](char** p, const int64_t* s, int64_t n) {
          for (int64_t i = 0; i < n; ++i) {
            int64_t j = *reinterpret_cast<const int64_t*>(p[1] + i * s[1]);
            if (j < 0 || j >= size) bad_index("scatter_add", j, size);  // serial: nothing half-written
            *reinterpret_cast<T*>(p[0] + i * s[0] + j * step) += *reinterpret_cast<const T*>(p[2] + i * s[2]);
          }
        },
        /*parallel=*/false);
  });
}

// See tensor/random.h for the element -> counter mapping.
template <class T, class F> void random_fill(const Tensor& out, uint64_t seed, uint64_t offset, F f) {
  T* o = out.data_ptr<T>();
  parallel_for(out.numel(), 4096, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      o[i] = f(philox4x32_10(seed, offset + uint64_t(i)));
  });
}

void uniform_kernel(const Tensor& out, uint64_t seed, uint64_t offset) {
  kernels::dispatch_floating(out.dtype(), "rand", [&](auto tag) {
    if constexpr (std::is_same_v<decltype(tag), double>)
      random_fill<double>(out, seed, offset, [](PhiloxBlock b) { return philox_u53(b.w[0], b.w[1]); });
    else random_fill<float>(out, seed, offset, [](PhiloxBlock b) { return philox_u24(b.w[0]); });
  });
}

double box_muller(PhiloxBlock b) {
  double u1 = philox_u53(b.w[0], b.w[1]), u2 = philox_u53(b.w[2], b.w[3]);
  return std::sqrt(-2.0 * std::log1p(-u1)) * std::cos(2.0 * M_PI * u2);
}

void normal_kernel(const Tensor& out, uint64_t seed, uint64_t offset) {
  kernels::dispatch_floating(out.dtype(), "randn", [&](auto tag) {
    if constexpr (std::is_same_v<decltype(tag), double>) random_fill<double>(out, seed, offset, box_muller);
    else random_fill<float>(out, seed, offset, [](PhiloxBlock b) { return float(box_muller(b)); });
  });
}

// Each row's stable sorting permutation; NaN compares largest, -0 equals 0.
void argsort_kernel(const Tensor& out, const Tensor& x, bool descending) {
  const int64_t rows = x.size(0), n = x.size(1);
  int64_t* o = out.data_ptr<int64_t>();
  dispatch_compute(x.dtype(), "argsort", [&](auto tag) {
    using T = decltype(tag);
    const T* p = static_cast<const T*>(x.data_ptr());
    parallel_for(rows, std::max<int64_t>(1, 32768 / std::max<int64_t>(n, 1)), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const T* row = p + r * n;
        int64_t* idx = o + r * n;
        std::iota(idx, idx + n, int64_t(0));
        auto nan = [](T v) { return v != v; };
        if (descending)
          std::stable_sort(idx, idx + n,
                           [&](int64_t i, int64_t j) { return (nan(row[i]) && !nan(row[j])) || row[i] > row[j]; });
        else
          std::stable_sort(idx, idx + n,
                           [&](int64_t i, int64_t j) { return (!nan(row[i]) && nan(row[j])) || row[i] < row[j]; });
      }
    });
  });
}

}  // namespace

void register_index(kernels::Backend& b) {
  b.argsort = argsort_kernel;
  b.index_select = index_select_kernel;
  b.gather = gather_kernel;
  b.scatter_add = scatter_add_kernel;
}

void register_random(kernels::Backend& b) {
  b.uniform = uniform_kernel;
  b.normal = normal_kernel;
}

}  // namespace tg::cpu
