// The grid family's primitives (<tapegrad/tensor/grid.def>) with their
// rules. The three convolution primitives are bilinear and each one's
// gradients are the other two, written with the public ops, so every order
// follows:
//   y = _convolution(x, w):                 gx = _convolution_backward_input(g, w)
//                                           gw = _convolution_backward_weight(x, g)
//   y = _convolution_backward_input(a, w):  ga = _convolution(g, w)
//                                           gw = _convolution_backward_weight(g, a)
//   W = _convolution_backward_weight(x, a): gx = _convolution_backward_input(a, g)
//                                           ga = _convolution(x, g)
// (<conv(x, w), a> = <x, conv^T(a, w)> = <w, conv_w(x, a)>). Their tangents
// and Taylor coefficients are the product rule over the op itself
// (jet_product); a batch of tangents [B, ...] is folded into N where only
// the input side carries it, else into the groups (each coefficient its own
// group of channels). _im2col and _col2im are linear and each other's
// adjoint; their tangents are themselves on the tangent (the batch folded
// into N); likewise _resample_linear and _resample_linear_backward.
#include <tapegrad/tensor/grid.h>

#include "autograd/ops/ops.h"
#include "autograd/ops/record.h"
#include "autograd/ops/taylor.h"

namespace tg {

using autograd::SavedVariable;
using autograd::variable_list;
using namespace autograd::ops_detail;

namespace {

IntList spatial_sizes(const IntList& s) { return IntList(std::vector<int64_t>(s.begin() + 2, s.end())); }

struct ConvArgs {
  IntList stride, padding, dilation;
  int64_t groups = 1;
};

enum class ConvKind { Forward, BackwardInput, BackwardWeight };

// The primitive of `kind` on (a, b): (input, weight), (grad_output, weight)
// or (input, grad_output); `size` the input's spatial sizes
// (BackwardInput) or the weight's sizes (BackwardWeight).
Tensor conv_op(ConvKind kind, const Tensor& a, const Tensor& b, const IntList& size, const ConvArgs& c) {
  switch (kind) {
    case ConvKind::Forward: return tg::_convolution(a, b, c.stride, c.padding, c.dilation, c.groups);
    case ConvKind::BackwardInput:
      return tg::_convolution_backward_input(a, b, size, c.stride, c.padding, c.dilation, c.groups);
    case ConvKind::BackwardWeight:
      return tg::_convolution_backward_weight(a, b, size, c.stride, c.padding, c.dilation, c.groups);
  }
  return {};
}

// [B, N, ...] -> [N, B * C, ...] (each batch entry a group of channels).
Tensor batch_into_channels(const Tensor& t) {
  IntList s = {t.size(1), t.size(0) * t.size(2)};
  for (int64_t d = 3; d < t.dim(); ++d)
    s.push_back(t.size(d));
  return t.transpose(0, 1).reshape(s);
}
// [N, B * C, ...] -> [B, N, C, ...].
Tensor channels_into_batch(const Tensor& t, int64_t B) {
  IntList s = {t.size(0), B, t.size(1) / B};
  for (int64_t d = 2; d < t.dim(); ++d)
    s.push_back(t.size(d));
  return t.reshape(s).transpose(0, 1);
}
// [B, N, ...] <-> [B N, ...].
Tensor merge_lead(const Tensor& t) {
  IntList s = t.sizes();
  s.erase(s.begin());
  s[0] *= t.size(0);
  return t.reshape(s);
}
Tensor split_lead(const Tensor& t, int64_t B) {
  IntList s = t.sizes();
  s[0] /= B;
  s.insert(s.begin(), B);
  return t.reshape(s);
}
Tensor expand_lead(const Tensor& t, int64_t B) {
  IntList s = t.sizes();
  s.insert(s.begin(), B);
  return t.unsqueeze(0).expand(s);
}

// The primitive of `kind` on operands that may carry a leading batch of
// tangents (rank `rank` + 1): the bilinear map of jet_product.
Tensor conv_batched(ConvKind kind, const Tensor& a, const Tensor& b, int64_t rank, const IntList& size,
                    const ConvArgs& c) {
  const bool ab = a.dim() > rank, bb = b.dim() > rank;
  if (!ab && !bb) return conv_op(kind, a, b, size, c);
  if (ab && !bb && kind != ConvKind::BackwardWeight)  // the batch joins N
    return split_lead(conv_op(kind, merge_lead(a), b, size, c), a.size(0));
  const int64_t B = ab ? a.size(0) : b.size(0);
  const Tensor A = ab ? a : expand_lead(a, B), Bt = bb ? b : expand_lead(b, B);
  ConvArgs cg = c;
  cg.groups = c.groups * B;
  if (kind == ConvKind::BackwardWeight) {  // weight sizes [B O, C / groups, k...]
    IntList ws = size;
    ws[0] *= B;
    return split_lead(conv_op(kind, batch_into_channels(A), batch_into_channels(Bt), ws, cg), B);
  }
  // The weight [B, O, C / groups, k...] as [B O, ...]: groups of B * groups.
  return channels_into_batch(conv_op(kind, batch_into_channels(A), merge_lead(Bt), size, cg), B);
}

class ConvNode final : public OpNode {
 public:
  ConvNode(ConvKind kind, ConvArgs args, IntList a_sizes, IntList b_sizes)
      : OpNode(kind == ConvKind::Forward         ? "_convolution"
               : kind == ConvKind::BackwardInput ? "_convolution_backward_input"
                                                 : "_convolution_backward_weight",
               kind == ConvKind::Forward         ? "ConvolutionBackward"
               : kind == ConvKind::BackwardInput ? "ConvolutionBackwardInputBackward"
                                                 : "ConvolutionBackwardWeightBackward"),
        kind_(kind),
        args_(std::move(args)),
        a_sizes_(std::move(a_sizes)),
        b_sizes_(std::move(b_sizes)) {}
  variable_list apply(variable_list&& grads) override {
    variable_list out(2);
    const Tensor& g = grads[0];
    if (!g.defined()) return out;
    const ConvArgs& c = args_;
    if (should_compute_output(0)) {
      const Tensor b = b_.unpack(this, "b");
      switch (kind_) {
        case ConvKind::Forward:  // gx = conv^T(g, w)
          out[0] =
              tg::_convolution_backward_input(g, b, spatial_sizes(a_sizes_), c.stride, c.padding, c.dilation, c.groups);
          break;
        case ConvKind::BackwardInput:  // ga = conv(g, w)
          out[0] = tg::_convolution(g, b, c.stride, c.padding, c.dilation, c.groups);
          break;
        case ConvKind::BackwardWeight:  // gx = conv^T(a, g)
          out[0] =
              tg::_convolution_backward_input(b, g, spatial_sizes(a_sizes_), c.stride, c.padding, c.dilation, c.groups);
          break;
      }
    }
    if (should_compute_output(1)) {
      const Tensor a = a_.unpack(this, "a");
      switch (kind_) {
        case ConvKind::Forward:  // gw = conv_w(x, g)
          out[1] = tg::_convolution_backward_weight(a, g, b_sizes_, c.stride, c.padding, c.dilation, c.groups);
          break;
        case ConvKind::BackwardInput:  // gw = conv_w(g, a)
          out[1] = tg::_convolution_backward_weight(g, a, b_sizes_, c.stride, c.padding, c.dilation, c.groups);
          break;
        case ConvKind::BackwardWeight:  // ga = conv(x, g)
          out[1] = tg::_convolution(a, g, c.stride, c.padding, c.dilation, c.groups);
          break;
      }
    }
    return out;
  }
  void release_variables() override {
    a_.release();
    b_.release();
  }
  SavedVariable a_, b_;

