// Reductions: sum, mean, amax, amin over all or some dims; then the CPU
// reduction kernel.
#include <algorithm>

#include "tensor/op_util.h"
#include "tensor/env.h"
#include <cmath>
#include <limits>
#include <vector>
#include <Eigen/Core>
#include "tensor/element_math.h"
#include "tensor/cpu/loops.h"
#include <tapegrad/tensor/ops.h>
#include "tensor/cpu/cpu_kernels.h"

namespace tg {

using detail::cast;
using detail::compute_type;
using kernels::ReduceOp;

namespace {

enum class Kind { Sum, Mean, Max, Min };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::Sum: return "sum";
    case Kind::Mean: return "mean";
    case Kind::Max: return "amax";
    case Kind::Min: return "amin";
  }
  return "?";
}

Tensor reduce(Kind kind, const Tensor& x_in, const IntList& dims_in, bool keepdim, bool all) {
  const char* name = kind_name(kind);
  detail::check_defined(x_in, name);
  if (x_in.dim() == 0) {  // reduce a scalar as a [1] tensor
    for (int64_t d : dims_in)
      detail::wrap_dim(d, 0, name, x_in.sizes());
    Tensor r = reduce(kind, x_in.reshape({1}), {0}, false, false);
    return r;
  }
  if (is_complex(x_in.dtype())) {
    // Sum and mean of the parts: the real reduction of view_as_real over the
    // same dims (the parts' dim, last, kept).
    TG_INTERNAL_ASSERT(kind == Kind::Sum || kind == Kind::Mean, name, ": no complex kernel");
    IntList dims;
    if (all || dims_in.empty())
      for (int64_t d = 0; d < x_in.dim(); ++d)
        dims.push_back(d);
    else
      for (int64_t d : dims_in)
        dims.push_back(detail::wrap_dim(d, x_in.dim(), name, x_in.sizes()));
    // Complex64's parts accumulate in Float64: the parts interleave, so their
    // sums run down columns, which the real kernels add in the element type.
    const bool single = x_in.dtype() == kComplex64;
    Tensor parts = raw::view_as_real(x_in);
    Tensor r = reduce(kind, single ? raw::to(parts, kFloat64) : parts, dims, keepdim, false);
    return raw::view_as_complex((single ? raw::to(r, kFloat32) : r).contiguous());
  }
  const Tensor& x = x_in;
  int64_t nd = x.dim();
  std::vector<bool> red(size_t(nd), all || dims_in.empty());
  if (!all && !dims_in.empty()) {
    for (int64_t d : dims_in) {
      int64_t w = detail::wrap_dim(d, nd, name, x.sizes());
      TG_CHECK(!red[size_t(w)], name, ": dim ", w, " appears multiple times in the list of dims ", shape_str(dims_in));
      red[size_t(w)] = true;
    }
  }
  IntList keep_shape = x.sizes(), out_shape;
  int64_t count = 1;
  for (int64_t d = 0; d < nd; ++d) {
    if (red[size_t(d)]) {
      count *= x.sizes()[d];
      TG_CHECK(x.sizes()[d] != 0 || kind == Kind::Sum || kind == Kind::Mean, name, ": cannot reduce over dim ", d,
               " of size 0 (shape ", shape_str(x.sizes()), "): the operation has no identity");
      keep_shape[d] = 1;
      if (keepdim) out_shape.push_back(1);
    } else {
      out_shape.push_back(x.sizes()[d]);
    }
  }
  ScalarType rt = x.dtype();
  if (kind == Kind::Sum && !is_floating_point(rt)) rt = kInt64;
  TG_CHECK(kind != Kind::Mean || is_floating_point(rt), name, ": expected a floating-point tensor, got ", rt,
           "; convert with .to(kFloat32) first");
  ScalarType ct = compute_type(rt);
  Tensor out = detail::new_empty(keep_shape, ct, x.device());
  ReduceOp op = kind == Kind::Max ? ReduceOp::Max : kind == Kind::Min ? ReduceOp::Min : ReduceOp::Sum;
  if (x.numel() == 0)  // the sum of nothing (a max or min over a size-0 dim was refused above)
    raw::zero_(out);   // and no kernel walks the other, possibly huge, dims of an empty tensor
  else kernels::backend(x.device(), name).reduce(op, out, cast(x, ct));
  if (kind == Kind::Mean) out = raw::div(out, Scalar(double(count)));
  return cast(out, rt).view(out_shape);
}

}  // namespace

