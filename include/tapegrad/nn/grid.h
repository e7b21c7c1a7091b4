// The layers of grid models (docs/NN.md "Grid layers"): convolutions,
// transposed convolutions, normalizations, pooling, resampling and
// shuffles, named and initialized as LibTorch's, over the grid ops of
// <tapegrad/tensor/grid.h> (tg::nn::functional exports those too). Their
// parameters and buffers are in state_dict() and so in nn::save / nn::load.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <tapegrad/nn/module.h>
#include <tapegrad/nn/options.h>
#include <tapegrad/tensor/grid.h>

namespace tg::nn {

/// Convolution over N = 1, 2, 3 spatial dims (Conv1d, Conv2d, Conv3d):
/// weight [out, in / groups, kernel...], bias [out], both U(-b, b) with b =
/// 1 / sqrt(in / groups * prod(kernel)) (LibTorch's kaiming_uniform_ with
/// a = sqrt(5)). padding_mode "zeros", "reflect", "replicate" or
/// "circular" (the input padded by `padding` in that mode first).
template <int N> class ConvNdImpl : public Module {
 public:
  /// The layer; kernel_size, stride, padding and dilation hold N values or one.
  ConvNdImpl(int64_t in_channels, int64_t out_channels, IntList kernel_size, IntList stride = {1},
             IntList padding = {0}, IntList dilation = {1}, int64_t groups = 1, bool bias = true,
             std::string padding_mode = "zeros", TensorOptions options = TensorOptions());
  /// From LibTorch's options.
  explicit ConvNdImpl(const ConvNdOptions<N>& o)
      : ConvNdImpl(o.in_channels, o.out_channels, o.kernel_size, o.stride, o.padding, o.dilation, o.groups, o.bias,
                   o.padding_mode) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Tensor weight;  ///< [out, in / groups, kernel...]
  Tensor bias;    ///< [out], undefined when bias = false

 private:
  IntList stride_, padding_, dilation_;
  int64_t groups_;
  std::string padding_mode_;
};
using Conv1dImpl = ConvNdImpl<1>;
using Conv2dImpl = ConvNdImpl<2>;
using Conv3dImpl = ConvNdImpl<3>;
/// The holder of ConvNdImpl<N> (LibTorch's ConvNd), with its constructor's braced lists.
template <int N> class ConvNd : public ModuleHolder<ConvNdImpl<N>> {
 public:
  using ModuleHolder<ConvNdImpl<N>>::ModuleHolder;
  /// ConvNdImpl<N>'s constructor.
  ConvNd(int64_t in_channels, int64_t out_channels, IntList kernel_size, IntList stride = {1}, IntList padding = {0},
         IntList dilation = {1}, int64_t groups = 1, bool bias = true, std::string padding_mode = "zeros",
         TensorOptions options = TensorOptions())
      : ModuleHolder<ConvNdImpl<N>>(std::make_shared<ConvNdImpl<N>>(in_channels, out_channels, kernel_size, stride,
                                                                    padding, dilation, groups, bias,
                                                                    std::move(padding_mode), options)) {}
  /// ConvNdImpl<N>'s options constructor.
  explicit ConvNd(const ConvNdOptions<N>& o) : ModuleHolder<ConvNdImpl<N>>(std::make_shared<ConvNdImpl<N>>(o)) {}
};
using Conv1d = ConvNd<1>;  ///< the holder
using Conv2d = ConvNd<2>;  ///< the holder
using Conv3d = ConvNd<3>;  ///< the holder

/// Transposed convolution (ConvTranspose1d/2d/3d): weight [in, out / groups,
/// kernel...], initialized as LibTorch's (b = 1 / sqrt(out / groups *
/// prod(kernel))).
template <int N> class ConvTransposeNdImpl : public Module {
 public:
  /// The layer; geometry lists hold N values or one.
  ConvTransposeNdImpl(int64_t in_channels, int64_t out_channels, IntList kernel_size, IntList stride = {1},
                      IntList padding = {0}, IntList output_padding = {0}, int64_t groups = 1, bool bias = true,
                      IntList dilation = {1}, TensorOptions options = TensorOptions());
  /// From LibTorch's options.
  explicit ConvTransposeNdImpl(const ConvTransposeNdOptions<N>& o)
      : ConvTransposeNdImpl(o.in_channels, o.out_channels, o.kernel_size, o.stride, o.padding, o.output_padding,
                            o.groups, o.bias, o.dilation) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Tensor weight;  ///< [in, out / groups, kernel...]
  Tensor bias;    ///< [out], undefined when bias = false

 private:
  IntList stride_, padding_, output_padding_, dilation_;
  int64_t groups_;
};
using ConvTranspose1dImpl = ConvTransposeNdImpl<1>;
using ConvTranspose2dImpl = ConvTransposeNdImpl<2>;
using ConvTranspose3dImpl = ConvTransposeNdImpl<3>;
/// The holder of ConvTransposeNdImpl<N> (LibTorch's ConvTransposeNd), with its constructor's braced lists.
template <int N> class ConvTransposeNd : public ModuleHolder<ConvTransposeNdImpl<N>> {
 public:
  using ModuleHolder<ConvTransposeNdImpl<N>>::ModuleHolder;
  /// ConvTransposeNdImpl<N>'s constructor.
  ConvTransposeNd(int64_t in_channels, int64_t out_channels, IntList kernel_size, IntList stride = {1},
                  IntList padding = {0}, IntList output_padding = {0}, int64_t groups = 1, bool bias = true,
                  IntList dilation = {1}, TensorOptions options = TensorOptions())
      : ModuleHolder<ConvTransposeNdImpl<N>>(std::make_shared<ConvTransposeNdImpl<N>>(
            in_channels, out_channels, kernel_size, stride, padding, output_padding, groups, bias, dilation, options)) {
  }
  /// ConvTransposeNdImpl<N>'s options constructor.
  explicit ConvTransposeNd(const ConvTransposeNdOptions<N>& o)
      : ModuleHolder<ConvTransposeNdImpl<N>>(std::make_shared<ConvTransposeNdImpl<N>>(o)) {}
};
using ConvTranspose1d = ConvTransposeNd<1>;  ///< the holder
using ConvTranspose2d = ConvTransposeNd<2>;  ///< the holder
using ConvTranspose3d = ConvTransposeNd<3>;  ///< the holder

/// group_norm over num_groups groups of num_channels; weight ones, bias zeros (affine).
class GroupNormImpl : public Module {
 public:
  /// num_channels must be a multiple of num_groups.
  GroupNormImpl(int64_t num_groups, int64_t num_channels, double eps = 1e-5, bool affine = true,
                TensorOptions options = TensorOptions());
  /// From LibTorch's options.
  explicit GroupNormImpl(const GroupNormOptions& o) : GroupNormImpl(o.num_groups, o.num_channels, o.eps, o.affine) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Tensor weight;  ///< [num_channels] ones, undefined without affine
  Tensor bias;    ///< [num_channels] zeros, undefined without affine

