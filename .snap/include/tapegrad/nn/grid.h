// The layers of grid models (docs/NN.md "Grid layers"): convolutions,
// transposed convolutions, normalizations, pooling, resampling and
// shuffles, named and initialized as LibTorch's, over the grid ops of
// <tapegrad/tensor/grid.h> (tg::nn::functional exports those too). Their
// parameters and buffers are in state_dict() and so in nn::save / nn::load.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <tapegrad/nn/module.h>
#include <tapegrad/tensor/grid.h>

namespace tg::nn {

/// Convolution over N = 1, 2, 3 spatial dims (Conv1d, Conv2d, Conv3d):
/// weight [out, in / groups, kernel...], bias [out], both U(-b, b) with b =
/// 1 / sqrt(in / groups * prod(kernel)) (LibTorch's kaiming_uniform_ with
/// a = sqrt(5)). padding_mode "zeros", "reflect", "replicate" or
/// "circular" (the input padded by `padding` in that mode first).
template <int N> class ConvNd : public Module {
 public:
  /// The layer; kernel_size, stride, padding and dilation hold N values or one.
  ConvNd(int64_t in_channels, int64_t out_channels, IntList kernel_size, IntList stride = {1}, IntList padding = {0},
         IntList dilation = {1}, int64_t groups = 1, bool bias = true, std::string padding_mode = "zeros",
         TensorOptions options = TensorOptions());
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Tensor weight;  ///< [out, in / groups, kernel...]
  Tensor bias;    ///< [out], undefined when bias = false

 private:
  IntList stride_, padding_, dilation_;
  int64_t groups_;
  std::string padding_mode_;
};
using Conv1d = ConvNd<1>;
using Conv2d = ConvNd<2>;
using Conv3d = ConvNd<3>;

/// Transposed convolution (ConvTranspose1d/2d/3d): weight [in, out / groups,
/// kernel...], initialized as LibTorch's (b = 1 / sqrt(out / groups *
/// prod(kernel))).
template <int N> class ConvTransposeNd : public Module {
 public:
  /// The layer; geometry lists hold N values or one.
  ConvTransposeNd(int64_t in_channels, int64_t out_channels, IntList kernel_size, IntList stride = {1},
                  IntList padding = {0}, IntList output_padding = {0}, int64_t groups = 1, bool bias = true,
                  IntList dilation = {1}, TensorOptions options = TensorOptions());
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Tensor weight;  ///< [in, out / groups, kernel...]
  Tensor bias;    ///< [out], undefined when bias = false

 private:
  IntList stride_, padding_, output_padding_, dilation_;
  int64_t groups_;
};
using ConvTranspose1d = ConvTransposeNd<1>;
using ConvTranspose2d = ConvTransposeNd<2>;
using ConvTranspose3d = ConvTransposeNd<3>;

/// group_norm over num_groups groups of num_channels; weight ones, bias zeros (affine).
class GroupNorm : public Module {
 public:
  /// num_channels must be a multiple of num_groups.
  GroupNorm(int64_t num_groups, int64_t num_channels, double eps = 1e-5, bool affine = true,
            TensorOptions options = TensorOptions());
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Tensor weight;  ///< [num_channels] ones, undefined without affine
  Tensor bias;    ///< [num_channels] zeros, undefined without affine

 private:
  int64_t groups_;
  double eps_;
};

/// Batch normalization (BatchNorm1d/2d/3d share it: the input's rank is not
/// checked beyond [N, C, ...]); buffers running_mean (zeros), running_var
/// (ones) and num_batches_tracked (Int64) when track_running_stats.
/// Training mode (train()) normalizes with the batch's statistics and
/// updates the running ones; eval() uses the running ones.
class BatchNorm : public Module {
 public:
  /// The layer over num_features channels (type_name: "BatchNorm2d", ...).
  explicit BatchNorm(int64_t num_features, double eps = 1e-5, double momentum = 0.1, bool affine = true,
                     bool track_running_stats = true, TensorOptions options = TensorOptions(),
                     const char* type_name = "BatchNorm");
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
/// BatchNorm over [N, C] or [N, C, L].
struct BatchNorm1d : BatchNorm {
  /// As BatchNorm's.
  explicit BatchNorm1d(int64_t n, double eps = 1e-5, double momentum = 0.1, bool affine = true, bool track = true,
                       TensorOptions o = TensorOptions())
      : BatchNorm(n, eps, momentum, affine, track, o, "BatchNorm1d") {}
};
/// BatchNorm over [N, C, H, W].
struct BatchNorm2d : BatchNorm {
  /// As BatchNorm's.
  explicit BatchNorm2d(int64_t n, double eps = 1e-5, double momentum = 0.1, bool affine = true, bool track = true,
                       TensorOptions o = TensorOptions())
      : BatchNorm(n, eps, momentum, affine, track, o, "BatchNorm2d") {}
};
/// BatchNorm over [N, C, D, H, W].
struct BatchNorm3d : BatchNorm {
  /// As BatchNorm's.
  explicit BatchNorm3d(int64_t n, double eps = 1e-5, double momentum = 0.1, bool affine = true, bool track = true,
                       TensorOptions o = TensorOptions())
      : BatchNorm(n, eps, momentum, affine, track, o, "BatchNorm3d") {}
};

/// Instance normalization (InstanceNorm1d/2d/3d): LibTorch's defaults
/// affine = false, track_running_stats = false.
class InstanceNorm : public Module {
 public:
  /// The layer over num_features channels (type_name: "InstanceNorm2d", ...).
  explicit InstanceNorm(int64_t num_features, double eps = 1e-5, double momentum = 0.1, bool affine = false,
                        bool track_running_stats = false, TensorOptions options = TensorOptions(),
                        const char* type_name = "InstanceNorm");
  Tensor forward(const Tensor& x) override;
  Tensor weight;        ///< [num_features] ones, undefined without affine
  Tensor bias;          ///< [num_features] zeros, undefined without affine
  Tensor running_mean;  ///< buffer [num_features], undefined without tracking
  Tensor running_var;   ///< buffer [num_features], undefined without tracking

