// The engine: GraphTask, dependency counting, exec_info, the ready queue.
// See docs/AUTOGRAD.md "GraphTask and the engine".
#include <tapegrad/autograd/engine.h>

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "autograd/accumulate_grad.h"
#include <tapegrad/autograd/autograd_meta.h>
#include <tapegrad/autograd/forward_ad.h>
#include <tapegrad/autograd/grad_mode.h>
#include "autograd/input_buffer.h"
#include "autograd/thread_state.h"
#include <tapegrad/autograd/saved_hooks.h>
#include <tapegrad/cuda/device.h>
#include <tapegrad/cuda/capture.h>
#include <tapegrad/tensor/error.h>
#include <tapegrad/tensor/ops.h>
#include <tapegrad/tensor/raw.h>

namespace tg::autograd {

// The engine's task types, in detail: the thread state (autograd/thread_state.h) names GraphTask.
namespace detail {

struct ExecInfo {
  bool needed = false;
  // The gradients grad() returns, collected as they reach this node (what
  // PyTorch's engine calls captures; in this file "capture" means CUDA stream
  // capture only): (input index of the node, index in the result vector).
  std::vector<std::pair<uint32_t, uint32_t>> collects;
  bool should_execute() const { return needed || !collects.empty(); }
};

struct ReadyTask {
  std::shared_ptr<Node> fn;
  InputBuffer buffer;
};

// Threads (docs/STREAMS.md "Backward"): the calling thread runs the CPU
// nodes of its GraphTask; the nodes whose stream is on a GPU run on that
// device's one worker thread, which serves every GraphTask of the process.
// A task that has no GPU node, and every reentrant task, runs entirely on
// the calling thread and takes no locks (`concurrent` stays false).
struct GraphTask {
  bool keep_graph = false;
  bool create_graph = false;
  bool concurrent = false;  // some node runs on a device worker
  // The caller's thread state that the task's nodes see on a device worker
  // (WorkerScope sets it as a unit, with the current task): grad mode =
  // create_graph, anomaly mode, the forward-mode level, and the saved-tensor
  // hooks (concurrent tasks only). Taken when the task starts.
  Inherited caller;
  std::mutex mutex;            // guards everything below once concurrent
  std::condition_variable cv;  // the caller waits for CPU work or the end
  int outstanding = 0;         // nodes queued or running
  std::exception_ptr error;    // the first error; later nodes are skipped
  std::unordered_map<Node*, int> dependencies;
  std::unordered_map<Node*, InputBuffer> not_ready;
  std::unordered_map<Node*, ExecInfo> exec_info;  // empty: run everything
  variable_list collected;
  std::vector<ReadyTask> ready;  // max-heap on sequence_nr
  // Streams of the sinks that ran and of collected gradients: the caller's
  // current streams wait on them at the end (docs/STREAMS.md "Backward").
  std::vector<cuda::Stream> leaf_streams;
  // The stream the task was started on when it captures into a CUDA graph
  // (invalid otherwise): see node_stream.
  cuda::Stream capture_stream;
  // queue_callback(): run on the calling thread once every node has run.
  std::vector<std::function<void()>> final_callbacks;
  // Scratch for the graph searches.
  std::unordered_set<Node*> seen;
  std::vector<Node*> stack;

  // Tasks are reused per thread and reentrant depth: clear() keeps the hash
  // tables' buckets, so a backward allocates no tables once warmed up.
  void clear() {
    keep_graph = create_graph = concurrent = false;
    caller = {};
    outstanding = 0;
    error = nullptr;
    dependencies.clear();
    not_ready.clear();
    exec_info.clear();
    collected.clear();
    ready.clear();
    leaf_streams.clear();
    capture_stream = cuda::Stream();
    final_callbacks.clear();
    seen.clear();
    stack.clear();
  }

  // Locks the task only when a worker may touch it.
  std::unique_lock<std::mutex> lock() {
    return concurrent ? std::unique_lock<std::mutex>(mutex) : std::unique_lock<std::mutex>(mutex, std::defer_lock);
  }

