// The grid family's tensor layer (<tapegrad/tensor/grid.def>): the
// primitives' raw entries (argument checks, then the family's kernel table,
// tensor/grid_kernels.h, or im2col + GEMM), their public entries, and the
// composites over the public ops.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <type_traits>

#include <tapegrad/tensor/grid.h>

#include "tensor/checked.h"
#include "tensor/composite.h"
#include "tensor/cpu/loops.h"
#include "tensor/env.h"
#include "tensor/grid_kernels.h"
#include "tensor/kernels.h"
#include "tensor/op_table.h"
#include "tensor/op_util.h"

namespace tg {

namespace {

std::string list_str(const IntList& v) { return shape_str(v); }

// A geometry argument as one entry per spatial dim: one value for all, or
// exactly `s` values.
IntList per_dim(const IntList& v, size_t s, const char* op, const char* what) {
  TG_CHECK(v.size() == 1 || v.size() == s, op, ": ", what, " must have 1 or ", s, " entries for ", s, " spatial dim",
           s == 1 ? "" : "s", ", got ", list_str(v));
  return v.size() == s ? v : IntList(std::vector<int64_t>(s, v[0]));
}

void check_floating(const Tensor& t, const char* op, const char* what) {
  TG_CHECK(is_floating_point(t.dtype()), op, ": ", what,
           " must be floating (Float32, Float64, BFloat16, Float16), got ", t.dtype(),
           "; convert it with .to(tg::kFloat32)");
}

// Geometry values are at least lo and below 2^31 (cuDNN's int; sizes made
// from them then stay far inside 64 bits: no overflow to check later).
void check_min(const IntList& v, int64_t lo, const char* op, const char* what) {
  for (int64_t x : v) {
    TG_CHECK(x >= lo, op, ": ", what, " must be >= ", lo, " in every dim, got ", list_str(v));
    TG_CHECK(x < (int64_t(1) << 31), op, ": ", what, " must be below 2^31 in every dim, got ", list_str(v));
  }
}

// The output size of a window op along one dim (floor or ceil mode), as
// PyTorch's pooling_output_shape: in ceil mode the last window must start
// inside the input or its left padding.
int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
int64_t window_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  const int64_t span = in + 2 * p - d * (k - 1) - 1;
  int64_t o = floor_div(span + (ceil_mode ? s - 1 : 0), s) + 1;
  if (ceil_mode && o > 0 && (o - 1) * s >= in + p) --o;
  return std::max<int64_t>(o, 0);
}

// Whether two tensors share storage (a result that would alias its input).
bool shares_storage(const Tensor& a, const Tensor& b) {
  return a.defined() && b.defined() && a.impl()->storage() == b.impl()->storage();
}
// r, copied when it would alias `input` (results never alias their inputs).
Tensor fresh(const Tensor& r, const Tensor& input) { return shares_storage(r, input) ? r.clone() : r; }

struct Geometry {
  size_t S = 0;  // spatial dims
  IntList kernel, stride, padding, dilation, in, out;
  int64_t K = 1, L = 1;  // kernel positions, output positions
};

// The window geometry of x [N, C, in...] for `kernel`, the output sizes by
// the floor formula; throws naming op when an output size is < 1.
Geometry window_geometry(const IntList& xs, const IntList& kernel, const IntList& stride, const IntList& padding,
                         const IntList& dilation, const char* op) {
  Geometry g;
  g.S = xs.size() - 2;
  g.kernel = kernel;
  g.stride = per_dim(stride, g.S, op, "stride");
  g.padding = per_dim(padding, g.S, op, "padding");
  g.dilation = per_dim(dilation, g.S, op, "dilation");
  check_min(g.kernel, 1, op, "kernel size");
  check_min(g.stride, 1, op, "stride");
  check_min(g.padding, 0, op, "padding");
  check_min(g.dilation, 1, op, "dilation");
  for (size_t d = 0; d < g.S; ++d) {
    const int64_t in = xs[d + 2];
    TG_CHECK(in < (int64_t(1) << 62), op, ": spatial size ", in, " is too large (at most 2^62)");
    const int64_t o = window_out(in, g.kernel[d], g.stride[d], g.padding[d], g.dilation[d], false);
    TG_CHECK(o >= 1, op, ": input of spatial size ", shape_str(IntList(std::vector<int64_t>(xs.begin() + 2, xs.end()))),
             " is smaller than the (dilated) kernel ", list_str(g.kernel), " with padding ", list_str(g.padding),
             " and dilation ", list_str(g.dilation),
             ": the output would be empty; pad the input or use a smaller kernel");
    g.in.push_back(in);
    g.out.push_back(o);
    g.K = detail::checked_mul(g.K, g.kernel[d], op, xs);
    g.L = detail::checked_mul(g.L, o, op, xs);
  }
  return g;
}

// The per-dim range [lo, hi) of outputs whose tap at kernel index k falls
// inside the input, and the input index of output lo's tap.
struct TapRange {
  int64_t lo, hi, first;
};
TapRange tap_range(int64_t in, int64_t out, int64_t k, int64_t s, int64_t p, int64_t d) {
  const int64_t off = k * d - p;  // input index of output o's tap: o s + off
  int64_t lo = off >= 0 ? 0 : (-off + s - 1) / s;
  int64_t hi = in - 1 - off < 0 ? 0 : std::min(out, (in - 1 - off) / s + 1);
  lo = std::min(lo, out);
  hi = std::max(hi, lo);
  return {lo, hi, lo * s + off};
}

// For each kernel position (row-major), calls f(x view, cols view): the
// input's taps and the columns' slots of that position, over the outputs
// whose taps fall inside the input. x [N, C, in...] any strides; cols
// [N, C, K, out...] contiguous.
template <class F> void for_each_tap(const Tensor& x, const Tensor& cols, const Geometry& g, F&& f) {
  const size_t S = g.S;
  IntList kidx(std::vector<int64_t>(S, 0));
  for (int64_t k = 0; k < g.K; ++k) {
    IntList sizes = {x.size(0), x.size(1)}, strides = {x.stride(0), x.stride(1)};
    int64_t offset = x.storage_offset();
    bool empty = false;
    IntList lo, cnt;
    for (size_t d = 0; d < S; ++d) {
      const TapRange r = tap_range(g.in[d], g.out[d], kidx[d], g.stride[d], g.padding[d], g.dilation[d]);
      if (r.hi <= r.lo) empty = true;
      lo.push_back(r.lo);
      cnt.push_back(r.hi - r.lo);
      sizes.push_back(r.hi - r.lo);
      strides.push_back(x.stride(int64_t(d) + 2) * g.stride[d]);
      offset += r.first * x.stride(int64_t(d) + 2);
    }
    if (!empty) {
      Tensor xv = raw::as_strided(x, sizes, strides, offset);
      Tensor cv = raw::select(cols, 2, k);
      for (size_t d = 0; d < S; ++d)
        cv = raw::narrow(cv, int64_t(d) + 2, lo[d], cnt[d]);
      f(xv, cv);
    }
    for (size_t d = S; d-- > 0;) {  // next kernel position, row-major
      if (++kidx[d] < g.kernel[d]) break;
      kidx[d] = 0;
    }
  }
}

bool all_zero(const IntList& v) {
  return std::all_of(v.begin(), v.end(), [](int64_t x) { return x == 0; });
}
bool all_one(const IntList& v) {
  return std::all_of(v.begin(), v.end(), [](int64_t x) { return x == 1; });
}

// im2col: x [N, C, in...] -> [N, C, K, out...] (fresh, contiguous).
Tensor im2col(const Tensor& x, const Geometry& g) {
  IntList shape = {x.size(0), x.size(1), g.K};
  for (int64_t o : g.out)
    shape.push_back(o);
  Tensor cols = all_zero(g.padding) ? detail::new_empty(shape, x.dtype(), x.device()) : tg::zeros(shape, x.options());
  if (cols.numel() == 0) return cols;
  for_each_tap(x, cols, g, [](const Tensor& xv, const Tensor& cv) { raw::copy_(cv, xv); });
  return cols;
}

// col2im: cols [N, C, K, out...] -> [N, C, in...] (fresh, contiguous), the
// taps of every kernel position added in turn (no atomics: deterministic).
Tensor col2im(const Tensor& cols, const Geometry& g) {
  IntList shape = {cols.size(0), cols.size(1)};
  for (int64_t i : g.in)
    shape.push_back(i);
  Tensor x = tg::zeros(shape, cols.options());
  if (x.numel() == 0 || cols.numel() == 0) return x;
  Tensor c = raw::contiguous(cols);
  for_each_tap(x, c, g, [](const Tensor& xv, const Tensor& cv) { raw::add_(xv, cv); });
  return x;
}

// ---- argument checks of the convolution primitives ----
struct ConvCheck {
  Geometry g;
  int64_t N = 0, C = 0, O = 0, groups = 1;
};

void check_conv_operands(const Tensor& a, const Tensor& b, const char* op, const char* an, const char* bn) {
  detail::check_defined(a, op, an);
  detail::check_defined(b, op, bn);
  detail::check_same_device(a, b, op);
  check_floating(a, op, an);
  TG_CHECK(a.dtype() == b.dtype(), op, ": ", an, " and ", bn, " must have one dtype, got ", a.dtype(), " and ",
           b.dtype(), "; convert one with .to()");
}

// x [N, C, in...] and weight sizes [O, C / groups, k...].
ConvCheck conv_check(const IntList& xs, const IntList& ws, const IntList& stride, const IntList& padding,
                     const IntList& dilation, int64_t groups, const char* op) {
  TG_CHECK(xs.size() >= 3 && xs.size() <= 5, op, ": input must be [N, C, spatial...] with 1 to 3 spatial dims, got ",
           shape_str(xs));
  TG_CHECK(ws.size() == xs.size(), op, ": weight ", shape_str(ws), " must have the input's rank (", xs.size(),
           "): [out_channels, in_channels / groups, kernel...]; input ", shape_str(xs));
  TG_CHECK(groups >= 1, op, ": groups must be >= 1, got ", groups);
  ConvCheck c;
  c.N = xs[0];
  c.C = xs[1];
  c.O = ws[0];
  c.groups = groups;
  TG_CHECK(c.C % groups == 0 && c.O % groups == 0, op, ": input channels (", c.C, ") and output channels (", c.O,
           ") must be divisible by groups (", groups, ")");
  TG_CHECK(ws[1] * groups == c.C, op, ": weight ", shape_str(ws), " expects ", ws[1] * groups,
           " input channels (weight.size(1) * groups), but input ", shape_str(xs), " has ", c.C);
  IntList kernel(std::vector<int64_t>(ws.begin() + 2, ws.end()));
  c.g = window_geometry(xs, kernel, stride, padding, dilation, op);
  return c;
}

IntList conv_out_sizes(const ConvCheck& c) {
  IntList s = {c.N, c.O};
  for (int64_t o : c.g.out)
    s.push_back(o);
  return s;
}

kernels::ConvGeometry library_geometry(const ConvCheck& c) { return {c.g.stride, c.g.padding, c.g.dilation, c.groups}; }

// The columns of x as [N, groups, C / groups * K, L] (a view of x itself for
// a 1 x 1 kernel with unit stride and no padding).
Tensor grouped_cols(const Tensor& x, const ConvCheck& c) {
  const Geometry& g = c.g;
  const bool direct = g.K == 1 && all_one(g.stride) && all_zero(g.padding);
  Tensor cols = direct ? x : im2col(x, g);
  return raw::reshape(cols, {c.N, c.groups, c.C / c.groups * g.K, g.L});
}

Tensor weight_matrix(const Tensor& w, const ConvCheck& c) {
  return raw::reshape(w, {c.groups, c.O / c.groups, c.C / c.groups * c.g.K});
}

}  // namespace

