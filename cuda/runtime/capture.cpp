// The capture state (<tapegrad/cuda/capture.h>, cuda/runtime/capture_observer.h):
// which streams capture, who observes each capture, and the launch encoder
// (cuda/runtime/launch.h) that reports each library call's nodes to the observer.
// CUDAGraph (graphs/) is the observer; nothing here knows about graphs.
#include <tapegrad/cuda/capture.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include <cuda_runtime_api.h>

#include "cuda/runtime/capture_observer.h"
#include "cuda/runtime/check.h"
#include "cuda/runtime/launch.h"
#include "tensor/env.h"
#include <tapegrad/cuda/device.h>
#include <tapegrad/tensor/error.h>

namespace tg::cuda {

namespace {

std::atomic<uint64_t> g_next_pool{1};

// The observers of the captures underway, by CUDA's capture id (shared by
// the capturing stream and the streams forked from it).
std::mutex g_mu;
std::unordered_map<unsigned long long, CaptureObserver*> g_observers;
std::atomic<int> g_underway{0};

// The capture id of stream `s` when it captures, else 0.
unsigned long long capture_id(const Stream& s) {
  if (!s.is_valid() || s.is_default()) return 0;
  return capture::id_of(s.handle());
}

CaptureObserver* observer_of(const Stream& s) {
  const unsigned long long id = capture_id(s);
  if (!id) return nullptr;
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_observers.find(id);
  return it == g_observers.end() ? nullptr : it->second;
}

// The capture info of `s`: its id and dependencies when it captures.
bool capture_info(cudaStream_t s, unsigned long long* id, std::vector<void*>* deps) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaGraphNode_t* d = nullptr;
  size_t nd = 0;
  if (cudaStreamGetCaptureInfo(s, &status, id, nullptr, &d, nullptr, &nd) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  if (status != cudaStreamCaptureStatusActive) return false;
  deps->assign(d, d + nd);
  return true;
}

// Whether no stream of this thread can be capturing, known without a CUDA
// call: a forked child (no capture survives fork), or a thread that never
// made a non-default stream current while no capture is underway (the
// legacy default stream cannot capture). A CPU graph's backward then never
// touches the runtime.
bool surely_not_capturing() {
  return detail::forked_after_cuda() || (!fusion::captures_underway() && !detail::thread_set_a_stream());
}

}  // namespace

namespace capture {

void observe(unsigned long long id, CaptureObserver* o) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_observers[id] = o;
  g_underway.fetch_add(1);
}

void forget(unsigned long long id) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_observers.erase(id)) g_underway.fetch_sub(1);
}

unsigned long long id_of(void* s) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  if (cudaStreamGetCaptureInfo(static_cast<cudaStream_t>(s), &status, &id) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return status == cudaStreamCaptureStatusActive ? id : 0;
}

bool capturing(const Stream& s) {
  if (!s.is_valid()) return false;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  cudaError_t err = cudaStreamIsCapturing(static_cast<cudaStream_t>(s.handle()), &status);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return status != cudaStreamCaptureStatusNone;
}

void discard(void* s) {
  cudaGraph_t graph = nullptr;
  (void)cudaStreamEndCapture(static_cast<cudaStream_t>(s), &graph);
  (void)cudaGetLastError();
  if (graph) (void)cudaGraphDestroy(graph);
}

}  // namespace capture

MempoolId graph_pool_handle() { return {g_next_pool.fetch_add(1), 0}; }

bool is_current_stream_capturing() {
  if (surely_not_capturing()) return false;
  if (!is_available()) return false;
  return capture::capturing(current_stream(-1));
}

bool is_stream_capturing(const Stream& s) {
  if (surely_not_capturing() || !s.is_valid() || s.is_default()) return false;
  return capture::capturing(s);
}

