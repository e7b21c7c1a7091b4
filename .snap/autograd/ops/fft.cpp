// The differentiable FFT primitives. Each is linear, so its backward is its
// adjoint, another FFT written with the public ops (so every order
// follows), and its tangent, at every Taylor order, the op itself on the
// tangent (fw_linear). With a forward transform s F (F_jk = e^(-2 pi i jk/n),
// s the norm's scale) the gradient is s F^H g (docs/AUTOGRAD.md
// "Conjugation"):
//   _fft_c2c   g -> _fft_c2c(g) in the other direction, the same scale;
//   _fft_r2c   (onesided) the real part of the inverse transform of g
//              zero-padded to the full spectrum, which is the onesided
//              inverse (_fft_c2r, after the inverse _fft_c2c over the other
//              dims) of g with the entries that stand for two halved (c2r
//              counts them twice, and ignores the imaginary parts of the
//              others, whose real parts are what the real input sees);
//   _fft_c2r   the forward real transform of g, the entries that stand for
//              two (their conjugates are implied) doubled.
// spectral_mix2d is bilinear in the spectrum x and the weights: its
// gradient in x is the same mixing of g by the conjugate weights with in
// and out swapped, in each weight the sum over the leading dims of conj(x) g
// on that weight's modes (einsum); its tangent and Taylor coefficients are
// the product rule (jet_product) over a broadcasting sum-of-products form of
// the mixing that batched tangents pass through.
#include <cmath>
#include <functional>

#include "autograd/ops/ops.h"
#include "autograd/ops/record.h"
#include "autograd/ops/taylor.h"

namespace tg {

using autograd::SavedVariable;
using autograd::variable_list;
using namespace autograd::ops_detail;

namespace {

class FftBackward final : public OpNode {
 public:
  FftBackward(const char* op, const char* name, std::function<Tensor(const Tensor&)> fn)
      : OpNode(op, name), fn_(std::move(fn)) {}
  variable_list apply(variable_list&& grads) override {
    variable_list out(1);
    if (should_compute_output(0)) out[0] = fn_(grads[0]);
    return out;
  }