namespace raw {

Tensor sum(const Tensor& x) {
  if (x.defined() && x.is_sparse()) return sparse_sum(x);
  return reduce(Kind::Sum, x, {}, false, true);
}
Tensor sum(const Tensor& x, const IntList& dims, bool keepdim) { return reduce(Kind::Sum, x, dims, keepdim, false); }
Tensor mean(const Tensor& x) { return reduce(Kind::Mean, x, {}, false, true); }
Tensor mean(const Tensor& x, const IntList& dims, bool keepdim) { return reduce(Kind::Mean, x, dims, keepdim, false); }
Tensor amax(const Tensor& x) { return reduce(Kind::Max, x, {}, false, true); }
Tensor amax(const Tensor& x, const IntList& dims, bool keepdim) { return reduce(Kind::Max, x, dims, keepdim, false); }
Tensor amin(const Tensor& x) { return reduce(Kind::Min, x, {}, false, true); }
Tensor amin(const Tensor& x, const IntList& dims, bool keepdim) { return reduce(Kind::Min, x, dims, keepdim, false); }

// The scanned dim in the middle of [outer, n, inner]; integer and Bool
// inputs sum in Int64 (as PyTorch), BFloat16/Float16 through Float32.
Tensor cumsum(const Tensor& x, int64_t dim) {
  detail::check_defined(x, "cumsum");
  TG_CHECK(!x.is_sparse(), "cumsum: not defined on sparse tensors; call to_dense() first");
  const int64_t d = detail::wrap_dim(dim, x.dim(), "cumsum", x.sizes());
  const ScalarType rt = is_floating_point(x.dtype()) ? x.dtype() : kInt64, ct = compute_type(rt);
  Tensor out = detail::new_empty(x.sizes(), ct, x.device());
  if (x.numel() > 0) {
    int64_t outer = 1, inner = 1;
    for (int64_t k = 0; k < d; ++k)
      outer *= x.sizes()[size_t(k)];
    for (int64_t k = d + 1; k < x.dim(); ++k)
      inner *= x.sizes()[size_t(k)];
    const int64_t n = x.dim() == 0 ? 1 : x.sizes()[size_t(d)];
    kernels::backend(x.device(), "cumsum")
        .cumsum(raw::view(out, {outer, n, inner}), raw::view(raw::contiguous(cast(x, ct)), {outer, n, inner}));
  }
  return cast(out, rt);
}

}  // namespace raw

// ---- whole-tensor comparisons --------------------------------------------------------

namespace raw {

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  detail::check_defined(a, "allclose", "first operand");
  detail::check_defined(b, "allclose", "second operand");
  detail::check_same_device(a, b, "allclose");
  // In Complex128 when either is complex (|.| is then the modulus).
  const ScalarType t = is_complex(a.dtype()) || is_complex(b.dtype()) ? kComplex128 : kFloat64;
  Tensor x = raw::to(a, t), y = raw::to(b, t);
  Tensor ok = raw::le(raw::abs(raw::sub(x, y)), raw::add(raw::mul(raw::abs(y), rtol), atol));
  ok = raw::maximum(ok, raw::eq(x, y));  // equal infinities are close
  if (equal_nan) ok = raw::maximum(ok, raw::mul(raw::ne(x, x), raw::ne(y, y)));
  return ok.numel() == 0 || raw::amin(ok).item<bool>();
}

bool equal(const Tensor& a, const Tensor& b) {
  detail::check_defined(a, "equal", "first operand");
  detail::check_defined(b, "equal", "second operand");
  detail::check_same_device(a, b, "equal");
  if (a.sizes() != b.sizes()) return false;
  return a.numel() == 0 || raw::amin(raw::eq(a, b)).item<bool>();
}

}  // namespace raw

}  // namespace tg

