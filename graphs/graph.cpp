// CUDA graph capture and replay (docs/GRAPHS.md): a CUDAGraph observes its
// capture (cuda/capture_observer.h) and, at its end, fuses and relaxes what
// the launches reported (graphs/fusion.h).
#include <tapegrad/cuda/graph.h>

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <cuda_runtime_api.h>

#include "cuda/runtime/capture_observer.h"
#include "cuda/runtime/check.h"
#include "cuda/runtime/pool.h"
#include "graphs/fusion.h"
#include "tensor/env.h"
#include <tapegrad/cuda/device.h>
#include <tapegrad/tensor/ops.h>
#include <tapegrad/tensor/random.h>
#include <tapegrad/tensor/raw.h>

namespace tg::cuda {

namespace {

bool fusion_allowed() { return tg::detail::switched_on<tg::detail::OffSwitch::kGraphFusion>(); }

bool relax_allowed() { return tg::detail::switched_on<tg::detail::OffSwitch::kGraphRelax>(); }

// TG_CUDA_GRAPH_REUSE_DELAY_MB (MiB), else CUDAGraph::kDefaultReuseDelay.
size_t default_reuse_delay() {
  static const size_t bytes = [] {
    const double mb = tg::detail::env_number("TG_CUDA_GRAPH_REUSE_DELAY_MB", -1);
    return mb < 0 ? CUDAGraph::kDefaultReuseDelay : size_t(std::min(mb, 0x1p40) * double(1 << 20));
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

struct CUDAGraph::RngState {
  Tensor state;           // Int64 [2] on the device: {seed, offset}
  uint64_t consumed = 0;  // counters the captured draws use
};

// What the capture underway reports to its graph (cuda/capture_observer.h).
struct CUDAGraph::Observer final : CaptureObserver {
  explicit Observer(CUDAGraph* g) : graph(g) {}
  CUDAGraph* graph;
  void launched(EncodedLaunch&& l) override {
    fusion::Log* log = graph->fusion_log_.get();
    if (!log) return;
    if (l.fusable) log->launches.push_back(l.step);
    log->regions.push_back(fusion::Region{std::move(l.nodes), std::move(l.accesses)});
  }
  void keep_alive(std::shared_ptr<void> owner) override { graph->keep_alive_.push_back(std::move(owner)); }
  bool random(int device, uint64_t n, const int64_t** state, uint64_t* offset) override {
    auto& rng = graph->rng_;
    if (!rng) {
      rng = std::make_shared<CUDAGraph::RngState>();
      // Allocated from the graph's pool; written before each replay, never
      // by the graph itself.
      rng->state = tg::empty({2}, TensorOptions().dtype(kInt64).device(Device(kCUDA, device)));
    }
    *state = rng->state.data_ptr<int64_t>();
    *offset = rng->consumed;
    rng->consumed += n;
    return true;
  }
  void abort() override { graph->end_capture(/*abandon=*/true); }
};

CUDAGraph::CUDAGraph(bool keep_graph) : keep_graph_(keep_graph) {}

size_t CUDAGraph::reuse_delay() const { return reuse_delay_ ? *reuse_delay_ : default_reuse_delay(); }

CUDAGraph::~CUDAGraph() {
  try {
    if (capturing_) end_capture(/*abandon=*/true);
    reset();
  } catch (...) {}
}

void CUDAGraph::capture_begin(MempoolId pool, CaptureMode mode) {
  TG_CHECK(!capturing_, "capture_begin: this CUDAGraph is already capturing");
  TG_CHECK(!has_graph(), "capture_begin: this CUDAGraph holds a graph; call reset() first");
  TG_CHECK(is_available(), "capture_begin: CUDA graphs need a GPU, and none is available");
  const Stream s = current_stream(-1);
  TG_CHECK(!s.is_default(),
           "capture_begin: the current stream is the legacy default stream, "
           "which cannot be captured; make a stream current first (StreamGuard with "
           "stream_from_pool()), or use the tg::cuda::Graph guard");
  TG_CHECK(!capture::capturing(s), "capture_begin: the current stream is already capturing");
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
      TG_ERROR("capture_begin: cudaStreamBeginCapture failed: ", cudaGetErrorName(err), " (", cudaGetErrorString(err),
               ")");
    }
    // Allocations of this capture (on this stream and the streams forked
    // from it) come from the pool from now on.
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    unsigned long long id = 0;
    err = cudaStreamGetCaptureInfo(cs, &status, &id);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      capture::discard(cs);
      TG_ERROR("capture_begin: cudaStreamGetCaptureInfo failed: ", cudaGetErrorName(err));
    }
    capture_id_ = id;
    detail::begin_allocate_to_pool(device_, pool_.first, capture_id_, relax_ && relax_allowed() ? reuse_delay() : 0);
  }
  capturing_ = true;
  rng_.reset();
  fused_nodes_ = captured_depth_ = depth_ = 0;
  fusion_log_ =
      (fusion_ && fusion_allowed()) || (relax_ && relax_allowed()) ? std::make_shared<fusion::Log>() : nullptr;
  observer_ = std::make_unique<Observer>(this);
  capture::observe(capture_id_, observer_.get());
}

void CUDAGraph::end_capture(bool abandon) {
  if (!capturing_) return;
  capturing_ = false;
  capture::forget(capture_id_);  // no launch reports to this graph from here on
  std::shared_ptr<fusion::Log> log = std::move(fusion_log_);
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
      TG_ERROR("capture_end: the capture failed: ", cudaGetErrorName(err), " (", cudaGetErrorString(err),
               "); an unsafe call (a host synchronization, or work "
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
namespace {

// Whether most of the graph's memory traffic is in nodes that each stream
// more than the device's L2 holds (over the nodes of known accesses, by the
// bytes each touches). Relaxation lets independent branches run side by side,
// which pays where kernels are small (latency) and costs where each already
// fills the GPU (their working sets evict each other's from L2, which a
// chain would have reused: the FNO step at 128^2, 5.69 ms relaxed, 4.93 ms
// as captured on an H200).
bool streams_past_l2(const std::unordered_map<void*, std::vector<fusion::Access>>& access, int device) {
  if (access.empty()) return false;
  const int64_t l2 = get_device_properties(device).l2_cache_size;
  if (l2 <= 0) return false;
  double total = 0, past = 0;
  for (const auto& [node, list] : access) {
    double b = 0;
    for (const fusion::Access& a : list)
      if (!a.scratch) b += double(a.bytes);  // a library's workspace is not streamed data
    total += b;
    if (b > double(l2)) past += b;
  }
  return past > 0.5 * total;
}

}  // namespace

void CUDAGraph::optimize(void* graph, fusion::Log* log) {
  std::unordered_map<void*, std::vector<fusion::Access>> access;
  if (log) {
    for (const fusion::Recorded& r : log->launches)
      access[r.node] = fusion::accesses_of(r);
    for (fusion::Region& g : log->regions)
      for (void* n : g.nodes) {
        std::vector<fusion::Access>& a = access[n];
        a.insert(a.end(), g.accesses.begin(), g.accesses.end());
      }
  }
  const bool relaxing = log && relax_ && relax_allowed() && !streams_past_l2(access, device_);
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
    TG_ERROR(
        "capture_end: the capture was ended by an op that cannot run under capture "
        "(see the error it threw); nothing was captured");
  }
  end_capture(/*abandon=*/false);
  if (!keep_graph_) instantiate();
}

void CUDAGraph::instantiate() {
  TG_CHECK(graph_ != nullptr,
           "instantiate: no captured graph (capture first; with keep_graph "
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
  TG_CHECK(exec_ != nullptr,
           "replay: no instantiated graph (capture, and with keep_graph call "
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
  TG_CUDA_CHECK(
      cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), static_cast<cudaStream_t>(current_stream(device_).handle())),
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
  TG_CHECK(graph_ != nullptr,
           "raw_graph: no captured graph is kept (construct the CUDAGraph "
           "with keep_graph = true and capture first)");
  return graph_;
}

void* CUDAGraph::raw_graph_exec() const {
  TG_CHECK(exec_ != nullptr, "raw_graph_exec: the graph is not instantiated");
  return exec_;
}

void CUDAGraph::debug_dump(const std::string& path) const {
  TG_CHECK(graph_ != nullptr, "debug_dump: no captured graph is kept (use keep_graph = true)");
  TG_CUDA_CHECK(cudaGraphDebugDotPrint(static_cast<cudaGraph_t>(graph_), path.c_str(), cudaGraphDebugDotFlagsVerbose),
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
      graph_.end_capture(/*abandon=*/true);
    } catch (...) {}
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
