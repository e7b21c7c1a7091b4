#include <tapegrad/autograd/functional.h>

#include <tapegrad/autograd/engine.h>
#include <tapegrad/autograd/grad_mode.h>
#include <tapegrad/tensor/error.h>
#include <tapegrad/tensor/ops.h>

namespace tg::autograd {

namespace {

Tensor fresh_leaf(const Tensor& x, const char* op) {
  TG_CHECK(x.defined() && x.is_floating_point(), op,
           ": x must be a defined floating-point tensor");
  Tensor leaf = x.detach();
  leaf.requires_grad_(true);
  return leaf;
}

Tensor call(const TensorFn& fn, const Tensor& x, const char* op) {
  EnableGradGuard grad_on;
  Tensor y = fn(x);
  TG_CHECK(y.defined(), op, ": fn returned an undefined tensor");
  return y;
}

Tensor or_zeros(const Tensor& g, const Tensor& like) { return g.defined() ? g : zeros_like(like); }

Tensor result(const Tensor& t, bool create_graph) { return create_graph ? t : t.detach(); }

// Rows d(out . e_k)/dx for every element k of `out`, stacked into
// out.sizes() + x.sizes().
Tensor rows(const Tensor& out, const Tensor& x, bool create_graph) {
  int64_t n = out.numel();
  std::vector<Tensor> r;
  r.reserve(size_t(n));
  for (int64_t k = 0; k < n; ++k) {
    Tensor e = zeros({n}, out.options());
    e.narrow(0, k, 1).fill_(1);
    Tensor g;
    if (out.requires_grad())
      g = grad({out}, {x}, {e.view(out.sizes())}, true, create_graph, true)[0];
    r.push_back(or_zeros(g, x));
  }
  IntList shape = out.sizes();
  shape.insert(shape.end(), x.sizes().begin(), x.sizes().end());
  if (r.empty()) return zeros(shape, x.options());
  return stack(r).view(shape);
}

}  // namespace

Tensor jacobian(const TensorFn& fn, const Tensor& x, bool create_graph) {
  Tensor xi = fresh_leaf(x, "jacobian");
  Tensor y = call(fn, xi, "jacobian");
  EnableGradGuard grad_on;
  return result(rows(y, xi, create_graph), create_graph);
}

Tensor hessian(const TensorFn& fn, const Tensor& x, bool create_graph) {
  Tensor xi = fresh_leaf(x, "hessian");
  Tensor y = call(fn, xi, "hessian");
  TG_CHECK(y.numel() == 1, "hessian: fn must return a tensor with one element, got shape ",
           shape_str(y.sizes()));
  EnableGradGuard grad_on;
  Tensor g = y.requires_grad() ? grad({y}, {xi}, {}, true, true, true)[0] : Tensor();
  if (!g.defined()) {
    IntList shape = x.sizes();
    shape.insert(shape.end(), x.sizes().begin(), x.sizes().end());
    return zeros(shape, x.options());
  }
  return result(rows(g, xi, create_graph), create_graph);
}

std::pair<Tensor, Tensor> vjp(const TensorFn& fn, const Tensor& x, const Tensor& v,
                              bool create_graph) {
  Tensor xi = fresh_leaf(x, "vjp");
  Tensor y = call(fn, xi, "vjp");
  TG_CHECK(v.sizes() == y.sizes(), "vjp: v has shape ", shape_str(v.sizes()),
           " but fn(x) has shape ", shape_str(y.sizes()));
  Tensor g = y.requires_grad() ? grad({y}, {xi}, {v}, create_graph, create_graph, true)[0] : Tensor();
  return {result(y, create_graph), result(or_zeros(g, x), create_graph)};
}

std::pair<Tensor, Tensor> jvp(const TensorFn& fn, const Tensor& x, const Tensor& v,
                              bool create_graph) {
  Tensor xi = fresh_leaf(x, "jvp");
  TG_CHECK(v.sizes() == x.sizes(), "jvp: v has shape ", shape_str(v.sizes()),
           " but x has shape ", shape_str(x.sizes()));
  Tensor y = call(fn, xi, "jvp");
  if (!y.requires_grad()) return {result(y, create_graph), zeros_like(y)};
  EnableGradGuard grad_on;
  // J v = d/du <J^T u, v>: the double-vjp trick, with u a dummy cotangent.
  Tensor u = zeros_like(y).requires_grad_(true);
  Tensor gx = grad({y}, {xi}, {u}, true, true, true)[0];
  Tensor jv = gx.defined() && gx.requires_grad()
                  ? grad({gx}, {u}, {v}, create_graph, create_graph, true)[0]
                  : Tensor();
  return {result(y, create_graph), result(or_zeros(jv, y), create_graph)};
}

std::pair<Tensor, Tensor> hvp(const TensorFn& fn, const Tensor& x, const Tensor& v,
                              bool create_graph) {
  Tensor xi = fresh_leaf(x, "hvp");
  TG_CHECK(v.sizes() == x.sizes(), "hvp: v has shape ", shape_str(v.sizes()),
           " but x has shape ", shape_str(x.sizes()));
  Tensor y = call(fn, xi, "hvp");
  TG_CHECK(y.numel() == 1, "hvp: fn must return a tensor with one element, got shape ",
           shape_str(y.sizes()));
  EnableGradGuard grad_on;
  Tensor g = y.requires_grad() ? grad({y}, {xi}, {}, true, true, true)[0] : Tensor();
  Tensor hv = g.defined() && g.requires_grad()
                  ? grad({g}, {xi}, {v}, create_graph, create_graph, true)[0]
                  : Tensor();
  return {result(y, create_graph), result(or_zeros(hv, x), create_graph)};
}

}  // namespace tg::autograd
