// The differentiable forms of the composite ops (tensor/composite.h): the
// same formula through the public ops, so each part records its own node
// and the backward (to any order) is that of the parts. Without anything to
// record and no tangent to push they run the raw form (with a tangent the
// parts push it: a composite's tangent rule is that of its parts).
#include "autograd/ops/ops.h"
#include "autograd/ops/record.h"
#include "tensor/composite.h"

namespace tg {

using autograd::ops_detail::fw_any;
using autograd::ops_detail::should_record;
using detail::PublicOps;

Tensor autograd::ops::max(const Tensor& self) { return tg::amax(self); }
Tensor autograd::ops::min(const Tensor& self) { return tg::amin(self); }
TensorPair autograd::ops::max(const Tensor& self, int64_t dim, bool keepdim) {
  if (!should_record({&self}) && !fw_any({&self})) return raw::max(self, dim, keepdim);
  return tg::detail::extreme_dim<PublicOps>(self, dim, keepdim, true, "max");
}
TensorPair autograd::ops::min(const Tensor& self, int64_t dim, bool keepdim) {
  if (!should_record({&self}) && !fw_any({&self})) return raw::min(self, dim, keepdim);
  return tg::detail::extreme_dim<PublicOps>(self, dim, keepdim, false, "min");
}
Tensor autograd::ops::logsumexp(const Tensor& self, const IntList& dims, bool keepdim) {
  if (!should_record({&self}) && !fw_any({&self})) return raw::logsumexp(self, dims, keepdim);
  return tg::detail::logsumexp<PublicOps>(self, dims, keepdim);
}
Tensor autograd::ops::softmax(const Tensor& self, int64_t dim) {
  if (!should_record({&self}) && !fw_any({&self})) return raw::softmax(self, dim);
  return tg::detail::softmax<PublicOps>(self, dim);
}
Tensor autograd::ops::log_softmax(const Tensor& self, int64_t dim) {
  if (!should_record({&self}) && !fw_any({&self})) return raw::log_softmax(self, dim);
  return tg::detail::log_softmax<PublicOps>(self, dim);
}
Tensor autograd::ops::norm(const Tensor& self, double p, const IntList& dims, bool keepdim) {
  if (!should_record({&self}) && !fw_any({&self})) return raw::norm(self, p, dims, keepdim);
  return tg::detail::norm<PublicOps>(self, p, dims, keepdim);
}
Tensor autograd::ops::sum_to(const Tensor& self, const IntList& shape) {
  if (!should_record({&self}) && !fw_any({&self})) return raw::sum_to(self, shape);
  return tg::detail::sum_to<PublicOps>(self, shape);
}
Tensor autograd::ops::dot(const Tensor& self, const Tensor& other) {
  if (!should_record({&self, &other}) && !fw_any({&self, &other})) return raw::dot(self, other);
  return tg::detail::dot<PublicOps>(self, other);
}

// ---- the everyday surface (tensor/composite_ops.def): each runs raw when
// nothing records and no forward-mode level is open, else its formula
// through the public ops (in a level even without a tangent: the views
// some of them return, diagonal, split, chunk, meshgrid, must be the level's
// tracked views for an in-place op on them to reach their base's tangent).
#define TG_COMPOSITE_F(ret, name, params, args, inputs, formula)                                              \
  ret autograd::ops::name params {                                                                            \
    if (!should_record inputs && !autograd::forward_ad::is_active() && !fw_any inputs) return raw::name args; \
    using O = PublicOps;                                                                                      \
    return tg::detail::as_op(#name, [&] { return formula; });                                                 \
  }
#define TG_COMPOSITE(ret, name, params, args, inputs) \
  TG_COMPOSITE_F(ret, name, params, args, inputs, tg::detail::name<O> args)
#include "tensor/composite_ops.def"
#undef TG_COMPOSITE
#undef TG_COMPOSITE_F

}  // namespace tg