 private:
  ConvKind kind_;
  ConvArgs args_;
  IntList a_sizes_, b_sizes_;
};

// The recorded primitive of `kind` on (a, b): the raw op, the node (a saved
// for the second operand's gradient, b for the first's), the product rule.
template <class Raw>
Tensor conv_primitive(ConvKind kind, const Tensor& a, const Tensor& b, const IntList& size, ConvArgs args,
                      Raw&& raw_fn) {
  Tensor out = run_raw(raw_fn);
  if (should_record({&a, &b})) {
    auto node = make_node<ConvNode>({&a, &b}, kind, args, a.sizes(), b.sizes());
    if (node->needs_input_grad(1)) node->a_ = SavedVariable(a, false);
    if (node->needs_input_grad(0)) node->b_ = SavedVariable(b, false);
    out = finish(out, node);
  }
  if (fw_any({&a, &b})) {
    const Tensor ta = fw_t(a), tb = fw_t(b);
    const int64_t rank = a.dim();
    fw_rule(out, [&] {
      const Bilinear f = [kind, rank, size, args](const Tensor& x, const Tensor& y) {
        return conv_batched(kind, x, y, rank, size, args);
      };
      return jet_product(a, ta, b, tb, f);
    });
  }
  return out;
}

// A linear window op: the tangent is the op on the tangent, a batch of
// tangents folded into N.
template <class Op> Tensor window_tangent(const Tensor& t, int64_t rank, Op&& op) {
  if (t.dim() == rank) return op(t);
  return split_lead(op(merge_lead(t)), t.size(0));
}

class WindowNode final : public OpNode {
 public:
  WindowNode(bool im2col, IntList spatial, IntList k, IntList d, IntList p, IntList s)
      : OpNode(im2col ? "_im2col" : "_col2im", im2col ? "Im2colBackward" : "Col2imBackward"),
        im2col_(im2col),
        spatial_(std::move(spatial)),
        k_(std::move(k)),
        d_(std::move(d)),
        p_(std::move(p)),
        s_(std::move(s)) {}
  variable_list apply(variable_list&& grads) override {
    variable_list out(1);
    if (should_compute_output(0) && grads[0].defined())
      out[0] = im2col_ ? tg::_col2im(grads[0], spatial_, k_, d_, p_, s_) : tg::_im2col(grads[0], k_, d_, p_, s_);
    return out;
  }

