// The CUDA libraries' handles and workspaces (cuda/runtime/libraries.h), and the
// launch encoder's workspace request (cuda/runtime/launch.h).
#include "cuda/runtime/libraries.h"

#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include <tapegrad/cuda/capture.h>
#include <tapegrad/cuda/device.h>
#include <tapegrad/cuda/stream.h>
#include <tapegrad/tensor/allocator.h>
#include "cuda/runtime/allocators.h"
#include "cuda/runtime/check.h"
#include "cuda/runtime/launch.h"

namespace tg::cuda {

namespace lib {

const char* cublas_status_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "CUBLAS_STATUS_(other)";
  }
}

const char* cusolver_status_name(cusolverStatus_t s) {
  switch (s) {
    case CUSOLVER_STATUS_SUCCESS: return "CUSOLVER_STATUS_SUCCESS";
    case CUSOLVER_STATUS_NOT_INITIALIZED: return "CUSOLVER_STATUS_NOT_INITIALIZED";
    case CUSOLVER_STATUS_ALLOC_FAILED: return "CUSOLVER_STATUS_ALLOC_FAILED";
    case CUSOLVER_STATUS_INVALID_VALUE: return "CUSOLVER_STATUS_INVALID_VALUE";
    case CUSOLVER_STATUS_ARCH_MISMATCH: return "CUSOLVER_STATUS_ARCH_MISMATCH";
    case CUSOLVER_STATUS_MAPPING_ERROR: return "CUSOLVER_STATUS_MAPPING_ERROR";
    case CUSOLVER_STATUS_EXECUTION_FAILED: return "CUSOLVER_STATUS_EXECUTION_FAILED";
    case CUSOLVER_STATUS_INTERNAL_ERROR: return "CUSOLVER_STATUS_INTERNAL_ERROR";
    case CUSOLVER_STATUS_MATRIX_TYPE_NOT_SUPPORTED: return "CUSOLVER_STATUS_MATRIX_TYPE_NOT_SUPPORTED";
    case CUSOLVER_STATUS_NOT_SUPPORTED: return "CUSOLVER_STATUS_NOT_SUPPORTED";
    case CUSOLVER_STATUS_INVALID_WORKSPACE: return "CUSOLVER_STATUS_INVALID_WORKSPACE";
    default: return "CUSOLVER_STATUS_(other)";
  }
}

namespace {

// Handles given back by threads that ended, by device (never destroyed: they
// outlive threads, and destroying one at exit could follow the runtime's
// teardown).
template <class H> struct Pool {
  std::mutex mu;
  std::vector<std::pair<int, H>> free;
  static Pool& get() {
    static Pool* p = new Pool();
    return *p;
  }
};

template <class H> struct ThreadHandles {
  H h[kMaxDevices] = {};
  ~ThreadHandles() {
    Pool<H>& p = Pool<H>::get();
    std::lock_guard<std::mutex> lock(p.mu);
    for (int d = 0; d < kMaxDevices; ++d)
      if (h[d]) p.free.emplace_back(d, h[d]);
  }
};

void check_index(int device, const char* op) {
  TG_CHECK(device >= 0 && device < kMaxDevices, op, ": device index ", device, " is out of range (the CUDA libraries ",
           "support devices 0 to ", kMaxDevices - 1, ")");
}

// This thread's handle of type H for `device`: from the pool of ended
// threads' handles, else created by `create` (on the current device, which
// the caller made `device`).
template <class H, class Create> H thread_handle(int device, const char* op, Create create) {
  check_index(device, op);
  thread_local ThreadHandles<H> mine;
  H& h = mine.h[device];
  if (!h) {
    {
      Pool<H>& p = Pool<H>::get();
      std::lock_guard<std::mutex> lock(p.mu);
      for (size_t i = 0; i < p.free.size(); ++i)
        if (p.free[i].first == device) {
          h = p.free[i].second;
          p.free.erase(p.free.begin() + long(i));
          break;
        }
    }
    if (!h) {
      detail::RelaxedCaptureMode relaxed;  // may allocate: allowed while a capture is underway
      create(&h);
    }
  }
  return h;
}

}  // namespace