// ---- the primitives' raw entries ----
namespace raw::grid {

Tensor _convolution(const Tensor& x, const Tensor& w, const IntList& stride, const IntList& padding,
                    const IntList& dilation, int64_t groups) {
  const char* op = "_convolution";
  check_conv_operands(x, w, op, "input", "weight");
  const ConvCheck c = conv_check(x.sizes(), w.sizes(), stride, padding, dilation, groups, op);
  const IntList out_sizes = conv_out_sizes(c);
  detail::checked_numel(out_sizes, op);
  if (c.N == 0 || c.O == 0 || c.C == 0) return tg::zeros(out_sizes, x.options());
  const kernels::GridKernels& kt = kernels::grid_kernels(x.device());
  if (kt.conv_forward) {
    Tensor out = detail::new_empty(out_sizes, x.dtype(), x.device());
    if (kt.conv_forward(out, x, w, library_geometry(c))) return out;
  }
  Tensor y = raw::matmul(weight_matrix(w, c), grouped_cols(x, c));  // [N, g, O / g, L]
  return raw::reshape(y, out_sizes);
}

Tensor _convolution_backward_input(const Tensor& y, const Tensor& w, const IntList& input_size, const IntList& stride,
                                   const IntList& padding, const IntList& dilation, int64_t groups) {
  const char* op = "_convolution_backward_input";
  check_conv_operands(y, w, op, "grad_output", "weight");
  TG_CHECK(y.dim() >= 3 && y.dim() <= 5, op, ": grad_output must be [N, O, spatial...] with 1 to 3 spatial dims, got ",
           shape_str(y.sizes()));
  TG_CHECK(int64_t(input_size.size()) == y.dim() - 2, op, ": input_size ", list_str(input_size), " must give ",
           y.dim() - 2, " spatial sizes for grad_output ", shape_str(y.sizes()));
  check_min(input_size, 0, op, "input_size");
  IntList xs = {y.size(0), w.dim() >= 2 ? w.size(1) * groups : 0};
  for (int64_t s : input_size)
    xs.push_back(s);
  const ConvCheck c = conv_check(xs, w.sizes(), stride, padding, dilation, groups, op);
  TG_CHECK(y.size(1) == c.O, op, ": grad_output ", shape_str(y.sizes()), " has ", y.size(1), " channels, weight ",
           shape_str(w.sizes()), " has ", c.O, " output channels");
  const IntList ys = conv_out_sizes(c);
  TG_CHECK(y.sizes() == ys, op, ": grad_output ", shape_str(y.sizes()), " is not the output shape ", shape_str(ys),
           " of a convolution of an input ", shape_str(xs), " by weight ", shape_str(w.sizes()), " with stride ",
           list_str(c.g.stride), ", padding ", list_str(c.g.padding), ", dilation ", list_str(c.g.dilation));
  detail::checked_numel(xs, op);
  if (c.N == 0 || c.O == 0 || c.C == 0) return tg::zeros(xs, y.options());
  const kernels::GridKernels& kt = kernels::grid_kernels(y.device());
  if (kt.conv_backward_input) {
    Tensor out = detail::new_empty(xs, y.dtype(), y.device());
    if (kt.conv_backward_input(out, y, w, library_geometry(c))) return out;
  }
  const Geometry& g = c.g;
  Tensor y4 = raw::reshape(y, {c.N, c.groups, c.O / c.groups, g.L});
  Tensor cols = raw::matmul(raw::transpose(weight_matrix(w, c), -1, -2), y4);  // [N, g, C / g * K, L]
  if (g.K == 1 && all_one(g.stride) && all_zero(g.padding)) return raw::reshape(cols, xs);
  IntList cs = {c.N, c.C, g.K};
  for (int64_t o : g.out)
    cs.push_back(o);
  return col2im(raw::reshape(cols, cs), g);
}

Tensor _convolution_backward_weight(const Tensor& x, const Tensor& y, const IntList& weight_size, const IntList& stride,
                                    const IntList& padding, const IntList& dilation, int64_t groups) {
  const char* op = "_convolution_backward_weight";
  check_conv_operands(x, y, op, "input", "grad_output");
  const ConvCheck c = conv_check(x.sizes(), weight_size, stride, padding, dilation, groups, op);
  check_min(weight_size, 0, op, "weight_size");
  const IntList ys = conv_out_sizes(c);
  TG_CHECK(y.sizes() == ys, op, ": grad_output ", shape_str(y.sizes()), " is not the output shape ", shape_str(ys),
           " of a convolution of input ", shape_str(x.sizes()), " by a weight ", shape_str(weight_size));
  detail::checked_numel(weight_size, op);
  if (c.N == 0 || c.O == 0 || c.C == 0) return tg::zeros(weight_size, x.options());
  const kernels::GridKernels& kt = kernels::grid_kernels(x.device());
  if (kt.conv_backward_weight) {
    Tensor out = detail::new_empty(weight_size, x.dtype(), x.device());
    if (kt.conv_backward_weight(out, x, y, library_geometry(c))) return out;
  }
  const Geometry& g = c.g;
  const int64_t gr = c.groups, Og = c.O / gr, CgK = c.C / gr * g.K;
  Tensor cols = grouped_cols(x, c);                 // [N, g, CgK, L]
  Tensor y4 = raw::reshape(y, {c.N, gr, Og, g.L});  // [N, g, Og, L]
  Tensor gw;
  if (c.N == 1) {
    gw = raw::matmul(raw::select(y4, 0, 0), raw::transpose(raw::select(cols, 0, 0), -1, -2));
  } else {  // the batch folded into the GEMM's inner dim: [g, Og, N L] x [g, N L, CgK]
    Tensor yf = raw::reshape(raw::permute(y4, {1, 2, 0, 3}), {gr, Og, c.N * g.L});
    Tensor cf = raw::reshape(raw::permute(cols, {1, 2, 0, 3}), {gr, CgK, c.N * g.L});
    gw = raw::matmul(yf, raw::transpose(cf, -1, -2));
  }
  return raw::reshape(gw, weight_size);
}

Tensor _im2col(const Tensor& x, const IntList& kernel_size, const IntList& dilation, const IntList& padding,
               const IntList& stride) {
  const char* op = "_im2col";
  detail::check_defined(x, op);
  TG_CHECK(x.dim() >= 3 && x.dim() <= 5, op, ": input must be [N, C, spatial...] with 1 to 3 spatial dims, got ",
           shape_str(x.sizes()));
  const Geometry g = window_geometry(x.sizes(), per_dim(kernel_size, size_t(x.dim() - 2), op, "kernel_size"), stride,
                                     padding, dilation, op);
  detail::checked_numel({x.size(0), x.size(1), g.K, g.L}, op);
  return raw::reshape(im2col(x, g), {x.size(0), detail::checked_mul(x.size(1), g.K, op, x.sizes()), g.L});
}

Tensor _col2im(const Tensor& cols, const IntList& output_size, const IntList& kernel_size, const IntList& dilation,
               const IntList& padding, const IntList& stride) {
  const char* op = "_col2im";
  detail::check_defined(cols, op);
  TG_CHECK(cols.dim() == 3, op, ": input must be columns [N, C * prod(kernel_size), L], got ", shape_str(cols.sizes()));
  TG_CHECK(output_size.size() >= 1 && output_size.size() <= 3, op, ": output_size must give 1 to 3 spatial sizes, got ",
           list_str(output_size));
  check_min(output_size, 0, op, "output_size");
  const size_t S = output_size.size();
  const IntList k = per_dim(kernel_size, S, op, "kernel_size");
  int64_t K = 1;
  for (int64_t v : k)
    K = detail::checked_mul(K, std::max<int64_t>(v, 1), op, cols.sizes());
  TG_CHECK(cols.size(1) % K == 0, op, ": input ", shape_str(cols.sizes()), " has ", cols.size(1),
           " rows, not a multiple of the kernel's ", K, " positions ", list_str(k));
  IntList xs = {cols.size(0), cols.size(1) / K};
  for (int64_t s : output_size)
    xs.push_back(s);
  const Geometry g = window_geometry(xs, k, stride, padding, dilation, op);
  TG_CHECK(cols.size(2) == g.L, op, ": input ", shape_str(cols.sizes()), " has ", cols.size(2),
           " columns, but output_size ", list_str(output_size), " with kernel ", list_str(k), " has ", g.L,
           " window positions ", list_str(g.out));
  detail::checked_numel(xs, op);
  IntList cs = {xs[0], xs[1], g.K};
  for (int64_t o : g.out)
    cs.push_back(o);
  return col2im(raw::reshape(cols, cs), g);
}

// ---- the group primitives ----
namespace {

// x [N, C, ...] floating with C divisible by groups >= 1: the length of a
// group's run, C / groups times the spatial sizes (overflow-checked).
int64_t group_run(const Tensor& x, int64_t groups, const char* op, const char* what) {
  detail::check_defined(x, op, what);
  TG_CHECK(x.dim() >= 2, op, ": ", what, " must be [N, C, ...], got ", shape_str(x.sizes()));
  check_floating(x, op, what);
  TG_CHECK(groups >= 1 && x.size(1) % groups == 0, op, ": channels (", x.size(1), ") of ", what, " ",
           shape_str(x.sizes()), " must be divisible by groups (", groups, ")");
  int64_t run = x.size(1) / groups;
  for (int64_t d = 2; d < x.dim(); ++d)
    run = detail::checked_mul(run, x.size(d), op, x.sizes());
  return run;
}

// A coefficient of _group_affine: undefined, or [N or 1, K] with K dividing
// t's channels, t's dtype and device.
void check_group_coefficient(const Tensor& v, const Tensor& t, const char* op, const char* what) {
  if (!v.defined()) return;
  TG_CHECK(v.dim() == 2 && (v.size(0) == 1 || v.size(0) == t.size(0)) && v.size(1) >= 1 && t.size(1) % v.size(1) == 0,
           op, ": ", what, " must be [N or 1, K] with K dividing the channels of t ", shape_str(t.sizes()), ", got ",
           shape_str(v.sizes()));
  TG_CHECK(v.dtype() == t.dtype(), op, ": ", what, " has dtype ", v.dtype(), ", t ", t.dtype(),
           "; convert it with .to(t.dtype())");
  detail::check_same_device(t, v, op);
}

// Float16 and BFloat16 operands: the primitive in Float32 (the sums, the
// means and the products rounded once, into the result's dtype).
template <class F> Tensor in_float32(const Tensor& like, F&& f) { return raw::to(f(), like.dtype()); }
Tensor widen(const Tensor& t) { return t.defined() ? raw::to(t, kFloat32) : t; }

}  // namespace

Tensor _group_sum(const Tensor& a, const Tensor& b, int64_t groups) {
  const char* op = "_group_sum";
  const int64_t run = group_run(a, groups, op, "a");
  detail::checked_numel({a.size(0), groups}, op);
  if (b.defined()) {
    TG_CHECK(b.sizes() == a.sizes() && b.dtype() == a.dtype(), op, ": b ", shape_str(b.sizes()), " ", b.dtype(),
             " must have a's shape and dtype, ", shape_str(a.sizes()), " ", a.dtype());
    detail::check_same_device(a, b, op);
  }
  const int64_t N = a.size(0);
  if (a.numel() == 0) return tg::zeros({N, groups}, a.options());
  if (is_reduced_float(a.dtype()))
    return in_float32(a, [&] { return raw::grid::_group_sum(widen(a), widen(b), groups); });
  const kernels::GridKernels& kt = kernels::grid_kernels(a.device());
  if (kt.group_sum) {
    Tensor out = detail::new_empty({N, groups}, a.dtype(), a.device());
    if (kt.group_sum(out, a, b, groups)) return out;
  }
  const Tensor p = b.defined() ? raw::mul(a, b) : a;
  return raw::sum(raw::reshape(p, {N, groups, run}), {2});
}

Tensor _group_center(const Tensor& x, int64_t groups) {
  const char* op = "_group_center";
  const int64_t run = group_run(x, groups, op, "x");
  if (x.numel() == 0) return tg::zeros(x.sizes(), x.options());
  if (is_reduced_float(x.dtype())) return in_float32(x, [&] { return raw::grid::_group_center(widen(x), groups); });
  const kernels::GridKernels& kt = kernels::grid_kernels(x.device());
  if (kt.group_center) {
    Tensor out = detail::new_empty(x.sizes(), x.dtype(), x.device());
    if (kt.group_center(out, x, groups)) return out;
  }
  const Tensor xs = raw::reshape(x, {x.size(0), groups, run});
  return raw::reshape(raw::sub(xs, raw::mean(xs, {2}, true)), x.sizes());
}

Tensor _group_affine(const Tensor& t, const Tensor& scale, const Tensor& bias) {
  const char* op = "_group_affine";
  group_run(t, 1, op, "t");
  check_group_coefficient(scale, t, op, "scale");
  check_group_coefficient(bias, t, op, "bias");
  if (t.numel() == 0 || (!scale.defined() && !bias.defined())) return raw::clone(t);
  if (is_reduced_float(t.dtype()))
    return in_float32(t, [&] { return raw::grid::_group_affine(widen(t), widen(scale), widen(bias)); });
  const kernels::GridKernels& kt = kernels::grid_kernels(t.device());
  if (kt.group_affine) {
    Tensor out = detail::new_empty(t.sizes(), t.dtype(), t.device());
    if (kt.group_affine(out, t, scale, bias)) return out;
  }
  const int64_t N = t.size(0), C = t.size(1), S = t.numel() / (N * C);
  // [N, K, C / K, S] against the coefficient as [N or 1, K, 1, 1].
  auto grouped = [&](const Tensor& v, const Tensor& c) { return raw::reshape(v, {N, c.size(1), C / c.size(1), S}); };
  auto coef = [](const Tensor& c) { return raw::reshape(c, {c.size(0), c.size(1), 1, 1}); };
  Tensor y = t;
  if (scale.defined()) y = raw::mul(grouped(t, scale), coef(scale));
  if (bias.defined()) y = raw::add(grouped(y, bias), coef(bias));
  return raw::reshape(y, t.sizes());
}

}  // namespace raw::grid

