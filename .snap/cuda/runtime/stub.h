// Internal: built without the CUDA backend (cuda/runtime/stub.cpp, cuda/kernels/stub.cpp, graphs/stub.cpp).
#pragma once

namespace tg::cuda::detail {
// Throws: tapegrad was built without CUDA, naming `op` and how to rebuild.
[[noreturn]] void no_cuda(const char* op);
}  // namespace tg::cuda::detail
