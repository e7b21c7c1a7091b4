#!/usr/bin/env bash
# The CPU kernels for extended instruction sets (tensor/cpu/gemm_avx2.cpp,
# gemm_avx512.cpp, vmath_avx2.cpp, vmath_avx512.cpp) must define no symbol
# the linker could merge with another file's copy: an inline function of
# Eigen or the standard library emitted there holds AVX instructions, and if
# the linker kept that copy for the generic build's callers, a CPU without
# AVX would fault. Each may define only its renamed Eigen (Eigen_<isa>),
# tg::cpu::isa_<isa> and its entry point.
#   scripts/check_gemm_isa.sh OBJECT_DIR   (the tapegrad_tensor target's objects)
set -uo pipefail
dir=${1:?object dir}
nm_=${NM:-nm}
command -v "$nm_" > /dev/null || { echo "check_gemm_isa: $nm_ not found"; exit 1; }
rc=0 n=0
for family in gemm vmath; do
  for isa in avx2 avx512; do
    obj=$(find "$dir" -name "${family}_$isa.cpp.o" | head -1)
    [ -n "$obj" ] || { echo "check_gemm_isa: no ${family}_$isa.cpp.o under $dir"; exit 1; }
    n=$((n + 1))
    bad=$("$nm_" -C --defined-only "$obj" | grep -E ' [TWVuiBDR] ' |
      grep -vE "Eigen_$isa|tg::cpu::isa_$isa|tg::cpu::${family}_kernels_$isa\(\)|DW\.ref\.__gxx_personality_v0")
    if [ -n "$bad" ]; then
      echo "check_gemm_isa: $obj defines symbols shared with other files:"; echo "$bad" | head -20; rc=1
    fi
  done
done
[ $rc = 0 ] && echo "check_gemm_isa: $n objects, no shared symbols"
exit $rc
