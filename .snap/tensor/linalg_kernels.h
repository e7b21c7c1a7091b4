// Internal: the linear algebra family's kernel table (docs/ARCHITECTURE.md
// "Kernel tables per family"). One LinalgKernels per device, chosen at link
// time like kernels::Backend: the CPU table is filled in tensor/linalg.cpp
// (Eigen's decompositions), the CUDA table in cuda/kernels/linalg.cu
// (cuSOLVER, cuBLAS batched routines; through the library handles and
// workspaces of cuda/runtime/libraries.h), and cuda/kernels/stub.cpp answers nullptr without
// CUDA. The raw entries (tensor/linalg.cpp) check arguments, broadcast batch
// dims, convert half types through Float32 and hand a kernel only:
//
//   - matrices as [B, r, c] tensors in batched column-major layout (strides
//     {r * c, 1, r}: each matrix Fortran-ordered, as LAPACK and cuSOLVER
//     read them), freshly allocated when the kernel writes them in place;
//   - one compute dtype, Float32 or Float64, for every floating operand;
//   - pivots and info as contiguous Int64 tensors ([B, n] and [B]);
//   - B >= 1 and every size >= 1 (the op layer answers empty inputs).
//
// info is written on the device without a host synchronization; the op
// layer reads it (check_errors) or hands it to the user (*_ex).
#pragma once

#include <tapegrad/tensor/device.h>
#include <tapegrad/tensor/tensor.h>

namespace tg::kernels {

struct LinalgKernels {
  // Batches (B > 1) of matrices of order up to this go to batched routines,
  // which factor either triangle of a Cholesky equally fast; one matrix, or
  // larger ones, to one-matrix routines, faster on the lower triangle (0:
  // none, the CPU). cholesky_ex picks its layout by it.
  int64_t batched_max_n;
  // triangular_solve takes b [B, n, k] in any layout (row-major too) for
  // n <= solve_any_layout_max_n and k <= solve_any_layout_max_k (0:
  // column-major always).
  int64_t solve_any_layout_max_n, solve_any_layout_max_k;
  // In place: a's lower triangle := L with A = L L^T (A read from the lower
  // triangle; upper: U with A = U^T U, from the upper triangle); the other
  // strict triangle := 0. info[b] := 0, or the order k >= 1 of the
  // first leading minor that is not positive definite (the factor is then
  // unspecified).
  void (*cholesky)(const Tensor& a, const Tensor& info, bool upper);
  // In place: b [B, n, k] := op(A)^{-1} b with A [B, n, n] triangular (upper
  // or lower; unit: diagonal taken as 1, not read; A's batch may be 1 for
  // every b); op(A) = A^T when `transpose`. Only A's triangle is read. b is
  // column-major, or of any strides within solve_any_layout_max_n/_k.
  void (*triangular_solve)(const Tensor& a, const Tensor& b, bool upper, bool unit, bool transpose);
  // In place: a [B, n, n] := its LU factors with partial pivoting (L unit
  // lower below the diagonal, U on and above); pivots [B, n] := the 1-based
  // row interchanges (LAPACK's ipiv); info[b] := 0, or k >= 1 where U(k, k)
  // is exactly zero (the factorization is still completed).
  void (*lu_factor)(const Tensor& a, const Tensor& pivots, const Tensor& info);
  // In place: b [B, n, k] := A^{-1} b (transpose: A^{-T} b) from lu_factor's
  // lu [B, n, n] and pivots [B, n] (not checked here: the op layer checks
  // pivot ranges of user-given pivots).
  void (*lu_solve)(const Tensor& lu, const Tensor& pivots, const Tensor& b, bool transpose);
  // perm [B, n] := the row order that pivots [B, n] (lu_factor's, 1-based,
  // every entry in [i + 1, n] at position i: checked by the op layer)
  // encode: 0, ..., n - 1 with rows i and pivots[i] - 1 swapped for i = 0, 1,
  // ... in turn, so that (P^T A)[i] = A[perm[i]] for A = P L U. Contiguous
  // Int64 both.
  void (*pivots_to_permutation)(const Tensor& pivots, const Tensor& perm);
  // Symmetric eigendecomposition of a [B, n, n] (read from the lower
  // triangle): w [B, n] contiguous := eigenvalues ascending, v [B, n, n]
  // (column-major as above) := orthonormal eigenvectors in its columns;
  // `a` may be overwritten. info[b] := 0, or > 0 when the algorithm did not
  // converge.
  void (*eigh)(const Tensor& a, const Tensor& w, const Tensor& v, const Tensor& info);
  // Householder QR of a [B, m, n]: q [B, m, kq] with kq = min(m, n)
  // (complete: m), r [B, kr, n] with kr = kq; q undefined: R only. `a` may
  // be overwritten. r's strict lower triangle is written as zero.
  void (*qr)(const Tensor& a, const Tensor& q, const Tensor& r);
  // SVD of a [B, m, n] = u diag(s) vh, s [B, k] contiguous (k = min(m, n))
  // descending, u [B, m, ku], vh [B, kv, n] (full: ku = m, kv = n; else k);
  // u and vh undefined: values only. `a` may be overwritten. info[b] := 0,
  // or > 0 when the algorithm did not converge.
  void (*svd)(const Tensor& a, const Tensor& u, const Tensor& s, const Tensor& vh, const Tensor& info);
  // In place, tril/triu's kernel (after a copy): m [B, r, c] contiguous
  // row-major, any dtype := 0 where j - i > k (keep_lower) or j - i < k
  // (else). B, r, c >= 1.
  void (*zero_triangle)(const Tensor& m, int64_t k, bool keep_lower);
  // The first b (in batch order) with info[b] != 0 is raised, as `op` with
  // `what` (e.g. "the leading minor of order %v is not positive definite"),
  // at the next host synchronization with the device: under CUDA graph
  // capture, where the op cannot read info on the host. Optional (null on
  // the CPU, where the op reads info itself).
  void (*report_info)(const Tensor& info, const char* op, const char* what);
};

// The family's table for a device; throws a clear error naming `op` when the
// device has none.
const LinalgKernels& linalg_kernels(Device d, const char* op);
const LinalgKernels& cpu_linalg_kernels();
// The CUDA table: defined by cuda/kernels/linalg.cu, nullptr from
// cuda/kernels/stub.cpp in a build without CUDA.
const LinalgKernels* cuda_linalg_kernels();

}  // namespace tg::kernels

namespace tg::detail {
// X's rows picked by an Int64 permutation p [..., n] (X [..., n, k], batch
// dims broadcast): X[..., p[i], :] for each i, through the public gather (so
// it differentiates); shape errors name `op`.
Tensor permute_rows(const Tensor& X, const Tensor& p, const char* op);
}  // namespace tg::detail
