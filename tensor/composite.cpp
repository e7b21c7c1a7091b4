// The raw forms of the composite ops (tensor/composite.h).
#include "tensor/composite.h"

namespace tg::raw {

using detail::RawOps;

Tensor max(const Tensor& self) { return raw::amax(self); }
Tensor min(const Tensor& self) { return raw::amin(self); }
TensorPair max(const Tensor& self, int64_t dim, bool keepdim) {
  return detail::extreme_dim<RawOps>(self, dim, keepdim, true, "max");
}
TensorPair min(const Tensor& self, int64_t dim, bool keepdim) {
  return detail::extreme_dim<RawOps>(self, dim, keepdim, false, "min");
}
Tensor logsumexp(const Tensor& self, const IntList& dims, bool keepdim) {
  return detail::logsumexp<RawOps>(self, dims, keepdim);
}
Tensor softmax(const Tensor& self, int64_t dim) { return detail::softmax<RawOps>(self, dim); }
Tensor log_softmax(const Tensor& self, int64_t dim) { return detail::log_softmax<RawOps>(self, dim); }
Tensor norm(const Tensor& self, double p, const IntList& dims, bool keepdim) {
  return detail::norm<RawOps>(self, p, dims, keepdim);
}
Tensor sum_to(const Tensor& self, const IntList& shape) { return detail::sum_to<RawOps>(self, shape); }
Tensor dot(const Tensor& self, const Tensor& other) { return detail::dot<RawOps>(self, other); }
Tensor cumsum(const Tensor& self, int64_t dim) { return detail::cumsum<RawOps>(self, dim); }

}  // namespace tg::raw
