// The CUDA caching allocator (see allocator.h for the rules).
#include <tapegrad/cuda/allocator.h>
#include <tapegrad/cuda/capture.h>

#include <deque>
#include <mutex>
#include <set>
#include <unordered_map>
#include <vector>

#include <cuda_runtime_api.h>

#include "cuda/runtime/check.h"
#include <tapegrad/cuda/device.h>
#include <tapegrad/tensor/allocator.h>
#include "cuda/runtime/pool.h"
#include "cuda/runtime/allocators.h"

namespace tg::cuda {

namespace {

constexpr size_t kRound = 512;
constexpr size_t kSmallRequest = size_t(1) << 20;   // <= 1 MiB: small pool
constexpr size_t kSmallSegment = size_t(2) << 20;   // small pool segments
constexpr size_t kLargeRound = size_t(2) << 20;     // large segments: 2 MiB multiples
constexpr size_t kLargeSplitMin = size_t(1) << 20;  // split a large block above this rest
constexpr int kMaxDevices = 64;

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

struct Block {
  cudaStream_t stream = nullptr;
  uint64_t pool_id = 0;  // 0: the shared pool; else a graph's private pool
  size_t size = 0;
  char* ptr = nullptr;
  bool small = false;
  bool allocated = false;
  Block* prev = nullptr;  // neighbours within the segment
  Block* next = nullptr;
  std::vector<cudaStream_t> stream_uses;  // other streams, from record_stream
  int pending_events = 0;
};

struct BlockLess {
  bool operator()(const Block* a, const Block* b) const {
    if (a->stream != b->stream) return uintptr_t(a->stream) < uintptr_t(b->stream);
    if (a->pool_id != b->pool_id) return a->pool_id < b->pool_id;
    if (a->size != b->size) return a->size < b->size;
    return uintptr_t(a->ptr) < uintptr_t(b->ptr);
  }
};

std::string mib(size_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f MiB", double(bytes) / double(1 << 20));
  return buf;
}

class DeviceCachingAllocator final : public Allocator {
 public:
  explicit DeviceCachingAllocator(int device) : device_(device) {}

  Device device() const override { return Device(DeviceType::CUDA, device_); }

  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    DeviceGuard guard(device_);
    cudaStream_t stream = static_cast<cudaStream_t>(current_stream(device_).handle());
    size_t size = round_up(nbytes, kRound);
    bool small = size <= kSmallRequest;
    std::lock_guard<std::mutex> lock(mu_);
    // A capturing stream allocates from its graph's private pool; while any
    // capture is underway, events are not queried (illegal under capture).
    // The stream may be one forked from the capturing stream: the capture's
    // id, not the stream, names the pool.
    uint64_t pool_id = 0;
    if (!capture_pool_.empty() && stream != nullptr) {
      cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
      unsigned long long id = 0;
      if (cudaStreamGetCaptureInfo(stream, &status, &id) != cudaSuccess) (void)cudaGetLastError();
      else if (status == cudaStreamCaptureStatusActive)
        if (auto c = capture_pool_.find(id); c != capture_pool_.end()) pool_id = c->second;
    }
    if (capture_pool_.empty()) process_events();
    auto& pool = small ? small_free_ : large_free_;
    Block key;
    key.stream = stream;
    key.pool_id = pool_id;
    key.size = size;
    const size_t seg_size = small ? kSmallSegment : round_up(size, kLargeRound);
    PoolState* ps = pool_id ? &pools_[pool_id] : nullptr;
    Block* block = take_free(pool, key);
    if (!block && ps && !ps->held.empty()) {
      // Fresh memory before the blocks whose reuse is delayed; those only
      // when the device has none left.
      block = new_segment(seg_size, stream, small, nbytes, pool_id, /*may_fail=*/true);
      if (!block) {
        release_held(*ps, ps->held.size());
        block = take_free(pool, key);
      }
    }
    if (!block) block = new_segment(seg_size, stream, small, nbytes, pool_id);
    size_t rest = block->size - size;
    if ((small && rest >= kRound) || (!small && rest > kLargeSplitMin)) {
      Block* r = new Block;
      r->stream = block->stream;
      r->pool_id = block->pool_id;
      r->small = block->small;
      r->ptr = block->ptr + size;
      r->size = rest;
      r->prev = block;
      r->next = block->next;
      if (block->next) block->next->prev = r;
      block->next = r;
      block->size = size;
      pool.insert(r);
    }
    block->allocated = true;
    allocated_[block->ptr] = block;
    if (ps) ps->allocated_bytes += int64_t(block->size);
    stats_.allocated_bytes += int64_t(block->size);
    stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
    stats_.num_allocs += 1;
    return block->ptr;
  }