 private:
  int64_t groups_;
  double eps_;
};
TG_MODULE(GroupNorm);

/// Batch normalization (BatchNorm1d/2d/3d share it: the input's rank is not
/// checked beyond [N, C, ...]); buffers running_mean (zeros), running_var
/// (ones) and num_batches_tracked (Int64) when track_running_stats.
/// Training mode (train()) normalizes with the batch's statistics and
/// updates the running ones; eval() uses the running ones.
class BatchNormImpl : public Module {
 public:
  /// The layer over num_features channels (type_name: "BatchNorm2d", ...).
  explicit BatchNormImpl(int64_t num_features, double eps = 1e-5, double momentum = 0.1, bool affine = true,
                         bool track_running_stats = true, TensorOptions options = TensorOptions(),
                         const char* type_name = "BatchNorm");
  /// From LibTorch's options.
  explicit BatchNormImpl(const BatchNormOptions& o)
      : BatchNormImpl(o.num_features, o.eps, o.momentum, o.affine, o.track_running_stats) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Tensor weight;               ///< [num_features] ones, undefined without affine
  Tensor bias;                 ///< [num_features] zeros, undefined without affine
  Tensor running_mean;         ///< buffer [num_features] zeros, undefined without tracking
  Tensor running_var;          ///< buffer [num_features] ones, undefined without tracking
  Tensor num_batches_tracked;  ///< buffer, Int64 0-dim: training calls so far

