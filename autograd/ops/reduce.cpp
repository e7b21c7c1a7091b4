// Differentiable reductions. amax/amin: ties share the gradient evenly (the
// gradient is divided by the number of maximal elements), as PyTorch.
#include <algorithm>

#include <tapegrad/tensor/error.h>

#include "autograd/ops/ops.h"
#include "autograd/ops/record.h"

namespace tg {

using autograd::SavedVariable;
using autograd::variable_list;
using namespace autograd::ops_detail;

namespace {

// Reduced dims, wrapped and sorted (all dims when `dims` is empty).
IntList reduced_dims(const IntList& dims, int64_t ndim) {
  IntList out;
  if (dims.empty()) {
    for (int64_t d = 0; d < ndim; ++d)
      out.push_back(d);
    return out;
  }
  int64_t n = std::max<int64_t>(ndim, 1);
  for (int64_t d : dims)
    out.push_back(d < 0 ? d + n : d);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  if (ndim == 0) out.clear();
  return out;
}

// g has the reduced shape; put back the reduced dims as size 1.
Tensor unsqueeze_reduced(const Tensor& g, const IntList& dims, bool keepdim) {
  if (keepdim) return g;
  Tensor r = g;
  for (int64_t d : dims)
    r = r.unsqueeze(d);
  return r;
}

class ReduceBackward final : public SelfResultNode {
 public:
  enum Kind { Sum, Mean, Extreme };
  ReduceBackward(const char* op, const char* name, Kind kind, IntList sizes, IntList dims, bool keepdim)
      : SelfResultNode(op, name), kind_(kind), sizes_(std::move(sizes)), dims_(std::move(dims)), keepdim_(keepdim) {}
  variable_list apply(variable_list&& grads) override {
    variable_list out(1);
    if (!should_compute_output(0)) return out;
    Tensor g = unsqueeze_reduced(grads[0], dims_, keepdim_);
    if (kind_ == Sum) {
      out[0] = g.expand(sizes_);
    } else if (kind_ == Mean) {
      int64_t count = 1;
      for (int64_t d : dims_)
        count *= sizes_[d];
      // Reduced floats divide in float32 (as PyTorch's opmath): the count
      // may exceed Float16's range (65504), and BFloat16 rounds it.
      out[0] = is_reduced_float(g.dtype()) ? div(g.to(kFloat32), double(count)).to(g.dtype()).expand(sizes_)
                                           : div(g, double(count)).expand(sizes_);
    } else {
      Tensor x = self_.unpack(this, "self");
      Tensor r = unsqueeze_reduced(result_.unpack(this, "result"), dims_, keepdim_);
      Tensor mask = raw::to(eq(x, r), x.dtype());
      Tensor count = raw::sum(mask, dims_, true);
      out[0] = mul(div(g, count), mask);
    }
    return out;
  }

