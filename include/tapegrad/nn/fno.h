// Neural operators: the spectral convolutions of the Fourier Neural Operator
// (Li et al., 2021) and an FNO builder. A spectral convolution takes the
// real FFT of its input over the spatial dims, multiplies the lowest modes
// by learned complex weights that mix the channels, zeroes the others and
// transforms back; an FNO layer adds a pointwise linear map of its input and
// applies GELU. Differentiable to every order (the FFTs', einsum's and the
// complex ops' rules), on the CPU and CUDA, capturable in CUDA graphs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <tapegrad/nn/layers.h>
#include <tapegrad/nn/modules.h>

namespace tg::nn {

/// The spectral convolution over the last dim: x [B, in, n] -> [B, out, n];
/// the `modes` lowest frequencies of rfft(x) times weight [in, out, modes]
/// (complex), the others zero (modes <= n / 2 + 1).
class SpectralConv1dImpl : public Module {
 public:
  /// Complex weights of the options' dtype (Complex64 for Float32, Complex128
  /// for Float64), real and imaginary parts U(0, 1) / (in out), as the
  /// reference implementation's.
  SpectralConv1dImpl(int64_t in_channels, int64_t out_channels, int64_t modes, TensorOptions options = TensorOptions());
  Tensor forward(const Tensor& x) override;  ///< irfft(modes of rfft(x) times weight, n)
  /// The same map with the channels first and the batch second: x [in, B, n]
  /// -> [out, B, n] (the FNO's layout: its pointwise maps are then single GEMMs).
  Tensor forward_channel_major(const Tensor& x);
  std::string extra_repr() const override;  ///< "SpectralConv1d(in, out, modes=..)"
  Tensor weight;                            ///< [in, out, modes], complex

 private:
  Tensor apply(const Tensor& x, bool channel_major);
  int64_t in_, out_, modes_;
};
TG_MODULE(SpectralConv1d);

/// The spectral convolution over the last two dims: x [B, in, h, w] ->
/// [B, out, h, w]; the modes1 lowest frequencies of each sign along h (the
/// first modes1 rows and the last modes1) and the modes2 lowest along w of
/// rfft2(x), times weight1 and weight2 [in, out, modes1, modes2] (complex),
/// the others zero (2 modes1 <= h, modes2 <= w / 2 + 1).
class SpectralConv2dImpl : public Module {
 public:
  /// The weights as SpectralConv1d's.
  SpectralConv2dImpl(int64_t in_channels, int64_t out_channels, int64_t modes1, int64_t modes2,
                     TensorOptions options = TensorOptions());
  Tensor forward(const Tensor& x) override;  ///< irfft2 of the mixed modes, (h, w)
  /// The same map with the channels first and the batch second: x [in, B, h,
  /// w] -> [out, B, h, w] (the FNO's layout).
  Tensor forward_channel_major(const Tensor& x);
  std::string extra_repr() const override;  ///< "SpectralConv2d(in, out, modes=(.., ..))"
  Tensor weight1;                           ///< [in, out, modes1, modes2]: rows 0 .. modes1 - 1
  Tensor weight2;                           ///< [in, out, modes1, modes2]: rows h - modes1 .. h - 1

 private:
  Tensor apply(const Tensor& x, bool channel_major);
  int64_t in_, out_, m1_, m2_;
};
TG_MODULE(SpectralConv2d);

/// The settings of an FNO (the reference FNO2d's defaults: width 32, 12
/// modes, 4 layers, a projection through 128 channels).
struct FNOOptions {
  int64_t in_channels = 1;     ///< input channels per grid point (the grid coordinates are appended)
  int64_t out_channels = 1;    ///< output channels per grid point
  int64_t width = 32;          ///< channels of the Fourier layers
  IntList modes = {12, 12};    ///< modes per spatial dim: one (1-D) or two (2-D)
  int64_t layers = 4;          ///< Fourier layers
  int64_t projection = 128;    ///< hidden channels of the projection
  TensorOptions options = {};  ///< dtype and device of the parameters
};

/// A Fourier Neural Operator on a 1-D or 2-D grid, channels last (inside, it
/// runs channel-major, [channels, B, spatial...]; the result is a view of its
/// [out, B, spatial...]):
/// x [B, (n | h, w), in] -> [B, (n | h, w), out]. The grid coordinates in
/// [0, 1] are appended to each point's channels, a linear lifting maps them to
/// `width`, each Fourier layer computes GELU(SpectralConv(v) + W v) (no GELU
/// after the last), and a projection (Linear, GELU, Linear) maps back.
class FNOImpl : public Module {
 public:
  /// The lifting, `layers` Fourier layers and the projection, initialized as LibTorch's Linear and SpectralConv*d.
  explicit FNOImpl(FNOOptions options);
  Tensor forward(const Tensor& x) override;            ///< the operator at the grid of x
  std::string extra_repr() const override;             ///< "FNO(dims=.., width=.., modes=.., layers=..)"
  std::shared_ptr<LinearImpl> lift;                    ///< in_channels + dims -> width
  std::vector<std::shared_ptr<Module>> spectral;       ///< SpectralConv1d or SpectralConv2d, one per layer
  std::vector<std::shared_ptr<LinearImpl>> pointwise;  ///< width -> width, one per layer
  std::shared_ptr<LinearImpl> proj1;                   ///< width -> projection
  std::shared_ptr<LinearImpl> proj2;                   ///< projection -> out_channels

 private:
  FNOOptions o_;
};
TG_MODULE(FNO);

}  // namespace tg::nn
