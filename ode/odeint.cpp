// tg::ode::odeint (include/tapegrad/ode/odeint.h): explicit Runge-Kutta
// steps over a state that is a list of tensors (the user's y, or the
// adjoint's augmented [y, a, dL/dparams...]), fixed-step or Dormand-Prince
// 5(4) or Tsitouras 5(4) with an error-per-step controller and dense output
// (each method's own 4th-order interpolant);
// Backprop records the steps, Adjoint is a custom Function whose backward
// solves the augmented system between the forward solution's checkpoints.
#include <tapegrad/ode/odeint.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <string>

#include <tapegrad/autograd/engine.h>
#include <tapegrad/autograd/forward_ad.h>
#include <tapegrad/autograd/function.h>
#include <tapegrad/autograd/grad_mode.h>
#include <tapegrad/cuda/capture.h>
#include <tapegrad/cuda/graph.h>
#include <tapegrad/cuda/stream.h>
#include <tapegrad/tensor/error.h>
#include <tapegrad/tensor/ops.h>

#include "tensor/env.h"
#include "tensor/kernels.h"

namespace tg::ode {
namespace {

using autograd::EnableGradGuard;
using autograd::NoGradGuard;
using State = std::vector<Tensor>;
// The state's derivative at time t (a 0-d tensor). A system's first `read`
// components are the ones its derivative depends on; the others are
// quadratures (the adjoint's parameter gradients: integrated, never read), so
// y holds only the first `read` components, and the quadratures' derivatives
// are asked for only where the solver uses them (`quadratures`; when false,
// those entries of the result may be undefined).
using Dynamics = std::function<State(const Tensor& t, const State& y, bool quadratures)>;

// ---- Butcher tableaus ----
struct Tableau {
  std::vector<double> c;               // stage times
  std::vector<std::vector<double>> a;  // a[s][j], j < s
  std::vector<double> b;               // the solution's weights
};
const Tableau& tableau(Method m) {
  static const Tableau euler{{0}, {{}}, {1}};
  static const Tableau midpoint{{0, 0.5}, {{}, {0.5}}, {0, 1}};
  static const Tableau rk4{{0, 0.5, 0.5, 1}, {{}, {0.5}, {0, 0.5}, {0, 0, 1}}, {1. / 6, 1. / 3, 1. / 3, 1. / 6}};
  // Dormand-Prince 5(4): the 5th-order solution's weights are row 7 (FSAL).
  static const Tableau dopri5{{0, 1. / 5, 3. / 10, 4. / 5, 8. / 9, 1, 1},
                              {{},
                               {1. / 5},
                               {3. / 40, 9. / 40},
                               {44. / 45, -56. / 15, 32. / 9},
                               {19372. / 6561, -25360. / 2187, 64448. / 6561, -212. / 729},
                               {9017. / 3168, -355. / 33, 46732. / 5247, 49. / 176, -5103. / 18656},
                               {35. / 384, 0, 500. / 1113, 125. / 192, -2187. / 6784, 11. / 84}},
                              {35. / 384, 0, 500. / 1113, 125. / 192, -2187. / 6784, 11. / 84, 0}};
  // Tsitouras 5(4) (Computers & Mathematics with Applications 62, 2011),
  // also FSAL: its 5th-order weights are row 7.
  static const Tableau tsit5{
      {0, 0.161, 0.327, 0.9, 0.9800255409045097, 1, 1},
      {{},
       {0.161},
       {-0.008480655492356989, 0.335480655492357},
       {2.8971530571054935, -6.359448489975075, 4.3622954328695815},
       {5.325864828439257, -11.748883564062828, 7.4955393428898365, -0.09249506636175525},
       {5.86145544294642, -12.92096931784711, 8.159367898576159, -0.071584973281401, -0.028269050394068383},
       {0.09646076681806523, 0.01, 0.4798896504144996, 1.379008574103742, -3.290069515436081, 2.324710524099774}},
      {0.09646076681806523, 0.01, 0.4798896504144996, 1.379008574103742, -3.290069515436081, 2.324710524099774, 0}};
  switch (m) {
    case Method::Tsit5: return tsit5;
    case Method::Euler: return euler;
    case Method::Midpoint: return midpoint;
    case Method::RK4: return rk4;
    case Method::Dopri5: return dopri5;
  }
  return rk4;
}
// The adaptive methods' error weights: the 5th-order solution's minus the
// embedded 4th-order one's.
const double kDopriError[7] = {71. / 57600, 0, -71. / 16695, 71. / 1920, -17253. / 339200, 22. / 525, -1. / 40};
const double kTsit5Error[7] = {-0.00178001105222577714,
                               -0.0008164344596567469,
                               0.007880878010261995,
                               -0.1447110071732629,
                               0.5823571654525552,
                               -0.45808210592918697,
                               1.0 / 66};
bool adaptive(Method m) { return m == Method::Dopri5 || m == Method::Tsit5; }

// y + h * sum_j w_j k_j over every component: the sum with the weights as
// numbers (one multiply and one add each, zero weights skipped: dopri5's
// second, RK4's skipped stages), then one multiply by the step tensor h (a
// time gradient flows through it) and one add.
// sum_j w_j k_j[i] (undefined when every weight is zero).
Tensor stage_sum(const std::vector<State>& k, size_t i, const std::vector<double>& w) {
  Tensor acc;
  for (size_t j = 0; j < w.size() && j < k.size(); ++j)
    if (w[j] != 0) acc = acc.defined() ? tg::add(acc, k[j][i], w[j]) : k[j][i] * w[j];
  return acc;
}

// A step's size: the tensor h, and in the adaptive solver its value as a
// number too (`number`): the sums then scale their weights by it instead,
// y + sum_j (h w_j) k_j, one scaled add per nonzero weight (two kernels
// fewer per sum), and a time gradient, where one reaches h (the last step
// of a solve whose t needs one), flows through (h - h.detach()) sum_j w_j
// k_j, which is 0 in value: the same numbers with the gradient or without.
struct Step {
  Tensor h;
  double value = 0;
  bool number = false;
};

// y_i + h * sum_j w_j k_j[i].
Tensor weighted_one(const Tensor& yi, const std::vector<State>& k, size_t i, const Step& h,
                    const std::vector<double>& w) {
  if (!h.number) {
    const Tensor acc = stage_sum(k, i, w);
    return acc.defined() ? yi + acc * h.h : yi;
  }
  Tensor out = yi;
  for (size_t j = 0; j < w.size() && j < k.size(); ++j)
    if (w[j] != 0) out = tg::add(out, k[j][i], h.value * w[j]);
  // (A gradient or a forward-mode tangent of h: a dual t that need not require grad.)
  const bool h_varies =
      h.h.defined() &&
      ((autograd::is_grad_enabled() && h.h.requires_grad()) ||
       (autograd::forward_ad::is_active() && autograd::forward_ad::unpack_dual(h.h).tangent.defined()));
  if (h_varies)
    if (const Tensor acc = stage_sum(k, i, w); acc.defined()) out = out + (h.h - h.h.detach()) * acc;
  return out;
}

// Over the first `count` components (all by default).
State weighted(const State& y, const std::vector<State>& k, const Step& h, const std::vector<double>& w,
               size_t count = SIZE_MAX) {
  State out;
  for (size_t i = 0; i < y.size() && i < count; ++i)
    out.push_back(weighted_one(y[i], k, i, h, w));
  return out;
}

// One explicit Runge-Kutta step of size h from y; `times(s)` is stage s's
// time tn + c_s h (a 0-d tensor); `k0` is f(tn, y) when already known; the
// stage inputs are formed for the first `read` components; `quad(s)`: whether
// stage s's quadratures are used.
// Returns the stages; `last_input`, when given, receives the last stage's
// input (the 5th-order solution of the FSAL methods, whose last row of a is
// their b).
template <class Times, class Quad>
std::vector<State> stages(const Dynamics& f, const Tableau& tb, const Times& times, const Step& h, const State& y,
                          size_t read, const Quad& quad, const State* k0, State* last_input = nullptr) {
  std::vector<State> k;
  k.push_back(k0 ? *k0 : f(times(0), y, quad(0)));
  for (size_t s = 1; s < tb.c.size(); ++s) {
    State in = weighted(y, k, h, tb.a[s], read);
    k.push_back(f(times(s), in, quad(s)));
    if (last_input && s + 1 == tb.c.size()) *last_input = std::move(in);
  }
  return k;
}

// The time tensor t's entry i as a 0-d tensor.
Tensor at(const Tensor& t, int64_t i) { return t.select(0, i); }

// The solution at a list of times, kept as blocks of consecutive outputs
// (each component with a leading dim of outputs), so that an adaptive
// step's outputs are computed together and joined by one copy each.
struct Trajectory {
  std::vector<State> blocks;
  void row(const State& y) {
    State b;
    for (const Tensor& c : y)
      b.push_back(c.unsqueeze(0));
    blocks.push_back(std::move(b));
  }
  State last() const {
    State r;
    for (const Tensor& c : blocks.back())
      r.push_back(c.select(0, c.size(0) - 1));
    return r;
  }
  // Component i at every time, [times, ...].
  Tensor joined(size_t i) const {
    std::vector<Tensor> parts;
    for (const State& b : blocks)
      parts.push_back(b[i]);
    return parts.size() == 1 ? parts[0] : tg::cat(parts, 0);
  }
};

// ---- fixed steps ----
Trajectory solve_fixed(const Dynamics& f, const State& y0, const Tensor& t, size_t read, const OdeOptions& o,
                       const std::vector<double>* host_t, OdeStats& st) {
  const Tableau& tb = tableau(o.method);
  Trajectory out;
  out.row(y0);
  State y = y0;
  for (int64_t i = 1; i < t.size(0); ++i) {
    int64_t m = o.steps_per_interval;
    if (o.step_size > 0) {
      const double span = std::fabs((*host_t)[size_t(i)] - (*host_t)[size_t(i - 1)]);
      const double steps = std::ceil(span / o.step_size * (1 - 1e-12));
      TG_CHECK(steps <= 1e12, "odeint: step_size ", o.step_size, " cuts [", (*host_t)[size_t(i - 1)], ", ",
               (*host_t)[size_t(i)], "] into ", steps, " steps (more than 1e12): use a larger step_size");
      m = std::max<int64_t>(1, int64_t(steps));
    }
    const Tensor t0 = at(t, i - 1), h = (at(t, i) - t0) / double(m);
    // The stage times of the interval's steps, t0 + (s + c) h, one vector
    // per distinct c for a chunk of up to 1024 steps (made on the device
    // without host data, so that a capture can hold it), instead of two tiny
    // kernels per stage.
    constexpr int64_t kChunk = 1024;
    std::vector<std::pair<double, Tensor>> grid;
    Tensor chunk_idx;  // s0, s0 + 1, ..., for the chunk of steps from s0
    int64_t s0 = 0;
    auto stage_time = [&](double c, int64_t s) -> Tensor {
      if (s - s0 >= kChunk || !chunk_idx.defined()) {
        if (chunk_idx.defined()) s0 += kChunk;
        grid.clear();
        const int64_t len = std::min(kChunk, m - s0);
        chunk_idx =
            tg::cumsum(tg::ones({len}, TensorOptions().dtype(t.dtype()).device(t.device())), 0) + double(s0 - 1);
      }
      for (auto& g : grid)
        if (g.first == c) return at(g.second, s - s0);
      grid.emplace_back(c, (chunk_idx + c) * h + t0);
      return at(grid.back().second, s - s0);
    };
    for (int64_t s = 0; s < m; ++s) {
      auto times = [&](size_t j) { return s == 0 && tb.c[j] == 0 ? t0 : stage_time(tb.c[j], s); };
      // The quadratures of the stages the solution weighs.
      auto quad = [&](size_t j) { return tb.b[j] != 0; };
      const Step step{h};
      y = weighted(y, stages(f, tb, times, step, y, read, quad, nullptr), step, tb.b);
      st.accepted += 1;
      st.evaluations += int64_t(tb.c.size());
    }
    out.row(y);
  }
  return out;
}

// ---- adaptive steps: Dormand-Prince 5(4), Tsitouras 5(4) ----
// The largest over the first `normed` components of the RMS of
// v / (atol + rtol * max(|a|, |b|)) (as torchdiffeq's norm of a tuple: the
// adjoint's y, dL/dy and each parameter's gradient are measured apart, so
// that many small components do not dilute one's error). Computed in each
// component's dtype (16-bit ones in float32; complex ones by the modulus);
// where that overflows (the squares of finite ratios past float32's range),
// once more in float64, so that only a norm no dtype holds is reported.
double error_norm(const State& v, const State& a, const State& b, size_t normed, double rtol, double atol,
                  bool in_double = false) {
  NoGradGuard ng;
  std::vector<Tensor> sums;  // on the device: one host read for every component
  std::vector<int64_t> counts;
  bool narrow = false;
  for (size_t i = 0; i < normed && i < v.size(); ++i) {
    // (Undefined: every weight underflowed, a step of a few denormals: no error.)
    if (!v[i].defined() || v[i].numel() == 0) continue;
    // Half-precision states: the norm in float32 (atol and rtol underflow in 16 bits).
    const bool reduced = v[i].dtype() == kFloat16 || v[i].dtype() == kBFloat16;
    narrow = narrow || (v[i].dtype() != kFloat64 && v[i].dtype() != kComplex128);
    auto wide = [&](const Tensor& x) { return in_double ? x.to(kFloat64) : reduced ? x.to(kFloat32) : x; };
    Tensor scale = tg::maximum(wide(tg::abs(a[i])), wide(tg::abs(b[i]))) * rtol + atol;
    Tensor r = wide(is_complex(v[i].dtype()) ? tg::abs(v[i]) : v[i]) / scale;
    sums.push_back(tg::sum(r * r));  // item() widens it on the host
    counts.push_back(v[i].numel());
  }
  double norm = 0;
  if (sums.size() == 1) {
    norm = std::sqrt(sums[0].item<double>() / double(counts[0]));
  } else if (!sums.empty()) {
    std::vector<Tensor> wide;
    for (const Tensor& x : sums)
      wide.push_back(x.to(kFloat64));
    const Tensor host = tg::stack(wide, 0).to(Device(kCPU)).contiguous();
    const double* p = host.data_ptr<double>();
    for (size_t k = 0; k < sums.size(); ++k) {
      const double m = std::sqrt(p[k] / double(counts[k]));
      norm = std::isnan(m) || std::isnan(norm) ? NAN : std::max(norm, m);
    }
  }
  return std::isfinite(norm) || in_double || !narrow ? norm : error_norm(v, a, b, normed, rtol, atol, true);
}

double rms(const State& v, const State& scale_of, size_t normed, double rtol, double atol) {
  return error_norm(v, scale_of, scale_of, normed, rtol, atol);
}

// Hairer's starting step (Solving ODEs I, II.4): from the scales of y0, f0
// and a trial Euler step; signed by `dir`.
double first_step(const Dynamics& f, const Tensor& t0, const State& y0, const State& f0, double dir, double span,
                  size_t read, size_t normed, const OdeOptions& o, OdeStats& st) {
  NoGradGuard ng;
  const double d0 = rms(y0, y0, normed, o.rtol, o.atol), d1 = rms(f0, y0, normed, o.rtol, o.atol);
  if (!std::isfinite(d0) || !std::isfinite(d1)) {
    // x - x is 0 where x is finite: the values are finite, so the scale is what overflowed.
    bool finite = true;
    for (const State* v : {&y0, &f0})
      for (size_t i = 0; i < normed && i < v->size(); ++i)
        finite = finite && tg::sum(tg::abs((*v)[i] - (*v)[i])).item<double>() == 0;
    TG_CHECK(!finite,
             "odeint: the error norm overflows at the start of an adaptive solve: y0 and f are finite, but "
             "divided by the tolerance's scale atol + rtol |y| (atol ",
             o.atol, ", rtol ", o.rtol, ") their norm exceeds even float64's range (the state is ", y0[0].dtype(),
             "); raise atol (and rtol) to what the dtype can resolve");
    TG_ERROR(
        "odeint: the state or f at the start of an adaptive solve is not finite (f returned NaN or infinity; in "
        "the adjoint's backward solve, the incoming gradient, f along the way, or a parameter's gradient)");
  }
  // rtol 0 with a 16-bit state: atol alone must not be below what the dtype
  // resolves at y0's scale (d0 = rms(y0) / atol), as rtol must not be.
  const ScalarType dt = y0.empty() ? kFloat32 : y0[0].dtype();
  if (o.rtol == 0 && (dt == kFloat16 || dt == kBFloat16)) {
    const double eps = dt == kFloat16 ? 0x1p-10 : 0x1p-7;
    TG_CHECK(d0 * eps <= 1, "odeint: with rtol 0, atol ", o.atol, " is below ", dt,
             "'s precision at the state's scale (rms ", d0 * o.atol, ", resolved to about ", eps * d0 * o.atol,
             "): its rounding alone exceeds that tolerance; raise atol, use rtol >= ", eps,
             ", or solve in float32 (y0.to(kFloat32))");
  }
  double h0 = (d0 < 1e-5 || d1 < 1e-5) ? 1e-6 : 0.01 * d0 / d1;
  h0 = std::min(h0, span);
  State y1(y0.begin(), y0.begin() + std::ptrdiff_t(std::min(read, y0.size())));
  for (size_t i = 0; i < y1.size(); ++i)
    y1[i] = y0[i] + f0[i] * (dir * h0);
  State f1 = f(t0 + dir * h0, y1, normed > read);
  st.evaluations += 1;
  State diff;
  for (size_t i = 0; i < normed && i < f1.size(); ++i)
    diff.push_back(f1[i] - f0[i]);
  const double d2 = rms(diff, y0, normed, o.rtol, o.atol) / h0;
  const double dm = std::max(d1, d2);
  const double h1 = dm <= 1e-15 ? std::max(1e-6, h0 * 1e-3) : std::pow(0.01 / dm, 1.0 / 5);
  return std::min({100 * h0, h1, span});
}

// Dense output as polynomials: y(theta) = y + h sum_j beta_j(theta) k_j with
// beta_j(theta) = sum_p C[p-1][j] theta^p, p = 1..4 (C row-major [4, 7]).
// Dopri5: Shampine's continuous extension (the form dense_block evaluates,
// with y5 - y = h sum_j b_j k_j) expanded in theta's powers; Tsit5:
// Tsitouras' own 4th-order interpolant (Computers & Mathematics with
// Applications 62, 2011; diffrax's too).
const std::vector<double>& dense_coefficients(Method method, const Tableau& tb) {
  // clang-format off
  static const std::vector<double> tsit5 = {
      1.0, 0, 0, 0, 0, 0, 0,  // theta
      -2.763706197274826, 0.1317, 3.9302962368947516, -12.411077166933676, 37.50931341651104, -27.896526289197286, 1.5,
      2.9132554618219126, -0.2234, -5.941033872131505, 30.33818863028232, -88.1789048947664, 65.09189467479366, -4.0,
      -1.0530884977290216, 0.1017, 2.490627285651253, -16.548102889244902, 47.37952196281928, -34.87065786149661, 2.5};
  // clang-format on
  if (method == Method::Tsit5) return tsit5;
  static const std::vector<double> dopri5 = [&] {
    const double d[7] = {-12715105075.0 / 11282082432.0,  0,
                         87487479700.0 / 32700410799.0,   -10690763975.0 / 1880347072.0,
                         701980252875.0 / 199316789632.0, -1453857185.0 / 822651844.0,
                         69997945.0 / 29380423.0};
    std::vector<double> c(28);
    for (size_t j = 0; j < 7; ++j) {
      const double bj = tb.b[j], first = j == 0 ? 1 : 0, last = j == 6 ? 1 : 0;
      c[j] = first;
      c[7 + j] = 3 * bj - 2 * first - last + d[j];
      c[14 + j] = -2 * bj + first + last - 2 * d[j];
      c[21 + j] = d[j];
    }
    return c;
  }();
  return dopri5;
}

// The weights beta_j(theta) at one theta, on the host.
void dense_weights(Method method, const Tableau& tb, double th, double* beta) {
  const std::vector<double>& c = dense_coefficients(method, tb);
  for (size_t j = 0; j < 7; ++j)
    beta[j] = th * (c[j] + th * (c[7 + j] + th * (c[14 + j] + th * c[21 + j])));
}

// The solution between an accepted step's ends (tn, y, k1) and (tn + h, y5,
// k7) at the relative times theta (a vector of m values in (0, 1), a time
// gradient flowing through it), as one block [m, ...] per component.
// Dopri5: its 4th-order continuous extension (Shampine's coefficients, as in
// Hairer's DOPRI5); Tsit5: its own interpolant (dense_coefficients).
State dense_block(Method method, const Tensor& theta, const Tensor& hv, const State& y, const State& y5,
                  const std::vector<State>& k) {
  const State &k1 = k[0], &k7 = k[6];
  State out;
  for (size_t i = 0; i < y.size(); ++i) {
    IntList shape(size_t(y[i].dim()) + 1, 1);
    shape[0] = theta.size(0);
    const Tensor th = theta.reshape(shape).to(y[i].dtype()), yb = y[i].unsqueeze(0);
    if (method == Method::Dopri5) {
      static const std::vector<double> d = {-12715105075.0 / 11282082432.0,  0,
                                            87487479700.0 / 32700410799.0,   -10690763975.0 / 1880347072.0,
                                            701980252875.0 / 199316789632.0, -1453857185.0 / 822651844.0,
                                            69997945.0 / 29380423.0};
      const Tensor diff = y5[i] - y[i], b = k1[i] * hv - diff, c = diff - k7[i] * hv - b;
      const Tensor ed = stage_sum(k, i, d) * hv;
      const Tensor one_minus = 1.0 - th;
      out.push_back(yb + th * (diff + one_minus * (b + th * (c + one_minus * ed))));
    } else {  // Tsit5's own interpolant: y + h sum_j beta_j(theta) k_j
      const std::vector<double>& c = dense_coefficients(method, tableau(method));
      Tensor acc;
      for (size_t j = 0; j < 7; ++j) {
        const Tensor beta = th * (th * (th * (th * c[21 + j] + c[14 + j]) + c[7 + j]) + c[j]);
        const Tensor term = k[j][i].unsqueeze(0) * beta;
        acc = acc.defined() ? acc + term : term;
      }
      out.push_back(yb + acc * hv);
    }
  }
  return out;
}

// ---- adaptive steps where nothing is recorded: the stages as rows ----
// With grad mode off and no forward-mode or Taylor level (the forward
// solve under NoGradGuard, the adjoint's backward solves), each read
// component's stage derivatives are copied into the rows of one buffer K
// [7, numel], and every weighted sum is one product with K: a stage input
// is y + (h a_s) K[:s] (y as the product's bias: one launch on CUDA), the
// error estimate (h e) K, an output block of dense output y + (h B(theta))
// K, its weights polynomials in theta on the host. The weights of a step
// are uploaded at once. Where a gradient is recorded the sums stay
// elementwise (weighted_one), whose backward is elementwise too.
bool stage_rows_apply(const State& y, size_t read, int64_t n_times) {
  if (autograd::is_grad_enabled() || autograd::forward_ad::is_active() ||
      !detail::switched_on<detail::OffSwitch::kOdeStageRows>())
    return false;
  if (read < y.size() && n_times > 2) return false;  // dense output of quadratures: the elementwise form
  for (size_t i = 0; i < read && i < y.size(); ++i)
    if (!y[i].defined() || y[i].dtype() != y[0].dtype() || y[i].device() != y[0].device() || y[i].numel() == 0 ||
        (y[i].dtype() != kFloat32 && y[i].dtype() != kFloat64) || y[i].is_sparse())
      return false;
  return true;
}

// Rows for the quadratures too (the adjoint's parameter gradients, read by
// no stage): the 5th-order solution's sum over them is then one product
// with the rows Q of the stages the solution weighs, instead of an add per
// weight and component. Each quadrature dense and of the read components'
// dtype and device.
bool quadrature_rows_apply(const State& y, size_t read) {
  if (read == 0 || read >= y.size()) return false;
  for (size_t i = read; i < y.size(); ++i)
    if (!y[i].defined() || y[i].dtype() != y[0].dtype() || y[i].device() != y[0].device() || y[i].numel() == 0 ||
        y[i].is_sparse())
      return false;
  return true;
}

// The solution at every time of t by adaptive steps, dense output between
// accepted steps. `normed`: how many leading components the error norm
// covers (the adjoint's: all, or without the parameters' gradients under
// OdeOptions::adjoint_seminorm); `read`: how many f reads (the rest are quadratures). `carry`, when given: a first step
// to start from (> 0) instead of choosing one, and on return the step the controller proposes next (the adjoint's
// backward solves, one per interval, continue with it).
Trajectory solve_adaptive(const Dynamics& f, const State& y0, const Tensor& t, const std::vector<double>& host_t,
                          size_t read, size_t normed, const OdeOptions& o, OdeStats& st, double* carry) {
  const Tableau& tb = tableau(o.method);
  const double* ew = o.method == Method::Tsit5 ? kTsit5Error : kDopriError;
  const int64_t n = t.size(0);
  Trajectory out;
  out.row(y0);
  if (n == 1) return out;
  const double t0 = host_t[0], tend = host_t[size_t(n - 1)];
  const double dir = tend > t0 ? 1.0 : -1.0, span = std::fabs(tend - t0);
  const Tensor tt0 = at(t, 0);
  const bool rows = stage_rows_apply(y0, read, n);
  // The stages' c as a vector: a step's stage times are tn + c h, two small
  // kernels per step (rows: they come with the step's weights).
  const Tensor cvec =
      rows ? Tensor() : tg::tensor(tb.c, {int64_t(tb.c.size())}, TensorOptions().dtype(t.dtype()).device(t.device()));
  State y = y0;
  State k1 = f(tt0, y, true);
  st.evaluations += 1;
  // Outputs inside the span take dense output, which weighs every stage.
  const bool every_quad = n > 2;
  // The quadratures in the error norm (the adjoint's full norm): every stage
  // evaluates them.
  const bool quads_normed = normed > read;
  const auto wopts = TensorOptions().dtype(y[0].dtype()).device(y[0].device());
  // Recorded solves take dense output as one product with the stacked stages
  // too: y + (h B(theta)) K with B(theta) = [theta^p] C, the interpolant's
  // coefficients C [4, 7] in theta's powers (dense_coefficients), all
  // differentiable, so a time gradient reaches theta and h (its backward: a
  // few products and slices, not ~20 elementwise ops per block). Not in
  // forward mode (the elementwise form's tangent rules).
  bool stacked_dense = !rows && read == y0.size() && !autograd::forward_ad::is_active() &&
                       detail::switched_on<detail::OffSwitch::kOdeStageRows>();
  for (const Tensor& c : y0)
    stacked_dense = stacked_dense && c.defined() && !c.is_sparse() && c.numel() > 0 && c.dtype() == y0[0].dtype() &&
                    (c.dtype() == kFloat32 || c.dtype() == kFloat64);
  double h = carry && *carry > 0 ? std::min(*carry, span)
             : o.first_step > 0  ? std::min(o.first_step, span)
                                 : first_step(f, tt0, y, k1, dir, span, read, normed, o, st);
  double tn = t0;  // host copy of the current time
  // Rows: the read components as one flat vector (each a slice of it), so
  // that each sum is one product for all of them; `offs`: where each starts.
  Tensor yflat, dense_c, powers;  // powers, dense_c: stacked_dense's theta^p and C
  std::vector<int64_t> offs(1, 0);
  for (size_t i = 0; rows && i < read; ++i)
    offs.push_back(offs.back() + y[i].numel());
  // Rows of the quadratures (quadrature_rows_apply): Q [stages the solution
  // weighs, qtotal], their flat state yq; `qrow[s]`: stage s's row, or -1.
  const bool qrows = rows && quadrature_rows_apply(y0, read);
  std::vector<int64_t> qoffs(1, 0), qrow(tb.c.size(), -1);
  std::vector<size_t> qstages;
  Tensor yqflat;
  for (size_t i = read; qrows && i < y.size(); ++i)
    qoffs.push_back(qoffs.back() + y[i].numel());
  for (size_t j = 0; qrows && j < tb.b.size(); ++j)
    if (tb.b[j] != 0 || normed > read) {  // (normed: the error estimate weighs them all)
      qrow[j] = int64_t(qstages.size());
      qstages.push_back(j);
    }
  auto flat = [](const Tensor& x) { return x.reshape({-1}); };
  auto split = [&](const Tensor& v) {  // [total] -> the read components
    State parts;
    for (size_t i = 0; i < read; ++i)
      parts.push_back(v.narrow(0, offs[i], offs[i + 1] - offs[i]).view(y[i].sizes()));
    return parts;
  };
  int64_t next = 1;
  while (next < n) {
    TG_CHECK(st.accepted + st.rejected < o.max_steps, "odeint: the adaptive solver took ", o.max_steps,
             " steps (max_steps) and reached t = ", tn, " of ", tend,
             ": raise max_steps, loosen rtol/atol, or check f for stiffness");
    const double remaining = std::fabs(tend - tn);
    const double hs = std::min(h, remaining);
    TG_CHECK(hs > 0 && tn + dir * hs != tn, "odeint: the adaptive step size underflowed (", hs, ") at t = ", tn,
             ": f may be stiff or non-finite there");
    // The last step ends at t's own last entry, so that a gradient reaches
    // it (and t[0], through ttn); the others are the controller's constants.
    // (Rows: nothing is recorded, the stage times come with the weights.)
    Tensor ttn, hv, stage_t;
    if (!rows) {
      ttn = tt0 + (tn - t0);
      hv = hs == remaining ? at(t, n - 1) - ttn
                           : tg::full({}, dir * hs, TensorOptions().dtype(t.dtype()).device(t.device()));
      stage_t = ttn + cvec * hv;
    }
    // The quadratures the 5th-order solution weighs, and the last stage's
    // when it becomes the next step's first (FSAL).
    const bool last_step = hs == remaining;
    auto quad = [&](size_t s) {
      return every_quad || quads_normed || (s + 1 == tb.c.size() ? !last_step : tb.b[s] != 0);
    };
    State y5;  // the last stage's input: the 5th-order solution (FSAL)
    const Step step{hv, dir * hs, true};
    Tensor W;  // rows: the step's weights and stage times
    auto times = [&](size_t s) { return rows ? at(W, int64_t(28 + s)) : s == 0 ? ttn : at(stage_t, int64_t(s)); };
    std::vector<State> k;
    Tensor Ks, y5flat, errflat, yq5flat, errqflat;  // rows: the stages [7, total], y5, the error estimate; the
                                                    // quadratures' y5 and error estimate
    State err;                                      // h * sum_j e_j k_j: the 5th-order minus the 4th-order solution
    if (rows) {
      // The step's weights: stage s's row h a_s (s entries) at s(s-1)/2,
      // then the error's h e (7), then the stage times tn + c_s h (7; the
      // last step's last is t's last entry).
      std::vector<double> w;
      for (size_t r = 1; r < 7; ++r)
        for (size_t j = 0; j < r; ++j)
          w.push_back(dir * hs * tb.a[r][j]);
      for (size_t j = 0; j < 7; ++j)
        w.push_back(dir * hs * ew[j]);
      for (size_t j = 0; j < 7; ++j)
        w.push_back(tb.c[j] == 1 && last_step ? tend : tn + tb.c[j] * dir * hs);
      for (size_t j : qstages)  // at 35: the quadratures' h b_j
        w.push_back(dir * hs * tb.b[j]);
      for (size_t j = 0; quads_normed && j < qstages.size(); ++j)  // then their h e_j
        w.push_back(dir * hs * ew[qstages[j]]);
      W = tg::tensor(w, {int64_t(w.size())}, wopts);
      if (qrows && !yqflat.defined()) {
        std::vector<Tensor> parts;
        for (size_t i = read; i < y.size(); ++i)
          parts.push_back(flat(y[i]));
        yqflat = parts.size() == 1 ? parts[0] : tg::cat(parts, 0);
      }
      if (!yflat.defined()) {
        State parts(y.begin(), y.begin() + std::ptrdiff_t(read));
        for (Tensor& c : parts)
          c = flat(c);
        yflat = read == 1 ? parts[0] : tg::cat(parts, 0);
      }
      Ks = tg::empty({7, offs.back()}, wopts);
      // (zeros: a quadrature f leaves undefined adds nothing.)
      const Tensor Q = qrows ? tg::zeros({int64_t(qstages.size()), qoffs.back()}, wopts) : Tensor();
      auto put = [&](size_t r, const State& d) {
        std::vector<Tensor> dst, src;
        for (size_t i = 0; i < read; ++i) {
          dst.push_back(Ks.select(0, int64_t(r)).narrow(0, offs[i], offs[i + 1] - offs[i]));
          src.push_back(flat(d[i]));
        }
        for (size_t i = read; qrows && qrow[r] >= 0 && i < d.size(); ++i)
          if (d[i].defined()) {
            dst.push_back(Q.select(0, qrow[r]).narrow(0, qoffs[i - read], qoffs[i - read + 1] - qoffs[i - read]));
            src.push_back(flat(d[i]));
          }
        kernels::copy_pairs(dst, src, "odeint");
      };
      put(0, k1);
      k.push_back(k1);
      for (size_t r = 1; r < 7; ++r) {
        const Tensor wr = W.narrow(0, int64_t(r * (r - 1) / 2), int64_t(r)).view({1, int64_t(r)});
        const Tensor in = tg::linear(wr, Ks.narrow(0, 0, int64_t(r)).t(), yflat).view({-1});
        k.push_back(f(times(r), split(in), quad(r)));
        put(r, k.back());
        if (r == 6) {
          y5flat = in;
          y5 = split(in);
        }
      }
      errflat = tg::matmul(W.narrow(0, 21, 7).view({1, 7}), Ks).view({-1});
      if (qrows) {  // the quadratures' 5th-order solution: yq + (h b) Q
        const int64_t nq = int64_t(qstages.size());
        yq5flat = tg::linear(W.narrow(0, 35, nq).view({1, nq}), Q.t(), yqflat).view({-1});
        if (quads_normed) errqflat = tg::matmul(W.narrow(0, 35 + nq, nq).view({1, nq}), Q).view({-1});
        for (size_t i = read; i < y.size(); ++i)
          y5.push_back(yq5flat.narrow(0, qoffs[i - read], qoffs[i - read + 1] - qoffs[i - read]).view(y[i].sizes()));
      }
    } else {
      k = stages(f, tb, times, step, y, read, quad, &k1, &y5);
    }
    st.evaluations += int64_t(tb.c.size()) - 1;
    for (size_t i = y5.size(); i < y.size(); ++i)  // the quadratures' 5th-order solution
      y5.push_back(weighted_one(y[i], k, i, step, tb.b));
    if (!rows || (quads_normed && !qrows)) {
      NoGradGuard ng;
      std::vector<double> hew(7);
      for (size_t j = 0; j < 7; ++j)
        hew[j] = ew[j] * dir * hs;
      for (size_t i = rows ? read : 0; i < y.size() && i < normed; ++i)  // (rows: the quadratures only)
        err.push_back(stage_sum(k, i, hew));
    }
    double en = 0;
    if (rows) {
      // The normed components as slices of the flat vectors (the
      // quadratures' of their own: qrows), or elementwise.
      State ev, ya, yb;
      for (size_t i = 0; i < std::min(normed, read); ++i) {
        const int64_t at0 = offs[i], len = offs[i + 1] - offs[i];
        ev.push_back(errflat.narrow(0, at0, len));
        ya.push_back(yflat.narrow(0, at0, len));
        yb.push_back(y5flat.narrow(0, at0, len));
      }
      for (size_t i = read; quads_normed && qrows && i < y.size() && i < normed; ++i) {
        const int64_t at0 = qoffs[i - read], len = qoffs[i - read + 1] - qoffs[i - read];
        ev.push_back(errqflat.narrow(0, at0, len));
        ya.push_back(yqflat.narrow(0, at0, len));
        yb.push_back(yq5flat.narrow(0, at0, len));
      }
      for (size_t i = read; quads_normed && !qrows && i < y.size() && i < normed; ++i) {
        ev.push_back(err[i - read]);
        ya.push_back(y[i]);
        yb.push_back(y5[i]);
      }
      en = error_norm(ev, ya, yb, ev.size(), o.rtol, o.atol);
    } else {
      en = error_norm(err, y, y5, normed, o.rtol, o.atol);
    }
    TG_CHECK(std::isfinite(en), "odeint: the error estimate is not finite at t = ", tn, " (step ", hs,
             "): f returned NaN or infinity there (in the adjoint's backward solve: or the incoming gradient, or a "
             "parameter's gradient, is not finite; OdeOptions::adjoint_seminorm leaves the parameters' out)");
    if (en <= 1) {
      const double tnew = hs == remaining ? tend : tn + dir * hs;
      // The outputs this step reaches: [next, inside) strictly inside it
      // (interpolated together), then at most one at its end.
      int64_t inside = next;
      while (inside < n && dir * (host_t[size_t(inside)] - tnew) < 0)
        ++inside;
      if (inside > next && stacked_dense) {
        const int64_t m = inside - next;
        if (!dense_c.defined()) {
          dense_c = tg::tensor(dense_coefficients(o.method, tb), {4, 7}, wopts);
          powers = tg::tensor(std::vector<double>{1, 2, 3, 4}, {4}, wopts);
        }
        const Tensor theta = (t.narrow(0, next, m) - ttn) / hv;
        const Tensor Bd = tg::matmul(tg::pow(theta.unsqueeze(1), powers), dense_c) * hv;  // [m, 7]
        State block;
        for (size_t i = 0; i < y.size(); ++i) {
          std::vector<Tensor> stacked;
          for (size_t j = 0; j < 7; ++j)
            stacked.push_back(flat(k[j][i]));
          IntList shape = y[i].sizes();
          shape.insert(shape.begin(), m);
          block.push_back(tg::linear(Bd, tg::stack(stacked, 0).t(), flat(y[i])).reshape(shape));
        }
        out.blocks.push_back(std::move(block));
      } else if (inside > next && rows) {  // y + (h B(theta)) K, one product per component
        const int64_t m = inside - next;
        std::vector<double> B(size_t(m) * 7);
        for (int64_t q = 0; q < m; ++q) {
          dense_weights(o.method, tb, (host_t[size_t(next + q)] - tn) / (dir * hs), &B[size_t(q) * 7]);
          for (size_t j = 0; j < 7; ++j)
            B[size_t(q) * 7 + j] *= dir * hs;
        }
        TG_INTERNAL_ASSERT(read == y.size(), "odeint: dense output of quadratures without their rows");
        const Tensor Bd = tg::tensor(B, {m, 7}, wopts);
        const Tensor all = tg::linear(Bd, Ks.t(), yflat);  // [m, total]
        State block;
        for (size_t i = 0; i < y.size(); ++i) {
          IntList shape = y[i].sizes();
          shape.insert(shape.begin(), m);
          block.push_back(all.narrow(1, offs[i], offs[i + 1] - offs[i]).reshape(shape));
        }
        out.blocks.push_back(std::move(block));
      } else if (inside > next) {
        const Tensor theta = (t.narrow(0, next, inside - next) - ttn) / hv;
        out.blocks.push_back(dense_block(o.method, theta, hv, y, y5, k));
      }
      next = inside;
      if (next < n && host_t[size_t(next)] == tnew) {
        out.row(y5);
        ++next;
      }
      y = y5;
      if (rows) yflat = y5flat;
      if (qrows) yqflat = yq5flat;
      k1 = k[6];  // f(tn + h, y5): FSAL
      tn = tnew;
      st.accepted += 1;
    } else {
      st.rejected += 1;
    }
    const double factor = en == 0 ? 10.0 : std::clamp(0.9 * std::pow(en, -1.0 / 5), 0.2, 10.0);
    h = hs * (en <= 1 ? factor : std::min(1.0, factor));
  }
  if (carry) *carry = h;
  return out;
}

Trajectory solve(const Dynamics& f, const State& y0, const Tensor& t, const std::vector<double>& host_t, size_t read,
                 size_t normed, const OdeOptions& o, OdeStats& st, double* carry = nullptr) {
  if (adaptive(o.method)) return solve_adaptive(f, y0, t, host_t, read, normed, o, st, carry);
  return solve_fixed(f, y0, t, read, o, &host_t, st);
}

// ---- checks ----
// f wrapped: its result checked against y's shape, dtype and device.
Tensor call_checked(const OdeFunction& f, const Tensor& t, const Tensor& y) {
  Tensor d = f(t, y);
  TG_CHECK(d.defined(), "odeint: f(t, y) returned an undefined tensor");
  TG_CHECK(d.sizes() == y.sizes() && d.dtype() == y.dtype() && d.device() == y.device(), "odeint: f(t, y) returned ",
           shape_str(d.sizes()), " ", d.dtype(), " on ", d.device(), " for y ", shape_str(y.sizes()), " ", y.dtype(),
           " on ", y.device(), ": dy/dt must match y");
  return d;
}

// t's values on the host (empty under capture: they cannot be read then).
std::vector<double> host_times(const Tensor& t) {
  std::vector<double> v;
  if (cuda::is_current_stream_capturing()) return v;
  NoGradGuard ng;
  Tensor c = t.detach().to(kFloat64).to(Device(kCPU)).contiguous();
  const double* p = c.data_ptr<double>();
  v.assign(p, p + c.numel());
  return v;
}

// The byte offsets in the storage of a strided view's elements, sorted
// (nullopt past 2^22 elements).
std::optional<std::vector<int64_t>> element_offsets(const Tensor& p) {
  if (p.numel() > (int64_t(1) << 22)) return std::nullopt;
  const int64_t es = int64_t(element_size(p.dtype()));
  std::vector<int64_t> out{p.storage_offset() * es};
  for (size_t d = 0; d < p.sizes().size(); ++d) {
    std::vector<int64_t> next;
    next.reserve(out.size() * size_t(p.sizes()[d]));
    for (int64_t base : out)
      for (int64_t k = 0; k < p.sizes()[d]; ++k)
        next.push_back(base + k * p.strides()[d] * es);
    out.swap(next);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Whether two views of one storage whose extents overlap share a byte
// (interleaved views, such as a matrix's columns, do not; views of other
// dtypes, such as a complex view of real memory, are compared in bytes);
// views too large to enumerate count as sharing.
bool share_elements(const Tensor& a, const Tensor& b) {
  const auto ea = element_offsets(a), eb = element_offsets(b);
  if (!ea || !eb) return true;
  const int64_t sa = int64_t(element_size(a.dtype())), sb = int64_t(element_size(b.dtype()));
  size_t i = 0, j = 0;
  while (i < ea->size() && j < eb->size()) {
    if ((*ea)[i] + sa <= (*eb)[j]) {
      ++i;
    } else if ((*eb)[j] + sb <= (*ea)[i]) {
      ++j;
    } else {
      return true;
    }
  }
  return false;
}

// t's values on the host, finite and strictly monotonic: `ht` as given, or,
// with `in`, converted to y0's dtype `in` (the messages then show the given
// values, `given`, too).
void check_times(const std::vector<double>& ht, const std::vector<double>& given,
                 std::optional<ScalarType> in = std::nullopt) {
  for (size_t i = 0; i < ht.size(); ++i) {
    if (!in) TG_CHECK(std::isfinite(ht[i]), "odeint: t[", i, "] = ", ht[i], " is not finite");
    else
      TG_CHECK(std::isfinite(ht[i]), "odeint: t[", i, "] = ", given[i], " is not finite in y0's dtype ", *in,
               " (the solver's times are in y0's dtype): rescale time, or solve in a wider dtype");
  }
  const double dir = ht.size() >= 2 && ht[1] > ht[0] ? 1.0 : -1.0;
  for (size_t i = 1; i < ht.size(); ++i) {
    if (!in)
      TG_CHECK(dir * (ht[i] - ht[i - 1]) > 0,
               "odeint: t must be finite and strictly increasing or strictly decreasing; t[", i - 1, "] = ", ht[i - 1],
               ", t[", i, "] = ", ht[i]);
    else
      TG_CHECK(dir * (ht[i] - ht[i - 1]) > 0, "odeint: t[", i - 1, "] = ", given[i - 1], " and t[", i, "] = ", given[i],
               " are not strictly monotonic in y0's dtype ", *in, " (", ht[i - 1], ", ", ht[i],
               "; the solver's times are in y0's dtype): space them further apart, or solve in a wider dtype");
  }
}

void check_args(const Tensor& y0, const Tensor& t, const std::vector<double>& ht, const OdeOptions& o) {
  TG_CHECK(y0.defined() && t.defined(), "odeint: y0 and t must be defined tensors");
  TG_CHECK(
      is_floating_point(y0.dtype()), "odeint: y0 (", y0.dtype(), ") must be real floating point",
      is_complex(y0.dtype()) ? " (a complex state: solve its real and imaginary parts stacked as one real state)" : "");
  TG_CHECK(is_floating_point(t.dtype()), "odeint: t (", t.dtype(), ") must be real floating point");
  TG_CHECK(t.dim() == 1 && t.size(0) >= 1, "odeint: t must be 1-D with at least one time, got shape ",
           shape_str(t.sizes()));
  TG_CHECK(y0.device() == t.device(), "odeint: y0 is on ", y0.device(), " but t on ", t.device());
  TG_CHECK(!y0.is_sparse(), "odeint: y0 must be dense");
  TG_CHECK(o.steps_per_interval >= 1 && o.steps_per_interval <= int64_t(1e12),
           "odeint: steps_per_interval must be in [1, 1e12] (as step_size's cut), got ", o.steps_per_interval);
  TG_CHECK(o.step_size >= 0 && std::isfinite(o.step_size), "odeint: step_size must be >= 0 and finite, got ",
           o.step_size);
  TG_CHECK(o.max_steps >= 1, "odeint: max_steps must be >= 1, got ", o.max_steps);
  if (adaptive(o.method)) {
    TG_CHECK(!ht.empty() || t.size(0) == 1,
             "odeint: adaptive methods (dopri5, tsit5) read their error estimates on the host, which a CUDA graph "
             "capture cannot do: use a "
             "fixed-step method (rk4) with steps_per_interval there, or solve outside the capture");
    TG_CHECK(o.rtol >= 0 && o.atol >= 0 && o.rtol + o.atol > 0 && std::isfinite(o.rtol) && std::isfinite(o.atol),
             "odeint: rtol and atol must be >= 0, finite and not both 0, got rtol ", o.rtol, ", atol ", o.atol);
    TG_CHECK(o.first_step >= 0, "odeint: first_step must be >= 0, got ", o.first_step);
    // A 16-bit state rounds each step's result by more than such an rtol: the
    // controller would shrink its steps until they underflow.
    if (y0.dtype() == kFloat16 || y0.dtype() == kBFloat16) {
      const double eps = y0.dtype() == kFloat16 ? 0x1p-10 : 0x1p-7;
      TG_CHECK(o.rtol == 0 || o.rtol >= eps, "odeint: rtol ", o.rtol, " is below ", y0.dtype(), "'s precision (", eps,
               "): its rounding alone exceeds that tolerance; use rtol >= ", eps,
               " or solve in float32 (y0.to(kFloat32))");
    }
  }
  if (o.step_size > 0)
    TG_CHECK(!ht.empty(),
             "odeint: step_size reads t on the host, which a CUDA graph capture cannot do: use "
             "steps_per_interval");
  TG_CHECK(int(o.method) >= int(Method::Euler) && int(o.method) <= int(Method::Tsit5), "odeint: unknown method ",
           int(o.method));
  TG_CHECK(o.gradient == Gradient::Backprop || o.gradient == Gradient::Adjoint, "odeint: unknown gradient mode ",
           int(o.gradient));
  check_times(ht, ht);
  // The adjoint sums each listed tensor's gradient: two that need one over
  // the same memory (a repeat, or overlapping views) would count it twice.
  // Backprop ignores the list.
  auto extent = [](const Tensor& p) {  // [lo, hi) in the storage's bytes
    const int64_t es = int64_t(element_size(p.dtype()));
    int64_t lo = p.storage_offset(), hi = lo;
    for (size_t d = 0; d < p.sizes().size(); ++d)
      (p.strides()[d] < 0 ? lo : hi) += p.strides()[d] * (p.sizes()[d] - 1);
    return std::pair<int64_t, int64_t>{lo * es, (hi + 1) * es};
  };
  for (size_t i = 0; i < o.params.size(); ++i) {
    TG_CHECK(o.params[i].defined(), "odeint: params[", i, "] is undefined");
    const Tensor& a = o.params[i];
    if (o.gradient != Gradient::Adjoint || !a.requires_grad() || a.is_sparse() || a.numel() == 0) continue;
    for (size_t j = 0; j < i; ++j) {
      const Tensor& b = o.params[j];
      if (!b.requires_grad() || b.is_sparse() || b.numel() == 0) continue;
      const bool shared = a.is_same(b) || (a.impl()->storage() && a.impl()->storage() == b.impl()->storage() &&
                                           extent(a).first < extent(b).second && extent(b).first < extent(a).second &&
                                           share_elements(a, b));
      TG_CHECK(!shared, "odeint: params[", j, "] and params[", i,
               "] are the same tensor or overlapping views of one storage; the adjoint would count their gradient "
               "twice: list the tensor (or the views' base) once");
    }
  }
}

// ---- the adjoint's augmented evaluations as CUDA graphs ----
// (OdeOptions::graphed_adjoint.) A backward solve evaluates f and its
// vector-Jacobian product with the same shapes at every stage: captured once
// per kind (with the parameters' quadratures and without), an evaluation is
// then the copies into the capture's inputs (t, y, a; one launch), one
// replay and one copy of what it wrote (joined into one buffer inside the
// graph where the components share a dtype), since the solver keeps each
// stage. Where a capture fails (f reads the device from the host, or
// throws), the solve evaluates eagerly from then on, and an error of f's is
// the eager call's.
class GraphedAugmented {
 public:
  using Eval = std::function<State(const Tensor& t, const Tensor& y, const Tensor& a, bool quadratures)>;
  GraphedAugmented(Eval eval, bool on) : eval_(std::move(eval)), failed_(!on) {}

  State operator()(const Tensor& t, const State& s, bool quadratures) {
    if (!failed_ && usable(s)) {
      std::unique_ptr<Captured>& c = captured_[quadratures ? 1 : 0];
      if (!c) c = capture(t, s, quadratures);
      if (c && matches(*c, s)) return replay(*c, t, s);
    }
    return eval_(t, s[0], s[1], quadratures);
  }

 private:
  struct Captured {
    cuda::CUDAGraph graph;
    Tensor t, y, a;            // what the replays read
    std::vector<Tensor> outs;  // what they write: the evaluation's components (undefined: not asked for)
    Tensor joined;             // the defined outs, flat and joined, where they share a dtype
  };

  static bool usable(const State& s) { return s[0].is_cuda() && !cuda::is_current_stream_capturing(); }
  static bool matches(const Captured& c, const State& s) {
    return s[0].sizes() == c.y.sizes() && s[1].sizes() == c.a.sizes() && s[0].dtype() == c.y.dtype() &&
           s[1].dtype() == c.a.dtype() && s[0].device() == c.y.device();
  }

  std::unique_ptr<Captured> capture(const Tensor& t, const State& s, bool quadratures) {
    auto c = std::make_unique<Captured>();
    cuda::DeviceGuard dg(s[0].device().index());
    c->t = t.detach().clone();
    c->y = s[0].clone();
    c->a = s[1].clone();
    try {
      // ThreadLocal: the engine runs a captured backward on this thread, and
      // other threads' CUDA calls must not end a capture the user did not ask for.
      cuda::Graph capturing(c->graph, {0, 0}, std::nullopt, cuda::CaptureMode::ThreadLocal);
      c->outs = eval_(c->t, c->y, c->a, quadratures);
      std::vector<Tensor> flat;
      for (const Tensor& o : c->outs)
        if (o.defined() && !o.is_sparse() && o.dtype() == c->y.dtype() && o.device() == c->y.device())
          flat.push_back(o.reshape({-1}));
      if (flat.size() ==
          size_t(std::count_if(c->outs.begin(), c->outs.end(), [](const Tensor& o) { return o.defined(); })))
        c->joined = tg::cat(flat, 0);
    } catch (const std::exception&) {
      failed_ = true;
      return nullptr;
    }
    return c;
  }

  State replay(Captured& c, const Tensor& t, const State& s) {
    cuda::DeviceGuard dg(s[0].device().index());
    // One launch where the backend has copy_n.
    kernels::copy_pairs({c.t, c.y, c.a}, {t.detach(), s[0], s[1]}, "odeint");
    c.graph.replay();
    State d(c.outs.size());
    const Tensor joined = c.joined.defined() ? c.joined.clone() : Tensor();
    int64_t off = 0;
    for (size_t i = 0; i < d.size(); ++i) {
      const Tensor& o = c.outs[i];
      if (!o.defined()) continue;
      if (joined.defined()) {
        d[i] = joined.narrow(0, off, o.numel()).view(o.sizes());
        off += o.numel();
      } else {
        d[i] = o.clone();
      }
    }
    return d;
  }

  Eval eval_;
  bool failed_;
  std::unique_ptr<Captured> captured_[2];
};

// ---- the adjoint ----
struct Problem {
  OdeFunction f;
  OdeOptions options;
  std::vector<double> host_t;
  OdeStats* stats = nullptr;
};

struct OdeAdjoint : autograd::Function<OdeAdjoint> {
  static constexpr bool once_differentiable = true;
  static constexpr const char* once_differentiable_hint =
      "odeint's adjoint gives first derivatives only: for second derivatives (create_graph through the solver) "
      "use OdeOptions::gradient = Gradient::Backprop";

  static Tensor forward(autograd::AutogradContext* ctx, Tensor y0, Tensor t, autograd::variable_list params,
                        std::shared_ptr<Problem> p) {
    OdeStats st;
    Dynamics dyn = [&](const Tensor& tt, const State& y, bool) { return State{call_checked(p->f, tt, y[0])}; };
    Tensor out = solve(dyn, {y0}, t, p->host_t, 1, 1, p->options, st).joined(0);
    if (p->stats) *p->stats = st;
    // The parameters too: changed in place before backward, they are
    // reported stale (the backward solve would read the new values).
    autograd::variable_list keep{out, t};
    keep.insert(keep.end(), params.begin(), params.end());
    ctx->save_for_backward(keep);
    ctx->saved_data["problem"] = p;
    return out;
  }

  static autograd::variable_list backward(autograd::AutogradContext* ctx, autograd::variable_list grads) {
    auto p = std::any_cast<std::shared_ptr<Problem>>(ctx->saved_data["problem"]);
    autograd::variable_list saved = ctx->get_saved_variables();
    const Tensor ys = saved[0], t = saved[1];
    const Tensor g = grads[0].defined() ? grads[0] : tg::zeros_like(ys);
    // The parameters (their saved values, checked for in-place changes);
    // those that need no gradient (not requiring grad, or neither floating nor complex)
    // are left out of the vector-Jacobian products and get none.
    const std::vector<Tensor> params(saved.begin() + 2, saved.end());
    std::vector<size_t> live;
    for (size_t k = 0; k < params.size(); ++k)
      if (params[k].requires_grad() && is_differentiable(params[k].dtype())) live.push_back(k);
    // The parameters whose gradients the backward's error norm measures
    // first: those of a dtype at least as precise as the state's. A
    // narrower one (float32 beside a float64 state) is left out, as under
    // the seminorm: its rounding, held to the state's tolerance, would take
    // the steps to that rounding's scale.
    auto digits = [](ScalarType d) {
      return d == kFloat64 || d == kComplex128 ? 3 : d == kFloat32 || d == kComplex64 ? 2 : 1;
    };
    const size_t normable =
        size_t(std::stable_partition(live.begin(), live.end(),
                                     [&](size_t k) { return digits(params[k].dtype()) >= digits(ys.dtype()); }) -
               live.begin());
    const int64_t n = t.size(0);
    // The augmented dynamics of [y, a, dL/dparams...]: y' = f, a' = -a df/dy,
    // g_k' = -a df/dparam_k (quadratures: f reads y and a only). One
    // vector-Jacobian product with -a; the parameters' part only where the
    // solver uses it.
    auto eval = [&](const Tensor& tt, const Tensor& ys_, const Tensor& a, bool quadratures) {
      autograd::EnableGradGuard on;
      Tensor y = ys_.detach().requires_grad_();
      Tensor fy = call_checked(p->f, tt.detach(), y);
      std::vector<Tensor> wrt{y};
      if (quadratures)
        for (size_t k : live)
          wrt.push_back(params[k]);
      std::vector<Tensor> v =
          fy.requires_grad() ? autograd::grad({fy}, wrt, {-a}, false, false, true) : std::vector<Tensor>(wrt.size());
      State d{fy.detach()};
      for (size_t i = 0; i < wrt.size(); ++i)
        d.push_back(v[i].defined() ? v[i] : tg::zeros_like(wrt[i]));
      d.resize(2 + live.size());  // the quadratures not asked for stay undefined
      return d;
    };
    GraphedAugmented graphed(eval, p->options.graphed_adjoint);
    // (Without live parameters both kinds are the same evaluation: one graph.)
    Dynamics aug = [&](const Tensor& tt, const State& s, bool quadratures) {
      return graphed(tt, s, quadratures && !live.empty());
    };
    autograd::NoGradGuard ng;
    State s{ys.select(0, n - 1), g.select(0, n - 1)};
    for (size_t k : live)
      s.push_back(tg::zeros_like(params[k]));
    Tensor gt = t.requires_grad() ? tg::zeros_like(t) : Tensor();
    Tensor a_before_y0;  // dL/dy0 without the loss's own term in y(t_0) = y0
    double carry = 0;    // adaptive: each interval starts with the step the last one proposed
    // The backward solve chooses its own first step (first_step is the
    // forward solve's: it need not suit the augmented system, nor t's end).
    OdeOptions back = p->options;
    back.first_step = 0;
    // The error norm over y, a and, unless the seminorm is asked for, the
    // parameters' gradients (those as precise as the state).
    const size_t normed = p->options.adjoint_seminorm ? 2 : 2 + normable;
    for (int64_t i = n - 1; i >= 1; --i) {
      if (gt.defined()) {  // dL/dt_i = <dL/dy_i, f(t_i, y_i)>
        Tensor fi = call_checked(p->f, at(t, i).detach(), ys.select(0, i));
        gt.select(0, i).add_(tg::sum(g.select(0, i) * fi).to(gt.dtype()));
      }
      // Backwards over [t_i, t_{i-1}] from the checkpoint y(t_i).
      s[0] = ys.select(0, i);
      const Tensor span = tg::stack({at(t, i), at(t, i - 1)}, 0);
      // One solve per interval, as torchdiffeq's: max_steps bounds each.
      // Its errors say they are the backward's.
      try {
        OdeStats st;
        s = solve(aug, s, span, {p->host_t[size_t(i)], p->host_t[size_t(i - 1)]}, 2, normed, back, st, &carry).last();
      } catch (const Error& e) {
        TG_ERROR(e.what(), " [in the adjoint's backward solve of the augmented system over [", p->host_t[size_t(i)],
                 ", ", p->host_t[size_t(i - 1)], "]]");
      }
      if (i == 1) a_before_y0 = s[1];
      s[1] = s[1] + g.select(0, i - 1);
    }
    autograd::variable_list out{s[1], Tensor()};
    if (gt.defined() && n == 1) out[1] = gt;
    if (gt.defined() && n > 1) {  // dL/dt_0 = -<a(t_0), f(t_0, y_0)>, a without the term of y(t_0) = y0 itself
      Tensor f0 = call_checked(p->f, at(t, 0).detach(), ys.select(0, 0));
      gt.select(0, 0).sub_(tg::sum(a_before_y0 * f0).to(gt.dtype()));
      out[1] = gt;
    }
    for (size_t k = 0; k < params.size(); ++k)
      out.push_back(Tensor());
    for (size_t j = 0; j < live.size(); ++j)
      out[2 + live[j]] = s[2 + j];
    return out;
  }
};

}  // namespace

Tensor odeint(const OdeFunction& f, const Tensor& y0, const Tensor& t, const OdeOptions& options, OdeStats* stats) {
  TG_CHECK(static_cast<bool>(f), "odeint: f is empty");
  TG_CHECK(y0.defined() && t.defined(), "odeint: y0 and t must be defined tensors");
  const std::vector<double> given = host_times(t);
  check_args(y0, t, given, options);
  // The times in y0's dtype (differentiably), so that the state keeps it,
  // checked again there: a time past that dtype's range, or two that round
  // to one value, would give NaN or a zero step.
  const Tensor tt = t.dtype() == y0.dtype() ? t : t.to(y0.dtype());
  const std::vector<double> ht = tt.dtype() == t.dtype() || given.empty() ? given : host_times(tt);
  if (tt.dtype() != t.dtype()) check_times(ht, given, y0.dtype());
  if (options.gradient == Gradient::Adjoint) {
    auto p = std::make_shared<Problem>();
    p->f = f;
    p->options = options;
    p->host_t = ht;
    p->stats = stats;
    TG_CHECK(!ht.empty() || t.size(0) == 1,
             "odeint: the adjoint method reads t on the host, which a CUDA graph capture cannot do: use "
             "Gradient::Backprop there");
    return OdeAdjoint::apply(y0, tt, autograd::variable_list(options.params), p);
  }
  OdeStats st;
  Dynamics dyn = [&](const Tensor& tt, const State& y, bool) { return State{call_checked(f, tt, y[0])}; };
  Tensor out = solve(dyn, {y0}, tt, ht, 1, 1, options, st).joined(0);
  if (stats) *stats = st;
  return out;
}

}  // namespace tg::ode
