// Internal: ops written once as compositions of other ops. Each is a
// template over an op set: RawOps (the raw entries: the op's raw form,
// tensor/composite.cpp) or PublicOps (the public, recording entries: its
// differentiable form, autograd/ops/composite.cpp, whose backward is that of
// its parts, so every derivative order follows). Both op sets are generated
// from the op list (ops.def).
#pragma once

#include <cmath>

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
  Tensor m = O::detach(O::amax(x, dims, true));
  m = O::where(O::eq(O::abs(m), INFINITY), Scalar(0.0), m);
  Tensor s = O::sum(O::exp(O::sub(x, m)), dims, keepdim);
  return O::add(O::log(s), keepdim ? m : O::reshape(m, s.sizes()));
}

template <class O> Tensor softmax(const Tensor& x, int64_t dim) {
  check_floating(x, "softmax");
  Tensor e = O::exp(O::sub(x, O::detach(O::amax(x, {dim}, true))));
  return O::div(e, O::sum(e, {dim}, true));
}

template <class O> Tensor log_softmax(const Tensor& x, int64_t dim) {
  check_floating(x, "log_softmax");
  return O::sub(x, logsumexp<O>(x, {dim}, true));
}

// (sum |x|^p)^(1/p); the double `where` keeps the gradient at a zero norm 0
// instead of 0 * inf.
template <class O> Tensor norm(const Tensor& x, double p, const IntList& dims, bool keepdim) {
  check_floating(x, "norm");
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

// x along dim times the upper-triangular ones: out[j] = sum_{i <= j} x[i].
template <class O> Tensor cumsum(const Tensor& x, int64_t dim) {
  check_floating(x, "cumsum");
  if (x.dim() == 0) return O::mul(x, 1.0);
  int64_t d = wrap_dim(dim, x.dim(), "cumsum", x.sizes());
  int64_t n = x.size(d);
  Tensor i = O::to(tg::arange(n, TensorOptions().dtype(kInt64)), x.device());
  Tensor tri = O::to(O::ge(O::unsqueeze(i, 0), O::unsqueeze(i, 1)), x.dtype());
  return O::transpose(O::matmul(O::transpose(x, d, -1), tri), d, -1);
}

// (values, indices) of the first max (min) along dim; the values are
// gathered, so their gradient goes to that element. A NaN is the extreme.
template <class O> TensorPair extreme_dim(const Tensor& x_in, int64_t dim, bool keepdim, bool is_max, const char* op) {
  check_defined(x_in, op);
  Tensor x = x_in.dim() == 0 ? O::reshape(x_in, {1}) : x_in;
  int64_t d = wrap_dim(dim, x.dim(), op, x.sizes());
  int64_t n = x.size(d);
  TG_CHECK(n > 0, op, ": cannot reduce dim ", dim, " of size 0 (shape ", shape_str(x.sizes()), ")");
  Tensor ext = O::detach(is_max ? O::amax(x, {d}, true) : O::amin(x, {d}, true));
  Tensor hit = O::where(O::ne(ext, ext), O::ne(x, x), O::eq(x, ext));
  IntList shape(size_t(x.dim()), 1);
  shape[size_t(d)] = n;
  Tensor pos = O::reshape(O::to(tg::arange(n, TensorOptions().dtype(kInt64)), x.device()), shape);
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
  if (db == 1) return O::mm(a.reshape({-1, ka}), b.unsqueeze(1)).view(lead);  // [..., n, k] @ [k]
  const int64_t m = b.size(-1);
  if (db == 2) {  // fold the batch of a into rows: one large GEMM
    lead.push_back(m);
    return O::mm(a.reshape({-1, ka}), b).view(lead);
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

}  // namespace tg::detail
