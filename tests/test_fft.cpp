// tg::fft (issue 47 point 2): values against a direct DFT, Parseval and
// round-trip identities, every norm, odd and even sizes, padding and
// cropping, non-contiguous inputs and dims in any order, on every device.
// The derivatives of the primitives, every mode, are the op table's
// (tests/test_op_table.cpp).
#include <cmath>
#include <complex>

#include <tapegrad/nn/fno.h>
#include <tapegrad/tensor/fft.h>

#include "reference.h"

namespace tgtest {
namespace {

using C = std::complex<double>;
const tg::Device kCpu(tg::kCPU);
const tg::TensorOptions kF64 = tg::TensorOptions().dtype(tg::kFloat64);

std::vector<tg::Device> devices() {
  std::vector<tg::Device> d{kCpu};
  if (tg::cuda::is_available()) d.emplace_back(tg::kCUDA, 0);
  return d;
}

std::vector<C> values(const Tensor& z) {
  Tensor c = z.to(kCpu);
  if (!tg::is_complex(c.dtype())) c = c.to(tg::kComplex128);
  std::vector<double> v = tg::view_as_real(c.to(tg::kComplex128).contiguous()).contiguous().to_vector<double>();
  std::vector<C> out;
  for (size_t i = 0; i + 1 < v.size(); i += 2)
    out.emplace_back(v[i], v[i + 1]);
  return out;
}

// The DFT of x (n points) by its definition, sign -1 (forward) or +1.
std::vector<C> dft(const std::vector<C>& x, int sign) {
  const size_t n = x.size();
  std::vector<C> y(n);
  for (size_t k = 0; k < n; ++k)
    for (size_t j = 0; j < n; ++j)
      y[k] += x[j] * std::polar(1.0, sign * 2 * M_PI * double(j * k % n) / double(n));
  return y;
}

void expect_close(const std::vector<C>& got, const std::vector<C>& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 1;
  for (const C& w : want)
    scale = std::max(scale, std::abs(w));
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_LE(std::abs(got[i] - want[i]), tol * scale)
        << what << " element " << i << ": " << got[i] << " vs " << want[i];
}

Tensor random_complex(tg::IntList sizes, uint64_t seed, const tg::Device& dev) {
  tg::manual_seed(seed);
  return tg::complex_from(tg::randn(sizes, kF64), tg::randn(sizes, kF64)).to(dev);
}

TEST(Fft, OneDimensionalTransformsMatchTheDefinition) {
  for (const tg::Device& dev : devices())
    for (int64_t n : {1, 2, 5, 8, 12, 17, 64}) {
      SCOPED_TRACE(std::string(dev.is_cpu() ? "cpu" : "cuda") + " n=" + std::to_string(n));
      Tensor x = random_complex({3, n}, 1 + uint64_t(n), dev);
      for (int64_t row = 0; row < 3; ++row) {
        const std::vector<C> xr = values(x.select(0, row));
        const std::vector<C> f = dft(xr, -1), b = dft(xr, +1);
        expect_close(values(tg::fft::fft(x).select(0, row)), f, 1e-12, "fft");
        std::vector<C> fi = b;
        for (C& v : fi)
          v /= double(n);
        expect_close(values(tg::fft::ifft(x).select(0, row)), fi, 1e-12, "ifft");
        std::vector<C> fo = f;
        for (C& v : fo)
          v /= std::sqrt(double(n));
        expect_close(values(tg::fft::fft(x, std::nullopt, -1, "ortho").select(0, row)), fo, 1e-12, "fft ortho");
        std::vector<C> ff = f;
        for (C& v : ff)
          v /= double(n);
        expect_close(values(tg::fft::fft(x, std::nullopt, -1, "forward").select(0, row)), ff, 1e-12, "fft forward");
        // rfft of the real part: the first n/2 + 1 of its DFT.
        std::vector<C> re;
        for (const C& v : xr)
          re.emplace_back(v.real(), 0);
        std::vector<C> rf = dft(re, -1);
        rf.resize(size_t(n / 2 + 1));
        expect_close(values(tg::fft::rfft(tg::real(x)).select(0, row)), rf, 1e-12, "rfft");
      }
      // Complex64 too (float32 accuracy).
      const std::vector<C> want = values(tg::fft::fft(x));
      expect_close(values(tg::fft::fft(x.to(tg::kComplex64))), want, 2e-6 * double(n), "fft complex64");
    }
}

TEST(Fft, RoundTripsAndParseval) {
  for (const tg::Device& dev : devices())
    for (int64_t n : {6, 7, 16, 15}) {
      SCOPED_TRACE(std::string(dev.is_cpu() ? "cpu" : "cuda") + " n=" + std::to_string(n));
      Tensor x = random_complex({2, 3, n}, 10 + uint64_t(n), dev);
      Tensor r = tg::real(x).contiguous();
      expect_close(values(tg::fft::ifft(tg::fft::fft(x))), values(x), 1e-13, "ifft(fft)");
      expect_close(values(tg::fft::ifftn(tg::fft::fftn(x))), values(x), 1e-13, "ifftn(fftn)");
      expect_close(values(tg::fft::irfft(tg::fft::rfft(r), n)), values(r), 1e-13, "irfft(rfft)");
      expect_close(values(tg::fft::irfftn(tg::fft::rfftn(r), tg::IntList{2, 3, n})), values(r), 1e-13, "irfftn(rfftn)");
      expect_close(values(tg::fft::irfft2(tg::fft::rfft2(r), tg::IntList{3, n})), values(r), 1e-13, "irfft2(rfft2)");
      expect_close(values(tg::fft::hfft(tg::fft::ihfft(r), n)), values(r), 1e-13, "hfft(ihfft)");
      // Parseval: ortho transforms keep the energy.
      const double e = tg::sum(tg::abs(x).pow(2.0)).to(kCpu).item<double>();
      const double ef =
          tg::sum(tg::abs(tg::fft::fftn(x, std::nullopt, std::nullopt, "ortho")).pow(2.0)).to(kCpu).item<double>();
      EXPECT_NEAR(ef, e, 1e-10 * e);
      // fft2 over the last two dims is fftn over them; over dims given in
      // another order, the same.
      expect_close(values(tg::fft::fft2(x)), values(tg::fft::fftn(x, std::nullopt, tg::IntList{-2, -1})), 1e-13,
                   "fft2");
      expect_close(values(tg::fft::fftn(x, std::nullopt, tg::IntList{2, 0})),
                   values(tg::fft::fft(tg::fft::fft(x, std::nullopt, 0), std::nullopt, 2)), 1e-12, "dims {2, 0}");
      // rfftn's onesided dim is the last given, wherever it is.
      Tensor a = tg::fft::rfftn(r, std::nullopt, tg::IntList{2, 1});
      EXPECT_EQ(a.sizes(), (tg::IntList{2, 2, n}));
      expect_close(values(a), values(tg::fft::fftn(r, std::nullopt, tg::IntList{2, 1}).narrow(1, 0, 2)), 1e-12,
                   "rfftn onesided in dim 1");
      // Non-contiguous input.
      Tensor t = x.transpose(0, 2);
      expect_close(values(tg::fft::fft(t, std::nullopt, 1)), values(tg::fft::fft(t.contiguous(), std::nullopt, 1)),
                   1e-14, "transposed input");
    }
}

TEST(Fft, PaddingCroppingAndHelpers) {
  for (const tg::Device& dev : devices()) {
    SCOPED_TRACE(dev.is_cpu() ? "cpu" : "cuda");
    Tensor x = random_complex({5}, 3, dev);
    const std::vector<C> xv = values(x);
    std::vector<C> padded = xv;
    padded.resize(8);
    expect_close(values(tg::fft::fft(x, 8)), dft(padded, -1), 1e-12, "padded");
    expect_close(values(tg::fft::fft(x, 3)), dft({xv[0], xv[1], xv[2]}, -1), 1e-12, "cropped");
    // irfft's default n is 2 (m - 1); its input's imaginary parts at 0 (and
    // at n/2 for even n) are ignored, as cuFFT's and pocketfft's.
    Tensor h = random_complex({4}, 4, dev);
    EXPECT_EQ(tg::fft::irfft(h).size(0), 6);
    Tensor h2 = h.clone();
    tg::imag(h2).narrow(0, 0, 1).fill_(9.0);
    tg::imag(h2).narrow(0, 3, 1).fill_(-7.0);
    expect_close(values(tg::fft::irfft(h2)), values(tg::fft::irfft(h)), 1e-13, "irfft ignores DC/Nyquist imag");
    // No entries at all, n given: zeros (as PyTorch).
    const auto z = tg::TensorOptions().dtype(tg::kComplex128).device(dev);
    EXPECT_EQ(values(tg::fft::irfft(tg::zeros({0}, z), 4)), std::vector<C>(4));
    EXPECT_EQ(values(tg::fft::hfft(tg::zeros({0}, z), 5)), std::vector<C>(5));
    EXPECT_EQ(values(tg::fft::irfft2(tg::zeros({3, 0}, z), tg::IntList{3, 4})), std::vector<C>(12));
    // A short onesided spectrum is read as zero-padded (the primitive pads:
    // no copy in tg::fft), over one dim and after a transform of another,
    // every norm.
    Tensor s2 = random_complex({3, 4}, 11, dev);
    Tensor s2full = tg::cat({s2, tg::zeros({3, 2}, s2.options())}, 1);  // 6 entries: n = 10 or 11
    for (const char* norm : {"backward", "ortho", "forward"})
      for (int64_t n : {10, 11}) {
        const std::string w = std::string(norm) + " n " + std::to_string(n);
        expect_close(values(tg::fft::irfft(s2, n, -1, norm)), values(tg::fft::irfft(s2full, n, -1, norm)), 1e-13,
                     "short irfft " + w);
        expect_close(values(tg::fft::irfft2(s2, tg::IntList{5, n}, {-2, -1}, norm)),
                     values(tg::fft::irfft2(s2full, tg::IntList{5, n}, {-2, -1}, norm)), 1e-13, "short irfft2 " + w);
        expect_close(values(tg::fft::hfft(s2, n, -1, norm)), values(tg::fft::hfft(s2full, n, -1, norm)), 1e-13,
                     "short hfft " + w);
      }
    // fftfreq, rfftfreq, fftshift, ifftshift.
    EXPECT_EQ(tg::fft::fftfreq(5, 0.5, kF64).to_vector<double>(), (std::vector<double>{0, 0.4, 0.8, -0.8, -0.4}));
    EXPECT_EQ(tg::fft::fftfreq(4, 1.0, kF64).to_vector<double>(), (std::vector<double>{0, 0.25, -0.5, -0.25}));
    EXPECT_EQ(tg::fft::rfftfreq(5, 1.0, kF64).to_vector<double>(), (std::vector<double>{0, 0.2, 0.4}));
    Tensor k = tg::arange(0, 5, 1, tg::TensorOptions().dtype(tg::kFloat64).device(dev));
    EXPECT_EQ(tg::fft::fftshift(k).to(kCpu).to_vector<double>(), (std::vector<double>{3, 4, 0, 1, 2}));
    EXPECT_EQ(tg::fft::ifftshift(tg::fft::fftshift(k)).to(kCpu).to_vector<double>(),
              (std::vector<double>{0, 1, 2, 3, 4}));
    // A real input of fft becomes complex; Float32 gives Complex64.
    EXPECT_EQ(tg::fft::fft(tg::ones({4}, tg::TensorOptions().device(dev))).dtype(), tg::kComplex64);
    EXPECT_EQ(tg::fft::rfft(tg::ones({4}, kF64.device(dev))).dtype(), tg::kComplex128);
  }
}

TEST(Fft, BadArgumentsAreNamed) {
  Tensor x = tg::ones({4}, kF64);
  Tensor z = x.to(tg::kComplex128);
  EXPECT_ERROR_CONTAINS(tg::fft::fft(x, std::nullopt, -1, "sideways"), "fft: norm must be");
  EXPECT_ERROR_CONTAINS(tg::fft::rfft(z), "rfft: expects a real input");
  EXPECT_ERROR_CONTAINS(tg::fft::fft(x, 0), "fft: invalid number of data points (0)");
  EXPECT_ERROR_CONTAINS(tg::fft::irfft(tg::ones({1}, tg::kComplex64)), "irfft: invalid number of data points (0)");
  EXPECT_ERROR_CONTAINS(tg::fft::fft(x, std::nullopt, 3), "fft");
  EXPECT_ERROR_CONTAINS(tg::fft::fftn(tg::ones({2, 2}), std::nullopt, tg::IntList{0, -2}), "distinct");
  EXPECT_ERROR_CONTAINS(tg::fft::fft(tg::ones({}), std::nullopt, 0), "0-dim");
  EXPECT_ERROR_CONTAINS(tg::fft::fftfreq(0), "fftfreq: n must be >= 1");
  EXPECT_ERROR_CONTAINS(tg::_fft_c2r(z, {0}, 0, 5), "onesided spectrum of 5 points has 3 entries");
  EXPECT_ERROR_CONTAINS(tg::_fft_r2c(x, {0}, 0, true, 4), "_fft_r2c: onesided_length must be -1 (all) or 1 .. 3");
  EXPECT_ERROR_CONTAINS(tg::_fft_r2c(x, {0}, 0, true, 0), "onesided_length");
  EXPECT_ERROR_CONTAINS(tg::_fft_r2c(x, {0}, 0, false, 2), "(not onesided)");
  expect_close(values(tg::_fft_r2c(x, {0}, 0, true, 2)), values(tg::fft::rfft(x).narrow(0, 0, 2)), 0, "first entries");
  EXPECT_ERROR_CONTAINS(tg::_fft_c2r(z.narrow(0, 0, 0), {0}, 0, 5), "_fft_c2r");
  EXPECT_EQ(tg::_fft_c2r(z.narrow(0, 0, 2), {0}, 0, 5).size(0), 5);  // short: the missing entry zero
  EXPECT_ERROR_CONTAINS(tg::_fft_c2c(x, {0}, 0, true), "expected a complex tensor");
  EXPECT_ERROR_CONTAINS(tg::_fft_c2c(z, {0}, 3, true), "normalization must be");
  // The primitives name themselves for a 0-dim input (adversary's finding).
  EXPECT_ERROR_CONTAINS(tg::_fft_r2c(tg::ones({}, kF64), {0}, 0, true), "_fft_r2c: a 0-dim tensor has no dim");
  EXPECT_ERROR_CONTAINS(tg::_fft_c2c(tg::ones({}, tg::kComplex128), {-1}, 0, true), "_fft_c2c: a 0-dim tensor");
  EXPECT_ERROR_CONTAINS(tg::_fft_c2r(tg::ones({}, tg::kComplex128), {0}, 0, 4), "_fft_c2r: a 0-dim tensor");
  EXPECT_ERROR_CONTAINS(tg::ones({}).size(0), "no dimensions");
  EXPECT_ERROR_CONTAINS(tg::ones({}).stride(0), "no dimensions");
  // The library stays usable.
  EXPECT_EQ(tg::fft::fft(x).to(tg::kComplex128).dtype(), tg::kComplex128);
}

TEST(FftGpu, CapturedTransformsReplayAsEager) {
  REQUIRE_GPU();
  const tg::Device dev(tg::kCUDA, 0);
  Tensor x = random_complex({4, 32, 32}, 5, dev).to(tg::kComplex64);
  Tensor r = tg::real(x).contiguous();
  Tensor spec = tg::fft::rfft2(r).detach().requires_grad_();  // a leaf: the backward of irfft2 captured too
  auto step = [&] {
    Tensor g = tg::autograd::grad({tg::fft::irfft2(spec, tg::IntList{32, 32}).pow(2.0).sum()}, {spec})[0];
    return std::vector<Tensor>{
        tg::fft::irfft2(tg::fft::rfft2(r) * 2.0, tg::IntList{32, 32}),
        tg::fft::ifftn(tg::fft::fftn(x, std::nullopt, tg::IntList{0, 2}), std::nullopt, tg::IntList{0, 2}), g};
  };
  tg::cuda::CUDAGraph graph;
  std::vector<Tensor> out = capture_after_warmup(graph, step);
  for (int rep = 0; rep < 3; ++rep) {
    Tensor fresh = random_complex({4, 32, 32}, 6 + uint64_t(rep), dev).to(tg::kComplex64);
    x.copy_(fresh);
    r.copy_(tg::real(fresh));
    graph.replay();
    std::vector<Tensor> eager = step();
    EXPECT_LT(tg::amax(tg::abs(out[0] - eager[0])).item<float>(), 1e-5f) << rep;
    EXPECT_LT(tg::amax(tg::abs(out[1] - eager[1])).item<float>(), 1e-5f) << rep;
    EXPECT_LT(tg::amax(tg::abs(out[2] - eager[2])).item<float>(), 1e-5f) << rep;
    EXPECT_LT(tg::amax(tg::abs(out[0] - r * 2.0)).item<float>(), 1e-4f) << rep;
    EXPECT_LT(tg::amax(tg::abs(out[1] - x)).item<float>(), 1e-4f) << rep;
  }
}

// An FNO's forward and backward (spectral_mix2d's memset and staged
// kernel, the short irfft, the long thin weight-gradient products) captured
// in one graph and replayed on fresh inputs: the replay equals the eager step.
TEST(FftGpu, CapturedFnoStepReplaysAsEager) {
  REQUIRE_GPU();
  const tg::Device dev(tg::kCUDA, 0);
  tg::manual_seed(17);
  tg::nn::FNOOptions o;
  o.width = 8;
  o.modes = {4, 3};
  o.layers = 2;
  o.projection = 16;
  o.options = tg::TensorOptions().device(dev);
  tg::nn::FNO fno(o);
  Tensor x = tg::randn({4, 64, 64, 1}, o.options);  // B h w = 16384 points: the sliced products
  std::vector<Tensor> params = fno->parameters();
  auto step = [&] {
    std::vector<Tensor> leaves = params;
    Tensor loss = fno->forward(x).pow(2.0).mean();
    std::vector<Tensor> g = tg::autograd::grad({loss}, leaves);
    g.push_back(loss);
    return g;
  };
  tg::cuda::CUDAGraph graph;
  std::vector<Tensor> out = capture_after_warmup(graph, step);
  for (int rep = 0; rep < 3; ++rep) {
    x.copy_(tg::randn({4, 64, 64, 1}, o.options));
    graph.replay();
    std::vector<Tensor> eager = step();
    ASSERT_EQ(out.size(), eager.size());
    for (size_t i = 0; i < out.size(); ++i) {
      const float scale = std::max(1e-3f, tg::amax(tg::abs(eager[i])).item<float>());
      EXPECT_LT(tg::amax(tg::abs(out[i] - eager[i])).item<float>(), 1e-4f * scale) << "output " << i << " rep " << rep;
    }
  }
}

// ---- spectral convolutions and the FNO (issue 47 point 4) ----

TEST(Fno, SpectralConvKeepsAndDropsTheModesItShould) {
  for (const tg::Device& dev : devices()) {
    SCOPED_TRACE(dev.is_cpu() ? "cpu" : "cuda");
    const int64_t n = 16;
    tg::nn::SpectralConv1d conv(2, 2, n / 2 + 1, kF64);
    conv->to(dev);
    EXPECT_EQ(conv->weight.dtype(), tg::kComplex128);
    {  // identity weights: every mode kept unchanged
      tg::NoGradGuard off;
      Tensor eye = tg::eye(2, kF64).unsqueeze(-1).expand({2, 2, n / 2 + 1}).to(tg::kComplex128).to(dev);
      conv->weight.copy_(eye);
    }
    Tensor x = tg::randn({3, 2, n}, kF64).to(dev);
    expect_close(values(conv->forward(x)), values(x), 1e-13, "identity weights");
    // Three modes of weight 2i: cos(2 pi k t / n) -> 2i cos(...) filtered,
    // i.e. -2 sin(2 pi k t / n) for k < 3, and 0 for k >= 3.
    tg::nn::SpectralConv1d low(1, 1, 3, kF64);
    low->to(dev);
    {
      tg::NoGradGuard off;
      low->weight.copy_(tg::complex_from(tg::zeros({1, 1, 3}, kF64), tg::full({1, 1, 3}, 2.0, kF64)).to(dev));
    }
    Tensor t = tg::arange(0, n, 1, kF64) * (2 * M_PI / double(n));
    for (int64_t k : {1, 2, 3, 5}) {
      Tensor in = tg::cos(t * double(k)).view({1, 1, n}).to(dev);
      Tensor want = k < 3 ? tg::sin(t * double(k)) * -2.0 : tg::zeros({n}, kF64);
      expect_close(values(low->forward(in).view({n})), values(want), 1e-12, "mode " + std::to_string(k));
    }
  }
}

// spectral_mix2d against its definition (a loop over the modes), on every
// device, both complex dtypes: batch-major and channel-major spectra (the
// latter comes back channel-major), weights given as strided views (the
// layout its backward passes: conj(w) with in and out swapped), h odd.
TEST(Fno, SpectralMix2dMatchesItsDefinition) {
  tg::manual_seed(31);
  const int64_t B = 3, I = 4, O = 2, h = 7, wf = 5, m1 = 2, m2 = 3;
  for (const tg::Device& dev : devices()) {
    for (auto dt : {tg::kComplex128, tg::kComplex64}) {
      const auto o = tg::TensorOptions().dtype(dt);
      Tensor x = tg::randn({B, I, h, wf}, o), w1 = tg::randn({O, I, m1, m2}, o).transpose(0, 1),
             w2 = tg::randn({O, I, m1, m2}, o).transpose(0, 1);
      const std::vector<C> xv = values(x), w1v = values(w1.contiguous()), w2v = values(w2.contiguous());
      std::vector<C> want(size_t(B * O * h * wf));
      for (int64_t b = 0; b < B; ++b)
        for (int64_t q = 0; q < O; ++q)
          for (int64_t r = 0; r < h; ++r)
            for (int64_t c = 0; c < m2; ++c) {
              const bool top = r < m1, bottom = r >= h - m1;
              if (!top && !bottom) continue;
              const std::vector<C>& w = top ? w1v : w2v;
              const int64_t wr = top ? r : r - (h - m1);
              C acc = 0;
              for (int64_t i = 0; i < I; ++i)
                acc += xv[size_t(((b * I + i) * h + r) * wf + c)] * w[size_t(((i * O + q) * m1 + wr) * m2 + c)];
              want[size_t(((b * O + q) * h + r) * wf + c)] = acc;
            }
      const double tol = dt == tg::kComplex128 ? 1e-12 : 1e-5;
      const std::string what = std::string(tg::to_string(dt)) + (dev.is_cuda() ? " on CUDA" : " on the CPU");
      Tensor got = tg::spectral_mix2d(x.to(dev), w1.to(dev), w2.to(dev));
      EXPECT_EQ(got.sizes(), (tg::IntList{B, O, h, wf}));
      expect_close(values(got), want, tol, "batch-major " + what);
      // Channel-major: the same values, the output's channels outermost.
      Tensor cm = tg::spectral_mix2d(x.transpose(0, 1).contiguous().to(dev).transpose(0, 1), w1.to(dev), w2.to(dev));
      EXPECT_GT(cm.stride(1), cm.stride(0)) << what;
      expect_close(values(cm.contiguous()), want, tol, "channel-major " + what);
      // No batch dim; two leading dims.
      expect_close(values(tg::spectral_mix2d(x.select(0, 1).to(dev), w1.to(dev), w2.to(dev))),
                   std::vector<C>(want.begin() + O * h * wf, want.begin() + 2 * O * h * wf), tol, "no batch " + what);
      expect_close(values(tg::spectral_mix2d(x.to(dev).view({1, B, I, h, wf}), w1.to(dev), w2.to(dev))), want, tol,
                   "two leading dims " + what);
    }
  }
  // On the GPU, against the CPU: the batch in several chunks of shared
  // memory (150 x 32 inputs of a mode), and weights too large to stage
  // (60 x 60 Complex128: the unstaged kernel).
  if (tg::cuda::is_available()) {
    const tg::Device gpu(tg::kCUDA, 0);
    const auto z = tg::TensorOptions().dtype(tg::kComplex128);
    for (auto [n, ch] : {std::pair<int64_t, int64_t>{150, 32}, {3, 60}}) {
      Tensor x = tg::randn({n, ch, 5, 3}, z), w1 = tg::randn({ch, ch, 2, 2}, z), w2 = tg::randn({ch, ch, 2, 2}, z);
      expect_close(values(tg::spectral_mix2d(x.to(gpu), w1.to(gpu), w2.to(gpu))), values(tg::spectral_mix2d(x, w1, w2)),
                   1e-12, "GPU against CPU, batch " + std::to_string(n) + ", channels " + std::to_string(ch));
    }
  }
  // No input or no output channels: zeros forward, gradients of their
  // shapes (zeros or empty) backward.
  for (auto [in, out] : {std::pair<int64_t, int64_t>{0, 2}, {2, 0}}) {
    const auto z = tg::TensorOptions().dtype(tg::kComplex128);
    Tensor x = tg::randn({2, in, 4, 3}, z).requires_grad_(), w1 = tg::randn({in, out, 1, 2}, z).requires_grad_(),
           w2 = tg::randn({in, out, 1, 2}, z).requires_grad_();
    Tensor y = tg::spectral_mix2d(x, w1, w2);
    EXPECT_EQ(y.sizes(), (tg::IntList{2, out, 4, 3}));
    std::vector<Tensor> g = tg::autograd::grad({tg::view_as_real(y).sum()}, {x, w1, w2}, {}, std::nullopt, true);
    EXPECT_EQ(g[0].sizes(), x.sizes());
    EXPECT_EQ(g[1].sizes(), w1.sizes());
    EXPECT_EQ(g[2].sizes(), w2.sizes());
    if (g[0].numel() > 0) {
      EXPECT_EQ(tg::amax(tg::abs(g[0])).item<double>(), 0.0);
    }
  }
  // Bad input is refused naming the op and what it got.
  const auto c = tg::TensorOptions().dtype(tg::kComplex64);
  Tensor x = tg::randn({2, 3, 6, 4}, c), w = tg::randn({3, 2, 2, 2}, c);
  EXPECT_ERROR_CONTAINS(tg::spectral_mix2d(tg::real(x), w, w), "spectral_mix2d: expected complex tensors of one dtype");
  EXPECT_ERROR_CONTAINS(tg::spectral_mix2d(tg::real(x), w.to(tg::kComplex128), w.to(tg::kComplex128)),
                        "convert them with .to(Complex128)");
  EXPECT_ERROR_CONTAINS(tg::spectral_mix2d(x, Tensor(), w), "spectral_mix2d: weight1 is an undefined tensor");
  EXPECT_ERROR_CONTAINS(tg::spectral_mix2d(x, w.to(tg::kComplex128), w), "Complex128");
  EXPECT_ERROR_CONTAINS(tg::spectral_mix2d(x, w, w.narrow(3, 0, 1)), "two weights [in, out, m1, m2] of one shape");
  EXPECT_ERROR_CONTAINS(tg::spectral_mix2d(x.narrow(1, 0, 2), w, w), "[2, 2, 6, 4]");
  EXPECT_ERROR_CONTAINS(tg::spectral_mix2d(x, tg::randn({3, 2, 4, 2}, c), tg::randn({3, 2, 4, 2}, c)),
                        "4 x 2 modes need a spectrum of at least 8 x 2");
  EXPECT_ERROR_CONTAINS(tg::spectral_mix2d(x.narrow(3, 0, 1), w, w), "got 6 x 1");
  EXPECT_ERROR_CONTAINS(tg::spectral_mix2d(x.select(0, 0).select(0, 0), w, w), "spectral_mix2d: expected a spectrum");
  if (tg::cuda::is_available())
    EXPECT_ERROR_CONTAINS(tg::spectral_mix2d(x.to(tg::Device(tg::kCUDA, 0)), w, w), "spectral_mix2d");
  EXPECT_EQ(tg::spectral_mix2d(x, w, w).sizes(), (tg::IntList{2, 2, 6, 4}));  // still usable
}

TEST(Fno, SpectralConv2dAndFnoGradientsOfEveryOrder) {
  tg::manual_seed(21);
  tg::nn::SpectralConv2d conv(2, 3, 2, 2, kF64);
  Tensor x = tg::randn({2, 2, 5, 6}, kF64).requires_grad_();
  auto f = [&](const tg::autograd::variable_list& v) {
    conv->weight1 = v[1];
    conv->weight2 = v[2];
    return conv->forward(v[0]);
  };
  Tensor w1 = conv->weight1.detach().clone().requires_grad_(), w2 = conv->weight2.detach().clone().requires_grad_();
  tg::autograd::GradcheckOptions opt;
  opt.check_forward_ad = true;
  auto r = tg::autograd::gradcheck(f, {x, w1, w2}, opt);
  EXPECT_TRUE(r.ok) << r.message;
  auto r2 = tg::autograd::gradgradcheck(f, {x, w1, w2}, opt);
  EXPECT_TRUE(r2.ok) << r2.message;
  // The FNO (2-D, tiny) in its input.
  tg::nn::FNOOptions o;
  o.width = 3;
  o.modes = {2, 2};
  o.layers = 2;
  o.projection = 4;
  o.options = kF64;
  tg::nn::FNO fno(o);
  Tensor a = tg::randn({1, 4, 4, 1}, kF64).requires_grad_();
  auto g = [&](const tg::autograd::variable_list& v) { return fno->forward(v[0]); };
  EXPECT_EQ(fno->forward(a).sizes(), (tg::IntList{1, 4, 4, 1}));
  auto r3 = tg::autograd::gradcheck(g, {a}, opt);
  EXPECT_TRUE(r3.ok) << r3.message;
  // A 1-D FNO's shapes; modes beyond the grid are refused naming the layer.
  o.modes = {3};
  tg::nn::FNO line(o);
  EXPECT_EQ(line->forward(tg::randn({2, 8, 1}, kF64)).sizes(), (tg::IntList{2, 8, 1}));
  EXPECT_EQ(line->forward(tg::randn({0, 8, 1}, kF64)).sizes(), (tg::IntList{0, 8, 1}));  // a zero batch
  EXPECT_ERROR_CONTAINS(line->forward(tg::randn({2, 3, 1}, kF64)), "SpectralConv1d: 3 modes need a grid");
  EXPECT_ERROR_CONTAINS(fno->forward(tg::randn({1, 4, 4, 2}, kF64)), "FNO: expected an input");
  // Dtypes are named by the layer (the adversary found inner ops named).
  EXPECT_ERROR_CONTAINS(fno->forward(tg::randn({1, 4, 4, 1})), "FNO: expected a Float64 input");
  EXPECT_ERROR_CONTAINS(conv->forward(tg::randn({2, 2, 5, 6})), "SpectralConv2d: expected a Float64 input");
  // An integer input: converting the module to it is no advice.
  try {
    conv->forward(tg::ones({2, 2, 5, 6}, tg::TensorOptions().dtype(tg::kInt64)));
    ADD_FAILURE() << "an Int64 input was taken";
  } catch (const tg::Error& e) {
    EXPECT_NE(std::string(e.what()).find("convert the input with .to(Float64)"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find("module"), std::string::npos) << e.what();
  }
  EXPECT_ERROR_CONTAINS(conv->forward(tg::randn({2, 2, 5, 6}, kF64).to(tg::kComplex128)),
                        "SpectralConv2d: expected a Float64 input");
  // And in its parameters (a pointwise map's weight and bias, the lifting's
  // weight, a spectral weight): the channel-major GEMMs' rules.
  auto h = [&](const tg::autograd::variable_list& v) {
    fno->pointwise[0]->weight = v[0];
    fno->pointwise[0]->bias = v[1];
    fno->lift->weight = v[2];
    std::dynamic_pointer_cast<tg::nn::SpectralConv2dImpl>(fno->spectral[1])->weight1 = v[3];
    return fno->forward(a.detach());
  };
  auto param = [](const Tensor& p) { return p.detach().clone().requires_grad_(); };
  auto r4 = tg::autograd::gradcheck(
      h,
      {param(fno->pointwise[0]->weight), param(fno->pointwise[0]->bias), param(fno->lift->weight),
       param(std::dynamic_pointer_cast<tg::nn::SpectralConv2dImpl>(fno->spectral[1])->weight1)},
      opt);
  EXPECT_TRUE(r4.ok) << r4.message;
  // Module::to(Float32) makes the complex weights Complex64.
  fno->to(tg::kFloat32);
  EXPECT_EQ(std::dynamic_pointer_cast<tg::nn::SpectralConv2dImpl>(fno->spectral[0])->weight1.dtype(), tg::kComplex64);
}

// A spectral layer replaced by the user's module (batch-major, as forward's
// contract): the FNO hands it [B, c, spatial...].
struct BatchMajor : tg::nn::Module {
  explicit BatchMajor(std::shared_ptr<tg::nn::Module> inner) : Module("BatchMajor"), inner_(std::move(inner)) {}
  Tensor forward(const Tensor& x) override {
    EXPECT_EQ(x.size(1), 4) << "not batch-major";
    return inner_->forward(x);
  }
  std::shared_ptr<tg::nn::Module> inner_;
};

// The FNO runs channel-major inside; its values are those of the layers
// composed channels last as the reference implementation writes them (the
// modules' own forward), 1-D and 2-D, on each device; and each spectral
// convolution's channel-major form is its forward with the first two dims
// swapped.
TEST(Fno, ChannelMajorLayoutMatchesTheChannelsLastComposition) {
  for (const tg::Device& dev : devices()) {
    SCOPED_TRACE(dev.is_cpu() ? "cpu" : "cuda");
    for (const tg::IntList& modes : {tg::IntList{3, 2}, tg::IntList{4}}) {
      tg::manual_seed(5);
      tg::nn::FNOOptions o;
      o.width = 4;
      o.modes = modes;
      o.layers = 3;
      o.projection = 6;
      o.in_channels = 2;
      o.out_channels = 2;
      o.options = tg::TensorOptions().dtype(tg::kFloat64).device(dev);
      tg::nn::FNO fno(o);
      const bool two = modes.size() == 2;
      tg::IntList shape = two ? tg::IntList{3, 8, 6, 2} : tg::IntList{3, 10, 2};
      Tensor x = tg::randn(shape, kF64).to(dev);
      // Channels last, [B, spatial..., c], with the grid coordinates.
      std::vector<Tensor> parts{x};
      for (size_t d = 0; d < modes.size(); ++d) {
        const int64_t n = x.size(int64_t(1 + d));
        Tensor c = tg::arange(0, n, 1, kF64) / double(n - 1);
        tg::IntList view(shape.size(), 1);
        view[1 + d] = n;
        tg::IntList full = shape;
        full.back() = 1;
        parts.push_back(c.to(dev).view(view).expand(full));
      }
      Tensor v = fno->lift->forward(tg::cat(parts, -1));
      tg::IntList first = two ? tg::IntList{0, 3, 1, 2} : tg::IntList{0, 2, 1};
      tg::IntList last = two ? tg::IntList{0, 2, 3, 1} : tg::IntList{0, 2, 1};
      for (int64_t l = 0; l < o.layers; ++l) {
        Tensor s = fno->spectral[size_t(l)]->forward(v.permute(first)).permute(last);
        v = s + fno->pointwise[size_t(l)]->forward(v);
        if (l + 1 < o.layers) v = tg::gelu(v);
      }
      Tensor want = fno->proj2->forward(tg::gelu(fno->proj1->forward(v)));
      Tensor got = fno->forward(x);
      ASSERT_EQ(got.sizes(), want.sizes());
      expect_close(values(got), values(want), 1e-12, two ? "2-D FNO" : "1-D FNO");
      fno->spectral[1] = std::make_shared<BatchMajor>(fno->spectral[1]);
      expect_close(values(fno->forward(x)), values(got), 1e-13, "a user's spectral module");
      // The spectral convolution's channel-major form.
      Tensor in = tg::randn(two ? tg::IntList{2, 4, 8, 6} : tg::IntList{2, 4, 10}, kF64).to(dev);
      Tensor by_batch, by_channel;
      if (two) {
        auto& c = static_cast<tg::nn::SpectralConv2dImpl&>(*fno->spectral[0]);
        by_batch = c.forward(in);
        by_channel = c.forward_channel_major(in.transpose(0, 1)).transpose(0, 1);
        EXPECT_ERROR_CONTAINS(c.forward_channel_major(in), "SpectralConv2d: expected an input [4, batch, h, w]");
      } else {
        auto& c = static_cast<tg::nn::SpectralConv1dImpl&>(*fno->spectral[0]);
        by_batch = c.forward(in);
        by_channel = c.forward_channel_major(in.transpose(0, 1)).transpose(0, 1);
        EXPECT_ERROR_CONTAINS(c.forward_channel_major(in), "SpectralConv1d: expected an input [4, batch, n]");
      }
      expect_close(values(by_channel), values(by_batch), 1e-13, "channel-major spectral convolution");
    }
  }
}

}  // namespace
}  // namespace tgtest