 private:
  Kind kind_;
  IntList sizes_, dims_;
  bool keepdim_;
};

template <class F>
Tensor reduce_op(const Tensor& x, const char* op, const char* name, ReduceBackward::Kind kind, const IntList& dims,
                 bool keepdim, F&& raw_fn) {
  if (!should_record({&x})) return run_raw(raw_fn);
  Tensor out = run_raw(raw_fn);  // checks dims before the node is built
  auto node = make_node<ReduceBackward>({&x}, op, name, kind, x.sizes(), reduced_dims(dims, x.dim()), keepdim);
  if (kind == ReduceBackward::Extreme) node->self_ = SavedVariable(x, false);
  out = finish(out, node);
  if (kind == ReduceBackward::Extreme) node->result_ = SavedVariable(out, true);
  return out;
}

}  // namespace

namespace {
// The tangent of a reduction of x over `dims` (empty: all) by `op`: the same
// reduction of the tangent, over the same dims shifted past a batch dim.
template <class Op>
Tensor reduce_tangent(const Tensor& t, const Tensor& x, const IntList& dims, bool keepdim, Op&& op) {
  if (fw_batch() == 0) return dims.empty() && !keepdim ? op(t, IntList{}, false, true) : op(t, dims, keepdim, false);
  IntList rd = reduced_dims(dims, x.dim());
  if (rd.empty()) return t.clone();  // a 0-dim x: nothing to reduce
  for (int64_t& d : rd)
    d += 1;
  return op(t, rd, keepdim, false);
}
Tensor sum_op(const Tensor& t, const IntList& dims, bool keepdim, bool all) {
  return all ? tg::sum(t) : tg::sum(t, dims, keepdim);
}
Tensor mean_op(const Tensor& t, const IntList& dims, bool keepdim, bool all) {
  return all ? tg::mean(t) : tg::mean(t, dims, keepdim);
}
}  // namespace

Tensor autograd::ops::sum(const Tensor& x) {
  if (x.defined() && x.is_sparse()) return autograd::impl::sparse_sum(x);
  return fw_linear(reduce_op(x, "sum", "SumBackward", ReduceBackward::Sum, {}, false, [&] { return raw::sum(x); }), x,
                   [&](const Tensor& t) { return reduce_tangent(t, x, {}, false, sum_op); });
}
Tensor autograd::ops::sum(const Tensor& x, const IntList& dims, bool keepdim) {
  return fw_linear(reduce_op(x, "sum", "SumBackward", ReduceBackward::Sum, dims, keepdim,
                             [&] { return raw::sum(x, dims, keepdim); }),
                   x, [&](const Tensor& t) { return reduce_tangent(t, x, dims, keepdim, sum_op); });
}
Tensor autograd::ops::mean(const Tensor& x) {
  return fw_linear(reduce_op(x, "mean", "MeanBackward", ReduceBackward::Mean, {}, false, [&] { return raw::mean(x); }),
                   x, [&](const Tensor& t) { return reduce_tangent(t, x, {}, false, mean_op); });
}
Tensor autograd::ops::mean(const Tensor& x, const IntList& dims, bool keepdim) {
  return fw_linear(reduce_op(x, "mean", "MeanBackward", ReduceBackward::Mean, dims, keepdim,
                             [&] { return raw::mean(x, dims, keepdim); }),
                   x, [&](const Tensor& t) { return reduce_tangent(t, x, dims, keepdim, mean_op); });
}

namespace {
// amax/amin: the tangent is the mean of x's tangent over the extreme
// elements (ties share it, as the gradient).
template <class F>
Tensor extreme(const Tensor& x, const char* op, const char* name, const IntList& dims, bool keepdim, F&& raw_fn) {
  Tensor out = reduce_op(x, op, name, ReduceBackward::Extreme, dims, keepdim, raw_fn);
  if (fw_any({&x})) {
    const Tensor t = fw_t(x);
    fw_rule(out, [&] {
      IntList rd = reduced_dims(dims, x.dim());
      Tensor mask = raw::to(eq(x, unsqueeze_reduced(out.detach(), rd, keepdim)), x.dtype());
      if (rd.empty()) return mul(t, mask);  // 0-dim x
      IntList td = rd;                      // the tangent's dims (past a batch dim)
      for (int64_t& d : td)
        d = fw_dim(d, x.dim());
      return div(sum(mul(t, mask), td, keepdim), raw::sum(mask, rd, keepdim));
    });
  }
  return out;
}
}  // namespace

Tensor autograd::ops::amax(const Tensor& x) {
  return extreme(x, "amax", "AmaxBackward", {}, false, [&] { return raw::amax(x); });
}
Tensor autograd::ops::amax(const Tensor& x, const IntList& dims, bool keepdim) {
  return extreme(x, "amax", "AmaxBackward", dims, keepdim, [&] { return raw::amax(x, dims, keepdim); });
}
Tensor autograd::ops::amin(const Tensor& x) {
  return extreme(x, "amin", "AminBackward", {}, false, [&] { return raw::amin(x); });
}
Tensor autograd::ops::amin(const Tensor& x, const IntList& dims, bool keepdim) {
  return extreme(x, "amin", "AminBackward", dims, keepdim, [&] { return raw::amin(x, dims, keepdim); });
}

namespace {
// cumsum is linear: its gradient is the reverse cumulative sum of g (flip,
// cumsum, flip, each differentiable again, so every order follows).
class CumsumBackward final : public OpNode {
 public:
  explicit CumsumBackward(int64_t dim) : OpNode("cumsum", "CumsumBackward"), dim_(dim) {}
  variable_list apply(variable_list&& grads) override {
    variable_list out(1);
    if (!should_compute_output(0)) return out;
    const Tensor& g = grads[0];
    out[0] = g.dim() == 0 ? g : tg::flip(tg::cumsum(tg::flip(g, {dim_}), dim_), {dim_});
    return out;
  }

 private:
  int64_t dim_;
};
}  // namespace

// The tangent (every Taylor coefficient: the batch dim) is the cumsum of x's.
Tensor autograd::ops::cumsum(const Tensor& x, int64_t dim) {
  Tensor out = run_raw([&] { return raw::cumsum(x, dim); });  // checks dim
  const int64_t d = x.dim() == 0 ? 0 : dim < 0 ? dim + x.dim() : dim;
  if (should_record({&x})) out = finish(out, make_node<CumsumBackward>({&x}, d));
  return fw_linear(out, x,
                   [&](const Tensor& t) { return x.dim() == 0 ? t.clone() : tg::cumsum(t, fw_dim(d, x.dim())); });
}

}  // namespace tg
