// Differentiable views and conversions (Tensor methods), and the in-place
// methods' autograd check.
#include <algorithm>
#include <cstring>
#include <functional>
#include <string>

#include <tapegrad/tensor/error.h>

#include "autograd/ops/ops.h"
#include "autograd/ops/record.h"
#include "autograd/kernels/kernels.h"
#include "tensor/op_util.h"

namespace tg {

using autograd::variable_list;
using namespace autograd::ops_detail;

namespace {

using GradFn = std::function<Tensor(const Tensor& g)>;

// A view's backward maps the gradient of the view back to the base's shape
// with differentiable ops (captured sizes/dims only; no saved tensors).
class ViewBackward final : public OpNode {
 public:
  ViewBackward(const char* op, const char* name, GradFn fn) : OpNode(op, name), fn_(std::move(fn)) {}
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
// In a dual level a view (the output shares self's memory) records its base,
// so that an in-place op on it reaches the base's tangent (PyTorch's
// semantics; forward_ad.cpp).
template <class F, class G>
Tensor view_op(const Tensor& self, const char* op, const char* name, F&& raw_fn, G&& make_grad_fn) {
  Tensor out = run_raw(raw_fn);
  if (should_record({&self})) {
    if (out.is_same(self)) out = raw::detach(out);
    finish(out, make_node<ViewBackward>({&self}, op, name, make_grad_fn()));
  }
  if (autograd::forward_ad::is_active()) autograd::impl::fw_track_alias(out, self, /*shares_tangent=*/true);
  return out;
}

// zeros(sizes) with g written into the slice [start:end:step] of `dim`: the
// backward of slice/narrow/select; its own backward slices again.
Tensor slice_backward(const Tensor& g, const IntList& sizes, int64_t dim, int64_t start, int64_t end, int64_t step) {
  auto raw_fn = [&] {
    // One pass where the device has it (a kernel node fewer), else zeros
    // and a strided copy.
    const auto embed = autograd::kernels::derivative_kernels(g.device()).embed;
    Tensor z = embed ? empty(sizes, g.options()) : zeros(sizes, g.options());
    if (embed && embed(z, g, dim, start, step)) return z;
    if (embed) raw::zero_(z);
    Tensor part = raw::slice(z, dim, start, end, step);
    raw::copy_(part, g);
    return z;
  };
  Tensor out =
      !should_record({&g})
          ? run_raw(raw_fn)
          : finish(run_raw(raw_fn),
                   make_node<ViewBackward>({&g}, "slice_backward", "SliceBackwardBackward",
                                           GradFn([=](const Tensor& gg) { return gg.slice(dim, start, end, step); })));
  // Linear in g (forward over reverse through select/slice/narrow).
  return fw_linear(out, g, [&](const Tensor& t) {
    return slice_backward(t, fw_shape(sizes), fw_dim(dim, int64_t(sizes.size())), start, end, step);
  });
}

}  // namespace

// ---- views -------------------------------------------------------------------------

// The tangent of a view that only changes the shape: `op` applied to it
// (batched: reshaped to [k] + out's shape).
template <class F> Tensor fw_reshaping(const Tensor& out, const Tensor& self, F&& op) {
  return fw_linear(out, self,
                   [&](const Tensor& t) { return fw_batch() > 0 ? t.reshape(fw_shape(out.sizes())) : op(t); });
}

// The backward of a view that only changes the shape.
#define TG_RESHAPE_GRAD                                             \
  [&] {                                                             \
    IntList in = self.sizes();                                      \
    return GradFn([in](const Tensor& g) { return g.reshape(in); }); \
  }

Tensor autograd::ops::view(const Tensor& self, const IntList& s) {
  return fw_reshaping(view_op(
                          self, "view", "ViewBackward", [&] { return raw::view(self, s); }, TG_RESHAPE_GRAD),
                      self, [&](const Tensor& t) { return t.view(s); });
}
Tensor autograd::ops::reshape(const Tensor& self, const IntList& s) {
  return fw_reshaping(view_op(
                          self, "reshape", "ReshapeBackward", [&] { return raw::reshape(self, s); }, TG_RESHAPE_GRAD),
                      self, [&](const Tensor& t) { return t.reshape(s); });
}
Tensor autograd::ops::flatten(const Tensor& self, int64_t start, int64_t end) {
  return fw_reshaping(
      view_op(
          self, "flatten", "FlattenBackward", [&] { return raw::flatten(self, start, end); }, TG_RESHAPE_GRAD),
      self, [&](const Tensor& t) { return t.flatten(start, end); });
}
Tensor autograd::ops::squeeze(const Tensor& self) {
  return fw_reshaping(view_op(
                          self, "squeeze", "SqueezeBackward", [&] { return raw::squeeze(self); }, TG_RESHAPE_GRAD),
                      self, [&](const Tensor& t) { return t.squeeze(); });
}
Tensor autograd::ops::squeeze(const Tensor& self, int64_t d) {
  return fw_reshaping(view_op(
                          self, "squeeze", "SqueezeBackward", [&] { return raw::squeeze(self, d); }, TG_RESHAPE_GRAD),
                      self, [&](const Tensor& t) { return t.squeeze(d); });
}
#undef TG_RESHAPE_GRAD

Tensor autograd::ops::unsqueeze(const Tensor& self, int64_t d) {
  return fw_reshaping(view_op(
                          self, "unsqueeze", "UnsqueezeBackward", [&] { return raw::unsqueeze(self, d); },
                          [&] {
                            int64_t w = d < 0 ? d + self.dim() + 1 : d;
                            return GradFn([w](const Tensor& g) { return g.squeeze(w); });
                          }),
                      self, [&](const Tensor& t) { return t.unsqueeze(d); });
}
Tensor autograd::ops::transpose(const Tensor& self, int64_t d0, int64_t d1) {
  return fw_linear(view_op(
                       self, "transpose", "TransposeBackward", [&] { return raw::transpose(self, d0, d1); },
                       [&] { return GradFn([d0, d1](const Tensor& g) { return g.transpose(d0, d1); }); }),
                   self, [&](const Tensor& t) { return t.transpose(fw_dim(d0, self.dim()), fw_dim(d1, self.dim())); });
}
Tensor autograd::ops::t(const Tensor& self) {
  return fw_linear(view_op(
                       self, "t", "TBackward", [&] { return raw::t(self); },
                       [] { return GradFn([](const Tensor& g) { return g.t(); }); }),
                   self, [&](const Tensor& t) {
                     if (fw_batch() == 0) return t.t();
                     return self.dim() == 2 ? t.transpose(1, 2) : t.view(t.sizes());
                   });
}
Tensor autograd::ops::permute(const Tensor& self, const IntList& dims) {
  return fw_linear(view_op(
                       self, "permute", "PermuteBackward", [&] { return raw::permute(self, dims); },
                       [&] {  // runs after raw::permute validated dims
                         int64_t n = self.dim();
                         IntList inverse(size_t(n), 0);
                         for (int64_t i = 0; i < n; ++i) {
                           int64_t d = dims[size_t(i)] < 0 ? dims[size_t(i)] + n : dims[size_t(i)];
                           inverse[size_t(d)] = i;
                         }
                         return GradFn([inverse](const Tensor& g) { return g.permute(inverse); });
                       }),
                   self, [&](const Tensor& t) {
                     if (fw_batch() == 0) return t.permute(dims);
                     IntList p{0};
                     for (int64_t d : dims)
                       p.push_back(fw_dim(d, self.dim()));
                     return t.permute(p);
                   });
}
Tensor autograd::ops::expand(const Tensor& self, const IntList& target) {
  return fw_linear(view_op(
                       self, "expand", "ExpandBackward", [&] { return raw::expand(self, target); },
                       [&] {
                         IntList in = self.sizes();
                         return GradFn([in](const Tensor& g) { return tg::sum_to(g, in); });
                       }),
                   self, [&](const Tensor& t) {
                     return fw_batch() == 0
                                ? t.expand(target)
                                : fw_pad(t, int64_t(target.size())).expand(fw_shape(raw::expand(self, target).sizes()));
                   });
}
Tensor autograd::ops::expand_as(const Tensor& self, const Tensor& other) { return self.expand(other.sizes()); }

Tensor autograd::ops::select(const Tensor& self, int64_t d, int64_t index) {
  return fw_linear(
      view_op(
          self, "select", "SelectBackward", [&] { return raw::select(self, d, index); },
          [&] {
            IntList in = self.sizes();
            int64_t w = d < 0 ? d + self.dim() : d;
            int64_t i = index < 0 ? index + in[size_t(w)] : index;
            return GradFn([in, w, i](const Tensor& g) { return slice_backward(g.unsqueeze(w), in, w, i, i + 1, 1); });
          }),
      self, [&](const Tensor& t) { return t.select(fw_dim(d, self.dim()), index); });
}
Tensor autograd::ops::slice(const Tensor& self, int64_t d, std::optional<int64_t> start, std::optional<int64_t> end,
                            int64_t step) {
  return fw_linear(
      view_op(
          self, "slice", "SliceBackward", [&] { return raw::slice(self, d, start, end, step); },
          [&] {
            IntList in = self.sizes();
            int64_t w = d < 0 ? d + self.dim() : d;
            int64_t size = in[size_t(w)];
            auto clampi = [size](int64_t i) {
              if (i < 0) i += size;
              return std::min(std::max<int64_t>(i, 0), size);
            };
            int64_t s0 = clampi(start.value_or(0)), e0 = clampi(end.value_or(size));
            return GradFn([in, w, s0, e0, step](const Tensor& g) { return slice_backward(g, in, w, s0, e0, step); });
          }),
      self, [&](const Tensor& t) { return t.slice(fw_dim(d, self.dim()), start, end, step); });
}
Tensor autograd::ops::narrow(const Tensor& self, int64_t d, int64_t start, int64_t length) {
  if (!should_record({&self}) && !fw_any({&self})) {
    Tensor out = raw::narrow(self, d, start, length);
    if (autograd::forward_ad::is_active()) autograd::impl::fw_track_alias(out, self, /*shares_tangent=*/true);
    return out;
  }
  run_raw([&] { return raw::narrow(self, d, start, length); });  // argument checks
  int64_t w = d < 0 ? d + self.dim() : d;
  int64_t s = start < 0 ? start + self.size(w) : start;
  return self.slice(w, s, s + length, 1);
}

Tensor autograd::ops::as_strided(const Tensor& self, const IntList& sz, const IntList& st,
                                 std::optional<int64_t> offset) {
  TG_CHECK(!should_record({&self}), "as_strided: not differentiable in tapegrad (shape ", shape_str(self.sizes()),
           " requires grad); use view/slice/select/expand, or "
           "call it on .detach() or under NoGradGuard");
  return raw::as_strided(self, sz, st, offset);
}

// ---- conversions ---------------------------------------------------------------------

Tensor autograd::ops::detach(const Tensor& self) {
  Tensor out = raw::detach(self);
  // An alias that drops the tangent (PyTorch): tracked only as memory shared.
  if (autograd::forward_ad::is_active()) autograd::impl::fw_track_alias(out, self, /*shares_tangent=*/false);
  return out;
}

Tensor autograd::ops::clone(const Tensor& self) {
  return fw_linear(view_op(
                       self, "clone", "CloneBackward", [&] { return raw::clone(self); },
                       [] { return GradFn([](const Tensor& g) { return g; }); }),
                   self, [&](const Tensor& t) { return t.clone(); });
}

Tensor autograd::ops::pin_memory(const Tensor& self) {
  if (self.defined() && self.is_pinned()) return self;
  return fw_linear(view_op(
                       self, "pin_memory", "PinMemoryBackward", [&] { return raw::pin_memory(self); },
                       [] { return GradFn([](const Tensor& g) { return g; }); }),
                   self, [](const Tensor& t) { return t.pin_memory(); });
}

Tensor autograd::ops::contiguous(const Tensor& self) { return self.is_contiguous() ? self : self.clone(); }

Tensor autograd::ops::to(const Tensor& self, ScalarType t) {
  if (self.defined() && t == self.dtype()) return self;
  Tensor out = view_op(
      self, "to", "ToCopyBackward", [&] { return raw::to(self, t); },
      [&] {
        ScalarType in = self.dtype();
        return GradFn([in](const Tensor& g) { return g.to(in); });
      });
  return fw_linear(out, self, [&](const Tensor& tan) { return tan.to(t); });
}
Tensor autograd::ops::to(const Tensor& self, Device d, bool non_blocking) {
  if (self.defined() && d == self.device()) return self;
  return fw_linear(view_op(
                       self, "to", "ToCopyBackward", [&] { return raw::to(self, d, non_blocking); },
                       [&] {
                         Device in = self.device();
                         return GradFn([in](const Tensor& g) { return g.to(in); });
                       }),
                   self, [&](const Tensor& t) { return t.to(d, non_blocking); });
}
Tensor autograd::ops::to(const Tensor& self, Device d, ScalarType t) { return self.to(d).to(t); }

// ---- complex views and parts -------------------------------------------------------
// A complex tensor's gradient is dL/dRe + i dL/dIm (docs/AUTOGRAD.md
// "Conjugation"), so the views between the two layouts map gradients by the
// same views, and the parts' gradients enter as real or imaginary parts.
Tensor autograd::ops::view_as_real(const Tensor& self) {
  return fw_linear(view_op(
                       self, "view_as_real", "ViewAsRealBackward", [&] { return raw::view_as_real(self); },
                       [] { return GradFn([](const Tensor& g) { return tg::view_as_complex(g.contiguous()); }); }),
                   self, [](const Tensor& t) { return tg::view_as_real(t); });
}
Tensor autograd::ops::view_as_complex(const Tensor& self) {
  return fw_linear(view_op(
                       self, "view_as_complex", "ViewAsComplexBackward", [&] { return raw::view_as_complex(self); },
                       [] { return GradFn([](const Tensor& g) { return tg::view_as_real(g); }); }),
                   self, [](const Tensor& t) { return tg::view_as_complex(t.contiguous()); });
}
Tensor autograd::ops::real(const Tensor& self) {
  if (!self.defined() || !is_complex(self.dtype())) return raw::real(self);  // self itself
  const ScalarType ct = self.dtype();
  return fw_linear(view_op(
                       self, "real", "RealBackward", [&] { return raw::real(self); },
                       [ct] { return GradFn([ct](const Tensor& g) { return g.to(ct); }); }),
                   self, [](const Tensor& t) { return tg::real(t); });
}
Tensor autograd::ops::imag(const Tensor& self) {
  return fw_linear(view_op(
                       self, "imag", "ImagBackward", [&] { return raw::imag(self); },
                       [] { return GradFn([](const Tensor& g) { return tg::complex_from(zeros_like(g), g); }); }),
                   self, [](const Tensor& t) { return tg::imag(t); });
}
// Not a view (conj is eager), so no alias is tracked.
Tensor autograd::ops::conj(const Tensor& self) {
  if (!self.defined() || !is_complex(self.dtype())) return raw::conj(self);  // self itself
  Tensor out = run_raw([&] { return raw::conj(self); });
  if (should_record({&self}))
    out = finish(out, make_node<ViewBackward>({&self}, "conj", "ConjBackward",
                                              GradFn([](const Tensor& g) { return tg::conj(g); })));
  return fw_linear(out, self, [](const Tensor& t) { return tg::conj(t); });
}

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
  return (self.defined() && self.requires_grad()) || (other && other->defined() && other->requires_grad());
}

void check_rebase(const Tensor& self, const char* op) {
  TG_CHECK(!(self.requires_grad() && self.is_leaf()), op,
           ": a leaf tensor that "
           "requires grad (shape ",
           shape_str(self.sizes()),
           ") is being used in an "
           "in-place operation; do it under NoGradGuard (as an optimizer step does) "
           "or on .detach()");
  TG_CHECK(self.impl()->storage().use_count() == 1, op,
           ": in-place operation on a "
           "tensor that shares memory with another tensor (a view, or an output "
           "saved for backward), shape ",
           shape_str(self.sizes()),
           ", while grad is "
           "recorded: the other aliases would keep a stale history. Use the "
           "out-of-place op (x = x + y), or clone() first");
}

// Whether a tangent is involved: forward mode pushes self's and other's
// tangents through the same out-of-place op.
bool involves_tangent(const Tensor& self, const Tensor* other) { return fw_any({&self}) || (other && fw_any({other})); }

// self <- result (same shape); when recording, self takes result's history;
// in a dual level, result's tangent (zeros when result has none but self
// had one: the new value does not depend on the old tangent). On a view
// taken in the level the tangent goes into the base's (forward_ad.cpp):
// checked before self is written.
const Tensor& rebase(const Tensor& self, const Tensor& result, bool record, const char* op) {
  Tensor tangent;
  if (autograd::forward_ad::is_active()) {
    tangent = fw_t(result);
    if (!tangent.defined() && fw_t(self).defined()) tangent = fw_zeros(self);
    if (tangent.defined()) autograd::impl::fw_check_inplace(self, op);
  }
  {
    autograd::AutoGradMode no_grad(false);
    autograd::forward_ad::detail::Suspend no_tangents;
    if (self.is_sparse()) {
      // A sparse self keeps its handle and takes the result's parts (as
      // sparse add_ does); copies, so that nothing the graph saved aliases it.
      TG_CHECK(result.is_sparse(), op, ": the result of the op on a sparse COO tensor is dense (",
               shape_str(result.sizes()), "); use the out-of-place op, which gives a dense tensor");
      Tensor c = raw::clone(result);
      self.impl()->set_sparse_parts(c.impl()->sparse_parts());
      self.bump_version();
    } else {
      raw::copy_(self, result);
    }
  }
  if (record) {
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
  }
  if (tangent.defined()) autograd::impl::set_fw_grad_inplace(self, tangent);
  return self;
}

// The in-place op through its out-of-place form, when grad is recorded or a
// tangent is pushed; `other` is the tensor operand (nullptr: a scalar).
// The raw in-place ops' dtype rule (tensor/elementwise.cpp's
// inplace_binary): the result must be castable to self's dtype, so no
// complex result into a real self (its imaginary parts would be dropped)
// and no floating result into an integer one.
template <class F> const Tensor& inplace_op(const Tensor& self, const Tensor* other, const char* op, F&& out_of_place) {
  const bool record = involves_grad(self, other);
  if (record) check_rebase(self, op);
  Tensor result;
  try {
    result = out_of_place(self.clone());
  } catch (const Error& e) {
    // The out-of-place op's refusal names the in-place op the user called
    // ("add: ..." from add_ reads "add_: ...").
    const std::string msg = e.what(), base(op, std::strlen(op) - 1);
    if (msg.compare(0, base.size() + 1, base + ":") == 0) throw Error(op + msg.substr(base.size()));
    throw;
  }
  const ScalarType rt = result.dtype(), st = self.dtype();
  TG_CHECK(tg::detail::castable_in_place(rt, st), op, ": result type ", rt,
           " can't be cast to the desired output type ", st);
  // A promoted result is cast back to self's dtype as a recorded op, so that
  // self's tangent and gradient keep its dtype (as the raw op's values do).
  if (rt != st) result = result.to(st);
  return rebase(self, result, record, op);
}

}  // namespace

