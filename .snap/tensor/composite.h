// Internal: ops written once as compositions of other ops. Each is a
// template over an op set: RawOps (the raw entries: the op's raw form,
// tensor/composite.cpp) or PublicOps (the public, recording entries: its
// differentiable form, autograd/ops/composite.cpp, whose backward is that of
// its parts, so every derivative order follows). Both op sets are generated
// from the op list (ops.def).
#pragma once

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <tapegrad/cuda/capture.h>
#include "tensor/checked.h"
#include "tensor/op_table.h"
#include "tensor/op_util.h"

namespace tg::detail {

#define TG_D(...) = __VA_ARGS__
#define TG_OP0(ret, name, id, form) TG_IF_RAW_##form(static ret name(const Tensor& self) { return raw::name(self); })
#define TG_OP(ret, name, id, extras, args, form) \
  TG_IF_RAW_##form(static ret name(const Tensor& self, TG_UNPAREN extras) { return raw::name(self, TG_UNPAREN args); })
#define TG_FN(ret, name, id, params, args, form) TG_IF_RAW_##form(static ret name params { return raw::name args; })
struct RawOps {
#include <tapegrad/tensor/ops.def>
};
#undef TG_OP0
#undef TG_OP
#undef TG_FN

// The public entry: the free function where there is one, else the method.
#define TG_PUBLIC_FM(name, args, margs) tg::name args
#define TG_PUBLIC_F(name, args, margs) tg::name args
#define TG_PUBLIC_FMN(name, args, margs) tg::name args
#define TG_PUBLIC_FN(name, args, margs) tg::name args
#define TG_PUBLIC_M(name, args, margs) self.name margs
#define TG_PUBLIC_IM(name, args, margs) self.name margs
#define TG_PUBLIC_MN(name, args, margs) self.name margs
#define TG_PUBLIC_MA(name, args, margs) self.name margs
#define TG_OP0(ret, name, id, form) \
  TG_IF_RAW_##form(static ret name(const Tensor& self) { return TG_PUBLIC_##form(name, (self), ()); })
#define TG_OP(ret, name, id, extras, args, form)                            \
  TG_IF_RAW_##form(static ret name(const Tensor& self, TG_UNPAREN extras) { \
    return TG_PUBLIC_##form(name, (self, TG_UNPAREN args), args);           \
  })
#define TG_FN(ret, name, id, params, args, form) TG_IF_RAW_##form(static ret name params { return tg::name args; })
struct PublicOps {
#include <tapegrad/tensor/ops.def>
};
#undef TG_OP0
#undef TG_OP
#undef TG_FN
#undef TG_D

// Each of dims is a dim of x: checked under the composite's name (not that
// of the first of its parts to look at it).
inline void check_dims(const Tensor& x, const IntList& dims, const char* op) {
  for (int64_t d : dims)
    wrap_dim(d, x.dim(), op, x.sizes());
}

inline void check_floating(const Tensor& x, const char* op) {
  check_defined(x, op);
  TG_CHECK(x.is_floating_point(), op, ": expected a floating-point tensor, got ", x.dtype(), " (shape ",
           shape_str(x.sizes()), "); convert it with .to(kFloat32) or .to(kFloat64)");
}

// Sums x down to `shape` (x's shape broadcasts from it).
template <class O> Tensor sum_to(const Tensor& x, const IntList& shape) {
  check_defined(x, "sum_to");
  if (x.sizes() == shape) return x;
  int64_t lead = x.dim() - int64_t(shape.size());
  TG_CHECK(lead >= 0, "sum_to: cannot sum shape ", shape_str(x.sizes()), " to ", shape_str(shape), " (more dims)");
  IntList dims;
  for (int64_t d = 0; d < lead; ++d)
    dims.push_back(d);
  for (size_t i = 0; i < shape.size(); ++i) {
    int64_t have = x.sizes()[size_t(lead) + i];
    TG_CHECK(shape[i] == have || shape[i] == 1, "sum_to: shape ", shape_str(x.sizes()), " does not broadcast from ",
             shape_str(shape));
    if (shape[i] == 1 && have != 1) dims.push_back(lead + int64_t(i));
  }
  return O::reshape(dims.empty() ? x : O::sum(x, dims, true), shape);
}

// The output shape of embedding(weight, indices) (the checks name embedding).
inline IntList embedding_shape(const Tensor& weight, const Tensor& indices) {
  TG_CHECK(indices.defined() && indices.dtype() == kInt64,
           "embedding: indices must be an Int64 "
           "tensor");
  TG_CHECK(weight.defined() && weight.dim() == 2, "embedding: weight must be 2-D [num, dim], got ",
           weight.defined() ? shape_str(weight.sizes()) : std::string("an undefined tensor"));
  IntList shape = indices.sizes();
  shape.push_back(weight.sizes()[1]);
  return shape;
}

// log(sum(exp(x))) over dims, shifted by the (detached) max for range; an
// infinite max is not subtracted (as PyTorch).
template <class O> Tensor logsumexp(const Tensor& x, const IntList& dims, bool keepdim) {
  check_floating(x, "logsumexp");
  check_dims(x, dims, "logsumexp");
  Tensor m = O::detach(O::amax(x, dims, true));
  m = O::where(O::eq(O::abs(m), INFINITY), Scalar(0.0), m);
  Tensor s = O::sum(O::exp(O::sub(x, m)), dims, keepdim);
  return O::add(O::log(s), keepdim ? m : O::reshape(m, s.sizes()));
}

template <class O> Tensor softmax(const Tensor& x, int64_t dim) {
  check_floating(x, "softmax");
  wrap_dim(dim, x.dim(), "softmax", x.sizes());  // named here, not by its parts
  Tensor e = O::exp(O::sub(x, O::detach(O::amax(x, {dim}, true))));
  return O::div(e, O::sum(e, {dim}, true));
}

template <class O> Tensor log_softmax(const Tensor& x, int64_t dim) {
  check_floating(x, "log_softmax");
  wrap_dim(dim, x.dim(), "log_softmax", x.sizes());
  return O::sub(x, logsumexp<O>(x, {dim}, true));
}

// (sum |x|^p)^(1/p); the double `where` keeps the gradient at a zero norm 0
// instead of 0 * inf.
template <class O> Tensor norm(const Tensor& x, double p, const IntList& dims, bool keepdim) {
  check_floating(x, "norm");
  check_dims(x, dims, "norm");
  TG_CHECK(p > 0, "norm: p must be > 0 (or INFINITY), got ", p);
  if (std::isinf(p)) return O::amax(O::abs(x), dims, keepdim);
  Tensor s = p == 2 ? O::sum(O::square(x), dims, keepdim) : O::sum(O::pow(O::abs(x), p), dims, keepdim);
  Tensor zero = O::eq(s, 0.0);
  Tensor safe = O::where(zero, Scalar(1.0), s);
  Tensor r = p == 2 ? O::sqrt(safe) : O::pow(safe, 1.0 / p);
  return O::where(zero, Scalar(0.0), r);
}