 private:
  bool im2col_;
  IntList spatial_, k_, d_, p_, s_;
};

// ---- the group primitives ----
// _group_sum is bilinear in (a, b), _group_affine bilinear in (scale, t) and
// linear in bias, _group_center linear and self-adjoint; each one's
// gradients are the others (<S(a, b), g> = <a, A(b, g)> = <b, A(a, g)>, with
// S the group sums and A the affine map), so every order stays in them.

// v [N or 1, K] (a leading batch [B, ...] of tangents kept) as a full
// tensor of `sizes` [N, C, ...]: v[n, k(c)] everywhere.
Tensor group_broadcast(const Tensor& v, const IntList& sizes) {
  const bool batched = v.dim() == 3;
  const int64_t N = sizes[0], K = v.size(-1);
  const int64_t run = N == 0 ? 0 : shape_numel(sizes) / (N * K);
  IntList e = {N, K, run}, s = sizes;
  IntList u = {v.size(-2), K, 1};
  if (batched) {
    e.insert(e.begin(), v.size(0));
    u.insert(u.begin(), v.size(0));
    s.insert(s.begin(), v.size(0));
  }
  return v.reshape(u).expand(e).reshape(s);
}

// The group sums per (n, k) of [N or 1]-coefficient rows back to [1, K]
// when the coefficient was shared by every sample.
Tensor sum_to_coefficient(const Tensor& g, int64_t rows) { return rows == g.size(0) ? g : tg::sum(g, {0}, true); }

// f(b) for each entry b of a leading batch of B, stacked.
template <class F> Tensor per_entry(int64_t B, F&& f) {
  std::vector<Tensor> r;
  r.reserve(size_t(B));
  for (int64_t i = 0; i < B; ++i)
    r.push_back(f(i));
  return tg::stack(r, 0);
}

// _group_sum on operands that may carry a leading batch of tangents (rank
// `rank` + 1): batched together, the batch folded into N; one side batched,
// a sum per entry against the other side as it is (folding would copy the
// unbatched full-size side B times, and the recorded sum keep the copy).
Tensor group_sum_batched(const Tensor& a, const Tensor& b, int64_t rank, int64_t groups) {
  const bool ab = a.dim() > rank, bb = b.defined() && b.dim() > rank;
  if (!ab && !bb) return tg::_group_sum(a, b, groups);
  if (!b.defined() || (ab && bb))
    return split_lead(tg::_group_sum(merge_lead(a), b.defined() ? merge_lead(b) : b, groups), a.size(0));
  return per_entry(ab ? a.size(0) : b.size(0),
                   [&](int64_t i) { return tg::_group_sum(ab ? a.select(0, i) : a, bb ? b.select(0, i) : b, groups); });
}

// _group_affine(t, s, {}) on operands that may carry a leading batch (t of
// rank `rank` + 1, s of rank 3): t batched, folded into N (s tiled when it
// has a row per sample); only s batched, one map of t per entry.
Tensor group_scale_batched(const Tensor& t, const Tensor& s, int64_t rank) {
  const bool tb = t.dim() > rank, sb = s.dim() > 2;
  if (!tb && !sb) return tg::_group_affine(t, s, {});
  if (!tb) return per_entry(s.size(0), [&](int64_t i) { return tg::_group_affine(t, s.select(0, i), {}); });
  const int64_t B = t.size(0), N = t.size(1);
  if (!sb && s.size(0) == 1) return split_lead(tg::_group_affine(merge_lead(t), s, {}), B);
  const Tensor S = (sb ? s : expand_lead(s, B)).expand({B, N, s.size(-1)});
  return split_lead(tg::_group_affine(merge_lead(t), merge_lead(S), {}), B);
}

class GroupSumNode final : public OpNode {
 public:
  GroupSumNode(IntList sizes, bool same, bool has_b)
      : OpNode("_group_sum", "GroupSumBackward"), sizes_(std::move(sizes)), same_(same), has_b_(has_b) {}
  variable_list apply(variable_list&& grads) override {
    variable_list out(2);
    const Tensor& g = grads[0];
    if (!g.defined()) return out;
    if (same_) {  // S(a, a): both gradients are A(a, g), given once as 2 A(a, g)
      if (should_compute_output(0)) out[0] = tg::_group_affine(a_.unpack(this, "a"), tg::mul(g, 2.0), {});
      return out;
    }
    if (should_compute_output(0))
      out[0] = has_b_ ? tg::_group_affine(b_.unpack(this, "b"), g, {}) : group_broadcast(g, sizes_);
    if (has_b_ && should_compute_output(1)) out[1] = tg::_group_affine(a_.unpack(this, "a"), g, {});
    return out;
  }
  void release_variables() override {
    a_.release();
    b_.release();
  }
  SavedVariable a_, b_;

