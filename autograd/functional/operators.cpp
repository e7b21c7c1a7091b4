// Differential operators of a batched fn: the Laplacian (the forward
// Laplacian in Taylor mode), general derivative operators, and an MLP's
// closed-form Taylor derivatives.
#include <tapegrad/autograd/functional.h>

#include <algorithm>
#include <atomic>
#include <limits>
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

Tensor laplacian(const TensorFn& fn, const Tensor& x, bool create_graph) {
  check_batched_input(x, "laplacian");
  const int64_t n = x.size(1);
  if (n == 0) {  // no inputs: the Laplacian is 0
    Tensor value = value_without_inputs(fn, forward_input(x, "laplacian", create_graph), "laplacian", create_graph);
    return structural_zeros({x.size(0), value.size(1)}, value, create_graph);
  }
  if (forward_ad::is_active())  // levels do not nest: the trace of the reverse-mode Hessians
    return (per_sample_hessian(fn, x, HessianStrategy::BatchedCotangents, create_graph) * identity(n, x)).sum({2, 3});
  Tensor xi = forward_input(x, "laplacian", create_graph);
  // A structurally zero Laplacian (a relu network's): one probe on an empty
  // batch instead of the pass, and no row check (every second derivative of
  // a structurally linear fn vanishes, across rows too).
  if (Tensor value = structurally_linear(fn, xi, "laplacian", create_graph); value.defined())
    return structural_zeros({x.size(0), value.size(1)}, value, create_graph);
  require_independent_rows(fn, x, "laplacian");
  EnableGradGuard grad_on;
  // Taylor mode along the n unit directions with one second-order group of
  // the pairs (a, a): its c_2 is half the Laplacian (the forward Laplacian).
  std::vector<forward_ad::SecondOrderPair> diag;
  for (int64_t a = 0; a < n; ++a)
    diag.push_back({a, a, 1.0});
  forward_ad::taylor_level level(n, {diag});
  std::vector<Tensor> r = push_jet(fn, xi, identity(n, x), "laplacian", create_graph, /*c_2 only*/ 2u);
  return result(mul(r[2].select(0, 0), 2.0), create_graph);
}