template <class O> Tensor dot(const Tensor& a, const Tensor& b) {
  check_defined(a, "dot", "self");
  check_defined(b, "dot", "other");
  TG_CHECK(a.dim() == 1 && b.dim() == 1 && a.size(0) == b.size(0),
           "dot: expected two 1-D tensors "
           "of the same size, got ",
           shape_str(a.sizes()), " and ", shape_str(b.sizes()), "; for matrices use matmul");
  return O::sum(O::mul(a, b));
}

// (values, indices) of the first max (min) along dim; the values are
// gathered, so their gradient goes to that element. A NaN is the extreme.
template <class O> TensorPair extreme_dim(const Tensor& x_in, int64_t dim, bool keepdim, bool is_max, const char* op) {
  check_defined(x_in, op);
  // Checked with x's own rank (a 0-dim tensor takes 0 or -1: dim 0 of its [1] view).
  const int64_t d = wrap_dim(dim, x_in.dim(), op, x_in.sizes());
  Tensor x = x_in.dim() == 0 ? O::reshape(x_in, {1}) : x_in;
  int64_t n = x.size(d);
  TG_CHECK(n > 0, op, ": cannot reduce dim ", dim, " of size 0 (shape ", shape_str(x.sizes()), ")");
  Tensor ext = O::detach(is_max ? O::amax(x, {d}, true) : O::amin(x, {d}, true));
  Tensor hit = O::where(O::ne(ext, ext), O::ne(x, x), O::eq(x, ext));
  IntList shape(size_t(x.dim()), 1);
  shape[size_t(d)] = n;
  // Positions 0 .. n - 1 from pinned memory (index_tensor): capturable in a
  // CUDA graph, where a pageable upload is not.
  std::vector<int64_t> iota(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    iota[size_t(i)] = i;
  Tensor pos = O::reshape(index_tensor(iota, x.device()), shape);
  Tensor idx = O::amin(O::where(hit, pos, Scalar(n)), {d}, true);
  Tensor values = O::gather(x, d, idx);
  if (!keepdim || x_in.dim() == 0) {
    values = O::squeeze(values, d);
    idx = O::squeeze(idx, d);
  }
  return {values, idx};
}

// matmul's shapes (NumPy semantics) over O's mm and bmm: 1-D operands gain
// and lose a dim, a batch of a times a matrix is one large GEMM, batch dims
// broadcast. The raw entry (tensor/linalg.cpp) and the recording one
// (autograd/ops/linalg.cpp) both run this.
template <class O> Tensor matmul_shapes(const Tensor& a, const Tensor& b) {
  const int64_t da = a.dim(), db = b.dim();
  TG_CHECK(da >= 1 && db >= 1, "matmul: both arguments need at least 1 dimension, got ", shape_str(a.sizes()), " and ",
           shape_str(b.sizes()));
  const int64_t ka = a.size(-1), kb = db == 1 ? b.size(0) : b.size(-2);
  TG_CHECK(ka == kb, "matmul: cannot multiply ", shape_str(a.sizes()), " by ", shape_str(b.sizes()), " (", ka,
           " != ", kb, ")");
  if (da == 1 && db == 1) return O::mm(a.view({1, ka}), b.view({ka, 1})).view({});
  if (da == 2 && db == 2) return O::mm(a, b);
  if (da == 1 && db == 2) return O::mm(a.unsqueeze(0), b).squeeze(0);
  IntList lead(a.sizes().begin(), a.sizes().end() - 1);
  int64_t rows = 1;  // a's rows folded (explicit: -1 cannot be inferred when ka = 0)
  for (int64_t s : lead)
    rows *= s;
  if (db == 1) return O::mm(a.reshape({rows, ka}), b.unsqueeze(1)).view(lead);  // [..., n, k] @ [k]
  const int64_t m = b.size(-1);
  if (db == 2) {  // fold the batch of a into rows: one large GEMM
    lead.push_back(m);
    return O::mm(a.reshape({rows, ka}), b).view(lead);
  }
  // Batched, with NumPy broadcasting of the batch dims.
  Tensor a3 = da == 1 ? a.unsqueeze(0) : a;
  const int64_t n = a3.size(-2);
  IntList batch = broadcast_shapes(IntList(a3.sizes().begin(), a3.sizes().end() - 2),
                                   IntList(b.sizes().begin(), b.sizes().end() - 2), "matmul");
  IntList ea = batch, eb = batch;
  ea.insert(ea.end(), {n, ka});
  eb.insert(eb.end(), {kb, m});
  const int64_t nb = shape_numel(batch);
  Tensor r = O::bmm(a3.expand(ea).reshape({nb, n, ka}), b.expand(eb).reshape({nb, kb, m}));
  IntList out_shape = batch;
  if (da != 1) out_shape.push_back(n);
  out_shape.push_back(m);
  return r.view(out_shape);
}

// ---- the everyday surface: composites ----------------------------------------------

// Runs a composite op's formula; an error from one of its parts is given the
// op's name first ("lerp: sub: shapes ... cannot be broadcast"), so the
// user sees the op they called.
template <class F> auto as_op(const char* op, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error& e) {
    const std::string msg = e.what();
    if (msg.rfind(std::string(op) + ":", 0) == 0) throw;
    throw Error(std::string(op) + ": " + msg);
  }
}

// Int64 indices start, start + step, ... (below end), on `device`.
// On a GPU made there (a scan of ones: no host copy, so a CUDA graph can
// capture it: triangle masks, diag_embed).
inline Tensor index_range(int64_t start, int64_t end, int64_t step, Device device) {
  if (device.type() == kCPU || end <= start)
    return raw::to(tg::arange(start, end, step, TensorOptions().dtype(kInt64)), device);
  const int64_t count = (end - start + step - 1) / step;
  Tensor iota = raw::sub(raw::cumsum(tg::ones({count}, TensorOptions().dtype(kInt64).device(device)), 0), Scalar(1));
  return step == 1 && start == 0 ? iota : raw::add(raw::mul(iota, Scalar(step)), Scalar(start));
}
// y, or a copy of it where y shares x's storage: the result of an op that
// is no view (repeat, flip, roll, prod, ...) is new storage even where its
// formula came out as a view of x (repeats of one, a shift of 0), so that
// writing it leaves x alone (as PyTorch's).
template <class O> Tensor fresh(const Tensor& y, const Tensor& x) {
  return y.impl()->storage() == x.impl()->storage() ? O::clone(y) : y;
}
inline IntList all_dims(const Tensor& x) {
  IntList d(size_t(x.dim()));
  for (int64_t i = 0; i < x.dim(); ++i)
    d[size_t(i)] = i;
  return d;
}