#define TG_INPLACE(name, raw_call, other, out_of_place)                               \
  if (!involves_grad(self, other) && !involves_tangent(self, other)) return raw_call; \
  return inplace_op(self, other, #name, [&](const Tensor& s) { return out_of_place; });

const Tensor& autograd::ops::add_(const Tensor& self, const Tensor& o, Scalar alpha) {
  TG_INPLACE(add_, raw::add_(self, o, alpha), &o, tg::add(s, o, alpha))
}
const Tensor& autograd::ops::add_(const Tensor& self, Scalar v) {
  TG_INPLACE(add_, raw::add_(self, v), nullptr, tg::add(s, v))
}
const Tensor& autograd::ops::sub_(const Tensor& self, const Tensor& o, Scalar alpha) {
  TG_INPLACE(sub_, raw::sub_(self, o, alpha), &o, tg::sub(s, o, alpha))
}
const Tensor& autograd::ops::sub_(const Tensor& self, Scalar v) {
  TG_INPLACE(sub_, raw::sub_(self, v), nullptr, tg::sub(s, v))
}
const Tensor& autograd::ops::mul_(const Tensor& self, const Tensor& o) {
  TG_INPLACE(mul_, raw::mul_(self, o), &o, tg::mul(s, o))
}
const Tensor& autograd::ops::mul_(const Tensor& self, Scalar v) {
  TG_INPLACE(mul_, raw::mul_(self, v), nullptr, tg::mul(s, v))
}
const Tensor& autograd::ops::div_(const Tensor& self, const Tensor& o) {
  TG_INPLACE(div_, raw::div_(self, o), &o, tg::div(s, o))
}
const Tensor& autograd::ops::div_(const Tensor& self, Scalar v) {
  TG_INPLACE(div_, raw::div_(self, v), nullptr, tg::div(s, v))
}
#undef TG_INPLACE
const Tensor& autograd::ops::zero_(const Tensor& self) { return fill_(self, 0); }
const Tensor& autograd::ops::fill_(const Tensor& self, Scalar v) {
  const bool record = involves_grad(self, nullptr);
  if (!record && !involves_tangent(self, nullptr)) return raw::fill_(self, v);
  if (record) check_rebase(self, "fill_");
  const bool had_tangent = autograd::impl::has_fw_grad(self);
  if (had_tangent) autograd::impl::fw_check_inplace(self, "fill_");
  raw::fill_(self, v);
  if (record)
    if (auto* m = autograd::impl::meta(self)) m->grad_fn = nullptr;  // a constant now
  if (had_tangent) autograd::impl::set_fw_grad_inplace(self, fw_zeros(self));
  return self;
}
const Tensor& autograd::ops::copy_(const Tensor& self, const Tensor& src, bool non_blocking) {
  const bool record = involves_grad(self, &src);
  if (!record && !involves_tangent(self, &src)) return raw::copy_(self, src, non_blocking);
  if (record) check_rebase(self, "copy_");
  TG_CHECK(src.device() == self.device(), "copy_: expected src on ", self.device(), ", got ", src.device());
  return rebase(self, src.to(self.dtype()).expand(self.sizes()).clone(), record, "copy_");
}

}  // namespace tg
