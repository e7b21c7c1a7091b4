// Internal: dtypes on the device: dispatch over every dtype and the
// conversions between them (bf16/fp16 through float).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <library_types.h>

#include <cstdint>
#include <type_traits>

#include "tensor/kernels.h"

namespace tg::cuda {

// f(T{}) with T the dtype's device type (the dtype list's DeviceT column)
// when Takes(t), returning whether it did (kernels::dispatch_if on the
// device types).
template <bool (*Takes)(ScalarType), class F> bool dispatch_device_if(ScalarType t, F&& f) {
  switch (t) {
#define TG_DTYPE(Name, HostT, DeviceT, ...)  \
  case ScalarType::Name:                     \
    if constexpr (Takes(ScalarType::Name)) { \
      f(DeviceT{});                          \
      return true;                           \
    } else {                                 \
      return false;                          \
    }
#include <tapegrad/tensor/dtypes.def>
#undef TG_DTYPE
  }
  return false;
}

// Every dtype, as its device type (__half, __nv_bfloat16 for the reduced ones).
template <class F> void dispatch_all(ScalarType t, F&& f) {
  const bool done = dispatch_device_if<kernels::any_dtype>(t, f);
  TG_INTERNAL_ASSERT(done, "dispatch_all: unknown dtype ", int(t));
}
// cuBLAS's/cuSPARSE's cudaDataType_t of a dtype (the list's CudaType column).
inline cudaDataType_t cuda_data_type(ScalarType t) {
  switch (t) {
#define TG_DTYPE(Name, HostT, DeviceT, Category, Compute, Rank, DlCode, DlBits, CudaType, ...) \
  case ScalarType::Name:                                                                       \
    return CudaType;
#include <tapegrad/tensor/dtypes.def>
#undef TG_DTYPE
  }
  TG_INTERNAL_ASSERT(false, "cuda_data_type: unknown dtype ", int(t));
  return CUDA_R_32F;
}

using kernels::dispatch_bytes;
using kernels::dispatch_compute;
using kernels::dispatch_floating;

template <class T> constexpr bool is_half_v = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;

template <class S> __device__ float to_float(S s) {
  if constexpr (std::is_same_v<S, __half>) return __half2float(s);
  else if constexpr (std::is_same_v<S, __nv_bfloat16>) return __bfloat162float(s);
  else return float(s);
}

template <class T> struct is_complex_t : std::false_type {};
template <class T> struct is_complex_t<complex<T>> : std::true_type {};

// Complex and real as on the host (tensor/elementwise.cpp): a real value is
// the real part; a complex one to a real dtype keeps its real part, to bool
// whether it is nonzero.
template <class D, class S> __device__ D convert(S s) {
  if constexpr (std::is_same_v<D, S>) {
    return s;
  } else if constexpr (is_complex_t<D>::value && is_complex_t<S>::value) {
    return D(s);
  } else if constexpr (is_complex_t<D>::value) {
    using P = decltype(D{}.re);
    return D(convert<P>(s), P(0));
  } else if constexpr (is_complex_t<S>::value) {
    if constexpr (std::is_same_v<D, bool>) return s.re != 0 || s.im != 0;
    else return convert<D>(s.re);
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
