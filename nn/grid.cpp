// The layers of grid models (include/tapegrad/nn/grid.h).
#include <tapegrad/nn/grid.h>

#include <cmath>
#include <sstream>
#include <utility>

#include <tapegrad/autograd/grad_mode.h>
#include <tapegrad/tensor/error.h>
#include <tapegrad/tensor/ops.h>

namespace tg::nn {

namespace {

// U(-bound, bound) of `sizes`, made without recording.
Tensor uniform(const IntList& sizes, double bound, TensorOptions options) {
  autograd::NoGradGuard no_grad;
  return tg::rand(sizes, options) * (2 * bound) - bound;
}

IntList expand(const IntList& v, int n, const char* module, const char* what) {
  TG_CHECK(v.size() == 1 || int64_t(v.size()) == n, module, ": ", what, " must have 1 or ", n, " entries, got ",
           shape_str(v));
  return v.size() == 1 ? IntList(std::vector<int64_t>(size_t(n), v[0])) : v;
}

std::string list(const IntList& v) { return shape_str(v); }

// A convolution's weight [lead..., kernel...] and bias [out] (undefined
// without), both U(-b, b) with b = 1 / sqrt(fan_in), fan_in = lead[1] *
// prod(kernel) (LibTorch's kaiming_uniform_ with a = sqrt(5), whose fan_in
// is the weight's dim 1 times the kernel), after the channel checks.
std::pair<Tensor, Tensor> conv_parameters(const char* name, int64_t in, int64_t out, int64_t groups,
                                          const IntList& kernel_size, int n, IntList lead, bool has_bias,
                                          TensorOptions options) {
  TG_CHECK(in > 0 && out > 0, name, ": in_channels and out_channels must be positive, got ", in, " and ", out);
  TG_CHECK(groups > 0 && in % groups == 0 && out % groups == 0, name, ": in_channels (", in, ") and out_channels (",
           out, ") must be divisible by groups (", groups, ")");
  IntList ws = std::move(lead);
  double fan_in = double(ws[1]);
  for (int64_t v : expand(kernel_size, n, name, "kernel_size")) {
    TG_CHECK(v > 0, name, ": kernel_size must be positive, got ", list(kernel_size));
    ws.push_back(v);
    fan_in *= double(v);
  }
  const double bound = 1.0 / std::sqrt(fan_in);
  return {uniform(ws, bound, options), has_bias ? uniform({out}, bound, options) : Tensor()};
}

}  // namespace

template <int N>
ConvNdImpl<N>::ConvNdImpl(int64_t in, int64_t out, IntList kernel_size, IntList stride, IntList padding,
                          IntList dilation, int64_t groups, bool has_bias, std::string padding_mode,
                          TensorOptions options)
    : Module(N == 1   ? "Conv1d"
             : N == 2 ? "Conv2d"
                      : "Conv3d"),
      stride_(std::move(stride)),
      padding_(std::move(padding)),
      dilation_(std::move(dilation)),
      groups_(groups),
      padding_mode_(std::move(padding_mode)) {
  const char* name = N == 1 ? "Conv1d" : N == 2 ? "Conv2d" : "Conv3d";
  auto [w, b] = conv_parameters(name, in, out, groups, kernel_size, N, {out, in / std::max<int64_t>(groups, 1)},
                                has_bias, options);
  TG_CHECK(padding_mode_ == "zeros" || padding_mode_ == "reflect" || padding_mode_ == "replicate" ||
               padding_mode_ == "circular",
           name, ": padding_mode must be \"zeros\", \"reflect\", \"replicate\" or \"circular\", got \"", padding_mode_,
           "\"");
  padding_ = expand(padding_, N, name, "padding");
  weight = register_parameter("weight", w);
  if (has_bias) bias = register_parameter("bias", b);
}

namespace {
template <int N>
Tensor conv_n(const Tensor& x, const Tensor& w, const Tensor& b, const IntList& s, const IntList& p, const IntList& d,
              int64_t g) {
  if constexpr (N == 1) return tg::conv1d(x, w, b, s, p, d, g);
  if constexpr (N == 2) return tg::conv2d(x, w, b, s, p, d, g);
  if constexpr (N == 3) return tg::conv3d(x, w, b, s, p, d, g);
}
}  // namespace

template <int N> Tensor ConvNdImpl<N>::forward(const Tensor& x) {
  if (padding_mode_ == "zeros") return conv_n<N>(x, weight, bias, stride_, padding_, dilation_, groups_);
  // The input padded in the mode (pairs from the last dim backwards), then an unpadded convolution.
  IntList pads;
  for (int i = N; i-- > 0;) {
    pads.push_back(padding_[size_t(i)]);
    pads.push_back(padding_[size_t(i)]);
  }
  return conv_n<N>(tg::pad(x, pads, padding_mode_), weight, bias, stride_, {0}, dilation_, groups_);
}

template <int N> std::string ConvNdImpl<N>::extra_repr() const {
  std::ostringstream s;
  s << type_name() << "(" << weight.size(1) * groups_ << ", " << weight.size(0)
    << ", kernel_size=" << list(IntList(std::vector<int64_t>(weight.sizes().begin() + 2, weight.sizes().end())))
    << ", stride=" << list(stride_) << ", padding=" << list(padding_) << ", dilation=" << list(dilation_)
    << ", groups=" << groups_ << ", bias=" << (bias.defined() ? "true" : "false") << ", padding_mode=" << padding_mode_
    << ")";
  return s.str();
}

template <int N>
ConvTransposeNdImpl<N>::ConvTransposeNdImpl(int64_t in, int64_t out, IntList kernel_size, IntList stride,
                                            IntList padding, IntList output_padding, int64_t groups, bool has_bias,
                                            IntList dilation, TensorOptions options)
    : Module(N == 1   ? "ConvTranspose1d"
             : N == 2 ? "ConvTranspose2d"
                      : "ConvTranspose3d"),
      stride_(std::move(stride)),
      padding_(std::move(padding)),
      output_padding_(std::move(output_padding)),
      dilation_(std::move(dilation)),
      groups_(groups) {
  const char* name = N == 1 ? "ConvTranspose1d" : N == 2 ? "ConvTranspose2d" : "ConvTranspose3d";
  auto [w, b] = conv_parameters(name, in, out, groups, kernel_size, N, {in, out / std::max<int64_t>(groups, 1)},
                                has_bias, options);
  weight = register_parameter("weight", w);
  if (has_bias) bias = register_parameter("bias", b);
}

template <int N> Tensor ConvTransposeNdImpl<N>::forward(const Tensor& x) {
  if constexpr (N == 1)
    return tg::conv_transpose1d(x, weight, bias, stride_, padding_, output_padding_, groups_, dilation_);
  if constexpr (N == 2)
    return tg::conv_transpose2d(x, weight, bias, stride_, padding_, output_padding_, groups_, dilation_);
  if constexpr (N == 3)
    return tg::conv_transpose3d(x, weight, bias, stride_, padding_, output_padding_, groups_, dilation_);
}

template <int N> std::string ConvTransposeNdImpl<N>::extra_repr() const {
  std::ostringstream s;
  s << type_name() << "(" << weight.size(0) << ", " << weight.size(1) * groups_
    << ", kernel_size=" << list(IntList(std::vector<int64_t>(weight.sizes().begin() + 2, weight.sizes().end())))
    << ", stride=" << list(stride_) << ", padding=" << list(padding_) << ", output_padding=" << list(output_padding_)
    << ", groups=" << groups_ << ", bias=" << (bias.defined() ? "true" : "false") << ")";
  return s.str();
}

GroupNormImpl::GroupNormImpl(int64_t num_groups, int64_t num_channels, double eps, bool affine, TensorOptions options)
    : Module("GroupNorm"), groups_(num_groups), eps_(eps) {
  TG_CHECK(num_groups > 0 && num_channels > 0 && num_channels % num_groups == 0, "GroupNorm: num_channels (",
           num_channels, ") must be a positive multiple of num_groups (", num_groups, ")");
  if (affine) {
    weight = register_parameter("weight", tg::ones({num_channels}, options));
    bias = register_parameter("bias", tg::zeros({num_channels}, options));
  }
}
Tensor GroupNormImpl::forward(const Tensor& x) { return tg::group_norm(x, groups_, weight, bias, eps_); }
std::string GroupNormImpl::extra_repr() const {
  std::ostringstream s;
  s << "GroupNorm(" << groups_ << ", eps=" << eps_ << ", affine=" << (weight.defined() ? "true" : "false") << ")";
  return s.str();
}

BatchNormImpl::BatchNormImpl(int64_t n, double eps, double momentum, bool affine, bool track, TensorOptions options,
                             const char* type_name)
    : Module(type_name), features_(n), eps_(eps), momentum_(momentum) {
  TG_CHECK(n > 0, type_name, ": num_features must be positive, got ", n);
  if (affine) {
    weight = register_parameter("weight", tg::ones({n}, options));
    bias = register_parameter("bias", tg::zeros({n}, options));
  }
  if (track) {
    running_mean = register_buffer("running_mean", tg::zeros({n}, options));
    running_var = register_buffer("running_var", tg::ones({n}, options));
    num_batches_tracked =
        register_buffer("num_batches_tracked", tg::zeros({}, TensorOptions().dtype(kInt64).device(options.device())));
  }
}
namespace {
// The spatial dims a type name such as "BatchNorm2d" declares (0 for none).
int declared_spatial_dims(const std::string& name) {
  const size_t n = name.size();
  if (n < 2 || name[n - 1] != 'd' || name[n - 2] < '1' || name[n - 2] > '3') return 0;
  return name[n - 2] - '0';
}
}  // namespace

Tensor BatchNormImpl::forward(const Tensor& x) {
  // BatchNorm1d takes [N, C] or [N, C, L], 2d [N, C, H, W], 3d [N, C, D, H, W] (as torch's).
  if (const int nd = declared_spatial_dims(type_name()))
    TG_CHECK(x.dim() == nd + 2 || (nd == 1 && x.dim() == 2), type_name(), ": expected a ",
             nd == 1   ? "2-D or 3-D input [N, C(, L)]"
             : nd == 2 ? "4-D input [N, C, H, W]"
                       : "5-D input [N, C, D, H, W]",
             ", got ", shape_str(x.sizes()));
  const bool batch_stats = is_training() || !running_mean.defined();
  if (is_training() && num_batches_tracked.defined()) {
    autograd::NoGradGuard no_grad;
    num_batches_tracked.add_(1);
  }
  return tg::batch_norm(x, running_mean, running_var, weight, bias, batch_stats, momentum_, eps_);
}
std::string BatchNormImpl::extra_repr() const {
  std::ostringstream s;
  s << type_name() << "(" << features_ << ", eps=" << eps_ << ", momentum=" << momentum_
    << ", affine=" << (weight.defined() ? "true" : "false")
    << ", track_running_stats=" << (running_mean.defined() ? "true" : "false") << ")";
  return s.str();
}

InstanceNormImpl::InstanceNormImpl(int64_t n, double eps, double momentum, bool affine, bool track,
                                   TensorOptions options, const char* type_name)
    : Module(type_name), eps_(eps), momentum_(momentum) {
  TG_CHECK(n > 0, type_name, ": num_features must be positive, got ", n);
  if (affine) {
    weight = register_parameter("weight", tg::ones({n}, options));
    bias = register_parameter("bias", tg::zeros({n}, options));
  }
  if (track) {
    running_mean = register_buffer("running_mean", tg::zeros({n}, options));
    running_var = register_buffer("running_var", tg::ones({n}, options));
  }
}
Tensor InstanceNormImpl::forward(const Tensor& x) {
  const bool input_stats = is_training() || !running_mean.defined();
  // InstanceNormNd takes [N, C, spatial...] or one unbatched sample [C, spatial...] (as torch's).
  if (const int nd = declared_spatial_dims(type_name())) {
    TG_CHECK(x.dim() == nd + 2 || x.dim() == nd + 1, type_name(), ": expected a ", nd + 2, "-D input [N, C, ...] or a ",
             nd + 1, "-D unbatched one [C, ...], got ", shape_str(x.sizes()));
    if (x.dim() == nd + 1)
      return tg::instance_norm(x.unsqueeze(0), running_mean, running_var, weight, bias, input_stats, momentum_, eps_)
          .squeeze(0);
  }
  return tg::instance_norm(x, running_mean, running_var, weight, bias, input_stats, momentum_, eps_);
}

UpsampleImpl::UpsampleImpl(IntList size, std::vector<double> scale_factor, std::string mode,
                           std::optional<bool> align_corners)
    : Module("Upsample"),
      size_(std::move(size)),
      scale_(std::move(scale_factor)),
      mode_(std::move(mode)),
      align_corners_(align_corners) {}
Tensor UpsampleImpl::forward(const Tensor& x) { return tg::interpolate(x, size_, scale_, mode_, align_corners_); }

template <int N>
AvgPoolNdImpl<N>::AvgPoolNdImpl(IntList kernel_size, IntList stride, IntList padding, bool ceil_mode,
                                bool count_include_pad, std::optional<int64_t> divisor_override)
    : Module(N == 1   ? "AvgPool1d"
             : N == 2 ? "AvgPool2d"
                      : "AvgPool3d"),
      k_(std::move(kernel_size)),
      s_(std::move(stride)),
      p_(std::move(padding)),
      ceil_(ceil_mode),
      include_pad_(count_include_pad),
      divisor_(divisor_override) {}
template <int N> Tensor AvgPoolNdImpl<N>::forward(const Tensor& x) {
  if constexpr (N == 1) {
    TG_CHECK(!divisor_, "AvgPool1d: no divisor_override (as PyTorch's avg_pool1d)");
    return tg::avg_pool1d(x, k_, s_, p_, ceil_, include_pad_);
  }
  if constexpr (N == 2) return tg::avg_pool2d(x, k_, s_, p_, ceil_, include_pad_, divisor_);
  if constexpr (N == 3) return tg::avg_pool3d(x, k_, s_, p_, ceil_, include_pad_, divisor_);
}

template <int N>
MaxPoolNdImpl<N>::MaxPoolNdImpl(IntList kernel_size, IntList stride, IntList padding, IntList dilation, bool ceil_mode)
    : Module(N == 1   ? "MaxPool1d"
             : N == 2 ? "MaxPool2d"
                      : "MaxPool3d"),
      k_(std::move(kernel_size)),
      s_(std::move(stride)),
      p_(std::move(padding)),
      d_(std::move(dilation)),
      ceil_(ceil_mode) {}
template <int N> TensorPair MaxPoolNdImpl<N>::forward_with_indices(const Tensor& x) {
  if constexpr (N == 1) return tg::max_pool1d_with_indices(x, k_, s_, p_, d_, ceil_);
  if constexpr (N == 2) return tg::max_pool2d_with_indices(x, k_, s_, p_, d_, ceil_);
  if constexpr (N == 3) return tg::max_pool3d_with_indices(x, k_, s_, p_, d_, ceil_);
}
template <int N> Tensor MaxPoolNdImpl<N>::forward(const Tensor& x) { return std::get<0>(forward_with_indices(x)); }

template <int N>
AdaptiveAvgPoolNdImpl<N>::AdaptiveAvgPoolNdImpl(IntList output_size)
    : Module(N == 1   ? "AdaptiveAvgPool1d"
             : N == 2 ? "AdaptiveAvgPool2d"
                      : "AdaptiveAvgPool3d"),
      out_(std::move(output_size)) {}
template <int N> Tensor AdaptiveAvgPoolNdImpl<N>::forward(const Tensor& x) {
  if constexpr (N == 1) return tg::adaptive_avg_pool1d(x, out_);
  if constexpr (N == 2) return tg::adaptive_avg_pool2d(x, out_);
  if constexpr (N == 3) return tg::adaptive_avg_pool3d(x, out_);
}

PixelShuffleImpl::PixelShuffleImpl(int64_t r) : Module("PixelShuffle"), r_(r) {}
Tensor PixelShuffleImpl::forward(const Tensor& x) { return tg::pixel_shuffle(x, r_); }
PixelUnshuffleImpl::PixelUnshuffleImpl(int64_t r) : Module("PixelUnshuffle"), r_(r) {}
Tensor PixelUnshuffleImpl::forward(const Tensor& x) { return tg::pixel_unshuffle(x, r_); }

template class ConvNdImpl<1>;
template class ConvNdImpl<2>;
template class ConvNdImpl<3>;
template class ConvTransposeNdImpl<1>;
template class ConvTransposeNdImpl<2>;
template class ConvTransposeNdImpl<3>;
template class AvgPoolNdImpl<1>;
template class AvgPoolNdImpl<2>;
template class AvgPoolNdImpl<3>;
template class MaxPoolNdImpl<1>;
template class MaxPoolNdImpl<2>;
template class MaxPoolNdImpl<3>;
template class AdaptiveAvgPoolNdImpl<1>;
template class AdaptiveAvgPoolNdImpl<2>;
template class AdaptiveAvgPoolNdImpl<3>;

}  // namespace tg::nn
