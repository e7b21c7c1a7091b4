// The CPU GEMM's kernel for the build's baseline instruction set
// (tensor/cpu/gemm_impl.h), and the choice among the compiled ones.
#include <cstring>

#define TG_GEMM_ISA isa_generic
#define TG_GEMM_ISA_NAME "generic"
#include "tensor/cpu/gemm_impl.h"

#include "tensor/cpu/isa.h"

namespace tg::cpu {

const GemmKernels* gemm_kernels_generic() { return &isa_generic::kernels; }

bool gemm_isa_supported(const char* isa) {
  const GemmKernels* k = std::strcmp(isa, "generic") == 0  ? gemm_kernels_generic()
                         : std::strcmp(isa, "avx2") == 0   ? gemm_kernels_avx2()
                         : std::strcmp(isa, "avx512") == 0 ? gemm_kernels_avx512()
                                                           : nullptr;
  return k && cpu_has_isa(isa);
}

const GemmKernels& gemm_kernels() {
  // A bad TG_CPU_GEMM throws here, and again on the next GEMM (a throwing
  // static initialization is retried).
  static const auto* chosen = static_cast<const GemmKernels*>(
      choose_isa("CPU GEMM", "TG_CPU_GEMM", gemm_kernels_generic(), gemm_kernels_avx2(), gemm_kernels_avx512()));
  return *chosen;
}

}  // namespace tg::cpu