  void push(std::shared_ptr<Node> fn, InputBuffer&& buf) {
    ready.push_back({std::move(fn), std::move(buf)});
    std::push_heap(ready.begin(), ready.end(), later_first);
  }
  ReadyTask pop() {
    std::pop_heap(ready.begin(), ready.end(), later_first);
    ReadyTask t = std::move(ready.back());
    ready.pop_back();
    return t;
  }
  static bool later_first(const ReadyTask& a, const ReadyTask& b) { return a.fn->sequence_nr() < b.fn->sequence_nr(); }
};

}  // namespace detail

namespace {

using detail::ExecInfo;
using detail::GraphTask;
using detail::ReadyTask;

// The thread's engine state (autograd/thread_state.h): the running task,
// the reentrant depth, and run_inline, set on device workers and on threads
// that continue a deep reentrant backward: their tasks never wait on a
// worker (which may be waiting on them).
detail::ThreadState& state() { return detail::thread_state(); }
// The thread's tasks by reentrant depth (its ThreadStorage).
std::vector<std::unique_ptr<GraphTask>>& task_pool() {
  return detail::storage_slot<std::vector<std::unique_ptr<GraphTask>>>(detail::thread_storage().engine);
}
constexpr int kMaxReentrantDepth = 32;

struct GraphTaskGuard {
  explicit GraphTaskGuard(GraphTask* t) : prev(state().task) { state().task = t; }
  ~GraphTaskGuard() { state().task = prev; }
  GraphTask* prev;
};

struct DeviceTask {
  GraphTask* task;
  ReadyTask work;
};

// One per device, created with its worker thread on first use and never
// destroyed (the worker outlives static destruction, as in PyTorch).
// Ordered as a task's own ready queue (the latest-created node first), so a
// backward whose nodes all run on one GPU runs them in the same order on the
// worker as inline under capture: gradients accumulate in the same order
// and a replayed graph equals the eager step bit for bit.
struct DeviceQueue {
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<DeviceTask> tasks;  // a heap by later_first

  // Queues the nodes `batch` made ready together, at once: the worker does
  // not start on the first before the others are queued.
  void push(std::vector<DeviceTask>& batch) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      for (DeviceTask& t : batch) {
        tasks.push_back(std::move(t));
        std::push_heap(tasks.begin(), tasks.end(), later_first);
      }
    }
    batch.clear();
    cv.notify_one();
  }
  DeviceTask pop() {
    std::unique_lock<std::mutex> lock(mutex);
    cv.wait(lock, [&] { return !tasks.empty(); });
    std::pop_heap(tasks.begin(), tasks.end(), later_first);
    DeviceTask t = std::move(tasks.back());
    tasks.pop_back();
    return t;
  }
  static bool later_first(const DeviceTask& a, const DeviceTask& b) { return GraphTask::later_first(a.work, b.work); }
};

void worker_main(int device, DeviceQueue* queue);

// The device workers of this process. A forked child has none of its
// parent's threads (and a lock one of them held stays held): the child
// handler leaves the parent's set behind and starts an empty one, whose
// workers start on first use, as PyTorch's engine does through
// pthread_atfork. (A child of a parent that used CUDA cannot use it; CPU
// nodes run on the calling thread.)
struct DeviceWorkers {
  std::mutex mutex;
  std::vector<DeviceQueue*> queues;  // by device; never freed: see above
};
std::atomic<DeviceWorkers*> g_workers{nullptr};

void start_afresh_after_fork() { g_workers.store(new DeviceWorkers()); }

DeviceWorkers& device_workers() {
  static const bool registered = [] {
    g_workers.store(new DeviceWorkers());
    return pthread_atfork(nullptr, nullptr, start_afresh_after_fork) == 0;
  }();
  (void)registered;
  return *g_workers.load();
}

DeviceQueue& device_queue(int device) {
  static const int count = cuda::device_count();
  TG_INTERNAL_ASSERT(device >= 0 && device < count, "autograd: no worker for device ", device);
  DeviceWorkers& w = device_workers();
  std::lock_guard<std::mutex> lock(w.mutex);
  if (w.queues.size() < size_t(count)) w.queues.resize(size_t(count), nullptr);
  DeviceQueue*& q = w.queues[size_t(device)];
  if (!q) {
    q = new DeviceQueue();
    std::thread(worker_main, device, q).detach();
  }
  return *q;
}