namespace detail {
const GridOpTable* autograd_grid_ops() {
  static const GridOpTable* table = tapegrad_autograd_grid_ops ? tapegrad_autograd_grid_ops() : nullptr;
  return table;
}
}  // namespace detail

// The primitives' public entries: the autograd layer's when linked.
#define TG_GRID_IF_P_P(...) __VA_ARGS__
#define TG_GRID_IF_P_C(...)
#define TG_D(...)
#define TG_GRID(ret, name, id, params, args, kind, taylor)                                       \
  TG_GRID_IF_P_##kind(ret name params {                                                          \
    if (const detail::GridOpTable* table_ = detail::autograd_grid_ops()) return table_->id args; \
    return raw::grid::name args;                                                                 \
  })
#include <tapegrad/tensor/grid.def>
#undef TG_GRID
#undef TG_D

namespace kernels {
const GridKernels& grid_kernels(Device d) {
  static const GridKernels cpu{};
  if (d.type() == kCPU) return cpu;
  const GridKernels* t = cuda_grid_kernels();
  return t ? *t : cpu;
}
}  // namespace kernels

// ---- the composites: public ops only, so every mode differentiates them ----
namespace {

std::mutex& cache_mutex() {
  static std::mutex m;
  return m;
}
std::map<std::string, Tensor>& cache_map() {
  static auto* m = new std::map<std::string, Tensor>();  // never destroyed: tensors outlive exit order
  return *m;
}

// Constant tensors built on the host from a geometry (resampling matrices,
// pooling divisors, window index maps: T double or int64_t), kept per (key,
// device, dtype): a call under CUDA graph capture that ran once before finds
// its constants made (a first one uploads from pinned memory, as index
// tensors do). Never written after they are made.
template <class T, class Fill>
Tensor constant(const std::string& key, const IntList& shape, ScalarType dtype, Device device, Fill&& fill) {
  std::ostringstream k;
  k << key << '|' << device << '|' << int(dtype);
  {
    std::lock_guard<std::mutex> lock(cache_mutex());
    auto it = cache_map().find(k.str());
    if (it != cache_map().end()) return it->second;
  }
  const int64_t n = detail::checked_numel(shape, "grid constant");
  constexpr bool integral = std::is_same_v<T, int64_t>;
  Tensor cpu = detail::new_empty(shape, integral ? kInt64 : kFloat64, Device(kCPU));
  fill(static_cast<T*>(cpu.data_ptr()), n);
  Tensor t = device.is_cpu() ? cpu : raw::to(raw::pin_memory(cpu), device, true);
  if (!integral) t = raw::to(t, dtype);
  if (integral && n > 0) {  // index ops on it read no range back from the device
    const T* v = static_cast<const T*>(cpu.data_ptr());
    t.impl()->storage()->set_known_index_range(*std::min_element(v, v + n), *std::max_element(v, v + n),
                                               t.impl()->version_counter().get(), t.version());
  }
  std::lock_guard<std::mutex> lock(cache_mutex());
  if (cache_map().size() > 512) cache_map().clear();
  cache_map().emplace(k.str(), t);
  return t;
}

std::string key_of(const char* what, std::initializer_list<IntList> lists, std::initializer_list<double> values = {}) {
  std::ostringstream k;
  k << what << std::hexfloat;  // every value exact: nearby scales must not share a key
  for (const IntList& l : lists)
    k << shape_str(l);
  for (double v : values)
    k << ',' << v;
  return k.str();
}

// A per-channel vector [C] shaped to broadcast over x [N, C, spatial...].
Tensor channel_view(const Tensor& v, int64_t ndim) {
  IntList s(std::vector<int64_t>(size_t(ndim), 1));
  s[1] = v.size(0);
  return v.reshape(s);
}

void check_channel_vector(const Tensor& v, int64_t C, const char* op, const char* what) {
  if (!v.defined()) return;
  TG_CHECK(v.dim() == 1 && v.size(0) == C, op, ": ", what, " must be [", C, "] (one entry per channel), got ",
           shape_str(v.sizes()));
}

// Unbatched inputs ([C, spatial...]) take a batch of one; `restore` drops it.
struct Batched {
  Tensor x;
  bool added = false;
  Tensor restore(const Tensor& y) const { return added ? y.squeeze(0) : y; }
};
Batched batched(const Tensor& x, int64_t spatial, const char* op) {
  detail::check_defined(x, op);
  TG_CHECK(x.dim() == spatial + 2 || x.dim() == spatial + 1, op, ": input must be [N, C, ", spatial,
           " spatial dims] or unbatched [C, ", spatial, " spatial dims], got ", shape_str(x.sizes()));
  if (x.dim() == spatial + 1) return {x.unsqueeze(0), true};
  return {x, false};
}

Tensor add_bias(const Tensor& y, const Tensor& bias, const char* op) {
  if (!bias.defined()) return y;
  detail::check_same_device(y, bias, op);
  check_channel_vector(bias, y.size(1), op, "bias");
  TG_CHECK(bias.dtype() == y.dtype(), op, ": bias has dtype ", bias.dtype(), " but input and weight have ", y.dtype(),
           "; convert it with .to(", y.dtype(), ")");
  return add(y, channel_view(bias, y.dim()));
}

}  // namespace