// ---- the CPU kernels -------------------------------------------------------------
// CPU reductions. The reduced dims are arranged innermost (row reduction
// over contiguous runs) or outermost (column reduction, vectorized across
// the kept dims); anything else is copied into the row arrangement first.

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
  // o[0, e - b) = reduce over rows [r0, r1) of columns [b, e).
  auto run = [&](T* o, int64_t r0, int64_t r1, int64_t b, int64_t e) {
    const int64_t w = e - b;
    for (int64_t j = 0; j < w; ++j)
      o[j] = in[r0 * cols + b + j];
    for (int64_t i = r0 + 1; i < r1; ++i) {
      const T* row = in + i * cols + b;
      if (op == ReduceOp::Sum) {
        for (int64_t j = 0; j < w; ++j)
          o[j] = wrap_add(o[j], row[j]);
      } else {
        for (int64_t j = 0; j < w; ++j)
          o[j] = combine(op, o[j], row[j]);
      }
    }
  };
  int64_t grain = std::max<int64_t>(64, kGrainSize / std::max<int64_t>(len, 1));
  // Few columns down many rows (a bias gradient: [1024, 64] summed over its
  // rows) are one column task: the rows split too, in up to 16 blocks of at
  // least 8192 elements fixed by the shape (so the result is the same on any
  // machine), and the blocks' partials are combined in order.
  const int64_t rb = cols <= grain && detail::switched_on<detail::OffSwitch::kCpuSplitInner>()
                         ? std::min<int64_t>({16, len * cols / 8192, len / 16})
                         : 1;
  if (rb > 1) {
    const int64_t per = (len + rb - 1) / rb;
    std::vector<T> part(size_t((rb - 1) * cols));
    parallel_for(rb, 1, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t)
        run(t == 0 ? out : part.data() + (t - 1) * cols, t * per, std::min(len, (t + 1) * per), 0, cols);
    });
    for (int64_t t = 1; t < rb; ++t) {
      const T* p = part.data() + (t - 1) * cols;
      for (int64_t j = 0; j < cols; ++j)
        out[j] = combine(op, out[j], p[j]);
    }
    return;
  }
  parallel_for(cols, grain, [&](int64_t b, int64_t e) { run(out + b, 0, len, b, e); });
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

// out[o, i, j] = x[o, 0, j] + ... + x[o, i, j] over contiguous [outer, n,
// inner]: each task carries the running sums of up to kCols columns of one
// outer slice down the dim (a row when inner is 1), in the accumulator type.
void cumsum_kernel(const Tensor& out, const Tensor& x) {
  const int64_t outer = x.sizes()[0], n = x.sizes()[1], inner = x.sizes()[2];
  constexpr int64_t kCols = 256;
  const int64_t blocks = (inner + kCols - 1) / kCols, width = std::min(inner, kCols);
  dispatch_compute(x.dtype(), "cumsum", [&](auto tag) {
    using T = decltype(tag);
    using A = typename Acc<T>::type;
    const T* in = static_cast<const T*>(x.data_ptr());
    T* o = static_cast<T*>(out.data_ptr());
    parallel_for(outer * blocks, std::max<int64_t>(1, kGrainSize / (n * width)), [&](int64_t b, int64_t e) {
      A acc[kCols];
      for (int64_t t = b; t < e; ++t) {
        const int64_t j0 = (t % blocks) * kCols, w = std::min(kCols, inner - j0);
        const int64_t base = (t / blocks) * n * inner + j0;
        std::fill(acc, acc + w, A(0));
        for (int64_t i = 0; i < n; ++i) {
          const T* p = in + base + i * inner;
          T* q = o + base + i * inner;
          for (int64_t j = 0; j < w; ++j) {
            acc[j] = wrap_add(acc[j], A(p[j]));
            q[j] = T(acc[j]);
          }
        }
      }
    });
  });
}

}  // namespace

void register_reduce(kernels::Backend& b) {
  b.reduce = reduce_kernel;
  b.cumsum = cumsum_kernel;
}

}  // namespace tg::cpu
