// The CPU GEMM's kernel for the avx2 instruction set (tensor/cpu/gemm_impl.h),
// where CMakeLists.txt could give this file the compiler's flags for it.
#include "tensor/cpu/gemm.h"

#if defined(__AVX2__) && defined(__FMA__)
#define TG_GEMM_ISA isa_avx2
#define TG_GEMM_ISA_NAME "avx2"
#define TG_GEMM_EIGEN_NS Eigen_avx2
#include "tensor/cpu/gemm_impl.h"
const tg::cpu::GemmKernels* tg::cpu::gemm_kernels_avx2() { return &isa_avx2::kernels; }
#else
const tg::cpu::GemmKernels* tg::cpu::gemm_kernels_avx2() { return nullptr; }
#endif
