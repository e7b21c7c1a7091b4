// The functional API's shared steps: inputs, batched shapes, the check that
// rows are independent, Jacobian layouts and the Taylor-mode push of a jet.
#include "autograd/functional/common.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <optional>
#include <string>

#include <tapegrad/autograd/engine.h>
#include <tapegrad/autograd/forward_ad.h>
#include <tapegrad/autograd/grad_mode.h>
#include <tapegrad/autograd/node.h>
#include <tapegrad/cuda/capture.h>
#include <tapegrad/cuda/device.h>
#include <tapegrad/tensor/error.h>
#include <tapegrad/tensor/ops.h>

#include "autograd/ops/taylor.h"
#include "tensor/env.h"
#include "tensor/op_util.h"

namespace tg::autograd {
namespace functional_detail {

// The tensor fn is evaluated at. With create_graph and an x that requires
// grad, a differentiable alias of x, so the results stay functions of x
// (torch.autograd.functional does the same); otherwise a fresh leaf.
Tensor input_for(const Tensor& x, const char* op, bool create_graph) {
  TG_CHECK(x.defined() && is_differentiable(x.dtype()), op, ": x must be a defined floating-point tensor");
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
  TG_CHECK(is_floating_point(x.dtype()) || is_complex(x.dtype()), op,
           ": x must be floating-point (or complex) to be differentiated, got ", x.dtype(), "; convert it with to()");
}
void check_batched_output(const Tensor& y, int64_t rows, const char* op) {
  TG_CHECK(y.dim() == 2 && y.size(0) == rows, op, ": fn must map [B, n] to [B, m] (B = ", rows, "), got shape ",
           shape_str(y.sizes()));
  TG_CHECK(is_floating_point(y.dtype()) || is_complex(y.dtype()), op,
           ": fn must return a floating-point (or complex) tensor to be differentiated, got ", y.dtype());
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
  for (size_t i = 0; i < names.size() && i < 16; ++i)
    out += (i ? ", " : "") + names[i];
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
    if (!y.requires_grad() || !is_differentiable(y.dtype()) || y.numel() == 0) return Probe{};
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
  // a coupling of rows shows at the scale itself (on the four rows probed, a
  // batch mean moves a row's gradient by a quarter of it). Float32 GEMMs in
  // TF32 (cuda::set_allow_tf32) round to 10 mantissa bits: the two passes
  // then differ by up to a few percent of the scale.
  const bool tf32 = x.scalar_type() == kFloat32 && x.is_cuda() && cuda::allow_tf32();
  const double tol = x.scalar_type() == kFloat64   ? 1e3 * 2.2e-16
                     : tf32                        ? 32 * 9.8e-4
                     : x.scalar_type() == kFloat32 ? 1e3 * 1.2e-7
                                                   : 10 * 7.8e-3;  // float16 / bfloat16: a weak check
  if (!(p->deviation > tol * std::max(p->scale, 1e-300))) return;
  const int64_t row = pick.empty() ? p->row : int64_t(pick[size_t(p->row)]);
  TG_ERROR(op, ": fn mixes rows of the batch — row ", row, " of its gradient depends on other rows of x ",
           shape_str(x.sizes()), " (", x.dtype(),
           "), but rows must be independent: row i of fn(x) may depend on row "
           "i of x alone. Per-row results would be silently wrong. Look in fn for an op that reduces, accumulates, "
           "contracts, gathers or moves along dim 0 (a mean or sum over the batch, a batch norm, cumsum over rows, "
           "x^T x, index_select along 0, attention over the batch); fn's graph has: ",
           p->ops,
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
    if (out.requires_grad()) g = grad({out}, {x}, {e.view(out.sizes())}, true, create_graph, true)[0];
    r.push_back(or_zeros(g, x));
  }
  IntList shape = out.sizes();
  shape.insert(shape.end(), x.sizes().begin(), x.sizes().end());
  if (r.empty()) return zeros(shape, x.options());
  return stack(r).view(shape);
}

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
// fn's value and Taylor coefficients c_1..c_K ([rows(j), B, m] each) at the
// active Taylor level, x [B, n] carrying the first coefficients `dirs`
// ([k, n], the same for every sample, or [k, B, n], each sample's own) and
// no higher ones. Only the orders
// whose bit is set in `need` (bit j - 1 for c_j) are returned (the others
// undefined). `carries` (optional): whether y carries coefficients at all
// (an output that is not a function of x carries none).
std::vector<Tensor> push_jet(const TensorFn& fn, const Tensor& xi, const Tensor& dirs, const char* op, bool record,
                             unsigned need, bool* carries) {
  const forward_ad::TaylorLayout& l = *forward_ad::taylor_layout();
  AutoGradMode grad_mode(record);  // without create_graph nothing needs a history
  const int64_t B = xi.size(0), n = xi.size(1);
  // The stacked coefficients [dirs; 0], the same for every sample: kept
  // broadcast (stride 0 over B), so a first layer's GEMM runs on one copy.
  Tensor tangent;
  {
    forward_ad::detail::Suspend pause;
    if (B == 0) tangent = zeros({l.batch(), 0, n}, xi.options());  // nothing to fill (the structure probe)
    else if (dirs.dim() == 3) tangent = cat({dirs, zeros({l.batch() - dirs.size(0), B, n}, dirs.options())}, 0);
    else
      tangent = cat({dirs, zeros({l.batch() - dirs.size(0), n}, dirs.options())}, 0)
                    .view({l.batch(), 1, n})
                    .expand({l.batch(), B, n});
  }
  Tensor y;
  {
    // A last linear layer's tangent stays pending: only the blocks asked
    // for are computed (a Laplacian needs no first coefficients of y).
    forward_ad::detail::DeferTangents defer;
    try {
      y = fn(forward_ad::make_dual(xi, tangent));
    } catch (const Error& e) {
      // Without create_graph the pass records nothing (grad mode off, x not
      // requiring grad): a fn that differentiates inside cannot.
      if (record || !std::strstr(e.what(), "does not require grad")) throw;
      TG_ERROR(op,
               ": fn failed in its Taylor-mode pass, which runs fn without recording anything when "
               "create_graph is false (grad mode off, x not requiring grad): ",
               e.what(),
               " A fn that calls autograd::grad inside needs create_graph=true with x requiring grad, or the "
               "Rows strategy of per_sample_hessian.");
    }
  }
  TG_CHECK(y.defined(), op, ": fn returned an undefined tensor");
  check_batched_output(y, B, op);
  if (carries) *carries = forward_ad::detail::jet_block(y, 1).defined();  // one block of a pending tangent
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

// The probe runs every op's rule and no kernel (x's first 0 rows) at a
// Taylor level of n directions and one second-order group of the pairs
// (a, a); the first rule that forms a second-order term ends it (typically
// the first nonlinear activation: 14 us of host time), a relu network runs
// through (40 us). Like torch.func's transforms, this takes fn to apply the
// same ops to every sample (no control flow on x's values); fn runs once
// more. An output that carries no coefficients at all proves nothing: the
// empty batch may have taken a path that drops x (an op's shortcut for empty
// inputs returning a constant), so that is left to the full pass (a fn that
// truly ignores x costs one pass more). The probe cannot see a shortcut that
// keeps a linear dependence on x: ops keep their empty-batch paths the same
// functions of their inputs (tg::linalg::matrix_exp runs its whole op
// sequence on no elements, tested with the composites in
// tests/test_linalg.cpp).
Tensor structurally_linear(const TensorFn& fn, const Tensor& xi, const char* op, bool record) {
  const int64_t B = xi.size(0), n = xi.size(1);
  if (!tg::detail::switched_on<tg::detail::OffSwitch::kStructureProbe>() || B <= 1 || forward_ad::is_active())
    return Tensor();
  Tensor y;
  bool carries = false;
  ops_detail::StructureProbe probe;
  try {
    std::vector<forward_ad::SecondOrderPair> diag;
    for (int64_t a = 0; a < n; ++a)
      diag.push_back({a, a, 1.0});
    forward_ad::taylor_level level(n, {diag});
    y = push_jet(fn, xi.narrow(0, 0, 0), Tensor(), op, record, /*none*/ 0u, &carries)[0];
  } catch (...) {
    return Tensor();
  }
  if (probe.found() || !y.defined() || !carries) return Tensor();
  return y;
}

Tensor value_without_inputs(const TensorFn& fn, const Tensor& xi, const char* op, bool record) {
  forward_ad::detail::Suspend no_tangents;  // inside a caller's dual level too
  AutoGradMode grad_mode(record);
  Tensor y = fn(xi.narrow(0, 0, 0));
  TG_CHECK(y.defined(), op, ": fn returned an undefined tensor");
  check_batched_output(y, 0, op);
  return y;
}

Tensor structural_zeros(const IntList& shape, const Tensor& value, bool create_graph) {
  Tensor z = zeros(shape, value.options());
  if (!create_graph || !value.requires_grad()) return z;
  EnableGradGuard on;
  return add(z, value.sum());  // the sum of no rows: exactly 0, a function of fn's parameters
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

std::vector<Tensor> taylor_hessian(const TensorFn& fn, const Tensor& xi, const char* op, bool record, bool jacobian) {
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

}  // namespace functional_detail

void set_check_rows_independent(bool on) { functional_detail::check_rows_flag() = on; }
bool check_rows_independent() { return functional_detail::check_rows_flag(); }

}  // namespace tg::autograd