// PyTorch's two-sided formula: self + w (end - self) below |w| = 1/2, else
// end - (end - self)(1 - w), so weight 1 gives end exactly.
template <class O> Tensor lerp(const Tensor& self, const Tensor& end, const Tensor& weight) {
  check_floating(self, "lerp");
  check_floating(end, "lerp");
  check_floating(weight, "lerp");
  Tensor diff = O::sub(end, self);
  Tensor low = O::add(self, O::mul(weight, diff));
  Tensor high = O::sub(end, O::mul(diff, O::add(O::neg(weight), Scalar(1.0))));
  return O::where(O::lt(O::abs(weight), Scalar(0.5)), low, high);
}
template <class O> Tensor lerp(const Tensor& self, const Tensor& end, Scalar weight) {
  check_floating(self, "lerp");
  check_floating(end, "lerp");
  const double w = weight.to_double();
  Tensor diff = O::sub(end, self);
  return std::fabs(w) < 0.5 ? O::add(self, O::mul(diff, Scalar(w))) : O::sub(end, O::mul(diff, Scalar(1.0 - w)));
}

// x where x >= bound (x gets the gradient at ties), else bound; NaN on
// either side propagates.
template <class O> Tensor clamp_bound(const Tensor& x, const Tensor& bound, bool lower, const char* op) {
  check_defined(x, op, "self");
  check_defined(bound, op, lower ? "min" : "max");
  Tensor keep = lower ? O::ge(x, bound) : O::le(x, bound);
  return O::where(O::ne(x, x), x, O::where(keep, x, bound));
}

// The product along d by a tree of pairwise products (log2 n steps, exact
// gradients with zeros, every order).
template <class O> Tensor prod_along(const Tensor& x_in, int64_t d, bool keepdim) {
  Tensor x = x_in.dtype() == kBool ? O::to(x_in, kInt64) : x_in;
  if (x.size(d) == 0) {
    Tensor one = O::add(O::sum(O::mul(x, Scalar(0)), {d}, true), Scalar(1));
    return keepdim ? one : O::squeeze(one, d);
  }
  while (x.size(d) > 1) {
    const int64_t n = x.size(d), h = n / 2;
    Tensor p = O::mul(O::narrow(x, d, 0, h), O::narrow(x, d, h, h));
    x = n % 2 ? O::cat({p, O::narrow(x, d, 2 * h, 1)}, d) : p;
  }
  return fresh<O>(keepdim ? x : O::squeeze(x, d), x_in);  // a size-1 dim: a copy
}
template <class O> Tensor prod(const Tensor& x) {
  check_defined(x, "prod");
  return prod_along<O>(O::reshape(x, {-1}), 0, false);
}
template <class O> Tensor prod(const Tensor& x, int64_t dim, bool keepdim) {
  check_defined(x, "prod");
  const int64_t d = wrap_dim(dim, x.dim(), "prod", x.sizes());  // a 0-dim tensor takes 0 and -1
  if (x.dim() == 0) return prod<O>(x);
  return prod_along<O>(x, d, keepdim);
}

template <class O>
Tensor var(const Tensor& x, const IntList& dims_in, double correction, bool keepdim, const char* op) {
  check_floating(x, op);
  if (x.dim() == 0) {  // one element: dims 0 and -1 name it
    for (int64_t d : dims_in)
      wrap_dim(d, 0, op, x.sizes());
    return O::reshape(var<O>(O::reshape(x, {1}), {0}, correction, false, op), {});
  }
  IntList dims = dims_in.empty() ? all_dims(x) : dims_in;
  double n = 1;
  for (int64_t d : dims)
    n *= double(x.size(wrap_dim(d, x.dim(), op, x.sizes())));
  Tensor centered = O::sub(x, O::mean(x, dims, true));
  Tensor s = dims.empty() ? O::square(centered) : O::sum(O::square(centered), dims, keepdim);
  return O::div(s, Scalar(std::max(0.0, n - correction)));
}

// any / all: how many elements are nonzero (zero).
inline Tensor any_all(const Tensor& x, std::optional<int64_t> dim, bool keepdim, bool any, const char* op) {
  check_defined(x, op);
  Tensor hits = any ? raw::ne(x, Scalar(0)) : raw::eq(x, Scalar(0));
  Tensor count;
  if (!dim || x.dim() == 0) {
    if (dim) wrap_dim(*dim, x.dim(), op, x.sizes());  // a 0-dim tensor: 0 or -1
    count = raw::sum(hits);
  } else {
    count = raw::sum(hits, {wrap_dim(*dim, x.dim(), op, x.sizes())}, keepdim);
  }
  return any ? raw::gt(count, Scalar(0)) : raw::eq(count, Scalar(0));
}

inline Tensor arg_extreme(const Tensor& x, std::optional<int64_t> dim, bool keepdim, bool is_max, const char* op) {
  check_defined(x, op);
  TG_CHECK(x.dtype() != kBool, op, ": not defined on Bool tensors; convert with .to(kInt64)");
  if (dim) return std::get<1>(extreme_dim<RawOps>(x, *dim, keepdim, is_max, op));
  TG_CHECK(x.numel() > 0, op, ": cannot take the ", is_max ? "largest" : "smallest",
           " element of an empty tensor (shape ", shape_str(x.sizes()), "); pass a dim");
  Tensor i = std::get<1>(extreme_dim<RawOps>(raw::reshape(x, {-1}), 0, false, is_max, op));
  return keepdim ? raw::reshape(i, IntList(size_t(x.dim()), 1)) : i;
}

