// Forward-mode automatic differentiation (docs/AUTOGRAD.md "Forward mode"),
// as torch.autograd.forward_ad: inside a dual_level, make_dual attaches a
// tangent to a tensor, every op with a tangent rule pushes tangents forward
// with its value, and unpack_dual reads them.
//
//   tg::autograd::forward_ad::dual_level level;
//   Tensor x = forward_ad::make_dual(x0, v);
//   Tensor y = f(x);
//   Tensor jv = forward_ad::unpack_dual(y).tangent;   // J v, one forward pass
//
// Tangent rules are written with the differentiable ops, so tangents carry
// reverse-mode history (forward-over-reverse and reverse-over-forward
// compose). An op without a rule that sees a tangent throws, naming it.
#pragma once

#include <cstdint>

#include <tapegrad/tensor/tensor.h>

namespace tg::autograd::forward_ad {

/// Forward mode is on for this thread while a dual_level lives; one level at
/// a time (entering a second throws). Tangents made inside are dropped from
/// view when it ends.
class dual_level {
 public:
  dual_level();
  /// A batched level: every tangent carries `batch` directions as a leading
  /// dimension (shape [batch] + the primal's), and one forward pass pushes
  /// them all (k Jacobian-vector products in one pass; the GEMMs see k
  /// times the rows).
  explicit dual_level(int64_t batch);
  ~dual_level();
  dual_level(const dual_level&) = delete;
  dual_level& operator=(const dual_level&) = delete;
};

/// Whether a dual_level is active on this thread.
bool is_active();
/// The active level's tangent batch (0: unbatched, or no level).
int64_t batch_size();

/// A tensor equal to `primal` (a view of it, with its reverse-mode history)
/// carrying `tangent` (same shape, dtype and device, floating point; in a
/// batched level [batch] + the primal's shape) at the current level.
Tensor make_dual(const Tensor& primal, const Tensor& tangent);

/// A dual tensor's parts.
struct UnpackedDual {
  Tensor primal;   ///< a view of the tensor without its tangent (sparse: a copy)
  Tensor tangent;  ///< undefined when it has none at the current level
};

/// The primal and the tangent of `t` at the current level.
UnpackedDual unpack_dual(const Tensor& t);

namespace detail {
/// Internal: this thread's level (0: none) and its tangent batch (0:
/// unbatched; kept while paused, so rules read it).
uint64_t current_level();
int64_t current_batch();

/// Internal: forward mode paused on this thread while it lives (tangent
/// rules run under it, so their own ops push no tangents), or, given a
/// level and its batch, that level active (the engine's workers take their
/// caller's).
class Suspend {
 public:
  Suspend();
  Suspend(uint64_t level, int64_t batch);
  ~Suspend();
  Suspend(const Suspend&) = delete;
  Suspend& operator=(const Suspend&) = delete;

 private:
  uint64_t saved_;
  int64_t saved_batch_;
};
}  // namespace detail

}  // namespace tg::autograd::forward_ad
