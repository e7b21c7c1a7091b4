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

#include <functional>

#include <cstdint>
#include <memory>
#include <vector>

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

// ---- Taylor mode ----------------------------------------------------------------
// A Taylor level pushes truncated Taylor polynomials instead of tangents:
// along a direction v, x(t) = x + c_1 t + c_2 t^2 + ... + c_K t^K, where c_j
// is the j-th normalized coefficient (the j-th derivative along t over j!),
// and every op maps its inputs' polynomials to its output's (Faa di Bruno
// for elementwise ops, Cauchy products for mul and the GEMMs, the op itself
// on every coefficient for linear ops). The coefficients ride in the
// tangent slot, stacked on its leading dimension: rows [offset(j), offset(j)
// + rows(j)) hold c_j, one row per direction. Linear ops therefore act on
// all coefficients at once (one GEMM on the stacked rows), and an op whose
// higher derivatives vanish (relu, linear ops) adds nothing.
//
// Order 2 may instead carry chosen second-order combinations: group q's row
// of c_2 is the sum over its pairs (a, b, w) of w/2 * D^2 f[v_a, v_b] plus
// the input's own c_2 pushed through (so one group of the pairs (a, a) is
// half the Laplacian when the v_a are the unit vectors, and the pair (a, b)
// alone gives half of d^2 f / dv_a dv_b).

/// One term of a second-order group (see above).
struct SecondOrderPair {
  int64_t a = 0;        ///< a direction (a row of the first coefficients)
  int64_t b = 0;        ///< another (or the same)
  double weight = 1.0;  ///< the pair's factor
};

/// The coefficient layout of a Taylor level.
struct TaylorLayout {
  int order = 1;                    ///< K: coefficients c_1..c_K
  int64_t directions = 0;           ///< rows of every coefficient but c_2
  int64_t second_rows = 0;          ///< rows of c_2 (groups; order >= 2)
  std::vector<int64_t> pair_a;      ///< the pairs' a, sorted by group
  std::vector<int64_t> pair_b;      ///< the pairs' b
  std::vector<int64_t> pair_group;  ///< the pairs' group
  std::vector<double> pair_weight;  ///< the pairs' weight
  bool univariate = true;           ///< group a is the single pair (a, a, 1): plain Taylor
  bool diagonal = true;             ///< every pair has a == b
  uint64_t id = 0;                  ///< unique per level (caches key on it)
  /// The rows of coefficient j (1-based).
  int64_t rows(int j) const { return j == 2 ? second_rows : directions; }
  /// Where coefficient j's rows start in the stacked tangent.
  int64_t offset(int j) const {
    return j <= 2 ? (j - 1) * directions : directions + second_rows + (j - 3) * directions;
  }
  /// The stacked tangent's leading dimension (all coefficients' rows).
  int64_t batch() const { return offset(order) + rows(order); }
  /// Coefficient j's rows of a stacked tangent (a view).
  Tensor block(const Tensor& stacked, int j) const { return stacked.narrow(0, offset(j), rows(j)); }
};

/// A Taylor level on this thread while it lives (a dual level underneath:
/// one at a time, unpack_dual gives the stacked coefficients).
class taylor_level {
 public:
  /// Univariate Taylor polynomials of order `order` >= 1 along `directions`
  /// directions (c_j: [directions] + shape for every j).
  taylor_level(int order, int64_t directions);
  /// Order 2 with the given second-order groups (c_1: [directions] + shape,
  /// c_2: [groups.size()] + shape).
  taylor_level(int64_t directions, const std::vector<std::vector<SecondOrderPair>>& groups);
  ~taylor_level();
  taylor_level(const taylor_level&) = delete;
  taylor_level& operator=(const taylor_level&) = delete;
  /// The level's coefficient layout.
  const TaylorLayout& layout() const { return *layout_; }

 private:
  std::shared_ptr<const TaylorLayout> layout_;
  std::unique_ptr<dual_level> level_;
};

/// The active Taylor level's layout; nullptr outside one (plain forward
/// mode is the order-1 case of it).
const TaylorLayout* taylor_layout();

/// A tensor equal to `primal` carrying the Taylor coefficients c_1..c_K
/// (each [layout.rows(j)] + the primal's shape; an undefined one is zero).
Tensor make_jet(const Tensor& primal, const std::vector<Tensor>& coefficients);
/// The Taylor coefficients c_1..c_K of `t` (views of its tangent; all
/// undefined when it carries none).
std::vector<Tensor> jet_coefficients(const Tensor& t);
/// The second-order cross term of two first coefficients A, B ([directions]
/// + shape, broadcasting elementwise): group q's row is the sum over its
/// pairs (a, b, w) of w/2 * (A_a B_b + A_b B_a); univariate: A * B. What a
/// custom Function's Taylor rule uses for the c_1 c_1 products of c_2.
Tensor taylor_cross(const Tensor& a, const Tensor& b);

namespace detail {
/// Internal: this thread's level (0: none), its tangent batch (0:
/// unbatched) and Taylor layout (nullptr: plain tangents), kept while
/// paused, so rules read them.
struct LevelState {
  uint64_t level = 0;
  int64_t batch = 0;
  const TaylorLayout* taylor = nullptr;
};
uint64_t current_level();
int64_t current_batch();
LevelState current_state();

/// Internal (Taylor mode): while a DeferTangents lives on this thread, an op
/// whose tangent is a linear map of one input's (a linear layer with a
/// constant weight) may leave it pending with defer_tangent: the map runs
/// when the tangent is first read (impl::fw_grad, under the grad mode of the
/// op), or on one coefficient block only when only that is read
/// (jet_block) — so the coefficients of fn's output that a caller does not
/// need (a Laplacian's first ones) are never formed. In-place changes to
/// what the map reads before it runs are refused, naming the op.
class DeferTangents {
 public:
  DeferTangents();
  ~DeferTangents();
  DeferTangents(const DeferTangents&) = delete;
  DeferTangents& operator=(const DeferTangents&) = delete;

 private:
  bool prev_;
};
bool deferring_tangents();
/// out's tangent = map(source), pending; `reads` are the tensors map reads
/// besides source (their versions are checked when it runs).
void defer_tangent(const Tensor& out, const Tensor& source, std::function<Tensor(const Tensor&)> map,
                   std::vector<Tensor> reads, const char* op);
/// Coefficient block j of t's tangent (undefined: none), computing only that
/// block of a pending one.
Tensor jet_block(const Tensor& t, int j);
/// How many pending tangents this thread has computed in full (tests).
int64_t pending_tangents_resolved();

/// Internal: forward mode paused on this thread while it lives (tangent
/// rules run under it, so their own ops push no tangents), or, given a
/// level's state, that level active (the engine's workers take their
/// caller's).
class Suspend {
 public:
  Suspend();
  explicit Suspend(const LevelState& state);
  ~Suspend();
  Suspend(const Suspend&) = delete;
  Suspend& operator=(const Suspend&) = delete;

 private:
  LevelState saved_;
};
}  // namespace detail

}  // namespace tg::autograd::forward_ad
