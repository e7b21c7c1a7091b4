// Internal: the launch encoder as the kernels open it. Every library call
// that puts work on a CUDA stream opens one LaunchEncoder on that stream and
// names the memory its launches read and write (cuda/runtime/launch.h says
// what the encoder does with it while the stream captures). The runtime's
// encoder (LaunchEncoderBase) names memory by bytes, below the tensor layer;
// this header, above it, adds the Tensor forms: read and write of a strided
// tensor's span, and a tensor's whole storage.
#pragma once

#include <cstdint>

#include <tapegrad/tensor/scalar_type.h>
#include <tapegrad/tensor/tensor.h>
#include "cuda/runtime/launch.h"

namespace tg::cuda {

namespace fusion {

// The fused kernel for a dtype (Float32, Float64), as a function pointer
// for cudaKernelNodeParams::func (it takes one Program by value), and its
// launch geometry for n elements (cuda/kernels/fused.cu).
const void* fused_kernel(ScalarType dtype, int64_t n, unsigned* grid, unsigned* block);

// A head's kernel with fused steps after it (it takes one HeadProgram by
// value; cuda/kernels/fused.cu), for a dtype (Float32, Float64).
const void* head_kernel(ScalarType dtype, int8_t kind);

// The bytes spanned by a strided tensor (its lowest to its highest element).
inline Access span_of(const Tensor& t, bool written) {
  const int64_t elem = int64_t(element_size(t.dtype()));
  int64_t lo = 0, hi = 0;
  for (size_t d = 0; d < t.sizes().size(); ++d) {
    if (t.sizes()[d] == 0) return {static_cast<const char*>(t.data_ptr()), 0, written};
    const int64_t reach = (t.sizes()[d] - 1) * t.strides()[d];
    (reach < 0 ? lo : hi) += reach;
  }
  return {static_cast<const char*>(t.data_ptr()) + lo * elem, (hi - lo + 1) * elem, written};
}

// The whole storage under a tensor: for kernels that index it by data (a
// gather reads, a scatter writes, anywhere along the indexed dim).
inline Access storage_of(const Tensor& t, bool written) {
  const auto& st = t.impl()->storage();
  return {static_cast<const char*>(st->data()), int64_t(st->nbytes()), written};
}

}  // namespace fusion

class LaunchEncoder : public LaunchEncoderBase {
 public:
  explicit LaunchEncoder(void* stream) : LaunchEncoderBase(stream) {}  // cudaStream_t

  // The bytes a strided tensor spans (an undefined tensor is nothing).
  void read(const Tensor& t) {
    if (recording() && t.defined()) add(fusion::span_of(t, false));
  }
  void write(const Tensor& t) {
    if (recording() && t.defined()) add(fusion::span_of(t, true));
  }
  // A workspace tensor of this call's alone (see fusion::Access::scratch).
  void scratch(const Tensor& t) {
    if (!recording() || !t.defined()) return;
    fusion::Access a = fusion::span_of(t, true);
    a.scratch = true;
    add(a);
  }
};

}  // namespace tg::cuda
