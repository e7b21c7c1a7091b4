// Node (a backward function), Edge and InputMetadata: the tape.
//
// A Node's inputs are the gradients of its forward op's outputs; its outputs
// are the gradients of the forward op's inputs, sent along next_edges (one per
// forward input; an invalid edge means that input needs no gradient).
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <tapegrad/cuda/stream.h>
#include <tapegrad/tensor/tensor.h>

namespace tg::autograd {

class Node;
using variable_list = std::vector<Tensor>;

struct Edge {
  Edge() = default;
  Edge(std::shared_ptr<Node> fn, uint32_t nr) : function(std::move(fn)), input_nr(nr) {}
  bool is_valid() const { return function != nullptr; }
  std::shared_ptr<Node> function;
  uint32_t input_nr = 0;
};
using edge_list = std::vector<Edge>;

// What a gradient flowing into a node's input must look like: the forward
// tensor's shape, dtype and device (the engine reduces broadcast gradients to
// `sizes` and casts them to `dtype`), and for a GPU tensor the current stream
// of its device when the forward op ran (the node runs its backward there).
struct InputMetadata {
  InputMetadata() = default;
  explicit InputMetadata(const Tensor& t);
  Tensor zeros() const;
  IntList sizes;
  ScalarType dtype = ScalarType::Float32;
  Device device{DeviceType::CPU};
  cuda::Stream stream;  // invalid for CPU tensors
};

class Node : public std::enable_shared_from_this<Node> {
 public:
  Node();
  explicit Node(uint64_t sequence_nr);
  // Hands the next edges to the per-thread deferred release, so freeing a
  // chain of any length never recurses (tensor/deferred_release.h).
  virtual ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  Node(Node&&) = delete;
  Node& operator=(Node&&) = delete;

  // Computes the gradients of the forward inputs from those of the forward
  // outputs. Entries of `grads` may be undefined (no gradient flowed there).
  virtual variable_list apply(variable_list&& grads) = 0;
  // e.g. "MulBackward"; and the forward op that created the node, e.g. "mul".
  virtual std::string name() const = 0;
  virtual std::string forward_op() const { return name(); }
  // Frees saved tensors (called after apply unless the graph is retained).
  virtual void release_variables() {}
  // Whether apply must run when every incoming gradient is undefined; the
  // built-in formulas just return undefined gradients, so the engine skips
  // them (custom Functions materialise zeros instead).
  virtual bool apply_on_undefined() const { return false; }

  // The stream the node runs on: that of its first GPU input
  // (docs/STREAMS.md "Backward"); invalid for CPU nodes.
  cuda::Stream stream() const;

  uint64_t sequence_nr() const { return sequence_nr_; }
  uint64_t topological_nr() const { return topological_nr_; }

  size_t num_outputs() const { return next_edges_.size(); }
  const Edge& next_edge(size_t i) const { return next_edges_[i]; }
  const edge_list& next_edges() const { return next_edges_; }
  void add_next_edge(Edge e);
  void set_next_edges(edge_list edges);

  size_t num_inputs() const { return input_metadata_.size(); }
  uint32_t add_input_metadata(const Tensor& t);
  const InputMetadata& input_metadata(size_t i) const { return input_metadata_[i]; }

  // Whether the gradient of forward input i is wanted: its edge is valid and,
  // inside a GraphTask that was given inputs (exec_info non-empty), the node
  // behind the edge will run or be captured. Outside the engine, or with
  // edge trimming off, every valid edge counts.
  bool should_compute_output(size_t i) const;
  bool should_compute_any_output() const;
  // The static rule: the edge is valid (the forward input requires grad).
  bool needs_input_grad(size_t i) const {
    return i < next_edges_.size() && next_edges_[i].is_valid();
  }

  // Tensor pre-hooks on input `input_nr` (from Tensor::register_hook and
  // retain_grad on this node's outputs). A defined return replaces the grad.
  using TensorHook = std::function<Tensor(const Tensor&)>;
  HookHandle add_tensor_pre_hook(uint32_t input_nr, TensorHook hook);
  // Sets the weak slot that retain_grad fills for output `input_nr`.
  void set_retained_grad(uint32_t input_nr, std::weak_ptr<Tensor> slot);
  // Runs the tensor pre-hooks and fills retained grads; the engine calls it
  // before captures and apply.
  virtual void call_tensor_pre_hooks(variable_list& grads);

  // Post hooks: hook(grad_inputs = outputs of apply, grad_outputs = inputs).
  using PostHook = std::function<void(const variable_list&, const variable_list&)>;
  void add_post_hook(PostHook hook) { post_hooks_.push_back(std::move(hook)); }
  void call_post_hooks(const variable_list& outputs, const variable_list& inputs) const;
  bool has_post_hooks() const { return !post_hooks_.empty(); }

  // Held by the engine around apply + release (a retained graph may be run
  // by several threads at once).
  std::mutex& mutex() { return mutex_; }

 protected:
  uint64_t sequence_nr_;
  uint64_t topological_nr_ = 0;  // fixed at construction (edges set once)
  edge_list next_edges_;
  std::vector<InputMetadata> input_metadata_;

 private:
  struct PreHooks;
  std::shared_ptr<PreHooks> pre_hooks_;
  std::vector<PostHook> post_hooks_;
  std::mutex mutex_;
};

namespace detail {
// A process-wide count of nodes created in this thread (PyTorch's per-thread
// sequence number): later nodes run first among ready ones.
uint64_t next_sequence_nr();
// True when no GraphTask runs on this thread, or the running one executes
// everything (no inputs given), or `fn` is needed or captured by it.
bool task_should_execute(const Node* fn);
}  // namespace detail

}  // namespace tg::autograd
