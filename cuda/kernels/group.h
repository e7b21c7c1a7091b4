// Internal: the group primitives' CUDA kernels (cuda/kernels/group.cu), the
// grid family's group_sum / group_center / group_affine slots
// (tensor/grid_kernels.h says what a slot sees and answers).
#pragma once

#include <cstdint>

#include <tapegrad/tensor/tensor.h>

namespace tg::cuda {

bool group_sum(const Tensor& out, const Tensor& a, const Tensor& b, int64_t groups);
bool group_center(const Tensor& out, const Tensor& x, int64_t groups);
bool group_affine(const Tensor& out, const Tensor& t, const Tensor& scale, const Tensor& bias);

}  // namespace tg::cuda