// The root of a backward with several outputs: its outputs are their grads.
class GraphRoot final : public Node {
 public:
  GraphRoot(const edge_list& roots, variable_list grads) : Node(UINT64_MAX), grads_(std::move(grads)) {
    set_next_edges(roots);
  }
  variable_list apply(variable_list&&) override { return grads_; }
  std::string name() const override { return "GraphRoot"; }
  // It has no inputs: it must run although none of them is defined.
  bool apply_on_undefined() const override { return true; }

 private:
  variable_list grads_;
};

bool is_expandable_to(const IntList& shape, const IntList& desired) {
  if (shape.size() > desired.size()) return false;
  size_t off = desired.size() - shape.size();
  for (size_t i = 0; i < shape.size(); ++i)
    if (shape[i] != desired[off + i] && shape[i] != 1) return false;
  return true;
}

// Every gradient a node sends must match the metadata of the input it flows
// into: broadcast gradients are summed back, dtypes cast (docs/AUTOGRAD.md "GraphTask and the engine").
void validate_outputs(const Node& fn, variable_list& grads) {
  TG_CHECK(grads.size() == fn.num_outputs(), fn.name(), ": returned ", grads.size(),
           " gradients but the forward op has ", fn.num_outputs(), " inputs");
  for (size_t i = 0; i < grads.size(); ++i) {
    Tensor& g = grads[i];
    const Edge& e = fn.next_edge(i);
    if (!g.defined() || !e.is_valid()) continue;
    const InputMetadata& m = e.function->input_metadata(e.input_nr);
    if (g.sizes() != m.sizes) {
      TG_CHECK(is_expandable_to(m.sizes, g.sizes()), fn.name(), ": returned an invalid gradient at index ", i,
               ": got shape ", shape_str(g.sizes()), " but expected shape compatible with ", shape_str(m.sizes));
      g = sum_to(g, m.sizes);
    }
    if (g.device() != m.device && m.sizes.empty()) g = g.to(m.device);  // 0-dim: moved
    TG_CHECK(g.device() == m.device, fn.name(), ": returned a gradient on ", g.device(), " at index ", i,
             " but the input lives on ", m.device);
    if (g.dtype() != m.dtype) g = g.to(m.dtype);
  }
}

void compute_dependencies(GraphTask& task, Node* root, uint64_t min_topo_nr) {
  auto& stack = task.stack;
  auto& seen = task.seen;
  stack.assign(1, root);
  seen.clear();
  seen.insert(root);
  while (!stack.empty()) {
    Node* fn = stack.back();
    stack.pop_back();
    if (fn->topological_nr() < min_topo_nr) continue;  // cannot reach an input
    for (const Edge& e : fn->next_edges()) {
      Node* next = e.function.get();
      if (!next) continue;
      task.dependencies[next] += 1;
      if (seen.insert(next).second) {
        stack.push_back(next);
        if (!task.concurrent && next->stream().is_valid()) task.concurrent = true;
      }
    }
  }
}

void init_to_execute(GraphTask& task, Node* root, const edge_list& needed, const edge_list& collects,
                     uint64_t min_topo_nr) {
  for (const Edge& e : needed)
    task.exec_info[e.function.get()].needed = true;
  for (size_t i = 0; i < collects.size(); ++i)
    task.exec_info[collects[i].function.get()].collects.emplace_back(collects[i].input_nr, uint32_t(i));
  task.collected.resize(collects.size());
  // A node is needed when one of its children is needed or collected. The
  // search goes past outputs to reach deeper ones.
  struct Frame {
    Node* fn;
    size_t next;
  };
  auto should_execute = [&](Node* fn) {
    auto it = task.exec_info.find(fn);
    return it != task.exec_info.end() && it->second.should_execute();
  };
  std::vector<Frame> stack{{root, 0}};
  auto& seen = task.seen;
  seen.clear();
  seen.insert(root);
  while (!stack.empty()) {
    Frame& f = stack.back();
    if (f.next < f.fn->num_outputs()) {
      Node* child = f.fn->next_edge(f.next++).function.get();
      if (!child || child->topological_nr() < min_topo_nr) continue;
      if (seen.insert(child).second) {
        stack.push_back({child, 0});
        continue;
      }
      if (should_execute(child)) task.exec_info[f.fn].needed = true;
    } else {
      Node* fn = f.fn;
      stack.pop_back();
      if (!stack.empty() && should_execute(fn)) task.exec_info[stack.back().fn].needed = true;
    }
  }
}