size_t cublas_workspace_bytes(int device) {
  check_index(device, "cuBLAS workspace");
  static size_t sizes[kMaxDevices] = {};
  static std::once_flag once[kMaxDevices];
  std::call_once(once[device], [device] {
    size_t bytes = 0;
    if (const char* cfg = std::getenv("CUBLAS_WORKSPACE_CONFIG")) {
      const char* p = cfg;
      while (*p == ':') {
        char* end = nullptr;
        unsigned long long kib = std::strtoull(p + 1, &end, 10);
        if (end == p + 1 || *end != ':') break;
        p = end;
        unsigned long long count = std::strtoull(p + 1, &end, 10);
        if (end == p + 1) break;
        bytes += size_t(kib) * 1024 * size_t(count);
        p = end;
      }
    }
    if (bytes == 0) bytes = size_t(get_device_properties(device).major >= 9 ? 32 : 4) << 20;
    sizes[device] = bytes;
  });
  return sizes[device];
}

void* cublas_workspace(int device, cudaStream_t stream, const char* op) {
  check_index(device, op);
  thread_local std::unordered_map<cudaStream_t, void*> workspace[kMaxDevices];
  void*& ws = workspace[device][stream];
  if (!ws) {
    detail::RelaxedCaptureMode relaxed;  // not stream work: legal beside a capture
    TG_CUDA_CHECK(cudaMalloc(&ws, cublas_workspace_bytes(device)), op);
  }
  return ws;
}

cublasHandle_t cublas(int device, cudaStream_t stream, LaunchEncoderBase& enc, const char* op) {
  cublasHandle_t h =
      thread_handle<cublasHandle_t>(device, op, [op](cublasHandle_t* p) { TG_CUBLAS_CHECK(cublasCreate(p), op); });
  TG_CUBLAS_CHECK(cublasSetStream(h, stream), op);
  // Setting the stream resets the workspace, so it is set every time.
  void* ws = cublas_workspace(device, stream, op);
  const size_t bytes = cublas_workspace_bytes(device);
  TG_CUBLAS_CHECK(cublasSetWorkspace(h, ws, bytes), op);
  enc.add({static_cast<const char*>(ws), int64_t(bytes), true});
  return h;
}

cublasLtHandle_t cublaslt(int device, const char* op) {
  check_index(device, op);
  static std::mutex mu;
  static cublasLtHandle_t handles[kMaxDevices] = {};  // never destroyed (outlive threads)
  std::lock_guard<std::mutex> lock(mu);
  if (!handles[device]) {
    detail::RelaxedCaptureMode relaxed;
    TG_CUBLAS_CHECK(cublasLtCreate(&handles[device]), op);
  }
  return handles[device];
}

cusolverDnHandle_t cusolver_dn(int device, cudaStream_t stream, const char* op) {
  cusolverDnHandle_t h = thread_handle<cusolverDnHandle_t>(
      device, op, [op](cusolverDnHandle_t* p) { TG_CUSOLVER_CHECK(cusolverDnCreate(p), op); });
  TG_CUSOLVER_CHECK(cusolverDnSetStream(h, stream), op);
  return h;
}

cusparseHandle_t cusparse(int device, cudaStream_t stream, const char* op) {
  cusparseHandle_t h = thread_handle<cusparseHandle_t>(
      device, op, [op](cusparseHandle_t* p) { TG_CUSPARSE_CHECK(cusparseCreate(p), op); });
  TG_CUSPARSE_CHECK(cusparseSetStream(h, stream), op);
  return h;
}

#if TAPEGRAD_CUDNN
cudnnHandle_t cudnn(int device, cudaStream_t stream, const char* op) {
  cudnnHandle_t h = thread_handle<cudnnHandle_t>(device, op, [op](cudnnHandle_t* p) {
    const cudnnStatus_t st = cudnnCreate(p);
    TG_CHECK(st == CUDNN_STATUS_SUCCESS, op, ": cuDNN call cudnnCreate failed: ", cudnnGetErrorString(st));
  });
  const cudnnStatus_t st = cudnnSetStream(h, stream);
  TG_CHECK(st == CUDNN_STATUS_SUCCESS, op, ": cuDNN call cudnnSetStream failed: ", cudnnGetErrorString(st));
  return h;
}
#endif

