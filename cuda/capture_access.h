// Internal: what a library call touches, for the dependency relaxation of a
// captured CUDA graph (cuda/fusion.h, docs/GRAPHS.md). A call that launches
// anything but the recorded elementwise kernels (a GEMM, a reduction, a
// strided elementwise kernel) opens a CaptureAccess on its stream before its
// launches and names every byte they touch, temporaries included; when the
// scope ends, the nodes the call added are recorded with those accesses.
// Off a capture it costs one atomic load. A call that records nothing is a
// barrier to the relaxation, never a race.
#pragma once

#include <vector>

#include "cuda/fusion.h"
#include <tapegrad/tensor/tensor.h>

namespace tg::cuda::fusion {

// The bytes spanned by a strided tensor (its lowest to its highest element).
Access span_of(const Tensor& t, bool written);

// The whole storage under a tensor: for kernels that index it by data (a
// gather reads, a scatter writes, anywhere along the indexed dim).
inline Access storage_of(const Tensor& t, bool written) {
  const auto& st = t.impl()->storage();
  return {static_cast<const char*>(st->data()), int64_t(st->nbytes()), written};
}

class CaptureAccess {
 public:
  explicit CaptureAccess(void* stream);
  ~CaptureAccess();
  CaptureAccess(const CaptureAccess&) = delete;
  CaptureAccess& operator=(const CaptureAccess&) = delete;

  bool active() const { return active_; }
  void add(const Access& a) {
    if (active_) accesses_.push_back(a);
  }
  void read(const Tensor& t) {
    if (active_) accesses_.push_back(span_of(t, false));
  }
  void write(const Tensor& t) {
    if (active_) accesses_.push_back(span_of(t, true));
  }

 private:
  bool active_ = false;
  void* stream_ = nullptr;
  unsigned long long id_ = 0;
  std::vector<void*> before_;  // the stream's capture dependencies before the call
  std::vector<Access> accesses_;
};

}  // namespace tg::cuda::fusion