Tensor derivative_operator(const TensorFn& fn, const Tensor& x, const std::vector<Partial>& all_terms,
                           bool create_graph) {
  check_batched_input(x, "derivative_operator");
  TG_CHECK(!all_terms.empty(), "derivative_operator: no terms given");
  const int64_t n = x.size(1);
  for (const Partial& t : all_terms)
    for (int64_t d : t.dims)
      TG_CHECK(d >= 0 && d < n, "derivative_operator: a term names input dim ", d, ", but x has ", n, " (shape ",
               shape_str(x.sizes()), ")");
  TG_CHECK(!forward_ad::is_active(),
           "derivative_operator: called inside a forward_ad::dual_level; it makes its "
           "own (levels do not nest): call it outside");
  Tensor xi = input_for(x, "derivative_operator", create_graph);
  EnableGradGuard grad_on;
  // Terms of order >= 2 that are structurally zero (a relu network's) drop
  // out after one probe on an empty batch; the others take the passes.
  const auto low =
      std::count_if(all_terms.begin(), all_terms.end(), [](const Partial& t) { return t.dims.size() < 2; });
  Tensor linear_value;
  if (size_t(low) < all_terms.size()) linear_value = structurally_linear(fn, xi, "derivative_operator", create_graph);
  // Only terms of order >= 2, structurally zero: no row check (they vanish across rows too).
  if (linear_value.defined() && low == 0)
    return structural_zeros({x.size(0), linear_value.size(1)}, linear_value, create_graph);
  require_independent_rows(fn, x, "derivative_operator");
  const std::vector<Partial>& terms = all_terms;
  const size_t max_order = linear_value.defined() ? 1 : std::numeric_limits<size_t>::max();  // the orders computed
  Tensor out;
  auto accumulate = [&](const Tensor& v) { out = out.defined() ? add(out, v) : v; };
  // Directions as rows of [k, n]: index of each (deduplicated).
  auto direction_rows = [&](const std::vector<std::vector<double>>& dirs) {
    std::vector<double> flat;
    for (const auto& d : dirs)
      flat.insert(flat.end(), d.begin(), d.end());
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
      if (t.dims.size() > 2 || t.dims.size() > max_order) continue;
      if (t.dims.empty()) values = true;
      else if (t.dims.size() == 1) firsts.emplace_back(find_or_add(dirs, unit(t.dims[0])), t.coefficient);
      else pairs.push_back({find_or_add(dirs, unit(t.dims[0])), find_or_add(dirs, unit(t.dims[1])), 2 * t.coefficient});
    }
    // One weight for every pair (u_xx + u_yy, say): unit weights and one
    // scale at the end (so the fused rule applies).
    double scale = 1;
    if (!pairs.empty() && std::all_of(pairs.begin(), pairs.end(), [&](const forward_ad::SecondOrderPair& p) {
          return p.weight == pairs[0].weight;
        })) {
      scale = pairs[0].weight;
      for (auto& p : pairs)
        p.weight = 1;
    }
    if (!dirs.empty()) {
      std::optional<forward_ad::taylor_level> level;
      if (pairs.empty()) level.emplace(1, int64_t(dirs.size()));
      else level.emplace(int64_t(dirs.size()), std::vector<std::vector<forward_ad::SecondOrderPair>>{pairs});
      std::vector<Tensor> r = push_jet(fn, xi, direction_rows(dirs), "derivative_operator", create_graph,
                                       (firsts.empty() ? 0u : 1u) | (pairs.empty() ? 0u : 2u));
      for (const Partial& t : terms)
        if (t.dims.empty()) accumulate(mul(r[0], t.coefficient));
      for (auto [row, c] : firsts)
        accumulate(mul(r[1].select(0, row), c));
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
      if (m <= 2 || dims.size() > max_order) continue;
      order = std::max(order, m);
      double fact = 1;
      for (int i = 2; i <= m; ++i)
        fact *= i;
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
        for (auto [row, factor] : uses[t])
          accumulate(mul(r[terms[t].dims.size()].select(0, row), factor));
    }
  }
  return result(out, create_graph);
}

Estimate laplacian_estimate(const TensorFn& fn, const Tensor& x, int64_t samples, Directions directions,
                            bool create_graph, bool variance) {
  check_batched_input(x, "laplacian_estimate");
  TG_CHECK(samples > 0, "laplacian_estimate: samples must be positive, got ", samples);
  TG_CHECK(is_floating_point(x.dtype()), "laplacian_estimate: x must be floating-point, got ", x.dtype());
  TG_CHECK(!forward_ad::is_active(),
           "laplacian_estimate: called inside a forward_ad::dual_level; it makes its own "
           "(levels do not nest): call it outside");
  require_independent_rows(fn, x, "laplacian_estimate");
  const int64_t B = x.size(0), n = x.size(1);
  Tensor v;
  {
    NoGradGuard no_grad;
    const TensorOptions o = TensorOptions().dtype(x.dtype()).device(x.device());
    if (directions == Directions::Gaussian) {
      v = randn({samples, B, n}, o);
    } else {
      // +-1 as 2 floor(2u) - 1 from u ~ U[0, 1) of x's dtype, in place: one
      // tensor of the directions' size (randint's float64 draw and its
      // integer steps took five, a tenth of a step at n = 10^5 on the GPU).
      v = rand({samples, B, n}, o);
      v.mul_(2.0).floor_().mul_(2.0).sub_(1.0);
    }
  }
  Tensor xi = forward_input(x, "laplacian_estimate", create_graph);
  EnableGradGuard grad_on;
  Estimate e;
  if (!variance) {
    // One second-order group of the pairs (s, s): its c_2 is half the sum of v_s^T H v_s.
    std::vector<forward_ad::SecondOrderPair> diag;
    for (int64_t s = 0; s < samples; ++s)
      diag.push_back({s, s, 1.0});
    forward_ad::taylor_level level(samples, {diag});
    std::vector<Tensor> r = push_jet(fn, xi, v, "laplacian_estimate", create_graph, 2u);
    e.value = result(mul(r[2].select(0, 0), 2.0 / double(samples)), create_graph);
    return e;
  }
  // Each direction its own group: the k estimates v_s^T H v_s, their mean and variance / k.
  std::vector<std::vector<forward_ad::SecondOrderPair>> groups;
  for (int64_t s = 0; s < samples; ++s)
    groups.push_back({{s, s, 1.0}});
  forward_ad::taylor_level level(samples, groups);
  std::vector<Tensor> r = push_jet(fn, xi, v, "laplacian_estimate", create_graph, 2u);
  const Tensor q = mul(r[2], 2.0);  // [k, B, m]
  e.value = result(mean(q, {0}), create_graph);
  {
    NoGradGuard no_grad;
    // One direction gives no spread to estimate: NaN, not a variance of 0.
    e.variance = samples > 1 ? div(var(q.detach(), IntList{0}, 1.0), double(samples))
                             : full_like(e.value, std::numeric_limits<double>::quiet_NaN());
  }
  return e;
}

