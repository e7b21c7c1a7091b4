// Internal: dtypes on the device: dispatch over every dtype and the
// conversions between them (bf16/fp16 through float).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "tensor/kernels.h"

namespace tg::cuda {

template <class F> void dispatch_all(ScalarType t, F&& f) {
  switch (t) {
    case ScalarType::Float32: f(float{}); return;
    case ScalarType::Float64: f(double{}); return;
    case ScalarType::BFloat16: f(__nv_bfloat16{}); return;
    case ScalarType::Float16: f(__half{}); return;
    case ScalarType::Int64: f(int64_t{}); return;
    case ScalarType::Bool: f(bool{}); return;
  }
}
using kernels::dispatch_bytes;
using kernels::dispatch_compute;

template <class T> constexpr bool is_half_v = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;

template <class S> __device__ float to_float(S s) {
  if constexpr (std::is_same_v<S, __half>) return __half2float(s);
  else if constexpr (std::is_same_v<S, __nv_bfloat16>) return __bfloat162float(s);
  else return float(s);
}

template <class D, class S> __device__ D convert(S s) {
  if constexpr (std::is_same_v<D, S>) {
    return s;
  } else if constexpr (is_half_v<S>) {
    return convert<D>(to_float(s));
  } else if constexpr (std::is_same_v<D, __half>) {
    return __float2half_rn(float(s));
  } else if constexpr (std::is_same_v<D, __nv_bfloat16>) {
    return __float2bfloat16_rn(float(s));
  } else if constexpr (std::is_same_v<D, bool>) {
    return s != S(0);
  } else {
    return static_cast<D>(s);
  }
}

}  // namespace tg::cuda
