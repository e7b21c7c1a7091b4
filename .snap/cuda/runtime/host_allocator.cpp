// Page-locked ("pinned") host memory, cached (docs/STREAMS.md "Host memory"; the role of
// PyTorch's CachingHostAllocator). cudaHostAlloc and cudaFreeHost are slow
// and cudaFreeHost synchronises the device, so freed blocks are kept and
// reused by size class (powers of two, at least 4 KiB). A block that an
// asynchronous copy used is reused only after the events recorded on the
// copies' streams (record_host_use) have completed.
#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <tapegrad/cuda/allocator.h>
#include "cuda/runtime/check.h"
#include <tapegrad/cuda/device.h>
#include <tapegrad/tensor/allocator.h>
#include "cuda/runtime/allocators.h"
#include <tapegrad/tensor/error.h>

namespace tg::cuda {
namespace {

size_t size_class(size_t n) {
  size_t c = 4096;
  while (c < n)
    c <<= 1;
  return c;
}

class HostCachingAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    TG_CHECK(is_available(), "pin_memory: page-locked host memory needs a CUDA GPU, and ",
             is_built() ? "none is visible to this process" : "this build has no CUDA backend");
    const size_t size = size_class(nbytes);
    // cudaHostAlloc and the event queries are not stream work: allowed
    // while this thread captures a graph (the block then belongs to it).
    detail::RelaxedCaptureMode relaxed;
    std::lock_guard<std::mutex> lock(mutex_);
    collect_completed();
    auto it = free_.find(size);
    void* p = nullptr;
    if (it != free_.end()) {
      p = it->second;
      free_.erase(it);
      stats_.cached_bytes -= int64_t(size);
    } else {
      cudaError_t err = cudaHostAlloc(&p, size, cudaHostAllocDefault);
      if (err != cudaSuccess) {
        cudaGetLastError();
        release_cached();
        err = cudaHostAlloc(&p, size, cudaHostAllocDefault);
      }
      if (err != cudaSuccess) {
        cudaGetLastError();
        TG_ERROR("pin_memory: cudaHostAlloc of ", size, " bytes (for a request of ", nbytes,
                 " bytes) failed: ", cudaGetErrorString(err), "; ", stats_.allocated_bytes,
                 " bytes of pinned memory are in use. Free pinned tensors or use pageable memory");
      }
      blocks_[p].size = size;
      ++stats_.num_host_allocs;
    }
    stats_.allocated_bytes += int64_t(size);
    return p;
  }

  void deallocate(void* p, size_t) override {
    if (!p) return;
    std::lock_guard<std::mutex> lock(mutex_);
    Block& b = blocks_.at(p);
    stats_.allocated_bytes -= int64_t(b.size);
    if (b.events.empty()) {
      free_.emplace(b.size, p);
      stats_.cached_bytes += int64_t(b.size);
    } else {
      pending_.push_back(p);
    }
  }

  Device device() const override { return Device(kCPU); }

  bool owns(const void* p) {
    std::lock_guard<std::mutex> lock(mutex_);
    return blocks_.count(const_cast<void*>(p)) != 0;
  }

  void record(const void* p, const Stream& s) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.find(const_cast<void*>(p));
    TG_CHECK(it != blocks_.end(), "record_host_use: ", p,
             " is not the start of a pinned block (pass a storage's data pointer)");
    DeviceGuard g(s.device_index());
    cudaEvent_t e;
    TG_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "record_host_use");
    TG_CUDA_CHECK(cudaEventRecord(e, static_cast<cudaStream_t>(s.handle())), "record_host_use");
    it->second.events.push_back(e);
  }

  HostMemoryStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    collect_completed();
    HostMemoryStats s = stats_;
    s.pending_blocks = int64_t(pending_.size());
    return s;
  }

  void empty_cache() {
    std::lock_guard<std::mutex> lock(mutex_);
    collect_completed();
    release_cached();
  }

 private:
  struct Block {
    size_t size = 0;
    std::vector<cudaEvent_t> events;  // copies that may still read or write it
  };

  // Drops the events of live blocks that completed, and moves pending freed
  // blocks whose events all completed to the free lists.
  void collect_completed() {
    for (size_t i = 0; i < pending_.size();) {
      Block& b = blocks_.at(pending_[i]);
      if (drop_completed(b)) {
        free_.emplace(b.size, pending_[i]);
        stats_.cached_bytes += int64_t(b.size);
        pending_[i] = pending_.back();
        pending_.pop_back();
      } else {
        ++i;
      }
    }
  }
  static bool drop_completed(Block& b) {
    for (size_t i = 0; i < b.events.size();) {
      cudaError_t q = cudaEventQuery(b.events[i]);
      if (q == cudaErrorNotReady) {
        ++i;
        continue;
      }
      cudaGetLastError();
      cudaEventDestroy(b.events[i]);
      b.events[i] = b.events.back();
      b.events.pop_back();
    }
    return b.events.empty();
  }
  void release_cached() {
    for (auto& [size, p] : free_) {
      cudaFreeHost(p);
      blocks_.erase(p);
      stats_.cached_bytes -= int64_t(size);
    }
    free_.clear();
  }

  std::mutex mutex_;
  std::unordered_map<void*, Block> blocks_;  // every block obtained
  std::multimap<size_t, void*> free_;        // ready for reuse, by size class
  std::vector<void*> pending_;               // freed, events outstanding
  HostMemoryStats stats_;
};

HostCachingAllocator& host_allocator() {
  static HostCachingAllocator* a = new HostCachingAllocator();  // never destroyed
  return *a;
}

}  // namespace

HostMemoryStats host_memory_stats() { return host_allocator().stats(); }
void empty_host_cache() { host_allocator().empty_cache(); }
void record_host_use(const void* ptr, const Stream& s) { host_allocator().record(ptr, s); }

}  // namespace tg::cuda

namespace tg::kernels {
Allocator* cuda_pinned_allocator() { return &cuda::host_allocator(); }
}  // namespace tg::kernels