// Sorted values are x gathered at argsort's permutation (their gradient
// scatters back through it).
template <class O> TensorPair sort(const Tensor& x, int64_t dim, bool descending) {
  check_defined(x, "sort");
  const int64_t d = wrap_dim(dim, x.dim(), "sort", x.sizes());  // a 0-dim tensor takes 0 and -1
  Tensor idx = raw::argsort(x, dim, descending);
  if (x.dim() == 0) return {O::clone(x), idx};
  return {O::gather(x, d, idx), idx};
}
template <class O> TensorPair topk(const Tensor& x, int64_t k, int64_t dim, bool largest, bool sorted) {
  check_defined(x, "topk");
  const int64_t d = wrap_dim(dim, x.dim(), "topk", x.sizes());
  const int64_t n = x.dim() == 0 ? 1 : x.size(d);
  TG_CHECK(k >= 0 && k <= n, "topk: k = ", k, " is out of range for dim ", dim, " of size ", n, " (shape ",
           shape_str(x.sizes()), ")");
  (void)sorted;  // always sorted (a full sort underneath)
  auto [v, i] = sort<O>(x, dim, largest);
  if (x.dim() == 0) return {v, i};
  return {O::narrow(v, d, 0, k), raw::narrow(i, d, 0, k)};
}
template <class O> TensorPair kthvalue(const Tensor& x, int64_t k, int64_t dim, bool keepdim, const char* op) {
  check_defined(x, op);
  const int64_t d = wrap_dim(dim, x.dim(), op, x.sizes());
  const int64_t n = x.dim() == 0 ? 1 : x.size(d);
  TG_CHECK(k >= 1 && k <= n, op, ": k = ", k, " is out of range for dim ", dim, " of size ", n, " (shape ",
           shape_str(x.sizes()), "); k counts from 1");
  auto [v, i] = sort<O>(x, dim, false);
  if (x.dim() == 0) return {v, i};
  Tensor vk = O::narrow(v, d, k - 1, 1), ik = raw::narrow(i, d, k - 1, 1);
  if (!keepdim) return {O::squeeze(vk, d), raw::squeeze(ik, d)};
  return {vk, ik};
}
// The lower median; NaN when the row has one (sorting puts NaN last, so the
// row's NaN count decides, as PyTorch).
template <class O> TensorPair median(const Tensor& x, int64_t dim, bool keepdim) {
  check_defined(x, "median");
  const int64_t d = wrap_dim(dim, x.dim(), "median", x.sizes());
  const int64_t n = x.dim() == 0 ? 1 : x.size(d);
  TG_CHECK(n > 0, "median: cannot take the median of dim ", dim, " of size 0 (shape ", shape_str(x.sizes()), ")");
  auto [v, i] = kthvalue<O>(x, (n + 1) / 2, dim, true, "median");
  if (x.is_floating_point() && x.dim() > 0) {  // a row with NaN: its first NaN
    Tensor nan_row = raw::gt(raw::sum(raw::ne(x, x), {d}, true), Scalar(0));
    auto [sv, si] = sort<O>(x, dim, true);  // descending: NaN first
    v = O::where(nan_row, O::narrow(sv, d, 0, 1), v);
    i = raw::where(nan_row, raw::narrow(si, d, 0, 1), i);
  }
  if (!keepdim && x.dim() > 0) return {O::squeeze(v, d), raw::squeeze(i, d)};
  return {v, i};
}
// The median of all elements; its gradient is spread evenly over the
// elements equal to it (all NaNs when it is NaN), as PyTorch's median()
// (the dim form sends it to the selected index, as PyTorch's). The value is
// the selected element exactly: v - sum(where(tied, v - x, 0)) / count adds
// an exact +0 that carries 1/count to each tie; an infinite or NaN median is
// the mean of its ties (themselves), where v - x would be NaN.
template <class O> Tensor median(const Tensor& x) {
  check_defined(x, "median");
  TG_CHECK(x.numel() > 0, "median: cannot take the median of an empty tensor (shape ", shape_str(x.sizes()), ")");
  Tensor flat = O::reshape(x, {-1});
  Tensor v = std::get<0>(median<RawOps>(raw::detach(flat), 0, false));
  if (std::is_same_v<O, RawOps> || !x.is_floating_point()) return v;
  Tensor tied = raw::where(raw::ne(v, v), raw::ne(flat, flat), raw::eq(flat, v));
  Tensor count = raw::to(raw::sum(tied), x.dtype());
  Tensor gap = O::div(O::sum(O::where(tied, O::sub(v, flat), Scalar(0))), count);
  Tensor mean = O::div(O::sum(O::where(tied, flat, Scalar(0))), count);
  return O::where(raw::eq(raw::sub(v, v), Scalar(0)), O::sub(v, gap), mean);
}

template <class O> Tensor outer(const Tensor& a, const Tensor& b) {
  check_defined(a, "outer", "self");
  check_defined(b, "outer", "other");
  TG_CHECK(a.dim() == 1 && b.dim() == 1, "outer: expected two 1-D tensors, got ", shape_str(a.sizes()), " and ",
           shape_str(b.sizes()));
  return O::mul(O::unsqueeze(a, 1), O::unsqueeze(b, 0));
}
template <class O> Tensor cross(const Tensor& a_in, const Tensor& b_in, int64_t dim) {
  check_defined(a_in, "cross", "self");
  check_defined(b_in, "cross", "other");
  IntList shape = broadcast_shapes(a_in.sizes(), b_in.sizes(), "cross");
  Tensor a = O::expand(a_in, shape), b = O::expand(b_in, shape);
  TG_CHECK(!shape.empty(), "cross: expected 3-vectors, got 0-dim tensors");
  const int64_t d = wrap_dim(dim, int64_t(shape.size()), "cross", shape);
  TG_CHECK(shape[size_t(d)] == 3, "cross: dim ", dim, " must have size 3, got ", shape[size_t(d)], " (shapes ",
           shape_str(a_in.sizes()), " and ", shape_str(b_in.sizes()), ")");
  auto c = [&](const Tensor& t, int64_t i) { return O::narrow(t, d, i, 1); };
  auto term = [&](int64_t i, int64_t j) { return O::sub(O::mul(c(a, i), c(b, j)), O::mul(c(a, j), c(b, i))); };
  return O::cat({term(1, 2), term(2, 0), term(0, 1)}, d);
}

// tril/triu's raw form: a copy whose other triangle a kernel zeros
// (tensor/linalg.cpp; x at least 2-dim).
Tensor triangle_copy(const Tensor& x, int64_t k, bool lower);
template <class O> Tensor triangle(const Tensor& x, int64_t k, bool lower, const char* op) {
  check_defined(x, op);
  TG_CHECK(x.dim() >= 2, op, ": expected a matrix or a batch of matrices, got shape ", shape_str(x.sizes()));
  if constexpr (std::is_same_v<O, RawOps>) return triangle_copy(x, k, lower);
  // Recorded: a where, whose backward is the same triangle of the gradient.
  const int64_t n = x.size(-2), m = x.size(-1);
  // col <= row + k (lower) by one broadcast compare of [1, m] with [n, 1]:
  // no [n, m] index tensor.
  Tensor rows = raw::add(raw::reshape(index_range(0, n, 1, x.device()), {n, 1}), Scalar(k));
  Tensor cols = raw::reshape(index_range(0, m, 1, x.device()), {1, m});
  Tensor keep = lower ? raw::le(cols, rows) : raw::ge(cols, rows);
  return O::where(keep, x, Scalar(0));
}