 private:
  std::function<Tensor(const Tensor&)> fn_;
};

// The dims of a transform of a (possibly batched) tangent.
IntList tangent_dims(const IntList& dims, int64_t ndim) {
  IntList d;
  for (int64_t k : dims)
    d.push_back(fw_dim(k, ndim));
  return d;
}

// The highest of the (distinct) dims: the primitives' onesided dim.
int64_t onesided_dim(const IntList& dims, int64_t ndim) {
  int64_t top = -1;
  for (int64_t k : dims)
    top = std::max(top, k < 0 ? k + ndim : k);
  return top;
}

// Weights along the onesided dim `last` of a spectrum g (m entries of an
// n-point signal), shaped to broadcast against g: `scale` times `interior`
// for the entries that stand for two (1 .. (n - 1) / 2), `scale` for the
// others. Made on the device (capturable: no values from the host), of g's
// dtype (no cast in the product).
// A spectrum shorter than n / 2 + 1 entries (a short input of _fft_c2r)
// takes the first m of the weights.
Tensor onesided_weights(const Tensor& g, int64_t last, int64_t n, double interior, double scale = 1) {
  const int64_t m = g.size(last), doubled = (n - 1) / 2;  // entries 1 .. doubled stand for two
  IntList shape(size_t(g.dim() - last), 1);
  shape[0] = m;
  Tensor w = tg::full(shape, interior * scale, TensorOptions().dtype(g.dtype()).device(g.device()));
  autograd::NoGradGuard no_grad;
  w.narrow(0, 0, 1).fill_(scale);
  if (doubled + 1 < m) w.narrow(0, doubled + 1, m - doubled - 1).fill_(scale);
  return w;
}

// The factor of normalization `norm` (0, 1, 2: 1, 1/sqrt(n), 1/n) for the
// signal of t's sizes over dims.
double norm_factor(int64_t norm, const Tensor& t, const IntList& dims) {
  double n = 1;
  for (int64_t k : dims)
    n *= double(t.size(k < 0 ? k + t.dim() : k));
  return norm == 0 ? 1.0 : norm == 1 ? 1 / std::sqrt(n) : 1 / n;
}

template <class Raw, class Grad, class Tangent>
Tensor fft_op(const Tensor& self, const char* op, const char* name, Raw&& raw_fn, Grad&& grad, Tangent&& tangent) {
  Tensor out = run_raw(raw_fn);
  if (should_record({&self})) out = finish(out, make_node<FftBackward>({&self}, op, name, grad()));
  return fw_linear(out, self, tangent);
}

}  // namespace

namespace {

// The part of spectral_mix2d that weight b (rows r0 .. r0 + m1 of the
// spectrum) makes, by broadcasting products: a [..., in, h, wf], b
// [..., in, out, m1, m2] (a batched tangent padded to broadcast), the rows
// and columns off b's modes zero.
Tensor mix_part(const Tensor& a, const Tensor& b, int64_t r0, int64_t h, int64_t wf) {
  const int64_t m1 = b.size(-2), m2 = b.size(-1);
  Tensor part = sum(mul(a.narrow(-2, r0, m1).narrow(-1, 0, m2).unsqueeze(-3), b), {-4});  // [..., out, m1, m2]
  auto zeros_of = [&](const Tensor& like, int64_t dim, int64_t n) {
    IntList s = like.sizes();
    s[size_t(like.dim() + dim)] = n;
    return zeros({}, like.options()).expand(s);
  };
  std::vector<Tensor> rows;
  if (r0 > 0) rows.push_back(zeros_of(part, -2, r0));
  rows.push_back(part);
  if (r0 + m1 < h) rows.push_back(zeros_of(part, -2, h - r0 - m1));
  Tensor full = rows.size() == 1 ? part : cat(rows, -2);
  return m2 < wf ? cat({full, zeros_of(full, -1, wf - m2)}, -1) : full;
}

class SpectralMix2dBackward final : public OpNode {
 public:
  SpectralMix2dBackward() : OpNode("spectral_mix2d", "SpectralMix2dBackward") {}
  variable_list apply(variable_list&& grads) override {
    variable_list out(3);
    const Tensor& g = grads[0];
    if (should_compute_output(0)) {
      const Tensor w1 = w1_.unpack(this, "weight1"), w2 = w2_.unpack(this, "weight2");
      out[0] = spectral_mix2d(g, conj(w1).transpose(0, 1), conj(w2).transpose(0, 1));
    }
    for (int k = 1; k <= 2; ++k) {
      if (!should_compute_output(size_t(k))) continue;
      const Tensor x = x_.unpack(this, "self");
      const int64_t h = x.size(-2), in = x.size(-3), oc = g.size(-3);
      const int64_t r0 = k == 1 ? 0 : h - m1_;
      int64_t n = 1;  // the leading dims as one (given: -1 is not inferred from zero elements)
      for (int64_t d = 0; d + 3 < x.dim(); ++d)
        n *= x.size(d);
      const Tensor xk = x.narrow(-2, r0, m1_).narrow(-1, 0, m2_).reshape({n, in, m1_, m2_});
      const Tensor gk = g.narrow(-2, r0, m1_).narrow(-1, 0, m2_).reshape({n, oc, m1_, m2_});
      out[size_t(k)] = einsum("nixy,noxy->ioxy", {conj(xk), gk});
    }
    return out;
  }
  void release_variables() override {
    x_.release();
    w1_.release();
    w2_.release();
  }
  SavedVariable x_, w1_, w2_;
  int64_t m1_ = 0, m2_ = 0;
};

}  // namespace

Tensor autograd::ops::spectral_mix2d(const Tensor& x, const Tensor& w1, const Tensor& w2) {
  Tensor out = run_raw([&] { return raw::spectral_mix2d(x, w1, w2); });
  if (should_record({&x, &w1, &w2})) {
    auto node = make_node<SpectralMix2dBackward>({&x, &w1, &w2});
    if (node->needs_input_grad(1) || node->needs_input_grad(2)) node->x_ = SavedVariable(x, false);
    if (node->needs_input_grad(0)) {
      node->w1_ = SavedVariable(w1, false);
      node->w2_ = SavedVariable(w2, false);
    }
    node->m1_ = w1.size(2);
    node->m2_ = w1.size(3);
    out = finish(out, node);
  }
  if (fw_any({&x, &w1, &w2})) {
    const Tensor tx = fw_t(x), tw1 = fw_pad(fw_t(w1), x.dim() + 1), tw2 = fw_pad(fw_t(w2), x.dim() + 1);
    const int64_t h = x.size(-2), wf = x.size(-1), m1 = w1.size(2);
    fw_rule(out, [&] {
      const Bilinear top = [h, wf](const Tensor& a, const Tensor& b) { return mix_part(a, b, 0, h, wf); };
      const Bilinear bottom = [h, wf, m1](const Tensor& a, const Tensor& b) { return mix_part(a, b, h - m1, h, wf); };
      return fw_add(jet_product(x, tx, w1, tw1, top), jet_product(x, tx, w2, tw2, bottom));
    });
  }
  return out;
}

Tensor autograd::ops::_fft_c2c(const Tensor& self, const IntList& dims, int64_t normalization, bool forward) {
  return fft_op(
      self, "_fft_c2c", "FftC2CBackward", [&] { return raw::_fft_c2c(self, dims, normalization, forward); },
      [&] {
        return
            [dims, normalization, forward](const Tensor& g) { return tg::_fft_c2c(g, dims, normalization, !forward); };
      },
      [&](const Tensor& t) { return tg::_fft_c2c(t, tangent_dims(dims, self.dim()), normalization, forward); });
}

Tensor autograd::ops::_fft_r2c(const Tensor& self, const IntList& dims, int64_t normalization, bool onesided,
                               int64_t onesided_length) {
  if (!onesided && onesided_length == -1 && self.defined() && is_differentiable(self.dtype()) &&
      !is_complex(self.dtype()))
    return tg::_fft_c2c(self.to(complex_type(self.dtype())), dims, normalization, true);
  return fft_op(
      self, "_fft_r2c", "FftR2CBackward",
      [&] { return raw::_fft_r2c(self, dims, normalization, onesided, onesided_length); },
      [&] {
        const int64_t last = onesided_dim(dims, self.dim()), n = self.size(last);
        IntList others;
        for (int64_t k : dims)
          if ((k < 0 ? k + self.dim() : k) != last) others.push_back(k);
        // g holds the first entries only (onesided_length): the inverse reads
        // it as a short spectrum.
        return [others, normalization, last, n](const Tensor& g) {
          Tensor z = others.empty() ? g : tg::_fft_c2c(g, others, normalization, false);
          if (n > 2) z = tg::mul(z, onesided_weights(z, last, n, 0.5));
          return tg::_fft_c2r(z, {last}, normalization, n);
        };
      },
      [&](const Tensor& t) {
        return tg::_fft_r2c(t, tangent_dims(dims, self.dim()), normalization, onesided, onesided_length);
      });
}

Tensor autograd::ops::_fft_c2r(const Tensor& self, const IntList& dims, int64_t normalization, int64_t last_dim_size) {
  return fft_op(
      self, "_fft_c2r", "FftC2RBackward", [&] { return raw::_fft_c2r(self, dims, normalization, last_dim_size); },
      [&] {
        const int64_t last = onesided_dim(dims, self.dim()), m = self.size(last);
        return [dims, normalization, last, last_dim_size, m](const Tensor& g) {
          // A short spectrum: its entries only (a view of the transform's
          // buffer). Unscaled: the scale rides on the weights' product.
          const Tensor gi = tg::_fft_r2c(g, dims, 0, true, m < last_dim_size / 2 + 1 ? m : -1);
          const double s = norm_factor(normalization, g, dims);
          if (last_dim_size <= 2) return s == 1 ? gi : tg::mul(gi, s);  // no entry stands for two
          return tg::mul(gi, onesided_weights(gi, last, last_dim_size, 2.0, s));
        };
      },
      [&](const Tensor& t) { return tg::_fft_c2r(t, tangent_dims(dims, self.dim()), normalization, last_dim_size); });
}

}  // namespace tg
