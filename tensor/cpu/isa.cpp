#include "tensor/cpu/isa.h"

#include <cstdlib>
#include <cstring>

#include <tapegrad/tensor/error.h>

namespace tg::cpu {

bool cpu_has_isa(const char* isa) {
  if (std::strcmp(isa, "generic") == 0) return true;
#if defined(__x86_64__) || defined(__i386__)
  // libgcc's checks include the OS's support for the wider registers (XCR0).
  if (std::strcmp(isa, "avx2") == 0) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (std::strcmp(isa, "avx512") == 0)
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
  return false;
}

const void* choose_isa(const char* family, const char* env, const void* generic, const void* avx2, const void* avx512) {
  const char* names[3] = {"avx512", "avx2", "generic"};
  const void* tables[3] = {avx512, avx2, generic};
  auto usable = [&](int i) { return tables[i] && cpu_has_isa(names[i]); };
  if (const char* want = std::getenv(env); want && *want) {
    for (int i = 0; i < 3; ++i)
      if (std::strcmp(want, names[i]) == 0 && usable(i)) return tables[i];
    TG_CHECK(false, family, ": ", env, "=", want, " is not available here (this build and CPU support: generic",
             usable(1) ? ", avx2" : "", usable(0) ? ", avx512" : "", "); unset it to use the widest");
  }
  for (int i = 0; i < 3; ++i)
    if (usable(i)) return tables[i];
  return generic;
}

}  // namespace tg::cpu
