// mm, bmm, matmul (NumPy semantics), linear; then the CPU GEMM.
#include <atomic>

#include "tensor/op_util.h"

#include "tensor/composite.h"
#include <Eigen/Core>
#include "tensor/cpu/loops.h"
#include "tensor/cpu/cpu_kernels.h"

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

// ---- the CPU kernels -------------------------------------------------------------
// CPU GEMM through Eigen maps (any row/column strides without copies);
// batches, or row blocks of one large product, run in parallel with TBB.

namespace tg::cpu {
namespace {

template <class T> using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T> using ColMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
using Stride = Eigen::OuterStride<>;

// A matrix operand: rows x cols with element strides (rs, cs).
struct MatView {
  int64_t rows, cols, rs, cs;
  bool row_major() const { return cs == 1 && rs >= std::max<int64_t>(cols, 1); }
  bool col_major() const { return rs == 1 && cs >= std::max<int64_t>(rows, 1); }
};

// C[r0:r1] = A[r0:r1] * B, C row-major contiguous with ldc = n.
template <class T, class MA, class MB>
void gemm_rows(const MA& a, const MB& b, T* c, int64_t n, int64_t r0, int64_t r1) {
  Eigen::Map<RowMat<T>> cm(c + r0 * n, r1 - r0, n);
  cm.noalias() = a.middleRows(r0, r1 - r0) * b;
}

template <class T, class MA>
void gemm_b(const MA& a, const T* b, const MatView& bv, T* c, int64_t n, int64_t r0, int64_t r1) {
  if (bv.row_major()) {
    Eigen::Map<const RowMat<T>, 0, Stride> bm(b, bv.rows, bv.cols, Stride(bv.rs));
    gemm_rows<T>(a, bm, c, n, r0, r1);
  } else {
    Eigen::Map<const ColMat<T>, 0, Stride> bm(b, bv.rows, bv.cols, Stride(bv.cs));
    gemm_rows<T>(a, bm, c, n, r0, r1);
  }
}

template <class T>
void gemm(const T* a, const MatView& av, const T* b, const MatView& bv, T* c, int64_t r0, int64_t r1) {
  int64_t n = bv.cols;
  if (av.row_major()) {
    Eigen::Map<const RowMat<T>, 0, Stride> am(a, av.rows, av.cols, Stride(av.rs));
    gemm_b<T>(am, b, bv, c, n, r0, r1);
  } else {
    Eigen::Map<const ColMat<T>, 0, Stride> am(a, av.rows, av.cols, Stride(av.cs));
    gemm_b<T>(am, b, bv, c, n, r0, r1);
  }
}

MatView view_of(const Tensor& t) {  // t: [B, r, c]
  return {t.sizes()[1], t.sizes()[2], t.strides()[1], t.strides()[2]};
}

void bmm_kernel(const Tensor& out, const Tensor& a_in, const Tensor& b_in) {
  int64_t batch = a_in.sizes()[0], m = a_in.sizes()[1], k = a_in.sizes()[2];
  int64_t n = b_in.sizes()[2];
  if (out.numel() == 0) return;
  if (k == 0) {
    kernels::cpu_backend().fill(out, 0);
    return;
  }
  Tensor a = a_in, b = b_in;
  if (!view_of(a).row_major() && !view_of(a).col_major()) a = a.contiguous();
  if (!view_of(b).row_major() && !view_of(b).col_major()) b = b.contiguous();
  MatView av = view_of(a), bv = view_of(b);
  int64_t esz = int64_t(element_size(out.dtype()));
  char* a0 = static_cast<char*>(a.data_ptr());
  char* b0 = static_cast<char*>(b.data_ptr());
  char* c0 = static_cast<char*>(out.data_ptr());
  int64_t sa = a.strides()[0] * esz, sb = b.strides()[0] * esz, sc = m * n * esz;
  dispatch_compute(out.dtype(), "bmm", [&](auto tag) {
    using T = decltype(tag);
    auto one = [&](int64_t i, int64_t r0, int64_t r1) {
      gemm<T>(reinterpret_cast<const T*>(a0 + i * sa), av, reinterpret_cast<const T*>(b0 + i * sb), bv,
              reinterpret_cast<T*>(c0 + i * sc), r0, r1);
    };
    const int64_t flops_per_row = 2 * n * k;
    if (batch > 1) {
      int64_t grain = std::max<int64_t>(1, (int64_t(1) << 22) / std::max<int64_t>(flops_per_row * m, 1));
      parallel_for(batch, grain, [&](int64_t b0_, int64_t e) {
        for (int64_t i = b0_; i < e; ++i)
          one(i, 0, m);
      });
    } else {
      // One product: split rows so both cores work on large GEMMs.
      int64_t grain = std::max<int64_t>(64, (int64_t(1) << 24) / std::max<int64_t>(flops_per_row, 1));
      parallel_for(m, grain, [&](int64_t r0, int64_t r1) { one(0, r0, r1); });
    }
  });
}

}  // namespace

void register_linalg(kernels::Backend& b) { b.bmm = bmm_kernel; }

}  // namespace tg::cpu
