// tg::fft: discrete Fourier transforms with torch.fft's names, arguments and
// norms, differentiable to every order in reverse, forward and Taylor mode
// (an FFT is linear: its rules are FFTs). Written over the three primitives
// of the op list (tg::_fft_c2c, _fft_r2c, _fft_c2r; ops.def), which run
// Eigen's FFT (kissfft) on the CPU and cuFFT on CUDA (plans cached per shape
// and dtype, capturable in CUDA graphs). docs/TENSOR.md "FFTs".
//
// `norm` is "backward" (the default; "" too): the forward transforms are
// unscaled and the inverse ones scaled by 1/n; "ortho": both by 1/sqrt(n);
// "forward": the forward ones by 1/n, the inverse ones unscaled. `n` (`s`)
// pads a transformed dim with zeros or crops it to that many points
// before the transform. A real input of a complex transform becomes complex;
// integer and half inputs are computed in Float32 (Complex64 results).
#pragma once

#include <optional>
#include <string>

#include <tapegrad/tensor/tensor.h>

namespace tg::fft {

/// The one-dimensional DFT over `dim` (complex result).
Tensor fft(const Tensor& input, std::optional<int64_t> n = std::nullopt, int64_t dim = -1,
           const std::string& norm = "backward");
/// The inverse of fft.
Tensor ifft(const Tensor& input, std::optional<int64_t> n = std::nullopt, int64_t dim = -1,
            const std::string& norm = "backward");
/// The DFT of a real input over `dim`, its n/2 + 1 non-negative frequencies.
Tensor rfft(const Tensor& input, std::optional<int64_t> n = std::nullopt, int64_t dim = -1,
            const std::string& norm = "backward");
/// The inverse of rfft: a real output of n points (default 2 (m - 1) for m
/// input entries along dim).
Tensor irfft(const Tensor& input, std::optional<int64_t> n = std::nullopt, int64_t dim = -1,
             const std::string& norm = "backward");
/// The DFT of a Hermitian-symmetric signal given by its first half: a real
/// output of n points (default 2 (m - 1)).
Tensor hfft(const Tensor& input, std::optional<int64_t> n = std::nullopt, int64_t dim = -1,
            const std::string& norm = "backward");
/// The inverse of hfft: the first n/2 + 1 entries of the inverse DFT of a
/// real input.
Tensor ihfft(const Tensor& input, std::optional<int64_t> n = std::nullopt, int64_t dim = -1,
             const std::string& norm = "backward");

/// The DFT over `dim` (default: every dim, or the last s.size() dims when s
/// is given), each dim padded or cropped to s.
Tensor fftn(const Tensor& input, std::optional<IntList> s = std::nullopt, std::optional<IntList> dim = std::nullopt,
            const std::string& norm = "backward");
/// The inverse of fftn.
Tensor ifftn(const Tensor& input, std::optional<IntList> s = std::nullopt, std::optional<IntList> dim = std::nullopt,
             const std::string& norm = "backward");
/// The DFT of a real input over `dim`, onesided in the last of them.
Tensor rfftn(const Tensor& input, std::optional<IntList> s = std::nullopt, std::optional<IntList> dim = std::nullopt,
             const std::string& norm = "backward");
/// The inverse of rfftn: real, the last of `dim` of s.back() points (default
/// 2 (m - 1)).
Tensor irfftn(const Tensor& input, std::optional<IntList> s = std::nullopt, std::optional<IntList> dim = std::nullopt,
              const std::string& norm = "backward");
/// fftn over two dims (default the last two).
Tensor fft2(const Tensor& input, std::optional<IntList> s = std::nullopt, IntList dim = {-2, -1},
            const std::string& norm = "backward");
/// ifftn over two dims (default the last two).
Tensor ifft2(const Tensor& input, std::optional<IntList> s = std::nullopt, IntList dim = {-2, -1},
             const std::string& norm = "backward");
/// rfftn over two dims (default the last two).
Tensor rfft2(const Tensor& input, std::optional<IntList> s = std::nullopt, IntList dim = {-2, -1},
             const std::string& norm = "backward");
/// irfftn over two dims (default the last two).
Tensor irfft2(const Tensor& input, std::optional<IntList> s = std::nullopt, IntList dim = {-2, -1},
              const std::string& norm = "backward");

/// The sample frequencies of fft of n points with spacing d: [0, 1, ...,
/// (n - 1) / 2, -(n / 2), ..., -1] / (d n) (Float32 unless `options` says).
Tensor fftfreq(int64_t n, double d = 1.0, const TensorOptions& options = {});
/// The sample frequencies of rfft of n points: [0, 1, ..., n / 2] / (d n).
Tensor rfftfreq(int64_t n, double d = 1.0, const TensorOptions& options = {});
/// The zero frequency moved to the middle of `dim` (default every dim): a
/// roll by size / 2.
Tensor fftshift(const Tensor& input, std::optional<IntList> dim = std::nullopt);
/// The inverse of fftshift: a roll by -(size / 2).
Tensor ifftshift(const Tensor& input, std::optional<IntList> dim = std::nullopt);

}  // namespace tg::fft
