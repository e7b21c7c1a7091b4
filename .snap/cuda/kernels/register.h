// Internal: each CUDA kernel file fills its part of the backend table.
#pragma once

#include "tensor/kernels.h"

namespace tg::cuda {
void register_reduce_index_random(kernels::Backend& b);
void register_gemm(kernels::Backend& b);
void register_sparse(kernels::Backend& b);
void register_multi_tensor(kernels::Backend& b);
void register_fft(kernels::Backend& b);
}  // namespace tg::cuda
