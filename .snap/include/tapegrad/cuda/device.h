// CUDA device queries. Built without CUDA (cuda/stub.cpp), or run without a
// GPU, is_available() is false, device_count() is 0 and the calls that need
// a device throw tg::Error saying why.
#pragma once

#include <cstdint>
#include <string>

namespace tg::cuda {

/// What get_device_properties() reports of a GPU.
struct DeviceProperties {
  std::string name;              ///< e.g. "NVIDIA H100 80GB HBM3"
  int major = 0;                 ///< compute capability, major
  int minor = 0;                 ///< compute capability, minor
  int64_t total_memory = 0;      ///< bytes
  int multiprocessor_count = 0;  ///< SMs
  int64_t l2_cache_size = 0;     ///< bytes
};

///@{

/// Whether this build has the CUDA backend compiled in (is_built), whether a
/// GPU can be used (is_available), how many there are, and what one is.
bool is_built();
bool is_available();
int device_count();
DeviceProperties get_device_properties(int device = 0);
///@}
/// Runs a trivial kernel on `device` and checks its result: proves the
/// toolchain, the driver and the architecture list fit together.
void self_test(int device = 0);

///@{

/// Brackets the region an external profiler collects (cudaProfilerStart /
/// cudaProfilerStop, as torch.cuda.profiler.start/stop): run Nsight Compute
/// with `--profile-from-start off` to profile only what lies between.
void profiler_start();
void profiler_stop();
///@}

///@{

/// Float32 GEMMs may use TF32 tensor cores (10-bit mantissa inputs, f32
/// accumulation). Off by default, as PyTorch's matmul.
void set_allow_tf32(bool allow);
bool allow_tf32();
///@}

}  // namespace tg::cuda
