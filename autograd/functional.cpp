#include <tapegrad/autograd/functional.h>

#include <algorithm>
#include <optional>

#include <tapegrad/autograd/engine.h>
#include <tapegrad/autograd/forward_ad.h>
#include <tapegrad/autograd/grad_mode.h>
#include <tapegrad/tensor/error.h>
#include <tapegrad/tensor/ops.h>

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
// The n x n identity, on like's device with its dtype.
Tensor identity(int64_t n, const Tensor& like) {
  Tensor eye = zeros({n, n}, TensorOptions().dtype(like.dtype()));
  for (int64_t j = 0; j < n; ++j) eye.select(0, j).narrow(0, j, 1).fill_(1);
  return eye.to(like.device());
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
    Tensor xi = create_graph && x.requires_grad() ? input_for(x, "jvp", true) : x.detach();
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

Tensor per_sample_hessian(const TensorFn& fn, const Tensor& x, HessianStrategy strategy,
                          bool create_graph) {
  check_batched_input(x, "per_sample_hessian");
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

Tensor laplacian(const TensorFn& fn, const Tensor& x, bool create_graph) {
  check_batched_input(x, "laplacian");
  const int64_t n = x.size(1);
  if (forward_ad::is_active())  // levels do not nest: the trace of the reverse-mode Hessians
    return (per_sample_hessian(fn, x, HessianStrategy::BatchedCotangents, create_graph) * identity(n, x))
        .sum({2, 3});
  Tensor xi = input_for(x, "laplacian", create_graph);
  EnableGradGuard grad_on;
  std::vector<Tensor> rows = hessian_rows_fwd(fn, xi, create_graph, "laplacian");
  // The diagonal: direction j's tangent, component j.
  Tensor mask = identity(n, x).view({n, 1, n});
  std::vector<Tensor> cols;
  for (const Tensor& r : rows) cols.push_back((r * mask).sum({0, 2}));  // [B]
  return result(stack(cols, 1), create_graph);
}

Tensor derivative_operator(const TensorFn& fn, const Tensor& x, const std::vector<Partial>& terms,
                           bool create_graph) {
  check_batched_input(x, "derivative_operator");
  TG_CHECK(!terms.empty(), "derivative_operator: no terms given");
  const int64_t B = x.size(0), n = x.size(1);
  size_t max_order = 0;
  std::vector<int64_t> dirs;  // the directions pushed forward: every term's first dim
  for (const Partial& t : terms) {
    for (int64_t d : t.dims)
      TG_CHECK(d >= 0 && d < n, "derivative_operator: a term names input dim ", d, ", but x has ", n,
               " (shape ", shape_str(x.sizes()), ")");
    max_order = std::max(max_order, t.dims.size());
    if (!t.dims.empty() && std::find(dirs.begin(), dirs.end(), t.dims[0]) == dirs.end()) dirs.push_back(t.dims[0]);
  }
  TG_CHECK(!forward_ad::is_active(), "derivative_operator: called inside a forward_ad::dual_level; it makes its "
           "own (levels do not nest): call it outside");
  Tensor xi = input_for(x, "derivative_operator", create_graph);
  EnableGradGuard grad_on;
  // Orders above 2 differentiate second derivatives again: record them.
  const bool record = create_graph || max_order > 2;
  auto dir_index = [&](int64_t d) { return int64_t(std::find(dirs.begin(), dirs.end(), d) - dirs.begin()); };
  Tensor y;
  std::vector<Tensor> value_terms;  // [B, m] each, per term
  value_terms.resize(terms.size());
  {
    const int64_t k = std::max<int64_t>(int64_t(dirs.size()), 1);
    forward_ad::dual_level level(k);
    Tensor seed = dirs.empty() ? zeros({k, n}, x.options())  // the rows of the identity named
                               : index_select(identity(n, x), 0,
                                              tensor(std::vector<double>(dirs.begin(), dirs.end()), {k},
                                                     TensorOptions().dtype(kInt64)).to(x.device()));
    Tensor xd = forward_ad::make_dual(xi, seed.view({k, 1, n}).expand({k, B, n}));
    Tensor yd = call(fn, xd, "derivative_operator");
    check_batched_output(yd, B, "derivative_operator");
    const int64_t m = yd.size(1);
    forward_ad::UnpackedDual u = forward_ad::unpack_dual(yd);
    y = u.primal;
    Tensor first = u.tangent.defined() ? u.tangent : zeros({k, B, m}, yd.options());  // [k, B, m]
    // Second derivatives along the pushed directions, per output column:
    // [k, B, n] each (H e_d rows), only when a term needs them.
    std::vector<Tensor> second;
    if (max_order >= 2) {
      TG_CHECK(yd.requires_grad(), "derivative_operator: fn's output does not depend on x");
      Tensor ones_b = ones({B}, yd.options());
      for (int64_t i = 0; i < m; ++i) {
        Tensor g = grad({yd.select(1, i)}, {xd}, {ones_b}, /*retain_graph=*/i + 1 < m || record, record, true)[0];
        Tensor t = g.defined() ? forward_ad::unpack_dual(g).tangent : Tensor();
        second.push_back(t.defined() ? t : zeros({k, B, n}, x.options()));
      }
    }
    for (size_t t = 0; t < terms.size(); ++t) {
      const std::vector<int64_t>& dims = terms[t].dims;
      if (dims.empty()) continue;
      const int64_t j = dir_index(dims[0]);
      if (dims.size() == 1) {
        value_terms[t] = first.select(0, j);  // [B, m]
        continue;
      }
      std::vector<Tensor> cols;
      for (int64_t i = 0; i < m; ++i) cols.push_back(second[size_t(i)].select(0, j).select(1, dims[1]));  // [B]
      value_terms[t] = stack(cols, 1);  // [B, m]: d2 y / dx_j dx_dims[1]
    }
  }
  // Orders above 2: reverse passes of the second derivatives (rows are
  // independent, so the gradient of the batch sum is the per-sample one).
  Tensor out;
  for (size_t t = 0; t < terms.size(); ++t) {
    const Partial& p = terms[t];
    Tensor v = p.dims.empty() ? y : value_terms[t];
    for (size_t q = 2; q < p.dims.size(); ++q) {
      std::vector<Tensor> cols;
      const bool again = create_graph || q + 1 < p.dims.size();
      for (int64_t i = 0; i < v.size(1); ++i) {
        Tensor col = v.select(1, i);
        Tensor g = col.requires_grad() ? grad({col.sum()}, {xi}, {}, true, again, true)[0] : Tensor();
        cols.push_back(g.defined() ? g.select(1, p.dims[q]) : zeros({B}, x.options()));
      }
      v = stack(cols, 1);
    }
    v = v * p.coefficient;
    out = out.defined() ? out + v : v;
  }
  return result(out, create_graph);
}

MlpDerivatives mlp_taylor(const std::vector<Tensor>& weights, const std::vector<Tensor>& biases,
                          Activation act, const Tensor& x) {
  check_batched_input(x, "mlp_taylor");
  TG_CHECK(!weights.empty() && (biases.empty() || biases.size() == weights.size()),
           "mlp_taylor: got ", weights.size(), " weights and ", biases.size(),
           " biases; pass one bias per layer, or none");
  const int64_t B = x.size(0), n = x.size(1);
  // Second derivatives are kept for the pairs j <= k only.
  std::vector<std::pair<int64_t, int64_t>> pairs;
  for (int64_t j = 0; j < n; ++j)
    for (int64_t k = j; k < n; ++k) pairs.emplace_back(j, k);
  const int64_t P = int64_t(pairs.size()), S = 1 + n + P;  // stacked blocks
  // h: [S, B, d] = value; d/dx_j; d2/dx_j dx_k. At the input: x; e_j; 0.
  Tensor eye = zeros({n, n}, x.options());
  for (int64_t j = 0; j < n; ++j) eye.select(0, j).narrow(0, j, 1).fill_(1);
  Tensor h = cat({x.unsqueeze(0), eye.unsqueeze(1).expand({n, B, n}),
                  zeros({P, B, n}, x.options())}, 0);
  for (size_t l = 0; l < weights.size(); ++l) {
    const Tensor& w = weights[l];
    TG_CHECK(w.dim() == 2 && w.size(1) == h.size(2), "mlp_taylor: weight ", l, " has shape ",
             shape_str(w.sizes()), " but the layer's input has ", h.size(2), " features");
    const int64_t d = w.size(0);
    // One GEMM for the value and every derivative; the bias enters the value only.
    Tensor z = mm(h.reshape({S * B, h.size(2)}), w.t()).view({S, B, d});
    Tensor z0 = z.select(0, 0);
    if (!biases.empty() && biases[l].defined()) z0 = add(z0, biases[l]);
    if (l + 1 == weights.size()) {
      h = cat({z0.unsqueeze(0), z.narrow(0, 1, S - 1)}, 0);
      break;
    }
    Tensor z1 = z.narrow(0, 1, n), z2 = z.narrow(0, 1 + n, P);
    Tensor one = ones_like(z0);
    Tensor d1 = activation_grad(one, z0, act, 1), d2 = activation_grad(one, z0, act, 2);
    Tensor h0 = activation_grad(one, z0, act, 0);
    Tensor h1 = mul(d1.unsqueeze(0), z1);
    std::vector<Tensor> zj, zk;
    for (auto [j, k] : pairs) {
      zj.push_back(z1.select(0, j));
      zk.push_back(z1.select(0, k));
    }
    Tensor cross = mul(stack(zj, 0), stack(zk, 0));  // z_j' z_k' per pair
    Tensor h2 = add(mul(d2.unsqueeze(0), cross), mul(d1.unsqueeze(0), z2));
    h = cat({h0.unsqueeze(0), h1, h2}, 0);
  }
  const int64_t m = h.size(2);
  MlpDerivatives r;
  r.value = h.select(0, 0);
  r.jacobian = h.narrow(0, 1, n).permute({1, 2, 0});  // [B, m, n]
  // Scatter the pairs into the symmetric [B, m, n, n].
  Tensor h2 = h.narrow(0, 1 + n, P);
  std::vector<Tensor> entries(size_t(n * n));
  for (int64_t p = 0; p < P; ++p) {
    auto [j, k] = pairs[size_t(p)];
    entries[size_t(j * n + k)] = entries[size_t(k * n + j)] = h2.select(0, p);
  }
  r.hessian = stack(entries, 2).view({B, m, n, n});
  return r;
}

}  // namespace tg::autograd