const char* cufft_status_name(cufftResult r) {
  switch (r) {
    case CUFFT_SUCCESS: return "CUFFT_SUCCESS";
    case CUFFT_INVALID_PLAN: return "CUFFT_INVALID_PLAN";
    case CUFFT_ALLOC_FAILED: return "CUFFT_ALLOC_FAILED (out of device memory)";
    case CUFFT_INVALID_VALUE: return "CUFFT_INVALID_VALUE";
    case CUFFT_INTERNAL_ERROR: return "CUFFT_INTERNAL_ERROR";
    case CUFFT_EXEC_FAILED: return "CUFFT_EXEC_FAILED";
    case CUFFT_SETUP_FAILED: return "CUFFT_SETUP_FAILED";
    case CUFFT_INVALID_SIZE: return "CUFFT_INVALID_SIZE";
    case CUFFT_NOT_SUPPORTED: return "CUFFT_NOT_SUPPORTED";
    default: return "an unknown cuFFT status";
  }
}

namespace {
struct FftKey {
  int device, type, rank;
  long long n[3], batch;
  bool operator<(const FftKey& o) const {
    return std::tie(device, type, rank, n[0], n[1], n[2], batch) <
           std::tie(o.device, o.type, o.rank, o.n[0], o.n[1], o.n[2], o.batch);
  }
};
struct FftEntry {
  FftPlan plan;
  uint64_t used = 0;
  bool pinned = false;  // ran under a capture
};
// Plans of threads that ended, for the next thread that wants one (never
// destroyed: they may outlive the runtime's teardown).
struct FftPool {
  std::mutex mu;
  std::multimap<FftKey, FftEntry> free;
  static FftPool& get() {
    static FftPool* p = new FftPool();
    return *p;
  }
};
struct ThreadFftPlans {
  std::map<FftKey, FftEntry> plans;
  uint64_t clock = 0;
  ~ThreadFftPlans() {
    FftPool& p = FftPool::get();
    std::lock_guard<std::mutex> lock(p.mu);
    for (auto& [k, e] : plans)
      p.free.emplace(k, e);
  }
};
}  // namespace

FftPlan cufft_plan(int device, cufftType type, int rank, const long long* n, long long batch, bool capturing,
                   const char* op) {
  check_index(device, op);
  TG_INTERNAL_ASSERT(rank >= 1 && rank <= 3, "cufft_plan: rank ", rank);
  thread_local ThreadFftPlans mine;
  FftKey key{device, int(type), rank, {1, 1, 1}, batch};
  for (int i = 0; i < rank; ++i)
    key.n[i] = n[i];
  auto it = mine.plans.find(key);
  if (it == mine.plans.end()) {
    FftEntry e;
    {
      FftPool& p = FftPool::get();
      std::lock_guard<std::mutex> lock(p.mu);
      if (auto f = p.free.find(key); f != p.free.end()) {
        e = f->second;
        p.free.erase(f);
      }
    }
    if (!e.plan.handle) {
      detail::RelaxedCaptureMode relaxed;  // plan creation allocates its tables: legal beside a capture
      TG_CUFFT_CHECK(cufftCreate(&e.plan.handle), op);
      TG_CUFFT_CHECK(cufftSetAutoAllocation(e.plan.handle, 0), op);
      long long dims[3] = {key.n[0], key.n[1], key.n[2]};
      size_t work = 0;
      const cufftResult r =
          cufftMakePlanMany64(e.plan.handle, rank, dims, nullptr, 1, 0, nullptr, 1, 0, type, batch, &work);
      if (r != CUFFT_SUCCESS) cufftDestroy(e.plan.handle);
      TG_CHECK(r == CUFFT_SUCCESS, op, ": cuFFT could not plan ", batch, " transforms of ", dims[0],
               rank > 1 ? " x " : "", rank > 1 ? std::to_string(dims[1]) : "", rank > 2 ? " x " : "",
               rank > 2 ? std::to_string(dims[2]) : "", " points: ", cufft_status_name(r));
      e.plan.work = work;
    }
    if (mine.plans.size() >= kMaxFftPlans) {  // the least recently used plan that no graph reads
      auto old = mine.plans.end();
      for (auto j = mine.plans.begin(); j != mine.plans.end(); ++j)
        if (!j->second.pinned && (old == mine.plans.end() || j->second.used < old->second.used)) old = j;
      if (old != mine.plans.end()) {
        cufftDestroy(old->second.plan.handle);  // cudaFree inside waits for the work that used it
        mine.plans.erase(old);
      }
    }
    it = mine.plans.emplace(key, e).first;
  }
  it->second.used = ++mine.clock;
  it->second.pinned |= capturing;
  return it->second.plan;
}

}  // namespace lib

