// CUDA graph capture and replay (docs/GRAPHS.md).
#include <tapegrad/cuda/graph.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <unordered_map>

#include <cuda_runtime_api.h>

#include "cuda/capture_access.h"
#include "cuda/check.h"
#include "cuda/fusion.h"
#include "cuda/pool.h"
#include <tapegrad/cuda/device.h>
#include <tapegrad/tensor/ops.h>
#include <tapegrad/tensor/random.h>
#include <tapegrad/tensor/raw.h>

namespace tg::cuda {

namespace {

std::atomic<uint64_t> g_next_pool{1};

// The graphs capturing now, by CUDA's capture id (shared by the capturing
// stream and the streams forked from it): an op that cannot run under
// capture ends the capture of its graph before it throws; a random draw
// reads its state.
std::mutex g_capturing_mu;
std::unordered_map<unsigned long long, CUDAGraph*> g_capturing;
std::atomic<int> g_captures_underway{0};

bool fusion_allowed() {
  static const bool on = detail::env_allows("TG_CUDA_GRAPH_FUSION");
  return on;
}

bool relax_allowed() {
  static const bool on = detail::env_allows("TG_CUDA_GRAPH_RELAX");
  return on;
}

// TG_CUDA_GRAPH_REUSE_DELAY_MB (MiB), else CUDAGraph::kDefaultReuseDelay.
size_t default_reuse_delay() {
  static const size_t bytes = [] {
    const char* e = std::getenv("TG_CUDA_GRAPH_REUSE_DELAY_MB");
    if (!e || !*e) return CUDAGraph::kDefaultReuseDelay;
    char* end = nullptr;
    const double mb = std::strtod(e, &end);
    if (*end || !(mb >= 0)) return CUDAGraph::kDefaultReuseDelay;
    return size_t(mb * double(1 << 20));
  }();
  return bytes;
}

cudaStreamCaptureMode to_cuda(CaptureMode m) {
  switch (m) {
    case CaptureMode::Global: return cudaStreamCaptureModeGlobal;
    case CaptureMode::ThreadLocal: return cudaStreamCaptureModeThreadLocal;
    case CaptureMode::Relaxed: return cudaStreamCaptureModeRelaxed;
  }
  return cudaStreamCaptureModeGlobal;
}

// Ends the capture of `s` and destroys what it captured.
void discard_capture(cudaStream_t s) {
  cudaGraph_t graph = nullptr;
  (void)cudaStreamEndCapture(s, &graph);
  (void)cudaGetLastError();
  if (graph) (void)cudaGraphDestroy(graph);
}

// The capture id of stream `s` when it captures, else 0.
unsigned long long capture_id(const Stream& s) {
  if (!s.is_valid() || s.is_default()) return 0;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  if (cudaStreamGetCaptureInfo(static_cast<cudaStream_t>(s.handle()), &status, &id) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return status == cudaStreamCaptureStatusActive ? id : 0;
}

bool stream_capturing(const Stream& s) {
  if (!s.is_valid()) return false;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  cudaError_t err = cudaStreamIsCapturing(static_cast<cudaStream_t>(s.handle()), &status);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return status != cudaStreamCaptureStatusNone;
}

// One default capture stream per device, as torch.cuda.graph's: graphs that
// share a pool reuse its blocks only when captured on the same stream.
Stream default_capture_stream(int device) {
  static std::mutex mu;
  static std::unordered_map<int, Stream> streams;
  std::lock_guard<std::mutex> lock(mu);
  auto it = streams.find(device);
  if (it != streams.end()) return it->second;
  return streams[device] = stream_from_pool(device);
}

}  // namespace

MempoolId graph_pool_handle() { return {g_next_pool.fetch_add(1), 0}; }

namespace {
// Whether no stream of this thread can be capturing, known without a CUDA
// call: a forked child (no capture survives fork), or a thread that never
// made a non-default stream current while none of our captures is underway
// (the legacy default stream cannot capture). A CPU graph's backward then
// never touches the runtime.
bool surely_not_capturing() {
  return detail::forked_after_cuda() || (!fusion::captures_underway() && !detail::thread_set_a_stream());
}
}  // namespace

bool is_current_stream_capturing() {
  if (surely_not_capturing()) return false;
  if (!is_available()) return false;
  return stream_capturing(current_stream(-1));
}

void detail_abort_capture(CUDAGraph* g) { g->end_capture(/*abandon=*/true); }

struct CUDAGraph::RngState {
  Tensor state;           // Int64 [2] on the device: {seed, offset}
  uint64_t consumed = 0;  // counters the captured draws use
};

struct CaptureRegistry {
  static CUDAGraph* graph_of(const Stream& s) {
    unsigned long long id = capture_id(s);
    if (!id) return nullptr;
    std::lock_guard<std::mutex> lock(g_capturing_mu);
    auto it = g_capturing.find(id);
    return it == g_capturing.end() ? nullptr : it->second;
  }
  static bool keep_alive(const Stream& s, std::shared_ptr<void> owner) {
    CUDAGraph* g = graph_of(s);
    if (!g) return false;
    std::lock_guard<std::mutex> lock(g_capturing_mu);  // streams forked to other threads
    g->keep_alive_.push_back(std::move(owner));
    return true;
  }
  static void record(unsigned long long id, fusion::Recorded r) {
    std::lock_guard<std::mutex> lock(g_capturing_mu);
    auto it = g_capturing.find(id);
    if (it != g_capturing.end() && it->second->fusion_log_) it->second->fusion_log_->launches.push_back(r);
  }
  static void record(unsigned long long id, fusion::Region r) {
    std::lock_guard<std::mutex> lock(g_capturing_mu);
    auto it = g_capturing.find(id);
    if (it != g_capturing.end() && it->second->fusion_log_)
      it->second->fusion_log_->regions.push_back(std::move(r));
  }
  static bool random(int device, uint64_t n, const int64_t** state, uint64_t* offset) {
    CUDAGraph* g = graph_of(current_stream(device));
    if (!g) return false;
    if (!g->rng_) {
      g->rng_ = std::make_shared<CUDAGraph::RngState>();
      // Allocated from the graph's pool; written before each replay, never
      // by the graph itself.
      g->rng_->state = tg::empty({2}, TensorOptions().dtype(kInt64).device(Device(kCUDA, device)));
    }
    *state = g->rng_->state.data_ptr<int64_t>();
    *offset = g->rng_->consumed;
    g->rng_->consumed += n;
    return true;
  }
};

namespace fusion {
namespace {

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

}  // namespace

bool captures_underway() { return g_captures_underway.load(std::memory_order_relaxed) > 0; }

void record(void* stream, const void* func, const void* arg0, size_t arg0_bytes, ScalarType dtype, int64_t n,
            const Step& step) {
  if (dtype != ScalarType::Float32 && dtype != ScalarType::Float64) return;
  detail::RelaxedCaptureMode relaxed;  // only queries below; never fail a Global capture
  unsigned long long id = 0;
  std::vector<void*> deps;
  if (!capture_info(static_cast<cudaStream_t>(stream), &id, &deps) || deps.size() != 1) return;
  // The stream's last node is this launch unless another thread launched on
  // the same stream in between: compare the kernel and its first argument.
  cudaGraphNode_t node = static_cast<cudaGraphNode_t>(deps[0]);
  cudaGraphNodeType type;
  cudaKernelNodeParams kp{};
  if (cudaGraphNodeGetType(node, &type) != cudaSuccess || type != cudaGraphNodeTypeKernel ||
      cudaGraphKernelNodeGetParams(node, &kp) != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  if (kp.func != func || kp.kernelParams == nullptr || std::memcmp(kp.kernelParams[0], arg0, arg0_bytes) != 0)
    return;
  CaptureRegistry::record(id, Recorded{node, dtype, n, step});
}

Access span_of(const Tensor& t, bool written) {
  const int64_t elem = int64_t(element_size(t.dtype()));
  int64_t lo = 0, hi = 0;
  for (size_t d = 0; d < t.sizes().size(); ++d) {
    if (t.sizes()[d] == 0) return {static_cast<const char*>(t.data_ptr()), 0, written};
    const int64_t reach = (t.sizes()[d] - 1) * t.strides()[d];
    (reach < 0 ? lo : hi) += reach;
  }
  return {static_cast<const char*>(t.data_ptr()) + lo * elem, (hi - lo + 1) * elem, written};
}

CaptureAccess::CaptureAccess(void* stream) : stream_(stream) {
  if (!captures_underway()) return;
  detail::RelaxedCaptureMode relaxed;  // only queries; never fail a Global capture
  active_ = capture_info(static_cast<cudaStream_t>(stream), &id_, &before_);
}

// The nodes added since construction: walked back from the stream's
// dependencies now to those it had then, then forward to the nodes that hang
// off them alone (a library may add nodes no stream depends on: NCCL records
// its ordering event after its kernel on a stream of its own). Anything
// unexpected (another capture, a node joined from elsewhere, too many nodes,
// a node type a library call does not add) records nothing: those nodes stay
// barriers.
CaptureAccess::~CaptureAccess() {
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
      case cudaGraphNodeTypeWaitEvent:
        break;
      default:
        return;
    }
  }
  CaptureRegistry::record(id_, Region{std::move(nodes), std::move(accesses_)});
}
}  // namespace fusion

namespace detail {
bool capture_random(int device, uint64_t n, const int64_t** state, uint64_t* offset) {
  if (!is_available()) return false;
  return CaptureRegistry::random(device, n, state, offset);
}

bool keep_alive_with_capture(const Stream& s, std::shared_ptr<void> owner) {
  if (!is_available()) return false;
  return CaptureRegistry::keep_alive(s, std::move(owner));
}

void check_not_capturing(const char* op, int device) {
  if (surely_not_capturing()) return;
  if (!is_available()) return;
  check_not_capturing(op, current_stream(device));
}

void check_not_capturing(const char* op, const Stream& s) {
  if (!stream_capturing(s)) return;
  CUDAGraph* g = CaptureRegistry::graph_of(s);
  if (g) {
    detail_abort_capture(g);
  } else {  // captured by someone else (the raw CUDA API): end it all the same
    discard_capture(static_cast<cudaStream_t>(s.handle()));
  }
  TG_ERROR(op, ": cannot run while a CUDA graph is being captured on this stream (it would "
           "synchronize with the host or read device memory from it); the capture was ended "
           "and its graph discarded. Move the call out of the captured region (docs/GRAPHS.md "
           "lists what cannot be captured)");
}
}  // namespace detail

CUDAGraph::CUDAGraph(bool keep_graph) : keep_graph_(keep_graph) {}

size_t CUDAGraph::reuse_delay() const { return reuse_delay_ ? *reuse_delay_ : default_reuse_delay(); }

CUDAGraph::~CUDAGraph() {
  try {
    if (capturing_) end_capture(/*abandon=*/true);
    reset();
  } catch (...) {
  }
}

void CUDAGraph::capture_begin(MempoolId pool, CaptureMode mode) {
  TG_CHECK(!capturing_, "capture_begin: this CUDAGraph is already capturing");
  TG_CHECK(!has_graph(), "capture_begin: this CUDAGraph holds a graph; call reset() first");
  TG_CHECK(is_available(), "capture_begin: CUDA graphs need a GPU, and none is available");
  const Stream s = current_stream(-1);
  TG_CHECK(!s.is_default(), "capture_begin: the current stream is the legacy default stream, "
           "which cannot be captured; make a stream current first (StreamGuard with "
           "stream_from_pool()), or use the tg::cuda::Graph guard");
  TG_CHECK(!stream_capturing(s), "capture_begin: the current stream is already capturing");
  pool_ = pool.first || pool.second ? pool : graph_pool_handle();
  device_ = s.device_index();
  stream_ = s;
  aborted_ = false;
  {
    DeviceGuard g(device_);
    cudaStream_t cs = static_cast<cudaStream_t>(s.handle());
    cudaError_t err = cudaStreamBeginCapture(cs, to_cuda(mode));
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      TG_ERROR("capture_begin: cudaStreamBeginCapture failed: ", cudaGetErrorName(err), " (",
               cudaGetErrorString(err), ")");
    }
    // Allocations of this capture (on this stream and the streams forked
    // from it) come from the pool from now on.
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    unsigned long long id = 0;
    err = cudaStreamGetCaptureInfo(cs, &status, &id);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      discard_capture(cs);
      TG_ERROR("capture_begin: cudaStreamGetCaptureInfo failed: ", cudaGetErrorName(err));
    }
    capture_id_ = id;
    detail::begin_allocate_to_pool(device_, pool_.first, capture_id_,
                                   relax_ && relax_allowed() ? reuse_delay() : 0);
  }
  capturing_ = true;
  rng_.reset();
  fused_nodes_ = captured_depth_ = depth_ = 0;
  std::lock_guard<std::mutex> lock(g_capturing_mu);
  fusion_log_ = (fusion_ && fusion_allowed()) || (relax_ && relax_allowed()) ? std::make_shared<fusion::Log>()
                                                                             : nullptr;
  g_capturing[capture_id_] = this;
  g_captures_underway.fetch_add(1);
}

