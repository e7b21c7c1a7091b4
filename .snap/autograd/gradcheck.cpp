#include <tapegrad/autograd/gradcheck.h>

#include <cmath>
#include <sstream>

#include <tapegrad/autograd/engine.h>
#include <tapegrad/autograd/forward_ad.h>
#include <tapegrad/autograd/grad_mode.h>
#include <tapegrad/tensor/error.h>
#include <tapegrad/tensor/ops.h>
#include <tapegrad/tensor/raw.h>

namespace tg::autograd {

namespace {

IntList unravel(int64_t k, const IntList& sizes) {
  IntList idx(sizes.size(), 0);
  for (int64_t d = int64_t(sizes.size()) - 1; d >= 0; --d) {
    idx[size_t(d)] = k % sizes[size_t(d)];
    k /= sizes[size_t(d)];
  }
  return idx;
}

// Pointer to element k (row-major order) of a float64 tensor with any strides.
double* element(const Tensor& t, int64_t k) {
  IntList idx = unravel(k, t.sizes());
  int64_t off = 0;
  for (size_t d = 0; d < idx.size(); ++d)
    off += idx[d] * t.strides()[d];
  return t.data_ptr<double>() + off;
}

// Outputs flattened to float64 vectors (checked outputs only); a sparse one
// is compared as the dense tensor it stands for.
std::vector<std::vector<double>> flatten_outputs(const variable_list& outs) {
  std::vector<std::vector<double>> r;
  for (const Tensor& o : outs)
    r.push_back(o.defined() && o.is_floating_point() ? raw::to_dense(o.detach()).to_vector<double>()
                                                     : std::vector<double>());
  return r;
}

// Column j of d outs[o] / d inputs[i] by forward mode: the outputs' tangents
// for the tangent e_j on input i (zero on the others).
std::vector<double> forward_column(const TensorsFn& fn, const variable_list& inputs, size_t o, size_t i, int64_t j) {
  forward_ad::dual_level level;
  variable_list in = inputs;
  Tensor e = zeros(inputs[i].sizes(), inputs[i].options());
  *element(e, j) = 1.0;
  in[i] = forward_ad::make_dual(inputs[i], e);
  variable_list outs;
  {
    EnableGradGuard on;
    outs = fn(in);
  }
  Tensor t = forward_ad::unpack_dual(outs[o]).tangent;
  if (!t.defined()) return std::vector<double>(size_t(outs[o].numel()), 0.0);
  TG_CHECK(t.sizes() == outs[o].sizes(), "gradcheck: output ", o, "'s tangent has shape ", shape_str(t.sizes()),
           ", the output ", shape_str(outs[o].sizes()));
  return raw::to_dense(t.detach()).to_vector<double>();
}

// All columns of d outs[o] / d inputs[i] from one forward pass with the nx
// basis tangents as a batch: column j is the output tangent's entry j.
std::vector<std::vector<double>> batched_forward_columns(const TensorsFn& fn, const variable_list& inputs, size_t o,
                                                         size_t i) {
  const Tensor& x = inputs[i];
  const int64_t nx = x.numel();
  forward_ad::dual_level level(nx);
  IntList shape = x.sizes();
  shape.insert(shape.begin(), nx);
  Tensor eye = zeros({nx, nx}, x.options());
  for (int64_t j = 0; j < nx; ++j)
    *element(eye, j * nx + j) = 1.0;
  variable_list in = inputs;
  in[i] = forward_ad::make_dual(x, eye.view(shape));
  variable_list outs;
  {
    EnableGradGuard on;
    outs = fn(in);
  }
  const int64_t ny = outs[o].numel();
  std::vector<std::vector<double>> cols(size_t(nx), std::vector<double>(size_t(ny), 0.0));
  Tensor t = forward_ad::unpack_dual(outs[o]).tangent;
  if (!t.defined()) return cols;
  IntList want = outs[o].sizes();
  want.insert(want.begin(), nx);
  TG_CHECK(t.sizes() == want, "gradcheck: output ", o, "'s batched tangent has shape ", shape_str(t.sizes()),
           ", expected ", shape_str(want));
  std::vector<double> flat = raw::to_dense(t.detach()).contiguous().to_vector<double>();
  for (int64_t j = 0; j < nx; ++j)
    for (int64_t k = 0; k < ny; ++k)
      cols[size_t(j)][size_t(k)] = flat[size_t(j * ny + k)];
  return cols;
}

// Complex inputs and outputs (as PyTorch's gradcheck): the function is
// checked as one of the real parts. A complex input that requires grad
// becomes a Float64 leaf [..., 2] (its parts) entering fn through
// view_as_complex; a complex output leaves through view_as_real. The real
// check of that function covers the complex rules, the gradient convention
// (dL/dRe z + i dL/dIm z, docs/AUTOGRAD.md "Conjugation") included.
struct RealForm {
  TensorsFn fn;
  variable_list inputs;
};
RealForm real_form(const TensorsFn& fn, const variable_list& inputs) {
  std::vector<bool> cx(inputs.size(), false);
  variable_list rin = inputs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    if (!x.defined() || !is_complex(x.dtype()) || !x.requires_grad()) continue;
    TG_CHECK(x.dtype() == kComplex128, "gradcheck: input ", i, " is ", x.dtype(),
             "; gradcheck needs Complex128 (or Float64) inputs (finite differences in lower precision are too "
             "inaccurate)");
    cx[i] = true;
    rin[i] = raw::view_as_real(x.detach()).clone().requires_grad_(true);
  }
  TensorsFn wrapped = [fn, cx](const variable_list& in) {
    variable_list zin = in;
    for (size_t i = 0; i < in.size(); ++i)
      if (cx[i]) zin[i] = view_as_complex(in[i]);
    variable_list out = fn(zin);
    for (Tensor& o : out)
      if (o.defined() && is_complex(o.dtype())) o = view_as_real(o);
    return out;
  };
  return {std::move(wrapped), std::move(rin)};
}

GradcheckResult gradcheck_real(const TensorsFn& fn, const variable_list& inputs, const GradcheckOptions& opt);
GradcheckResult gradgradcheck_real(const TensorsFn& fn, const variable_list& inputs, const GradcheckOptions& opt);

}  // namespace