// The diagonal through the flattened last two dims: elements m + 1 apart.
template <class O> Tensor diagonal(const Tensor& x, int64_t offset, int64_t dim1, int64_t dim2) {
  check_defined(x, "diagonal");
  TG_CHECK(x.dim() >= 2, "diagonal: expected at least 2 dims, got shape ", shape_str(x.sizes()));
  const int64_t d1 = wrap_dim(dim1, x.dim(), "diagonal", x.sizes()),
                d2 = wrap_dim(dim2, x.dim(), "diagonal", x.sizes());
  TG_CHECK(d1 != d2, "diagonal: dim1 and dim2 are the same dim (", dim1, ", ", dim2, ")");
  IntList perm, lead;
  for (int64_t i = 0; i < x.dim(); ++i)
    if (i != d1 && i != d2) perm.push_back(i), lead.push_back(x.size(i));
  perm.push_back(d1);
  perm.push_back(d2);
  const int64_t n = x.size(d1), m = x.size(d2);
  const int64_t len = std::max<int64_t>(0, offset >= 0 ? std::min(n, m - offset) : std::min(n + offset, m));
  IntList flat = lead;
  flat.push_back(n * m);
  Tensor y = O::reshape(O::permute(x, perm), flat);
  if (len == 0) return O::narrow(y, -1, 0, 0);
  const int64_t start = offset >= 0 ? offset : -offset * m;
  return O::slice(y, -1, start, start + (len - 1) * (m + 1) + 1, m + 1);
}
template <class O> Tensor diag_embed(const Tensor& x, int64_t offset, int64_t dim1, int64_t dim2) {
  check_defined(x, "diag_embed");
  TG_CHECK(x.dim() >= 1, "diag_embed: expected at least 1 dim, got a 0-dim tensor");
  const int64_t nd = x.dim() + 1;
  const int64_t d1 = wrap_dim(dim1, nd, "diag_embed", x.sizes()), d2 = wrap_dim(dim2, nd, "diag_embed", x.sizes());
  TG_CHECK(d1 != d2, "diag_embed: dim1 and dim2 are the same dim (", dim1, ", ", dim2, ")");
  // The side m = n + |offset|, the m * m block and the last position, each
  // checked before anything is allocated.
  const int64_t n = x.size(-1);
  int64_t m = 0, mm = 0, span = 0, end = 0;
  const bool fits = offset != INT64_MIN && !__builtin_add_overflow(n, offset < 0 ? -offset : offset, &m) &&
                    !__builtin_mul_overflow(m, m, &mm) && !__builtin_mul_overflow(n, m + 1, &span) &&
                    !__builtin_add_overflow(offset >= 0 ? offset : -offset * m, span, &end);
  TG_CHECK(fits, "diag_embed: offset ", offset, " with a last dim of size ", n, " (shape ", shape_str(x.sizes()),
           ") makes matrices of side ", n, " + |", offset,
           "|, whose elements do not fit in 64 bits; use a smaller offset");
  const int64_t start = offset >= 0 ? offset : -offset * m;
  IntList flat(x.sizes().begin(), x.sizes().end() - 1);
  flat.push_back(mm);
  checked_numel(flat, "diag_embed");
  Tensor pos = x.numel() == 0 ? raw::to(tg::zeros(x.sizes(), TensorOptions().dtype(kInt64)), x.device())
                              : raw::expand(index_range(start, end, m + 1, x.device()), x.sizes());
  // Made on x's device (a host tensor copied over cost a batch of 64 x 64
  // matrices 20 ms on an H100: its bytes crossed PCIe).
  Tensor zeros = tg::zeros(flat, TensorOptions().dtype(x.dtype()).device(x.device()));
  IntList square(x.sizes().begin(), x.sizes().end() - 1);
  square.push_back(m);
  square.push_back(m);
  Tensor out = O::reshape(O::scatter_add(zeros, -1, raw::contiguous(pos), x), square);
  IntList perm(static_cast<size_t>(nd), 0);
  for (int64_t p = 0, lead = 0; p < nd; ++p)
    perm[size_t(p)] = p == d1 ? nd - 2 : p == d2 ? nd - 1 : lead++;
  return perm == all_dims(out) ? out : O::permute(out, perm);
}
template <class O> Tensor diag(const Tensor& x, int64_t k) {
  check_defined(x, "diag");
  TG_CHECK(x.dim() == 1 || x.dim() == 2, "diag: expected a 1-D or 2-D tensor, got shape ", shape_str(x.sizes()));
  return x.dim() == 1 ? diag_embed<O>(x, k, 0, 1) : diagonal<O>(x, k, 0, 1);
}
template <class O> Tensor trace(const Tensor& x) {
  check_defined(x, "trace");
  TG_CHECK(x.dim() == 2, "trace: expected a matrix, got shape ", shape_str(x.sizes()));
  return O::sum(diagonal<O>(x, 0, 0, 1));
}

inline void check_mask(const Tensor& x, const Tensor& mask, const char* op, bool to_x) {
  check_defined(x, op, "self");
  check_defined(mask, op, "mask");
  TG_CHECK(mask.dtype() == kBool, op, ": mask must be a Bool tensor, got ", mask.dtype(),
           "; compare to get one (x > 0)");
  IntList b = broadcast_shapes(x.sizes(), mask.sizes(), op);
  TG_CHECK(!to_x || b == x.sizes(), op, ": mask of shape ", shape_str(mask.sizes()), " does not broadcast to ",
           shape_str(x.sizes()));
}
template <class O> Tensor masked_fill(const Tensor& x, const Tensor& mask, const Tensor& value) {
  check_mask(x, mask, "masked_fill", true);
  check_defined(value, "masked_fill", "value");
  TG_CHECK(value.dim() == 0, "masked_fill: value must be a 0-dim tensor, got shape ", shape_str(value.sizes()));
  // A floating value on the host must fit x's dtype, as the number form's
  // (on a GPU it is not read back: the conversion there saturates, NaN to the smallest value).
  if (!value.is_cuda() && is_floating_point(value.dtype()) && value.dtype() != x.dtype())
    check_scalar_fits(Scalar(value.detach().to(kFloat64).template item<double>()), x.dtype(), "masked_fill");
  return O::where(mask, O::to(O::to(value, x.device()), x.dtype()), x);
}
template <class O> Tensor masked_fill_scalar(const Tensor& x, const Tensor& mask, Scalar value) {
  check_defined(x, "masked_fill", "self");
  check_scalar_fits(value, x.dtype(), "masked_fill");
  return masked_fill<O>(x, mask, scalar_tensor(value, TensorOptions().dtype(x.dtype())));
}
inline Tensor nonzero_indices(const Tensor& x) {
  check_defined(x, "nonzero");
  if (x.is_cuda()) cuda::detail::check_not_capturing("nonzero", x.device().index());  // the count is read
  Tensor hit = raw::contiguous(raw::to(raw::ne(x, Scalar(0)), Device(kCPU)));
  const bool* h = static_cast<const bool*>(hit.data_ptr());
  const int64_t nd = x.dim(), n = hit.numel();
  std::vector<double> idx;
  IntList at(size_t(nd), 0);
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (h[i]) {
      ++count;
      for (int64_t a : at)
        idx.push_back(double(a));
    }
    for (int64_t d = nd - 1; d >= 0; --d) {  // the next position, row-major
      if (++at[size_t(d)] < x.size(d)) break;
      at[size_t(d)] = 0;
    }
  }
  return raw::to(tg::tensor(idx, {count, nd}, TensorOptions().dtype(kInt64)), x.device());
}
template <class O> Tensor masked_select(const Tensor& x, const Tensor& mask) {
  check_mask(x, mask, "masked_select", false);
  IntList shape = broadcast_shapes(x.sizes(), mask.sizes(), "masked_select");
  Tensor where = raw::reshape(nonzero_indices(raw::reshape(raw::expand(mask, shape), {-1})), {-1});
  return O::index_select(O::reshape(O::expand(x, shape), {-1}), 0, where);
}