void CUDAGraph::end_capture(bool abandon) {
  if (!capturing_) return;
  capturing_ = false;
  std::shared_ptr<fusion::Log> log;
  {
    std::lock_guard<std::mutex> lock(g_capturing_mu);
    g_capturing.erase(capture_id_);
    g_captures_underway.fetch_sub(1);
    log = std::move(fusion_log_);
  }
  DeviceGuard g(device_);
  cudaGraph_t graph = nullptr;
  cudaError_t err = cudaStreamEndCapture(static_cast<cudaStream_t>(stream_.handle()), &graph);
  detail::end_allocate_to_pool(device_, capture_id_);
  // Nothing of the capture will run: its graph, state and memory go.
  auto discard = [&] {
    if (graph) (void)cudaGraphDestroy(graph);
    rng_.reset();
    keep_alive_.clear();  // nothing ran: the buffers are free
    detail::release_pool(device_, pool_.first);
  };
  if (abandon || err != cudaSuccess) {
    (void)cudaGetLastError();
    discard();
    aborted_ = true;
    if (!abandon)
      TG_ERROR("capture_end: the capture failed: ", cudaGetErrorName(err), " (",
               cudaGetErrorString(err), "); an unsafe call (a host synchronization, or work "
               "from another thread in Global mode) invalidated it");
    return;
  }
  try {
    optimize(graph, log.get());
  } catch (...) {
    discard();
    throw;
  }
  graph_ = graph;
  statics_ = detail::record_statics();
}

