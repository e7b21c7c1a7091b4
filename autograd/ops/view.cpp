// Differentiable views and conversions (Tensor methods), and the in-place
// methods' autograd check.
#include <algorithm>
#include <functional>

#include <tapegrad/tensor/error.h>

#include "record.h"

namespace tg {

using autograd::variable_list;
using namespace autograd::ops_detail;

namespace {

using GradFn = std::function<Tensor(const Tensor& g)>;

// A view's backward maps the gradient of the view back to the base's shape
// with differentiable ops (captured sizes/dims only; no saved tensors).
class ViewBackward final : public OpNode {
 public:
  ViewBackward(const char* op, const char* name, GradFn fn)
      : OpNode(op, name), fn_(std::move(fn)) {}
  variable_list apply(variable_list&& grads) override {
    variable_list out(1);
    if (should_compute_output(0)) out[0] = fn_(grads[0]);
    return out;
  }

 private:
  GradFn fn_;
};

// Runs a raw view/conversion and records the node made by `make_grad_fn`
// (called only when recording). A raw op that returned its input itself (a
// no-op view) gets a fresh alias, so the input's history is never replaced.
template <class F, class G>
Tensor view_op(const Tensor& self, const char* op, const char* name, F&& raw_fn,
               G&& make_grad_fn) {
  if (!should_record({&self})) return raw_fn();
  Tensor out = run_raw(raw_fn);
  if (out.is_same(self)) out = raw::detach(out);
  return finish(out, make_node<ViewBackward>({&self}, op, name, make_grad_fn()));
}

// zeros(sizes) with g written into the slice [start:end:step] of `dim`: the
// backward of slice/narrow/select; its own backward slices again.
Tensor slice_backward(const Tensor& g, const IntList& sizes, int64_t dim, int64_t start,
                      int64_t end, int64_t step) {
  auto raw_fn = [&] {
    Tensor z = zeros(sizes, g.options());
    Tensor part = raw::slice(z, dim, start, end, step);
    raw::copy_(part, g);
    return z;
  };
  if (!should_record({&g})) return raw_fn();
  return finish(run_raw(raw_fn),
                make_node<ViewBackward>({&g}, "slice_backward", "SliceBackwardBackward",
                                        GradFn([=](const Tensor& gg) {
                                          return gg.slice(dim, start, end, step);
                                        })));
}

}  // namespace

// ---- views -------------------------------------------------------------------------

// The backward of a view that only changes the shape.
#define TG_RESHAPE_GRAD [this] { IntList in = sizes(); return GradFn([in](const Tensor& g) { return g.reshape(in); }); }

Tensor Tensor::view(const IntList& s) const {
  return view_op(*this, "view", "ViewBackward", [&] { return raw::view(*this, s); },
                 TG_RESHAPE_GRAD);
}
Tensor Tensor::reshape(const IntList& s) const {
  return view_op(*this, "reshape", "ReshapeBackward", [&] { return raw::reshape(*this, s); },
                 TG_RESHAPE_GRAD);
}
Tensor Tensor::flatten(int64_t start, int64_t end) const {
  return view_op(*this, "flatten", "FlattenBackward",
                 [&] { return raw::flatten(*this, start, end); }, TG_RESHAPE_GRAD);
}
Tensor Tensor::squeeze() const {
  return view_op(*this, "squeeze", "SqueezeBackward", [&] { return raw::squeeze(*this); },
                 TG_RESHAPE_GRAD);
}
Tensor Tensor::squeeze(int64_t d) const {
  return view_op(*this, "squeeze", "SqueezeBackward", [&] { return raw::squeeze(*this, d); },
                 TG_RESHAPE_GRAD);
}
#undef TG_RESHAPE_GRAD

Tensor Tensor::unsqueeze(int64_t d) const {
  return view_op(*this, "unsqueeze", "UnsqueezeBackward",
                 [&] { return raw::unsqueeze(*this, d); },
                 [&] {
                   int64_t w = d < 0 ? d + dim() + 1 : d;
                   return GradFn([w](const Tensor& g) { return g.squeeze(w); });
                 });
}
Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  return view_op(*this, "transpose", "TransposeBackward",
                 [&] { return raw::transpose(*this, d0, d1); }, [&] {
                   return GradFn([d0, d1](const Tensor& g) { return g.transpose(d0, d1); });
                 });
}
Tensor Tensor::t() const {
  return view_op(*this, "t", "TBackward", [&] { return raw::t(*this); },
                 [] { return GradFn([](const Tensor& g) { return g.t(); }); });
}
Tensor Tensor::permute(const IntList& dims) const {
  return view_op(*this, "permute", "PermuteBackward", [&] { return raw::permute(*this, dims); },
                 [&] {  // runs after raw::permute validated dims
                   int64_t n = dim();
                   IntList inverse(size_t(n), 0);
                   for (int64_t i = 0; i < n; ++i) {
                     int64_t d = dims[size_t(i)] < 0 ? dims[size_t(i)] + n : dims[size_t(i)];
                     inverse[size_t(d)] = i;
                   }
                   return GradFn([inverse](const Tensor& g) { return g.permute(inverse); });
                 });
}
Tensor Tensor::expand(const IntList& target) const {
  return view_op(*this, "expand", "ExpandBackward", [&] { return raw::expand(*this, target); },
                 [this] {
                   IntList in = sizes();
                   return GradFn([in](const Tensor& g) { return sum_to(g, in); });
                 });
}
Tensor Tensor::expand_as(const Tensor& other) const { return expand(other.sizes()); }

