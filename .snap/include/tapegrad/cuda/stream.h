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

/// The current device of this thread.
int current_device();
/// Makes `device` current for this thread.
void set_device(int device);
/// Waits for all work on a device (-1: the current one). The engine never
/// calls it; tests and benchmarks do.
void synchronize(int device = -1);

class Event;

/// A CUDA stream of a device (a value: copies refer to the same stream).
class Stream {
 public:
  Stream() = default;  ///< not a stream; see default_stream() etc.
  /// The stream `handle` (a cudaStream_t; null: the legacy default stream) of `device`.
  Stream(int device, void* handle) : device_(device), handle_(handle) {}
  /// Its device, its cudaStream_t, whether it is a stream at all, whether it is the default stream.
  int device_index() const { return device_; }            ///< the device it was created on (-1 before)
  void* handle() const { return handle_; }                ///< its cudaStream_t (null: the legacy default stream)
  bool is_valid() const { return device_ >= 0; }          ///< whether it is a stream at all
  bool is_default() const { return handle_ == nullptr; }  ///< whether it is the legacy default stream
  /// True when all work queued on the stream has finished.
  bool query() const;
  /// Blocks the host until the queued work is done.
  /// Blocks the host until the recorded work is done.
  /// Blocks the host until the work is done.
  void synchronize() const;
  /// This stream waits (on the device, not the host) for the work queued on
  /// `other` so far.
  void wait_stream(const Stream& other) const;
  /// Waits (on the device) for the work recorded on `e`.
  void wait(const Event& e) const;
  /// Streams compare by device and handle.
  bool operator==(const Stream& o) const { return device_ == o.device_ && handle_ == o.handle_; }
  bool operator!=(const Stream& o) const { return !(*this == o); }  ///< not ==

 private:
  int device_ = -1;
  void* handle_ = nullptr;
};

/// The legacy default stream of a device (-1: the current one).
Stream default_stream(int device = -1);
/// This thread's current stream of a device (the default stream until set).
Stream current_stream(int device = -1);
/// Makes `s` the current stream of its device for this thread.
void set_current_stream(const Stream& s);
/// A stream from the device's pool of non-blocking streams (round-robin);
/// with high_priority, from a second pool of streams at the device's highest
/// priority (communication). Pool streams live as long as the process, so
/// memory used on them may be freed at any later time.
Stream stream_from_pool(int device = -1, bool high_priority = false);

/// Sets the current device for a scope.
class DeviceGuard {
 public:
  /// Makes `device` current until the guard ends.
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_;
};

/// Makes `s` current (and its device the current device) for a scope.
class StreamGuard {
 public:
  /// Makes `s` current until the guard ends.
  explicit StreamGuard(const Stream& s);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream prev_stream_;
  int prev_device_;
};

/// A CUDA event, created lazily on the device of the first stream it is
/// recorded on. Movable, not copyable.
class Event {
 public:
  /// An event (not created on the device until recorded).
  explicit Event(bool enable_timing = false) : timing_(enable_timing) {}
  ~Event();
  /// Moves the event.
  Event(Event&& o) noexcept;
  Event& operator=(Event&& o) noexcept;  ///< moves the event
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  /// Records the work queued on `s` so far.
  void record(const Stream& s);
  void record();  ///< on the current stream of the current device
  /// `s` waits for the work recorded so far (no host sync). No-op when never
  /// recorded.
  void block(const Stream& s) const;
  bool query() const;  ///< true when the recorded work is done (or never recorded)
  /// Blocks the host until the work is done.
  void synchronize() const;
  /// Milliseconds between this event and `end` (both recorded with timing).
  float elapsed_time(const Event& end) const;
  /// Whether it exists on a device, which device, and its cudaEvent_t.
  bool is_created() const { return event_ != nullptr; }
  int device_index() const { return device_; }  ///< the device it was created on (-1 before)
  void* handle() const { return event_; }       ///< its cudaEvent_t

 private:
  void* event_ = nullptr;
  int device_ = -1;
  bool timing_;
};

/// Queues a kernel that spins for about `milliseconds` on `s` (for tests and
/// benchmarks that must prove work is ordered by events, not host syncs).
void delay(const Stream& s, double milliseconds);

}  // namespace tg::cuda
