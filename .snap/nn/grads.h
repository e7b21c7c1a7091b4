// Clearing gradients: one loop for Module::zero_grad and Optimizer::zero_grad.
#pragma once

#include <vector>

#include <tapegrad/tensor/tensor.h>

namespace tg::nn::detail {
// Drops each parameter's gradient (set_to_none), or zeroes it in place under
// no-grad; parameters without one are skipped.
void zero_grads(const std::vector<Tensor>& params, bool set_to_none);
}  // namespace tg::nn::detail