Tensor convolution(const Tensor& input, const Tensor& weight, const Tensor& bias, const IntList& stride,
                   const IntList& padding, const IntList& dilation, bool transposed, const IntList& output_padding,
                   int64_t groups) {
  return detail::as_op(transposed ? "conv_transpose" : "convolution", [&]() -> Tensor {
    const char* op = transposed ? "conv_transpose" : "convolution";
    detail::check_defined(input, op, "input");
    detail::check_defined(weight, op, "weight");
    TG_CHECK(input.dim() >= 3 && input.dim() <= 5, op,
             ": input must be [N, C, spatial...] with 1 to 3 spatial dims, got ", shape_str(input.sizes()));
    if (!transposed) return add_bias(_convolution(input, weight, stride, padding, dilation, groups), bias, op);
    // A transposed convolution: the input gradient of the convolution whose
    // output has input's shape; weight [C_in, C_out / groups, k...].
    const size_t S = size_t(input.dim() - 2);
    TG_CHECK(weight.dim() == input.dim(), op, ": weight ", shape_str(weight.sizes()),
             " must be [in_channels, out_channels / groups, kernel...] of the input's rank; input ",
             shape_str(input.sizes()));
    const IntList s = per_dim(stride, S, op, "stride"), p = per_dim(padding, S, op, "padding"),
                  d = per_dim(dilation, S, op, "dilation"), op_ = per_dim(output_padding, S, op, "output_padding");
    check_min(s, 1, op, "stride");
    check_min(d, 1, op, "dilation");
    check_min(op_, 0, op, "output_padding");
    check_min(p, 0, op, "padding");
    IntList out;
    for (size_t i = 0; i < S; ++i) {
      TG_CHECK(op_[i] < s[i] || op_[i] < d[i], op, ": output_padding ", list_str(op_),
               " must be smaller than either stride ", list_str(s), " or dilation ", list_str(d), " in every dim");
      check_min({weight.size(int64_t(i) + 2)}, 1, op, "kernel size");
      const int64_t o =
          detail::checked_add(detail::checked_mul(input.size(int64_t(i) + 2) - 1, s[i], op, input.sizes()),
                              -2 * p[i] + d[i] * (weight.size(int64_t(i) + 2) - 1) + op_[i] + 1, op, input.sizes());
      TG_CHECK(o >= 1, op, ": the output size ", o, " of spatial dim ", i, " is < 1 for input ",
               shape_str(input.sizes()), ", weight ", shape_str(weight.sizes()), ", stride ", list_str(s), ", padding ",
               list_str(p), ", dilation ", list_str(d));
      out.push_back(o);
    }
    // An output_padding of a stride or more (below the dilation) makes an
    // output whose convolution is longer than the input: the extra positions
    // of that convolution's output receive nothing, so the input is their
    // zeros appended.
    IntList extra;
    bool any_extra = false;
    for (size_t i = 0; i < S; ++i) {
      const int64_t back = window_out(out[i], weight.size(int64_t(i) + 2), s[i], p[i], d[i], false);
      extra.push_back(std::max<int64_t>(back - input.size(int64_t(i) + 2), 0));
      any_extra = any_extra || extra.back() > 0;
    }
    Tensor x = input;
    if (any_extra) {
      IntList pads;
      for (size_t i = S; i-- > 0;) {
        pads.push_back(0);
        pads.push_back(extra[i]);
      }
      x = pad(input, pads);
    }
    return add_bias(_convolution_backward_input(x, weight, out, s, p, d, groups), bias, op);
  });
}

#define TG_CONV_N(n)                                                                                                \
  Tensor conv##n##d(const Tensor& input, const Tensor& weight, const Tensor& bias, const IntList& stride,           \
                    const IntList& padding, const IntList& dilation, int64_t groups) {                              \
    return detail::as_op("conv" #n "d", [&] {                                                                       \
      Batched b = batched(input, n, "conv" #n "d");                                                                 \
      return b.restore(convolution(b.x, weight, bias, stride, padding, dilation, false, {0}, groups));              \
    });                                                                                                             \
  }                                                                                                                 \
  Tensor conv_transpose##n##d(const Tensor& input, const Tensor& weight, const Tensor& bias, const IntList& stride, \
                              const IntList& padding, const IntList& output_padding, int64_t groups,                \
                              const IntList& dilation) {                                                            \
    return detail::as_op("conv_transpose" #n "d", [&] {                                                             \
      Batched b = batched(input, n, "conv_transpose" #n "d");                                                       \
      return b.restore(convolution(b.x, weight, bias, stride, padding, dilation, true, output_padding, groups));    \
    });                                                                                                             \
  }
TG_CONV_N(1)
TG_CONV_N(2)
TG_CONV_N(3)
#undef TG_CONV_N

Tensor pad(const Tensor& input, const IntList& p, const std::string& mode, double value) {
  return detail::as_op("pad", [&]() -> Tensor {
    const char* op = "pad";
    detail::check_defined(input, op);
    TG_CHECK(p.size() % 2 == 0 && int64_t(p.size()) / 2 <= input.dim(), op, ": pad ", list_str(p),
             " must hold (before, after) pairs for at most the input's ", input.dim(), " dims (input ",
             shape_str(input.sizes()), ")");
    const int64_t nd = int64_t(p.size()) / 2;
    const bool constant = mode == "constant";
    TG_CHECK(constant || mode == "reflect" || mode == "replicate" || mode == "circular", op, ": unknown mode \"", mode,
             "\"; use \"constant\", \"reflect\", \"replicate\" or \"circular\"");
    if (!constant)
      TG_CHECK(nd <= 3 && nd < input.dim(), op, ": mode \"", mode,
               "\" pads the last 1 to 3 dims of a batched or unbatched input, not ", nd, " of input ",
               shape_str(input.sizes()));
    Tensor x = input;
    for (int64_t i = 0; i < nd; ++i) {
      const int64_t d = input.dim() - 1 - i, lo = p[size_t(2 * i)], hi = p[size_t(2 * i + 1)], n = x.size(d);
      if (lo == 0 && hi == 0) continue;
      if (constant) {
        // Output j of [0, total) reads x[j - lo] where that is inside x, else
        // `value`: a block of values, x's kept run [a, b), a block of values.
        const int64_t total = detail::checked_add(detail::checked_add(n, lo, op, input.sizes()), hi, op, input.sizes());
        TG_CHECK(total >= 0, op, ": pad ", list_str(p), " crops dim ", d, " of input ", shape_str(input.sizes()),
                 " below size 0");
        const int64_t a = lo < 0 ? std::min(-lo, n) : 0, b = hi < 0 ? std::max<int64_t>(n + hi, 0) : n;
        const int64_t left = std::clamp<int64_t>(lo, 0, total), kept = std::clamp<int64_t>(b - a, 0, total - left);
        const int64_t right = total - left - kept;
        std::vector<Tensor> parts;
        auto block = [&](int64_t len) {
          IntList s = x.sizes();
          s[size_t(d)] = len;
          return tg::full(s, value, x.options());
        };
        if (left > 0) parts.push_back(block(left));
        if (kept > 0 || (left == 0 && right == 0)) parts.push_back(x.narrow(d, kept > 0 ? a : 0, kept));
        if (right > 0) parts.push_back(block(right));
        x = parts.size() == 1 ? parts[0] : cat(parts, d);
        continue;
      }
      TG_CHECK(lo >= 0 && hi >= 0, op, ": mode \"", mode, "\" takes pads >= 0, got ", list_str(p));
      std::vector<Tensor> parts;
      if (mode == "reflect") {
        TG_CHECK(lo < n && hi < n, op, ": reflect padding ", list_str(p), " must be smaller than the padded dim ", d,
                 " of input ", shape_str(input.sizes()), " (size ", n, ")");
        if (lo > 0) parts.push_back(flip(x.narrow(d, 1, lo), {d}));
        parts.push_back(x);
        if (hi > 0) parts.push_back(flip(x.narrow(d, n - 1 - hi, hi), {d}));
      } else if (mode == "replicate") {
        TG_CHECK(n > 0, op, ": replicate padding of an empty dim ", d, " of input ", shape_str(input.sizes()));
        auto edge = [&](int64_t at, int64_t len) {
          IntList s = x.sizes();
          s[size_t(d)] = len;
          return x.narrow(d, at, 1).expand(s);
        };
        if (lo > 0) parts.push_back(edge(0, lo));
        parts.push_back(x);
        if (hi > 0) parts.push_back(edge(n - 1, hi));
      } else {
        TG_CHECK(lo <= n && hi <= n, op, ": circular padding ", list_str(p), " must be at most the padded dim ", d,
                 " of input ", shape_str(input.sizes()), " (size ", n, ")");
        if (lo > 0) parts.push_back(x.narrow(d, n - lo, lo));
        parts.push_back(x);
        if (hi > 0) parts.push_back(x.narrow(d, 0, hi));
      }
      x = cat(parts, d);
    }
    return fresh(x.is_same(input) ? input.clone() : x, input);
  });
}

