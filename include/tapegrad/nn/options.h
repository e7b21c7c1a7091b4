// The layers' options with LibTorch's names and chained setters
// (`nn::Linear(nn::LinearOptions(2, 64).bias(false))`,
// `nn::Conv2d(nn::Conv2dOptions(1, 8, 3).padding(1).bias(false))`), beside
// the modules' positional constructors (docs/GUIDE.md's name map). Each
// module takes its options struct; the defaults are LibTorch's (and so the
// positional constructors'). A field is also read and set as a plain field
// (tg/tensor/arg.h); an IntList field's setter takes one integer for every
// spatial dim.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <tapegrad/tensor/arg.h>
#include <tapegrad/tensor/tensor.h>

namespace tg::nn {

/// Linear(in_features, out_features).bias(bool).
struct LinearOptions {
  /// The layer in_features -> out_features.
  LinearOptions(int64_t in_features, int64_t out_features) : in_features(in_features), out_features(out_features) {}
  TG_ARG(LinearOptions, int64_t, in_features);   ///< input size
  TG_ARG(LinearOptions, int64_t, out_features);  ///< output size
  TG_ARG(LinearOptions, bool, bias) = true;      ///< an additive bias
};

/// ConvNd(in_channels, out_channels, kernel_size) with stride, padding,
/// dilation, groups, bias and padding_mode ("zeros", "reflect",
/// "replicate", "circular").
template <int N> struct ConvNdOptions {
  /// kernel_size: N values or one.
  ConvNdOptions(int64_t in_channels, int64_t out_channels, IntList kernel_size)
      : in_channels(in_channels), out_channels(out_channels), kernel_size(std::move(kernel_size)) {}
  /// kernel_size for every spatial dim.
  ConvNdOptions(int64_t in_channels, int64_t out_channels, int64_t kernel_size)
      : ConvNdOptions(in_channels, out_channels, IntList{kernel_size}) {}
  TG_ARG(ConvNdOptions, int64_t, in_channels);                              ///< input channels
  TG_ARG(ConvNdOptions, int64_t, out_channels);                             ///< output channels
  TG_ARG_OR(ConvNdOptions, IntList, kernel_size, int64_t);                  ///< N values or one
  TG_ARG_OR(ConvNdOptions, IntList, stride, int64_t) = IntList{1};          ///< N values or one
  TG_ARG_OR(ConvNdOptions, IntList, padding, int64_t) = IntList{0};         ///< N values or one
  TG_ARG_OR(ConvNdOptions, IntList, dilation, int64_t) = IntList{1};        ///< N values or one
  TG_ARG(ConvNdOptions, int64_t, groups) = 1;                               ///< channel groups
  TG_ARG(ConvNdOptions, bool, bias) = true;                                 ///< a bias per output channel
  TG_ARG(ConvNdOptions, std::string, padding_mode) = std::string("zeros");  ///< how the input is padded
};
using Conv1dOptions = ConvNdOptions<1>;  ///< LibTorch's name
using Conv2dOptions = ConvNdOptions<2>;  ///< LibTorch's name
using Conv3dOptions = ConvNdOptions<3>;  ///< LibTorch's name

/// ConvTransposeNd(in_channels, out_channels, kernel_size) with stride,
/// padding, output_padding, groups, bias and dilation.
template <int N> struct ConvTransposeNdOptions {
  /// kernel_size: N values or one.
  ConvTransposeNdOptions(int64_t in_channels, int64_t out_channels, IntList kernel_size)
      : in_channels(in_channels), out_channels(out_channels), kernel_size(std::move(kernel_size)) {}
  /// kernel_size for every spatial dim.
  ConvTransposeNdOptions(int64_t in_channels, int64_t out_channels, int64_t kernel_size)
      : ConvTransposeNdOptions(in_channels, out_channels, IntList{kernel_size}) {}
  TG_ARG(ConvTransposeNdOptions, int64_t, in_channels);                              ///< input channels
  TG_ARG(ConvTransposeNdOptions, int64_t, out_channels);                             ///< output channels
  TG_ARG_OR(ConvTransposeNdOptions, IntList, kernel_size, int64_t);                  ///< N values or one
  TG_ARG_OR(ConvTransposeNdOptions, IntList, stride, int64_t) = IntList{1};          ///< N values or one
  TG_ARG_OR(ConvTransposeNdOptions, IntList, padding, int64_t) = IntList{0};         ///< N values or one
  TG_ARG_OR(ConvTransposeNdOptions, IntList, output_padding, int64_t) = IntList{0};  ///< N values or one
  TG_ARG(ConvTransposeNdOptions, int64_t, groups) = 1;                               ///< channel groups
  TG_ARG(ConvTransposeNdOptions, bool, bias) = true;                                 ///< a bias per output channel
  TG_ARG_OR(ConvTransposeNdOptions, IntList, dilation, int64_t) = IntList{1};        ///< N values or one
};
using ConvTranspose1dOptions = ConvTransposeNdOptions<1>;  ///< LibTorch's name
using ConvTranspose2dOptions = ConvTransposeNdOptions<2>;  ///< LibTorch's name
using ConvTranspose3dOptions = ConvTransposeNdOptions<3>;  ///< LibTorch's name

/// GroupNorm(num_groups, num_channels).eps(double).affine(bool).
struct GroupNormOptions {
  /// num_channels a multiple of num_groups.
  GroupNormOptions(int64_t num_groups, int64_t num_channels) : num_groups(num_groups), num_channels(num_channels) {}
  TG_ARG(GroupNormOptions, int64_t, num_groups);    ///< groups
  TG_ARG(GroupNormOptions, int64_t, num_channels);  ///< channels
  TG_ARG(GroupNormOptions, double, eps) = 1e-5;     ///< added to the variance
  TG_ARG(GroupNormOptions, bool, affine) = true;    ///< weight and bias per channel
};

/// The options of the normalizations with running statistics,
/// BatchNorm1d/2d/3d (kInstance false) and InstanceNorm1d/2d/3d (true):
/// num_features, eps, momentum, affine and track_running_stats, LibTorch's
/// defaults (an instance norm has neither weights nor running statistics).
template <bool kInstance> struct RunningNormOptions {
  /// The layer over num_features channels.
  explicit RunningNormOptions(int64_t num_features) : num_features(num_features) {}
  TG_ARG(RunningNormOptions, int64_t, num_features);                   ///< channels
  TG_ARG(RunningNormOptions, double, eps) = 1e-5;                      ///< added to the variance
  TG_ARG(RunningNormOptions, double, momentum) = 0.1;                  ///< of the running statistics
  TG_ARG(RunningNormOptions, bool, affine) = !kInstance;               ///< weight and bias per channel
  TG_ARG(RunningNormOptions, bool, track_running_stats) = !kInstance;  ///< running statistics kept
};
using BatchNormOptions = RunningNormOptions<false>;    ///< LibTorch's name
using BatchNorm1dOptions = BatchNormOptions;           ///< LibTorch's name
using BatchNorm2dOptions = BatchNormOptions;           ///< LibTorch's name
using BatchNorm3dOptions = BatchNormOptions;           ///< LibTorch's name
using InstanceNormOptions = RunningNormOptions<true>;  ///< LibTorch's name
using InstanceNorm1dOptions = InstanceNormOptions;     ///< LibTorch's name
using InstanceNorm2dOptions = InstanceNormOptions;     ///< LibTorch's name
using InstanceNorm3dOptions = InstanceNormOptions;     ///< LibTorch's name

/// LayerNorm(normalized_shape).eps(double).elementwise_affine(bool).
struct LayerNormOptions {
  /// The trailing dims normalized.
  explicit LayerNormOptions(IntList normalized_shape) : normalized_shape(std::move(normalized_shape)) {}
  TG_ARG(LayerNormOptions, IntList, normalized_shape);        ///< trailing sizes
  TG_ARG(LayerNormOptions, double, eps) = 1e-5;               ///< added to the variance
  TG_ARG(LayerNormOptions, bool, elementwise_affine) = true;  ///< weight and bias of normalized_shape
};

/// Dropout(p).
struct DropoutOptions {
  /// p: the probability of zeroing an element.
  explicit DropoutOptions(double p = 0.5) : p(p) {}
  TG_ARG(DropoutOptions, double, p);  ///< zeroing probability
};

/// Embedding(num_embeddings, embedding_dim) with padding_idx, max_norm,
/// norm_type and sparse.
struct EmbeddingOptions {
  /// The table's sizes.
  EmbeddingOptions(int64_t num_embeddings, int64_t embedding_dim)
      : num_embeddings(num_embeddings), embedding_dim(embedding_dim) {}
  TG_ARG(EmbeddingOptions, int64_t, num_embeddings);              ///< rows
  TG_ARG(EmbeddingOptions, int64_t, embedding_dim);               ///< columns
  TG_ARG(EmbeddingOptions, std::optional<int64_t>, padding_idx);  ///< a row with no gradient
  TG_ARG(EmbeddingOptions, std::optional<double>, max_norm);      ///< rows renormalized above it
  TG_ARG(EmbeddingOptions, double, norm_type) = 2.0;              ///< the norm of max_norm
  TG_ARG(EmbeddingOptions, bool, sparse) = false;                 ///< a sparse weight gradient
};

/// AvgPoolNd(kernel_size) with stride (empty: the kernel size), padding,
/// ceil_mode, count_include_pad and divisor_override.
template <int N> struct AvgPoolNdOptions {
  /// kernel_size: N values or one.
  AvgPoolNdOptions(IntList kernel_size) : kernel_size(std::move(kernel_size)) {}  // NOLINT: as LibTorch's
  /// kernel_size for every spatial dim.
  AvgPoolNdOptions(int64_t kernel_size) : AvgPoolNdOptions(IntList{kernel_size}) {}  // NOLINT: as LibTorch's
  TG_ARG_OR(AvgPoolNdOptions, IntList, kernel_size, int64_t);                        ///< N values or one
  TG_ARG_OR(AvgPoolNdOptions, IntList, stride, int64_t);                             ///< N values, one, or none
  TG_ARG_OR(AvgPoolNdOptions, IntList, padding, int64_t) = IntList{0};               ///< N values or one
  TG_ARG(AvgPoolNdOptions, bool, ceil_mode) = false;                                 ///< ceil for the output size
  TG_ARG(AvgPoolNdOptions, bool, count_include_pad) = true;                          ///< padding in the divisor
  TG_ARG(AvgPoolNdOptions, std::optional<int64_t>, divisor_override);                ///< the divisor, if given
};
using AvgPool1dOptions = AvgPoolNdOptions<1>;  ///< LibTorch's name
using AvgPool2dOptions = AvgPoolNdOptions<2>;  ///< LibTorch's name
using AvgPool3dOptions = AvgPoolNdOptions<3>;  ///< LibTorch's name

/// MaxPoolNd(kernel_size) with stride (empty: the kernel size), padding,
/// dilation and ceil_mode.
template <int N> struct MaxPoolNdOptions {
  /// kernel_size: N values or one.
  MaxPoolNdOptions(IntList kernel_size) : kernel_size(std::move(kernel_size)) {}  // NOLINT: as LibTorch's
  /// kernel_size for every spatial dim.
  MaxPoolNdOptions(int64_t kernel_size) : MaxPoolNdOptions(IntList{kernel_size}) {}  // NOLINT: as LibTorch's
  TG_ARG_OR(MaxPoolNdOptions, IntList, kernel_size, int64_t);                        ///< N values or one
  TG_ARG_OR(MaxPoolNdOptions, IntList, stride, int64_t);                             ///< N values, one, or none
  TG_ARG_OR(MaxPoolNdOptions, IntList, padding, int64_t) = IntList{0};               ///< N values or one
  TG_ARG_OR(MaxPoolNdOptions, IntList, dilation, int64_t) = IntList{1};              ///< N values or one
  TG_ARG(MaxPoolNdOptions, bool, ceil_mode) = false;                                 ///< ceil for the output size
};
using MaxPool1dOptions = MaxPoolNdOptions<1>;  ///< LibTorch's name
using MaxPool2dOptions = MaxPoolNdOptions<2>;  ///< LibTorch's name
using MaxPool3dOptions = MaxPoolNdOptions<3>;  ///< LibTorch's name

/// AdaptiveAvgPoolNd(output_size).
template <int N> struct AdaptiveAvgPoolNdOptions {
  /// output_size: N values or one.
  AdaptiveAvgPoolNdOptions(IntList output_size) : output_size(std::move(output_size)) {}  // NOLINT: as LibTorch's
  /// output_size for every spatial dim.
  AdaptiveAvgPoolNdOptions(int64_t output_size)  // NOLINT: as LibTorch's
      : AdaptiveAvgPoolNdOptions(IntList{output_size}) {}
  TG_ARG_OR(AdaptiveAvgPoolNdOptions, IntList, output_size, int64_t);  ///< N values or one
};
using AdaptiveAvgPool1dOptions = AdaptiveAvgPoolNdOptions<1>;  ///< LibTorch's name
using AdaptiveAvgPool2dOptions = AdaptiveAvgPoolNdOptions<2>;  ///< LibTorch's name
using AdaptiveAvgPool3dOptions = AdaptiveAvgPoolNdOptions<3>;  ///< LibTorch's name

/// Upsample: size or scale_factor (one per spatial dim, or one for all;
/// empty: not given), mode ("nearest", "linear", "bilinear", "trilinear")
/// and align_corners.
struct UpsampleOptions {
  TG_ARG(UpsampleOptions, IntList, size);                               ///< the output's spatial sizes
  TG_ARG(UpsampleOptions, std::vector<double>, scale_factor);           ///< or the scale per dim
  TG_ARG(UpsampleOptions, std::string, mode) = std::string("nearest");  ///< interpolate's mode
  TG_ARG(UpsampleOptions, std::optional<bool>, align_corners);          ///< the linear modes' corners
};

}  // namespace tg::nn