 private:
  double eps_, momentum_;
};
/// InstanceNorm over [N, C, L].
struct InstanceNorm1d : InstanceNorm {
  /// As InstanceNorm's.
  explicit InstanceNorm1d(int64_t n, double eps = 1e-5, double momentum = 0.1, bool affine = false, bool track = false,
                          TensorOptions o = TensorOptions())
      : InstanceNorm(n, eps, momentum, affine, track, o, "InstanceNorm1d") {}
};
/// InstanceNorm over [N, C, H, W].
struct InstanceNorm2d : InstanceNorm {
  /// As InstanceNorm's.
  explicit InstanceNorm2d(int64_t n, double eps = 1e-5, double momentum = 0.1, bool affine = false, bool track = false,
                          TensorOptions o = TensorOptions())
      : InstanceNorm(n, eps, momentum, affine, track, o, "InstanceNorm2d") {}
};
/// InstanceNorm over [N, C, D, H, W].
struct InstanceNorm3d : InstanceNorm {
  /// As InstanceNorm's.
  explicit InstanceNorm3d(int64_t n, double eps = 1e-5, double momentum = 0.1, bool affine = false, bool track = false,
                          TensorOptions o = TensorOptions())
      : InstanceNorm(n, eps, momentum, affine, track, o, "InstanceNorm3d") {}
};

/// interpolate with fixed arguments (nn.Upsample).
class Upsample : public Module {
 public:
  /// interpolate's arguments: size or scale_factor, mode, align_corners.
  explicit Upsample(IntList size = {}, std::vector<double> scale_factor = {}, std::string mode = "nearest",
                    std::optional<bool> align_corners = std::nullopt);
  Tensor forward(const Tensor& x) override;

 private:
  IntList size_;
  std::vector<double> scale_;
  std::string mode_;
  std::optional<bool> align_corners_;
};

/// Average pooling over N spatial dims (AvgPool1d/2d/3d), batched or not.
template <int N> class AvgPoolNd : public Module {
 public:
  /// avg_poolNd's arguments (stride {}: the kernel size).
  explicit AvgPoolNd(IntList kernel_size, IntList stride = {}, IntList padding = {0}, bool ceil_mode = false,
                     bool count_include_pad = true, std::optional<int64_t> divisor_override = std::nullopt);
  Tensor forward(const Tensor& x) override;

 private:
  IntList k_, s_, p_;
  bool ceil_, include_pad_;
  std::optional<int64_t> divisor_;
};
using AvgPool1d = AvgPoolNd<1>;
using AvgPool2d = AvgPoolNd<2>;
using AvgPool3d = AvgPoolNd<3>;

/// Max pooling over N spatial dims (MaxPool1d/2d/3d); forward_with_indices gives the indices too.
template <int N> class MaxPoolNd : public Module {
 public:
  /// max_poolNd's arguments (stride {}: the kernel size).
  explicit MaxPoolNd(IntList kernel_size, IntList stride = {}, IntList padding = {0}, IntList dilation = {1},
                     bool ceil_mode = false);
  Tensor forward(const Tensor& x) override;
  /// The values and their Int64 indices (max_poolNd_with_indices).
  TensorPair forward_with_indices(const Tensor& x);

 private:
  IntList k_, s_, p_, d_;
  bool ceil_;
};
using MaxPool1d = MaxPoolNd<1>;
using MaxPool2d = MaxPoolNd<2>;
using MaxPool3d = MaxPoolNd<3>;

/// Adaptive average pooling to output_size over N spatial dims (AdaptiveAvgPool1d/2d/3d).
template <int N> class AdaptiveAvgPoolNd : public Module {
 public:
  /// output_size: N values or one.
  explicit AdaptiveAvgPoolNd(IntList output_size);
  Tensor forward(const Tensor& x) override;

 private:
  IntList out_;
};
using AdaptiveAvgPool1d = AdaptiveAvgPoolNd<1>;
using AdaptiveAvgPool2d = AdaptiveAvgPoolNd<2>;
using AdaptiveAvgPool3d = AdaptiveAvgPoolNd<3>;

/// pixel_shuffle by a fixed factor.
class PixelShuffle : public Module {
 public:
  /// The factor r: [*, C r^2, H, W] -> [*, C, H r, W r].
  explicit PixelShuffle(int64_t upscale_factor);
  Tensor forward(const Tensor& x) override;

 private:
  int64_t r_;
};
/// pixel_unshuffle by a fixed factor.
class PixelUnshuffle : public Module {
 public:
  /// The factor r: [*, C, H r, W r] -> [*, C r^2, H, W].
  explicit PixelUnshuffle(int64_t downscale_factor);
  Tensor forward(const Tensor& x) override;

 private:
  int64_t r_;
};

extern template class ConvNd<1>;
extern template class ConvNd<2>;
extern template class ConvNd<3>;
extern template class ConvTransposeNd<1>;
extern template class ConvTransposeNd<2>;
extern template class ConvTransposeNd<3>;
extern template class AvgPoolNd<1>;
extern template class AvgPoolNd<2>;
extern template class AvgPoolNd<3>;
extern template class MaxPoolNd<1>;
extern template class MaxPoolNd<2>;
extern template class MaxPoolNd<3>;
extern template class AdaptiveAvgPoolNd<1>;
extern template class AdaptiveAvgPoolNd<2>;
extern template class AdaptiveAvgPoolNd<3>;

}  // namespace tg::nn