template <class O> std::vector<Tensor> split(const Tensor& x, const IntList& sizes, int64_t d) {
  std::vector<Tensor> out;
  int64_t at = 0;
  for (int64_t s : sizes) {
    out.push_back(O::narrow(x, d, at, s));
    at += s;
  }
  return out;
}
// A split makes one view per piece: a dim of an empty tensor can be longer
// than memory could hold pieces for, so its count is bounded.
inline void check_pieces(int64_t pieces, const Tensor& x, int64_t dim, const char* op) {
  const int64_t most = std::max<int64_t>(x.numel(), int64_t(1) << 20);
  TG_CHECK(pieces <= most, op, ": dim ", dim, " of shape ", shape_str(x.sizes()), " would make ", pieces,
           " pieces, more than the limit of ", most,
           " (the element count, at least 2^20); ask for fewer, larger pieces");
}
template <class O> std::vector<Tensor> split(const Tensor& x, int64_t size, int64_t dim) {
  check_defined(x, "split");
  TG_CHECK(x.dim() > 0, "split: cannot split a 0-dim tensor");
  const int64_t d = wrap_dim(dim, x.dim(), "split", x.sizes()), n = x.size(d);
  TG_CHECK(size > 0 || (size == 0 && n == 0), "split: split_size must be positive, got ", size, " for dim ", dim,
           " of size ", n);
  const int64_t pieces = n == 0 ? 1 : n / size + (n % size != 0);  // one empty piece of an empty dim
  check_pieces(pieces, x, dim, "split");
  IntList sizes;
  for (int64_t i = 0; i < pieces; ++i)
    sizes.push_back(std::min(size, n - i * size));
  return split<O>(x, sizes, d);
}
template <class O> std::vector<Tensor> split_sizes(const Tensor& x, const IntList& sizes, int64_t dim) {
  check_defined(x, "split");
  TG_CHECK(x.dim() > 0, "split: cannot split a 0-dim tensor");
  const int64_t d = wrap_dim(dim, x.dim(), "split", x.sizes());
  int64_t total = 0;
  for (int64_t s : sizes) {
    TG_CHECK(s >= 0, "split: sizes must be >= 0, got ", shape_str(sizes));
    TG_CHECK(!__builtin_add_overflow(total, s, &total), "split: sizes ", shape_str(sizes),
             " sum past 2^63 - 1; they must sum to dim ", dim, "'s size ", x.size(d));
  }
  TG_CHECK(total == x.size(d), "split: sizes ", shape_str(sizes), " sum to ", total, ", not to dim ", dim, "'s size ",
           x.size(d), " (shape ", shape_str(x.sizes()), ")");
  return split<O>(x, sizes, d);
}
// PyTorch's rule: pieces of ceil(n / chunks) (one element each when chunks
// > n), so possibly fewer than chunks; an empty dim gives chunks empty pieces.
template <class O> std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  check_defined(x, "chunk");
  TG_CHECK(chunks > 0, "chunk: chunks must be positive, got ", chunks, "; ask for at least one piece");
  TG_CHECK(x.dim() > 0, "chunk: cannot chunk a 0-dim tensor");
  const int64_t d = wrap_dim(dim, x.dim(), "chunk", x.sizes()), n = x.size(d);
  if (n > 0) return split<O>(x, n / chunks + (n % chunks != 0), d);  // ceil, without overflow at INT64_MAX
  check_pieces(chunks, x, dim, "chunk");
  return split<O>(x, IntList(size_t(chunks), 0), d);
}

