// A build without CUDA: no GPU table of the autograd layer's kernels.
#include "autograd/kernels/kernels.h"

namespace tg::autograd::kernels {
const DerivativeKernels* cuda_derivative_kernels() { return nullptr; }
}  // namespace tg::autograd::kernels