// Fusion (where it pays), then relaxation (the fused nodes touch what their
// members did).
void CUDAGraph::optimize(void* graph, fusion::Log* log) {
  std::unordered_map<void*, std::vector<fusion::Access>> access;
  if (log) {
    for (const fusion::Recorded& r : log->launches) access[r.node] = fusion::accesses_of(r);
    for (fusion::Region& g : log->regions)
      for (void* n : g.nodes) {
        std::vector<fusion::Access>& a = access[n];
        a.insert(a.end(), g.accesses.begin(), g.accesses.end());
      }
  }
  const bool relaxing = log && relax_ && relax_allowed();
  bool fusing = log && fusion_ && fusion_allowed() && log->launches.size() > 1;
  if (fusing && relaxing) {
    // Fusion merges kernels adjacent in capture order, which may belong to
    // independent branches: kept only where the relaxed chain gets shorter.
    const std::vector<std::pair<void*, std::vector<fusion::Access>>> before(access.begin(), access.end());
    fusing = fusion::fusion_shortens(graph, log->launches, before);
  }
  if (fusing) {
    std::vector<std::pair<void*, std::vector<void*>>> merged;
    fused_nodes_ = fusion::fuse(graph, log->launches, &merged);
    for (auto& [node, members] : merged) {  // every member is a recorded launch
      std::vector<fusion::Access> all;
      bool complete = true;
      for (void* m : members) {
        auto it = access.find(m);
        if (it == access.end()) {
          complete = false;  // unknown: the fused node stays a barrier
          continue;
        }
        all.insert(all.end(), it->second.begin(), it->second.end());
        access.erase(it);
      }
      if (complete) access[node] = std::move(all);
    }
  }
  std::vector<std::pair<void*, std::vector<fusion::Access>>> known(access.begin(), access.end());
  if (relaxing) {
    const fusion::Relaxed r = fusion::relax_graph(graph, known);
    captured_depth_ = r.depth_before;
    depth_ = r.depth_after;
  }
}

