// The grid family's CUDA kernel table (tensor/grid_kernels.h). Every slot
// is optional: without cuDNN the op layer's im2col + GEMM path runs on the
// GPU (strided copies and cuBLAS).
#include "tensor/grid_kernels.h"

namespace tg::kernels {
const GridKernels* cuda_grid_kernels() {
  static const GridKernels t{};
  return &t;
}
}  // namespace tg::kernels
