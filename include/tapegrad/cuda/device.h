// CUDA device queries. Built without CUDA (cuda/stub.cpp), or run without a
// GPU, is_available() is false, device_count() is 0 and the calls that need
// a device throw tg::Error saying why.
#pragma once

#include <cstdint>
#include <string>

namespace tg::cuda {

struct DeviceProperties {
  std::string name;
  int major = 0, minor = 0;  // compute capability
  int64_t total_memory = 0;  // bytes
  int multiprocessor_count = 0;
};

// Whether this build has the CUDA backend compiled in.
bool is_built();
bool is_available();
int device_count();
DeviceProperties get_device_properties(int device = 0);
// Runs a trivial kernel on `device` and checks its result: proves the
// toolchain, the driver and the architecture list fit together.
void self_test(int device = 0);

// Float32 GEMMs may use TF32 tensor cores (10-bit mantissa inputs, f32
// accumulation). Off by default, as PyTorch's matmul.
void set_allow_tf32(bool allow);
bool allow_tf32();

}  // namespace tg::cuda
