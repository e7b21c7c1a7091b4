#include <tapegrad/autograd/functional.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <string>

#include <tapegrad/autograd/engine.h>
#include <tapegrad/autograd/forward_ad.h>
#include <tapegrad/autograd/grad_mode.h>
#include <tapegrad/autograd/node.h>
#include <tapegrad/cuda/graph.h>
#include <tapegrad/tensor/error.h>
#include <tapegrad/tensor/ops.h>

#include "autograd/ops/taylor.h"
#include "tensor/env.h"
#include "tensor/op_util.h"

namespace tg::autograd {

namespace {

// The tensor fn is evaluated at. With create_graph and an x that requires
// grad, a differentiable alias of x, so the results stay functions of x
// (torch.autograd.functional does the same); otherwise a fresh leaf.
Tensor input_for(const Tensor& x, const char* op, bool create_graph) {
  TG_CHECK(x.defined() && x.is_floating_point(), op,
           ": x must be a defined floating-point tensor");
  if (create_graph && x.requires_grad()) {
    EnableGradGuard grad_on;
    return x.view(x.sizes());
  }
  Tensor leaf = x.detach();
  leaf.requires_grad_(true);
  return leaf;
}

// x for a pass in forward or Taylor mode, which needs no reverse path to x:
// the caller's x when it requires grad under create_graph (a differentiable
// alias), else x detached (no gradient into a leaf nobody reads).
Tensor forward_input(const Tensor& x, const char* op, bool create_graph) {
  return create_graph && x.requires_grad() ? input_for(x, op, true) : x.detach();
}

Tensor call(const TensorFn& fn, const Tensor& x, const char* op) {
  EnableGradGuard grad_on;
  Tensor y = fn(x);
  TG_CHECK(y.defined(), op, ": fn returned an undefined tensor");
  return y;
}

Tensor or_zeros(const Tensor& g, const Tensor& like) { return g.defined() ? g : zeros_like(like); }

Tensor result(const Tensor& t, bool create_graph) { return create_graph ? t : t.detach(); }

// The batched functions' shapes: x [B, n], fn(x) [B, m] with B = rows.
void check_batched_input(const Tensor& x, const char* op) {
  TG_CHECK(x.defined() && x.dim() == 2, op, ": x must have shape [B, n], got ",
           x.defined() ? shape_str(x.sizes()) : std::string("an undefined tensor"));
}
void check_batched_output(const Tensor& y, int64_t rows, const char* op) {
  TG_CHECK(y.dim() == 2 && y.size(0) == rows, op, ": fn must map [B, n] to [B, m] (B = ", rows, "), got shape ",
           shape_str(y.sizes()));
}

// The per-sample functions (per_sample_hessian, laplacian,
// derivative_operator) assume that row i of fn(x) depends on row i of x
// alone; a function that mixes rows (a mean or cumulative op over the batch,
// a batch norm, x^T x, an index along dim 0, attention over the batch) would
// get a silently wrong answer. The check (docs/AUTOGRAD.md "Per-sample
// derivatives"): with cotangents w and row scales s_i (distinct), an
// independent fn has J^T (s w) = s (J^T w) row by row; an entry of J that
// couples row j to row i != j breaks that (for all but measure-zero w).
// Probed on four rows of x (the first two and the last two) — a batch
// statistic couples any subset — and on the whole batch when fn does not
// run on four rows (it closes over per-row tensors, say). One small forward
// and two backward passes, and one host read; skipped while a CUDA graph
// captures (the read would end the capture) and under
// set_check_rows_independent(false).
std::atomic<bool>& check_rows_flag() {
  static std::atomic<bool> on{true};
  return on;
}

// Names the nodes of y's graph (for the error): where to look.
std::string graph_ops(const Tensor& y) {
  std::vector<std::string> names;
  std::vector<const Node*> stack;
  std::vector<const Node*> seen;
  if (y.grad_fn()) stack.push_back(y.grad_fn().get());
  while (!stack.empty() && seen.size() < 4096) {
    const Node* n = stack.back();
    stack.pop_back();
    if (std::find(seen.begin(), seen.end(), n) != seen.end()) continue;
    seen.push_back(n);
    const std::string name = n->name();
    if (name != "AccumulateGrad" && std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    for (const Edge& e : n->next_edges())
      if (e.is_valid()) stack.push_back(e.function.get());
  }
  std::string out;
  for (size_t i = 0; i < names.size() && i < 16; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > 16) out += ", ...";
  return out;
}

// Throws when fn's output rows depend on other rows of x (see above).
void require_independent_rows(const TensorFn& fn, const Tensor& x, const char* op) {
  const int64_t B = x.size(0);
  if (!check_rows_flag() || B < 2 || x.numel() == 0 || cuda::is_current_stream_capturing()) return;
  forward_ad::detail::Suspend no_tangents;  // the probe pushes none (and runs inside a dual level too)
  EnableGradGuard grad_on;
  struct Probe {
    double deviation = 0, scale = 0;
    int64_t row = 0;
    std::string ops;
  };
  auto probe = [&](const Tensor& xs) -> std::optional<Probe> {
    const int64_t k = xs.size(0);
    Tensor xr = xs.detach();
    xr.requires_grad_(true);
    Tensor y = fn(xr);
    if (!y.defined() || y.dim() < 1 || y.size(0) != k) return std::nullopt;
    if (!y.requires_grad() || !y.is_floating_point() || y.numel() == 0) return Probe{};
    Tensor yf = y.reshape({k, -1});
    // Fixed pseudo-random cotangents (the global generator is left alone)
    // and distinct row scales in [1, 2).
    const TensorOptions o = yf.options();
    Tensor idx = arange(yf.numel(), o).view(yf.sizes());
    Tensor w = sin(add(mul(idx, 12.9898), 0.731)) + 1.5;
    Tensor sc = add(div(arange(k, o), double(k)), 1.0).view({k, 1});
    Tensor g1 = grad({yf}, {xr}, {w}, true, false, true)[0];
    Tensor g2 = grad({yf}, {xr}, {mul(w, sc)}, false, false, true)[0];
    Probe p;
    if (!g1.defined() || !g2.defined()) return p;
    Tensor sg1 = mul(g1, sc.to(g1.dtype()));
    Tensor dev = abs(sub(g2, sg1)).reshape({k, -1}).amax({1});
    Tensor scale = add(abs(g2), abs(sg1)).amax().reshape({1});
    // One host read: the rows' deviations, then the scale.
    const std::vector<double> d = cat({dev, scale}, 0).to(Device(kCPU)).to(kFloat64).to_vector<double>();
    p.scale = d.back();
    p.row = int64_t(std::max_element(d.begin(), d.end() - 1) - d.begin());
    p.deviation = d[size_t(p.row)];
    if (p.deviation > 0) p.ops = graph_ops(y);
    return p;
  };
  Tensor rows = x.detach();
  std::vector<double> pick;
  if (B > 4) {
    pick = {0.0, 1.0, double(B - 2), double(B - 1)};
    rows = index_select(rows, 0, tensor(pick, {4}, TensorOptions().dtype(kInt64)).to(x.device()));
  }
  std::optional<Probe> p;
  try {
    p = probe(rows);
  } catch (const std::exception&) {  // fn does not run on four rows: probe the whole batch
    if (B <= 4) throw;
  }
  if (!p && B > 4) {
    pick.clear();
    p = probe(x.detach());
  }
  if (!p) return;  // fn's output does not have B rows: the caller's shape check says so
  // Rounding differs between the two passes by a few ulps of the scale;
  // a coupling of rows shows at the scale itself.
  const double tol = x.scalar_type() == kFloat64 ? 1e3 * 2.2e-16
                     : x.scalar_type() == kFloat32 ? 1e3 * 1.2e-7
                                                   : 10 * 7.8e-3;  // float16 / bfloat16: a weak check
  if (!(p->deviation > tol * std::max(p->scale, 1e-300))) return;
  const int64_t row = pick.empty() ? p->row : int64_t(pick[size_t(p->row)]);
  TG_ERROR(op, ": fn mixes rows of the batch — row ", row, " of its gradient depends on other rows of x ",
           shape_str(x.sizes()), " (", x.dtype(), "), but rows must be independent: row i of fn(x) may depend on row "
           "i of x alone. Per-row results would be silently wrong. Look in fn for an op that reduces, accumulates, "
           "contracts, gathers or moves along dim 0 (a mean or sum over the batch, a batch norm, cumsum over rows, "
           "x^T x, index_select along 0, attention over the batch); fn's graph has: ", p->ops,
           ". Evaluate such fn per sample, or differentiate it with jacobian/hessian of the whole batch "
           "(set_check_rows_independent(false) skips this check)");
}

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

namespace {
// The n x n identity, on like's device with its dtype (made there: no host
// copy, so capturable in a CUDA graph).
Tensor identity(int64_t n, const Tensor& like) {
  return eye(n, TensorOptions().dtype(like.dtype()).device(like.device()));
}

// The identity over x's elements as a batch of tangents: [numel] + x's shape.
Tensor basis_tangents(const Tensor& x) {
  IntList shape = x.sizes();
  shape.insert(shape.begin(), x.numel());
  return identity(x.numel(), x).view(shape);
}
// A batched tangent [nx] + out's shape as out's shape + x's shape.
Tensor columns_to_jacobian(const Tensor& t, const Tensor& out, const Tensor& x) {
  const int64_t nx = x.numel(), ny = out.numel();
  IntList shape = out.sizes();
  shape.insert(shape.end(), x.sizes().begin(), x.sizes().end());
  if (!t.defined()) return zeros(shape, x.options());
  return t.reshape({nx, ny}).t().reshape(shape);
}
}  // namespace

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
    TG_CHECK(y.numel() == 1, "hessian: fn must return a tensor with one element, got shape ",
             shape_str(y.sizes()));
    EnableGradGuard grad_on;
    Tensor g = y.requires_grad() ? grad({y}, {xd}, {}, create_graph, create_graph, true)[0] : Tensor();
    Tensor t = g.defined() ? forward_ad::unpack_dual(g).tangent : Tensor();  // [nx] + x's shape: H e_j
    if (!t.defined()) return zeros(shape, x.options());
    return result(t.reshape(shape), create_graph);  // H is symmetric: row j = H e_j
  }
  Tensor y = call(fn, xi, "hessian");
  TG_CHECK(y.numel() == 1, "hessian: fn must return a tensor with one element, got shape ",
           shape_str(y.sizes()));
  EnableGradGuard grad_on;
  Tensor g = y.requires_grad() ? grad({y}, {xi}, {}, true, true, true)[0] : Tensor();
  if (!g.defined()) return zeros(shape, x.options());
  return result(rows(g, xi, create_graph), create_graph);
}

std::pair<Tensor, Tensor> vjp(const TensorFn& fn, const Tensor& x, const Tensor& v,
                              bool create_graph) {
  Tensor xi = input_for(x, "vjp", create_graph);
  Tensor y = call(fn, xi, "vjp");
  TG_CHECK(v.sizes() == y.sizes(), "vjp: v has shape ", shape_str(v.sizes()),
           " but fn(x) has shape ", shape_str(y.sizes()));
  Tensor g = y.requires_grad() ? grad({y}, {xi}, {v}, create_graph, create_graph, true)[0] : Tensor();
  return {result(y, create_graph), result(or_zeros(g, x), create_graph)};
}

std::pair<Tensor, Tensor> jvp(const TensorFn& fn, const Tensor& x, const Tensor& v,
                              bool create_graph) {
  TG_CHECK(x.defined() && x.is_floating_point(), "jvp: x must be a defined floating-point tensor");
  TG_CHECK(v.defined() && v.sizes() == x.sizes(), "jvp: v has shape ", v.defined() ? shape_str(v.sizes()) : "(undefined)",
           " but x has shape ", shape_str(x.sizes()));
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
  Tensor jv = gx.defined() && gx.requires_grad()
                  ? grad({gx}, {u}, {v}, create_graph, create_graph, true)[0]
                  : Tensor();
  return {result(y, create_graph), result(or_zeros(jv, y), create_graph)};
}

std::pair<Tensor, Tensor> hvp(const TensorFn& fn, const Tensor& x, const Tensor& v,
                              bool create_graph) {
  Tensor xi = input_for(x, "hvp", create_graph);
  TG_CHECK(v.defined() && v.sizes() == x.sizes(), "hvp: v has shape ", v.defined() ? shape_str(v.sizes()) : "(undefined)",
           " but x has shape ", shape_str(x.sizes()));
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
  TG_CHECK(y.numel() == 1, "hvp: fn must return a tensor with one element, got shape ",
           shape_str(y.sizes()));
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

namespace {

// [R * B, width] where block r (of B rows) is the one-hot row e_{col(r)}.
Tensor one_hot_blocks(int64_t B, int64_t width, const std::vector<int64_t>& col,
                      const TensorOptions& opts) {
  const int64_t R = int64_t(col.size());
  Tensor e = zeros({R, width}, TensorOptions().dtype(opts.dtype()));
  for (int64_t r = 0; r < R; ++r) e.select(0, r).narrow(0, col[size_t(r)], 1).fill_(1);
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
    Tensor g = grad({y.select(1, i)}, {xd}, {ones_b}, /*retain_graph=*/i + 1 < m || create_graph, create_graph,
                    true)[0];
    Tensor t = g.defined() ? forward_ad::unpack_dual(g).tangent : Tensor();
    rows.push_back(t.defined() ? t : zeros({n, B, n}, xi.options()));
  }
  return rows;
}

}  // namespace

namespace {
std::vector<Tensor> taylor_hessian(const TensorFn& fn, const Tensor& xi, const char* op, bool record,
                                   bool jacobian);
Tensor structurally_zero_hessian(const TensorFn& fn, const Tensor& xi);
}  // namespace

Tensor per_sample_hessian(const TensorFn& fn, const Tensor& x, HessianStrategy strategy,
                          bool create_graph) {
  check_batched_input(x, "per_sample_hessian");
  require_independent_rows(fn, x, "per_sample_hessian");
  const int64_t B = x.size(0), n = x.size(1);
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
  if (strategy == HessianStrategy::Taylor && !forward_ad::is_active()) {
    Tensor xf = forward_input(x, "per_sample_hessian", create_graph);
    // Without create_graph, a structurally zero Hessian (a relu network's)
    // costs one probe on an empty batch instead of the pass.
    static const bool probe = tg::detail::env_allows("TG_STRUCTURE_PROBE");  // off: for A/B timing
    if (probe && !create_graph && B > 1)
      if (Tensor zero = structurally_zero_hessian(fn, xf); zero.defined()) return zero;
    return result(taylor_hessian(fn, xf, "per_sample_hessian", create_graph, /*jacobian=*/false)[2], create_graph);
  }
  if (strategy == HessianStrategy::ForwardOverReverse && !forward_ad::is_active()) {
    std::vector<Tensor> rows = hessian_rows_fwd(fn, xi, create_graph, "per_sample_hessian");
    for (Tensor& r : rows) r = r.permute({1, 0, 2});  // [B, j, k]
    return result(stack(rows, 1), create_graph);
  }
  // Batched cotangents (also ForwardOverReverse inside a caller's dual level,
  // where levels do not nest): probe the output width with the first sample, then
  // R = m * n copies; copy r = i * n + j carries e_i, and row j is selected.
  int64_t m;
  {
    NoGradGuard no_grad;
    Tensor probe = fn(xi.narrow(0, 0, std::min<int64_t>(B, 1)));
    TG_CHECK(probe.defined() && probe.dim() == 2, "per_sample_hessian: fn must map [B, n] to "
             "[B, m], got shape ", probe.defined() ? shape_str(probe.sizes()) : std::string("undefined"));
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
  Tensor h = v.requires_grad() ? grad({v}, {X}, {ones({R * B}, v.options())}, true, create_graph, true)[0]
                               : Tensor();
  h = or_zeros(h, X);
  return result(h.view({R, B, n}).permute({1, 0, 2}).reshape({B, m, n, n}), create_graph);
}

namespace {

// fn's value and Taylor coefficients c_1..c_K ([rows(j), B, m] each) at the
// active Taylor level, x [B, n] carrying the first coefficients `dirs`
// ([k, n], the same for every sample) and no higher ones. Only the orders
// whose bit is set in `need` (bit j - 1 for c_j) are returned (the others
// undefined).
std::vector<Tensor> push_jet(const TensorFn& fn, const Tensor& xi, const Tensor& dirs, const char* op,
                             bool record, unsigned need = ~0u) {
  const forward_ad::TaylorLayout& l = *forward_ad::taylor_layout();
  AutoGradMode grad_mode(record);  // without create_graph nothing needs a history
  const int64_t B = xi.size(0), n = xi.size(1);
  // The stacked coefficients [dirs; 0], the same for every sample: kept
  // broadcast (stride 0 over B), so a first layer's GEMM runs on one copy.
  Tensor tangent;
  {
    forward_ad::detail::Suspend pause;
    tangent = B == 0 ? zeros({l.batch(), 0, n}, xi.options())  // nothing to fill (the structure probe)
                     : cat({dirs, zeros({l.batch() - dirs.size(0), n}, dirs.options())}, 0)
                           .view({l.batch(), 1, n})
                           .expand({l.batch(), B, n});
  }
  Tensor y;
  {
    // A last linear layer's tangent stays pending: only the blocks asked
    // for are computed (a Laplacian needs no first coefficients of y).
    forward_ad::detail::DeferTangents defer;
    y = fn(forward_ad::make_dual(xi, tangent));
  }
  TG_CHECK(y.defined(), op, ": fn returned an undefined tensor");
  check_batched_output(y, B, op);
  std::vector<Tensor> out(size_t(l.order));
  for (int j = 1; j <= l.order; ++j) {
    if (!(need >> (j - 1) & 1u)) continue;
    Tensor& c = out[size_t(j - 1)];
    c = forward_ad::detail::jet_block(y, j);
    if (!c.defined()) c = zeros({l.rows(j), B, y.size(1)}, y.options());
  }
  // The primal without reading the tangent (unpack_dual would compute a
  // pending one in full): a view keeping y's reverse-mode history.
  Tensor primal;
  {
    forward_ad::detail::Suspend pause;
    primal = y.view(y.sizes());
  }
  out.insert(out.begin(), primal);
  return out;
}

// Taylor mode for per-sample Hessians: the n unit directions and one
// second-order group per pair j <= k, whose c_2 is H_jk / 2. Returns the
// value [B, m], c_1 [n, B, m] and H [B, m, n, n].
std::vector<std::vector<forward_ad::SecondOrderPair>> hessian_groups(int64_t n, std::vector<int64_t>* entry) {
  std::vector<std::vector<forward_ad::SecondOrderPair>> groups;
  entry->assign(size_t(n * n), 0);  // (j, k) -> its group
  for (int64_t j = 0; j < n; ++j)
    for (int64_t k = j; k < n; ++k) {
      (*entry)[size_t(j * n + k)] = (*entry)[size_t(k * n + j)] = int64_t(groups.size());
      groups.push_back({{j, k, 1.0}});
    }
  return groups;
}

std::vector<Tensor> taylor_hessian(const TensorFn& fn, const Tensor& xi, const char* op, bool record,
                                   bool jacobian) {
  const int64_t B = xi.size(0), n = xi.size(1);
  std::vector<int64_t> entry;
  forward_ad::taylor_level level(n, hessian_groups(n, &entry));
  // Its range is known: the selection below reads nothing back (no sync;
  // capturable).
  Tensor idx = tg::detail::index_tensor(entry, xi.device());
  std::vector<Tensor> r = push_jet(fn, xi, identity(n, xi), op, record, jacobian ? 3u : 2u);
  const int64_t m = r[0].size(1);
  Tensor h = mul(index_select(r[2], 0, idx), 2.0);  // [n * n, B, m]
  return {r[0], r[1], h.permute({1, 2, 0}).reshape({B, m, n, n})};
}

// Zeros [B, m, n, n] when fn's second coefficients are structurally zero,
// else undefined. The probe: fn on an empty batch (x's first 0 rows: every
// op's rule runs, no kernel does) at the Hessian's Taylor level, unrecorded,
// with an ops_detail::StructureProbe armed; the first rule that forms a
// second-order term ends it (typically the first nonlinear activation).
// Like torch.func's transforms, this takes fn to apply the same ops to every
// sample (no control flow on x's values); fn runs once more. Anything fn
// throws here (one that refuses an empty batch, say) is left to the full
// pass to report.
Tensor structurally_zero_hessian(const TensorFn& fn, const Tensor& xi) {
  const int64_t B = xi.size(0), n = xi.size(1);
  Tensor y;
  ops_detail::StructureProbe probe;
  try {
    std::vector<int64_t> entry;
    forward_ad::taylor_level level(n, hessian_groups(n, &entry));
    y = push_jet(fn, xi.narrow(0, 0, 0), Tensor(), "per_sample_hessian", /*record=*/false, /*none*/ 0u)[0];
  } catch (...) {
    return Tensor();
  }
  if (probe.found() || !y.defined()) return Tensor();
  return zeros({B, y.size(1), n, n}, y.options());
}

}  // namespace

Tensor laplacian(const TensorFn& fn, const Tensor& x, bool create_graph) {
  check_batched_input(x, "laplacian");
  require_independent_rows(fn, x, "laplacian");
  const int64_t n = x.size(1);
  if (forward_ad::is_active())  // levels do not nest: the trace of the reverse-mode Hessians
    return (per_sample_hessian(fn, x, HessianStrategy::BatchedCotangents, create_graph) * identity(n, x))
        .sum({2, 3});
  Tensor xi = forward_input(x, "laplacian", create_graph);
  EnableGradGuard grad_on;
  // Taylor mode along the n unit directions with one second-order group of
  // the pairs (a, a): its c_2 is half the Laplacian (the forward Laplacian).
  std::vector<forward_ad::SecondOrderPair> diag;
  for (int64_t a = 0; a < n; ++a) diag.push_back({a, a, 1.0});
  forward_ad::taylor_level level(n, {diag});
  std::vector<Tensor> r = push_jet(fn, xi, identity(n, x), "laplacian", create_graph, /*c_2 only*/ 2u);
  return result(mul(r[2].select(0, 0), 2.0), create_graph);
}

Tensor derivative_operator(const TensorFn& fn, const Tensor& x, const std::vector<Partial>& terms,
                           bool create_graph) {
  check_batched_input(x, "derivative_operator");
  TG_CHECK(!terms.empty(), "derivative_operator: no terms given");
  require_independent_rows(fn, x, "derivative_operator");
  const int64_t n = x.size(1);
  for (const Partial& t : terms)
    for (int64_t d : t.dims)
      TG_CHECK(d >= 0 && d < n, "derivative_operator: a term names input dim ", d, ", but x has ", n,
               " (shape ", shape_str(x.sizes()), ")");
  TG_CHECK(!forward_ad::is_active(), "derivative_operator: called inside a forward_ad::dual_level; it makes its "
           "own (levels do not nest): call it outside");
  Tensor xi = input_for(x, "derivative_operator", create_graph);
  EnableGradGuard grad_on;
  Tensor out;
  auto accumulate = [&](const Tensor& v) { out = out.defined() ? add(out, v) : v; };
  // Directions as rows of [k, n]: index of each (deduplicated).
  auto direction_rows = [&](const std::vector<std::vector<double>>& dirs) {
    std::vector<double> flat;
    for (const auto& d : dirs) flat.insert(flat.end(), d.begin(), d.end());
    return tensor(flat, {int64_t(dirs.size()), n}, TensorOptions().dtype(x.dtype())).to(x.device());
  };
  auto find_or_add = [](std::vector<std::vector<double>>& dirs, const std::vector<double>& d) {
    auto it = std::find(dirs.begin(), dirs.end(), d);
    if (it != dirs.end()) return int64_t(it - dirs.begin());
    dirs.push_back(d);
    return int64_t(dirs.size() - 1);
  };
  auto unit = [&](int64_t d) {
    std::vector<double> e(size_t(n), 0.0);
    e[size_t(d)] = 1;
    return e;
  };
  // Orders 0..2: one pass, the named unit directions as c_1 and the second
  // derivatives summed into one second-order group (weight 2 * coefficient:
  // its c_2 is the sum of coefficient * d2 / dx_a dx_b).
  {
    std::vector<std::vector<double>> dirs;
    std::vector<forward_ad::SecondOrderPair> pairs;
    std::vector<std::pair<int64_t, double>> firsts;
    bool values = false;
    for (const Partial& t : terms) {
      if (t.dims.size() > 2) continue;
      if (t.dims.empty()) values = true;
      else if (t.dims.size() == 1) firsts.emplace_back(find_or_add(dirs, unit(t.dims[0])), t.coefficient);
      else pairs.push_back({find_or_add(dirs, unit(t.dims[0])), find_or_add(dirs, unit(t.dims[1])), 2 * t.coefficient});
    }
    // One weight for every pair (u_xx + u_yy, say): unit weights and one
    // scale at the end (so the fused rule applies).
    double scale = 1;
    if (!pairs.empty() && std::all_of(pairs.begin(), pairs.end(),
                                      [&](const forward_ad::SecondOrderPair& p) { return p.weight == pairs[0].weight; })) {
      scale = pairs[0].weight;
      for (auto& p : pairs) p.weight = 1;
    }
    if (!dirs.empty()) {
      std::optional<forward_ad::taylor_level> level;
      if (pairs.empty()) level.emplace(1, int64_t(dirs.size()));
      else level.emplace(int64_t(dirs.size()), std::vector<std::vector<forward_ad::SecondOrderPair>>{pairs});
      std::vector<Tensor> r = push_jet(fn, xi, direction_rows(dirs), "derivative_operator", create_graph,
                                       (firsts.empty() ? 0u : 1u) | (pairs.empty() ? 0u : 2u));
      for (const Partial& t : terms)
        if (t.dims.empty()) accumulate(mul(r[0], t.coefficient));
      for (auto [row, c] : firsts) accumulate(mul(r[1].select(0, row), c));
      if (!pairs.empty()) accumulate(scale == 1 ? r[2].select(0, 0) : mul(r[2].select(0, 0), scale));
    } else if (values) {
      Tensor y = call(fn, xi, "derivative_operator");
      check_batched_output(y, x.size(0), "derivative_operator");
      for (const Partial& t : terms)
        if (t.dims.empty()) accumulate(mul(y, t.coefficient));
    }
  }
  // Orders above 2: one univariate Taylor pass of the highest order. A pure
  // partial d^m / dx_d^m is m! c_m along e_d; a mixed one is polarized: with
  // w = sum_i s_i e_(dims[i]) over the signs s (s_0 = +1),
  //   D^m f[e_d0, ..., e_d(m-1)] = 2^(1-m) sum_s (prod s) c_m(w).
  {
    std::vector<std::vector<double>> dirs;
    std::vector<std::vector<std::tuple<int64_t, double>>> uses(terms.size());  // (row, factor)
    int order = 0;
    for (size_t t = 0; t < terms.size(); ++t) {
      const std::vector<int64_t>& dims = terms[t].dims;
      const int m = int(dims.size());
      if (m <= 2) continue;
      order = std::max(order, m);
      double fact = 1;
      for (int i = 2; i <= m; ++i) fact *= i;
      if (std::all_of(dims.begin(), dims.end(), [&](int64_t d) { return d == dims[0]; })) {
        uses[t].emplace_back(find_or_add(dirs, unit(dims[0])), fact * terms[t].coefficient);
        continue;
      }
      for (int64_t signs = 0; signs < (int64_t(1) << (m - 1)); ++signs) {
        std::vector<double> w(size_t(n), 0.0);
        double sign_product = 1;
        for (int i = 0; i < m; ++i) {
          const double s = i > 0 && (signs >> (i - 1)) & 1 ? -1.0 : 1.0;
          w[size_t(dims[size_t(i)])] += s;
          sign_product *= s;
        }
        if (std::all_of(w.begin(), w.end(), [](double v) { return v == 0; })) continue;  // c_m(0) = 0
        uses[t].emplace_back(find_or_add(dirs, w), sign_product * terms[t].coefficient / double(int64_t(1) << (m - 1)));
      }
    }
    if (order > 0) {
      forward_ad::taylor_level level(order, int64_t(dirs.size()));
      std::vector<Tensor> r = push_jet(fn, xi, direction_rows(dirs), "derivative_operator", create_graph);
      for (size_t t = 0; t < terms.size(); ++t)
        for (auto [row, factor] : uses[t]) accumulate(mul(r[terms[t].dims.size()].select(0, row), factor));
    }
  }
  return result(out, create_graph);
}

MlpDerivatives mlp_taylor(const std::vector<Tensor>& weights, const std::vector<Tensor>& biases,
                          Activation act, const Tensor& x) {
  check_batched_input(x, "mlp_taylor");
  TG_CHECK(!weights.empty() && (biases.empty() || biases.size() == weights.size()),
           "mlp_taylor: got ", weights.size(), " weights and ", biases.size(),
           " biases; pass one bias per layer, or none");
  TG_CHECK(!forward_ad::is_active(), "mlp_taylor: called inside a forward_ad::dual_level; it makes its own "
           "(levels do not nest): call it outside");
  // The MLP as a function, through Taylor mode (per_sample_hessian's Taylor
  // strategy): each layer is one GEMM on the stacked coefficients.
  auto mlp = [&](const Tensor& in) {
    Tensor h = in;
    for (size_t l = 0; l < weights.size(); ++l) {
      const Tensor& w = weights[l];
      TG_CHECK(w.dim() == 2 && w.size(1) == h.size(1), "mlp_taylor: weight ", l, " has shape ",
               shape_str(w.sizes()), " but the layer's input has ", h.size(1), " features");
      h = linear(h, w, biases.empty() ? Tensor() : biases[l]);
      if (l + 1 < weights.size())
        h = act == Activation::Silu ? silu(h) : act == Activation::Tanh ? tanh(h)
            : act == Activation::Sigmoid ? sigmoid(h) : relu(h);
    }
    return h;
  };
  std::vector<Tensor> r = taylor_hessian(mlp, x, "mlp_taylor", is_grad_enabled(), /*jacobian=*/true);
  MlpDerivatives d;
  d.value = r[0];
  d.jacobian = r[1].permute({1, 2, 0});  // [B, m, n]
  d.hessian = r[2];
  return d;
}

void set_check_rows_independent(bool on) { check_rows_flag() = on; }
bool check_rows_independent() { return check_rows_flag(); }

}  // namespace tg::autograd