 private:
  IntList sizes_;
  bool same_, has_b_;
};

class GroupCenterNode final : public OpNode {
 public:
  explicit GroupCenterNode(int64_t groups) : OpNode("_group_center", "GroupCenterBackward"), groups_(groups) {}
  variable_list apply(variable_list&& grads) override {
    variable_list out(1);
    if (should_compute_output(0) && grads[0].defined()) out[0] = tg::_group_center(grads[0], groups_);
    return out;
  }

 private:
  int64_t groups_;
};

class GroupAffineNode final : public OpNode {
 public:
  GroupAffineNode(int64_t scale_rows, int64_t scale_k, int64_t bias_rows, int64_t bias_k)
      : OpNode("_group_affine", "GroupAffineBackward"),
        scale_rows_(scale_rows),
        scale_k_(scale_k),
        bias_rows_(bias_rows),
        bias_k_(bias_k) {}
  variable_list apply(variable_list&& grads) override {
    variable_list out(3);
    const Tensor& g = grads[0];
    if (!g.defined()) return out;
    if (should_compute_output(0)) out[0] = scale_k_ ? tg::_group_affine(g, scale_.unpack(this, "scale"), {}) : g;
    if (scale_k_ && should_compute_output(1))
      out[1] = sum_to_coefficient(tg::_group_sum(g, t_.unpack(this, "t"), scale_k_), scale_rows_);
    if (bias_k_ && should_compute_output(2)) out[2] = sum_to_coefficient(tg::_group_sum(g, {}, bias_k_), bias_rows_);
    return out;
  }
  void release_variables() override {
    t_.release();
    scale_.release();
  }
  SavedVariable t_, scale_;