Tensor unfold(const Tensor& input, const IntList& kernel_size, const IntList& dilation, const IntList& padding,
              const IntList& stride) {
  return detail::as_op("unfold", [&]() -> Tensor {
    Batched b = batched(input, 2, "unfold");
    return b.restore(_im2col(b.x, kernel_size, dilation, padding, stride));
  });
}

Tensor fold(const Tensor& input, const IntList& output_size, const IntList& kernel_size, const IntList& dilation,
            const IntList& padding, const IntList& stride) {
  return detail::as_op("fold", [&]() -> Tensor {
    const char* op = "fold";
    detail::check_defined(input, op);
    TG_CHECK(input.dim() == 3 || input.dim() == 2, op, ": input must be [N, C * kh * kw, L] or unbatched, got ",
             shape_str(input.sizes()));
    TG_CHECK(output_size.size() == 2 || output_size.size() == 1, op, ": output_size must give 2 sizes, got ",
             list_str(output_size));
    const bool added = input.dim() == 2;
    Tensor y = _col2im(added ? input.unsqueeze(0) : input, per_dim(output_size, 2, op, "output_size"), kernel_size,
                       dilation, padding, stride);
    return added ? y.squeeze(0) : y;
  });
}

Tensor pixel_shuffle(const Tensor& input, int64_t r) {
  return detail::as_op("pixel_shuffle", [&]() -> Tensor {
    const char* op = "pixel_shuffle";
    detail::check_defined(input, op);
    TG_CHECK(input.dim() >= 3, op, ": input must be [*, C r^2, H, W], got ", shape_str(input.sizes()));
    TG_CHECK(r >= 1 && r <= 3037000499, op,
             ": upscale_factor must be in [1, 3037000499] (its square fits 64 bits), got ", r);
    const int64_t C = input.size(-3), H = input.size(-2), W = input.size(-1);
    TG_CHECK(C % (r * r) == 0, op, ": channels (", C, ") must be divisible by upscale_factor^2 (", r * r, "), input ",
             shape_str(input.sizes()));
    detail::checked_mul(detail::checked_mul(H, r, op, input.sizes()), detail::checked_mul(W, r, op, input.sizes()), op,
                        input.sizes());
    IntList lead(std::vector<int64_t>(input.sizes().begin(), input.sizes().end() - 3));
    const int64_t B = detail::checked_numel(lead, op), c = C / (r * r);
    Tensor t = input.reshape({B, c, r, r, H, W}).permute({0, 1, 4, 2, 5, 3});
    IntList out = lead;
    for (int64_t v : {c, H * r, W * r})
      out.push_back(v);
    return fresh(t.reshape(out), input);
  });
}

Tensor pixel_unshuffle(const Tensor& input, int64_t r) {
  return detail::as_op("pixel_unshuffle", [&]() -> Tensor {
    const char* op = "pixel_unshuffle";
    detail::check_defined(input, op);
    TG_CHECK(input.dim() >= 3, op, ": input must be [*, C, H r, W r], got ", shape_str(input.sizes()));
    TG_CHECK(r >= 1 && r <= 3037000499, op,
             ": downscale_factor must be in [1, 3037000499] (its square fits 64 bits), got ", r);
    const int64_t C = input.size(-3), H = input.size(-2), W = input.size(-1);
    TG_CHECK(H % r == 0 && W % r == 0, op, ": height (", H, ") and width (", W,
             ") must be divisible by downscale_factor (", r, "), input ", shape_str(input.sizes()));
    IntList lead(std::vector<int64_t>(input.sizes().begin(), input.sizes().end() - 3));
    const int64_t B = detail::checked_numel(lead, op);
    Tensor t = input.reshape({B, C, H / r, r, W / r, r}).permute({0, 1, 3, 5, 2, 4});
    IntList out = lead;
    for (int64_t v : {detail::checked_mul(C, r * r, op, input.sizes()), H / r, W / r})
      out.push_back(v);
    return fresh(t.reshape(out), input);
  });
}

// ---- pooling ----
namespace {

struct PoolGeometry {
  IntList k, s, p, d, in, out, extra;  // extra: right padding that ceil mode's last windows need
};

PoolGeometry pool_geometry(const Tensor& x, const IntList& kernel_size, const IntList& stride, const IntList& padding,
                           const IntList& dilation, bool ceil_mode, const char* op) {
  const size_t S = size_t(x.dim() - 2);
  PoolGeometry g;
  g.k = per_dim(kernel_size, S, op, "kernel_size");
  g.s = stride.empty() ? g.k : per_dim(stride, S, op, "stride");
  g.p = per_dim(padding, S, op, "padding");
  g.d = per_dim(dilation, S, op, "dilation");
  check_min(g.k, 1, op, "kernel_size");
  check_min(g.s, 1, op, "stride");
  check_min(g.p, 0, op, "padding");
  check_min(g.d, 1, op, "dilation");
  for (size_t i = 0; i < S; ++i) {
    TG_CHECK(g.p[i] <= ((g.k[i] - 1) * g.d[i] + 1) / 2, op, ": padding ", list_str(g.p),
             " must be at most half of the (dilated) kernel ", list_str(g.k));
    const int64_t in = x.size(int64_t(i) + 2);
    const int64_t o = window_out(in, g.k[i], g.s[i], g.p[i], g.d[i], ceil_mode);
    TG_CHECK(o >= 1, op, ": input ", shape_str(x.sizes()), " is smaller than the kernel ", list_str(g.k),
             " with padding ", list_str(g.p), ": the output would be empty");
    g.in.push_back(in);
    g.out.push_back(o);
    g.extra.push_back(std::max<int64_t>(0, (o - 1) * g.s[i] + g.d[i] * (g.k[i] - 1) + 1 - in - 2 * g.p[i]));
  }
  return g;
}

// x padded by each dim's (p, p + extra) with `value`.
Tensor pool_pad(const Tensor& x, const PoolGeometry& g, double value) {
  IntList pads;
  bool any = false;
  for (size_t i = g.k.size(); i-- > 0;) {
    pads.push_back(g.p[i]);
    pads.push_back(g.p[i] + g.extra[i]);
    any = any || g.p[i] + g.extra[i] > 0;
  }
  return any ? pad(x, pads, "constant", value) : x;
}

// The windows of the padded x as [N, C, K, out...].
Tensor pool_windows(const Tensor& xp, const PoolGeometry& g) {
  Tensor cols = _im2col(xp, g.k, g.d, {0}, g.s);
  int64_t K = 1;
  for (int64_t k : g.k)
    K *= k;
  IntList s = {xp.size(0), xp.size(1), K};
  for (int64_t o : g.out)
    s.push_back(o);
  return cols.view(s);
}

Tensor avg_pool(const Tensor& input, const IntList& kernel_size, const IntList& stride, const IntList& padding,
                bool ceil_mode, bool count_include_pad, std::optional<int64_t> divisor_override, int64_t S,
                const char* op) {
  return detail::as_op(op, [&]() -> Tensor {
    Batched b = batched(input, S, op);
    const Tensor& x = b.x;
    check_floating(x, op, "input");
    if (divisor_override) TG_CHECK(*divisor_override != 0, op, ": divisor_override must be nonzero");
    const PoolGeometry g = pool_geometry(x, kernel_size, stride, padding, {1}, ceil_mode, op);
    const bool tiles =
        all_zero(g.p) && g.s == g.k && std::all_of(g.extra.begin(), g.extra.end(), [](int64_t e) { return e == 0; });
    bool exact = tiles;
    for (size_t i = 0; i < g.k.size(); ++i)
      exact = exact && g.in[i] == g.out[i] * g.k[i];
    if (exact && x.numel() > 0) {  // non-overlapping tiles: a mean over reshaped dims
      IntList s = {x.size(0), x.size(1)};
      for (size_t i = 0; i < g.k.size(); ++i) {
        s.push_back(g.out[i]);
        s.push_back(g.k[i]);
      }
      IntList dims;
      for (size_t i = 0; i < g.k.size(); ++i)
        dims.push_back(3 + 2 * int64_t(i));
      Tensor y = x.reshape(s);
      Tensor r = divisor_override ? div(sum(y, dims), double(*divisor_override)) : mean(y, dims);
      return b.restore(r);
    }
    Tensor sums = sum(pool_windows(pool_pad(x, g, 0.0), g), {2});
    if (divisor_override) return b.restore(div(sums, double(*divisor_override)));
    // PyTorch's divisor: the window clipped to the padded input (or, without
    // count_include_pad, to the input), per output position.
    const Tensor divisor =
        constant<double>(key_of("avg_pool", {g.k, g.s, g.p, g.in, g.out}, {double(count_include_pad)}), g.out,
                         x.dtype(), x.device(), [&](double* v, int64_t n) {
                           const size_t S_ = g.k.size();
                           for (int64_t flat = 0; flat < n; ++flat) {
                             int64_t rem = flat;
                             double count = 1;
                             for (size_t i = S_; i-- > 0;) {
                               const int64_t o = rem % g.out[i];
                               rem /= g.out[i];
                               int64_t start = o * g.s[i] - g.p[i], end = std::min(start + g.k[i], g.in[i] + g.p[i]);
                               const int64_t pool = end - start;
                               start = std::max<int64_t>(start, 0);
                               end = std::min(end, g.in[i]);
                               count *= double(count_include_pad ? pool : end - start);
                             }
                             v[flat] = count;
                           }
                         });
    return b.restore(div(sums, divisor));
  });
}

TensorPair max_pool(const Tensor& input, const IntList& kernel_size, const IntList& stride, const IntList& padding,
                    const IntList& dilation, bool ceil_mode, int64_t S, const char* op) {
  return detail::as_op(op, [&]() -> TensorPair {
    Batched b = batched(input, S, op);
    const Tensor& x = b.x;
    check_floating(x, op, "input");
    const PoolGeometry g = pool_geometry(x, kernel_size, stride, padding, dilation, ceil_mode, op);
    Tensor win = pool_windows(pool_pad(x, g, -std::numeric_limits<double>::infinity()), g);  // [N, C, K, out...]
    // The first maximum of each window (NaN counts as the largest, as
    // PyTorch's), gathered: its gradient goes to that element. argmax's range
    // [0, K) is known by construction and noted, so the gathers (and their
    // gradients) read nothing back from the device: capturable.
    // (argmax itself gathers at an index it computes, which a capture cannot
    // check: the first hit is taken here by elementwise ops and a reduction.)
    const int64_t K = win.size(2);
    IntList pos_shape(std::vector<int64_t>(size_t(win.dim()), 1));
    pos_shape[2] = K;
    const Tensor pos = constant<int64_t>(key_of("positions", {{K}}), {K}, kInt64, x.device(), [&](int64_t* v, int64_t) {
                         for (int64_t i = 0; i < K; ++i)
                           v[i] = i;
                       }).view(pos_shape);
    Tensor wd = win.detach();
    Tensor ext = amax(wd, {2}, true);
    Tensor hit = where(ne(ext, ext), ne(wd, wd), eq(wd, ext));
    Tensor arg = amin(where(hit, pos, Scalar(K - 1)), {2}, true);
    if (arg.numel() > 0)
      arg.impl()->storage()->set_known_index_range(0, K - 1, arg.impl()->version_counter().get(), arg.version());
    Tensor values = gather(win, 2, arg).squeeze(2);
    // Each window position's input index (flattened over the input's spatial
    // dims): a constant map [K, out...] read at the maximum's position.
    IntList map_shape = {K};
    for (int64_t o : g.out)
      map_shape.push_back(o);
    const Tensor where_in = constant<int64_t>(key_of("max_pool", {g.k, g.s, g.p, g.d, g.in, g.out}), map_shape, kInt64,
                                              x.device(), [&](int64_t* v, int64_t n) {
                                                const size_t S_ = g.k.size();
                                                int64_t L = 1;
                                                for (int64_t o : g.out)
                                                  L *= o;
                                                for (int64_t flat = 0; flat < n; ++flat) {
                                                  int64_t kk = flat / L, l = flat % L, idx = 0, scale = 1;
                                                  for (size_t i = S_; i-- > 0;) {
                                                    const int64_t o = l % g.out[i], k = kk % g.k[i];
                                                    l /= g.out[i];
                                                    kk /= g.k[i];
                                                    const int64_t at = o * g.s[i] - g.p[i] + k * g.d[i];
                                                    idx += std::clamp<int64_t>(at, 0, g.in[i] - 1) * scale;
                                                    scale *= g.in[i];
                                                  }
                                                  v[flat] = idx;
                                                }
                                              });
    IntList full = win.sizes();
    Tensor indices = gather(where_in.unsqueeze(0).unsqueeze(0).expand(full), 2, arg).squeeze(2);
    return {b.restore(values), b.restore(indices)};
  });
}

Tensor adaptive_avg_pool(const Tensor& input, const IntList& output_size, int64_t S, const char* op) {
  return detail::as_op(op, [&]() -> Tensor {
    Batched b = batched(input, S, op);
    Tensor x = b.x;
    check_floating(x, op, "input");
    const IntList out = per_dim(output_size, size_t(S), op, "output_size");
    check_min(out, 1, op, "output_size");
    for (int64_t i = 0; i < S; ++i) {
      const int64_t d = i + 2, in = x.size(d), o = out[size_t(i)];
      TG_CHECK(in >= 1, op, ": input ", shape_str(input.sizes()), " has an empty spatial dim");
      if (in == o) continue;
      if (in % o == 0) {  // equal bins: a mean over a split dim
        IntList s = x.sizes();
        s[size_t(d)] = o;
        s.insert(s.begin() + d + 1, in / o);
        x = mean(x.reshape(s), {d + 1});
        continue;
      }
      // Unequal bins: each bin's elements gathered into kmax slots (the slots
      // past a bin's end read an appended zero), summed, divided by the bin's
      // size: a NaN reaches only its bins.
      int64_t kmax = 0;
      for (int64_t j = 0; j < o; ++j)
        kmax = std::max(kmax, ((j + 1) * in + o - 1) / o - (j * in) / o);
      const std::string key = key_of("adaptive", {{in, o}});
      const Tensor idx = constant<int64_t>(key + "idx", {o * kmax}, kInt64, x.device(), [&](int64_t* v, int64_t) {
        for (int64_t j = 0; j < o; ++j) {
          const int64_t start = (j * in) / o, end = ((j + 1) * in + o - 1) / o;
          for (int64_t k = 0; k < kmax; ++k)
            v[j * kmax + k] = start + k < end ? start + k : in;
        }
      });
      IntList zs = x.sizes();
      zs[size_t(d)] = 1;
      Tensor ext = cat({x, tg::zeros(zs, x.options())}, d);
      IntList split = x.sizes();
      split[size_t(d)] = o;
      split.insert(split.begin() + d + 1, kmax);
      IntList ws(std::vector<int64_t>(size_t(x.dim()), 1));
      ws[size_t(d)] = o;
      const Tensor inv = constant<double>(key + "inv", {o}, x.dtype(), x.device(), [&](double* v, int64_t) {
                           for (int64_t j = 0; j < o; ++j)
                             v[j] = 1.0 / double(((j + 1) * in + o - 1) / o - (j * in) / o);
                         }).view(ws);
      x = mul(sum(index_select(ext, d, idx).reshape(split), {d + 1}), inv);
    }
    return b.restore(x.is_same(b.x) ? x.clone() : x);
  });
}

}  // namespace

