// CUDA streams, events and guards (compiled only with the CUDA backend).
#include <tapegrad/cuda/stream.h>

#include <atomic>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include "cuda/runtime/check.h"
#include <tapegrad/cuda/device.h>
#include <tapegrad/cuda/capture.h>

namespace tg::cuda {

namespace {

using detail::check_device;

constexpr int kPoolSize = 8;
constexpr int kMaxDevices = 64;

struct DevicePool {
  std::once_flag once;
  cudaStream_t streams[kPoolSize] = {};
  std::atomic<uint32_t> next{0};
};
DevicePool g_pools[kMaxDevices], g_high_pools[kMaxDevices];

// The current stream per device for this thread (nullptr handle: default).
thread_local void* t_current[kMaxDevices] = {};
thread_local bool t_set_a_stream = false;  // set_current_stream was given a non-default stream

cudaStream_t as_stream(const Stream& s) { return static_cast<cudaStream_t>(s.handle()); }

// A stream or event query's answer: false while its work is pending
// (clearing that error), true when done; other errors are raised.
bool query_done(cudaError_t err, const char* what) {
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  TG_CUDA_CHECK(err, what);
  return true;
}

}  // namespace

int current_device() {
  int d = 0;
  check_device(0, "current_device");
  TG_CUDA_CHECK(cudaGetDevice(&d), "current_device");
  return d;
}

void set_device(int device) {
  check_device(device, "set_device");
  TG_CUDA_CHECK(cudaSetDevice(device), "set_device");
}

namespace detail {
namespace {
std::atomic<BadIndex*> g_bad_index{nullptr};
std::mutex g_bad_index_mutex;
}  // namespace

BadIndex* bad_index_record() {
  BadIndex* r = g_bad_index.load(std::memory_order_acquire);
  if (r) return r;
  std::lock_guard<std::mutex> l(g_bad_index_mutex);
  r = g_bad_index.load(std::memory_order_relaxed);
  if (r) return r;
  RelaxedCaptureMode relaxed;  // not stream work: legal beside a capture
  void* p = nullptr;
  TG_CUDA_CHECK(cudaHostAlloc(&p, sizeof(BadIndex), cudaHostAllocMapped | cudaHostAllocPortable),
                "index kernels (the record of out-of-range indices)");
  r = static_cast<BadIndex*>(p);
  r->op = 0;
  g_bad_index.store(r, std::memory_order_release);  // kept for the process's life
  return r;
}

// The registered messages, by id (BadIndex::message).
std::mutex g_messages_mutex;
std::vector<std::pair<std::string, std::string>>& messages() {
  static auto* m = new std::vector<std::pair<std::string, std::string>>();  // never destroyed
  return *m;
}

int register_device_message(const char* op, const char* what) {
  std::lock_guard<std::mutex> l(g_messages_mutex);
  auto& m = messages();
  for (size_t i = 0; i < m.size(); ++i)
    if (m[i].first == op && m[i].second == what) return int(i);
  m.emplace_back(op, what);
  return int(m.size() - 1);
}

void raise_bad_index() {
  BadIndex* r = g_bad_index.load(std::memory_order_acquire);
  if (!r || r->op == 0) return;
  const int op = r->op, message = r->message;
  const long long value = r->value, size = r->size;
  r->op = 0;
  if (op == kLinalgInfo) {
    std::pair<std::string, std::string> text("a linear algebra op", "failed with info %v");
    {
      std::lock_guard<std::mutex> l(g_messages_mutex);
      if (message >= 0 && size_t(message) < messages().size()) text = messages()[size_t(message)];
    }
    std::string what = text.second;
    const size_t at = what.find("%v");
    if (at != std::string::npos) what.replace(at, 2, std::to_string(value));
    TG_ERROR(text.first, ": ", what, " (batch element ", size,
             " in batch order; found on the device while a captured CUDA graph ran, and reported at the first "
             "synchronization after it: results computed from it since are not valid)");
  }
  const char* name = op == kBadIndexSelect  ? "index_select"
                     : op == kBadGather     ? "gather"
                     : op == kBadScatterAdd ? "scatter_add"
                                            : "sparse tensor indices";
  TG_ERROR(name, ": a CUDA kernel met index ", value, ", out of range for a dimension of size ", size,
           ", and skipped it, so results computed since are wrong. The op checked the index range when it "
           "was called: the index tensor was changed afterwards (written in place, or a sparse tensor's "
           "indices written through _indices()). Build indices afresh; this is reported at the first "
           "synchronization after the kernel ran");
}
}  // namespace detail

void synchronize(int device) {
  DeviceGuard g(detail::resolve_device(device, "cuda::synchronize"));
  detail::check_not_capturing("cuda::synchronize");
  TG_CUDA_CHECK(cudaDeviceSynchronize(), "cuda::synchronize");
  detail::raise_bad_index();
}

bool Stream::query() const {
  TG_CHECK(is_valid(), "Stream::query: not a stream");
  detail::check_not_capturing("Stream::query", *this);
  DeviceGuard g(device_);
  return query_done(cudaStreamQuery(as_stream(*this)), "Stream::query");
}

void Stream::synchronize() const {
  TG_CHECK(is_valid(), "Stream::synchronize: not a stream");
  detail::check_not_capturing("Stream::synchronize", *this);
  DeviceGuard g(device_);
  TG_CUDA_CHECK(cudaStreamSynchronize(as_stream(*this)), "Stream::synchronize");
  detail::raise_bad_index();
}

void Stream::wait(const Event& e) const { e.block(*this); }

void Stream::wait_stream(const Stream& other) const {
  if (other == *this) return;
  Event e;
  e.record(other);
  e.block(*this);
}

Stream default_stream(int device) { return Stream(detail::resolve_device(device, "default_stream"), nullptr); }

Stream current_stream(int device) {
  device = detail::resolve_device(device, "current_stream");
  return Stream(device, t_current[device]);
}

void set_current_stream(const Stream& s) {
  TG_CHECK(s.is_valid(), "set_current_stream: not a stream");
  check_device(s.device_index(), "set_current_stream");
  t_current[s.device_index()] = s.handle();
  if (s.handle()) t_set_a_stream = true;
}

namespace detail {
bool thread_set_a_stream() { return t_set_a_stream; }
}  // namespace detail

Stream stream_from_pool(int device, bool high_priority) {
  device = detail::resolve_device(device, "stream_from_pool");
  TG_CHECK(device < kMaxDevices, "stream_from_pool: device ", device, " exceeds ", kMaxDevices);
  DevicePool& p = high_priority ? g_high_pools[device] : g_pools[device];
  std::call_once(p.once, [&] {
    DeviceGuard g(device);
    int least = 0, greatest = 0;
    TG_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest), "stream_from_pool");
    for (auto& s : p.streams)
      TG_CUDA_CHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, high_priority ? greatest : least),
                    "stream_from_pool");
  });
  uint32_t i = p.next.fetch_add(1) % kPoolSize;
  return Stream(device, p.streams[i]);
}