 private:
  int64_t features_;
  double eps_, momentum_;
};
TG_MODULE(BatchNorm);
/// BatchNorm over N spatial dims ([N, C] or [N, C, L] for N = 1).
template <int N> struct BatchNormNdImpl : BatchNormImpl {
  /// As BatchNorm's.
  explicit BatchNormNdImpl(int64_t n, double eps = 1e-5, double momentum = 0.1, bool affine = true, bool track = true,
                           TensorOptions o = TensorOptions())
      : BatchNormImpl(n, eps, momentum, affine, track, o,
                      N == 1   ? "BatchNorm1d"
                      : N == 2 ? "BatchNorm2d"
                               : "BatchNorm3d") {}
  /// From LibTorch's options.
  explicit BatchNormNdImpl(const BatchNormOptions& o)
      : BatchNormNdImpl(o.num_features, o.eps, o.momentum, o.affine, o.track_running_stats) {}
};
using BatchNorm1dImpl = BatchNormNdImpl<1>;
using BatchNorm2dImpl = BatchNormNdImpl<2>;
using BatchNorm3dImpl = BatchNormNdImpl<3>;
TG_MODULE(BatchNorm1d);
TG_MODULE(BatchNorm2d);
TG_MODULE(BatchNorm3d);

/// Instance normalization (InstanceNorm1d/2d/3d): LibTorch's defaults
/// affine = false, track_running_stats = false.
class InstanceNormImpl : public Module {
 public:
  /// The layer over num_features channels (type_name: "InstanceNorm2d", ...).
  explicit InstanceNormImpl(int64_t num_features, double eps = 1e-5, double momentum = 0.1, bool affine = false,
                            bool track_running_stats = false, TensorOptions options = TensorOptions(),
                            const char* type_name = "InstanceNorm");
  /// From LibTorch's options.
  explicit InstanceNormImpl(const InstanceNormOptions& o)
      : InstanceNormImpl(o.num_features, o.eps, o.momentum, o.affine, o.track_running_stats) {}
  Tensor forward(const Tensor& x) override;
  Tensor weight;        ///< [num_features] ones, undefined without affine
  Tensor bias;          ///< [num_features] zeros, undefined without affine
  Tensor running_mean;  ///< buffer [num_features], undefined without tracking
  Tensor running_var;   ///< buffer [num_features], undefined without tracking

 private:
  double eps_, momentum_;
};
TG_MODULE(InstanceNorm);
/// InstanceNorm over N spatial dims.
template <int N> struct InstanceNormNdImpl : InstanceNormImpl {
  /// As InstanceNorm's.
  explicit InstanceNormNdImpl(int64_t n, double eps = 1e-5, double momentum = 0.1, bool affine = false,
                              bool track = false, TensorOptions o = TensorOptions())
      : InstanceNormImpl(n, eps, momentum, affine, track, o,
                         N == 1   ? "InstanceNorm1d"
                         : N == 2 ? "InstanceNorm2d"
                                  : "InstanceNorm3d") {}
  /// From LibTorch's options.
  explicit InstanceNormNdImpl(const InstanceNormOptions& o)
      : InstanceNormNdImpl(o.num_features, o.eps, o.momentum, o.affine, o.track_running_stats) {}
};
using InstanceNorm1dImpl = InstanceNormNdImpl<1>;
using InstanceNorm2dImpl = InstanceNormNdImpl<2>;
using InstanceNorm3dImpl = InstanceNormNdImpl<3>;
TG_MODULE(InstanceNorm1d);
TG_MODULE(InstanceNorm2d);
TG_MODULE(InstanceNorm3d);

/// interpolate with fixed arguments (nn.Upsample).
class UpsampleImpl : public Module {
 public:
  /// interpolate's arguments: size or scale_factor, mode, align_corners.
  explicit UpsampleImpl(IntList size = {}, std::vector<double> scale_factor = {}, std::string mode = "nearest",
                        std::optional<bool> align_corners = std::nullopt);
  /// From LibTorch's options.
  explicit UpsampleImpl(const UpsampleOptions& o) : UpsampleImpl(o.size, o.scale_factor, o.mode, o.align_corners) {}
  Tensor forward(const Tensor& x) override;

