// Internal: CUDA runtime call checking. TG_CUDA_CHECK(call, op) throws
// tg::Error naming the op, the call and the CUDA error.
#pragma once

#include <cuda_runtime_api.h>

#include <tapegrad/tensor/error.h>
#include "tensor/env.h"

#define TG_CUDA_CHECK(call, op)                                              \
  do {                                                                       \
    cudaError_t err_ = (call);                                               \
    if (err_ != cudaSuccess) {                                               \
      (void)cudaGetLastError();                                              \
      TG_ERROR(op, ": CUDA call ", #call, " failed: ", cudaGetErrorName(err_), \
               " (", cudaGetErrorString(err_), ")");                         \
    }                                                                        \
  } while (0)

namespace tg::cuda::detail {
using tg::detail::env_allows;  // tensor/env.h

// For a scope, this thread's capture mode is Relaxed: calls that are not
// stream work (cudaMalloc, cublasCreate) are then allowed while a capture
// in Global mode is underway.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() { (void)cudaThreadExchangeStreamCaptureMode(&prev_); }
  ~RelaxedCaptureMode() { (void)cudaThreadExchangeStreamCaptureMode(&prev_); }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  cudaStreamCaptureMode prev_ = cudaStreamCaptureModeRelaxed;
};

// Throws naming `op` when there is no GPU or `device` is not one of them.
void check_device(int device, const char* op);
// -1 means the current device; then checked as above.
int resolve_device(int device, const char* op);
// Whether this process was forked after its parent used the CUDA runtime:
// the runtime does not survive fork, so every CUDA entry point throws
// (check_device says why), and nothing can be capturing here.
bool forked_after_cuda();
// Whether this thread ever made a non-default stream current: a stream can
// only be capturing if it did (the legacy default stream cannot capture), so
// capture checks on threads that never did need no CUDA call.
bool thread_set_a_stream();
}  // namespace tg::cuda::detail
