// Per-sample Hessians of a batched fn (HessianStrategy: batched cotangents,
// forward-over-reverse rows, Taylor mode), with the structural-zero probe.
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

namespace {

// [R * B, width] where block r (of B rows) is the one-hot row e_{col(r)}.
Tensor one_hot_blocks(int64_t B, int64_t width, const std::vector<int64_t>& col, const TensorOptions& opts) {
  const int64_t R = int64_t(col.size());
  Tensor e = zeros({R, width}, TensorOptions().dtype(opts.dtype()));
  for (int64_t r = 0; r < R; ++r)
    e.select(0, r).narrow(0, col[size_t(r)], 1).fill_(1);
  return e.to(opts.device()).view({R, 1, width}).expand({R, B, width}).reshape({R * B, width});
}

// Forward over reverse for a batched fn [B, n] -> [B, m]: x carries the n
// tangents e_1..e_n as one batch (the same for every sample); one forward
// pass, then one backward pass per output column i, whose gradient's
// tangent [n, B, n] holds, in direction j, row j of each sample's Hessian of
// output i (H e_j; H is symmetric).
std::vector<Tensor> hessian_rows_fwd(const TensorFn& fn, const Tensor& xi, bool create_graph, const char* op) {
  const int64_t B = xi.size(0), n = xi.size(1);
  forward_ad::dual_level level(n);
  Tensor xd = forward_ad::make_dual(xi, identity(n, xi).view({n, 1, n}).expand({n, B, n}));
  Tensor y = call(fn, xd, op);
  check_batched_output(y, B, op);
  TG_CHECK(y.requires_grad(), op, ": fn's output does not depend on x");
  const int64_t m = y.size(1);
  Tensor ones_b = ones({B}, y.options());
  std::vector<Tensor> rows;
  for (int64_t i = 0; i < m; ++i) {
    Tensor g =
        grad({y.select(1, i)}, {xd}, {ones_b}, /*retain_graph=*/i + 1 < m || create_graph, create_graph, true)[0];
    Tensor t = g.defined() ? forward_ad::unpack_dual(g).tangent : Tensor();
    rows.push_back(t.defined() ? t : zeros({n, B, n}, xi.options()));
  }
  return rows;
}

}  // namespace

Tensor per_sample_hessian(const TensorFn& fn, const Tensor& x, HessianStrategy strategy, bool create_graph) {
  check_batched_input(x, "per_sample_hessian");
  const int64_t B = x.size(0), n = x.size(1);
  if (n == 0) {  // no inputs: an empty Hessian per sample and output
    Tensor xf = forward_input(x, "per_sample_hessian", create_graph);
    Tensor value = value_without_inputs(fn, xf, "per_sample_hessian", create_graph);
    return structural_zeros({B, value.size(1), 0, 0}, value, create_graph);
  }
  if (strategy == HessianStrategy::Taylor && !forward_ad::is_active()) {
    Tensor xf = forward_input(x, "per_sample_hessian", create_graph);
    // A structurally zero Hessian (a relu network's) costs one probe on an
    // empty batch instead of the pass, with create_graph too, and no row
    // check (every second derivative of a structurally linear fn vanishes,
    // across rows too).
    if (Tensor value = structurally_linear(fn, xf, "per_sample_hessian", create_graph); value.defined())
      return structural_zeros({B, value.size(1), n, n}, value, create_graph);
    require_independent_rows(fn, x, "per_sample_hessian");
    EnableGradGuard grad_on;
    return result(taylor_hessian(fn, xf, "per_sample_hessian", create_graph, /*jacobian=*/false)[2], create_graph);
  }
  require_independent_rows(fn, x, "per_sample_hessian");
  Tensor xi = input_for(x, "per_sample_hessian", create_graph);
  EnableGradGuard grad_on;
  auto check_out = [&](const Tensor& y, int64_t rows) {
    check_batched_output(y, rows, "per_sample_hessian");
    TG_CHECK(y.requires_grad(), "per_sample_hessian: fn's output does not depend on x");
  };
  if (strategy == HessianStrategy::Rows) {
    Tensor y = call(fn, xi, "per_sample_hessian");
    check_out(y, B);
    const int64_t m = y.size(1);
    Tensor ones_b = ones({B}, y.options());
    std::vector<Tensor> jac;
    for (int64_t i = 0; i < m; ++i)
      jac.push_back(grad({y.select(1, i)}, {xi}, {ones_b}, true, true, true)[0]);
    std::vector<Tensor> h;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        Tensor g = jac[size_t(i)].defined() && jac[size_t(i)].requires_grad()
                       ? grad({jac[size_t(i)].select(1, j)}, {xi}, {ones_b}, true, create_graph, true)[0]
                       : Tensor();
        h.push_back(or_zeros(g, xi));
      }
    return result(stack(h, 1).view({B, m, n, n}), create_graph);
  }
  if (strategy == HessianStrategy::ForwardOverReverse && !forward_ad::is_active()) {
    std::vector<Tensor> rows = hessian_rows_fwd(fn, xi, create_graph, "per_sample_hessian");
    for (Tensor& r : rows)
      r = r.permute({1, 0, 2});  // [B, j, k]
    return result(stack(rows, 1), create_graph);
  }
  // Batched cotangents (also ForwardOverReverse inside a caller's dual level,
  // where levels do not nest): probe the output width with the first sample, then
  // R = m * n copies; copy r = i * n + j carries e_i, and row j is selected.
  // A fn that does not map one row to one row (it closes over per-row
  // tensors: per-sample weights, say) cannot take the R * B stacked copies
  // either: the whole batch tells its real output shape, and such a fn gets
  // forward over reverse (rows of x, batched tangents) or, inside a caller's
  // dual level, the reverse rows.
  int64_t m;
  {
    // Recorded (one row: cheap), so a fn that differentiates inside (an
    // input gradient, as a PINN's residual) runs here as in the pass.
    const int64_t first = std::min<int64_t>(B, 1);
    Tensor probe;
    bool one_row_works = false;
    try {
      probe = fn(xi.narrow(0, 0, first));
      one_row_works = probe.defined() && probe.dim() == 2 && probe.size(0) == first;
    } catch (const Error&) {}
    if (!one_row_works) {
      Tensor whole = fn(xi);  // its errors are fn's own, on the input it was given
      check_batched_output(whole, B, "per_sample_hessian");
      if (!forward_ad::is_active()) return per_sample_hessian(fn, x, HessianStrategy::ForwardOverReverse, create_graph);
      return per_sample_hessian(fn, x, HessianStrategy::Rows, create_graph);
    }
    m = probe.size(1);
  }
  const int64_t R = m * n;
  std::vector<int64_t> out_col, in_col;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      out_col.push_back(i);
      in_col.push_back(j);
    }
  Tensor X = cat(std::vector<Tensor>(size_t(R), xi), 0);  // [R * B, n], a function of xi
  Tensor y = call(fn, X, "per_sample_hessian");
  check_out(y, R * B);
  Tensor jac = grad({y}, {X}, {one_hot_blocks(B, m, out_col, y.options())}, true, true)[0];
  Tensor v = (jac * one_hot_blocks(B, n, in_col, jac.options())).sum({1});
  Tensor h = v.requires_grad() ? grad({v}, {X}, {ones({R * B}, v.options())}, true, create_graph, true)[0] : Tensor();
  h = or_zeros(h, X);
  return result(h.view({R, B, n}).permute({1, 0, 2}).reshape({B, m, n, n}), create_graph);
}

}  // namespace tg::autograd