 private:
  IntList size_;
  std::vector<double> scale_;
  std::string mode_;
  std::optional<bool> align_corners_;
};
/// The holder of UpsampleImpl, with its constructor's braced lists.
class Upsample : public ModuleHolder<UpsampleImpl> {
 public:
  using ModuleHolder<UpsampleImpl>::ModuleHolder;
  /// UpsampleImpl's constructor.
  Upsample(IntList size, std::vector<double> scale_factor = {}, std::string mode = "nearest",
           std::optional<bool> align_corners = std::nullopt)
      : ModuleHolder<UpsampleImpl>(
            std::make_shared<UpsampleImpl>(size, std::move(scale_factor), std::move(mode), align_corners)) {}
  /// UpsampleImpl's options constructor.
  explicit Upsample(const UpsampleOptions& o) : ModuleHolder<UpsampleImpl>(std::make_shared<UpsampleImpl>(o)) {}
};

/// Average pooling over N spatial dims (AvgPool1d/2d/3d), batched or not.
template <int N> class AvgPoolNdImpl : public Module {
 public:
  /// avg_poolNd's arguments (stride {}: the kernel size).
  explicit AvgPoolNdImpl(IntList kernel_size, IntList stride = {}, IntList padding = {0}, bool ceil_mode = false,
                         bool count_include_pad = true, std::optional<int64_t> divisor_override = std::nullopt);
  /// From LibTorch's options (a template, so that a braced list still means kernel_size).
  template <class O, std::enable_if_t<std::is_same_v<O, AvgPoolNdOptions<N>>, int> = 0>
  explicit AvgPoolNdImpl(const O& o)
      : AvgPoolNdImpl(o.kernel_size, o.stride, o.padding, o.ceil_mode, o.count_include_pad, o.divisor_override) {}
  Tensor forward(const Tensor& x) override;

 private:
  IntList k_, s_, p_;
  bool ceil_, include_pad_;
  std::optional<int64_t> divisor_;
};
using AvgPool1dImpl = AvgPoolNdImpl<1>;
using AvgPool2dImpl = AvgPoolNdImpl<2>;
using AvgPool3dImpl = AvgPoolNdImpl<3>;
/// The holder of AvgPoolNdImpl<N> (LibTorch's AvgPoolNd), with its constructor's braced lists.
template <int N> class AvgPoolNd : public ModuleHolder<AvgPoolNdImpl<N>> {
 public:
  using ModuleHolder<AvgPoolNdImpl<N>>::ModuleHolder;
  /// AvgPoolNdImpl<N>'s constructor.
  AvgPoolNd(IntList kernel_size, IntList stride = {}, IntList padding = {0}, bool ceil_mode = false,
            bool count_include_pad = true, std::optional<int64_t> divisor_override = std::nullopt)
      : ModuleHolder<AvgPoolNdImpl<N>>(std::make_shared<AvgPoolNdImpl<N>>(kernel_size, stride, padding, ceil_mode,
                                                                          count_include_pad, divisor_override)) {}
};
using AvgPool1d = AvgPoolNd<1>;  ///< the holder
using AvgPool2d = AvgPoolNd<2>;  ///< the holder
using AvgPool3d = AvgPoolNd<3>;  ///< the holder

/// Max pooling over N spatial dims (MaxPool1d/2d/3d); forward_with_indices gives the indices too.
template <int N> class MaxPoolNdImpl : public Module {
 public:
  /// max_poolNd's arguments (stride {}: the kernel size).
  explicit MaxPoolNdImpl(IntList kernel_size, IntList stride = {}, IntList padding = {0}, IntList dilation = {1},
                         bool ceil_mode = false);
  /// From LibTorch's options (a template, so that a braced list still means kernel_size).
  template <class O, std::enable_if_t<std::is_same_v<O, MaxPoolNdOptions<N>>, int> = 0>
  explicit MaxPoolNdImpl(const O& o) : MaxPoolNdImpl(o.kernel_size, o.stride, o.padding, o.dilation, o.ceil_mode) {}
  Tensor forward(const Tensor& x) override;
  /// The values and their Int64 indices (max_poolNd_with_indices).
  TensorPair forward_with_indices(const Tensor& x);

 private:
  IntList k_, s_, p_, d_;
  bool ceil_;
};
using MaxPool1dImpl = MaxPoolNdImpl<1>;
using MaxPool2dImpl = MaxPoolNdImpl<2>;
using MaxPool3dImpl = MaxPoolNdImpl<3>;
/// The holder of MaxPoolNdImpl<N> (LibTorch's MaxPoolNd), with its constructor's braced lists.
template <int N> class MaxPoolNd : public ModuleHolder<MaxPoolNdImpl<N>> {
 public:
  using ModuleHolder<MaxPoolNdImpl<N>>::ModuleHolder;
  /// MaxPoolNdImpl<N>'s constructor.
  MaxPoolNd(IntList kernel_size, IntList stride = {}, IntList padding = {0}, IntList dilation = {1},
            bool ceil_mode = false)
      : ModuleHolder<MaxPoolNdImpl<N>>(
            std::make_shared<MaxPoolNdImpl<N>>(kernel_size, stride, padding, dilation, ceil_mode)) {}
};
using MaxPool1d = MaxPoolNd<1>;  ///< the holder
using MaxPool2d = MaxPoolNd<2>;  ///< the holder
using MaxPool3d = MaxPoolNd<3>;  ///< the holder

/// Adaptive average pooling to output_size over N spatial dims (AdaptiveAvgPool1d/2d/3d).
template <int N> class AdaptiveAvgPoolNdImpl : public Module {
 public:
  /// output_size: N values or one.
  explicit AdaptiveAvgPoolNdImpl(IntList output_size);
  /// From LibTorch's options (a template, so that a braced list still means output_size).
  template <class O, std::enable_if_t<std::is_same_v<O, AdaptiveAvgPoolNdOptions<N>>, int> = 0>
  explicit AdaptiveAvgPoolNdImpl(const O& o) : AdaptiveAvgPoolNdImpl(IntList(o.output_size)) {}
  Tensor forward(const Tensor& x) override;

 private:
  IntList out_;
};
using AdaptiveAvgPool1dImpl = AdaptiveAvgPoolNdImpl<1>;
using AdaptiveAvgPool2dImpl = AdaptiveAvgPoolNdImpl<2>;
using AdaptiveAvgPool3dImpl = AdaptiveAvgPoolNdImpl<3>;
/// The holder of AdaptiveAvgPoolNdImpl<N> (LibTorch's AdaptiveAvgPoolNd), with its constructor's braced lists.
template <int N> class AdaptiveAvgPoolNd : public ModuleHolder<AdaptiveAvgPoolNdImpl<N>> {
 public:
  using ModuleHolder<AdaptiveAvgPoolNdImpl<N>>::ModuleHolder;
  /// AdaptiveAvgPoolNdImpl<N>'s constructor.
  AdaptiveAvgPoolNd(IntList output_size)
      : ModuleHolder<AdaptiveAvgPoolNdImpl<N>>(std::make_shared<AdaptiveAvgPoolNdImpl<N>>(output_size)) {}
};
using AdaptiveAvgPool1d = AdaptiveAvgPoolNd<1>;  ///< the holder
using AdaptiveAvgPool2d = AdaptiveAvgPoolNd<2>;  ///< the holder
using AdaptiveAvgPool3d = AdaptiveAvgPoolNd<3>;  ///< the holder

/// pixel_shuffle by a fixed factor.
class PixelShuffleImpl : public Module {
 public:
  /// The factor r: [*, C r^2, H, W] -> [*, C, H r, W r].
  explicit PixelShuffleImpl(int64_t upscale_factor);
  Tensor forward(const Tensor& x) override;