  // Never throws (storage destructors call it).
  void deallocate(void* ptr, size_t) override {
    if (!ptr) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = allocated_.find(ptr);
    if (it == allocated_.end()) return;  // not ours: nothing sensible to do
    Block* block = it->second;
    allocated_.erase(it);
    stats_.allocated_bytes -= int64_t(block->size);
    PoolState* ps = block->pool_id ? &pools_[block->pool_id] : nullptr;
    if (ps) ps->allocated_bytes -= int64_t(block->size);
    stats_.num_frees += 1;
    if (ps && ps->capturing > 0 && ps->reuse_delay > 0 && block->stream_uses.empty()) {
      // Reused only after reuse_delay more bytes of the pool are freed
      // (begin_capture); it stays `allocated` so no neighbour merges it.
      ps->held.push_back(block);
      ps->held_bytes += block->size;
      while (ps->held_bytes > ps->reuse_delay)
        release_held(*ps, 1);  // the oldest first
      return;
    }
    if (!block->stream_uses.empty() && !capture_pool_.empty()) {
      // Events cannot be recorded and queried safely while a capture is
      // underway: the block waits until the captures end.
      deferred_.push_back(block);
      return;
    }
    free_after_uses(block);
  }

  // Frees `block`, or, when other streams used it, records an event on each
  // and frees it once they have all completed (process_events).
  void free_after_uses(Block* block) {
    if (!block->stream_uses.empty()) {
      int prev = -1;
      (void)cudaGetDevice(&prev);
      (void)cudaSetDevice(device_);
      for (cudaStream_t s : block->stream_uses) {
        cudaEvent_t e;
        if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) == cudaSuccess &&
            cudaEventRecord(e, s) == cudaSuccess) {
          events_.emplace_back(e, block);
          block->pending_events += 1;
        } else {
          (void)cudaGetLastError();
          (void)cudaStreamSynchronize(s);  // fall back to waiting
        }
      }
      (void)cudaSetDevice(prev);
      block->stream_uses.clear();
      if (block->pending_events > 0) {
        stats_.pending_event_blocks += 1;
        return;
      }
    }
    free_block(block);
  }

  void record_stream(const void* ptr, cudaStream_t s) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = allocated_.find(const_cast<void*>(ptr));
    TG_CHECK(it != allocated_.end(), "record_stream: ", ptr,
             " is not the start of a block "
             "of the CUDA caching allocator on device ",
             device_, "; pass a storage's data pointer (t.impl()->storage()->data())");
    Block* b = it->second;
    if (s == b->stream) return;
    for (cudaStream_t u : b->stream_uses)
      if (u == s) return;
    b->stream_uses.push_back(s);
  }

  // ---- graph-private pools (graphs/graph.cpp) -------------------------------------
  void begin_capture(uint64_t pool_id, unsigned long long capture_id, size_t reuse_delay) {
    std::lock_guard<std::mutex> lock(mu_);
    capture_pool_[capture_id] = pool_id;
    PoolState& ps = pools_[pool_id];
    ps.use_count += 1;
    ps.reuse_delay = ps.capturing++ ? std::min(ps.reuse_delay, reuse_delay) : reuse_delay;
  }
  void end_capture(unsigned long long capture_id) {
    std::lock_guard<std::mutex> lock(mu_);
    auto c = capture_pool_.find(capture_id);
    if (c == capture_pool_.end()) return;
    PoolState& ps = pools_[c->second];
    if (--ps.capturing == 0) release_held(ps, ps.held.size());  // reusable by the next capture
    capture_pool_.erase(c);
    if (!capture_pool_.empty()) return;
    std::vector<Block*> later;
    later.swap(deferred_);
    for (Block* b : later)
      free_after_uses(b);  // as deallocate() would have
  }
  // A graph that used pool_id is gone: when none is left, the pool's wholly
  // free segments go back to the device (now, unless a capture is underway;
  // else at the next empty_cache()).
  void release_pool(uint64_t pool_id) {
    DeviceGuard guard(device_);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pools_.find(pool_id);
    if (it == pools_.end() || --it->second.use_count > 0) return;
    it->second.released = true;
    if (capture_pool_.empty()) release_cached();
  }
  MemoryStats pool_stats(uint64_t pool_id) {
    std::lock_guard<std::mutex> lock(mu_);
    MemoryStats m;
    auto it = pools_.find(pool_id);
    if (it == pools_.end()) return m;
    m.allocated_bytes = it->second.allocated_bytes;
    m.reserved_bytes = it->second.reserved_bytes;
    m.num_segments = it->second.segments;
    return m;
  }

  void empty_cache() {
    DeviceGuard guard(device_);
    std::lock_guard<std::mutex> lock(mu_);
    TG_CHECK(capture_pool_.empty(),
             "empty_cache: cannot run while a CUDA graph is being "
             "captured on device ",
             device_,
             " (it would free memory the capture uses); call it "
             "after capture_end()");
    for (auto& [e, b] : events_)
      (void)cudaEventSynchronize(e);
    process_events();
    release_cached();
  }

  MemoryStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }
  void reset_peak() {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.peak_allocated_bytes = stats_.allocated_bytes;
    stats_.peak_reserved_bytes = stats_.reserved_bytes;
  }

 private:
  // cudaMalloc under the Relaxed capture mode: a capture on this thread in
  // Global mode would otherwise refuse it (it is not stream-ordered work, so
  // it is safe; the segment then belongs to the capture's pool).
  static cudaError_t malloc_relaxed(void** p, size_t bytes) {
    detail::RelaxedCaptureMode relaxed;
    return cudaMalloc(p, bytes);
  }

  // The best-fitting free block of `key`'s stream and pool, taken out of
  // `pool`, or null.
  static Block* take_free(std::set<Block*, BlockLess>& pool, Block& key) {
    auto it = pool.lower_bound(&key);
    if (it == pool.end() || (*it)->stream != key.stream || (*it)->pool_id != key.pool_id) return nullptr;
    Block* b = *it;
    pool.erase(it);
    return b;
  }

  // May fail (returns null) only on running out of device memory, and only
  // when asked to.
  Block* new_segment(size_t seg_size, cudaStream_t stream, bool small, size_t requested, uint64_t pool_id,
                     bool may_fail = false) {
    void* p = nullptr;
    cudaError_t err = malloc_relaxed(&p, seg_size);
    if (err == cudaErrorMemoryAllocation && may_fail) {
      (void)cudaGetLastError();
      return nullptr;
    }
    if (err == cudaErrorMemoryAllocation && capture_pool_.empty()) {
      (void)cudaGetLastError();
      stats_.num_cache_flushes += release_cached();
      err = malloc_relaxed(&p, seg_size);
    }
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      stats_.num_ooms += 1;
      size_t free_b = 0, total_b = 0;
      (void)cudaMemGetInfo(&free_b, &total_b);
      TG_ERROR("CUDA out of memory: tried to allocate ", requested, " bytes (", mib(requested), ") on device ", device_,
               "; the device has ", mib(free_b), " free of ", mib(total_b), ", and tapegrad holds ",
               mib(size_t(stats_.allocated_bytes)), " in tensors and ", mib(size_t(stats_.reserved_bytes)),
               " reserved (", cudaGetErrorName(err),
               "). Free tensors, call tg::cuda::empty_cache(), or "
               "reduce the problem size");
    }
    Block* b = new Block;
    b->stream = stream;
    b->pool_id = pool_id;
    b->small = small;
    b->ptr = static_cast<char*>(p);
    b->size = seg_size;
    if (pool_id) {
      pools_[pool_id].reserved_bytes += int64_t(seg_size);
      pools_[pool_id].segments += 1;
    }
    stats_.reserved_bytes += int64_t(seg_size);
    stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
    stats_.num_segments += 1;
    stats_.num_cuda_mallocs += 1;
    return b;
  }

  // Merges `next` (the block right after `b`) into `b` and deletes it.
  static void absorb_next(Block* b, Block* next) {
    b->size += next->size;
    b->next = next->next;
    if (next->next) next->next->prev = b;
    delete next;
  }

  void free_block(Block* b) {
    b->allocated = false;
    auto& pool = b->small ? small_free_ : large_free_;
    if (b->prev && !b->prev->allocated) {  // merge into the free block before
      Block* p = b->prev;
      pool.erase(p);
      absorb_next(p, b);
      b = p;
    }
    if (b->next && !b->next->allocated) {  // absorb the free block after
      Block* n = b->next;
      pool.erase(n);
      absorb_next(b, n);
    }
    pool.insert(b);
  }

  // Frees blocks whose other-stream work has completed.
  void process_events() {
    for (auto it = events_.begin(); it != events_.end();) {
      cudaError_t q = cudaEventQuery(it->first);
      if (q == cudaErrorNotReady) {
        (void)cudaGetLastError();
        ++it;
        continue;
      }
      (void)cudaEventDestroy(it->first);
      Block* b = it->second;
      it = events_.erase(it);
      if (--b->pending_events == 0) {
        stats_.pending_event_blocks -= 1;
        free_block(b);
      }
    }
  }

  // cudaFree every cached segment that is free as a whole (of the shared
  // pool, or of a private pool no graph uses any more); returns how many.
  int64_t release_cached() {
    int64_t n = 0;
    for (auto* pool : {&small_free_, &large_free_}) {
      for (auto it = pool->begin(); it != pool->end();) {
        Block* b = *it;
        if (b->prev || b->next || (b->pool_id && !pools_[b->pool_id].released)) {
          ++it;
          continue;
        }
        (void)cudaFree(b->ptr);
        stats_.reserved_bytes -= int64_t(b->size);
        stats_.num_segments -= 1;
        if (b->pool_id) {
          pools_[b->pool_id].reserved_bytes -= int64_t(b->size);
          pools_[b->pool_id].segments -= 1;
        }
        it = pool->erase(it);
        delete b;
        ++n;
      }
    }
    return n;
  }

  int device_;
  std::mutex mu_;
  std::set<Block*, BlockLess> small_free_, large_free_;
  std::unordered_map<void*, Block*> allocated_;
  std::deque<std::pair<cudaEvent_t, Block*>> events_;
  MemoryStats stats_;
  struct PoolState {
    int use_count = 0;  // graphs (and captures underway) using the pool
    bool released = false;
    int64_t allocated_bytes = 0, reserved_bytes = 0, segments = 0;
    // While captures allocate from the pool: the bytes freed after a block
    // before it is reused, and the freed blocks waiting, oldest first.
    int capturing = 0;
    size_t reuse_delay = 0, held_bytes = 0;
    std::deque<Block*> held;
  };

  // Makes the `n` oldest held blocks of `ps` reusable.
  void release_held(PoolState& ps, size_t n) {
    for (; n > 0; --n) {
      Block* b = ps.held.front();
      ps.held.pop_front();
      ps.held_bytes -= b->size;
      free_block(b);
    }
  }
  std::unordered_map<uint64_t, PoolState> pools_;
  std::unordered_map<unsigned long long, uint64_t> capture_pool_;  // capture id -> pool
  std::vector<Block*> deferred_;                                   // freed during a capture, used on other streams
};

