// The functional API, with the shapes of torch.autograd.functional. fn is
// evaluated at a fresh leaf copy of x; results carry no history unless
// create_graph is true.
#pragma once

#include <functional>
#include <utility>

#include <tapegrad/tensor/tensor.h>

namespace tg::autograd {

using TensorFn = std::function<Tensor(const Tensor&)>;

// d fn(x) / d x, shape fn(x).sizes() + x.sizes().
Tensor jacobian(const TensorFn& fn, const Tensor& x, bool create_graph = false);
// Scalar fn: d^2 fn / dx^2, shape x.sizes() + x.sizes().
Tensor hessian(const TensorFn& fn, const Tensor& x, bool create_graph = false);
// {fn(x), v^T J}, v of fn(x)'s shape.
std::pair<Tensor, Tensor> vjp(const TensorFn& fn, const Tensor& x, const Tensor& v,
                              bool create_graph = false);
// {fn(x), J v}, v of x's shape (computed as a double vjp).
std::pair<Tensor, Tensor> jvp(const TensorFn& fn, const Tensor& x, const Tensor& v,
                              bool create_graph = false);
// Scalar fn: {fn(x), H v}.
std::pair<Tensor, Tensor> hvp(const TensorFn& fn, const Tensor& x, const Tensor& v,
                              bool create_graph = false);

}  // namespace tg::autograd
