// Internal: the linear resampling primitives' CUDA kernels
// (cuda/kernels/resample.cu), the grid family's resample_linear /
// resample_linear_backward slots (tensor/grid_kernels.h says what a slot
// sees and answers).
#pragma once

#include <tapegrad/tensor/tensor.h>

#include "tensor/grid_kernels.h"

namespace tg::cuda {

bool resample_linear(const Tensor& out, const Tensor& x, const kernels::ResampleStencil& st);
bool resample_linear_backward(const Tensor& out, const Tensor& g, const kernels::ResampleStencil& st);

}  // namespace tg::cuda
