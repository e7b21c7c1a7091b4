// The CUDA runtime built when TAPEGRAD_CUDA is off or nvcc is missing: no
// device, clear errors. (The kernel tables' nullptrs are in
// cuda/kernels/stub.cpp, a layer above.)
#include <tapegrad/cuda/allocator.h>
#include <tapegrad/cuda/device.h>
#include <tapegrad/cuda/capture.h>
#include <tapegrad/cuda/stream.h>
#include <tapegrad/tensor/error.h>
#include "cuda/runtime/allocators.h"
#include "cuda/runtime/stub.h"

namespace tg::cuda {

void detail::no_cuda(const char* op) {
  TG_ERROR(op,
           ": tapegrad was built without CUDA; reconfigure with "
           "-DTAPEGRAD_CUDA=ON on a machine with nvcc");
}
using detail::no_cuda;

bool is_built() { return false; }
bool is_available() { return false; }
int device_count() { return 0; }
DeviceProperties get_device_properties(int) { no_cuda("get_device_properties"); }
void self_test(int) { no_cuda("cuda::self_test"); }
void profiler_start() { no_cuda("cuda::profiler_start"); }
void profiler_stop() { no_cuda("cuda::profiler_stop"); }
void set_allow_tf32(bool) {}
bool allow_tf32() { return false; }

int current_device() { no_cuda("current_device"); }
void set_device(int) { no_cuda("set_device"); }
void synchronize(int) { no_cuda("cuda::synchronize"); }
bool Stream::query() const { no_cuda("Stream::query"); }
void Stream::synchronize() const { no_cuda("Stream::synchronize"); }
void Stream::wait_stream(const Stream&) const { no_cuda("Stream::wait_stream"); }
void Stream::wait(const Event&) const { no_cuda("Stream::wait"); }
Stream default_stream(int) { no_cuda("default_stream"); }
Stream current_stream(int) { no_cuda("current_stream"); }
void set_current_stream(const Stream&) { no_cuda("set_current_stream"); }
Stream stream_from_pool(int, bool) { no_cuda("stream_from_pool"); }
DeviceGuard::DeviceGuard(int) : prev_(0) { no_cuda("DeviceGuard"); }
DeviceGuard::~DeviceGuard() = default;
StreamGuard::StreamGuard(const Stream&) : prev_device_(0) { no_cuda("StreamGuard"); }
StreamGuard::~StreamGuard() = default;
Event::~Event() = default;
Event::Event(Event&& o) noexcept : event_(o.event_), device_(o.device_), timing_(o.timing_) {}
Event& Event::operator=(Event&&) noexcept { return *this; }
void Event::record(const Stream&) { no_cuda("Event::record"); }
void Event::record() { no_cuda("Event::record"); }
void Event::block(const Stream&) const { no_cuda("Event::block"); }
bool Event::query() const { return true; }
void Event::synchronize() const {}
float Event::elapsed_time(const Event&) const { no_cuda("Event::elapsed_time"); }

void delay(const Stream&, double) { no_cuda("cuda::delay"); }

MemoryStats memory_stats(int) { no_cuda("memory_stats"); }
void reset_peak_memory_stats(int) { no_cuda("reset_peak_memory_stats"); }
void empty_cache() {}
void record_stream(const void*, const Stream&) { no_cuda("record_stream"); }
HostMemoryStats host_memory_stats() { no_cuda("host_memory_stats"); }
void empty_host_cache() {}
void record_host_use(const void*, const Stream&) { no_cuda("record_host_use"); }
MemoryStats memory_stats(MempoolId, int) { no_cuda("memory_stats"); }

MempoolId graph_pool_handle() { no_cuda("graph_pool_handle"); }
bool is_current_stream_capturing() { return false; }
bool is_stream_capturing(const Stream&) { return false; }
namespace detail {
void check_not_capturing(const char*, int) {}
void check_not_capturing(const char*, const Stream&) {}
bool capture_random(int, uint64_t, const int64_t**, uint64_t*) { return false; }
bool keep_alive_with_capture(const Stream&, std::shared_ptr<void>) { return false; }
}  // namespace detail

}  // namespace tg::cuda

namespace tg::kernels {
Allocator* cuda_device_allocator(int) { return nullptr; }
Allocator* cuda_pinned_allocator() { return nullptr; }
}  // namespace tg::kernels
