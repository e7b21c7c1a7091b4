// Internal: the CPU GEMM's row-block kernel, compiled once per instruction
// set (tensor/cpu/gemm_impl.h) and chosen at run time from what the CPU
// supports, so a portable build (no -march=native) still runs Eigen's
// AVX2/FMA or AVX-512 kernels where the machine has them.
#pragma once

#include <cstdint>

namespace tg::cpu {

// A matrix operand: rows x cols with element strides (rs, cs).
struct MatView {
  int64_t rows, cols, rs, cs;
  bool row_major() const { return cs == 1 && rs >= (cols > 1 ? cols : 1); }
  bool col_major() const { return rs == 1 && cs >= (rows > 1 ? rows : 1); }
  // The layouts the row-block kernels read in place.
  bool either_major() const { return row_major() || col_major(); }
};

// C[r0:r1] = A[r0:r1] * B, C row-major contiguous with ldc = B's cols; A and
// B each row- or column-major (MatView).
struct GemmKernels {
  const char* isa;  // "generic", "avx2" or "avx512"
  void (*f32)(const float* a, const MatView& av, const float* b, const MatView& bv, float* c, int64_t r0, int64_t r1);
  void (*f64)(const double* a, const MatView& av, const double* b, const MatView& bv, double* c, int64_t r0,
              int64_t r1);
};

// The kernels of one instruction set; null where this build or CPU lacks it.
const GemmKernels* gemm_kernels_generic();
const GemmKernels* gemm_kernels_avx2();
const GemmKernels* gemm_kernels_avx512();
// The kernels the CPU GEMM uses: the widest the CPU supports, or those
// TG_CPU_GEMM=generic|avx2|avx512 names (an error where unsupported: the
// process would fault on an illegal instruction).
const GemmKernels& gemm_kernels();
// Which of the three this CPU can run (tests compare each against the others).
bool gemm_isa_supported(const char* isa);

}  // namespace tg::cpu
