// L-BFGS (PyTorch's torch.optim.LBFGS): two-loop recursion over the history,
// with the strong-Wolfe line search when asked.
#include <tapegrad/optim/optimizer.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <string>

#include <tapegrad/autograd/grad_mode.h>
#include <tapegrad/tensor/error.h>
#include <tapegrad/tensor/ops.h>

namespace tg::optim {

namespace {

// The parameters as one flat vector: gather the gradients, move along a
// direction, save and restore the values.
// A complex parameter enters as its parts (view_as_real), as PyTorch's.
Tensor parts_of(const Tensor& t) { return is_complex(t.dtype()) ? tg::view_as_real(t) : t; }
struct Flat {
  const std::vector<Tensor>& params;
  std::vector<Tensor> ps;  // the parameters as stepped (their parts)
  explicit Flat(const std::vector<Tensor>& params_in) : params(params_in) {
    for (const Tensor& p : params)
      ps.push_back(parts_of(p));
  }
  Tensor grad() const {
    std::vector<Tensor> parts;
    for (size_t i = 0; i < ps.size(); ++i) {
      const Tensor& g = params[i].grad();
      parts.push_back(g.defined() ? parts_of(g).reshape({-1}) : tg::zeros({ps[i].numel()}, ps[i].options()));
    }
    return tg::cat(parts, 0);
  }
  Tensor values() const {
    std::vector<Tensor> parts;
    for (const Tensor& p : ps)
      parts.push_back(p.detach().reshape({-1}));
    return tg::cat(parts, 0);
  }
  void add(double t, const Tensor& d) const {
    int64_t at = 0;
    for (const Tensor& p : ps) {
      p.add_(d.narrow(0, at, p.numel()).view(p.sizes()), t);
      at += p.numel();
    }
  }
  void set(const Tensor& x) const {
    int64_t at = 0;
    for (const Tensor& p : ps) {
      p.copy_(x.narrow(0, at, p.numel()).view(p.sizes()));
      at += p.numel();
    }
  }
};

double vdot(const Tensor& a, const Tensor& b) { return (a * b).sum().item<double>(); }
double max_abs(const Tensor& a) { return a.numel() ? tg::amax(tg::abs(a)).item<double>() : 0.0; }

// The minimizer of the cubic through (x1, f1, g1) and (x2, f2, g2), kept in
// [lo, hi]; the midpoint when the cubic has no minimum.
double cubic_min(double x1, double f1, double g1, double x2, double f2, double g2, double lo, double hi) {
  const double d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2);
  const double disc = d1 * d1 - g1 * g2;
  if (disc < 0) return (lo + hi) / 2;
  const double d2 = std::sqrt(disc);
  const double m = x1 <= x2 ? x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
                            : x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2));
  return std::min(std::max(m, lo), hi);
}

struct Trial {
  double t, f, gtd;
  Tensor g;
};

