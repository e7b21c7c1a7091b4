// Internal: each op family (tensor/<family>.cpp, its raw entries followed by
// its CPU kernels) fills its part of the CPU Backend table.
#pragma once

#include "tensor/kernels.h"

namespace tg::cpu {
void register_elementwise(kernels::Backend& b);
void register_reduce(kernels::Backend& b);
void register_linalg(kernels::Backend& b);
void register_index(kernels::Backend& b);
void register_random(kernels::Backend& b);
void register_sparse(kernels::Backend& b);
void register_fft(kernels::Backend& b);
}  // namespace tg::cpu
