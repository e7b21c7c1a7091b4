// Internal: the memory seam between the tensor layer and the CUDA runtime.
// tensor/allocator.cpp (allocator_for, pinned_allocator) asks for these; the
// runtime defines them (allocator.cpp, host_allocator.cpp) or, built without
// CUDA, cuda/runtime/stub.cpp answers nullptr. Chosen at link time: nothing
// registers itself, so a static link keeps them. They live here, not with
// the kernel table in tensor/kernels.h, because the runtime sits below the
// tensor layer and must not include its headers.
#pragma once

#include <tapegrad/tensor/allocator.h>

namespace tg::kernels {
// Device `index`'s caching allocator (throws for a bad index); nullptr
// without CUDA.
Allocator* cuda_device_allocator(int index);
// The pinned host allocator; nullptr without CUDA.
Allocator* cuda_pinned_allocator();
}  // namespace tg::kernels
