// Internal: CUDA runtime call checking. TG_CUDA_CHECK(call, op) throws
// tg::Error naming the op, the call and the CUDA error.
#pragma once

#include <cuda_runtime_api.h>

#include <tapegrad/tensor/error.h>

#define TG_CUDA_CHECK(call, op)                                              \
  do {                                                                       \
    cudaError_t err_ = (call);                                               \
    if (err_ != cudaSuccess) {                                               \
      (void)cudaGetLastError();                                              \
      TG_ERROR(op, ": CUDA call ", #call, " failed: ", cudaGetErrorName(err_), \
               " (", cudaGetErrorString(err_), ")");                         \
    }                                                                        \
  } while (0)
