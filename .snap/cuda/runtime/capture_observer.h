// Internal: who watches a capture. The capture state (cuda/runtime/capture.cpp) maps
// CUDA's capture ids to observers; a CUDAGraph (graphs/graph.cpp) observes
// its capture from capture_begin to its end. The layers below graphs/ talk
// to the observer only through the launch encoder (cuda/runtime/launch.h) and the
// checks of <tapegrad/cuda/capture.h>.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "cuda/runtime/launch.h"

namespace tg::cuda {

// What one library call added to a capture (cuda/runtime/launch.h).
struct EncodedLaunch {
  std::vector<void*> nodes;  // cudaGraphNode_t
  std::vector<fusion::Access> accesses;
  bool fusable = false;  // `step` holds the call's one kernel as a fused step
  fusion::Recorded step{};
};

class CaptureObserver {
 public:
  virtual ~CaptureObserver() = default;
  // A library call's launches (called under the registry's lock: store only).
  virtual void launched(EncodedLaunch&& l) = 0;
  // Memory the captured nodes use, to keep with the graph (under the lock).
  virtual void keep_alive(std::shared_ptr<void> owner) = 0;
  // A random draw of n values (see detail::capture_random; no lock held).
  virtual bool random(int device, uint64_t n, const int64_t** state, uint64_t* offset) = 0;
  // An op that cannot be captured ends the capture (no lock held).
  virtual void abort() = 0;
};

namespace capture {
// `o` observes capture `id` until forget(id).
void observe(unsigned long long id, CaptureObserver* o);
void forget(unsigned long long id);
// CUDA's id of the capture of stream `s` (cudaStream_t), 0 when it does not capture.
unsigned long long id_of(void* s);
// Whether `s` captures (any status other than none).
bool capturing(const Stream& s);
// Ends the capture of `s` (cudaStream_t) and destroys what it captured.
void discard(void* s);
}  // namespace capture

}  // namespace tg::cuda
