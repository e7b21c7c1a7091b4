// The CPU vector math's kernels for the build's baseline instruction set
// (tensor/cpu/vmath_impl.h), and the choice among the compiled ones.
#define TG_VMATH_ISA isa_generic
#define TG_VMATH_ISA_NAME "generic"
#include "tensor/cpu/vmath_impl.h"

#include "tensor/cpu/isa.h"

namespace tg::cpu {

const VMathKernels* vmath_kernels_generic() { return &isa_generic::kernels; }

const VMathKernels& vmath_kernels() {
  // A bad TG_CPU_VMATH throws here, and again on the next call (a throwing
  // static initialization is retried).
  static const auto* chosen = static_cast<const VMathKernels*>(choose_isa(
      "CPU vector math", "TG_CPU_VMATH", vmath_kernels_generic(), vmath_kernels_avx2(), vmath_kernels_avx512()));
  return *chosen;
}

}  // namespace tg::cpu