 private:
  int64_t scale_rows_, scale_k_, bias_rows_, bias_k_;
};

// ---- the linear resampling primitives: linear and each other's adjoint
// (<R x, g> = <x, R* g>), so each one's gradient is the other and its
// tangent itself on the tangent (a batch folded into N). `points`: the
// size along dim of the node's input side for the other primitive (the
// forward's input size; the adjoint's output-side size). ----
// _resample_linear (points: the output size) or, adjoint, its adjoint
// (points: the input size), recorded.
Tensor resample_op(bool adjoint, const Tensor& x, int64_t dim, int64_t points, double scale, bool corners) {
  return adjoint ? tg::_resample_linear_backward(x, dim, points, scale, corners)
                 : tg::_resample_linear(x, dim, points, scale, corners);
}

class ResampleNode final : public OpNode {
 public:
  ResampleNode(bool adjoint, int64_t dim, int64_t points, double scale, bool corners)
      : OpNode(adjoint ? "_resample_linear_backward" : "_resample_linear",
               adjoint ? "ResampleLinearBackwardBackward" : "ResampleLinearBackward"),
        adjoint_(adjoint),
        dim_(dim),
        points_(points),
        scale_(scale),
        corners_(corners) {}
  variable_list apply(variable_list&& grads) override {
    variable_list out(1);
    if (should_compute_output(0) && grads[0].defined())
      out[0] = resample_op(!adjoint_, grads[0], dim_, points_, scale_, corners_);
    return out;
  }

