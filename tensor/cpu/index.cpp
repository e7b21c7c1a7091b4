// CPU index kernels (index_select, gather, scatter_add) and Philox random.
#include <cmath>
#include <cstring>

#include "tensor/cpu/cpu_kernels.h"
#include "tensor/cpu/loops.h"
#include <tapegrad/tensor/random.h>

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
  if (out.dtype() == ScalarType::Float64) {
    random_fill<double>(out, seed, offset, [](PhiloxBlock b) { return philox_u53(b.w[0], b.w[1]); });
  } else {
    random_fill<float>(out, seed, offset, [](PhiloxBlock b) { return philox_u24(b.w[0]); });
  }
}

double box_muller(PhiloxBlock b) {
  double u1 = philox_u53(b.w[0], b.w[1]), u2 = philox_u53(b.w[2], b.w[3]);
  return std::sqrt(-2.0 * std::log1p(-u1)) * std::cos(2.0 * M_PI * u2);
}

void normal_kernel(const Tensor& out, uint64_t seed, uint64_t offset) {
  if (out.dtype() == ScalarType::Float64) {
    random_fill<double>(out, seed, offset, box_muller);
  } else {
    random_fill<float>(out, seed, offset, [](PhiloxBlock b) { return float(box_muller(b)); });
  }
}

}  // namespace

void register_index(kernels::Backend& b) {
  b.index_select = index_select_kernel;
  b.gather = gather_kernel;
  b.scatter_add = scatter_add_kernel;
}

void register_random(kernels::Backend& b) {
  b.uniform = uniform_kernel;
  b.normal = normal_kernel;
}

}  // namespace tg::cpu