#define TG_POOL_N(n)                                                                                              \
  TensorPair max_pool##n##d_with_indices(const Tensor& input, const IntList& kernel_size, const IntList& stride,  \
                                         const IntList& padding, const IntList& dilation, bool ceil_mode) {       \
    return max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, n, "max_pool" #n "d");              \
  }                                                                                                               \
  Tensor max_pool##n##d(const Tensor& input, const IntList& kernel_size, const IntList& stride,                   \
                        const IntList& padding, const IntList& dilation, bool ceil_mode) {                        \
    return std::get<0>(max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, n, "max_pool" #n "d")); \
  }                                                                                                               \
  Tensor adaptive_avg_pool##n##d(const Tensor& input, const IntList& output_size) {                               \
    return adaptive_avg_pool(input, output_size, n, "adaptive_avg_pool" #n "d");                                  \
  }
TG_POOL_N(1)
TG_POOL_N(2)
TG_POOL_N(3)
#undef TG_POOL_N

Tensor avg_pool1d(const Tensor& input, const IntList& kernel_size, const IntList& stride, const IntList& padding,
                  bool ceil_mode, bool count_include_pad) {
  return avg_pool(input, kernel_size, stride, padding, ceil_mode, count_include_pad, std::nullopt, 1, "avg_pool1d");
}
Tensor avg_pool2d(const Tensor& input, const IntList& kernel_size, const IntList& stride, const IntList& padding,
                  bool ceil_mode, bool count_include_pad, std::optional<int64_t> divisor_override) {
  return avg_pool(input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, 2, "avg_pool2d");
}
Tensor avg_pool3d(const Tensor& input, const IntList& kernel_size, const IntList& stride, const IntList& padding,
                  bool ceil_mode, bool count_include_pad, std::optional<int64_t> divisor_override) {
  return avg_pool(input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, 3, "avg_pool3d");
}

// ---- the linear resampling primitives ----
namespace {

// PyTorch's linear stencil from `in` points to `out` (grid.def's
// _resample_linear), and its adjoint's runs: the outputs j with i0[j] = i
// are off0[i] .. off0[i + 1] - 1 (i0 and i1 are nondecreasing in j).
struct LinearStencil {
  std::vector<int64_t> i0, i1, off0, off1;
  std::vector<double> w1;
};
LinearStencil linear_stencil(int64_t in, int64_t out, double scale, bool corners) {
  LinearStencil st;
  st.i0.resize(size_t(out));
  st.i1.resize(size_t(out));
  st.w1.resize(size_t(out));
  st.off0.assign(size_t(in) + 1, 0);
  st.off1.assign(size_t(in) + 1, 0);
  for (int64_t j = 0; j < out; ++j) {
    if (in == out) {  // PyTorch copies a dim whose size stays, whatever the scale or align_corners
      st.i0[size_t(j)] = st.i1[size_t(j)] = j;
      st.w1[size_t(j)] = 0;
      ++st.off0[size_t(j) + 1];
      ++st.off1[size_t(j) + 1];
      continue;
    }
    double src =
        corners ? (out > 1 ? double(j) * double(in - 1) / double(out - 1) : 0.0) : (double(j) + 0.5) * scale - 0.5;
    src = std::min(std::max(src, 0.0), double(in));  // the upper clamp only for scales beyond interpolate's
    const int64_t a = std::min(int64_t(std::floor(src)), in - 1);
    st.i0[size_t(j)] = a;
    st.i1[size_t(j)] = std::min(a + 1, in - 1);
    st.w1[size_t(j)] = src - double(a);
    ++st.off0[size_t(a) + 1];
    ++st.off1[size_t(st.i1[size_t(j)]) + 1];
  }
  for (int64_t i = 0; i < in; ++i) {
    st.off0[size_t(i) + 1] += st.off0[size_t(i)];
    st.off1[size_t(i) + 1] += st.off1[size_t(i)];
  }
  return st;
}

// [outer, points, inner] around dim d of sizes.
struct AroundDim {
  int64_t outer = 1, inner = 1;
};
AroundDim around_dim(const IntList& sizes, int64_t d) {
  AroundDim a;
  for (int64_t i = 0; i < d; ++i)
    a.outer *= sizes[size_t(i)];
  for (size_t i = size_t(d) + 1; i < sizes.size(); ++i)
    a.inner *= sizes[i];
  return a;
}

// The arguments of either primitive: t [N, C, s...] floating, dim one of
// its spatial dims, `points` (the other side's size along dim) >= 1, the
// scale finite and > 0 unless align_corners.
void check_resample(const Tensor& t, int64_t dim, int64_t points, double scale, bool corners, const char* op,
                    const char* what, const char* points_name) {
  detail::check_defined(t, op, what);
  TG_CHECK(t.dim() >= 3, op, ": ", what, " must be [N, C, spatial...], got ", shape_str(t.sizes()));
  check_floating(t, op, what);
  TG_CHECK(dim >= 2 && dim < t.dim(), op, ": dim ", dim, " is not a spatial dim of ", what, " ", shape_str(t.sizes()),
           " (2 to ", t.dim() - 1, ")");
  TG_CHECK(points >= 1 && points < (int64_t(1) << 31), op, ": ", points_name, " must be >= 1 and below 2^31, got ",
           points);
  TG_CHECK(t.size(dim) >= 1, op, ": ", what, " ", shape_str(t.sizes()), " is empty along dim ", dim);
  TG_CHECK(corners || (std::isfinite(scale) && scale > 0), op, ": scale must be finite and > 0, got ", scale);
}

// The stencil's tables as tensors on `device` (cached per geometry; the
// stencil is computed only when they are not).
kernels::ResampleStencil stencil_tensors(int64_t in, int64_t out, double scale, bool corners, Device device) {
  std::ostringstream k;
  k << "resample" << in << ',' << out << ',' << corners;
  if (!corners) k << ',' << std::hexfloat << scale;
  const std::string key = k.str();
  std::optional<LinearStencil> made;
  auto stencil = [&]() -> const LinearStencil& {
    if (!made) made = linear_stencil(in, out, scale, corners);
    return *made;
  };
  auto ints = [&](std::vector<int64_t> LinearStencil::*v, int64_t n, const char* which) {
    return constant<int64_t>(key + which, {n}, kInt64, device, [&](int64_t* o, int64_t) {
      const std::vector<int64_t>& src = stencil().*v;
      std::copy(src.begin(), src.end(), o);
    });
  };
  kernels::ResampleStencil st;
  st.i0 = ints(&LinearStencil::i0, out, "i0");
  st.i1 = ints(&LinearStencil::i1, out, "i1");
  st.off0 = ints(&LinearStencil::off0, in + 1, "off0");
  st.off1 = ints(&LinearStencil::off1, in + 1, "off1");
  st.w1 = constant<double>(key + "w1", {out}, kFloat64, device, [&](double* o, int64_t) {
    const std::vector<double>& w = stencil().w1;
    std::copy(w.begin(), w.end(), o);
  });
  st.in = in;
  st.out = out;
  return st;
}

// out := x resampled (forward) or the adjoint on x (backward), on the CPU.
template <class T>
void resample_cpu(T* out, const T* x, const LinearStencil& s, int64_t outer, int64_t in, int64_t o, int64_t inner,
                  bool adjoint) {
  const int64_t rows = outer * (adjoint ? in : o);
  cpu::parallel_for(rows, std::max<int64_t>(1, 16384 / inner), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      T* dst = out + r * inner;
      if (!adjoint) {
        const int64_t m = r / o, j = r % o;
        const T* a = x + (m * in + s.i0[size_t(j)]) * inner;
        const T* b = x + (m * in + s.i1[size_t(j)]) * inner;
        const T wa = T(1 - s.w1[size_t(j)]), wb = T(s.w1[size_t(j)]);
        for (int64_t k = 0; k < inner; ++k)
          dst[k] = wa * a[k] + wb * b[k];
        continue;
      }
      const int64_t m = r / in, i = r % in;
      const T* g = x + m * o * inner;
      std::fill(dst, dst + inner, T(0));
      for (int64_t j = s.off0[size_t(i)]; j < s.off0[size_t(i) + 1]; ++j) {
        const T w = T(1 - s.w1[size_t(j)]);
        for (int64_t k = 0; k < inner; ++k)
          dst[k] += w * g[j * inner + k];
      }
      for (int64_t j = s.off1[size_t(i)]; j < s.off1[size_t(i) + 1]; ++j) {
        const T w = T(s.w1[size_t(j)]);
        for (int64_t k = 0; k < inner; ++k)
          dst[k] += w * g[j * inner + k];
      }
    }
  });
}