Tensor derivative_operator_estimate(const TensorFn& fn, const Tensor& x, const std::vector<Partial>& terms,
                                    int64_t samples, bool create_graph) {
  const int64_t t = int64_t(terms.size());
  check_batched_input(x, "derivative_operator_estimate");
  TG_CHECK(t > 0, "derivative_operator_estimate: no terms given");
  TG_CHECK(samples > 0 && samples <= t, "derivative_operator_estimate: samples must be in [1, ", t,
           "] (the number of terms), got ", samples);
  TG_CHECK(!cuda::is_current_stream_capturing(),
           "derivative_operator_estimate: draws its terms on the host, which a CUDA graph would fix at capture; "
           "use laplacian_estimate (random directions drawn on the device) under capture");
  if (samples == t) return derivative_operator(fn, x, terms, create_graph);
  Tensor pick;
  {
    NoGradGuard no_grad;
    pick = randperm(t).narrow(0, 0, samples);  // a CPU Int64 tensor: no device sync
  }
  std::vector<Partial> drawn;
  const double scale = double(t) / double(samples);
  for (int64_t i = 0; i < samples; ++i) {
    Partial p = terms[size_t(pick.select(0, i).item<int64_t>())];
    p.coefficient *= scale;
    drawn.push_back(std::move(p));
  }
  return derivative_operator(fn, x, drawn, create_graph);
}

MlpDerivatives mlp_taylor(const std::vector<Tensor>& weights, const std::vector<Tensor>& biases, Activation act,
                          const Tensor& x) {
  check_batched_input(x, "mlp_taylor");
  TG_CHECK(!weights.empty() && (biases.empty() || biases.size() == weights.size()), "mlp_taylor: got ", weights.size(),
           " weights and ", biases.size(), " biases; pass one bias per layer, or none");
  TG_CHECK(!forward_ad::is_active(),
           "mlp_taylor: called inside a forward_ad::dual_level; it makes its own "
           "(levels do not nest): call it outside");
  // The MLP as a function, through Taylor mode (per_sample_hessian's Taylor
  // strategy): each layer is one GEMM on the stacked coefficients.
  auto mlp = [&](const Tensor& in) {
    Tensor h = in;
    for (size_t l = 0; l < weights.size(); ++l) {
      const Tensor& w = weights[l];
      TG_CHECK(w.dim() == 2 && w.size(1) == h.size(1), "mlp_taylor: weight ", l, " has shape ", shape_str(w.sizes()),
               " but the layer's input has ", h.size(1), " features");
      h = linear(h, w, biases.empty() ? Tensor() : biases[l]);
      if (l + 1 < weights.size())
        h = act == Activation::Silu      ? silu(h)
            : act == Activation::Tanh    ? tanh(h)
            : act == Activation::Sigmoid ? sigmoid(h)
            : act == Activation::Gelu    ? gelu(h)
                                         : relu(h);
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

}  // namespace tg::autograd