 private:
  int64_t r_;
};
TG_MODULE(PixelShuffle);
/// pixel_unshuffle by a fixed factor.
class PixelUnshuffleImpl : public Module {
 public:
  /// The factor r: [*, C, H r, W r] -> [*, C r^2, H, W].
  explicit PixelUnshuffleImpl(int64_t downscale_factor);
  Tensor forward(const Tensor& x) override;

 private:
  int64_t r_;
};
TG_MODULE(PixelUnshuffle);

extern template class ConvNdImpl<1>;
extern template class ConvNdImpl<2>;
extern template class ConvNdImpl<3>;
extern template class ConvTransposeNdImpl<1>;
extern template class ConvTransposeNdImpl<2>;
extern template class ConvTransposeNdImpl<3>;
extern template class AvgPoolNdImpl<1>;
extern template class AvgPoolNdImpl<2>;
extern template class AvgPoolNdImpl<3>;
extern template class MaxPoolNdImpl<1>;
extern template class MaxPoolNdImpl<2>;
extern template class MaxPoolNdImpl<3>;
extern template class AdaptiveAvgPoolNdImpl<1>;
extern template class AdaptiveAvgPoolNdImpl<2>;
extern template class AdaptiveAvgPoolNdImpl<3>;

}  // namespace tg::nn