// A step length along d satisfying the strong Wolfe conditions (sufficient
// decrease c1, curvature c2): bracketing by cubic extrapolation, then
// zooming by cubic interpolation (Nocedal and Wright, algorithms 3.5 and
// 3.6). eval(t) returns the loss and flat gradient at x + t d.
Trial strong_wolfe(const std::function<std::pair<double, Tensor>(double)>& eval, double t, const Tensor& d, double f,
                   const Tensor& g, double gtd, double tolerance_change, int64_t* evals) {
  const double c1 = 1e-4, c2 = 0.9;
  const int max_ls = 25;
  const double d_norm = max_abs(d);
  auto at = [&](double s) {
    auto [fs, gs] = eval(s);
    ++*evals;
    return Trial{s, fs, vdot(gs, d), gs};
  };
  Trial prev{0, f, gtd, g}, cur = at(t);
  std::vector<Trial> br;  // the bracket: one point (done) or two
  bool done = false;
  int ls = 0;
  while (ls < max_ls) {
    if (cur.f > f + c1 * cur.t * gtd || (ls > 1 && cur.f >= prev.f)) {
      br = {prev, cur};
      break;
    }
    if (std::abs(cur.gtd) <= -c2 * gtd) {
      br = {cur};
      done = true;
      break;
    }
    if (cur.gtd >= 0) {
      br = {prev, cur};
      break;
    }
    const double next =
        cubic_min(prev.t, prev.f, prev.gtd, cur.t, cur.f, cur.gtd, cur.t + 0.01 * (cur.t - prev.t), cur.t * 10);
    prev = cur;
    cur = at(next);
    ++ls;
  }
  if (ls == max_ls) br = {Trial{0, f, gtd, g}, cur};
  if (br.size() == 1) return br[0];
  size_t lo = br[0].f <= br[1].f ? 0 : 1, hi = 1 - lo;
  bool insufficient = false;
  while (!done && ls < max_ls) {
    if (std::abs(br[1].t - br[0].t) * d_norm < tolerance_change) break;
    double s = cubic_min(br[0].t, br[0].f, br[0].gtd, br[1].t, br[1].f, br[1].gtd, std::min(br[0].t, br[1].t),
                         std::max(br[0].t, br[1].t));
    // Keep trials away from the bracket's ends (progress guard).
    const double bmax = std::max(br[0].t, br[1].t), bmin = std::min(br[0].t, br[1].t), eps = 0.1 * (bmax - bmin);
    if (std::min(bmax - s, s - bmin) < eps) {
      if (insufficient || s >= bmax || s <= bmin) {
        s = std::abs(s - bmax) < std::abs(s - bmin) ? bmax - eps : bmin + eps;
        insufficient = false;
      } else {
        insufficient = true;
      }
    } else {
      insufficient = false;
    }
    Trial n = at(s);
    ++ls;
    if (n.f > f + c1 * n.t * gtd || n.f >= br[lo].f) {
      br[hi] = n;
      lo = br[0].f <= br[1].f ? 0 : 1;
      hi = 1 - lo;
    } else {
      if (std::abs(n.gtd) <= -c2 * gtd) done = true;
      else if (n.gtd * (br[hi].t - br[lo].t) >= 0) br[hi] = br[lo];
      br[lo] = n;
    }
  }
  return br[lo];
}

}  // namespace

LBFGS::LBFGS(std::vector<Tensor> params, LBFGSOptions options)
    : Optimizer(std::move(params), options.lr, "LBFGS"), o_(options) {
  for (size_t i = 1; i < params_.size(); ++i)
    // One vector of values: a complex parameter's are its parts (Complex64
    // goes with Float32, as in PyTorch's LBFGS).
    TG_CHECK(
        real_type(params_[i].dtype()) == real_type(params_[0].dtype()) && params_[i].device() == params_[0].device(),
        "LBFGS: every parameter must have one dtype and device (they are one vector; a complex parameter's "
        "values are its real and imaginary parts); parameter ",
        i, " is ", params_[i].dtype(), " on ", params_[i].device(), ", parameter 0 ", params_[0].dtype(), " on ",
        params_[0].device());
  TG_CHECK(o_.max_iter > 0 && o_.history_size > 0, "LBFGS: max_iter and history_size must be positive");
  if (o_.max_eval <= 0) o_.max_eval = o_.max_iter * 5 / 4;
}

void LBFGS::step() {
  TG_ERROR(
      "LBFGS: step() needs a closure that re-evaluates the loss: call step(closure), with a closure "
      "that zeroes the gradients, computes the loss, calls backward and returns the loss");
}

