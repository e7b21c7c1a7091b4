// The CPU GEMM's kernel for the build's baseline instruction set
// (tensor/cpu/gemm_impl.h), and the choice among the compiled ones.
#include <cstdlib>
#include <cstring>
#include <string>

#include <tapegrad/tensor/error.h>

#define TG_GEMM_ISA isa_generic
#define TG_GEMM_ISA_NAME "generic"
#include "tensor/cpu/gemm_impl.h"

namespace tg::cpu {

const GemmKernels* gemm_kernels_generic() { return &isa_generic::kernels; }

bool gemm_isa_supported(const char* isa) {
  if (std::strcmp(isa, "generic") == 0) return true;
#if defined(__x86_64__) || defined(__i386__)
  // libgcc's checks include the OS's support for the wider registers (XCR0).
  if (std::strcmp(isa, "avx2") == 0)
    return gemm_kernels_avx2() && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (std::strcmp(isa, "avx512") == 0)
    return gemm_kernels_avx512() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") &&
           __builtin_cpu_supports("fma");
#endif
  return false;
}

namespace {
const GemmKernels* by_name(const std::string& isa) {
  if (isa == "generic") return gemm_kernels_generic();
  if (isa == "avx2") return gemm_kernels_avx2();
  if (isa == "avx512") return gemm_kernels_avx512();
  return nullptr;
}
}  // namespace

const GemmKernels& gemm_kernels() {
  // A bad TG_CPU_GEMM throws here, and again on the next GEMM (a throwing
  // static initialization is retried).
  static const GemmKernels* chosen = []() -> const GemmKernels* {
    if (const char* want = std::getenv("TG_CPU_GEMM"); want && *want) {
      const GemmKernels* k = by_name(want);
      TG_CHECK(k && gemm_isa_supported(want), "CPU GEMM: TG_CPU_GEMM=", want,
               " is not available here (this build and CPU support: generic",
               gemm_isa_supported("avx2") ? ", avx2" : "", gemm_isa_supported("avx512") ? ", avx512" : "",
               "); unset it to use the widest");
      return k;
    }
    for (const char* isa : {"avx512", "avx2"})
      if (gemm_isa_supported(isa)) return by_name(isa);
    return gemm_kernels_generic();
  }();
  return *chosen;
}

}  // namespace tg::cpu
