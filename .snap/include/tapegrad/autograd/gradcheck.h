// gradcheck / gradgradcheck: compare backward against float64 central
// differences, as torch.autograd.gradcheck. Complex128 inputs and complex
// outputs are checked through their real parts (view_as_real), which covers
// the gradient convention (docs/AUTOGRAD.md "Conjugation").
#pragma once

#include <functional>
#include <string>

#include <tapegrad/autograd/node.h>

namespace tg::autograd {

/// Tolerances and step of gradcheck / gradgradcheck (float64 inputs).
struct GradcheckOptions {
  double eps = 1e-6;   ///< finite-difference step
  double atol = 1e-5;  ///< |analytic - numeric| <= atol + rtol * |numeric|
  double rtol = 1e-3;  ///< relative tolerance (see atol)
  uint64_t seed = 0;   ///< varies gradgradcheck's pseudo-random grad_outputs
  /// Also check forward mode: each Jacobian column J e_j from one forward
  /// pass with the tangent e_j (forward_ad::make_dual) against the finite
  /// differences. In gradgradcheck this checks forward over reverse (the
  /// tangent runs through the backward formulas too).
  bool check_forward_ad = false;
  /// Also check batched forward mode: all Jacobian columns of an input from
  /// one forward pass with the identity as batched tangents
  /// (forward_ad::dual_level(n)), against the finite differences.
  bool check_batched_forward_ad = false;
};

/// What gradcheck found.
struct GradcheckResult {
  bool ok = true;        ///< whether every element passed
  double max_error = 0;  ///< largest |analytic - numeric|
  /// Empty when ok; otherwise names the worst element: output, its index,
  /// input, its index, the analytic and the numeric value.
  std::string message;
  /// ok.
  explicit operator bool() const { return ok; }
};

/// A function of several tensors to several tensors.
using TensorsFn = std::function<variable_list(const variable_list&)>;

///@{

/// Inputs that require grad must be Float64; fn may return several outputs
/// (those with a floating dtype are checked). The inputs keep their strides,
/// so non-contiguous inputs are checked as given.
GradcheckResult gradcheck(const TensorsFn& fn, const variable_list& inputs, const GradcheckOptions& options = {});
GradcheckResult gradcheck(const std::function<Tensor(const variable_list&)>& fn, const variable_list& inputs,
                          const GradcheckOptions& options = {});
///@}

///@{

/// Checks the gradient of the gradient: gradcheck of
/// (inputs, v) -> grad(fn(inputs), inputs, v, create_graph=true)
/// with deterministic pseudo-random float64 v (the global RNG is not used).
GradcheckResult gradgradcheck(const TensorsFn& fn, const variable_list& inputs, const GradcheckOptions& options = {});
GradcheckResult gradgradcheck(const std::function<Tensor(const variable_list&)>& fn, const variable_list& inputs,
                              const GradcheckOptions& options = {});
///@}

}  // namespace tg::autograd