void check_anomaly(const Node& fn, const variable_list& outputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& g = outputs[i];
    if (!g.defined() || !is_differentiable(g.dtype()) || g.numel() == 0) continue;
    Tensor bad = raw::sum(ne(g, g));
    TG_CHECK(bad.item<int64_t>() == 0, "anomaly mode: ", fn.name(), " (the backward of the forward op '",
             fn.forward_op(), "') returned NaN values in its output ", i, " (shape ", shape_str(g.sizes()), ")");
  }
}

void add_leaf_stream(GraphTask& task, const cuda::Stream& s) {
  if (!s.is_valid()) return;
  for (const cuda::Stream& l : task.leaf_streams)
    if (l == s) return;
  task.leaf_streams.push_back(s);
}

// Queues a ready node: on its device's worker when it runs on a GPU and the
// task is concurrent (into `gpu`, flushed by flush_gpu), else for the calling
// thread. The caller holds the lock.
void schedule(GraphTask& task, std::shared_ptr<Node> fn, InputBuffer&& buf, std::vector<DeviceTask>& gpu) {
  ++task.outstanding;
  if (task.concurrent) {
    if (fn->stream().is_valid()) {
      gpu.push_back({&task, {std::move(fn), std::move(buf)}});
      return;
    }
    task.push(std::move(fn), std::move(buf));
    task.cv.notify_all();
    return;
  }
  task.push(std::move(fn), std::move(buf));
}

// Hands the GPU nodes made ready together to their devices' workers (one
// batch per device; almost always there is one device).
void flush_gpu(std::vector<DeviceTask>& gpu) {
  while (!gpu.empty()) {
    const int device = gpu.front().work.fn->stream().device_index();
    auto others = std::stable_partition(
        gpu.begin(), gpu.end(), [device](const DeviceTask& t) { return t.work.fn->stream().device_index() == device; });
    std::vector<DeviceTask> rest(std::make_move_iterator(others), std::make_move_iterator(gpu.end()));
    gpu.erase(others, gpu.end());
    device_queue(device).push(gpu);  // empties gpu
    gpu = std::move(rest);
  }
}

// The stream node `fn` runs on and receives its gradients on: its forward's
// (Node::stream), except in a task that captures into a CUDA graph, where a
// node whose stream is outside the capture runs on the capturing stream. Such
// a node was made before the capture: a leaf's AccumulateGrad kept alive by
// an earlier graph (odeint's adjoint differentiates f in the parameters of
// the solve being differentiated), made on the legacy default stream, which
// cannot join a capture; waiting on captured work there would end it.
cuda::Stream node_stream(const GraphTask& task, const Node& fn) {
  cuda::Stream s = fn.stream();
  if (!task.capture_stream.is_valid() || !s.is_valid() || s == task.capture_stream ||
      s.device_index() != task.capture_stream.device_index() || cuda::is_stream_capturing(s))
    return s;
  return task.capture_stream;
}

// Whether fn runs in this task and no grad() collects its inputs.
bool runs_uncollected(const GraphTask& task, const Node& fn) {
  if (task.exec_info.empty()) return true;
  auto it = task.exec_info.find(const_cast<Node*>(&fn));
  return it != task.exec_info.end() && it->second.needed && it->second.collects.empty();
}

