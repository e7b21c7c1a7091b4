#include <tapegrad/tensor/allocator.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include <tapegrad/tensor/error.h>

namespace tg {
namespace {

constexpr size_t kAlignment = 64;

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    size_t rounded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
    void* p = std::aligned_alloc(kAlignment, rounded);
    TG_CHECK(p != nullptr, "CPU allocator: out of memory allocating ", nbytes,
             " bytes (", live_.load(), " bytes live); free tensors or ",
             "reduce the problem size");
    int64_t live = live_.fetch_add(int64_t(nbytes)) + int64_t(nbytes);
    int64_t peak = peak_.load();
    while (live > peak && !peak_.compare_exchange_weak(peak, live)) {
    }
    allocs_.fetch_add(1);
    live_allocs_.fetch_add(1);
    return p;
  }
  void deallocate(void* ptr, size_t nbytes) override {
    if (!ptr) return;
    std::free(ptr);
    live_.fetch_sub(int64_t(nbytes));
    live_allocs_.fetch_sub(1);
  }
  Device device() const override { return Device(DeviceType::CPU); }

  AllocatorStats stats() const {
    return {live_.load(), peak_.load(), allocs_.load(), live_allocs_.load()};
  }
  void reset_peak() { peak_.store(live_.load()); }

 private:
  std::atomic<int64_t> live_{0}, peak_{0}, allocs_{0}, live_allocs_{0};
};

CpuAllocator& cpu() {
  static CpuAllocator* a = new CpuAllocator();  // never destroyed: outlives
  return *a;                                     // static tensors
}

std::atomic<Allocator*> g_cuda_allocator{nullptr};

}  // namespace

Allocator* cpu_allocator() { return &cpu(); }
AllocatorStats cpu_allocator_stats() { return cpu().stats(); }
void reset_cpu_peak_bytes() { cpu().reset_peak(); }

Allocator* allocator_for(Device d) {
  if (d.is_cpu()) return &cpu();
  Allocator* a = g_cuda_allocator.load();
  TG_CHECK(a != nullptr, "allocate: no allocator for device ", d,
           "; CUDA tensors need the CUDA backend (tg::cuda::is_available() "
           "is false or the CUDA tensor backend is not built)");
  return a;
}

void set_allocator(DeviceType t, Allocator* a) {
  TG_CHECK(t == DeviceType::CUDA, "set_allocator: only the CUDA allocator can be replaced");
  g_cuda_allocator.store(a);
}

}  // namespace tg