// [s0, s1, ...] viewed [1, s0, 1, s1, ...], expanded [r0, s0, r1, s1, ...]
// and merged pairwise; every size is checked before anything is allocated.
template <class O> Tensor repeat(const Tensor& x, const IntList& reps) {
  check_defined(x, "repeat");
  TG_CHECK(int64_t(reps.size()) >= x.dim(), "repeat: got ", reps.size(), " repeats for a tensor of ", x.dim(),
           " dims (shape ", shape_str(x.sizes()), "); give at least one per dim");
  IntList sizes(reps.size() - size_t(x.dim()), 1);
  sizes.insert(sizes.end(), x.sizes().begin(), x.sizes().end());
  IntList inter, expanded, merged;
  for (size_t i = 0; i < reps.size(); ++i) {
    TG_CHECK(reps[i] >= 0, "repeat: repeats must be >= 0, got ", shape_str(reps));
    int64_t m;
    TG_CHECK(!__builtin_mul_overflow(reps[i], sizes[i], &m), "repeat: repeats ", shape_str(reps), " of shape ",
             shape_str(x.sizes()), " make dim ", i, " ", reps[i], " * ", sizes[i],
             " long, more than fits in 64 bits; use smaller repeats");
    inter.insert(inter.end(), {1, sizes[i]});
    expanded.insert(expanded.end(), {reps[i], sizes[i]});
    merged.push_back(m);
  }
  checked_numel(merged, "repeat");
  return fresh<O>(O::reshape(O::expand(O::reshape(x, inter), expanded), merged), x);
}
template <class O> Tensor tile(const Tensor& x, const IntList& reps_in) {
  check_defined(x, "tile");
  IntList reps = reps_in;
  if (int64_t(reps.size()) < x.dim()) reps.insert(reps.begin(), size_t(x.dim()) - reps.size(), 1);
  return repeat<O>(x, reps);
}
// Each i of [0, n) counts[i] times (counts[0] each when ncounts is 1): an
// Int64 index [total] on `device` (tensor/index.cpp).
Tensor repeat_index(const int64_t* counts, int64_t ncounts, int64_t n, int64_t total, Device device);
template <class O> Tensor repeat_interleave(const Tensor& x_in, int64_t repeats, std::optional<int64_t> dim) {
  check_defined(x_in, "repeat_interleave");
  TG_CHECK(repeats >= 0, "repeat_interleave: repeats must be >= 0, got ", repeats);
  const int64_t d = dim ? wrap_dim(*dim, x_in.dim(), "repeat_interleave", x_in.sizes()) : 0;  // 0-dim: 0 and -1
  Tensor x = dim && x_in.dim() > 0 ? x_in : O::reshape(x_in, {-1});
  IntList shape = x.sizes(), out = x.sizes();
  shape.insert(shape.begin() + d + 1, repeats);
  TG_CHECK(!__builtin_mul_overflow(out[size_t(d)], repeats, &out[size_t(d)]), "repeat_interleave: ", repeats,
           " repeats of dim ", d, " of size ", x.size(d), " (shape ", shape_str(x_in.sizes()),
           ") are more elements than fit in 64 bits; use fewer repeats");
  checked_numel(out, "repeat_interleave");
  return fresh<O>(O::reshape(O::expand(O::unsqueeze(x, d + 1), shape), out), x_in);
}
template <class O> Tensor repeat_interleave(const Tensor& x_in, const Tensor& repeats, std::optional<int64_t> dim) {
  check_defined(x_in, "repeat_interleave");
  check_defined(repeats, "repeat_interleave", "repeats");
  TG_CHECK(repeats.dtype() == kInt64 && repeats.dim() <= 1,
           "repeat_interleave: repeats must be a 0-D or 1-D Int64 "
           "tensor, got ",
           repeats.dtype(), " ", shape_str(repeats.sizes()));
  const int64_t d = dim ? wrap_dim(*dim, x_in.dim(), "repeat_interleave", x_in.sizes()) : 0;  // 0-dim: 0 and -1
  Tensor x = dim && x_in.dim() > 0 ? x_in : O::reshape(x_in, {-1});
  if (repeats.is_cuda()) cuda::detail::check_not_capturing("repeat_interleave", repeats.device().index());
  Tensor r = raw::contiguous(raw::to(repeats, Device(kCPU)));
  const int64_t n = x.size(d);
  TG_CHECK(r.numel() == 1 || r.numel() == n, "repeat_interleave: ", r.numel(), " repeats for dim ", d, " of size ", n,
           " (give one, or one per slice)");
  // The counts' sum and the result's size, checked before the index is built.
  const int64_t* rp = static_cast<const int64_t*>(r.data_ptr());
  int64_t total = 0;
  for (int64_t i = 0; i < r.numel(); ++i) {
    TG_CHECK(rp[i] >= 0, "repeat_interleave: repeats must be >= 0, got ", rp[i], " at ", i);
    TG_CHECK(!__builtin_add_overflow(total, rp[i], &total), "repeat_interleave: the repeats sum past 2^63 - 1 (at ", i,
             ", count ", rp[i], "); use smaller counts");
  }
  TG_CHECK(r.numel() != 1 || !__builtin_mul_overflow(total, n, &total), "repeat_interleave: ", rp[0],
           " repeats of dim ", d, " of size ", n, " (shape ", shape_str(x_in.sizes()),
           ") are more elements than fit in 64 bits; use fewer repeats");
  IntList out = x.sizes();
  out[size_t(d)] = total;
  if (checked_numel(out, "repeat_interleave") == 0) return fresh<O>(O::reshape(O::narrow(x, d, 0, 0), out), x_in);
  return O::index_select(x, d, repeat_index(rp, r.numel(), n, total, x.device()));
}
template <class O> Tensor flip(const Tensor& x, const IntList& dims) {
  check_defined(x, "flip");
  Tensor y = x;
  std::vector<bool> seen(size_t(std::max<int64_t>(x.dim(), 1)), false);
  for (int64_t dim : dims) {
    const int64_t d = wrap_dim(dim, x.dim(), "flip", x.sizes());
    TG_CHECK(!seen[size_t(d)], "flip: dim ", dim, " appears twice in ", shape_str(dims));
    seen[size_t(d)] = true;
    if (x.dim() > 0 && x.size(d) > 1) y = O::index_select(y, d, index_range(x.size(d) - 1, -1, -1, x.device()));
  }
  return fresh<O>(y, x);  // no dims, size-1 dims or a 0-dim tensor: a copy
}
template <class O> Tensor roll(const Tensor& x, const IntList& shifts, const IntList& dims) {
  check_defined(x, "roll");
  if (dims.empty()) {
    TG_CHECK(shifts.size() == 1, "roll: without dims give one shift, got ", shape_str(shifts));
    return O::reshape(roll<O>(O::reshape(x, {-1}), shifts, {0}), x.sizes());
  }
  TG_CHECK(shifts.size() == dims.size(), "roll: ", shifts.size(), " shifts for ", dims.size(), " dims (",
           shape_str(shifts), ", ", shape_str(dims), ")");
  Tensor y = x;
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = wrap_dim(dims[i], x.dim(), "roll", x.sizes()), n = x.dim() == 0 ? 0 : x.size(d);
    if (n == 0) continue;
    const int64_t s = ((shifts[i] % n) + n) % n;
    if (s) y = O::cat({O::narrow(y, d, n - s, s), O::narrow(y, d, 0, n - s)}, d);
  }
  return fresh<O>(y, x);  // shifts of 0 or of the size: a copy
}
template <class O> std::vector<Tensor> meshgrid(const std::vector<Tensor>& tensors, const std::string& indexing) {
  TG_CHECK(indexing == "ij" || indexing == "xy", "meshgrid: indexing must be \"ij\" or \"xy\", got \"", indexing, "\"");
  IntList shape;
  for (size_t i = 0; i < tensors.size(); ++i) {
    check_defined(tensors[i], "meshgrid");
    TG_CHECK(tensors[i].dim() <= 1, "meshgrid: expected 0-D or 1-D tensors, tensor ", i, " has shape ",
             shape_str(tensors[i].sizes()));
    shape.push_back(tensors[i].numel());
  }
  const bool xy = indexing == "xy" && tensors.size() >= 2;
  if (xy) std::swap(shape[0], shape[1]);
  std::vector<Tensor> out;
  for (size_t i = 0; i < tensors.size(); ++i) {
    IntList view(shape.size(), 1);
    view[xy && i < 2 ? 1 - i : i] = -1;
    out.push_back(O::expand(O::reshape(tensors[i], view), shape));
  }
  return out;
}

