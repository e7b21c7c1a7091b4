// The CPU GEMM's kernel for the avx512 instruction set (tensor/cpu/gemm_impl.h),
// where CMakeLists.txt could give this file the compiler's flags for it.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // inside GCC 12's AVX-512 intrinsics headers
#include "tensor/cpu/gemm.h"

#if defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__)
#define TG_GEMM_ISA isa_avx512
#define TG_GEMM_ISA_NAME "avx512"
#define TG_GEMM_EIGEN_NS Eigen_avx512
#include "tensor/cpu/gemm_impl.h"
const tg::cpu::GemmKernels* tg::cpu::gemm_kernels_avx512() { return &isa_avx512::kernels; }
#else
const tg::cpu::GemmKernels* tg::cpu::gemm_kernels_avx512() { return nullptr; }
#endif
