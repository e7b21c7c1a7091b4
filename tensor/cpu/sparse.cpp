// CPU kernels for sparse COO tensors: coalesce (sort + merge) and spmm.
#include <algorithm>
#include <numeric>

#include <tbb/parallel_sort.h>

#include "tensor/cpu/cpu_kernels.h"
#include "tensor/cpu/loops.h"
#include "tensor/op_util.h"

namespace tg::cpu {
namespace {

void coalesce_kernel(const Tensor& lin_t, const Tensor& values, const IntList& sparse_sizes, Tensor& out_indices,
                     Tensor& out_values, bool /*unique: the host reads anyway*/) {
  const int64_t nnz = lin_t.numel();
  const int64_t D = values.numel() / std::max<int64_t>(nnz, 1);
  const int64_t* lin = lin_t.data_ptr<int64_t>();
  // Stable order of the keys: ties keep their original order, so duplicates
  // are summed in a fixed order (results do not depend on the thread count).
  std::vector<int64_t> perm(static_cast<size_t>(nnz));
  std::iota(perm.begin(), perm.end(), int64_t(0));
  auto less = [lin](int64_t a, int64_t b) { return lin[a] < lin[b] || (lin[a] == lin[b] && a < b); };
#ifdef TAPEGRAD_TSAN
  std::sort(perm.begin(), perm.end(), less);  // see parallel_for: TBB is not TSan-built
#else
  tbb::parallel_sort(perm.begin(), perm.end(), less);
#endif
  std::vector<int64_t> starts;
  for (int64_t p = 0; p < nnz; ++p)
    if (p == 0 || lin[perm[size_t(p)]] != lin[perm[size_t(p - 1)]]) starts.push_back(p);
  const int64_t u = int64_t(starts.size());
  starts.push_back(nnz);
  const int64_t sd = int64_t(sparse_sizes.size());
  out_indices = detail::new_empty({sd, u}, kInt64, lin_t.device());
  IntList vsizes = values.sizes();
  vsizes[0] = u;
  out_values = detail::new_empty(vsizes, values.dtype(), values.device());
  int64_t* oi = out_indices.data_ptr<int64_t>();
  for (int64_t s = 0; s < u; ++s) {
    int64_t l = lin[perm[size_t(starts[size_t(s)])]];
    for (int64_t d = sd - 1; d >= 0; --d) {
      oi[d * u + s] = l % sparse_sizes[size_t(d)];
      l /= sparse_sizes[size_t(d)];
    }
  }
  dispatch_compute(values.dtype(), "coalesce", [&](auto tag) {
    using T = decltype(tag);
    const T* v = static_cast<const T*>(values.data_ptr());
    T* o = static_cast<T*>(out_values.data_ptr());
    parallel_for(u, std::max<int64_t>(1, 4096 / std::max<int64_t>(D, 1)), [&](int64_t b, int64_t e) {
      for (int64_t s = b; s < e; ++s) {
        T* row = o + s * D;
        std::fill(row, row + D, T(0));
        for (int64_t p = starts[size_t(s)]; p < starts[size_t(s + 1)]; ++p) {
          const T* src = v + perm[size_t(p)] * D;
          for (int64_t c = 0; c < D; ++c)
            row[c] += src[c];
        }
      }
    });
  });
}

void spmm_kernel(const Tensor& out, const Tensor& rows_t, const Tensor& cols_t, const Tensor& values,
                 const Tensor& dense) {
  const int64_t n = out.sizes()[0], k = out.sizes()[1], nnz = rows_t.numel();
  const int64_t* rows = rows_t.data_ptr<int64_t>();
  const int64_t* cols = cols_t.data_ptr<int64_t>();
  const int64_t dense_rows = dense.sizes()[0];
  FirstBadIndex bad_col;  // a column index out of range (stale indices): never read
  dispatch_compute(out.dtype(), "mm", [&](auto tag) {
    using T = decltype(tag);
    const T* v = static_cast<const T*>(values.data_ptr());
    const T* d = static_cast<const T*>(dense.data_ptr());
    T* o = static_cast<T*>(out.data_ptr());
    // Rows are sorted: each output row is one contiguous run of entries.
    parallel_for(n, std::max<int64_t>(1, 2048 / std::max<int64_t>(k, 1)), [&](int64_t b, int64_t e) {
      const int64_t* p = std::lower_bound(rows, rows + nnz, b);
      for (int64_t r = b; r < e; ++r) {
        T* orow = o + r * k;
        std::fill(orow, orow + k, T(0));
        for (; p != rows + nnz && *p == r; ++p) {
          int64_t j = p - rows;
          const T a = v[j];
          if (cols[j] < 0 || cols[j] >= dense_rows) {
            bad_col.note(cols[j]);
            continue;
          }
          const T* drow = d + cols[j] * k;
          for (int64_t c = 0; c < k; ++c)
            orow[c] += a * drow[c];
        }
      }
    });
  });
  TG_CHECK(!bad_col.any, "mm (sparse @ dense): the sparse tensor's column index ", bad_col.value.load(),
           " is out of range for the dense operand's ", dense_rows,
           " rows (its indices were written in place after it was built; build it afresh)");
}

void lower_bound_kernel(const Tensor& out, const Tensor& sorted_t, const Tensor& values_t) {
  const int64_t n = sorted_t.numel();
  const int64_t* sorted = sorted_t.data_ptr<int64_t>();
  const int64_t* v = values_t.data_ptr<int64_t>();
  int64_t* o = out.data_ptr<int64_t>();
  parallel_for(values_t.numel(), 4096, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      o[i] = std::lower_bound(sorted, sorted + n, v[i]) - sorted;
  });
}

}  // namespace

void register_sparse(kernels::Backend& b) {
  b.coalesce = coalesce_kernel;
  b.spmm = spmm_kernel;
  b.lower_bound = lower_bound_kernel;
}

}  // namespace tg::cpu
