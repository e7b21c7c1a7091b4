// Reductions: sum, mean, amax, amin over all or some dims.
#include <algorithm>

#include "tensor/op_util.h"

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

}  // namespace raw

// ---- whole-tensor comparisons --------------------------------------------------------

namespace raw {

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  detail::check_defined(a, "allclose", "first operand");
  detail::check_defined(b, "allclose", "second operand");
  detail::check_same_device(a, b, "allclose");
  Tensor x = raw::to(a, kFloat64), y = raw::to(b, kFloat64);
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