void evaluate_function(GraphTask& task, const std::shared_ptr<Node>& fn_ptr, InputBuffer& buffer) {
  Node& fn = *fn_ptr;
  // The node runs on the stream of its forward op, after waiting for the
  // last writer of each of its inputs (events; no host sync).
  const cuda::Stream stream = node_stream(task, fn);
  std::optional<cuda::StreamGuard> on_stream;
  if (stream.is_valid()) {
    on_stream.emplace(stream);
    // A leaf's held weight-gradient products go straight into its .grad
    // (docs/AUTOGRAD.md "Weight gradients"); the node is then done.
    if (auto* acc = dynamic_cast<AccumulateGrad*>(&fn);
        acc && !task.create_graph && !forward_ad::is_active() && runs_uncollected(task, fn)) {
      std::lock_guard<std::mutex> lock(fn.mutex());
      if (acc->accumulate_products_in_place(buffer, stream)) {
        auto task_lock = task.lock();
        add_leaf_stream(task, stream);
        return;
      }
    }
    buffer.wait_for_consumer(stream);
  }
  variable_list inputs = buffer.release();
  fn.call_tensor_pre_hooks(inputs);
  if (!task.exec_info.empty()) {
    auto it = task.exec_info.find(&fn);
    if (it != task.exec_info.end() && !it->second.collects.empty()) {
      auto lock = task.lock();
      for (auto [in, out] : it->second.collects) {
        task.collected[out] = inputs[in];
        add_leaf_stream(task, stream);
      }
    }
    // A collected node runs only if something deeper is needed (OURS).
    if (it == task.exec_info.end() || !it->second.needed) return;
  }
  bool any_defined = false;
  for (const Tensor& t : inputs)
    any_defined |= t.defined();
  variable_list outputs;
  FormulaProducts products;  // weight gradients the formula hands over unformed (accumulation.h)
  if (!any_defined && !fn.apply_on_undefined()) {
    outputs.resize(fn.num_outputs());
  } else {
    variable_list inputs_copy;
    if (fn.has_post_hooks()) inputs_copy = inputs;
    std::lock_guard<std::mutex> lock(fn.mutex());
    outputs = products.apply(fn, std::move(inputs), task.create_graph);
    if (!task.keep_graph) fn.release_variables();
    if (fn.has_post_hooks()) fn.call_post_hooks(outputs, inputs_copy);
  }
  if (is_anomaly_enabled()) check_anomaly(fn, outputs);
  validate_outputs(fn, outputs);

  std::vector<DeviceTask> gpu;
  auto lock = task.lock();
  if (fn.num_outputs() == 0) add_leaf_stream(task, stream);

  for (size_t i = 0; i < outputs.size(); ++i) {
    const Edge& e = fn.next_edge(i);
    if (!e.is_valid()) continue;
    Node* next = e.function.get();
    auto dit = task.dependencies.find(next);
    TG_INTERNAL_ASSERT(dit != task.dependencies.end(), "dependency not found for ", next->name());
    bool ready = --dit->second == 0;
    if (ready) task.dependencies.erase(dit);
    auto add = [&](InputBuffer& buf) {
      buf.add(e.input_nr, products.take(i, outputs), stream, node_stream(task, *next));
    };
    auto nit = task.not_ready.find(next);
    if (nit == task.not_ready.end()) {
      if (!task.exec_info.empty()) {
        auto eit = task.exec_info.find(next);
        if (eit == task.exec_info.end() || !eit->second.should_execute()) continue;
      }
      InputBuffer buf(next->num_inputs());
      add(buf);
      if (ready) schedule(task, e.function, std::move(buf), gpu);
      else task.not_ready.emplace(next, std::move(buf));
    } else {
      add(nit->second);
      if (ready) {
        schedule(task, e.function, std::move(nit->second), gpu);
        task.not_ready.erase(nit);
      }
    }
  }
  flush_gpu(gpu);
}

