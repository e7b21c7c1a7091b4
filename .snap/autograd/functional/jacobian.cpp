// The functional API of torch.autograd.functional: jacobian, hessian, vjp,
// jvp, hvp.
#include <tapegrad/autograd/functional.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <string>

#include <tapegrad/autograd/engine.h>
#include <tapegrad/autograd/forward_ad.h>
#include <tapegrad/autograd/grad_mode.h>
#include <tapegrad/autograd/node.h>
#include <tapegrad/cuda/capture.h>
#include <tapegrad/tensor/error.h>
#include <tapegrad/tensor/ops.h>

#include "autograd/ops/taylor.h"
#include "tensor/env.h"
#include "tensor/op_util.h"

#include "autograd/functional/common.h"

namespace tg::autograd {

using namespace functional_detail;

Tensor jacobian(const TensorFn& fn, const Tensor& x, bool create_graph, JacobianMode mode) {
  Tensor xi = input_for(x, "jacobian", create_graph);
  if (mode == JacobianMode::Forward && !forward_ad::is_active() && x.numel() > 0) {
    forward_ad::dual_level level(x.numel());
    Tensor y = call(fn, forward_ad::make_dual(xi, basis_tangents(xi)), "jacobian");
    forward_ad::UnpackedDual u = forward_ad::unpack_dual(y);
    return result(columns_to_jacobian(u.tangent, y, x), create_graph);
  }
  Tensor y = call(fn, xi, "jacobian");
  EnableGradGuard grad_on;
  return result(rows(y, xi, create_graph), create_graph);
}

Tensor hessian(const TensorFn& fn, const Tensor& x, bool create_graph, JacobianMode mode) {
  Tensor xi = input_for(x, "hessian", create_graph);
  IntList shape = x.sizes();
  shape.insert(shape.end(), x.sizes().begin(), x.sizes().end());
  if (mode == JacobianMode::Forward && !forward_ad::is_active() && x.numel() > 0) {
    forward_ad::dual_level level(x.numel());
    Tensor xd = forward_ad::make_dual(xi, basis_tangents(xi));
    Tensor y = call(fn, xd, "hessian");
    TG_CHECK(y.numel() == 1, "hessian: fn must return a tensor with one element, got shape ", shape_str(y.sizes()));
    EnableGradGuard grad_on;
    Tensor g = y.requires_grad() ? grad({y}, {xd}, {}, create_graph, create_graph, true)[0] : Tensor();
    Tensor t = g.defined() ? forward_ad::unpack_dual(g).tangent : Tensor();  // [nx] + x's shape: H e_j
    if (!t.defined()) return zeros(shape, x.options());
    return result(t.reshape(shape), create_graph);  // H is symmetric: row j = H e_j
  }
  Tensor y = call(fn, xi, "hessian");
  TG_CHECK(y.numel() == 1, "hessian: fn must return a tensor with one element, got shape ", shape_str(y.sizes()));
  EnableGradGuard grad_on;
  Tensor g = y.requires_grad() ? grad({y}, {xi}, {}, true, true, true)[0] : Tensor();
  if (!g.defined()) return zeros(shape, x.options());
  return result(rows(g, xi, create_graph), create_graph);
}

std::pair<Tensor, Tensor> vjp(const TensorFn& fn, const Tensor& x, const Tensor& v, bool create_graph) {
  Tensor xi = input_for(x, "vjp", create_graph);
  Tensor y = call(fn, xi, "vjp");
  TG_CHECK(v.sizes() == y.sizes(), "vjp: v has shape ", shape_str(v.sizes()), " but fn(x) has shape ",
           shape_str(y.sizes()));
  Tensor g = y.requires_grad() ? grad({y}, {xi}, {v}, create_graph, create_graph, true)[0] : Tensor();
  return {result(y, create_graph), result(or_zeros(g, x), create_graph)};
}

std::pair<Tensor, Tensor> jvp(const TensorFn& fn, const Tensor& x, const Tensor& v, bool create_graph) {
  TG_CHECK(x.defined() && is_differentiable(x.dtype()), "jvp: x must be a defined floating-point tensor");
  TG_CHECK(v.defined() && v.sizes() == x.sizes(), "jvp: v has shape ",
           v.defined() ? shape_str(v.sizes()) : "(undefined)", " but x has shape ", shape_str(x.sizes()));
  if (!forward_ad::is_active()) {
    // One forward pass with the tangent v (forward mode).
    forward_ad::dual_level level;
    Tensor xi = forward_input(x, "jvp", create_graph);
    Tensor y = call(fn, forward_ad::make_dual(xi, create_graph ? v : v.detach()), "jvp");
    forward_ad::UnpackedDual u = forward_ad::unpack_dual(y);
    return {result(u.primal, create_graph), result(or_zeros(u.tangent, y), create_graph)};
  }
  // Inside a caller's dual level (levels do not nest): the double-vjp trick,
  // J v = d/du <J^T u, v> with u a dummy cotangent.
  Tensor xi = input_for(x, "jvp", create_graph);
  Tensor y = call(fn, xi, "jvp");
  if (!y.requires_grad()) return {result(y, create_graph), zeros_like(y)};
  EnableGradGuard grad_on;
  Tensor u = zeros_like(y).requires_grad_(true);
  Tensor gx = grad({y}, {xi}, {u}, true, true, true)[0];
  Tensor jv = gx.defined() && gx.requires_grad() ? grad({gx}, {u}, {v}, create_graph, create_graph, true)[0] : Tensor();
  return {result(y, create_graph), result(or_zeros(jv, y), create_graph)};
}

std::pair<Tensor, Tensor> hvp(const TensorFn& fn, const Tensor& x, const Tensor& v, bool create_graph) {
  Tensor xi = input_for(x, "hvp", create_graph);
  TG_CHECK(v.defined() && v.sizes() == x.sizes(), "hvp: v has shape ",
           v.defined() ? shape_str(v.sizes()) : "(undefined)", " but x has shape ", shape_str(x.sizes()));
  std::optional<forward_ad::dual_level> level;
  Tensor at = xi;
  // Forward over reverse: with x dual along v, the gradient's tangent is H v
  // (one forward and one backward pass, each carrying tangents). Inside a
  // caller's dual level: reverse over reverse.
  if (!forward_ad::is_active()) {
    level.emplace();
    at = forward_ad::make_dual(xi, create_graph ? v : v.detach());
  }
  Tensor y = call(fn, at, "hvp");
  TG_CHECK(y.numel() == 1, "hvp: fn must return a tensor with one element, got shape ", shape_str(y.sizes()));
  EnableGradGuard grad_on;
  Tensor hv;
  if (level) {
    Tensor g = y.requires_grad() ? grad({y}, {at}, {}, create_graph, create_graph, true)[0] : Tensor();
    if (g.defined()) hv = forward_ad::unpack_dual(g).tangent;
    return {result(forward_ad::unpack_dual(y).primal, create_graph), result(or_zeros(hv, x), create_graph)};
  }
  Tensor g = y.requires_grad() ? grad({y}, {xi}, {}, true, true, true)[0] : Tensor();
  hv = g.defined() && g.requires_grad() ? grad({g}, {xi}, {v}, create_graph, create_graph, true)[0] : Tensor();
  return {result(y, create_graph), result(or_zeros(hv, x), create_graph)};
}

}  // namespace tg::autograd