DeviceCachingAllocator* g_allocators[kMaxDevices] = {};
std::mutex g_allocators_mu;

DeviceCachingAllocator& allocator(int device, const char* op) {
  detail::check_device(device, op);
  TG_CHECK(device < kMaxDevices, op, ": device index ", device, " exceeds the ", kMaxDevices,
           " devices the allocator supports");
  std::lock_guard<std::mutex> lock(g_allocators_mu);
  // Never destroyed: tensors with static lifetime may outlive everything.
  if (!g_allocators[device]) g_allocators[device] = new DeviceCachingAllocator(device);
  return *g_allocators[device];
}

Allocator* get_allocator(int device) { return &allocator(device, "allocate"); }

}  // namespace

MemoryStats memory_stats(int device) {
  return allocator(detail::resolve_device(device, "memory_stats"), "memory_stats").stats();
}

void reset_peak_memory_stats(int device) {
  allocator(detail::resolve_device(device, "reset_peak_memory_stats"), "reset_peak_memory_stats").reset_peak();
}

void empty_cache() {
  int n = device_count();
  for (int d = 0; d < n && d < kMaxDevices; ++d) {
    DeviceCachingAllocator* a = nullptr;
    {
      std::lock_guard<std::mutex> lock(g_allocators_mu);
      a = g_allocators[d];
    }
    if (a) a->empty_cache();
  }
}

namespace detail {
void begin_allocate_to_pool(int device, uint64_t pool_id, uint64_t capture_id, size_t reuse_delay) {
  allocator(device, "capture_begin").begin_capture(pool_id, capture_id, reuse_delay);
}
void end_allocate_to_pool(int device, uint64_t capture_id) { allocator(device, "capture_end").end_capture(capture_id); }
void release_pool(int device, uint64_t pool_id) { allocator(device, "reset").release_pool(pool_id); }
}  // namespace detail

MemoryStats memory_stats(MempoolId pool, int device) {
  return allocator(detail::resolve_device(device, "memory_stats"), "memory_stats").pool_stats(pool.first);
}

void record_stream(const void* ptr, const Stream& s) {
  TG_CHECK(s.is_valid(), "record_stream: not a stream");
  allocator(s.device_index(), "record_stream").record_stream(ptr, static_cast<cudaStream_t>(s.handle()));
}

}  // namespace tg::cuda

namespace tg::kernels {
Allocator* cuda_device_allocator(int index) { return cuda::get_allocator(index); }
}  // namespace tg::kernels