double LBFGS::step(const std::function<Tensor()>& closure) {
  TG_CHECK(bool(closure), "LBFGS: step(closure) got an empty closure");
  const Flat flat{params_};
  auto evaluate = [&]() {
    Tensor loss;
    {
      autograd::EnableGradGuard grad_on;
      loss = closure();
    }
    TG_CHECK(loss.defined() && loss.numel() == 1, "LBFGS: the closure must return the loss (one element)");
    ++evals_;
    autograd::NoGradGuard no_grad;
    return std::make_pair(loss.item<double>(), flat.grad());
  };
  auto [loss, g] = evaluate();
  const double first_loss = loss;
  int64_t evals = 1;
  autograd::NoGradGuard no_grad;
  if (max_abs(g) <= o_.tolerance_grad) return first_loss;
  for (int64_t n = 1; n <= o_.max_iter; ++n) {
    ++iter_;
    if (iter_ == 1) {
      d_ = -g;
      old_y_.clear();
      old_s_.clear();
      ro_.clear();
      h_diag_ = 1;
    } else {
      // The newest curvature pair, kept when it is positive; then the
      // two-loop recursion for d = -H g.
      Tensor y = g - prev_g_, s = d_ * t_;
      const double ys = vdot(y, s);
      if (ys > 1e-10) {
        if (int64_t(old_y_.size()) == o_.history_size) {
          old_y_.erase(old_y_.begin());
          old_s_.erase(old_s_.begin());
          ro_.erase(ro_.begin());
        }
        old_y_.push_back(y);
        old_s_.push_back(s);
        ro_.push_back(1 / ys);
        h_diag_ = ys / vdot(y, y);
      }
      const size_t k = old_y_.size();
      std::vector<double> al(k);
      Tensor q = -g;
      for (size_t i = k; i-- > 0;) {
        al[i] = vdot(old_s_[i], q) * ro_[i];
        q.add_(old_y_[i], -al[i]);
      }
      Tensor r = q * h_diag_;
      for (size_t i = 0; i < k; ++i) {
        const double be = vdot(old_y_[i], r) * ro_[i];
        r.add_(old_s_[i], al[i] - be);
      }
      d_ = r;
    }
    prev_g_ = g.clone();
    prev_loss_ = loss;
    t_ = iter_ == 1 ? std::min(1.0, 1.0 / tg::sum(tg::abs(g)).item<double>()) * lr() : lr();
    const double gtd = vdot(g, d_);
    if (gtd > -o_.tolerance_change) break;  // not a descent direction any more
    int64_t ls_evals = 0;
    bool converged = false;
    if (o_.strong_wolfe) {
      const Tensor x0 = flat.values().clone();
      auto along = [&](double s) {
        flat.add(s, d_);
        auto r = evaluate();
        flat.set(x0);
        return r;
      };
      Trial best = strong_wolfe(along, t_, d_, loss, g, gtd, o_.tolerance_change, &ls_evals);
      t_ = best.t;
      loss = best.f;
      g = best.g;
      flat.add(t_, d_);
      converged = max_abs(g) <= o_.tolerance_grad;
    } else {
      flat.add(t_, d_);
      if (n != o_.max_iter) {
        std::tie(loss, g) = evaluate();
        converged = max_abs(g) <= o_.tolerance_grad;
        ls_evals = 1;
      }
    }
    evals += ls_evals;
    if (n == o_.max_iter || evals >= o_.max_eval || converged) break;
    if (max_abs(d_) * std::abs(t_) <= o_.tolerance_change) break;
    if (std::abs(loss - prev_loss_) < o_.tolerance_change) break;
  }
  ++steps_;
  return first_loss;
}

// The history and the iteration state, as torch.optim.LBFGS's state holds
// them (d, t, old_dirs, old_stps, ro, H_diag, prev_flat_grad, prev_loss,
// n_iter, func_evals): a resumed L-BFGS steps as the uninterrupted one.
void LBFGS::save_extra_state(NamedTensors& out) const {
  const TensorOptions f64 = TensorOptions().dtype(kFloat64);
  auto number = [&](const char* k, double v) { out.emplace_back(std::string("lbfgs.") + k, tg::full({}, v, f64)); };
  number("n_iter", double(iter_));
  number("func_evals", double(evals_));
  number("t", t_);
  number("H_diag", h_diag_);
  number("prev_loss", prev_loss_);
  number("history", double(old_y_.size()));
  if (d_.defined()) out.emplace_back("lbfgs.d", d_);
  if (prev_g_.defined()) out.emplace_back("lbfgs.prev_flat_grad", prev_g_);
  for (size_t i = 0; i < old_y_.size(); ++i) {
    out.emplace_back("lbfgs.old_dirs." + std::to_string(i), old_y_[i]);
    out.emplace_back("lbfgs.old_stps." + std::to_string(i), old_s_[i]);
  }
  if (!ro_.empty()) out.emplace_back("lbfgs.ro", tg::tensor(ro_, {int64_t(ro_.size())}, f64));
}

