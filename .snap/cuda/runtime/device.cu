#include "cuda/runtime/check.h"
#include <tapegrad/cuda/device.h>
#include <tapegrad/cuda/stream.h>

#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <atomic>
#include <pthread.h>

namespace tg::cuda {

namespace {

std::atomic<bool> g_runtime_used{false}, g_forked_after_cuda{false};

// In a forked child of a process that used the CUDA runtime: poisoned.
void on_fork_child() {
  if (g_runtime_used.load()) g_forked_after_cuda.store(true);
}

int query_count() {
  static const int registered = pthread_atfork(nullptr, nullptr, on_fork_child);
  (void)registered;
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {  // no driver or no device: not available
    (void)cudaGetLastError();
    return 0;
  }
  g_runtime_used.store(n > 0);  // a child then says "forked", not "no device"
  return n;
}

__global__ void affine_kernel(int* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = 3 * i + 1;
}

__global__ void spin_kernel(long long cycles) {
  long long start = clock64();
  while (clock64() - start < cycles) {}
}

}  // namespace

namespace detail {
bool forked_after_cuda() { return g_forked_after_cuda.load(std::memory_order_relaxed); }

void check_device(int device, const char* op) {
  TG_CHECK(!forked_after_cuda(), op,
           ": CUDA cannot be used in a process forked after its parent used CUDA "
           "(the CUDA runtime does not survive fork). Start such workers with spawn or fork + exec (Python "
           "multiprocessing: the 'spawn' start method), or use the GPU only in the children; CPU tensors and "
           "autograd work here as usual");
  int n = device_count();
  TG_CHECK(n > 0, op,
           ": no CUDA device is available (cudaGetDeviceCount found "
           "none); check the driver and CUDA_VISIBLE_DEVICES");
  TG_CHECK(device >= 0 && device < n, op, ": device index ", device, " is out of range; ", n,
           " CUDA device(s) visible");
}

int resolve_device(int device, const char* op) {
  if (device < 0) device = current_device();
  check_device(device, op);
  return device;
}
}  // namespace detail
using detail::check_device;

void delay(const Stream& s, double milliseconds) {
  TG_CHECK(s.is_valid(), "cuda::delay: not a stream");
  DeviceGuard g(s.device_index());
  // The clock-rate query costs hundreds of microseconds: once per device.
  static std::atomic<int> clock_khz[64] = {};
  int khz = s.device_index() < 64 ? clock_khz[s.device_index()].load() : 0;
  if (khz <= 0) {
    if (cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, s.device_index()) != cudaSuccess || khz <= 0) {
      (void)cudaGetLastError();
      khz = 2000000;  // assume 2 GHz
    }
    if (s.device_index() < 64) clock_khz[s.device_index()].store(khz);
  }
  long long cycles = (long long)(milliseconds * double(khz));
  spin_kernel<<<1, 1, 0, static_cast<cudaStream_t>(s.handle())>>>(cycles);
  TG_CUDA_CHECK(cudaGetLastError(), "cuda::delay");
}

bool is_built() { return true; }

int device_count() {
  static const int n = query_count();
  return n;
}

bool is_available() { return device_count() > 0; }

DeviceProperties get_device_properties(int device) {
  check_device(device, "get_device_properties");
  cudaDeviceProp p{};
  TG_CUDA_CHECK(cudaGetDeviceProperties(&p, device), "get_device_properties");
  DeviceProperties r;
  r.name = p.name;
  r.major = p.major;
  r.minor = p.minor;
  r.total_memory = int64_t(p.totalGlobalMem);
  r.multiprocessor_count = p.multiProcessorCount;
  r.l2_cache_size = p.l2CacheSize;
  return r;
}

void profiler_start() { TG_CUDA_CHECK(cudaProfilerStart(), "cuda::profiler_start"); }
void profiler_stop() { TG_CUDA_CHECK(cudaProfilerStop(), "cuda::profiler_stop"); }

void self_test(int device) {
  check_device(device, "cuda::self_test");
  TG_CUDA_CHECK(cudaSetDevice(device), "cuda::self_test");
  constexpr int n = 1000;
  int* d = nullptr;
  TG_CUDA_CHECK(cudaMalloc(&d, n * sizeof(int)), "cuda::self_test");
  affine_kernel<<<(n + 255) / 256, 256>>>(d, n);
  cudaError_t launch = cudaGetLastError();
  int h[n];
  cudaError_t copy = cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
  cudaFree(d);
  TG_CUDA_CHECK(launch, "cuda::self_test (kernel launch)");
  TG_CUDA_CHECK(copy, "cuda::self_test");
  for (int i = 0; i < n; ++i)
    TG_CHECK(h[i] == 3 * i + 1, "cuda::self_test: element ", i, " is ", h[i], ", expected ", 3 * i + 1);
}

}  // namespace tg::cuda
