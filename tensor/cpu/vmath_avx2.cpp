// The CPU vector math's kernels for the avx2 instruction set (tensor/cpu/vmath_impl.h),
// where CMakeLists.txt could give this file the compiler's flags for it.
#include "tensor/cpu/vmath.h"

#if defined(__AVX2__) && defined(__FMA__)
#define TG_VMATH_ISA isa_avx2
#define TG_VMATH_ISA_NAME "avx2"
#define TG_VMATH_EIGEN_NS Eigen_avx2
#include "tensor/cpu/vmath_impl.h"
const tg::cpu::VMathKernels* tg::cpu::vmath_kernels_avx2() { return &isa_avx2::kernels; }
#else
const tg::cpu::VMathKernels* tg::cpu::vmath_kernels_avx2() { return nullptr; }
#endif