namespace fusion {

bool captures_underway() { return g_underway.load(std::memory_order_relaxed) > 0; }

int64_t max_elements() {
  static const int64_t n = [] {
    // (At most 2^31: the fused kernel takes periodic remainders in 32 bits.)
    return int64_t(std::min(tg::detail::env_number("TG_CUDA_FUSION_MAX_ELEMENTS", double(kMaxElements)), 0x1p31));
  }();
  return n;
}

}  // namespace fusion

LaunchEncoderBase::LaunchEncoderBase(void* stream) : stream_(stream) {
  if (!fusion::captures_underway()) return;
  detail::RelaxedCaptureMode relaxed;  // only queries; never fail a Global capture
  active_ = capture_info(static_cast<cudaStream_t>(stream), &id_, &before_);
}

void LaunchEncoderBase::fusable(const void* func, const void* arg0, size_t arg0_bytes, ScalarType dtype, int64_t n,
                                const fusion::Step& step) {
  if (!active_ || n > fusion::max_elements()) return;
  if (dtype != ScalarType::Float32 && dtype != ScalarType::Float64) return;
  func_ = func;
  const auto* a = static_cast<const unsigned char*>(arg0);
  arg0_.assign(a, a + arg0_bytes);
  step_ = fusion::Recorded{nullptr, dtype, n, step};
}

void LaunchEncoderBase::fusable_head(const void* func, const void* arg0, size_t arg0_bytes, ScalarType dtype, int64_t n,
                                     const fusion::Head& head) {
  if (!active_ || n <= 0 || head.kind == fusion::kNoHead) return;
  if (dtype != ScalarType::Float32 && dtype != ScalarType::Float64) return;
  func_ = func;
  const auto* a = static_cast<const unsigned char*>(arg0);
  arg0_.assign(a, a + arg0_bytes);
  step_ = fusion::Recorded{nullptr, dtype, n, fusion::Step{}, head};
}