DeviceGuard::DeviceGuard(int device) : prev_(current_device()) {
  if (device != prev_) set_device(device);
}
DeviceGuard::~DeviceGuard() {
  int now = -1;
  if (cudaGetDevice(&now) == cudaSuccess && now != prev_) (void)cudaSetDevice(prev_);
}

StreamGuard::StreamGuard(const Stream& s)
    : prev_stream_(current_stream(s.device_index())), prev_device_(current_device()) {
  set_device(s.device_index());
  set_current_stream(s);
}
StreamGuard::~StreamGuard() {
  t_current[prev_stream_.device_index()] = prev_stream_.handle();
  (void)cudaSetDevice(prev_device_);
}

// ---- Event -----------------------------------------------------------------------------

Event::~Event() {
  if (event_) {
    int prev = -1;
    (void)cudaGetDevice(&prev);
    (void)cudaSetDevice(device_);
    (void)cudaEventDestroy(static_cast<cudaEvent_t>(event_));
    (void)cudaSetDevice(prev);
  }
}

Event::Event(Event&& o) noexcept : event_(o.event_), device_(o.device_), timing_(o.timing_) {
  o.event_ = nullptr;
  o.device_ = -1;
}

Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    this->~Event();
    event_ = o.event_;
    device_ = o.device_;
    timing_ = o.timing_;
    o.event_ = nullptr;
    o.device_ = -1;
  }
  return *this;
}

void Event::record(const Stream& s) {
  TG_CHECK(s.is_valid(), "Event::record: not a stream");
  DeviceGuard g(s.device_index());
  if (!event_) {
    cudaEvent_t e;
    TG_CUDA_CHECK(cudaEventCreateWithFlags(&e, timing_ ? cudaEventDefault : cudaEventDisableTiming), "Event::record");
    event_ = e;
    device_ = s.device_index();
  }
  TG_CHECK(device_ == s.device_index(), "Event::record: the event belongs to device ", device_,
           " but the stream to device ", s.device_index());
  TG_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event_), as_stream(s)), "Event::record");
}

void Event::record() { record(current_stream()); }

void Event::block(const Stream& s) const {
  if (!event_) return;
  DeviceGuard g(s.device_index());
  TG_CUDA_CHECK(cudaStreamWaitEvent(as_stream(s), static_cast<cudaEvent_t>(event_), 0), "Event::block");
}

bool Event::query() const {
  if (!event_) return true;
  detail::check_not_capturing("Event::query", device_);
  return query_done(cudaEventQuery(static_cast<cudaEvent_t>(event_)), "Event::query");
}

void Event::synchronize() const {
  if (!event_) return;
  detail::check_not_capturing("Event::synchronize", device_);
  TG_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event_)), "Event::synchronize");
  detail::raise_bad_index();
}

float Event::elapsed_time(const Event& end) const {
  TG_CHECK(timing_ && end.timing_, "Event::elapsed_time: both events need enable_timing=true");
  TG_CHECK(event_ && end.event_, "Event::elapsed_time: both events must be recorded first");
  float ms = 0;
  TG_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(event_), static_cast<cudaEvent_t>(end.event_)),
                "Event::elapsed_time");
  return ms;
}

}  // namespace tg::cuda