namespace {
double lbfgs_number(const std::map<std::string, const Tensor*>& state, const std::string& k, double lo, double hi) {
  auto it = state.find("lbfgs." + k);
  TG_CHECK(it != state.end(), "LBFGS: the state has no 'lbfgs.", k, "'; load a complete state_dict() of an LBFGS");
  const Tensor& t = *it->second;
  TG_CHECK(t.defined() && t.numel() == 1 && t.is_floating_point(), "LBFGS: state 'lbfgs.", k,
           "' must be one floating-point number");
  const double v = t.to(Device(kCPU)).to(kFloat64).item<double>();
  TG_CHECK(std::isfinite(v) && v >= lo && v <= hi, "LBFGS: state 'lbfgs.", k, "' is ", v, ", out of range [", lo, ", ",
           hi, "]");
  return v;
}
}  // namespace

size_t LBFGS::check_extra_state(const std::map<std::string, const Tensor*>& state) const {
  int64_t numel = 0;
  for (const Tensor& p : params_)
    numel += is_complex(p.dtype()) ? 2 * p.numel() : p.numel();
  const double big = 9.007199254740992e15;
  lbfgs_number(state, "n_iter", 0, big);
  lbfgs_number(state, "func_evals", 0, big);
  lbfgs_number(state, "t", -INFINITY, INFINITY);
  lbfgs_number(state, "H_diag", -INFINITY, INFINITY);
  lbfgs_number(state, "prev_loss", -INFINITY, INFINITY);
  const int64_t h = int64_t(lbfgs_number(state, "history", 0, double(o_.history_size)));
  size_t taken = 6;
  auto flat = [&](const std::string& k, bool required) {
    auto it = state.find("lbfgs." + k);
    if (it == state.end()) {
      TG_CHECK(!required, "LBFGS: the state has no 'lbfgs.", k, "'; load a complete state_dict() of an LBFGS");
      return;
    }
    const Tensor& t = *it->second;
    TG_CHECK(t.defined() && t.is_floating_point() && t.dim() == 1 && t.size(0) == numel, "LBFGS: state 'lbfgs.", k,
             "' must be a floating-point vector of ", numel, " elements (the parameters'), got ",
             t.defined() ? shape_str(t.sizes()) : std::string("an undefined tensor"));
    ++taken;
  };
  flat("d", false);
  flat("prev_flat_grad", false);
  for (int64_t i = 0; i < h; ++i) {
    flat("old_dirs." + std::to_string(i), true);
    flat("old_stps." + std::to_string(i), true);
  }
  if (h > 0) {
    auto it = state.find("lbfgs.ro");
    TG_CHECK(it != state.end() && it->second->defined() && it->second->dim() == 1 && it->second->size(0) == h,
             "LBFGS: state 'lbfgs.ro' must be a vector of ", h, " numbers (one per pair of the history)");
    ++taken;
  }
  return taken;
}

void LBFGS::load_extra_state(const std::map<std::string, const Tensor*>& state) {
  auto get = [&](const std::string& k) { return state.at("lbfgs." + k)->to(Device(kCPU)).to(kFloat64).item<double>(); };
  // Vectors in the parameters' dtype and device, as step() makes them (copies: the state stays the caller's).
  const TensorOptions like = params_[0].options().dtype(real_type(params_[0].dtype()));
  auto vec = [&](const std::string& k) {
    auto it = state.find("lbfgs." + k);
    return it == state.end() ? Tensor() : it->second->to(like.device()).to(like.dtype()).clone();
  };
  iter_ = int64_t(get("n_iter"));
  evals_ = int64_t(get("func_evals"));
  t_ = get("t");
  h_diag_ = get("H_diag");
  prev_loss_ = get("prev_loss");
  d_ = vec("d");
  prev_g_ = vec("prev_flat_grad");
  const int64_t h = int64_t(get("history"));
  old_y_.clear();
  old_s_.clear();
  ro_.clear();
  for (int64_t i = 0; i < h; ++i) {
    old_y_.push_back(vec("old_dirs." + std::to_string(i)));
    old_s_.push_back(vec("old_stps." + std::to_string(i)));
  }
  if (h > 0) ro_ = state.at("lbfgs.ro")->to(Device(kCPU)).to(kFloat64).to_vector<double>();
}

}  // namespace tg::optim

namespace tg::optim {
LBFGSOptions& LBFGSOptions::line_search_fn(const std::optional<std::string>& fn) {
  TG_CHECK(!fn || *fn == "strong_wolfe", "LBFGSOptions::line_search_fn: expected \"strong_wolfe\" or none, got \"", *fn,
           "\"");
  strong_wolfe = fn.has_value();
  return *this;
}
}  // namespace tg::optim
