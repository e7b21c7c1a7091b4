#include <tapegrad/tensor/allocator.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include <unistd.h>

#include <tapegrad/tensor/error.h>
#include "cuda/runtime/allocators.h"

namespace tg {
namespace {

constexpr size_t kAlignment = 64;
// Blocks of at least kCacheMin bytes are kept after free and reused for a
// request of the same size class: fresh large blocks come from mmap and
// cost a page fault per 4 KiB on first touch, which dominated
// out-of-place elementwise ops. Size classes: 8 steps per power of two.
constexpr size_t kCacheMin = size_t(1) << 16;
constexpr size_t kCacheMaxBytes = size_t(2) << 30;

size_t size_class(size_t n) {
  if (n < kCacheMin) return (n + kAlignment - 1) / kAlignment * kAlignment;
  size_t p = size_t(1) << (63 - __builtin_clzll(n));  // highest power <= n
  size_t step = p / 8;
  return (n + step - 1) / step * step;
}

// Small blocks (<= 512 bytes: scalars, biases, per-sample rows) are kept in
// per-thread free lists: the engine allocates and frees several per node,
// and aligned_alloc/free of tiny chunks was a third of its overhead.
constexpr size_t kSmallMax = 512;
constexpr size_t kSmallCap = 256;  // blocks kept per size class and thread

struct SmallCache {
  std::vector<void*> lists[kSmallMax / kAlignment];
  ~SmallCache();
};
thread_local int t_small_state = 0;  // 0: not made yet, 1: alive, 2: destroyed
SmallCache::~SmallCache() {
  t_small_state = 2;
  for (auto& l : lists)
    for (void* p : l)
      std::free(p);
}
SmallCache* small_cache() {
  if (t_small_state == 2) return nullptr;
  thread_local SmallCache cache;
  t_small_state = 1;
  return &cache;
}

class CpuAllocator final : public Allocator {
 public:
  // The largest block worth asking for: physical memory, at most 2^47.
  static size_t max_request() {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    const size_t cap = size_t(1) << 47;
    if (pages <= 0 || page <= 0) return cap;
    return std::min(cap, size_t(pages) * size_t(page));
  }

  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    size_t rounded = size_class(nbytes);
    void* p = rounded >= kCacheMin ? take_cached(rounded) : nullptr;
    if (rounded <= kSmallMax) {
      if (SmallCache* c = small_cache()) {
        auto& l = c->lists[rounded / kAlignment - 1];
        if (!l.empty()) {
          p = l.back();
          l.pop_back();
        }
      }
    }
    // One block larger than the machine's memory (or than x86-64 Linux's
    // 128 TiB of address space) cannot be used: refuse it rather than let
    // overcommit hand out pages that filling them would find missing
    // (sanitizer allocators abort on such requests too).
    static const size_t kMaxRequest = max_request();
    if (!p && rounded <= kMaxRequest) p = std::aligned_alloc(kAlignment, rounded);
    if (!p && rounded >= kCacheMin && rounded <= kMaxRequest) {  // out of memory: free the cache, retry
      empty_cache();
      p = std::aligned_alloc(kAlignment, rounded);
    }
    TG_CHECK(p != nullptr, "CPU allocator: out of memory allocating ", nbytes, " bytes (", live_.load(), " bytes live",
             rounded > kMaxRequest ? "; more than this machine's " : "",
             rounded > kMaxRequest ? std::to_string(kMaxRequest) + " bytes of memory" : std::string(),
             "); free tensors or reduce the problem size");
    int64_t live = live_.fetch_add(int64_t(nbytes)) + int64_t(nbytes);
    int64_t peak = peak_.load();
    while (live > peak && !peak_.compare_exchange_weak(peak, live)) {}
    allocs_.fetch_add(1);
    live_allocs_.fetch_add(1);
    return p;
  }
  void deallocate(void* ptr, size_t nbytes) override {
    if (!ptr) return;
    live_.fetch_sub(int64_t(nbytes));
    live_allocs_.fetch_sub(1);
    size_t rounded = size_class(nbytes);
    if (rounded <= kSmallMax && t_small_state == 1) {
      auto& l = small_cache()->lists[rounded / kAlignment - 1];
      if (l.size() < kSmallCap) {
        l.push_back(ptr);
        return;
      }
    }
    if (rounded >= kCacheMin) {
      std::lock_guard<std::mutex> g(mu_);
      if (cached_bytes_ + rounded <= kCacheMaxBytes) {
        cache_.emplace(rounded, ptr);
        cached_bytes_ += rounded;
        return;
      }
    }
    std::free(ptr);
  }

  void empty_cache() {
    std::lock_guard<std::mutex> g(mu_);
    for (auto& [size, p] : cache_)
      std::free(p);
    cache_.clear();
    cached_bytes_ = 0;
  }
  int64_t cached_bytes() {
    std::lock_guard<std::mutex> g(mu_);
    return int64_t(cached_bytes_);
  }
  Device device() const override { return Device(DeviceType::CPU); }

  AllocatorStats stats() { return {live_.load(), peak_.load(), allocs_.load(), live_allocs_.load(), cached_bytes()}; }
  void reset_peak() { peak_.store(live_.load()); }

 private:
  void* take_cached(size_t rounded) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = cache_.find(rounded);
    if (it == cache_.end()) return nullptr;
    void* p = it->second;
    cache_.erase(it);
    cached_bytes_ -= rounded;
    return p;
  }

  std::atomic<int64_t> live_{0}, peak_{0}, allocs_{0}, live_allocs_{0};
  std::mutex mu_;
  std::multimap<size_t, void*> cache_;
  size_t cached_bytes_ = 0;
};

CpuAllocator& cpu() {
  static CpuAllocator* a = new CpuAllocator();  // never destroyed: outlives
  return *a;                                    // static tensors
}

}  // namespace

Allocator* cpu_allocator() { return &cpu(); }
AllocatorStats cpu_allocator_stats() { return cpu().stats(); }
void reset_cpu_peak_bytes() { cpu().reset_peak(); }
void cpu_empty_cache() { cpu().empty_cache(); }

Allocator* allocator_for(Device d) {
  if (d.is_cpu()) return &cpu();
  Allocator* a = kernels::cuda_device_allocator(d.index());
  TG_CHECK(a != nullptr, "allocate: no allocator for device ", d,
           "; CUDA tensors need the CUDA backend (this build has none)");
  return a;
}

Allocator* pinned_allocator() {
  Allocator* a = kernels::cuda_pinned_allocator();
  TG_CHECK(a != nullptr,
           "pin_memory: page-locked host memory needs the CUDA backend, "
           "and this build has none (reconfigure with -DTAPEGRAD_CUDA=ON)");
  return a;
}

Allocator* registered_pinned_allocator() { return kernels::cuda_pinned_allocator(); }

}  // namespace tg
