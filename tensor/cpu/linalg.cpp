// CPU GEMM through Eigen maps (any row/column strides without copies);
// batches, or row blocks of one large product, run in parallel with TBB.
#include <Eigen/Core>

#include "tensor/cpu/cpu_kernels.h"
#include "tensor/cpu/loops.h"

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
