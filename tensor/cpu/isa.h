// Internal: the instruction sets the CPU kernel families are compiled for
// (the GEMM's, tensor/cpu/gemm.h; the vector math's, tensor/cpu/vmath.h),
// and the run-time choice among one family's tables.
#pragma once

namespace tg::cpu {

// Whether this CPU (and its OS, for the wider registers) runs "generic",
// "avx2" (with FMA) or "avx512" (F, VL, DQ, with AVX2 and FMA) code.
bool cpu_has_isa(const char* isa);

// The table a family uses: the one the environment variable `env` names
// (an error naming `family` where this build or CPU lacks it: the process
// would fault on an illegal instruction), else the widest available. A
// table is null where this build lacks that instruction set.
const void* choose_isa(const char* family, const char* env, const void* generic, const void* avx2, const void* avx512);

}  // namespace tg::cpu