GradcheckResult gradcheck(const TensorsFn& fn, const variable_list& inputs, const GradcheckOptions& opt) {
  RealForm r = real_form(fn, inputs);
  return gradcheck_real(r.fn, r.inputs, opt);
}
GradcheckResult gradgradcheck(const TensorsFn& fn, const variable_list& inputs, const GradcheckOptions& opt) {
  RealForm r = real_form(fn, inputs);
  return gradgradcheck_real(r.fn, r.inputs, opt);
}

namespace {
GradcheckResult gradcheck_real(const TensorsFn& fn, const variable_list& inputs, const GradcheckOptions& opt) {
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].defined() && inputs[i].requires_grad())
      TG_CHECK(inputs[i].dtype() == kFloat64 && inputs[i].device().is_cpu(), "gradcheck: input ", i, " is ",
               inputs[i].dtype(), " on ", inputs[i].device(),
               "; gradcheck needs Float64 CPU inputs (finite differences in lower "
               "precision are too inaccurate)");
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    if (!x.defined() || !x.requires_grad()) continue;
    for (int64_t d = 0; d < x.dim(); ++d)
      TG_CHECK(x.strides()[size_t(d)] != 0 || x.sizes()[size_t(d)] <= 1, "gradcheck: input ", i, " (shape ",
               shape_str(x.sizes()), ", strides ", shape_str(x.strides()),
               ") has elements sharing memory (an expanded tensor), so they cannot be "
               "perturbed one at a time; pass .contiguous() of it");
  }
  variable_list outs;
  {
    EnableGradGuard on;
    outs = fn(inputs);
  }
  GradcheckResult res;
  double worst_excess = -1;
  for (size_t o = 0; o < outs.size(); ++o) {
    const Tensor& out = outs[o];
    if (!out.defined() || !is_differentiable(out.dtype())) continue;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Tensor& x = inputs[i];
      if (!x.defined() || !x.requires_grad()) continue;
      int64_t nx = x.numel(), ny = out.numel();
      // Numeric: column j of d out / d x by central differences.
      std::vector<double> numeric(size_t(nx * ny));
      for (int64_t j = 0; j < nx; ++j) {
        double* p = element(x, j);
        double orig = *p;
        *p = orig + opt.eps;
        auto plus = flatten_outputs(fn(inputs));
        *p = orig - opt.eps;
        auto minus = flatten_outputs(fn(inputs));
        *p = orig;
        for (int64_t k = 0; k < ny; ++k)
          numeric[size_t(k * nx + j)] = (plus[o][size_t(k)] - minus[o][size_t(k)]) / (2 * opt.eps);
      }
      auto compare = [&](double a, double n, int64_t k, int64_t j, const char* what) {
        double err = std::fabs(a - n);
        double excess = err - (opt.atol + opt.rtol * std::fabs(n));
        if (std::isnan(a) != std::isnan(n)) excess = INFINITY;
        res.max_error = std::max(res.max_error, err);
        if (excess > 0 && excess > worst_excess) {
          worst_excess = excess;
          std::ostringstream m;
          m << "gradcheck: " << what << " mismatch for output " << o << " element "
            << shape_str(unravel(k, out.sizes())) << " w.r.t. input " << i << " element "
            << shape_str(unravel(j, x.sizes())) << ": analytic " << a << ", numeric " << n << " (|difference| " << err
            << " > atol " << opt.atol << " + rtol " << opt.rtol << " * |numeric|)";
          res.ok = false;
          res.message = m.str();
        }
      };
      // Batched forward mode: every column from one pass.
      if (opt.check_batched_forward_ad && nx > 0) {
        auto cols = batched_forward_columns(fn, inputs, o, i);
        for (int64_t j = 0; j < nx; ++j)
          for (int64_t k = 0; k < ny; ++k)
            compare(cols[size_t(j)][size_t(k)], numeric[size_t(k * nx + j)], k, j, "batched forward-mode Jacobian");
      }
      // Forward mode: column j from one forward pass with tangent e_j.
      if (opt.check_forward_ad)
        for (int64_t j = 0; j < nx; ++j) {
          std::vector<double> col = forward_column(fn, inputs, o, i, j);
          for (int64_t k = 0; k < ny; ++k)
            compare(col[size_t(k)], numeric[size_t(k * nx + j)], k, j, "forward-mode Jacobian");
        }
      // Analytic: row k of the Jacobian from a one-hot grad_output.
      for (int64_t k = 0; k < ny; ++k) {
        std::vector<double> row(size_t(nx), 0.0);
        if (out.requires_grad()) {
          Tensor e = zeros(out.sizes(), out.options());
          *element(e, k) = 1.0;
          EnableGradGuard on;
          Tensor g = grad({out}, {x}, {e}, true, false, true)[0];
          if (g.defined()) row = raw::to_dense(g).to_vector<double>();  // sparse too
        }
        for (int64_t j = 0; j < nx; ++j)
          compare(row[size_t(j)], numeric[size_t(k * nx + j)], k, j, "Jacobian");
      }
    }
  }
  return res;
}

}  // namespace

