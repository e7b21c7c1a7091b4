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
/// Gradients (or inputs) by position.
using variable_list = std::vector<Tensor>;

/// Where a gradient goes: input `input_nr` of node `function`; invalid (no
/// function) where the forward input needs no gradient.
struct Edge {
  Edge() = default;
  /// The edge to input `nr` of `fn`.
  Edge(std::shared_ptr<Node> fn, uint32_t nr) : function(std::move(fn)), input_nr(nr) {}
  /// Whether the edge leads anywhere.
  bool is_valid() const { return function != nullptr; }
  std::shared_ptr<Node> function;  ///< the node the gradient goes to
  uint32_t input_nr = 0;           ///< which of its inputs
};
/// A node's edges, one per forward input.
using edge_list = std::vector<Edge>;

/// What a gradient flowing into a node's input must look like: the forward
/// tensor's shape, dtype and device (the engine reduces broadcast gradients to
/// `sizes` and casts them to `dtype`), and for a GPU tensor the current stream
/// of its device when the forward op ran (the node runs its backward there).
struct InputMetadata {
  InputMetadata() = default;
  /// The metadata of `t` (and the current stream of its device).
  explicit InputMetadata(const Tensor& t);
  /// A zero gradient of this shape, dtype and device.
  Tensor zeros() const;
  IntList sizes;                           ///< the forward tensor's sizes
  ScalarType dtype = ScalarType::Float32;  ///< its dtype
  Device device{DeviceType::CPU};          ///< its device
  cuda::Stream stream;                     ///< invalid for CPU tensors
};

/// A backward function of the tape (docs/AUTOGRAD.md "Recording"). Custom
/// nodes derive from it and implement apply() and name().
class Node : public std::enable_shared_from_this<Node> {
 public:
  /// A node with the next sequence number (detail::next_sequence_nr).
  Node();
  /// A node with the given sequence number (later nodes run first).
  explicit Node(uint64_t sequence_nr);
  /// Hands the next edges to the per-thread deferred release, so freeing a
  /// chain of any length never recurses (tensor/deferred_release.h).
  virtual ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  Node(Node&&) = delete;
  Node& operator=(Node&&) = delete;

  /// Computes the gradients of the forward inputs from those of the forward
  /// outputs. Entries of `grads` may be undefined (no gradient flowed there).
  virtual variable_list apply(variable_list&& grads) = 0;
  /// e.g. "MulBackward".
  virtual std::string name() const = 0;
  /// The forward op that created the node, e.g. "mul" (error messages use it).
  virtual std::string forward_op() const { return name(); }
  /// Frees saved tensors (called after apply unless the graph is retained).
  virtual void release_variables() {}
  /// Whether apply must run when every incoming gradient is undefined; the
  /// built-in formulas just return undefined gradients, so the engine skips
  /// them (custom Functions materialise zeros instead).
  virtual bool apply_on_undefined() const { return false; }

  /// The stream the node runs on: that of its first GPU input
  /// (docs/STREAMS.md "Backward"); invalid for CPU nodes.
  cuda::Stream stream() const;

  /// @name Order
  ///@{

  /// The creation order (later nodes run first among ready ones) and the
  /// longest path to a leaf (the engine stops searching below it).
  uint64_t sequence_nr() const { return sequence_nr_; }
  uint64_t topological_nr() const { return topological_nr_; }
  ///@}

  /// @name Edges (outputs of apply, one per forward input)
  ///@{

  /// How many edges; one edge; all; append one; set all (once, at recording).
  size_t num_outputs() const { return next_edges_.size(); }
  const Edge& next_edge(size_t i) const { return next_edges_[i]; }
  const edge_list& next_edges() const { return next_edges_; }
  void add_next_edge(Edge e);
  void set_next_edges(edge_list edges);
  ///@}

  /// @name Inputs (gradients of the forward outputs)
  ///@{

  /// How many inputs; record the metadata of a forward output (returns its
  /// input number); the metadata of input i.
  size_t num_inputs() const { return input_metadata_.size(); }
  uint32_t add_input_metadata(const Tensor& t);
  const InputMetadata& input_metadata(size_t i) const { return input_metadata_[i]; }
  ///@}

  /// Whether the gradient of forward input i is wanted: its edge is valid and,
  /// inside a GraphTask that was given inputs (exec_info non-empty), the node
  /// behind the edge will run or be captured. Outside the engine, or with
  /// edge trimming off, every valid edge counts.
  bool should_compute_output(size_t i) const;
  /// should_compute_output() for some output.
  bool should_compute_any_output() const;
  /// The static rule: the edge is valid (the forward input requires grad).
  bool needs_input_grad(size_t i) const { return i < next_edges_.size() && next_edges_[i].is_valid(); }

  /// Tensor pre-hooks on input `input_nr` (from Tensor::register_hook and
  /// retain_grad on this node's outputs). A defined return replaces the grad.
  using TensorHook = std::function<Tensor(const Tensor&)>;
  /// Adds a tensor pre-hook on input `input_nr`; the handle removes it.
  HookHandle add_tensor_pre_hook(uint32_t input_nr, TensorHook hook);
  /// Sets the weak slot that retain_grad fills for output `input_nr`.
  void set_retained_grad(uint32_t input_nr, std::weak_ptr<Tensor> slot);
  /// Runs the tensor pre-hooks and fills retained grads; the engine calls it
  /// before captures and apply.
  virtual void call_tensor_pre_hooks(variable_list& grads);
  /// Whether any tensor pre-hook or retained grad is registered.
  bool has_tensor_pre_hooks() const;

  /// Post hooks: hook(grad_inputs = outputs of apply, grad_outputs = inputs).
  using PostHook = std::function<void(const variable_list&, const variable_list&)>;
  /// Adds a post hook.
  void add_post_hook(PostHook hook) { post_hooks_.push_back(std::move(hook)); }
  /// Runs the post hooks (the engine, after apply).
  void call_post_hooks(const variable_list& outputs, const variable_list& inputs) const;
  /// Whether there are post hooks.
  bool has_post_hooks() const { return !post_hooks_.empty(); }

  /// Held by the engine around apply + release (a retained graph may be run
  /// by several threads at once).
  std::mutex& mutex() { return mutex_; }

 protected:
  uint64_t sequence_nr_;                       ///< see sequence_nr()
  uint64_t topological_nr_ = 0;                ///< fixed at construction (edges set once)
  edge_list next_edges_;                       ///< see next_edges()
  std::vector<InputMetadata> input_metadata_;  ///< see input_metadata()

 private:
  struct PreHooks;
  std::shared_ptr<PreHooks> pre_hooks_;
  std::vector<PostHook> post_hooks_;
  std::mutex mutex_;
};

namespace detail {
/// The next sequence number, from one counter for the whole process (PyTorch
/// counts per thread; one count orders the nodes a device worker records in
/// a create_graph backward against the forward's): later nodes run first
/// among ready ones.
uint64_t next_sequence_nr();
/// True when no GraphTask runs on this thread, or the running one executes
/// everything (no inputs given), or `fn` is needed or captured by it.
bool task_should_execute(const Node* fn);
}  // namespace detail

}  // namespace tg::autograd