Tensor Tensor::select(int64_t d, int64_t index) const {
  return view_op(*this, "select", "SelectBackward", [&] { return raw::select(*this, d, index); },
                 [&] {
                   IntList in = sizes();
                   int64_t w = d < 0 ? d + dim() : d;
                   int64_t i = index < 0 ? index + in[size_t(w)] : index;
                   return GradFn([in, w, i](const Tensor& g) {
                     return slice_backward(g.unsqueeze(w), in, w, i, i + 1, 1);
                   });
                 });
}
Tensor Tensor::slice(int64_t d, std::optional<int64_t> start, std::optional<int64_t> end,
                     int64_t step) const {
  return view_op(*this, "slice", "SliceBackward",
                 [&] { return raw::slice(*this, d, start, end, step); },
                 [&] {
                   IntList in = sizes();
                   int64_t w = d < 0 ? d + dim() : d;
                   int64_t size = in[size_t(w)];
                   auto clampi = [size](int64_t i) {
                     if (i < 0) i += size;
                     return std::min(std::max<int64_t>(i, 0), size);
                   };
                   int64_t s0 = clampi(start.value_or(0)), e0 = clampi(end.value_or(size));
                   return GradFn([in, w, s0, e0, step](const Tensor& g) {
                     return slice_backward(g, in, w, s0, e0, step);
                   });
                 });
}
Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  if (!should_record({this})) return raw::narrow(*this, d, start, length);
  run_raw([&] { return raw::narrow(*this, d, start, length); });  // argument checks
  int64_t w = d < 0 ? d + dim() : d;
  int64_t s = start < 0 ? start + size(w) : start;
  return slice(w, s, s + length, 1);
}

Tensor Tensor::as_strided(const IntList& sz, const IntList& st,
                          std::optional<int64_t> offset) const {
  TG_CHECK(!should_record({this}), "as_strided: not differentiable in tapegrad (shape ",
           shape_str(sizes()), " requires grad); use view/slice/select/expand, or "
           "call it on .detach() or under NoGradGuard");
  return raw::as_strided(*this, sz, st, offset);
}

// ---- conversions ---------------------------------------------------------------------

Tensor Tensor::detach() const { return raw::detach(*this); }

Tensor Tensor::clone() const {
  return view_op(*this, "clone", "CloneBackward", [&] { return raw::clone(*this); },
                 [] { return GradFn([](const Tensor& g) { return g; }); });
}

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

Tensor Tensor::to(ScalarType t) const {
  if (defined() && t == dtype()) return *this;
  return view_op(*this, "to", "ToCopyBackward", [&] { return raw::to(*this, t); }, [this] {
    ScalarType in = dtype();
    return GradFn([in](const Tensor& g) { return g.to(in); });
  });
}
Tensor Tensor::to(Device d, bool non_blocking) const {
  if (defined() && d == device()) return *this;
  return view_op(*this, "to", "ToCopyBackward",
                 [&] { return raw::to(*this, d, non_blocking); }, [this] {
                   Device in = device();
                   return GradFn([in](const Tensor& g) { return g.to(in); });
                 });
}
Tensor Tensor::to(Device d, ScalarType t) const { return to(d).to(t); }

// ---- in place ------------------------------------------------------------------------

namespace {
// tapegrad does not record in-place ops: modifying a tensor that is part of
// a graph (or writing a differentiable value into one) would silently lose
// gradients, so it is an error under grad mode.
void check_inplace(const Tensor& self, const Tensor* other, const char* op) {
  if (!autograd::is_grad_enabled()) return;
  bool self_rg = self.defined() && self.requires_grad();
  TG_CHECK(!(self_rg && self.is_leaf()), op, ": a leaf tensor that requires grad "
           "(shape ", shape_str(self.sizes()), ") is being used in an in-place "
           "operation; do it under NoGradGuard (as an optimizer step does) or on "
           ".detach()");
  TG_CHECK(!self_rg && !(other && other->defined() && other->requires_grad()), op,
           ": in-place operations are not recorded by tapegrad's autograd, and "
           "this one involves a tensor that requires grad (self shape ",
           shape_str(self.sizes()), "); use the out-of-place op (x = x + y), or "
           "run it under NoGradGuard");
}
}  // namespace

Tensor& Tensor::add_(const Tensor& o, Scalar alpha) {
  check_inplace(*this, &o, "add_");
  return raw::add_(*this, o, alpha);
}
Tensor& Tensor::add_(Scalar s) {
  check_inplace(*this, nullptr, "add_");
  return raw::add_(*this, s);
}
Tensor& Tensor::sub_(const Tensor& o, Scalar alpha) {
  check_inplace(*this, &o, "sub_");
  return raw::sub_(*this, o, alpha);
}
Tensor& Tensor::sub_(Scalar s) {
  check_inplace(*this, nullptr, "sub_");
  return raw::sub_(*this, s);
}
Tensor& Tensor::mul_(const Tensor& o) {
  check_inplace(*this, &o, "mul_");
  return raw::mul_(*this, o);
}
Tensor& Tensor::mul_(Scalar s) {
  check_inplace(*this, nullptr, "mul_");
  return raw::mul_(*this, s);
}
Tensor& Tensor::div_(const Tensor& o) {
  check_inplace(*this, &o, "div_");
  return raw::div_(*this, o);
}
Tensor& Tensor::div_(Scalar s) {
  check_inplace(*this, nullptr, "div_");
  return raw::div_(*this, s);
}
Tensor& Tensor::zero_() {
  check_inplace(*this, nullptr, "zero_");
  return raw::zero_(*this);
}
Tensor& Tensor::fill_(Scalar s) {
  check_inplace(*this, nullptr, "fill_");
  return raw::fill_(*this, s);
}
Tensor& Tensor::copy_(const Tensor& src, bool non_blocking) {
  check_inplace(*this, &src, "copy_");
  return raw::copy_(*this, src, non_blocking);
}

}  // namespace tg
