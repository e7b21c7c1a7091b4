// CUDA graphs: capture a sequence of GPU work once (forward, backward, higher
// derivatives) and replay it with one launch (docs/GRAPHS.md). Shaped like
// LibTorch's at::cuda::CUDAGraph and torch.cuda.graph.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <tapegrad/cuda/capture.h>
#include <tapegrad/cuda/static_tensor.h>
#include <tapegrad/cuda/stream.h>

namespace tg {
class Tensor;
}

namespace tg::cuda {

namespace fusion {
struct Log;
}

/// A captured CUDA graph.
///
/// capture_begin() starts capturing the current stream (which must not be the
/// legacy default stream: use a stream from the pool, or the Graph guard);
/// every allocation made by the capturing stream comes from the graph's
/// private pool, and every op that would synchronize with the host throws a
/// tg::Error naming itself and ends the capture (docs/GRAPHS.md lists them).
/// capture_end() ends it and instantiates the graph (unless keep_graph, then
/// instantiate() does, and raw_graph() may be edited first). replay() launches
/// it on the current stream: the same kernels on the same addresses, so
/// inputs are refreshed by copying into the tensors used during capture and
/// outputs are read from the tensors it produced. reset() frees the graph
/// and returns its pool's memory once no other graph uses the pool.
class CUDAGraph {
 public:
  /// keep_graph: keep the captured cudaGraph_t after instantiation
  /// (raw_graph() stays valid; instantiate() is then up to the caller).
  explicit CUDAGraph(bool keep_graph = false);
  ~CUDAGraph();
  CUDAGraph(const CUDAGraph&) = delete;
  CUDAGraph& operator=(const CUDAGraph&) = delete;

  /// Starts capturing the current stream into pool `pool` ({0, 0}: a new
  /// private pool).
  void capture_begin(MempoolId pool = {0, 0}, CaptureMode mode = CaptureMode::Global);
  /// Ends the capture; instantiates unless keep_graph.
  void capture_end();
  /// Instantiates the captured graph (again after editing raw_graph()).
  void instantiate();
  /// Launches the graph on the current stream (no host sync).
  void replay();
  /// Frees the graph and, when no other graph uses it, its pool's memory.
  void reset();
  /// The pool the capture allocated from (to share with another graph).
  MempoolId pool() const { return pool_; }
  /// The captured cudaGraph_t (keep_graph only).
  void* raw_graph() const;
  /// The instantiated cudaGraphExec_t (after instantiate()).
  void* raw_graph_exec() const;
  /// Writes the captured graph as Graphviz DOT to `path` (keep_graph, or
  /// before instantiate() frees it).
  void debug_dump(const std::string& path) const;
  /// Whether a capture was made and not reset.
  bool has_graph() const { return graph_ != nullptr || exec_ != nullptr; }
  /// Whether capture_end() fuses chains of small elementwise kernels into
  /// single nodes (on by default; TG_CUDA_GRAPH_FUSION=0 turns it off for
  /// every graph). Set before capture_begin().
  void set_fusion(bool on) { fusion_ = on; }
  /// Whether fusion is asked for (set_fusion).
  bool fusion() const { return fusion_; }
  /// How many nodes the last capture's fusion removed from the graph (0 when,
  /// with relaxed dependencies, fusing would not have shortened the graph's
  /// longest chain).
  size_t fused_nodes() const { return fused_nodes_; }
  /// Whether capture_end() relaxes the captured dependencies (on by default;
  /// TG_CUDA_GRAPH_RELAX=0 turns it off for every graph): stream capture
  /// orders each node after the previous one on its stream; relaxed, a node
  /// whose memory accesses are known waits only for the nodes whose memory
  /// it conflicts with (read after write, write after read or write), so
  /// independent work (weight gradients beside the input-gradient chain, the
  /// passes of a double backward) runs concurrently. A graph most of whose
  /// memory traffic is in nodes that each touch more bytes than the device's
  /// L2 holds stays as captured (such kernels fill the GPU alone, and side
  /// by side they evict each other's data from L2). Set before capture_begin().
  void set_relax_dependencies(bool on) { relax_ = on; }
  /// Whether relaxation is asked for (set_relax_dependencies).
  bool relax_dependencies() const { return relax_; }
  /// How many bytes of the graph's pool must be freed during the capture
  /// before a freed block is handed out again, when dependencies are relaxed
  /// (default 64 MiB; TG_CUDA_GRAPH_REUSE_DELAY_MB sets it for every graph):
  /// a block reused at once would order the work that wrote it before the
  /// work that reuses it, which relaxation cannot undo; held back, they
  /// may run concurrently. The pool keeps up to this much more memory; held
  /// blocks are reused before a device allocation would fail. 0 reuses at
  /// once. Set before capture_begin().
  void set_reuse_delay(size_t bytes) { reuse_delay_ = bytes; }
  /// The default of set_reuse_delay.
  static constexpr size_t kDefaultReuseDelay = size_t(64) << 20;
  /// The delay asked for (set_reuse_delay), or the default.
  size_t reuse_delay() const;
  /// The longest chain of dependent nodes of the last capture as captured
  /// (after fusion); 0 when relaxation is off.
  size_t captured_depth() const { return captured_depth_; }
  /// The longest chain of dependent nodes after relaxation; 0 when it is off.
  size_t depth() const { return depth_; }

