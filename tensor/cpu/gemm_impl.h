// Internal: the CPU GEMM's row-block kernel on Eigen maps (any row/column
// strides without copies), included once per instruction set by
// tensor/cpu/gemm_{generic,avx2,avx512}.cpp with TG_GEMM_ISA naming it.
// Those compiled for an extended instruction set rename Eigen
// (TG_GEMM_EIGEN_NS) so that none of its inline functions, emitted with
// that set's instructions, can be merged with the generic build's copies
// by the linker (one definition per name; ci: scripts/check_gemm_isa.sh).
#ifndef TG_GEMM_ISA
#error "define TG_GEMM_ISA before including gemm_impl.h"
#endif
#ifdef TG_GEMM_EIGEN_NS
#define Eigen TG_GEMM_EIGEN_NS
#endif
#include <Eigen/Core>

#include "tensor/cpu/gemm.h"

namespace tg::cpu {
namespace TG_GEMM_ISA {
namespace {

template <class T> using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T> using ColMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
using Stride = Eigen::OuterStride<>;

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
  const int64_t n = bv.cols;
  if (av.row_major()) {
    Eigen::Map<const RowMat<T>, 0, Stride> am(a, av.rows, av.cols, Stride(av.rs));
    gemm_b<T>(am, b, bv, c, n, r0, r1);
  } else {
    Eigen::Map<const ColMat<T>, 0, Stride> am(a, av.rows, av.cols, Stride(av.cs));
    gemm_b<T>(am, b, bv, c, n, r0, r1);
  }
}

}  // namespace

const GemmKernels kernels{TG_GEMM_ISA_NAME, &gemm<float>, &gemm<double>};

}  // namespace TG_GEMM_ISA
}  // namespace tg::cpu

#ifdef TG_GEMM_EIGEN_NS
#undef Eigen
#endif