 private:
  bool adjoint_;
  int64_t dim_, points_;
  double scale_;
  bool corners_;
};

// Either resampling primitive: the raw pass, the node (whose gradient is the
// other primitive) and the tangent (itself on the tangent).
Tensor resample_primitive(bool adjoint, const Tensor& x, int64_t dim, int64_t points, double scale, bool corners) {
  Tensor out = run_raw([&] {
    return adjoint ? raw::grid::_resample_linear_backward(x, dim, points, scale, corners)
                   : raw::grid::_resample_linear(x, dim, points, scale, corners);
  });
  if (should_record({&x})) out = finish(out, make_node<ResampleNode>({&x}, adjoint, dim, x.size(dim), scale, corners));
  const int64_t rank = x.dim();
  return fw_linear(out, x, [&](const Tensor& t) {
    return window_tangent(t, rank,
                          [&](const Tensor& u) { return resample_op(adjoint, u, dim, points, scale, corners); });
  });
}

}  // namespace

namespace autograd::ops::grid {

Tensor _group_sum(const Tensor& a, const Tensor& b, int64_t groups) {
  Tensor out = run_raw([&] { return raw::grid::_group_sum(a, b, groups); });
  const bool same = b.defined() && a.is_same(b);
  if (should_record({&a, &b})) {
    auto node = make_node<GroupSumNode>({&a, &b}, a.sizes(), same, b.defined());
    if (node->needs_input_grad(1) || same) node->a_ = SavedVariable(a, false);
    if (b.defined() && !same && node->needs_input_grad(0)) node->b_ = SavedVariable(b, false);
    out = finish(out, node);
  }
  if (fw_any({&a, &b})) {
    const Tensor ta = fw_t(a), tb = b.defined() ? fw_t(b) : Tensor();
    const int64_t rank = a.dim();
    fw_rule(out, [&] {
      if (!b.defined()) return group_sum_batched(ta, {}, rank, groups);
      const Bilinear f = [rank, groups](const Tensor& x, const Tensor& y) {
        return group_sum_batched(x, y, rank, groups);
      };
      return jet_product(a, ta, b, tb, f);
    });
  }
  return out;
}

Tensor _group_center(const Tensor& x, int64_t groups) {
  Tensor out = run_raw([&] { return raw::grid::_group_center(x, groups); });
  if (should_record({&x})) out = finish(out, make_node<GroupCenterNode>({&x}, groups));
  const int64_t rank = x.dim();
  return fw_linear(out, x, [&](const Tensor& t) {
    return window_tangent(t, rank, [&](const Tensor& u) { return tg::_group_center(u, groups); });
  });
}

Tensor _group_affine(const Tensor& t, const Tensor& scale, const Tensor& bias) {
  Tensor out = run_raw([&] { return raw::grid::_group_affine(t, scale, bias); });
  if (should_record({&t, &scale, &bias})) {
    auto node = make_node<GroupAffineNode>({&t, &scale, &bias}, scale.defined() ? scale.size(0) : 0,
                                           scale.defined() ? scale.size(1) : 0, bias.defined() ? bias.size(0) : 0,
                                           bias.defined() ? bias.size(1) : 0);
    if (scale.defined() && node->needs_input_grad(0)) node->scale_ = SavedVariable(scale, false);
    if (scale.defined() && node->needs_input_grad(1)) node->t_ = SavedVariable(t, false);
    out = finish(out, node);
  }
  if (fw_any({&t, &scale, &bias})) {
    const Tensor tt = fw_t(t), ts = scale.defined() ? fw_t(scale) : Tensor(),
                 tb = bias.defined() ? fw_t(bias) : Tensor();
    const int64_t rank = t.dim();
    const IntList sizes = t.sizes();
    fw_rule(out, [&] {
      Tensor r;
      if (!scale.defined()) {
        r = tt;
      } else {
        const Bilinear f = [rank](const Tensor& s, const Tensor& x) { return group_scale_batched(x, s, rank); };
        r = jet_product(scale, ts, t, tt, f);
      }
      return tb.defined() ? fw_add(r, group_broadcast(tb, sizes)) : r;
    });
  }
  return out;
}

Tensor _resample_linear(const Tensor& x, int64_t dim, int64_t size, double scale, bool align_corners) {
  return resample_primitive(false, x, dim, size, scale, align_corners);
}

Tensor _resample_linear_backward(const Tensor& g, int64_t dim, int64_t input_size, double scale, bool align_corners) {
  return resample_primitive(true, g, dim, input_size, scale, align_corners);
}

Tensor _convolution(const Tensor& x, const Tensor& w, const IntList& stride, const IntList& padding,
                    const IntList& dilation, int64_t groups) {
  return conv_primitive(ConvKind::Forward, x, w, {}, {stride, padding, dilation, groups},
                        [&] { return raw::grid::_convolution(x, w, stride, padding, dilation, groups); });
}

Tensor _convolution_backward_input(const Tensor& y, const Tensor& w, const IntList& input_size, const IntList& stride,
                                   const IntList& padding, const IntList& dilation, int64_t groups) {
  Tensor out = conv_primitive(ConvKind::BackwardInput, y, w, input_size, {stride, padding, dilation, groups}, [&] {
    return raw::grid::_convolution_backward_input(y, w, input_size, stride, padding, dilation, groups);
  });
  return out;
}

Tensor _convolution_backward_weight(const Tensor& x, const Tensor& y, const IntList& weight_size, const IntList& stride,
                                    const IntList& padding, const IntList& dilation, int64_t groups) {
  return conv_primitive(ConvKind::BackwardWeight, x, y, weight_size, {stride, padding, dilation, groups}, [&] {
    return raw::grid::_convolution_backward_weight(x, y, weight_size, stride, padding, dilation, groups);
  });
}

Tensor _im2col(const Tensor& x, const IntList& kernel_size, const IntList& dilation, const IntList& padding,
               const IntList& stride) {
  Tensor out = run_raw([&] { return raw::grid::_im2col(x, kernel_size, dilation, padding, stride); });
  if (should_record({&x}))
    out = finish(out,
                 make_node<WindowNode>({&x}, true, spatial_sizes(x.sizes()), kernel_size, dilation, padding, stride));
  const int64_t rank = x.dim();
  return fw_linear(out, x, [&](const Tensor& t) {
    return window_tangent(t, rank,
                          [&](const Tensor& u) { return tg::_im2col(u, kernel_size, dilation, padding, stride); });
  });
}

Tensor _col2im(const Tensor& cols, const IntList& output_size, const IntList& kernel_size, const IntList& dilation,
               const IntList& padding, const IntList& stride) {
  Tensor out = run_raw([&] { return raw::grid::_col2im(cols, output_size, kernel_size, dilation, padding, stride); });
  if (should_record({&cols}))
    out = finish(out, make_node<WindowNode>({&cols}, false, output_size, kernel_size, dilation, padding, stride));
  const int64_t rank = cols.dim();
  return fw_linear(out, cols, [&](const Tensor& t) {
    return window_tangent(
        t, rank, [&](const Tensor& u) { return tg::_col2im(u, output_size, kernel_size, dilation, padding, stride); });
  });
}

}  // namespace autograd::ops::grid
}  // namespace tg