// Runs one ready node of `task` on this thread (unless an earlier node
// failed), then counts it done. The node and its inputs are dropped before
// the count, so memory is back when the caller resumes.
void run_node(GraphTask& task, ReadyTask& work) {
  bool failed;
  {
    auto lock = task.lock();
    failed = task.error != nullptr;
  }
  if (!failed) {
    try {
      evaluate_function(task, work.fn, work.buffer);
    } catch (...) {
      auto lock = task.lock();
      if (!task.error) task.error = std::current_exception();
    }
  }
  work = ReadyTask{nullptr, InputBuffer(0)};
  auto lock = task.lock();
  if (--task.outstanding == 0 && task.concurrent) task.cv.notify_all();
}

// A node of `task` on a device worker runs under its caller's thread state,
// taken over as a unit (task.caller: grad mode = create_graph, anomaly mode,
// the forward-mode level for tangents in backward formulas, the saved-tensor
// hooks) with the current task, and the worker's own is back when the node
// is done.
class WorkerScope {
 public:
  explicit WorkerScope(GraphTask& task) : task_(&task), inherited_(task.caller) {}

 private:
  GraphTaskGuard task_;
  detail::InheritScope inherited_;
};

void worker_main(int device, DeviceQueue* queue) {
  state().run_inline = true;
  try {
    cuda::set_device(device);  // each node's StreamGuard sets it again
  } catch (const std::exception&) {}
  for (;;) {
    DeviceTask t = queue->pop();
    GraphTask& task = *t.task;
    WorkerScope scope(task);
    run_node(task, t.work);
  }
}

variable_list run_graph_task(const edge_list& roots, variable_list root_grads, bool keep_graph, bool create_graph,
                             const edge_list& needed, const edge_list& collects) {
  size_t depth = size_t(state().reentrant_depth);
  std::vector<std::unique_ptr<GraphTask>>& pool = task_pool();
  while (pool.size() < depth + 1)
    pool.push_back(std::make_unique<GraphTask>());
  GraphTask& task = *pool[depth];
  task.clear();
  struct Clear {  // drop every tensor the task holds, also on error
    GraphTask& t;
    ~Clear() { t.clear(); }
  } clear_at_exit{task};
  task.keep_graph = keep_graph;
  task.create_graph = create_graph;
  // Reentrant tasks (from a node, on the caller or on a worker) run inline,
  // and so does a task on a capturing stream: its GPU nodes are captured by
  // this thread, in order, into the caller's graph (docs/GRAPHS.md).
  const bool capturing = cuda::is_current_stream_capturing();
  const bool use_workers = state().reentrant_depth == 1 && !state().run_inline && !capturing;
  if (capturing) task.capture_stream = cuda::current_stream(-1);

  std::shared_ptr<Node> root;
  InputBuffer root_buffer(0);
  if (roots.size() == 1) {
    root = roots[0].function;
    root_buffer = InputBuffer(root->num_inputs());
    // The root gradient was produced on the caller's current stream.
    root_buffer.add(roots[0].input_nr, std::move(root_grads[0]), cuda::Stream(), node_stream(task, *root));
  } else {
    root = std::make_shared<GraphRoot>(roots, std::move(root_grads));
  }

  uint64_t min_topo_nr = 0;
  if (!needed.empty() || !collects.empty()) {
    min_topo_nr = UINT64_MAX;
    for (const Edge& e : needed)
      min_topo_nr = std::min(min_topo_nr, e.function->topological_nr());
    for (const Edge& e : collects)
      min_topo_nr = std::min(min_topo_nr, e.function->topological_nr());
  }
  compute_dependencies(task, root.get(), min_topo_nr);
  task.concurrent = use_workers && (task.concurrent || root->stream().is_valid());
  task.caller = detail::inherit(create_graph, /*with_hooks=*/task.concurrent);
  if (!needed.empty() || !collects.empty()) init_to_execute(task, root.get(), needed, collects, min_topo_nr);

  GraphTaskGuard guard(&task);
  AutoGradMode grad_mode(create_graph);
  {
    auto lock = task.lock();
    std::vector<DeviceTask> gpu;
    schedule(task, root, std::move(root_buffer), gpu);
    flush_gpu(gpu);
  }
  for (;;) {
    ReadyTask t{nullptr, InputBuffer(0)};
    {
      auto lock = task.lock();
      if (task.concurrent) task.cv.wait(lock, [&] { return !task.ready.empty() || task.outstanding == 0; });
      if (task.ready.empty()) break;  // and nothing is queued or running
      t = task.pop();
    }
    run_node(task, t);
  }
  if (task.error) std::rethrow_exception(task.error);
  TG_CHECK(task.not_ready.empty(),
           "autograd: could not compute gradients for "
           "some functions (",
           task.not_ready.begin()->first->name(), " never became ready)");
  // Final callbacks, in the order queued (a callback may queue more). The
  // workers are done with this task: no lock.
  for (size_t i = 0; i < task.final_callbacks.size(); ++i) {
    std::function<void()> cb = std::move(task.final_callbacks[i]);
    cb();
  }
  // The caller's current streams wait (events, no host sync) on every leaf
  // stream, so .grad and the collected gradients are ready in its context.
  for (const cuda::Stream& leaf : task.leaf_streams) {
    cuda::Stream caller = cuda::current_stream(leaf.device_index());
    if (caller != leaf) caller.wait_stream(leaf);
  }
  return std::move(task.collected);
}

}  // namespace