// The nodes added since construction: walked back from the stream's
// dependencies now to those it had then, then forward to the nodes that hang
// off them alone (a library may add nodes no stream depends on: NCCL records
// its ordering event after its kernel on a stream of its own). Anything
// unexpected (another capture, a node joined from elsewhere, too many nodes,
// a node type a library call does not add) records nothing: those nodes stay
// barriers. A fusable call's one kernel is the stream's last node unless
// another thread launched on the same stream in between: its kernel and
// first argument are compared.
LaunchEncoderBase::~LaunchEncoderBase() {
  if (!active_) return;
  detail::RelaxedCaptureMode relaxed;
  unsigned long long id = 0;
  std::vector<void*> after;
  if (!capture_info(static_cast<cudaStream_t>(stream_), &id, &after) || id != id_) return;
  constexpr size_t kMaxNodes = 16;
  // With edge data: programmatic edges make a query without it fail. A node
  // of a library call has a few neighbours; a full array means more than we
  // look at: give up.
  constexpr size_t kMaxEdges = 64;
  std::vector<void*> nodes, stack;
  auto has = [](const std::vector<void*>& v, void* n) { return std::find(v.begin(), v.end(), n) != v.end(); };
  auto known = [&](void* n) { return has(before_, n) || has(nodes, n); };
  auto neighbours = [&](void* n, bool forward, std::vector<void*>* out) {
    cudaGraphNode_t buf[kMaxEdges] = {};
    cudaGraphEdgeData edata[kMaxEdges] = {};
    size_t k = kMaxEdges;
    const cudaGraphNode_t node = static_cast<cudaGraphNode_t>(n);
    const cudaError_t err = forward ? cudaGraphNodeGetDependentNodes(node, buf, edata, &k)
                                    : cudaGraphNodeGetDependencies(node, buf, edata, &k);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    if (k >= kMaxEdges) return false;
    out->assign(buf, buf + k);
    return true;
  };
  for (void* n : after)
    if (!known(n)) {
      nodes.push_back(n);
      stack.push_back(n);
    }
  std::vector<void*> adj, deps;
  while (!stack.empty()) {
    void* n = stack.back();
    stack.pop_back();
    if (!neighbours(n, false, &adj)) return;
    for (void* d : adj) {
      if (!d || known(d)) continue;
      if (nodes.size() >= kMaxNodes) return;  // joined from elsewhere
      nodes.push_back(d);
      stack.push_back(d);
    }
  }
  // Forward: a node all of whose dependencies are this call's nodes (or the
  // stream's frontier before it) was added by this call.
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!neighbours(nodes[i], true, &adj)) return;
    for (void* d : adj) {
      if (!d || known(d)) continue;
      if (!neighbours(d, false, &deps)) return;
      if (!std::all_of(deps.begin(), deps.end(), known)) continue;
      if (nodes.size() >= kMaxNodes) return;
      nodes.push_back(d);
    }
  }
  if (nodes.empty()) return;
  for (void* n : nodes) {
    cudaGraphNodeType type;
    if (cudaGraphNodeGetType(static_cast<cudaGraphNode_t>(n), &type) != cudaSuccess) {
      (void)cudaGetLastError();
      return;
    }
    switch (type) {
      case cudaGraphNodeTypeKernel:
      case cudaGraphNodeTypeMemset:
      case cudaGraphNodeTypeMemcpy:
      case cudaGraphNodeTypeHost:
      case cudaGraphNodeTypeEmpty:
      case cudaGraphNodeTypeEventRecord:  // a library's ordering across launches (NCCL)
      case cudaGraphNodeTypeWaitEvent: break;
      default: return;
    }
  }
  EncodedLaunch l;
  if (step_ && after.size() == 1) {
    cudaKernelNodeParams kp{};
    cudaGraphNodeType type;
    const cudaGraphNode_t node = static_cast<cudaGraphNode_t>(after[0]);
    if (cudaGraphNodeGetType(node, &type) != cudaSuccess || type != cudaGraphNodeTypeKernel ||
        cudaGraphKernelNodeGetParams(node, &kp) != cudaSuccess) {
      (void)cudaGetLastError();
    } else if (kp.func == func_ && kp.kernelParams != nullptr &&
               std::memcmp(kp.kernelParams[0], arg0_.data(), arg0_.size()) == 0) {
      l.fusable = true;
      l.step = *step_;
      l.step.node = after[0];
    }
  }
  l.nodes = std::move(nodes);
  l.accesses = std::move(accesses_);
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_observers.find(id_);
  if (it != g_observers.end()) it->second->launched(std::move(l));
}

namespace detail {

bool capture_random(int device, uint64_t n, const int64_t** state, uint64_t* offset) {
  if (!is_available()) return false;
  CaptureObserver* o = observer_of(current_stream(device));
  return o && o->random(device, n, state, offset);
}

bool keep_alive_with_capture(const Stream& s, std::shared_ptr<void> owner) {
  if (!is_available()) return false;
  const unsigned long long id = capture_id(s);
  if (!id) return false;
  std::lock_guard<std::mutex> lock(g_mu);  // streams forked to other threads
  auto it = g_observers.find(id);
  if (it == g_observers.end()) return false;
  it->second->keep_alive(std::move(owner));
  return true;
}

void check_not_capturing(const char* op, int device) {
  if (surely_not_capturing()) return;
  if (!is_available()) return;
  check_not_capturing(op, current_stream(device));
}

void check_not_capturing(const char* op, const Stream& s) {
  if (!capture::capturing(s)) return;
  if (CaptureObserver* o = observer_of(s)) {
    o->abort();
  } else {  // captured by someone else (the raw CUDA API): end it all the same
    capture::discard(s.handle());
  }
  TG_ERROR(op,
           ": cannot run while a CUDA graph is being captured on this stream (it would "
           "synchronize with the host or read device memory from it); the capture was ended "
           "and its graph discarded. Move the call out of the captured region (docs/GRAPHS.md "
           "lists what cannot be captured)");
}

}  // namespace detail
}  // namespace tg::cuda
