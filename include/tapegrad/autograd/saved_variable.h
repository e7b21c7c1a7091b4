// SavedVariable: a tensor saved by a forward op for its backward formula.
//
// - Inputs (and leaves) are kept as they are: no cycle is possible.
// - Outputs of the node being built are kept as an alias without autograd
//   metadata (same storage and version counter); unpack re-attaches the
//   owning node, so node -> saved -> tensor -> node never forms a cycle.
// - The version counter is recorded at save time; unpack checks it (no
//   hooks) and names the node, the slot and both versions on mismatch.
// - release() frees the data after backward unless the graph is retained;
//   unpacking afterwards is the "backward through the graph a second time"
//   error.
#pragma once

#include <any>
#include <memory>

#include <tapegrad/autograd/autograd_meta.h>
#include <tapegrad/autograd/node.h>
#include <tapegrad/autograd/saved_hooks.h>

namespace tg::autograd {

/// A tensor a node saved for backward, with its version checked at unpack.
class SavedVariable {
 public:
  SavedVariable() = default;
  /// Saves `t` (is_output: t is the node's own output, kept without a cycle).
  SavedVariable(const Tensor& t, bool is_output);

  /// `owner` is the node that saved it (needed to re-attach outputs), `slot`
  /// the formula's name for it ("self", "other", "result", ...).
  Tensor unpack(const Node* owner, const char* slot) const;
  /// Frees the tensor (after backward, unless the graph is retained); defined() says whether one is held.
  void release();
  bool defined() const { return state_ != State::Empty; }  ///< whether a tensor was saved

 private:
  enum class State : uint8_t { Empty, Saved, Released };
  State state_ = State::Empty;
  bool is_output_ = false;
  bool requires_grad_ = false;
  uint32_t output_nr_ = 0;
  uint32_t saved_version_ = 0;
  // A sparse tensor's parts (indices, values) have counters of their own:
  // their versions at saving, checked at unpack as the tensor's is.
  uint32_t indices_version_ = 0, values_version_ = 0;
  Tensor data_;                        ///< original (input) or alias (output)
  std::shared_ptr<Node> grad_fn_;      ///< inputs saved through hooks
  std::shared_ptr<Node> accumulator_;  ///< leaves saved through hooks
  std::shared_ptr<const SavedTensorHooks> hooks_;
  /// The tensor's tangent slot, when saved inside a dual level and not
  /// kept as the tensor itself: unpack gives the copy that tangent.
  std::shared_ptr<ForwardGrad> fw_;
  std::any payload_;
  /// Metadata for messages after release and for hooks.
  ScalarType dtype_ = ScalarType::Float32;
  IntList sizes_;
};

}  // namespace tg::autograd