// ---- the launch encoder's workspace ----------------------------------------------------

namespace {

constexpr size_t kWorkspaceAlign = 256;
// Requests up to this size (summed over one call) come from the stream's
// cached buffer, which grows to at most this size; larger ones (a big
// matrix's eigensolver workspace, a long sort's temporary storage) are the
// call's own, given back to the caching allocator when the call ends, so
// that no thread keeps a large buffer for its life.
constexpr size_t kCachedWorkspaceMax = size_t(4) << 20;
size_t align_up(size_t n) { return (n + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign; }

// `bytes` from the device's caching allocator, on the current stream (a
// capturing stream's: its graph's pool), given back when the last owner
// lets go.
std::shared_ptr<void> device_memory(int device, size_t bytes) {
  Allocator* a = kernels::cuda_device_allocator(device);
  void* p = a->allocate(bytes);
  return std::shared_ptr<void>(p, [a, bytes](void* q) { a->deallocate(q, bytes); });
}

// A stream's cached workspace on this thread: grown on demand (up to
// kCachedWorkspaceMax), freed (to the caching allocator, stream-ordered) when
// outgrown or when the thread ends.
struct CachedWorkspace {
  std::shared_ptr<void> mem;
  size_t bytes = 0;
};

}  // namespace

void* LaunchEncoderBase::workspace(size_t bytes, void* eager) {
  if (bytes == 0) return nullptr;
  int device = 0;
  TG_CUDA_CHECK(cudaGetDevice(&device), "workspace");
  lib::check_index(device, "workspace");
  const Stream stream(device, stream_);
  // The caching allocator hands out memory for the current stream: the
  // launches must run there for its reuse to be ordered after them.
  TG_INTERNAL_ASSERT(current_stream(device) == stream,
                     "LaunchEncoder::workspace: the encoder's stream is not the current stream of device ", device);
  void* p = nullptr;
  if (active_) {
    // Under capture: memory of the graph's own, kept with it (when the
    // capture is a CUDAGraph's), so that captured calls touch disjoint
    // memory and the graph's dependency relaxation may run them
    // concurrently (docs/GRAPHS.md).
    std::shared_ptr<void> mem = device_memory(device, bytes);
    if (detail::keep_alive_with_capture(stream, mem)) p = mem.get();
  }
  if (!p && eager) p = eager;
  if (!p && align_up(cached_used_) + bytes > kCachedWorkspaceMax) {
    std::shared_ptr<void> mem = device_memory(device, bytes);
    p = mem.get();
    held_.push_back(std::move(mem));  // freed when the call's launches are queued
  }
  if (!p) {
    thread_local std::unordered_map<void*, CachedWorkspace> cache[lib::kMaxDevices];
    CachedWorkspace& c = cache[device][stream_];
    size_t offset = align_up(cached_used_);
    if (c.bytes < offset + bytes) {
      // Outgrown: the pieces this encoder handed out stay valid in the old
      // buffer, kept until the encoder ends (its launches are queued by
      // then, and the allocator reuses memory in stream order).
      if (c.mem) held_.push_back(std::move(c.mem));
      c.bytes = align_up(offset + bytes);
      c.mem = device_memory(device, c.bytes);
      offset = 0;
    }
    p = static_cast<char*>(c.mem.get()) + offset;
    cached_used_ = offset + bytes;
  }
  add({static_cast<const char*>(p), int64_t(bytes), true, true});
  return p;
}

}  // namespace tg::cuda
