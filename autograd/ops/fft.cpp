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
#include <functional>

#include "autograd/ops/ops.h"
#include "autograd/ops/record.h"

namespace tg {

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
// n-point signal), shaped to broadcast against g: `interior` for the entries
// that stand for two (1 .. (n - 1) / 2), 1 for the others. Made on the device
// (capturable: no values from the host).
Tensor onesided_weights(const Tensor& g, int64_t last, int64_t n, double interior) {
  const int64_t m = g.size(last), doubled = n - m;
  IntList shape(size_t(g.dim() - last), 1);
  shape[0] = m;
  Tensor w = tg::full(shape, interior, TensorOptions().dtype(real_type(g.dtype())).device(g.device()));
  autograd::NoGradGuard no_grad;
  w.narrow(0, 0, 1).fill_(1.0);
  if (doubled + 1 < m) w.narrow(0, doubled + 1, m - doubled - 1).fill_(1.0);
  return w;
}

template <class Raw, class Grad, class Tangent>
Tensor fft_op(const Tensor& self, const char* op, const char* name, Raw&& raw_fn, Grad&& grad, Tangent&& tangent) {
  Tensor out = run_raw(raw_fn);
  if (should_record({&self})) out = finish(out, make_node<FftBackward>({&self}, op, name, grad()));
  return fw_linear(out, self, tangent);
}

}  // namespace

Tensor autograd::ops::_fft_c2c(const Tensor& self, const IntList& dims, int64_t normalization, bool forward) {
  return fft_op(
      self, "_fft_c2c", "FftC2CBackward", [&] { return raw::_fft_c2c(self, dims, normalization, forward); },
      [&] {
        return
            [dims, normalization, forward](const Tensor& g) { return tg::_fft_c2c(g, dims, normalization, !forward); };
      },
      [&](const Tensor& t) { return tg::_fft_c2c(t, tangent_dims(dims, self.dim()), normalization, forward); });
}

Tensor autograd::ops::_fft_r2c(const Tensor& self, const IntList& dims, int64_t normalization, bool onesided) {
  if (!onesided && self.defined() && is_differentiable(self.dtype()) && !is_complex(self.dtype()))
    return tg::_fft_c2c(self.to(complex_type(self.dtype())), dims, normalization, true);
  return fft_op(
      self, "_fft_r2c", "FftR2CBackward", [&] { return raw::_fft_r2c(self, dims, normalization, onesided); },
      [&] {
        const int64_t last = onesided_dim(dims, self.dim()), n = self.size(last);
        IntList others;
        for (int64_t k : dims)
          if ((k < 0 ? k + self.dim() : k) != last) others.push_back(k);
        return [others, normalization, last, n](const Tensor& g) {
          Tensor z = others.empty() ? g : tg::_fft_c2c(g, others, normalization, false);
          if (n > 2) z = tg::mul(z, onesided_weights(z, last, n, 0.5));
          return tg::_fft_c2r(z, {last}, normalization, n);
        };
      },
      [&](const Tensor& t) { return tg::_fft_r2c(t, tangent_dims(dims, self.dim()), normalization, onesided); });
}

Tensor autograd::ops::_fft_c2r(const Tensor& self, const IntList& dims, int64_t normalization, int64_t last_dim_size) {
  return fft_op(
      self, "_fft_c2r", "FftC2RBackward", [&] { return raw::_fft_c2r(self, dims, normalization, last_dim_size); },
      [&] {
        const int64_t last = onesided_dim(dims, self.dim());
        return [dims, normalization, last, last_dim_size](const Tensor& g) {
          Tensor gi = tg::_fft_r2c(g, dims, normalization, true);
          if (last_dim_size <= 2) return gi;  // no entry stands for two
          return tg::mul(gi, onesided_weights(gi, last, last_dim_size, 2.0));
        };
      },
      [&](const Tensor& t) { return tg::_fft_c2r(t, tangent_dims(dims, self.dim()), normalization, last_dim_size); });
}

}  // namespace tg
