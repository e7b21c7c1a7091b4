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
Tensor autograd::ops::cumsum(const Tensor& self, int64_t dim) {
  if (!should_record({&self}) && !fw_any({&self})) return raw::cumsum(self, dim);
  return tg::detail::cumsum<PublicOps>(self, dim);
}

// ---- the everyday surface: each runs raw when nothing records or pushes a
// tangent, else its formula through the public ops.
#define TG_RECORDED(ret, name, params, args, inputs, formula)           \
  ret autograd::ops::name params {                                      \
    if (!should_record inputs && !fw_any inputs) return raw::name args; \
    return tg::detail::as_op(#name, [&] { return formula; });           \
  }
#define TG_COMPOSITE(ret, name, params, args, inputs) \
  TG_RECORDED(ret, name, params, args, inputs, tg::detail::name<PublicOps> args)
TG_COMPOSITE(Tensor, lerp, (const Tensor& self, const Tensor& end, const Tensor& weight), (self, end, weight),
             ({&self, &end, &weight}))
TG_COMPOSITE(Tensor, lerp, (const Tensor& self, const Tensor& end, Scalar weight), (self, end, weight), ({&self, &end}))
TG_COMPOSITE(Tensor, prod, (const Tensor& self), (self), ({&self}))
TG_COMPOSITE(Tensor, prod, (const Tensor& self, int64_t dim, bool keepdim), (self, dim, keepdim), ({&self}))
TG_COMPOSITE(TensorPair, sort, (const Tensor& self, int64_t dim, bool descending), (self, dim, descending), ({&self}))
TG_COMPOSITE(TensorPair, topk, (const Tensor& self, int64_t k, int64_t dim, bool largest, bool sorted),
             (self, k, dim, largest, sorted), ({&self}))
TG_COMPOSITE(Tensor, median, (const Tensor& self), (self), ({&self}))
TG_COMPOSITE(TensorPair, median, (const Tensor& self, int64_t dim, bool keepdim), (self, dim, keepdim), ({&self}))
TG_COMPOSITE(Tensor, outer, (const Tensor& self, const Tensor& other), (self, other), ({&self, &other}))
TG_COMPOSITE(Tensor, cross, (const Tensor& self, const Tensor& other, int64_t dim), (self, other, dim),
             ({&self, &other}))
TG_COMPOSITE(Tensor, einsum, (const std::string& equation, const std::vector<Tensor>& operands), (equation, operands),
             (operands))
TG_COMPOSITE(Tensor, diagonal, (const Tensor& self, int64_t offset, int64_t dim1, int64_t dim2),
             (self, offset, dim1, dim2), ({&self}))
TG_COMPOSITE(Tensor, diag, (const Tensor& self, int64_t diagonal), (self, diagonal), ({&self}))
TG_COMPOSITE(Tensor, diag_embed, (const Tensor& self, int64_t offset, int64_t dim1, int64_t dim2),
             (self, offset, dim1, dim2), ({&self}))
TG_COMPOSITE(Tensor, trace, (const Tensor& self), (self), ({&self}))
TG_COMPOSITE(Tensor, masked_select, (const Tensor& self, const Tensor& mask), (self, mask), ({&self}))
TG_COMPOSITE(std::vector<Tensor>, split, (const Tensor& self, int64_t split_size, int64_t dim), (self, split_size, dim),
             ({&self}))
TG_COMPOSITE(std::vector<Tensor>, chunk, (const Tensor& self, int64_t chunks, int64_t dim), (self, chunks, dim),
             ({&self}))
TG_COMPOSITE(Tensor, repeat, (const Tensor& self, const IntList& repeats), (self, repeats), ({&self}))
TG_COMPOSITE(Tensor, tile, (const Tensor& self, const IntList& reps), (self, reps), ({&self}))
TG_COMPOSITE(Tensor, repeat_interleave, (const Tensor& self, int64_t repeats, std::optional<int64_t> dim),
             (self, repeats, dim), ({&self}))
TG_COMPOSITE(Tensor, repeat_interleave, (const Tensor& self, const Tensor& repeats, std::optional<int64_t> dim),
             (self, repeats, dim), ({&self}))
TG_COMPOSITE(Tensor, flip, (const Tensor& self, const IntList& dims), (self, dims), ({&self}))
TG_COMPOSITE(Tensor, roll, (const Tensor& self, const IntList& shifts, const IntList& dims), (self, shifts, dims),
             ({&self}))
TG_COMPOSITE(std::vector<Tensor>, meshgrid, (const std::vector<Tensor>& tensors, const std::string& indexing),
             (tensors, indexing), (tensors))
TG_RECORDED(std::vector<Tensor>, split, (const Tensor& self, const IntList& sizes, int64_t dim), (self, sizes, dim),
            ({&self}), tg::detail::split_sizes<PublicOps>(self, sizes, dim))
TG_RECORDED(Tensor, clamp_min, (const Tensor& self, Scalar min), (self, min), ({&self}), tg::clamp(self, min))
TG_RECORDED(Tensor, clamp_max, (const Tensor& self, Scalar max), (self, max), ({&self}),
            tg::clamp(self, std::nullopt, max))
TG_RECORDED(Tensor, clamp_min, (const Tensor& self, const Tensor& min), (self, min), ({&self, &min}),
            tg::detail::clamp_bound<PublicOps>(self, min, true, "clamp_min"))
TG_RECORDED(Tensor, clamp_max, (const Tensor& self, const Tensor& max), (self, max), ({&self, &max}),
            tg::detail::clamp_bound<PublicOps>(self, max, false, "clamp_max"))
TG_RECORDED(Tensor, var, (const Tensor& self, const IntList& dims, double correction, bool keepdim),
            (self, dims, correction, keepdim), ({&self}),
            tg::detail::var<PublicOps>(self, dims, correction, keepdim, "var"))
TG_RECORDED(Tensor, std, (const Tensor& self, const IntList& dims, double correction, bool keepdim),
            (self, dims, correction, keepdim), ({&self}),
            tg::sqrt(tg::detail::var<PublicOps>(self, dims, correction, keepdim, "std")))
TG_RECORDED(TensorPair, kthvalue, (const Tensor& self, int64_t k, int64_t dim, bool keepdim), (self, k, dim, keepdim),
            ({&self}), tg::detail::kthvalue<PublicOps>(self, k, dim, keepdim, "kthvalue"))
TG_RECORDED(Tensor, tril, (const Tensor& self, int64_t diagonal), (self, diagonal), ({&self}),
            tg::detail::triangle<PublicOps>(self, diagonal, true, "tril"))
TG_RECORDED(Tensor, triu, (const Tensor& self, int64_t diagonal), (self, diagonal), ({&self}),
            tg::detail::triangle<PublicOps>(self, diagonal, false, "triu"))
TG_RECORDED(Tensor, masked_fill, (const Tensor& self, const Tensor& mask, const Tensor& value), (self, mask, value),
            ({&self, &value}), tg::detail::masked_fill<PublicOps>(self, mask, value))
TG_RECORDED(Tensor, masked_fill, (const Tensor& self, const Tensor& mask, Scalar value), (self, mask, value), ({&self}),
            tg::detail::masked_fill<PublicOps>(self, mask, scalar_tensor(value, TensorOptions().dtype(self.dtype()))))
#undef TG_COMPOSITE
#undef TG_RECORDED

}  // namespace tg