// ---- einsum -----------------------------------------------------------------------------
// Labels are ints: letters as themselves, the "..." dims as 256 + i counted
// from the right.
struct EinsumTerm {
  std::vector<int> labels;
};
struct EinsumPlan {
  std::vector<EinsumTerm> inputs;
  std::vector<int> output;
  std::map<int, int64_t> size;  // each label's size (the largest where 1s broadcast)
};
// Parses the equation and checks every size: a repeated label's within an
// operand (equal), one label's across operands (equal or 1), the output's
// and every pairwise product's element count (within 64 bits).
EinsumPlan einsum_parse(const std::string& equation, const std::vector<Tensor>& operands);
// The element count of labels' dims (checked, naming the equation).
int64_t einsum_numel(const EinsumPlan& plan, const std::vector<int>& labels, const std::string& equation);
// Above this many parts the contraction goes left to right: the greedy
// search costs O(parts^3 labels) per contraction.
constexpr size_t kEinsumGreedyParts = 48;

template <class O> Tensor einsum(const std::string& equation, const std::vector<Tensor>& operands) {
  for (size_t i = 0; i < operands.size(); ++i) {
    check_defined(operands[i], "einsum");
    TG_CHECK(operands[i].is_floating_point() || is_complex(operands[i].dtype()),
             "einsum: expected floating-point or complex operands, got ", operands[i].dtype(), " (operand ", i,
             ", shape ", shape_str(operands[i].sizes()), "); convert it with .to(kFloat32) or .to(kFloat64)");
    TG_CHECK(operands[i].device() == operands[0].device(), "einsum: operands on ", operands[0].device(), " and ",
             operands[i].device());
  }
  const EinsumPlan plan = einsum_parse(equation, operands);
  const std::map<int, int64_t>& size = plan.size;
  struct Part {
    Tensor t;
    std::vector<int> labels;  // distinct
    bool has(int l) const { return std::find(labels.begin(), labels.end(), l) != labels.end(); }
  };
  std::vector<Part> parts;
  // Each operand: repeated labels to their diagonal, size-1 dims broadcast.
  for (size_t i = 0; i < operands.size(); ++i) {
    Part p{operands[i], plan.inputs[i].labels};
    for (size_t a = 0; a < p.labels.size(); ++a)
      for (size_t b = a + 1; b < p.labels.size();)
        if (p.labels[a] == p.labels[b]) {
          p.t = diagonal<O>(p.t, 0, int64_t(a), int64_t(b));  // to the last dim
          const int l = p.labels[a];
          p.labels.erase(p.labels.begin() + int64_t(b));
          p.labels.erase(p.labels.begin() + int64_t(a));
          p.labels.push_back(l);
          b = a + 1;
        } else {
          ++b;
        }
    IntList full;
    for (int l : p.labels)
      full.push_back(size.at(l));
    if (full != p.t.sizes()) {
      einsum_numel(plan, p.labels, equation);
      p.t = O::expand(p.t, full);
    }
    parts.push_back(std::move(p));
  }
  // How many parts hold each label, plus one if the output does.
  std::map<int, int64_t> users;
  for (int l : plan.output)
    users[l] = 1;
  for (const Part& p : parts)
    for (int l : p.labels)
      ++users[l];
  auto count_elsewhere = [&](size_t a, size_t b, int l) {
    return users[l] - parts[a].has(l) - (b != a && parts[b].has(l));
  };
  // Sums over the labels of a part that nothing else needs.
  auto sum_private = [&](size_t i) {
    IntList dims;
    std::vector<int> kept;
    for (size_t k = 0; k < parts[i].labels.size(); ++k)
      if (count_elsewhere(i, i, parts[i].labels[k]) == 0) dims.push_back(int64_t(k));
      else kept.push_back(parts[i].labels[k]);
    for (int64_t k : dims)
      --users[parts[i].labels[size_t(k)]];
    if (!dims.empty()) parts[i].t = O::sum(parts[i].t, dims, false);
    parts[i].labels = kept;
  };
  for (size_t i = 0; i < parts.size(); ++i)
    sum_private(i);
  auto numel_of = [&](const std::vector<int>& labels) {
    double n = 1;
    for (int l : labels)
      n *= double(size.at(l));
    return n;
  };
  while (parts.size() > 1) {
    // The greedy choice: the pair whose product is smallest against its
    // operands; with many parts, the first two (left to right).
    size_t bi = 0, bj = 1;
    const bool greedy = parts.size() <= kEinsumGreedyParts;
    double best = INFINITY;
    for (size_t i = 0; greedy && i < parts.size(); ++i)
      for (size_t j = i + 1; j < parts.size(); ++j) {
        std::vector<int> out;
        for (const Part* p : {&parts[i], &parts[j]})
          for (int l : p->labels)
            if (std::find(out.begin(), out.end(), l) == out.end() && count_elsewhere(i, j, l) > 0) out.push_back(l);
        const double cost = numel_of(out) - numel_of(parts[i].labels) - numel_of(parts[j].labels);
        if (cost < best) best = cost, bi = i, bj = j;
      }
    const Part& a = parts[bi];
    const Part& b = parts[bj];
    std::vector<int> batch, left, right, contract;
    for (int l : a.labels)
      (b.has(l) ? (count_elsewhere(bi, bj, l) > 0 ? batch : contract) : left).push_back(l);
    for (int l : b.labels)
      if (!a.has(l)) right.push_back(l);
    auto arrange = [&](const Part& p, std::initializer_list<const std::vector<int>*> groups) {
      IntList perm, shape;
      for (const std::vector<int>* g : groups) {
        for (int l : *g)
          perm.push_back(int64_t(std::find(p.labels.begin(), p.labels.end(), l) - p.labels.begin()));
        shape.push_back(einsum_numel(plan, *g, equation));
      }
      return O::reshape(O::permute(p.t, perm), shape);
    };
    std::vector<int> labels = batch;
    labels.insert(labels.end(), left.begin(), left.end());
    labels.insert(labels.end(), right.begin(), right.end());
    einsum_numel(plan, labels, equation);  // before the product allocates
    Tensor prod = O::bmm(arrange(a, {&batch, &left, &contract}), arrange(b, {&batch, &contract, &right}));
    IntList shape;
    for (int l : labels)
      shape.push_back(size.at(l));
    for (int l : a.labels)
      --users[l];
    for (int l : b.labels)
      --users[l];
    for (int l : labels)
      ++users[l];
    Part joined{O::reshape(prod, shape), labels};
    parts.erase(parts.begin() + int64_t(bj));
    if (greedy) {  // the joined part last
      parts.erase(parts.begin() + int64_t(bi));
      parts.push_back(std::move(joined));
      sum_private(parts.size() - 1);
    } else {  // the running product first
      parts[bi] = std::move(joined);
      sum_private(bi);
    }
  }
  Part& last = parts[0];
  IntList perm;
  for (int l : plan.output)
    perm.push_back(int64_t(std::find(last.labels.begin(), last.labels.end(), l) - last.labels.begin()));
  return perm == all_dims(last.t) ? O::clone(last.t) : O::permute(last.t, perm);
}

}  // namespace tg::detail