 private:
  struct Observer;  // what the capture underway reports to this graph
  friend struct Observer;
  friend class Graph;
  void end_capture(bool abandon);
  void optimize(void* graph, fusion::Log* log);  // fusion, relaxation
  struct RngState;                               // the generator state the replays move
  std::shared_ptr<RngState> rng_;
  // Host memory the graph's nodes read or write (pinned buffers of captured
  // copies): alive until reset().
  std::vector<std::shared_ptr<void>> keep_alive_;
  // The static tensors' addresses at capture end (checked by replay()).
  std::shared_ptr<void> statics_;
  bool keep_graph_;
  void* graph_ = nullptr;  // cudaGraph_t
  void* exec_ = nullptr;   // cudaGraphExec_t
  MempoolId pool_{0, 0};
  Stream stream_;  // the capturing stream (while capturing)
  int device_ = -1;
  uint64_t capture_id_ = 0;  // CUDA's id of the capture underway
  bool capturing_ = false;
  bool aborted_ = false;
  bool fusion_ = true;
  bool relax_ = true;
  std::optional<size_t> reuse_delay_;
  size_t fused_nodes_ = 0;
  size_t captured_depth_ = 0, depth_ = 0;
  std::shared_ptr<fusion::Log> fusion_log_;  // what the launches of the capture underway reported
  std::unique_ptr<Observer> observer_;
  std::string abort_reason_;
};

/// Captures into `graph` for a scope, as torch.cuda.graph: the work runs on
/// `stream` (a fresh stream from the pool when none is given; never the
/// legacy default stream), which first waits for the caller's current stream;
/// at the end of the scope the capture ends and the caller's stream waits for
/// the capturing one. An exception thrown in the scope ends the capture and
/// discards the graph.
class Graph {
 public:
  /// Starts capturing into `graph` (see the class).
  explicit Graph(CUDAGraph& graph, MempoolId pool = {0, 0}, std::optional<Stream> stream = std::nullopt,
                 CaptureMode mode = CaptureMode::Global);
  ~Graph() noexcept(false);
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

 private:
  CUDAGraph& graph_;
  Stream caller_;
  Stream capture_stream_;
  std::optional<StreamGuard> guard_;
  int uncaught_;
};

///@{

/// Static tensors (docs/GRAPHS.md "Static tensors"): tensors a graph reads
/// and writes in place across replays, such as parameters, their .grad and
/// optimizer state. A graph captured while `t` is registered records the
/// addresses of `t` and of its .grad; replay() throws, naming `name`, when
/// either moved, and while such a graph lives every operation of tapegrad
/// that would move them (zero_grad with set_to_none, Module::to, a
/// gradient accumulation that would replace the .grad) throws instead.
/// Registering again renames; unregister_static() forgets `t` (graphs that
/// recorded it still check it). The optimizers' register_static() and
/// capturable mode register their parameters.
void register_static(const Tensor& t, const std::string& name);
void unregister_static(const Tensor& t);
/// The name `t` is registered with, or "" when it is not static.
std::string static_name(const Tensor& t);
/// (static_in_use(t), in <tapegrad/cuda/static_tensor.h>, says whether a live graph
/// recorded `t`.)
///@}

namespace detail {
/// The tensors registered static now.
std::vector<Tensor> static_tensors();
/// A snapshot of the static tensors' addresses for a graph being captured,
/// counted as in use until the returned handle is dropped.
std::shared_ptr<void> record_statics();
/// Throws a tg::Error naming the tensor when one recorded in `statics`
/// moved since (op: the caller, for the message).
void check_statics(const std::shared_ptr<void>& statics, const char* op);
}  // namespace detail

}  // namespace tg::cuda