// Either primitive on t (its size along dim becomes `to`): in = the input
// side's points, o = the output side's.
Tensor resample(const Tensor& t, int64_t dim, int64_t in, int64_t o, double scale, bool corners, bool adjoint,
                const char* op) {
  IntList sizes = t.sizes();
  sizes[size_t(dim)] = adjoint ? in : o;
  detail::checked_numel(sizes, op);
  if (shape_numel(sizes) == 0) return tg::zeros(sizes, t.options());
  if (is_reduced_float(t.dtype()))
    return raw::to(resample(raw::to(t, kFloat32), dim, in, o, scale, corners, adjoint, op), t.dtype());
  const Tensor src = raw::contiguous(t);
  const AroundDim a = around_dim(sizes, dim);
  Tensor out = detail::new_empty(sizes, t.dtype(), t.device());
  if (!t.device().is_cpu()) {
    const kernels::GridKernels& kt = kernels::grid_kernels(t.device());
    kernels::ResampleStencil st = stencil_tensors(in, o, scale, corners, t.device());
    st.outer = a.outer;
    st.inner = a.inner;
    auto* slot = adjoint ? kt.resample_linear_backward : kt.resample_linear;
    TG_CHECK(slot && slot(out, src, st), op, ": no kernel for ", t.dtype(), " on ", t.device());
    return out;
  }
  const LinearStencil s = linear_stencil(in, o, scale, corners);
  kernels::dispatch_floating(t.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    resample_cpu<T>(static_cast<T*>(out.data_ptr()), static_cast<const T*>(src.data_ptr()), s, a.outer, in, o, a.inner,
                    adjoint);
  });
  return out;
}

}  // namespace

namespace raw::grid {

Tensor _resample_linear(const Tensor& input, int64_t dim, int64_t size, double scale, bool align_corners) {
  const char* op = "_resample_linear";
  check_resample(input, dim, size, scale, align_corners, op, "input", "size");
  return resample(input, dim, input.size(dim), size, scale, align_corners, false, op);
}

Tensor _resample_linear_backward(const Tensor& grad, int64_t dim, int64_t input_size, double scale,
                                 bool align_corners) {
  const char* op = "_resample_linear_backward";
  check_resample(grad, dim, input_size, scale, align_corners, op, "grad", "input_size");
  return resample(grad, dim, input_size, grad.size(dim), scale, align_corners, true, op);
}

}  // namespace raw::grid

// ---- resampling ----
Tensor interpolate(const Tensor& input, const IntList& size, const std::vector<double>& scale_factor,
                   const std::string& mode, std::optional<bool> align_corners) {
  return detail::as_op("interpolate", [&]() -> Tensor {
    const char* op = "interpolate";
    detail::check_defined(input, op);
    TG_CHECK(input.dim() >= 3 && input.dim() <= 5, op,
             ": input must be [N, C, spatial...] with 1 to 3 spatial dims, got ", shape_str(input.sizes()));
    check_floating(input, op, "input");
    const size_t S = size_t(input.dim() - 2);
    const bool nearest = mode == "nearest";
    const char* want = S == 1 ? "linear" : S == 2 ? "bilinear" : "trilinear";
    TG_CHECK(nearest || mode == want, op, ": mode \"", mode, "\" does not apply to a ", input.dim(), "-D input ",
             shape_str(input.sizes()), "; use \"nearest\" or \"", want, "\"");
    TG_CHECK(!(nearest && align_corners.has_value()), op,
             ": align_corners applies to the linear modes only; leave it unset for \"nearest\"");
    TG_CHECK(size.empty() != scale_factor.empty(), op, ": give exactly one of size and scale_factor");
    const bool corners = align_corners.value_or(false);
    IntList out;
    std::vector<double> scale;  // the source step per output step, as PyTorch computes it
    if (!size.empty()) {
      out = per_dim(size, S, op, "size");
      check_min(out, 1, op, "size");
    } else {
      TG_CHECK(scale_factor.size() == 1 || scale_factor.size() == S, op, ": scale_factor must have 1 or ", S,
               " entries");
      for (size_t i = 0; i < S; ++i) {
        const double f = scale_factor.size() == 1 ? scale_factor[0] : scale_factor[i];
        TG_CHECK(std::isfinite(f) && f > 0, op, ": scale_factor must be finite and > 0, got ", f);
        const double points = std::floor(double(input.size(int64_t(i) + 2)) * f);
        TG_CHECK(points < double(int64_t(1) << 31), op, ": scale_factor ", f, " makes spatial dim ", i, " of input ",
                 shape_str(input.sizes()), " ", points, " points; the most is 2^31 - 1");
        out.push_back(int64_t(points));
        TG_CHECK(out.back() >= 1, op, ": scale_factor ", f, " makes spatial dim ", i, " of input ",
                 shape_str(input.sizes()), " empty");
        scale.push_back(1.0 / f);
      }
    }
    Tensor x = input;
    // The last dim first: a 2x upsampling's first pass writes half the
    // elements its second does, and PyTorch's stencil sums in that order.
    for (size_t i = S; i-- > 0;) {
      const int64_t d = int64_t(i) + 2, in = x.size(d), o = out[i];
      TG_CHECK(in >= 1, op, ": input ", shape_str(input.sizes()), " has an empty spatial dim");
      const double sc = scale.empty() ? double(in) / double(o) : scale[i];
      if (nearest && o % in == 0 && std::abs(sc * double(o / in) - 1.0) < 1e-12) {  // whole copies: expand
        IntList s = x.sizes(), e = x.sizes();
        s.insert(s.begin() + d + 1, 1);
        e.insert(e.begin() + d + 1, o / in);
        IntList r = x.sizes();
        r[size_t(d)] = o;
        x = x.reshape(s).expand(e).reshape(r);
        continue;
      }
      if (in == o) continue;  // copied, as PyTorch's stencils (whatever the scale or align_corners)
      if (!nearest && detail::switched_on<detail::OffSwitch::kResampleKernels>()) {
        x = _resample_linear(x, d, o, sc, corners);
        continue;
      }
      // PyTorch's stencil per output: nearest, floor(j sc); linear, the two
      // neighbours of the source coordinate (the second clamped to the edge)
      // and their weights. Gathers, so a NaN or inf reaches only the outputs
      // whose stencil holds it.
      LinearStencil st;
      if (nearest) {
        st.i0.resize(size_t(o));
        for (int64_t j = 0; j < o; ++j)  // (PyTorch's nearest_idx: j / 2 when the size doubles, whatever the scale)
          st.i0[size_t(j)] = o == 2 * in ? j / 2 : std::min(int64_t(std::floor(double(j) * sc)), in - 1);
      } else {
        st = linear_stencil(in, o, sc, corners);  // _resample_linear's, for TG_RESAMPLE_KERNELS=0
      }
      const std::vector<int64_t>&i0 = st.i0, &i1 = st.i1;
      const std::vector<double>& w1 = st.w1;
      const std::string key = key_of(nearest ? "nearest" : "linear", {{in, o}}, {sc, double(corners)});
      auto index_of = [&](const std::vector<int64_t>& v, const char* which) {
        return constant<int64_t>(key + which, {o}, kInt64, x.device(),
                                 [&](int64_t* out, int64_t) { std::copy(v.begin(), v.end(), out); });
      };
      Tensor first = index_select(x, d, index_of(i0, "i0"));
      if (nearest) {
        x = first;
        continue;
      }
      IntList ws(std::vector<int64_t>(size_t(x.dim()), 1));
      ws[size_t(d)] = o;
      auto weight_of = [&](bool second, const char* which) {
        return constant<double>(key + which, {o}, x.dtype(), x.device(),
                                [&](double* out, int64_t) {
                                  for (int64_t j = 0; j < o; ++j)
                                    out[j] = second ? w1[size_t(j)] : 1 - w1[size_t(j)];
                                })
            .view(ws);
      };
      x = add(mul(first, weight_of(false, "w0")), mul(index_select(x, d, index_of(i1, "i1")), weight_of(true, "w1")));
    }
    return fresh(x.is_same(input) ? input.clone() : x, input);
  });
}

