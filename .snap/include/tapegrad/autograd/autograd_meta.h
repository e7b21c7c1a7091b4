// What autograd keeps on a tensor (behind TensorImpl's opaque slot), and the
// helpers the differentiable ops use to record history.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include <tapegrad/autograd/node.h>

namespace tg::autograd {

struct PendingTangent;  // internal (Taylor mode): a tangent computed when first read

/// A forward-mode tangent and the dual level it belongs to. A tensor shares
/// it with the saved copies of the tensor (a node saves its output before
/// the output's tangent is set; forward over reverse reads it there); the
/// level clears it when it ends (so tangent -> node -> tensor cycles break).
struct ForwardGrad {
  Tensor tangent;                           ///< undefined: zero (unless pending)
  uint64_t level = 0;                       ///< 0: none
  std::shared_ptr<PendingTangent> pending;  ///< internal: see forward_ad::detail::defer_tangent
  uint64_t gen = 0;                         ///< unique per tangent set (a view compares its base's against from_gen)
  uint64_t from_gen = 0;                    ///< a view's slot: the base's gen its tangent was taken from
};

/// Forward mode (internal): how a tensor made inside a dual level shares
/// memory with the tensor it was made from (docs/AUTOGRAD.md "Forward mode",
/// views). A view's tangent is that part of its base's tangent (PyTorch's
/// semantics): read from the base's current tangent, and an in-place op on
/// the view writes into it. An alias that does not share the tangent
/// (make_dual, unpack_dual's primal, detach) is tracked only so that the
/// memory it shares is accounted for.
struct ViewOf {
  Tensor base;                                  ///< the tangent's owner (undefined: an alias)
  std::shared_ptr<std::atomic<int64_t>> count;  ///< the memory's known sharers (see AutogradMeta::sharers)
  Tensor read_index;                            ///< lazily: Int64 [numel], the base element (flat) of each element
  Tensor write_index;  ///< lazily: Int64 [base numel], n or base numel + the element written there
  std::mutex mu;       ///< guards the indices and the derivation of the view's tangent
  ~ViewOf() {
    if (count) count->fetch_sub(1);
  }
};

/// A tensor's autograd state (created on first need).
struct AutogradMeta final : AutogradMetaInterface {
  bool requires_grad = false;             ///< leaves only; non-leaves require grad via grad_fn
  uint32_t output_nr = 0;                 ///< which output of grad_fn this tensor is
  std::shared_ptr<Node> grad_fn;          ///< the node that computed it (non-leaves)
  std::weak_ptr<Node> grad_accumulator;   ///< leaves: the AccumulateGrad sink
  Tensor grad;                            ///< leaves: the accumulated gradient
  std::shared_ptr<Tensor> retained_grad;  ///< non-leaves after retain_grad()
  /// Leaves: hooks run on the incoming gradient before accumulation, and
  /// after it (post-accumulate-grad hooks).
  struct LeafHooks;
  std::shared_ptr<LeafHooks> leaf_hooks;  ///< see LeafHooks
  std::shared_ptr<ForwardGrad> fw;        ///< forward-mode tangent (see ForwardGrad)
  std::shared_ptr<ViewOf> view_of;        ///< made from another tensor's memory in a dual level
  /// A tensor not made from another's memory in a dual level: how many live
  /// tensors made from it (or from those) in a level share its memory, so
  /// that others (views taken outside any level) can be told apart.
  std::shared_ptr<std::atomic<int64_t>> sharers;
  std::mutex mutex;  ///< guards grad and the hooks
};

namespace impl {

inline AutogradMeta* meta(const Tensor& t) {
  return t.defined() ? static_cast<AutogradMeta*>(t.impl()->autograd_meta()) : nullptr;
}
AutogradMeta& materialize_meta(const Tensor& t);

inline bool requires_grad(const Tensor& t) {
  AutogradMeta* m = meta(t);
  return m && (m->requires_grad || m->grad_fn);
}

/// The leaf's AccumulateGrad node (created on first use, held weakly by the
/// leaf), or nullptr when t is not a leaf that requires grad.
std::shared_ptr<Node> grad_accumulator(const Tensor& t);
/// Where a gradient w.r.t. t must go: (grad_fn, output_nr) for a non-leaf,
/// (AccumulateGrad, 0) for a leaf that requires grad, invalid otherwise.
Edge gradient_edge(const Tensor& t);
/// Makes t output `output_nr` of fn (adds t's metadata to fn's inputs).
void set_history(const Tensor& t, const std::shared_ptr<Node>& fn);
/// Attaches an existing edge to t (used when re-wrapping saved tensors).
void set_gradient_edge(const Tensor& t, Edge e);

/// The forward-mode tangent of t at the current dual level (undefined when
/// none, or when no level is active).
Tensor fw_grad(const Tensor& t);
/// Whether t has a tangent at the current level, without computing a pending
/// one (see ForwardGrad::pending).
bool has_fw_grad(const Tensor& t);
/// Sets t's tangent at the current level (t must be floating point).
void set_fw_grad(const Tensor& t, const Tensor& tangent);
/// t's tangent slot at the current level, created (empty) when it has none;
/// nullptr when no level is active or t is not floating point.
std::shared_ptr<ForwardGrad> fw_slot(const Tensor& t);
/// Forward mode: records that `out`, made from `self`'s memory while a dual
/// level is active, is a view of it (shares_tangent: its tangent is that part
/// of the base's) or an alias with its own tangent (make_dual, detach). Does
/// nothing outside a level or when out does not share self's memory.
void fw_track_alias(const Tensor& out, const Tensor& self, bool shares_tangent);
/// Forward mode, before in-place op `op` changes self's tangent: throws,
/// naming op, when the tangent could not reach every tensor that shares it
/// (self shares memory with a tensor made outside a level; a view that
/// overlaps itself).
void fw_check_inplace(const Tensor& self, const char* op);
/// Forward mode: self's tangent after an in-place op; a view writes it into
/// its base's tangent (a zero one is made for a base without), so the base
/// and its other views see it.
void set_fw_grad_inplace(const Tensor& self, const Tensor& tangent);
/// Leaf hooks (run by AccumulateGrad and for captured leaves).
void call_leaf_pre_hooks(const Tensor& leaf, Tensor& grad);
/// Throws naming `who` unless a tensor hook's `result` has the shape, dtype
/// and device of the gradient `grad` it was given (as PyTorch).
void check_hook_result(const Tensor& result, const Tensor& grad, const std::string& who);
/// Whether the leaf has pre-hooks (register_hook on a leaf).
bool has_leaf_pre_hooks(const Tensor& leaf);
void call_post_accumulate_hooks(const Tensor& leaf);

}  // namespace impl
}  // namespace tg::autograd
