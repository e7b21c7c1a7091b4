// Built when TAPEGRAD_CUDA is off or nvcc is missing: no device, clear errors.
#include <tapegrad/cuda/device.h>
#include <tapegrad/tensor/error.h>

namespace tg::cuda {

namespace {
[[noreturn]] void no_cuda(const char* op) {
  TG_ERROR(op, ": tapegrad was built without CUDA; reconfigure with "
           "-DTAPEGRAD_CUDA=ON on a machine with nvcc");
}
}  // namespace

bool is_built() { return false; }
bool is_available() { return false; }
int device_count() { return 0; }
DeviceProperties get_device_properties(int) { no_cuda("get_device_properties"); }
void self_test(int) { no_cuda("cuda::self_test"); }

}  // namespace tg::cuda