GradcheckResult gradcheck(const std::function<Tensor(const variable_list&)>& fn, const variable_list& inputs,
                          const GradcheckOptions& opt) {
  return gradcheck(TensorsFn([&](const variable_list& in) { return variable_list{fn(in)}; }), inputs, opt);
}

namespace {
GradcheckResult gradgradcheck_real(const TensorsFn& fn, const variable_list& inputs, const GradcheckOptions& opt) {
  variable_list outs;
  {
    EnableGradGuard on;
    outs = fn(inputs);
  }
  std::vector<size_t> diff_inputs, diff_outputs;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].defined() && inputs[i].requires_grad()) diff_inputs.push_back(i);
  variable_list all = inputs;
  for (size_t o = 0; o < outs.size(); ++o) {
    if (!outs[o].defined() || !outs[o].requires_grad()) continue;
    diff_outputs.push_back(o);
    // Deterministic, irregular cotangents in (-1, 1) that leave the global
    // random stream alone (the seed shifts them).
    int64_t n = outs[o].numel();
    Tensor k = arange(0, n, 1, TensorOptions().dtype(kFloat64));
    double shift = 0.37 + 1.91 * double(o) + 0.61 * double(opt.seed);
    Tensor v = sin(add(mul(k, 2.399963), shift)).view(outs[o].sizes());
    all.push_back(v.requires_grad_(true));
  }
  size_t n_in = inputs.size();
  TensorsFn first_grad = [&](const variable_list& args) {
    variable_list in(args.begin(), args.begin() + long(n_in));
    variable_list y = fn(in);
    variable_list ys, vs, xs;
    for (size_t k = 0; k < diff_outputs.size(); ++k) {
      ys.push_back(y[diff_outputs[k]]);
      vs.push_back(args[n_in + k]);
    }
    for (size_t i : diff_inputs)
      xs.push_back(in[i]);
    if (ys.empty() || xs.empty()) return variable_list{};
    variable_list g = grad(ys, xs, vs, true, true, true);
    for (size_t k = 0; k < g.size(); ++k)
      if (!g[k].defined()) g[k] = zeros_like(xs[k]);
    return g;
  };
  return gradcheck_real(first_grad, all, opt);
}
}  // namespace

GradcheckResult gradgradcheck(const std::function<Tensor(const variable_list&)>& fn, const variable_list& inputs,
                              const GradcheckOptions& opt) {
  return gradgradcheck(TensorsFn([&](const variable_list& in) { return variable_list{fn(in)}; }), inputs, opt);
}

}  // namespace tg::autograd
