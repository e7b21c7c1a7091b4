// mm, bmm, matmul (NumPy semantics), linear.
#include <atomic>

#include "tensor/op_util.h"

#include "tensor/composite.h"

namespace tg {

using detail::cast;
using detail::compute_type;

namespace {

void check_gemm_operands(const Tensor& a, const Tensor& b, const char* op) {
  detail::check_defined(a, op, "first operand");
  detail::check_defined(b, op, "second operand");
  detail::check_same_device(a, b, op);
  TG_CHECK(a.dtype() == b.dtype(), op, ": expected both operands to have the same dtype, got ", a.dtype(), " and ",
           b.dtype(), "; convert one with .to(dtype)");
  TG_CHECK(a.dtype() != kBool, op, ": Bool tensors are not supported");
}

// a: [B, n, k], b: [B, k, m] (checked) -> [B, n, m].
std::atomic<uint64_t> g_gemm_calls{0};
std::atomic<uint64_t> g_gemm_flops{0};

Tensor bmm_impl(const Tensor& a, const Tensor& b, const char* op) {
  g_gemm_calls.fetch_add(1, std::memory_order_relaxed);
  g_gemm_flops.fetch_add(
      2 * uint64_t(a.sizes()[0]) * uint64_t(a.sizes()[1]) * uint64_t(a.sizes()[2]) * uint64_t(b.sizes()[2]),
      std::memory_order_relaxed);
  ScalarType rt = a.dtype(), ct = compute_type(rt);
  IntList shape{a.sizes()[0], a.sizes()[1], b.sizes()[2]};
  Tensor out = detail::new_empty(shape, ct, a.device());
  kernels::backend(a.device(), op).bmm(out, cast(a, ct), cast(b, ct));
  return cast(out, rt);
}

void check_inner(const Tensor& a, const Tensor& b, int64_t ka, int64_t kb, const char* op) {
  TG_CHECK(ka == kb, op, ": cannot multiply ", shape_str(a.sizes()), " by ", shape_str(b.sizes()), " (", ka, " != ", kb,
           ")");
}

}  // namespace

namespace raw {

uint64_t gemm_calls() { return g_gemm_calls.load(std::memory_order_relaxed); }
uint64_t gemm_flops() { return g_gemm_flops.load(std::memory_order_relaxed); }

Tensor mm(const Tensor& a, const Tensor& b) {
  if (a.defined() && a.is_sparse()) return sparse_mm(a, b);
  check_gemm_operands(a, b, "mm");
  TG_CHECK(a.dim() == 2 && b.dim() == 2, "mm: expected 2-D tensors, got ", shape_str(a.sizes()), " and ",
           shape_str(b.sizes()));
  check_inner(a, b, a.sizes()[1], b.sizes()[0], "mm");
  return bmm_impl(a.unsqueeze(0), b.unsqueeze(0), "mm").squeeze(0);
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  check_gemm_operands(a, b, "bmm");
  TG_CHECK(a.dim() == 3 && b.dim() == 3, "bmm: expected 3-D tensors, got ", shape_str(a.sizes()), " and ",
           shape_str(b.sizes()));
  TG_CHECK(a.sizes()[0] == b.sizes()[0], "bmm: batch sizes differ: ", shape_str(a.sizes()), " and ",
           shape_str(b.sizes()));
  check_inner(a, b, a.sizes()[2], b.sizes()[1], "bmm");
  return bmm_impl(a, b, "bmm");
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  if (a.defined() && a.is_sparse()) return sparse_mm(a, b, "matmul");
  check_gemm_operands(a, b, "matmul");
  return detail::matmul_shapes<detail::RawOps>(a, b);
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  detail::check_defined(x, "linear", "input");
  detail::check_defined(w, "linear", "weight");
  TG_CHECK(w.dim() == 2, "linear: weight must be 2-D [out_features, in_features], got ", shape_str(w.sizes()));
  TG_CHECK(x.dim() >= 1 && x.sizes().back() == w.sizes()[1], "linear: input shape ", shape_str(x.sizes()),
           " doesn't match weight ", shape_str(w.sizes()), " (in_features ", w.sizes()[1], ")");
  TG_CHECK(x.dtype() == w.dtype(), "linear: input (", x.dtype(), ") and weight (", w.dtype(),
           ") must have the same dtype; convert one with .to(dtype)");
  detail::check_same_device(x, w, "linear");
  if (b.defined()) detail::check_same_device(x, b, "linear");
  if (b.defined())
    TG_CHECK(b.dim() == 1 && b.sizes()[0] == w.sizes()[0], "linear: bias shape ", shape_str(b.sizes()),
             " doesn't match weight ", shape_str(w.sizes()), " (out_features ", w.sizes()[0], ")");
  Tensor y = raw::matmul(x, w.t());
  return b.defined() ? raw::add(y, b) : y;
}

}  // namespace raw

}  // namespace tg
