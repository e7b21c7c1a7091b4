// The CUDA kernel tables built when TAPEGRAD_CUDA is off or nvcc is missing:
// none, so the op layer reports that the device has no backend. (The
// runtime's stubs, devices, streams and allocators, are in
// cuda/runtime/stub.cpp, a layer below.)
#include "tensor/kernels.h"
#include "tensor/grid_kernels.h"
#include "tensor/linalg_kernels.h"

namespace tg::kernels {
const Backend* cuda_backend() { return nullptr; }
const LinalgKernels* cuda_linalg_kernels() { return nullptr; }
const GridKernels* cuda_grid_kernels() { return nullptr; }
}  // namespace tg::kernels