void CUDAGraph::capture_end() {
  TG_CHECK(capturing_ || aborted_, "capture_end: this CUDAGraph is not capturing");
  if (!capturing_) {
    aborted_ = false;
    TG_ERROR("capture_end: the capture was ended by an op that cannot run under capture "
             "(see the error it threw); nothing was captured");
  }
  end_capture(/*abandon=*/false);
  if (!keep_graph_) instantiate();
}

void CUDAGraph::instantiate() {
  TG_CHECK(graph_ != nullptr, "instantiate: no captured graph (capture first; with keep_graph "
           "= false capture_end() has instantiated it already)");
  DeviceGuard g(device_);
  if (exec_) {
    (void)cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
    exec_ = nullptr;
  }
  cudaGraphExec_t exec = nullptr;
  TG_CUDA_CHECK(cudaGraphInstantiate(&exec, static_cast<cudaGraph_t>(graph_), 0), "instantiate");
  exec_ = exec;
  if (!keep_graph_) {
    (void)cudaGraphDestroy(static_cast<cudaGraph_t>(graph_));
    graph_ = nullptr;
  }
}

void CUDAGraph::replay() {
  TG_CHECK(exec_ != nullptr, "replay: no instantiated graph (capture, and with keep_graph call "
           "instantiate())");
  detail::check_statics(statics_, "replay");
  DeviceGuard g(device_);
  if (rng_ && rng_->consumed) {
    // Move the generator as the eager step would, and tell the graph where:
    // two fill kernels (their values passed by value) before the launch.
    PhiloxState p = philox_reserve(rng_->consumed);
    raw::fill_(raw::narrow(rng_->state, 0, 0, 1), Scalar(int64_t(p.seed)));
    raw::fill_(raw::narrow(rng_->state, 0, 1, 1), Scalar(int64_t(p.offset)));
  }
  TG_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_),
                                static_cast<cudaStream_t>(current_stream(device_).handle())),
                "replay");
}

