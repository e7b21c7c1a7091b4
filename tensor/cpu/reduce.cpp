// CPU reductions. The reduced dims are arranged innermost (row reduction
// over contiguous runs) or outermost (column reduction, vectorized across
// the kept dims); anything else is copied into the row arrangement first.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <Eigen/Core>

#include "tensor/cpu/cpu_kernels.h"
#include "tensor/element_math.h"
#include "tensor/cpu/loops.h"
#include <tapegrad/tensor/ops.h>

namespace tg::cpu {
namespace {

using kernels::kWraps;
using kernels::ReduceOp;
using kernels::wrap_add;

template <class T> struct Acc {  // accumulator type: float sums are blocked and carried in double
  using type = std::conditional_t<std::is_same_v<T, float>, double, T>;
};

template <class T> T combine(ReduceOp op, T a, T b) {
  switch (op) {
    case ReduceOp::Sum: return wrap_add(a, b);  // Int64 sums wrap
    case ReduceOp::Max:
      if constexpr (!std::is_integral_v<T>)
        if (a != a || b != b) return std::numeric_limits<T>::quiet_NaN();
      return a > b ? a : b;
    case ReduceOp::Min:
      if constexpr (!std::is_integral_v<T>)
        if (a != a || b != b) return std::numeric_limits<T>::quiet_NaN();
      return a < b ? a : b;
  }
  return a;
}

// Reduces a contiguous run of n >= 1 elements.
template <class T> typename Acc<T>::type reduce_run(ReduceOp op, const T* p, int64_t n) {
  using A = typename Acc<T>::type;
  if (op == ReduceOp::Sum && kWraps<T>) {
    A total = 0;
    for (int64_t i = 0; i < n; ++i)
      total = wrap_add(total, A(p[i]));
    return total;
  }
  if (op == ReduceOp::Sum) {
    A total = 0;
    constexpr int64_t kBlock = 4096;
    for (int64_t i = 0; i < n; i += kBlock) {
      int64_t m = std::min(kBlock, n - i);
      total += A(Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(p + i, m).sum());
    }
    return total;
  }
  T acc = p[0];
  for (int64_t i = 1; i < n; ++i)
    acc = combine(op, acc, p[i]);
  return A(acc);
}

template <class T> void reduce_rows(ReduceOp op, const T* in, T* out, int64_t rows, int64_t len) {
  using A = typename Acc<T>::type;
  if (len == 0) {  // empty reduction: sum gives 0 (max/min were rejected)
    for (int64_t r = 0; r < rows; ++r)
      out[r] = T(0);
    return;
  }
  if (rows >= 16 || rows * len < kGrainSize) {
    int64_t grain = std::max<int64_t>(1, kGrainSize / len);
    parallel_for(rows, grain, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r)
        out[r] = T(reduce_run(op, in + r * len, len));
    });
    return;
  }
  // Few long rows: split each row into chunks and combine the partials.
  int64_t chunks = (len + kGrainSize - 1) / kGrainSize;
  std::vector<A> part(size_t(rows * chunks));
  parallel_for(rows * chunks, 1, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      int64_t r = t / chunks, c = t % chunks;
      int64_t s = c * kGrainSize, m = std::min(kGrainSize, len - s);
      part[size_t(t)] = reduce_run(op, in + r * len + s, m);
    }
  });
  for (int64_t r = 0; r < rows; ++r) {
    A acc = part[size_t(r * chunks)];
    for (int64_t c = 1; c < chunks; ++c)
      acc = combine(op, acc, part[size_t(r * chunks + c)]);
    out[r] = T(acc);
  }
}

// in: [len, cols] contiguous; out[j] = reduce_i in[i, j].
template <class T> void reduce_cols(ReduceOp op, const T* in, T* out, int64_t len, int64_t cols) {
  if (len == 0) {
    for (int64_t j = 0; j < cols; ++j)
      out[j] = T(0);
    return;
  }
  int64_t grain = std::max<int64_t>(64, kGrainSize / std::max<int64_t>(len, 1));
  parallel_for(cols, grain, [&](int64_t b, int64_t e) {
    T* o = out + b;
    int64_t w = e - b;
    for (int64_t j = 0; j < w; ++j)
      o[j] = in[b + j];
    for (int64_t i = 1; i < len; ++i) {
      const T* row = in + i * cols + b;
      if (op == ReduceOp::Sum) {
        for (int64_t j = 0; j < w; ++j)
          o[j] = wrap_add(o[j], row[j]);
      } else {
        for (int64_t j = 0; j < w; ++j)
          o[j] = combine(op, o[j], row[j]);
      }
    }
  });
}

void reduce_kernel(ReduceOp op, const Tensor& out, const Tensor& x) {
  // A view of x without its size-1 dims; kept (out size == x size) and
  // reduced dims are positions in that view.
  IntList sz, st, kept, reduced;
  int64_t rows = 1, len = 1;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (x.sizes()[d] == 1) continue;
    int64_t pos = int64_t(sz.size());
    sz.push_back(x.sizes()[d]);
    st.push_back(x.strides()[d]);
    if (out.sizes()[d] == 1) {
      reduced.push_back(pos);
      len *= x.sizes()[d];
    } else {
      kept.push_back(pos);
      rows *= x.sizes()[d];
    }
  }
  IntList row_perm = kept, col_perm = reduced;
  row_perm.insert(row_perm.end(), reduced.begin(), reduced.end());
  col_perm.insert(col_perm.end(), kept.begin(), kept.end());
  Tensor base = x.as_strided(sz, st);
  Tensor as_rows = base.permute(row_perm);
  Tensor as_cols = base.permute(col_perm);
  TG_INTERNAL_ASSERT(out.is_contiguous(), "reduce output must be contiguous");
  dispatch_compute(x.dtype(), "reduce", [&](auto tag) {
    using T = decltype(tag);
    T* o = out.data_ptr<T>();
    if (!as_rows.is_contiguous() && as_cols.is_contiguous() && len > 1) {
      reduce_cols<T>(op, as_cols.data_ptr<T>(), o, len, rows);
      return;
    }
    Tensor c = as_rows.contiguous();
    reduce_rows<T>(op, c.data_ptr<T>(), o, rows, len);
  });
}

}  // namespace

void register_reduce(kernels::Backend& b) { b.reduce = reduce_kernel; }

}  // namespace tg::cpu
