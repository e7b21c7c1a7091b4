// Differentiable cat, stack, index_select, gather, scatter_add.
#include <tapegrad/tensor/error.h>

#include "autograd/ops/ops.h"
#include "autograd/ops/record.h"

namespace tg {

using autograd::variable_list;
using namespace autograd::ops_detail;

namespace {

int64_t wrap(int64_t dim, int64_t ndim) { return dim < 0 ? dim + ndim : dim; }

// cat: input i's gradient is the slice of g it came from (stack: select).
class CatBackward final : public OpNode {
 public:
  CatBackward(bool stack, int64_t dim, IntList lengths)
      : OpNode(stack ? "stack" : "cat", stack ? "StackBackward" : "CatBackward"),
        stack_(stack),
        dim_(dim),
        lengths_(std::move(lengths)) {}
  variable_list apply(variable_list&& grads) override {
    variable_list out(lengths_.size());
    const Tensor& g = grads[0];
    int64_t off = 0;
    for (size_t i = 0; i < lengths_.size(); ++i) {
      if (should_compute_output(i)) out[i] = stack_ ? g.select(dim_, int64_t(i)) : g.narrow(dim_, off, lengths_[i]);
      off += lengths_[i];
    }
    return out;
  }

 private:
  bool stack_;
  int64_t dim_;
  IntList lengths_;
};

// index_select / gather: scatter-add g into zeros of the input's shape.
// scatter_add: self's gradient is g, src's is gather(g, dim, index).
class IndexBackward final : public OpNode {
 public:
  enum Kind { IndexSelect, Gather, ScatterAdd };
  IndexBackward(Kind kind, int64_t dim, Tensor index, IntList sizes)
      : OpNode(kind == IndexSelect ? "index_select"
               : kind == Gather    ? "gather"
                                   : "scatter_add",
               kind == IndexSelect ? "IndexSelectBackward"
               : kind == Gather    ? "GatherBackward"
                                   : "ScatterAddBackward"),
        kind_(kind),
        dim_(dim),
        index_(index, false),
        sizes_(std::move(sizes)) {}
  variable_list apply(variable_list&& grads) override {
    const Tensor& g = grads[0];
    // Version-checked: an index changed in place after the forward would
    // send the gradient to other elements, silently.
    const Tensor index = index_.unpack(this, "index");
    if (kind_ == ScatterAdd) {
      variable_list out(2);
      if (should_compute_output(0)) out[0] = g;
      if (should_compute_output(1)) out[1] = gather(g, dim_, index);
      return out;
    }
    variable_list out(1);
    if (!should_compute_output(0)) return out;
    Tensor zero = zeros(sizes_, g.options());
    if (kind_ == Gather) {
      out[0] = scatter_add(zero, dim_, index, g);
    } else if (g.dim() == 0) {
      out[0] = add(zero, g);  // 0-dim input: index holds the single index 0
    } else {
      IntList shape(size_t(g.dim()), 1);
      shape[size_t(dim_)] = index.numel();
      out[0] = scatter_add(zero, dim_, index.reshape(shape).expand(g.sizes()), g);
    }
    return out;
  }
  void release_variables() override { index_.release(); }

