// CUDA devices, streams and events (docs/STREAMS.md). No CUDA headers here: built
// without CUDA (cuda/stub.cpp) or run without a GPU, every call that needs a
// device throws tg::Error saying why; is_available() tells beforehand.
//
// Streams are plain values {device, handle}. Each device has its default
// stream (the legacy NULL stream), a pool of non-blocking streams handed out
// round-robin, and a per-thread current stream (the default one unless set).
// The library launches every kernel on the current stream of its device.
#pragma once

#include <cstdint>

namespace tg::cuda {

int current_device();
void set_device(int device);
// Waits for all work on a device (-1: the current one). The engine never
// calls it; tests and benchmarks do.
void synchronize(int device = -1);

class Event;

class Stream {
 public:
  Stream() = default;  // not a stream; see default_stream() etc.
  Stream(int device, void* handle) : device_(device), handle_(handle) {}
  int device_index() const { return device_; }
  void* handle() const { return handle_; }  // a cudaStream_t
  bool is_valid() const { return device_ >= 0; }
  bool is_default() const { return handle_ == nullptr; }
  // True when all work queued on the stream has finished.
  bool query() const;
  void synchronize() const;
  // This stream waits (on the device, not the host) for the work queued on
  // `other` so far.
  void wait_stream(const Stream& other) const;
  void wait(const Event& e) const;
  bool operator==(const Stream& o) const { return device_ == o.device_ && handle_ == o.handle_; }
  bool operator!=(const Stream& o) const { return !(*this == o); }

 private:
  int device_ = -1;
  void* handle_ = nullptr;
};

Stream default_stream(int device = -1);
Stream current_stream(int device = -1);
// Makes `s` the current stream of its device for this thread.
void set_current_stream(const Stream& s);
// A stream from the device's pool of non-blocking streams (round-robin).
Stream stream_from_pool(int device = -1);

// Sets the current device for a scope.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_;
};

// Makes `s` current (and its device the current device) for a scope.
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& s);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream prev_stream_;
  int prev_device_;
};

// A CUDA event, created lazily on the device of the first stream it is
// recorded on. Movable, not copyable.
class Event {
 public:
  explicit Event(bool enable_timing = false) : timing_(enable_timing) {}
  ~Event();
  Event(Event&& o) noexcept;
  Event& operator=(Event&& o) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  void record(const Stream& s);
  void record();  // on the current stream of the current device
  // `s` waits for the work recorded so far (no host sync). No-op when never
  // recorded.
  void block(const Stream& s) const;
  bool query() const;  // true when the recorded work is done (or never recorded)
  void synchronize() const;
  // Milliseconds between this event and `end` (both recorded with timing).
  float elapsed_time(const Event& end) const;
  bool is_created() const { return event_ != nullptr; }
  int device_index() const { return device_; }
  void* handle() const { return event_; }

 private:
  void* event_ = nullptr;
  int device_ = -1;
  bool timing_;
};

// Queues a kernel that spins for about `milliseconds` on `s` (for tests and
// benchmarks that must prove work is ordered by events, not host syncs).
void delay(const Stream& s, double milliseconds);

}  // namespace tg::cuda