void queue_callback(std::function<void()> callback) {
  GraphTask* t = state().task;
  TG_CHECK(t,
           "queue_callback: no backward is running on this thread (call it from a hook or a node "
           "during backward)");
  auto lock = t->lock();
  t->final_callbacks.push_back(std::move(callback));
}

namespace detail {

bool task_should_execute(const Node* fn) {
  GraphTask* t = state().task;
  if (!t || t->exec_info.empty()) return true;
  auto it = t->exec_info.find(const_cast<Node*>(fn));
  return it != t->exec_info.end() && it->second.should_execute();
}

variable_list execute(const edge_list& roots, variable_list root_grads, bool keep_graph, bool create_graph,
                      const edge_list& needed, const edge_list& collects) {
  struct Depth {
    Depth() { ++state().reentrant_depth; }
    ~Depth() { --state().reentrant_depth; }
  } depth;
  if (state().reentrant_depth <= kMaxReentrantDepth)
    return run_graph_task(roots, std::move(root_grads), keep_graph, create_graph, needed, collects);
  // Deep reentrant backward: continue on a fresh thread (bounded stack),
  // which takes over this thread's state as a device worker does (grad
  // mode, anomaly mode, the forward-mode level, the saved-tensor hooks); the
  // caller waits for it.
  variable_list result;
  std::exception_ptr error;
  const detail::Inherited carried = detail::inherit(is_grad_enabled(), /*with_hooks=*/true);
  std::thread worker([&] {
    try {
      state().run_inline = true;
      detail::InheritScope scope(carried);
      result = run_graph_task(roots, std::move(root_grads), keep_graph, create_graph, needed, collects);
    } catch (...) {
      error = std::current_exception();
    }
  });
  worker.join();
  if (error) std::rethrow_exception(error);
  return result;
}

}  // namespace detail