 private:
  Kind kind_;
  int64_t dim_;
  autograd::SavedVariable index_;  // Int64, not differentiable
  IntList sizes_;
};

}  // namespace

namespace {

// The inputs' tangents (zeros where one has none), read before a rule runs.
std::vector<Tensor> tangents_or_zeros(const std::vector<Tensor>& ts) {
  std::vector<Tensor> out;
  out.reserve(ts.size());
  for (const Tensor& t : ts) {
    Tensor tan = fw_t(t);
    out.push_back(tan.defined() ? tan : fw_zeros(t));
  }
  return out;
}

// gather/scatter_add's index for batched tangents: the same for every
// direction.
Tensor batched_index(const Tensor& index) {
  return fw_batch() == 0 ? index : index.unsqueeze(0).expand(fw_shape(index.sizes()));
}

}  // namespace

// cat and stack are linear: the tangent is the cat (stack) of the tangents.
Tensor autograd::ops::cat(const std::vector<Tensor>& ts, int64_t dim) {
  const bool fw = fw_any(ts);
  if (!should_record(ts) && !fw) return raw::cat(ts, dim);
  Tensor out = run_raw([&] { return raw::cat(ts, dim); });
  if (should_record(ts)) {
    int64_t d = wrap(dim, out.dim());
    IntList lengths;
    for (const Tensor& t : ts)
      lengths.push_back(t.dim() == 0 ? 0 : t.size(d));
    out = finish(out, make_node<CatBackward>(ts, false, d, std::move(lengths)));
  }
  if (fw) {
    std::vector<Tensor> tans = tangents_or_zeros(ts);
    fw_rule(out, [&] { return tg::cat(tans, fw_dim(dim, out.dim())); });
  }
  return out;
}

Tensor autograd::ops::stack(const std::vector<Tensor>& ts, int64_t dim) {
  const bool fw = fw_any(ts);
  if (!should_record(ts) && !fw) return raw::stack(ts, dim);
  Tensor out = run_raw([&] { return raw::stack(ts, dim); });
  if (should_record(ts))
    out = finish(out, make_node<CatBackward>(ts, true, wrap(dim, out.dim()), IntList(ts.size(), 1)));
  if (fw) {
    std::vector<Tensor> tans = tangents_or_zeros(ts);
    fw_rule(out, [&] { return tg::stack(tans, fw_dim(dim, out.dim())); });
  }
  return out;
}

namespace {

// index_select and gather are linear in x: the tangent is the same selection
// of x's tangent (`tangent(t)`); `raw_op()` is the raw selection, recorded as
// an IndexBackward of `kind`.
template <class Raw, class Tangent>
Tensor selection(const Tensor& x, int64_t dim, const Tensor& index, IndexBackward::Kind kind, Raw&& raw_op,
                 Tangent&& tangent) {
  if (!should_record({&x}) && !fw_any({&x})) return raw_op();
  Tensor out = run_raw(raw_op);
  if (should_record({&x}))
    out = finish(out, make_node<IndexBackward>({&x}, kind, x.dim() == 0 ? 0 : wrap(dim, x.dim()), index, x.sizes()));
  return fw_linear(out, x, tangent);
}

}  // namespace

Tensor autograd::ops::index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  return selection(
      x, dim, index, IndexBackward::IndexSelect, [&] { return raw::index_select(x, dim, index); },
      [&](const Tensor& t) {
        if (x.dim() == 0) return t.clone();  // the one element
        return tg::index_select(t, fw_dim(dim, x.dim()), index);
      });
}

Tensor autograd::ops::gather(const Tensor& x, int64_t dim, const Tensor& index) {
  return selection(
      x, dim, index, IndexBackward::Gather, [&] { return raw::gather(x, dim, index); },
      [&](const Tensor& t) { return tg::gather(t, fw_dim(dim, x.dim()), batched_index(index)); });
}

// scatter_add is linear in (x, src) jointly.
Tensor autograd::ops::scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  const bool fw = fw_any({&x, &src});
  if (!should_record({&x, &src}) && !fw) return raw::scatter_add(x, dim, index, src);
  Tensor out = run_raw([&] { return raw::scatter_add(x, dim, index, src); });
  if (should_record({&x, &src}))
    out = finish(out, make_node<IndexBackward>({&x, &src}, IndexBackward::ScatterAdd,
                                               x.dim() == 0 ? 0 : wrap(dim, x.dim()), index, x.sizes()));
  if (fw) {
    std::vector<Tensor> tans = tangents_or_zeros({x, src});
    fw_rule(out, [&] { return tg::scatter_add(tans[0], fw_dim(dim, x.dim()), batched_index(index), tans[1]); });
  }
  return out;
}

}  // namespace tg
