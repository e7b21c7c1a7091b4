#include <tapegrad/nn/fno.h>

#include <sstream>

#include <tapegrad/autograd/grad_mode.h>
#include <tapegrad/tensor/error.h>
#include <tapegrad/tensor/fft.h>
#include <tapegrad/tensor/ops.h>

namespace tg::nn {

namespace {

// Complex weights, parts U(0, 1) scaled by 1 / (in out).
Tensor spectral_weight(const IntList& sizes, int64_t in, int64_t out, const TensorOptions& options) {
  TG_CHECK(is_floating_point(options.dtype()),
           "SpectralConv: the options' dtype must be Float32 or Float64 (the "
           "weights are its complex dtype), got ",
           options.dtype());
  autograd::NoGradGuard no_grad;
  const double scale = 1.0 / double(in * out);
  return tg::complex_from(tg::rand(sizes, options) * scale, tg::rand(sizes, options) * scale);
}

void check_channels(int64_t in, int64_t out, const char* op) {
  TG_CHECK(in > 0 && out > 0, op, ": in_channels and out_channels must be positive, got ", in, " and ", out);
}

// x [B, in, spatial...] with `dims` spatial dims and `in` channels.
// Or [in, B, spatial...] (channel_major); real, of the weights' parts'
// dtype.
void check_input(const Tensor& x, int64_t dims, int64_t in, bool channel_major, const Tensor& weight, const char* op) {
  TG_CHECK(x.defined() && x.dim() == 2 + dims && x.size(channel_major ? 0 : 1) == in, op, ": expected an input ",
           channel_major ? "[" : "[batch, ", in, channel_major ? ", batch" : "", dims == 1 ? ", n]" : ", h, w]",
           ", got ", x.defined() ? shape_str(x.sizes()) : std::string("undefined"));
  const ScalarType want = real_type(weight.dtype());
  TG_CHECK(x.dtype() == want, op, ": expected a ", want, " input (the weights are ", weight.dtype(), "), got ",
           x.dtype(), "; convert the input with .to(", want, ")",
           is_floating_point(x.dtype()) ? std::string(" or the module with .to(") + to_string(x.dtype()) + ")"
                                        : std::string());
}

}  // namespace

SpectralConv1dImpl::SpectralConv1dImpl(int64_t in, int64_t out, int64_t modes, TensorOptions options)
    : Module("SpectralConv1d"), in_(in), out_(out), modes_(modes) {
  check_channels(in, out, "SpectralConv1d");
  TG_CHECK(modes > 0, "SpectralConv1d: modes must be positive, got ", modes);
  weight = register_parameter("weight", spectral_weight({in, out, modes}, in, out, options));
}

Tensor SpectralConv1dImpl::forward(const Tensor& x) { return apply(x, false); }
Tensor SpectralConv1dImpl::forward_channel_major(const Tensor& x) { return apply(x, true); }

Tensor SpectralConv1dImpl::apply(const Tensor& x, bool channel_major) {
  check_input(x, 1, in_, channel_major, weight, "SpectralConv1d");
  const int64_t n = x.size(2), half = n / 2 + 1;
  TG_CHECK(modes_ <= half, "SpectralConv1d: ", modes_, " modes need a grid of at least ", 2 * (modes_ - 1),
           " points, got ", n);
  Tensor xf = tg::_fft_r2c(x, {2}, 0, true, modes_);  // [B, in, modes]: rfft's first modes entries
  Tensor mixed = tg::einsum(channel_major ? "ibx,iox->obx" : "bix,iox->box", {xf, weight});
  return fft::irfft(mixed, n);  // the modes past modes_ zero (a short spectrum)
}

std::string SpectralConv1dImpl::extra_repr() const {
  std::ostringstream s;
  s << "SpectralConv1d(" << in_ << ", " << out_ << ", modes=" << modes_ << ")";
  return s.str();
}

SpectralConv2dImpl::SpectralConv2dImpl(int64_t in, int64_t out, int64_t modes1, int64_t modes2, TensorOptions options)
    : Module("SpectralConv2d"), in_(in), out_(out), m1_(modes1), m2_(modes2) {
  check_channels(in, out, "SpectralConv2d");
  TG_CHECK(modes1 > 0 && modes2 > 0, "SpectralConv2d: modes must be positive, got ", modes1, " and ", modes2);
  weight1 = register_parameter("weight1", spectral_weight({in, out, modes1, modes2}, in, out, options));
  weight2 = register_parameter("weight2", spectral_weight({in, out, modes1, modes2}, in, out, options));
}

Tensor SpectralConv2dImpl::forward(const Tensor& x) { return apply(x, false); }
Tensor SpectralConv2dImpl::forward_channel_major(const Tensor& x) { return apply(x, true); }

Tensor SpectralConv2dImpl::apply(const Tensor& x, bool channel_major) {
  check_input(x, 2, in_, channel_major, weight1, "SpectralConv2d");
  const int64_t h = x.size(2), w = x.size(3), half = w / 2 + 1;
  TG_CHECK(2 * m1_ <= h && m2_ <= half, "SpectralConv2d: modes (", m1_, ", ", m2_, ") need a grid of at least ",
           2 * m1_, " x ", 2 * (m2_ - 1), ", got ", h, " x ", w);
  // rfft2 and irfft2 one dim at a time, the columns past modes2 dropped
  // between: the transforms along h run on modes2 columns instead of
  // w / 2 + 1, stored by columns (h last: cuFFT's layout). Between them
  // spectral_mix2d mixes the kept modes and zeroes the rows between them in
  // one op (its result in the input's memory order: by columns, and
  // channel-major when the input is); irfft along w takes the modes2
  // columns as a short spectrum (the others zero). The same sums as rfft2,
  // the mixing and irfft2.
  // The first modes2 entries of rfft along w (_fft_r2c's onesided_length:
  // its gradient is a short C2R, no zero-padded embedding).
  Tensor cols = fft::fft(tg::_fft_r2c(x, {3}, 0, true, m2_).transpose(2, 3));  // [.., modes2, h]
  Tensor spec = cols.transpose(2, 3);                                          // [.., h, modes2]
  Tensor mixed = tg::spectral_mix2d(channel_major ? spec.transpose(0, 1) : spec, weight1, weight2);
  if (channel_major) mixed = mixed.transpose(0, 1);
  return fft::irfft(fft::ifft(mixed.transpose(2, 3)).transpose(2, 3), w, 3);
}

std::string SpectralConv2dImpl::extra_repr() const {
  std::ostringstream s;
  s << "SpectralConv2d(" << in_ << ", " << out_ << ", modes=(" << m1_ << ", " << m2_ << "))";
  return s.str();
}

FNOImpl::FNOImpl(FNOOptions o) : Module("FNO"), o_(std::move(o)) {
  const int64_t dims = int64_t(o_.modes.size());
  TG_CHECK(dims == 1 || dims == 2, "FNO: modes gives the modes per spatial dim, one or two of them, got ",
           shape_str(o_.modes));
  TG_CHECK(o_.in_channels > 0 && o_.out_channels > 0 && o_.width > 0 && o_.layers > 0 && o_.projection > 0,
           "FNO: in_channels, out_channels, width, layers and projection must be positive");
  lift = std::make_shared<LinearImpl>(o_.in_channels + dims, o_.width, true, o_.options);
  register_module("lift", lift);
  for (int64_t l = 0; l < o_.layers; ++l) {
    std::shared_ptr<Module> conv;
    if (dims == 1) conv = std::make_shared<SpectralConv1dImpl>(o_.width, o_.width, o_.modes[0], o_.options);
    else conv = std::make_shared<SpectralConv2dImpl>(o_.width, o_.width, o_.modes[0], o_.modes[1], o_.options);
    register_module("spectral" + std::to_string(l), conv);
    spectral.push_back(conv);
    auto w = std::make_shared<LinearImpl>(o_.width, o_.width, true, o_.options);
    register_module("pointwise" + std::to_string(l), w);
    pointwise.push_back(w);
  }
  proj1 = std::make_shared<LinearImpl>(o_.width, o_.projection, true, o_.options);
  register_module("proj1", proj1);
  proj2 = std::make_shared<LinearImpl>(o_.projection, o_.out_channels, true, o_.options);
  register_module("proj2", proj2);
}

Tensor FNOImpl::forward(const Tensor& x) {
  const int64_t dims = int64_t(o_.modes.size());
  TG_CHECK(x.defined() && x.dim() == 2 + dims && x.size(-1) == o_.in_channels, "FNO: expected an input [batch, ",
           dims == 1 ? "n" : "h, w", ", ", o_.in_channels, "], got ",
           x.defined() ? shape_str(x.sizes()) : std::string("undefined"));
  TG_CHECK(x.dtype() == lift->weight.dtype(), "FNO: expected a ", lift->weight.dtype(),
           " input (the parameters' dtype), got ", x.dtype(), "; convert the input with .to(", lift->weight.dtype(),
           ")",
           is_floating_point(x.dtype()) ? std::string(" or the model with .to(") + to_string(x.dtype()) + ")"
                                        : std::string());
  // The network runs channel-major, [channels, B, spatial...]: the FFTs
  // transform the trailing dims, and each pointwise linear map is one GEMM of
  // its weight and the [channels, B * points] matrix, whose weight gradient
  // is one GEMM too, its bias gradient a sum along rows. Nothing is
  // transposed but the input and the output.
  IntList to_channels{dims + 1}, to_last;
  for (int64_t d = 0; d <= dims; ++d)
    to_channels.push_back(d);
  for (int64_t d = 1; d <= dims + 1; ++d)
    to_last.push_back(d);
  to_last.push_back(0);
  std::vector<Tensor> parts{x.permute(to_channels)};  // [in, B, spatial...]
  const TensorOptions opt = TensorOptions().dtype(x.dtype()).device(x.device());
  IntList coord_shape = parts[0].sizes();
  coord_shape[0] = 1;
  // The grid coordinates in [0, 1], appended to each point's channels.
  for (int64_t d = 0; d < dims; ++d) {
    const int64_t n = x.size(1 + d);
    // 0, 1, ..., n - 1 by a cumulative sum on the device (capturable: no
    // values from the host).
    Tensor coord = (tg::ones({n}, opt).cumsum(0) - 1.0) / double(std::max<int64_t>(n - 1, 1));
    IntList view(size_t(dims + 2), 1);
    view[size_t(2 + d)] = n;
    parts.push_back(coord.view(view).expand(coord_shape));
  }
  IntList grid(x.sizes().begin(), x.sizes().end() - 1);  // [B, spatial...]
  int64_t points = 1;                                    // B * points, explicit (-1 is not inferred for a zero batch)
  for (int64_t s : grid)
    points *= s;
  // lin's map of each point of t [c, B, spatial...]: W t + b.
  auto pointwise_map = [&](const LinearImpl& lin, const Tensor& t) {
    IntList shape{lin.weight.size(0)};
    shape.insert(shape.end(), grid.begin(), grid.end());
    Tensor y = tg::mm(lin.weight, t.reshape({t.size(0), points}));  // [out, B * points]
    if (lin.bias.defined()) y = y + lin.bias.view({-1, 1});
    return y.view(shape);
  };
  auto spectral_map = [&](size_t l, const Tensor& t) {
    if (auto* c = dynamic_cast<SpectralConv1dImpl*>(spectral[l].get())) return c->forward_channel_major(t);
    if (auto* c = dynamic_cast<SpectralConv2dImpl*>(spectral[l].get())) return c->forward_channel_major(t);
    // A module put there by the user: its forward takes [B, c, spatial...].
    return spectral[l]->forward(t.transpose(0, 1)).transpose(0, 1);
  };
  Tensor v = pointwise_map(*lift, tg::cat(parts, 0));  // [width, B, spatial...]
  for (int64_t l = 0; l < o_.layers; ++l) {
    v = spectral_map(size_t(l), v) + pointwise_map(*pointwise[size_t(l)], v);
    if (l + 1 < o_.layers) v = tg::gelu(v);
  }
  return pointwise_map(*proj2, tg::gelu(pointwise_map(*proj1, v))).permute(to_last);  // [B, spatial..., out]
}

std::string FNOImpl::extra_repr() const {
  std::ostringstream s;
  s << "FNO(dims=" << o_.modes.size() << ", width=" << o_.width << ", modes=" << shape_str(o_.modes)
    << ", layers=" << o_.layers << ")";
  return s.str();
}

}  // namespace tg::nn