namespace {

void make_roots(const char* op, const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs,
                edge_list& edges, variable_list& grads) {
  TG_CHECK(!outputs.empty(), op, ": got no outputs to differentiate");
  TG_CHECK(grad_outputs.empty() || grad_outputs.size() == outputs.size(), op, ": got ", grad_outputs.size(),
           " grad_outputs for ", outputs.size(), " outputs; pass one per output (or none for one-element outputs)");
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& y = outputs[i];
    TG_CHECK(y.defined(), op, ": output ", i, " is an undefined tensor");
    TG_CHECK(y.requires_grad(), op, ": output ", i, " (shape ", shape_str(y.sizes()),
             ") does not require grad and has no grad_fn. If it came from an earlier "
             "grad() or backward(), that call needs create_graph=true for its results "
             "to be differentiable; otherwise, was it computed under NoGradGuard, or "
             "from tensors that do not require grad?");
    Tensor g = grad_outputs.empty() ? Tensor() : grad_outputs[i];
    if (!g.defined()) {
      TG_CHECK(y.numel() == 1, op,
               ": grad can be implicitly created only for "
               "outputs with one element, but output ",
               i, " has shape ", shape_str(y.sizes()), "; pass a gradient (grad_outputs) of that shape");
      TG_CHECK(!is_complex(y.dtype()), op, ": grad can be implicitly created only for real outputs, but output ", i,
               " is ", y.dtype(),
               "; pass a gradient (grad_outputs), or differentiate a real function of it (abs, real)");
      g = ones_like(y);
    } else {
      TG_CHECK(g.sizes() == y.sizes(), op, ": mismatch in shape: grad_outputs[", i, "] has shape ",
               shape_str(g.sizes()), " but outputs[", i, "] has shape ", shape_str(y.sizes()));
      TG_CHECK(g.device() == y.device(), op, ": grad_outputs[", i, "] is on ", g.device(), " but outputs[", i,
               "] is on ", y.device());
      TG_CHECK(is_differentiable(g.dtype()), op, ": grad_outputs[", i, "] must be floating point, got ", g.dtype());
      TG_CHECK(is_complex(g.dtype()) == is_complex(y.dtype()), op, ": mismatch in dtype: grad_outputs[", i, "] is ",
               g.dtype(), " but outputs[", i, "] is ", y.dtype(),
               " (a gradient is complex exactly when its output is)");
      if (g.dtype() != y.dtype()) g = g.to(y.dtype());
    }
    edges.push_back(impl::gradient_edge(y));
    grads.push_back(std::move(g));
  }
}

}  // namespace

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, std::optional<bool> retain_graph, bool create_graph,
                         bool allow_unused) {
  TG_CHECK(!inputs.empty(), "grad: requires non-empty inputs");
  edge_list roots;
  variable_list root_grads;
  make_roots("grad", outputs, grad_outputs, roots, root_grads);
  edge_list collects;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    TG_CHECK(x.defined(), "grad: input ", i, " is an undefined tensor");
    TG_CHECK(x.requires_grad(), "grad: input ", i, " (shape ", shape_str(x.sizes()),
             ") does not require grad; call requires_grad_() on it before "
             "computing the outputs");
    collects.push_back(impl::gradient_edge(x));
  }
  variable_list result =
      detail::execute(roots, std::move(root_grads), retain_graph.value_or(create_graph), create_graph, {}, collects);
  for (size_t i = 0; i < result.size(); ++i)
    TG_CHECK(result[i].defined() || allow_unused, "grad: input ", i, " (shape ", shape_str(inputs[i].sizes()),
             ") was not used to compute the "
             "outputs, so it has no gradient; pass allow_unused=true to get an "
             "undefined tensor for it");
  return result;
}

void backward(const std::vector<Tensor>& tensors, const std::vector<Tensor>& grad_tensors,
              std::optional<bool> retain_graph, bool create_graph, const std::vector<Tensor>& inputs) {
  edge_list roots;
  variable_list root_grads;
  make_roots("backward", tensors, grad_tensors, roots, root_grads);
  edge_list needed, collects;
  std::vector<Tensor> collected_inputs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    TG_CHECK(x.defined() && x.requires_grad(), "backward: inputs[", i,
             "] does not require grad; only tensors that require grad can be "
             "given as inputs");
    if (x.is_leaf()) {
      needed.push_back(impl::gradient_edge(x));
    } else {
      collects.push_back(impl::gradient_edge(x));
      collected_inputs.push_back(x);
    }
  }
  variable_list got = detail::execute(roots, std::move(root_grads), retain_graph.value_or(create_graph), create_graph,
                                      needed, collects);
  // Non-leaf inputs: their incoming gradient was collected without running
  // their node (OURS); accumulate it into .grad like a leaf.
  AutoGradMode mode(create_graph);
  for (size_t i = 0; i < got.size(); ++i) {
    const Tensor& x = collected_inputs[i];
    if (!got[i].defined() || x.retains_grad()) continue;  // retain_grad already did it
    accumulate_grad(x, x.mutable_grad(), std::move(got[i]), 1);
  }
}

}  // namespace tg::autograd
