// A build without CUDA: no multi-tensor updates.
#include "optim/kernels.h"

namespace tg::optim::detail {
const MultiTensorUpdates* cuda_multi_tensor_updates() { return nullptr; }
}  // namespace tg::optim::detail
