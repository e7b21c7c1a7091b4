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

Tensor Tensor::pin_memory() const {
  if (defined() && is_pinned()) return *this;
  return view_op(*this, "pin_memory", "PinMemoryBackward", [&] { return raw::pin_memory(*this); },
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

// ---- in place ----------------------------------------------------------------------
//
// Under grad mode an in-place op that involves a tensor requiring grad is
// recorded by computing the out-of-place result from a copy of self (so the
// node's saved tensors are not the ones being overwritten), writing it into
// self, and moving the result's history onto self ("rebase"). That is exact
// only when no other tensor shares self's memory: for a view (or a tensor a
// node saved as its output) the other aliases would keep a stale history, so
// that case is an error. A leaf that requires grad cannot be modified.

namespace {

bool involves_grad(const Tensor& self, const Tensor* other) {
  if (!autograd::is_grad_enabled()) return false;
  return (self.defined() && self.requires_grad()) ||
         (other && other->defined() && other->requires_grad());
}

void check_rebase(const Tensor& self, const char* op) {
  TG_CHECK(!(self.requires_grad() && self.is_leaf()), op, ": a leaf tensor that "
           "requires grad (shape ", shape_str(self.sizes()), ") is being used in an "
           "in-place operation; do it under NoGradGuard (as an optimizer step does) "
           "or on .detach()");
  TG_CHECK(self.impl()->storage().use_count() == 1, op, ": in-place operation on a "
           "tensor that shares memory with another tensor (a view, or an output "
           "saved for backward), shape ", shape_str(self.sizes()), ", while grad is "
           "recorded: the other aliases would keep a stale history. Use the "
           "out-of-place op (x = x + y), or clone() first");
}

// self <- result (same shape), and self takes result's history.
Tensor& rebase(Tensor& self, const Tensor& result) {
  {
    autograd::AutoGradMode no_grad(false);
    raw::copy_(self, result);
  }
  auto* m = autograd::impl::meta(result);
  if (m && m->grad_fn) {
    autograd::AutogradMeta& sm = autograd::impl::materialize_meta(self);
    sm.grad_fn = m->grad_fn;
    sm.output_nr = m->output_nr;
    sm.requires_grad = false;
  } else if (auto* sm = autograd::impl::meta(self)) {
    sm->grad_fn = nullptr;  // the new value does not depend on anything that requires grad
    sm->output_nr = 0;
  }
  return self;
}

template <class F>
Tensor& inplace_op(Tensor& self, const char* op, F&& out_of_place) {
  check_rebase(self, op);
  return rebase(self, out_of_place(self.clone()));
}

}  // namespace

Tensor& Tensor::add_(const Tensor& o, Scalar alpha) {
  if (!involves_grad(*this, &o)) return raw::add_(*this, o, alpha);
  return inplace_op(*this, "add_", [&](const Tensor& s) { return tg::add(s, o, alpha); });
}
Tensor& Tensor::add_(Scalar v) {
  if (!involves_grad(*this, nullptr)) return raw::add_(*this, v);
  return inplace_op(*this, "add_", [&](const Tensor& s) { return tg::add(s, v); });
}
Tensor& Tensor::sub_(const Tensor& o, Scalar alpha) {
  if (!involves_grad(*this, &o)) return raw::sub_(*this, o, alpha);
  return inplace_op(*this, "sub_", [&](const Tensor& s) { return tg::sub(s, o, alpha); });
}
Tensor& Tensor::sub_(Scalar v) {
  if (!involves_grad(*this, nullptr)) return raw::sub_(*this, v);
  return inplace_op(*this, "sub_", [&](const Tensor& s) { return tg::sub(s, v); });
}
Tensor& Tensor::mul_(const Tensor& o) {
  if (!involves_grad(*this, &o)) return raw::mul_(*this, o);
  return inplace_op(*this, "mul_", [&](const Tensor& s) { return tg::mul(s, o); });
}
Tensor& Tensor::mul_(Scalar v) {
  if (!involves_grad(*this, nullptr)) return raw::mul_(*this, v);
  return inplace_op(*this, "mul_", [&](const Tensor& s) { return tg::mul(s, v); });
}
Tensor& Tensor::div_(const Tensor& o) {
  if (!involves_grad(*this, &o)) return raw::div_(*this, o);
  return inplace_op(*this, "div_", [&](const Tensor& s) { return tg::div(s, o); });
}
Tensor& Tensor::div_(Scalar v) {
  if (!involves_grad(*this, nullptr)) return raw::div_(*this, v);
  return inplace_op(*this, "div_", [&](const Tensor& s) { return tg::div(s, v); });
}
Tensor& Tensor::zero_() { return fill_(0); }
Tensor& Tensor::fill_(Scalar v) {
  if (!involves_grad(*this, nullptr)) return raw::fill_(*this, v);
  check_rebase(*this, "fill_");
  raw::fill_(*this, v);
  if (auto* m = autograd::impl::meta(*this)) m->grad_fn = nullptr;  // a constant now
  return *this;
}
Tensor& Tensor::copy_(const Tensor& src, bool non_blocking) {
  if (!involves_grad(*this, &src)) return raw::copy_(*this, src, non_blocking);
  check_rebase(*this, "copy_");
  TG_CHECK(src.device() == device(), "copy_: expected src on ", device(), ", got ",
           src.device());
  ScalarType dt = dtype();
  IntList shape = sizes();
  return rebase(*this, src.to(dt).expand(shape).clone());
}

}  // namespace tg