void CUDAGraph::reset() {
  if (capturing_) end_capture(/*abandon=*/true);
  if (!has_graph()) return;
  DeviceGuard g(device_);
  if (exec_) (void)cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
  if (graph_) (void)cudaGraphDestroy(static_cast<cudaGraph_t>(graph_));
  exec_ = graph_ = nullptr;
  rng_.reset();
  statics_.reset();
  if (!keep_alive_.empty()) {
    // Host buffers may be in use by a replay still queued: wait for it
    // before they can be handed out again (freeing the pool's device
    // memory below waits for the device likewise).
    (void)cudaDeviceSynchronize();
    keep_alive_.clear();
  }
  detail::release_pool(device_, pool_.first);
}

void* CUDAGraph::raw_graph() const {
  TG_CHECK(graph_ != nullptr, "raw_graph: no captured graph is kept (construct the CUDAGraph "
           "with keep_graph = true and capture first)");
  return graph_;
}

void* CUDAGraph::raw_graph_exec() const {
  TG_CHECK(exec_ != nullptr, "raw_graph_exec: the graph is not instantiated");
  return exec_;
}

void CUDAGraph::debug_dump(const std::string& path) const {
  TG_CHECK(graph_ != nullptr, "debug_dump: no captured graph is kept (use keep_graph = true)");
  TG_CUDA_CHECK(cudaGraphDebugDotPrint(static_cast<cudaGraph_t>(graph_), path.c_str(),
                                       cudaGraphDebugDotFlagsVerbose),
                "debug_dump");
}

Graph::Graph(CUDAGraph& graph, MempoolId pool, std::optional<Stream> stream, CaptureMode mode)
    : graph_(graph), uncaught_(std::uncaught_exceptions()) {
  TG_CHECK(is_available(), "Graph: CUDA graphs need a GPU, and none is available");
  caller_ = current_stream(-1);
  capture_stream_ = stream ? *stream : default_capture_stream(caller_.device_index());
  TG_CHECK(!capture_stream_.is_default(), "Graph: cannot capture on the legacy default stream");
  capture_stream_.wait_stream(caller_);  // the capture sees the caller's prior work
  guard_.emplace(capture_stream_);
  graph_.capture_begin(pool, mode);
}

Graph::~Graph() noexcept(false) {
  const bool unwinding = std::uncaught_exceptions() > uncaught_;
  if (unwinding) {
    try {
      detail_abort_capture(&graph_);
    } catch (...) {
    }
    guard_.reset();
    return;
  }
  struct Restore {
    Graph& g;
    ~Restore() {
      g.guard_.reset();
      g.caller_.wait_stream(g.capture_stream_);
    }
  } restore{*this};
  graph_.capture_end();
}

}  // namespace tg::cuda