// ---- normalization ----
Tensor group_norm(const Tensor& input, int64_t num_groups, const Tensor& weight, const Tensor& bias, double eps) {
  return detail::as_op("group_norm", [&]() -> Tensor {
    const char* op = "group_norm";
    detail::check_defined(input, op);
    TG_CHECK(input.dim() >= 2, op, ": input must be [N, C, ...], got ", shape_str(input.sizes()));
    check_floating(input, op, "input");
    const int64_t N = input.size(0), C = input.size(1);
    TG_CHECK(num_groups >= 1 && C % num_groups == 0, op, ": channels (", C, ") of input ", shape_str(input.sizes()),
             " must be divisible by num_groups (", num_groups, ")");
    check_channel_vector(weight, C, op, "weight");
    check_channel_vector(bias, C, op, "bias");
    for (const Tensor* t : {&weight, &bias})
      if (t->defined()) {
        detail::check_same_device(input, *t, op);
        check_floating(*t, op, t == &weight ? "weight" : "bias");
      }
    // Float16 and BFloat16: the statistics and the normalization in Float32
    // (a group's sum of squares passes Float16's 65504 at ordinary sizes),
    // rounded once into the input's dtype.
    if (is_reduced_float(input.dtype()))
      return group_norm(input.to(kFloat32), num_groups, weight, bias, eps).to(input.dtype());
    // (weight and bias in the input's dtype, as PyTorch's mixed-type group_norm)
    const Tensor w = weight.defined() ? weight.to(input.dtype()) : weight;
    const Tensor b = bias.defined() ? bias.to(input.dtype()) : bias;
    if (input.numel() == 0) {
      Tensor y = mul(input, 1.0);
      if (w.defined()) y = mul(y, channel_view(w, input.dim()));
      return b.defined() ? add(y, channel_view(b, input.dim())) : y;
    }
    // The centred values c times one per-(sample, channel) scale (the
    // group's 1 / std times the channel's weight), plus the bias, in the
    // group primitives: two full-size passes and two group sums, c the one
    // full-size tensor the derivatives keep, and every derivative of every
    // order again group sums and affine passes.
    const int64_t G = num_groups, Cg = C / G;
    const double count = double(input.numel() / (N * G));
    Tensor c = _group_center(input, G);
    Tensor r = rsqrt(add(mul(_group_sum(c, c, G), 1.0 / count), eps));  // [N, G]
    Tensor scale = w.defined() ? mul(r.unsqueeze(2), w.reshape({1, G, Cg})).reshape({N, C}) : r;
    return _group_affine(c, scale, b.defined() ? b.reshape({1, C}) : Tensor());
  });
}

namespace {
// running := (1 - momentum) running + momentum stat (raw: never recorded).
void update_running(const Tensor& running, const Tensor& stat, double momentum) {
  if (!running.defined()) return;
  Tensor s = raw::to(raw::reshape(raw::detach(stat), running.sizes()), running.dtype());
  raw::mul_(running, Scalar(1 - momentum));
  raw::add_(running, s, Scalar(momentum));
}

// x's centred values c = x - mean over dims and their (biased) variance v.
struct Moments {
  Tensor c, m, v;
};
Moments moments(const Tensor& x, const IntList& dims) {
  Moments r;
  r.m = mean(x, dims, true);
  r.c = sub(x, r.m);
  r.v = mean(mul(r.c, r.c), dims, true);
  return r;
}

// c / sqrt(v + eps), times weight and plus bias per channel (either undefined: none).
Tensor scale_affine(const Tensor& c, const Tensor& v, const Tensor& weight, const Tensor& bias, double eps) {
  Tensor y = mul(c, rsqrt(add(v, eps)));
  if (weight.defined()) y = mul(y, channel_view(weight, c.dim()));
  if (bias.defined()) y = add(y, channel_view(bias, c.dim()));
  return y;
}

// batch_norm's and instance_norm's arguments: input [N, C, ...] of at least
// min_dim dims, floating; per-channel vectors on its device, running
// statistics floating.
void check_norm_args(const Tensor& input, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                     const Tensor& running_var, int64_t min_dim, const char* op) {
  detail::check_defined(input, op);
  TG_CHECK(input.dim() >= min_dim, op, ": input must be [N, C, ", min_dim > 2 ? "spatial...]" : "...]", ", got ",
           shape_str(input.sizes()));
  check_floating(input, op, "input");
  const int64_t C = input.size(1);
  check_channel_vector(weight, C, op, "weight");
  check_channel_vector(bias, C, op, "bias");
  check_channel_vector(running_mean, C, op, "running_mean");
  check_channel_vector(running_var, C, op, "running_var");
  for (const Tensor* t : {&weight, &bias, &running_mean, &running_var})
    if (t->defined()) detail::check_same_device(input, *t, op);
  for (const Tensor* t : {&running_mean, &running_var})
    if (t->defined()) check_floating(*t, op, "running statistics");
}

// The normalization by the running statistics (evaluation); `what` says
// which argument asked for it.
Tensor with_running_stats(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                          const Tensor& weight, const Tensor& bias, double eps, const char* op, const char* what) {
  TG_CHECK(running_mean.defined() && running_var.defined(), op, ": ", what, " needs running_mean and running_var");
  const Tensor m = channel_view(running_mean, input.dim()).to(input.dtype());
  return scale_affine(sub(input, m), channel_view(running_var, input.dim()).to(input.dtype()), weight, bias, eps);
}
}  // namespace

Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps) {
  return detail::as_op("batch_norm", [&]() -> Tensor {
    const char* op = "batch_norm";
    check_norm_args(input, weight, bias, running_mean, running_var, 2, op);
    if (!training)
      return with_running_stats(input, running_mean, running_var, weight, bias, eps, op, "evaluation (training=false)");
    IntList dims = {0};
    for (int64_t d = 2; d < input.dim(); ++d)
      dims.push_back(d);
    if (input.numel() == 0) return mul(input, 1.0);  // nothing to normalize; the statistics stay
    const int64_t count = input.numel() / std::max<int64_t>(input.size(1), 1);
    TG_CHECK(count > 1, op, ": training needs more than one value per channel, got input ", shape_str(input.sizes()));
    const Moments s = moments(input, dims);
    update_running(running_mean, s.m, momentum);
    if (running_var.defined()) update_running(running_var, mul(s.v, double(count) / double(count - 1)), momentum);
    return scale_affine(s.c, s.v, weight, bias, eps);
  });
}

Tensor instance_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                     const Tensor& bias, bool use_input_stats, double momentum, double eps) {
  return detail::as_op("instance_norm", [&]() -> Tensor {
    const char* op = "instance_norm";
    check_norm_args(input, weight, bias, running_mean, running_var, 3, op);
    if (!use_input_stats)
      return with_running_stats(input, running_mean, running_var, weight, bias, eps, op, "use_input_stats=false");
    IntList dims;
    int64_t count = 1;
    for (int64_t d = 2; d < input.dim(); ++d) {
      dims.push_back(d);
      count *= input.size(d);
    }
    TG_CHECK(count > 1, op, ": needs more than one spatial element per channel, got input ", shape_str(input.sizes()));
    if (input.numel() == 0) return mul(input, 1.0);
    const Moments s = moments(input, dims);
    if (input.size(0) > 0) {
      update_running(running_mean, mean(s.m, {0}), momentum);
      if (running_var.defined())
        update_running(running_var, mean(mul(s.v, double(count) / double(count - 1)), {0}), momentum);
    }
    return scale_affine(s.c, s.v, weight, bias, eps);
  });
}

}  // namespace tg
