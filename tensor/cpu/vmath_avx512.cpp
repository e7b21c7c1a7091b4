// The CPU vector math's kernels for the avx512 instruction set (tensor/cpu/vmath_impl.h),
// where CMakeLists.txt could give this file the compiler's flags for it.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // inside GCC 12's AVX-512 intrinsics headers
#pragma GCC diagnostic ignored "-Wuninitialized"        // likewise (_mm512_undefined_* in avx512fintrin.h)
#include "tensor/cpu/vmath.h"

#if defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__)
#define TG_VMATH_ISA isa_avx512
#define TG_VMATH_ISA_NAME "avx512"
#define TG_VMATH_EIGEN_NS Eigen_avx512
#include "tensor/cpu/vmath_impl.h"
const tg::cpu::VMathKernels* tg::cpu::vmath_kernels_avx512() { return &isa_avx512::kernels; }
#else
const tg::cpu::VMathKernels* tg::cpu::vmath_kernels_avx512() { return nullptr; }
#endif
