// Internal: CUDA runtime call checking. TG_CUDA_CHECK(call, op) throws
// tg::Error naming the op, the call and the CUDA error.
#pragma once

#include <cuda_runtime_api.h>

#include <tapegrad/tensor/error.h>
#include "tensor/env.h"

#define TG_CUDA_CHECK(call, op)                                                                                      \
  do {                                                                                                               \
    cudaError_t err_ = (call);                                                                                       \
    if (err_ != cudaSuccess) {                                                                                       \
      (void)cudaGetLastError();                                                                                      \
      TG_ERROR(op, ": CUDA call ", #call, " failed: ", cudaGetErrorName(err_), " (", cudaGetErrorString(err_), ")"); \
    }                                                                                                                \
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
// A failure that a CUDA kernel met and the host learns of later: an index
// out of range (the op checked the range when it was called; the index
// changed since, or came from a path that trusts it: the kernel skips the
// element), or a linear algebra op's nonzero info under graph capture (the
// op cannot read info on the host there: kLinalgInfo, with `value` the info
// value, `size` the batch index and `message` a registered message). The
// kernel fills this record, which lives in pinned host memory mapped into
// every device (the same address on both sides); the host raises it at its
// next synchronization.
struct BadIndex {
  volatile int op;  // 0: none; else a BadIndexOp
  volatile int message;
  volatile long long value, size;
};
enum BadIndexOp { kBadIndexSelect = 1, kBadGather = 2, kBadScatterAdd = 3, kBadSparseIndex = 4, kLinalgInfo = 5 };
// The record (allocated on first use; never null: throws when it cannot be).
BadIndex* bad_index_record();
// The id of the message "`op`: `what`" (`what` with "%v" where the value
// goes) for BadIndex::message: the same id for the same texts, kept for the
// process's life (a captured graph may report it at any later replay).
int register_device_message(const char* op, const char* what);
// Throws (once) what a kernel recorded, if anything; called after every
// host synchronization with a device (synchronize, item, copies to host).
void raise_bad_index();
// Whether this thread ever made a non-default stream current: a stream can
// only be capturing if it did (the legacy default stream cannot capture), so
// capture checks on threads that never did need no CUDA call.
bool thread_set_a_stream();
}  // namespace tg::cuda::detail
