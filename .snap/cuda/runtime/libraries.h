// Internal: the CUDA libraries' handles and workspaces, in one place (cuBLAS
// and cuBLASLt for the GEMMs and triangular solves, cuSOLVER for the
// factorizations, cuSPARSE for sparse products, cuFFT's plans, cuDNN for
// the convolutions).
//
// - A handle is per (thread, device): a library handle is not safe to share
//   between threads. The calls below set the stream on every call (handles
//   are reused across the streams a thread uses); a handle is created on
//   first use, also while a capture is underway (creation is not stream
//   work: it runs under the Relaxed capture mode).
// - Memory a library call needs for itself comes from the call's launch
//   encoder (LaunchEncoderBase::workspace, cuda/runtime/launch.h): while the stream
//   captures into a CUDA graph it is the graph's own, else a per-stream
//   cache. No library call handles capture itself.
// - cuBLAS's own workspace (cublasSetWorkspace) is a fixed buffer per
//   (thread, device, stream), as PyTorch's: cuBLAS then never allocates, also
//   under capture, and picks the same algorithms captured and eager. Calls
//   sharing it on one stream stay ordered (the encoder records it written).
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cufft.h>
#include <cuda_runtime_api.h>
#include <cusolverDn.h>
#include <cusparse.h>
#if TAPEGRAD_CUDNN
#include <cudnn.h>
#endif

#include <cstddef>

#include <tapegrad/tensor/error.h>

// A library call's status checked: `lib` names the library in the message,
// `name(status)` says what went wrong.
#define TG_LIBRARY_CHECK(Status, ok, lib, name, call, op)                      \
  do {                                                                         \
    Status st_ = (call);                                                       \
    TG_CHECK(st_ == ok, op, ": " lib " call ", #call, " failed: ", name(st_)); \
  } while (0)
#define TG_CUBLAS_CHECK(call, op) \
  TG_LIBRARY_CHECK(cublasStatus_t, CUBLAS_STATUS_SUCCESS, "cuBLAS", ::tg::cuda::lib::cublas_status_name, call, op)
#define TG_CUSOLVER_CHECK(call, op)                                                                                    \
  TG_LIBRARY_CHECK(cusolverStatus_t, CUSOLVER_STATUS_SUCCESS, "cuSOLVER", ::tg::cuda::lib::cusolver_status_name, call, \
                   op)
#define TG_CUFFT_CHECK(call, op) \
  TG_LIBRARY_CHECK(cufftResult, CUFFT_SUCCESS, "cuFFT", ::tg::cuda::lib::cufft_status_name, call, op)
#define TG_CUSPARSE_CHECK(call, op) \
  TG_LIBRARY_CHECK(cusparseStatus_t, CUSPARSE_STATUS_SUCCESS, "cuSPARSE", cusparseGetErrorString, call, op)

namespace tg::cuda {

class LaunchEncoderBase;

namespace lib {

constexpr int kMaxDevices = 64;

const char* cublas_status_name(cublasStatus_t s);
const char* cusolver_status_name(cusolverStatus_t s);

// ---- cuBLAS ------------------------------------------------------------------------------
// This thread's cuBLAS handle for `device` (the current device), its stream
// set to `stream` and its workspace to the stream's (below), which `enc`,
// the call's encoder, records as written. `op` names the caller in errors.
cublasHandle_t cublas(int device, cudaStream_t stream, LaunchEncoderBase& enc, const char* op);
// The bytes of cuBLAS's workspace per stream: CUBLAS_WORKSPACE_CONFIG when
// set (":KiB:count" pairs, summed), else 32 MiB on Hopper and later, 4 MiB
// before (cuBLAS's recommended sizes). The size matters beyond memory:
// cuBLAS's heuristics pick deeper split-K for the long, thin products of
// weight gradients when the workspace allows it.
size_t cublas_workspace_bytes(int device);
// This thread's cuBLAS workspace for `stream` (cublas_workspace_bytes), kept
// for the thread's life.
void* cublas_workspace(int device, cudaStream_t stream, const char* op);

// ---- cuBLASLt ----------------------------------------------------------------------------
// One handle per device, shared by threads: every call passes its stream and
// workspace, and nothing configures the handle after creation.
cublasLtHandle_t cublaslt(int device, const char* op);

// ---- cuSOLVER (dense) --------------------------------------------------------------------
// This thread's handle for `device`, its stream set to `stream`. Every
// routine's workspace comes from the call's encoder (its *_bufferSize says
// how much).
cusolverDnHandle_t cusolver_dn(int device, cudaStream_t stream, const char* op);

// ---- cuSPARSE ----------------------------------------------------------------------------
// This thread's handle for `device`, its stream set to `stream`.
cusparseHandle_t cusparse(int device, cudaStream_t stream, const char* op);

// ---- cuDNN (a build with TAPEGRAD_CUDNN) -------------------------------------------------
#if TAPEGRAD_CUDNN
// This thread's handle for `device`, its stream set to `stream`. Workspaces
// come from the call's encoder.
cudnnHandle_t cudnn(int device, cudaStream_t stream, const char* op);
#endif

// ---- cuFFT -------------------------------------------------------------------------------
const char* cufft_status_name(cufftResult r);
// A plan for `batch` transforms of `type` over the last `rank` (1 to 3) dims
// of contiguous data, the signal's sizes n (real sizes for R2C and C2R),
// like PyTorch's plan cache: this thread's, made on first use for `device`
// (the current device) and kept (the most recently used kMaxFftPlans; a plan
// that ran under a CUDA graph capture is never evicted, since the graph
// reads its tables), handed to other threads when this one ends. Its work
// area is unset: the caller sets `work` bytes from its encoder
// (cufftSetWorkArea; a capture's are the graph's own), and its stream.
struct FftPlan {
  cufftHandle handle = 0;
  size_t work = 0;
};
constexpr size_t kMaxFftPlans = 64;
FftPlan cufft_plan(int device, cufftType type, int rank, const long long* n, long long batch, bool capturing,
                   const char* op);

}  // namespace lib
}  // namespace tg::cuda
