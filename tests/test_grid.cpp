// The grid family (grid.def) against direct loops and hand-worked values,
// on the CPU and CUDA: convolutions (1-3 spatial dims, groups, stride,
// padding, dilation, transposed), pooling with its indices and divisors,
// padding modes, resampling, the normalizations and their running
// statistics, dtypes, and bad arguments. Gradients of every order and every
// mode are checked by the gradient test table (test_op_table.cpp).
#include <cmath>
#include <limits>
#include <vector>

#include <tapegrad/tensor/grid.h>

#include "reference.h"

namespace {

using tg::Device;
using tg::IntList;
using tg::Tensor;

const tg::TensorOptions kF64 = tg::TensorOptions().dtype(tg::kFloat64);

class Grid : public ::testing::TestWithParam<tg::DeviceType> {
 protected:
  void SetUp() override {
    if (GetParam() == tg::kCUDA) {
      REQUIRE_GPU();
    }
  }
  Device dev() const { return GetParam() == tg::kCUDA ? Device(tg::kCUDA, 0) : Device(tg::kCPU); }
  Tensor on(const Tensor& t) const { return t.to(dev()); }
};

// The same values in channels-last memory order (a non-contiguous input).
Tensor grid_samples_cl(const Tensor& x) {
  if (x.dim() == 4) return x.permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2});
  return x.transpose(1, 2).contiguous().transpose(1, 2);
}

std::vector<double> values(const Tensor& t) {
  Tensor c = t.to(Device(tg::kCPU)).to(tg::kFloat64).contiguous();
  const double* p = c.data_ptr<double>();
  return std::vector<double>(p, p + c.numel());
}

// Sizes padded to 3 spatial dims (leading 1s), for one reference loop.
struct Dims3 {
  int64_t d[3];
};
Dims3 dims3(const IntList& s, size_t from) {
  Dims3 r{{1, 1, 1}};
  const size_t S = s.size() - from;
  for (size_t i = 0; i < S; ++i)
    r.d[3 - S + i] = s[from + i];
  return r;
}
Dims3 per3(const IntList& v, size_t S, int64_t fill) {
  Dims3 r{{fill, fill, fill}};
  for (size_t i = 0; i < S; ++i)
    r.d[3 - S + i] = v.size() == 1 ? v[0] : v[i];
  return r;
}

// The convolution by its definition.
std::vector<double> ref_conv(const Tensor& x, const Tensor& w, const IntList& stride, const IntList& padding,
                             const IntList& dilation, int64_t groups, IntList* out_sizes) {
  const size_t S = size_t(x.dim() - 2);
  const std::vector<double> xv = values(x), wv = values(w);
  const int64_t N = x.size(0), C = x.size(1), O = w.size(0), Cg = C / groups, Og = O / groups;
  const Dims3 in = dims3(x.sizes(), 2), k = dims3(w.sizes(), 2), s = per3(stride, S, 1), p = per3(padding, S, 0),
              d = per3(dilation, S, 1);
  Dims3 o;
  for (int i = 0; i < 3; ++i)
    o.d[i] = (in.d[i] + 2 * p.d[i] - d.d[i] * (k.d[i] - 1) - 1) / s.d[i] + 1;
  *out_sizes = {N, O};
  for (size_t i = 0; i < S; ++i)
    out_sizes->push_back(o.d[3 - S + i]);
  std::vector<double> out(size_t(N * O * o.d[0] * o.d[1] * o.d[2]), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t oc = 0; oc < O; ++oc)
      for (int64_t a = 0; a < o.d[0]; ++a)
        for (int64_t b = 0; b < o.d[1]; ++b)
          for (int64_t c = 0; c < o.d[2]; ++c) {
            double acc = 0;
            const int64_t g = oc / Og;
            for (int64_t ci = 0; ci < Cg; ++ci)
              for (int64_t i = 0; i < k.d[0]; ++i)
                for (int64_t j = 0; j < k.d[1]; ++j)
                  for (int64_t l = 0; l < k.d[2]; ++l) {
                    const int64_t ia = a * s.d[0] - p.d[0] + i * d.d[0], ib = b * s.d[1] - p.d[1] + j * d.d[1],
                                  ic = c * s.d[2] - p.d[2] + l * d.d[2];
                    if (ia < 0 || ia >= in.d[0] || ib < 0 || ib >= in.d[1] || ic < 0 || ic >= in.d[2]) continue;
                    const double xe =
                        xv[size_t((((n * C + g * Cg + ci) * in.d[0] + ia) * in.d[1] + ib) * in.d[2] + ic)];
                    const double we = wv[size_t((((oc * Cg + ci) * k.d[0] + i) * k.d[1] + j) * k.d[2] + l)];
                    acc += xe * we;
                  }
            out[size_t((((n * O + oc) * o.d[0] + a) * o.d[1] + b) * o.d[2] + c)] = acc;
          }
  return out;
}

// The transposed convolution by its definition: each input element spreads
// over its window. weight [C_in, C_out / groups, k...].
std::vector<double> ref_conv_transpose(const Tensor& x, const Tensor& w, const IntList& stride, const IntList& padding,
                                       const IntList& output_padding, const IntList& dilation, int64_t groups,
                                       IntList* out_sizes) {
  const size_t S = size_t(x.dim() - 2);
  const std::vector<double> xv = values(x), wv = values(w);
  const int64_t N = x.size(0), Cin = x.size(1), Cog = w.size(1), Cig = Cin / groups, Cout = Cog * groups;
  const Dims3 in = dims3(x.sizes(), 2), k = dims3(w.sizes(), 2), s = per3(stride, S, 1), p = per3(padding, S, 0),
              op = per3(output_padding, S, 0), d = per3(dilation, S, 1);
  Dims3 o;
  for (int i = 0; i < 3; ++i)
    o.d[i] = (in.d[i] - 1) * s.d[i] - 2 * p.d[i] + d.d[i] * (k.d[i] - 1) + op.d[i] + 1;
  *out_sizes = {N, Cout};
  for (size_t i = 0; i < S; ++i)
    out_sizes->push_back(o.d[3 - S + i]);
  std::vector<double> out(size_t(N * Cout * o.d[0] * o.d[1] * o.d[2]), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t ci = 0; ci < Cin; ++ci)
      for (int64_t a = 0; a < in.d[0]; ++a)
        for (int64_t b = 0; b < in.d[1]; ++b)
          for (int64_t c = 0; c < in.d[2]; ++c) {
            const double xe = xv[size_t((((n * Cin + ci) * in.d[0] + a) * in.d[1] + b) * in.d[2] + c)];
            const int64_t g = ci / Cig;
            for (int64_t co = 0; co < Cog; ++co)
              for (int64_t i = 0; i < k.d[0]; ++i)
                for (int64_t j = 0; j < k.d[1]; ++j)
                  for (int64_t l = 0; l < k.d[2]; ++l) {
                    const int64_t oa = a * s.d[0] - p.d[0] + i * d.d[0], ob = b * s.d[1] - p.d[1] + j * d.d[1],
                                  oc = c * s.d[2] - p.d[2] + l * d.d[2];
                    if (oa < 0 || oa >= o.d[0] || ob < 0 || ob >= o.d[1] || oc < 0 || oc >= o.d[2]) continue;
                    out[size_t((((n * Cout + g * Cog + co) * o.d[0] + oa) * o.d[1] + ob) * o.d[2] + oc)] +=
                        xe * wv[size_t((((ci * Cog + co) * k.d[0] + i) * k.d[1] + j) * k.d[2] + l)];
                  }
          }
  return out;
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want, double tol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << what << " at flat index " << i;
}

TEST_P(Grid, ConvolutionsMatchTheirDefinition) {
  struct Case {
    IntList x, w, stride, padding, dilation;
    int64_t groups;
  };
  const std::vector<Case> cases = {
      {{2, 4, 5, 6}, {6, 2, 3, 2}, {2, 1}, {1, 2}, {1, 2}, 2},           // groups, per-dim geometry
      {{1, 3, 7, 7}, {3, 1, 3, 3}, {3}, {1}, {1}, 3},                    // depthwise, stride above the kernel
      {{2, 3, 4, 4}, {5, 3, 1, 1}, {1}, {0}, {1}, 1},                    // 1 x 1
      {{3, 2, 9}, {4, 2, 3}, {2}, {2}, {3}, 1},                          // 1-D
      {{1, 2, 4, 3, 5}, {2, 1, 2, 2, 3}, {1, 2, 1}, {1, 0, 2}, {1}, 2},  // 3-D
  };
  for (const Case& c : cases) {
    tg::manual_seed(11);
    Tensor x = tg::randn(c.x, kF64), w = tg::randn(c.w, kF64);
    IntList os;
    const std::vector<double> want = ref_conv(x, w, c.stride, c.padding, c.dilation, c.groups, &os);
    Tensor y = tg::convolution(on(x), on(w), {}, c.stride, c.padding, c.dilation, false, {0}, c.groups);
    EXPECT_EQ(y.sizes(), os);
    expect_near(values(y), want, 1e-12, "convolution");
    // Channels-last input, and Float32 (no TF32: float32 accuracy).
    if (x.dim() == 4) {
      Tensor xc = on(x).permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2});
      expect_near(values(tg::convolution(xc, on(w), {}, c.stride, c.padding, c.dilation, false, {0}, c.groups)), want,
                  1e-12, "channels-last convolution");
    }
    Tensor y32 = tg::convolution(on(x).to(tg::kFloat32), on(w).to(tg::kFloat32), {}, c.stride, c.padding, c.dilation,
                                 false, {0}, c.groups);
    EXPECT_EQ(y32.dtype(), tg::kFloat32);
    expect_near(values(y32), want, 1e-5, "float32 convolution");
    Tensor y16 = tg::convolution(on(x).to(tg::kBFloat16), on(w).to(tg::kBFloat16), {}, c.stride, c.padding, c.dilation,
                                 false, {0}, c.groups);
    EXPECT_EQ(y16.dtype(), tg::kBFloat16);
    expect_near(values(y16), want, 0.1, "bfloat16 convolution");
  }
}

TEST_P(Grid, TransposedConvolutionsMatchTheirDefinition) {
  struct Case {
    IntList x, w, stride, padding, output_padding, dilation;
    int64_t groups;
  };
  const std::vector<Case> cases = {
      {{2, 4, 3, 4}, {4, 3, 3, 2}, {2, 1}, {1, 0}, {1, 0}, {1, 2}, 2},
      {{1, 2, 5}, {2, 3, 4}, {3}, {1}, {2}, {1}, 1},
      {{1, 2, 2, 3, 2}, {2, 2, 2, 2, 2}, {2}, {0}, {1}, {1}, 1},
  };
  for (const Case& c : cases) {
    tg::manual_seed(12);
    Tensor x = tg::randn(c.x, kF64), w = tg::randn(c.w, kF64), b = tg::randn({w.size(1) * c.groups}, kF64);
    IntList os;
    std::vector<double> want =
        ref_conv_transpose(x, w, c.stride, c.padding, c.output_padding, c.dilation, c.groups, &os);
    const std::vector<double> bv = values(b);
    const int64_t per = int64_t(want.size()) / (os[0] * os[1]);
    for (size_t i = 0; i < want.size(); ++i)
      want[i] += bv[size_t((int64_t(i) / per) % os[1])];
    Tensor y = tg::convolution(on(x), on(w), on(b), c.stride, c.padding, c.dilation, true, c.output_padding, c.groups);
    EXPECT_EQ(y.sizes(), os);
    expect_near(values(y), want, 1e-12, "conv_transpose");
  }
}

TEST_P(Grid, WeightGradientIsTheConvolutionsAdjoint) {
  // <conv(x, w), y> = <w, conv_w(x, y)> = <x, conv^T(y, w)>.
  tg::manual_seed(13);
  Tensor x = on(tg::randn({2, 4, 6, 5}, kF64)), w = on(tg::randn({6, 2, 3, 2}, kF64));
  const IntList s = {2, 1}, p = {1, 1}, d = {1, 2};
  Tensor y = on(tg::randn(tg::conv2d(x, w, {}, s, p, d, 2).sizes(), kF64));
  const double lhs = tg::sum(tg::conv2d(x, w, {}, s, p, d, 2) * y).item<double>();
  const double mid = tg::sum(w * tg::_convolution_backward_weight(x, y, w.sizes(), s, p, d, 2)).item<double>();
  const double rhs = tg::sum(x * tg::_convolution_backward_input(y, w, {6, 5}, s, p, d, 2)).item<double>();
  EXPECT_NEAR(mid, lhs, 1e-10 * (1 + std::abs(lhs)));
  EXPECT_NEAR(rhs, lhs, 1e-10 * (1 + std::abs(lhs)));
}

TEST_P(Grid, PoolingMatchesItsDefinition) {
  // x: 0..19 on a 4 x 5 plane, channel 1 negated.
  Tensor base = tg::arange(20, kF64).view({1, 1, 4, 5});
  Tensor x = on(tg::cat({base, -base}, 1));
  // max_pool2d 2 x 2, stride 2, ceil mode: windows rows {0,1},{2,3}, cols {0,1},{2,3},{4}.
  auto [mv, mi] = tg::max_pool2d_with_indices(x, {2}, {}, {0}, {1}, true);
  EXPECT_EQ(mv.sizes(), (IntList{1, 2, 2, 3}));
  EXPECT_EQ(values(mv.select(1, 0)), (std::vector<double>{6, 8, 9, 16, 18, 19}));
  EXPECT_EQ(values(mi.select(1, 0)), (std::vector<double>{6, 8, 9, 16, 18, 19}));
  EXPECT_EQ(values(mv.select(1, 1)), (std::vector<double>{-0, -2, -4, -10, -12, -14}));
  EXPECT_EQ(values(mi.select(1, 1)), (std::vector<double>{0, 2, 4, 10, 12, 14}));
  EXPECT_EQ(mi.dtype(), tg::kInt64);
  // With padding 1 (implicit -inf) and stride 1 in width.
  auto [pv, pi] = tg::max_pool2d_with_indices(x.narrow(1, 0, 1), {2}, {2, 3}, {1});
  EXPECT_EQ(values(pv), (std::vector<double>{0, 3, 10, 13, 15, 18}));
  EXPECT_EQ(values(pi), (std::vector<double>{0, 3, 10, 13, 15, 18}));
  // avg_pool2d 3 x 3, stride 2, padding 1: with and without the padding counted.
  Tensor inc = tg::avg_pool2d(x.narrow(1, 0, 1), {3}, {2}, {1}, false, true);
  Tensor exc = tg::avg_pool2d(x.narrow(1, 0, 1), {3}, {2}, {1}, false, false);
  // Output (0, 0): window rows -1..1, cols -1..1 -> {0, 1, 5, 6}: sum 12.
  EXPECT_NEAR(values(inc)[0], 12.0 / 9, 1e-12);
  EXPECT_NEAR(values(exc)[0], 12.0 / 4, 1e-12);
  // Output (1, 2): rows 1..3, cols 3..5 -> {8, 9, 13, 14, 18, 19}: sum 81, 6 inside, 9 in the padded plane.
  EXPECT_NEAR(values(inc)[5], 81.0 / 9, 1e-12);
  EXPECT_NEAR(values(exc)[5], 81.0 / 6, 1e-12);
  EXPECT_NEAR(values(tg::avg_pool2d(x.narrow(1, 0, 1), {2}, {2}, {0}, false, true, 7))[0], 12.0 / 7, 1e-12);
  // adaptive: 5 columns into 3 bins [0, 2), [1, 4), [3, 5).
  Tensor ad = tg::adaptive_avg_pool2d(x.narrow(1, 0, 1), {1, 3});
  EXPECT_NEAR(values(ad)[0], (0 + 1 + 5 + 6 + 10 + 11 + 15 + 16) / 8.0, 1e-12);
  EXPECT_NEAR(values(ad)[1], (1 + 2 + 3) * 4 / 12.0 + 7.5, 1e-12);
  EXPECT_NEAR(values(ad)[2], (3 + 4 + 8 + 9 + 13 + 14 + 18 + 19) / 8.0, 1e-12);
}

TEST_P(Grid, PaddingModesAndShufflesMatchHandWorkedValues) {
  Tensor x = on(tg::arange(4, kF64).view({1, 1, 4}));
  EXPECT_EQ(values(tg::pad(x, {2, 2}, "reflect")), (std::vector<double>{2, 1, 0, 1, 2, 3, 2, 1}));
  EXPECT_EQ(values(tg::pad(x, {2, 1}, "replicate")), (std::vector<double>{0, 0, 0, 1, 2, 3, 3}));
  EXPECT_EQ(values(tg::pad(x, {1, 2}, "circular")), (std::vector<double>{3, 0, 1, 2, 3, 0, 1}));
  EXPECT_EQ(values(tg::pad(x, {1, -2}, "constant", 7)), (std::vector<double>{7, 0, 1}));
  Tensor y = tg::pad(x, {0, 0});
  EXPECT_FALSE(y.data_ptr() == x.data_ptr()) << "pad's result must not alias its input";
  // pixel_shuffle: channel c r^2 + i r + j goes to (h r + i, w r + j).
  Tensor ps = tg::pixel_shuffle(on(tg::arange(4, kF64).view({1, 4, 1, 1})), 2);
  EXPECT_EQ(values(ps), (std::vector<double>{0, 1, 2, 3}));
  Tensor z = on(tg::randn({2, 8, 3, 2}, kF64));
  expect_near(values(tg::pixel_unshuffle(tg::pixel_shuffle(z, 2), 2)), values(z), 0, "pixel_unshuffle");
  // fold(unfold(x)) counts each element once per window that covers it.
  Tensor u = on(tg::randn({2, 3, 4, 4}, kF64));
  expect_near(values(tg::fold(tg::unfold(u, {2}, {1}, {0}, {2}), {4, 4}, {2}, {1}, {0}, {2})), values(u), 1e-15,
              "fold(unfold) with tiles");
  Tensor ones = on(tg::ones({1, 1, 3, 3}, kF64));
  EXPECT_EQ(values(tg::fold(tg::unfold(ones, {2}), {3, 3}, {2})), (std::vector<double>{1, 2, 1, 2, 4, 2, 1, 2, 1}));
}

TEST_P(Grid, InterpolationMatchesPyTorchsValues) {
  Tensor x = on(tg::tensor({1.0, 2.0, 3.0, 4.0}, {1, 1, 2, 2}, kF64));
  // torch.nn.functional.interpolate(x, scale_factor=2, mode="bilinear").
  expect_near(values(tg::interpolate(x, {}, {2.0}, "bilinear")),
              {1, 1.25, 1.75, 2, 1.5, 1.75, 2.25, 2.5, 2.5, 2.75, 3.25, 3.5, 3, 3.25, 3.75, 4}, 1e-12, "bilinear");
  expect_near(values(tg::interpolate(x, {3, 3}, {}, "bilinear", true)), {1, 1.5, 2, 2, 2.5, 3, 3, 3.5, 4}, 1e-12,
              "bilinear, align_corners");
  expect_near(values(tg::interpolate(x, {}, {2.0}, "nearest")), {1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4}, 0,
              "nearest");
  expect_near(values(tg::interpolate(x, {3, 1}, {}, "nearest")), {1, 1, 3}, 0, "nearest, 2 -> 3 rows");
  Tensor l = on(tg::tensor({0.0, 10.0, 20.0}, {1, 1, 3}, kF64));
  expect_near(values(tg::interpolate(l, {5}, {}, "linear", true)), {0, 5, 10, 15, 20}, 1e-12, "linear");
}

TEST_P(Grid, NormalizationsMatchTheirDefinitionAndKeepRunningStatistics) {
  tg::manual_seed(14);
  Tensor x = on(tg::randn({3, 4, 2, 5}, kF64) * 2.0 + 1.0);
  // group_norm with 2 groups: each (sample, group) standardized.
  Tensor w = on(tg::randn({4}, kF64)), b = on(tg::randn({4}, kF64));
  Tensor gn = tg::group_norm(x, 2, w, b, 1e-5);
  const std::vector<double> xv = values(x), gv = values(gn), wv = values(w), bv = values(b);
  for (int64_t n = 0; n < 3; ++n)
    for (int64_t g = 0; g < 2; ++g) {
      double m = 0, v = 0;
      for (int64_t i = 0; i < 20; ++i)
        m += xv[size_t(n * 40 + g * 20 + i)] / 20;
      for (int64_t i = 0; i < 20; ++i)
        v += std::pow(xv[size_t(n * 40 + g * 20 + i)] - m, 2) / 20;
      for (int64_t i = 0; i < 20; ++i) {
        const int64_t c = g * 2 + i / 10;
        const double want = (xv[size_t(n * 40 + g * 20 + i)] - m) / std::sqrt(v + 1e-5) * wv[size_t(c)] + bv[size_t(c)];
        ASSERT_NEAR(gv[size_t(n * 40 + g * 20 + i)], want, 1e-10);
      }
    }
  // batch_norm in training: the batch statistics, and the running ones
  // updated with momentum (the running variance unbiased).
  Tensor rm = on(tg::zeros({4}, kF64)), rv = on(tg::ones({4}, kF64));
  Tensor bn = tg::batch_norm(x, rm, rv, {}, {}, true, 0.1, 1e-5);
  for (int64_t c = 0; c < 4; ++c) {
    double m = 0, v = 0;
    for (int64_t n = 0; n < 3; ++n)
      for (int64_t i = 0; i < 10; ++i)
        m += xv[size_t(n * 40 + c * 10 + i)] / 30;
    for (int64_t n = 0; n < 3; ++n)
      for (int64_t i = 0; i < 10; ++i)
        v += std::pow(xv[size_t(n * 40 + c * 10 + i)] - m, 2) / 30;
    EXPECT_NEAR(values(rm)[size_t(c)], 0.1 * m, 1e-12);
    EXPECT_NEAR(values(rv)[size_t(c)], 0.9 + 0.1 * v * 30 / 29, 1e-12);
    EXPECT_NEAR(values(bn)[size_t(c * 10)], (xv[size_t(c * 10)] - m) / std::sqrt(v + 1e-5), 1e-10);
  }
  // Evaluation uses the running statistics.
  Tensor ev = tg::batch_norm(x, rm, rv, {}, {}, false, 0.1, 1e-5);
  EXPECT_NEAR(values(ev)[0], (xv[0] - values(rm)[0]) / std::sqrt(values(rv)[0] + 1e-5), 1e-10);
  // instance_norm: per sample and channel.
  Tensor in = tg::instance_norm(x);
  Tensor m = tg::mean(in, {2, 3});
  EXPECT_LT(tg::abs(m).amax().item<double>(), 1e-12);
}

// The group primitives by their definitions: small float64 cases against
// loops; on every device, large float32/float64 ones (a group split over
// many blocks, shared and per-sample coefficients, channels-last inputs
// that take the op layer's path) against the CPU; bad arguments.
TEST_P(Grid, GroupPrimitivesMatchTheirDefinition) {
  tg::manual_seed(21);
  const int64_t N = 3, C = 6, S = 10, G = 3;
  Tensor a = on(tg::randn({N, C, 2, 5}, kF64)), b = on(tg::randn({N, C, 2, 5}, kF64));
  Tensor sc = on(tg::randn({N, 2}, kF64)), bi = on(tg::randn({1, 3}, kF64));
  const std::vector<double> av = values(a), bv = values(b), scv = values(sc), biv = values(bi);
  const std::vector<double> sum = values(tg::_group_sum(a, b, G)), sum1 = values(tg::_group_sum(a, {}, G));
  const std::vector<double> cen = values(tg::_group_center(a, G)), aff = values(tg::_group_affine(a, sc, bi));
  ASSERT_EQ(sum.size(), size_t(N * G));
  const int64_t run = C / G * S;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t g = 0; g < G; ++g) {
      double s2 = 0, s1 = 0;
      for (int64_t i = 0; i < run; ++i) {
        const size_t k = size_t((n * G + g) * run + i);
        s2 += av[k] * bv[k];
        s1 += av[k];
      }
      EXPECT_NEAR(sum[size_t(n * G + g)], s2, 1e-12);
      EXPECT_NEAR(sum1[size_t(n * G + g)], s1, 1e-12);
      for (int64_t i = 0; i < run; ++i) {
        const size_t k = size_t((n * G + g) * run + i);
        EXPECT_NEAR(cen[k], av[k] - s1 / double(run), 1e-12);
      }
    }
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t j = 0; j < S; ++j) {
        const size_t k = size_t((n * C + c) * S + j);
        EXPECT_NEAR(aff[k], scv[size_t(n * 2 + c / 3)] * av[k] + biv[size_t(c / 2)], 1e-12) << k;
      }
  // Large: against the CPU (its op-layer path).
  for (tg::ScalarType dt : {tg::kFloat32, tg::kFloat64}) {
    const double tol = dt == tg::kFloat32 ? 2e-5 : 1e-11;
    const tg::TensorOptions o = tg::TensorOptions().dtype(dt);
    // Rows of whole 16-byte vectors, rows that are not (33 x 33), short rows.
    for (const IntList& shape :
         {IntList{2, 8, 64, 64}, IntList{1, 4, 300, 300}, IntList{2, 8, 33, 33}, IntList{5, 32, 3}}) {
      Tensor x = tg::randn(shape, o) * 3.0 + 2.0, y = tg::randn(shape, o);
      Tensor xd = on(x), yd = on(y), xl = on(grid_samples_cl(x));
      // Contiguous but one element past a 16-byte boundary.
      const int64_t n = x.numel();
      Tensor xm = on(tg::cat({tg::zeros({1}, o), x.reshape({-1})})).narrow(0, 1, n).view(shape);
      const int64_t groups = shape[1] / 4;
      Tensor coef = tg::randn({shape[0], shape[1]}, o), shared = tg::randn({1, groups}, o);
      auto rel = [&](const Tensor& got, const Tensor& want, const char* what) {
        const double scale = std::max(1.0, tg::abs(want.to(tg::kFloat64)).amax().item<double>());
        const double err =
            tg::abs(got.to(Device(tg::kCPU)).to(tg::kFloat64) - want.to(tg::kFloat64)).amax().item<double>();
        EXPECT_LE(err, tol * scale) << what << " " << tg::shape_str(shape) << " " << dt;
      };
      rel(tg::_group_sum(xd, yd, groups), tg::_group_sum(x, y, groups), "_group_sum(a, b)");
      rel(tg::_group_sum(xd, {}, groups), tg::_group_sum(x, {}, groups), "_group_sum(a)");
      rel(tg::_group_sum(xl, yd, groups), tg::_group_sum(x, y, groups), "_group_sum(channels-last a, b)");
      rel(tg::_group_center(xd, groups), tg::_group_center(x, groups), "_group_center");
      rel(tg::_group_center(xl, groups), tg::_group_center(x, groups), "_group_center(channels-last)");
      rel(tg::_group_center(xm, groups), tg::_group_center(x, groups), "_group_center(misaligned)");
      rel(tg::_group_affine(xd, on(coef), on(shared)), tg::_group_affine(x, coef, shared), "_group_affine");
      rel(tg::_group_affine(xm, on(coef), {}), tg::_group_affine(x, coef, {}), "_group_affine(misaligned)");
      rel(tg::_group_affine(xd, on(shared), {}), tg::_group_affine(x, shared, {}), "_group_affine(shared scale)");
      rel(tg::_group_affine(xl, {}, on(coef).t().contiguous().t()), tg::_group_affine(x, {}, coef),
          "_group_affine(channels-last, strided bias)");
    }
  }
  EXPECT_ERROR_CONTAINS(tg::_group_sum(a, b, 4),
                        "_group_sum: channels (6) of a [3, 6, 2, 5] must be divisible by groups (4)");
  EXPECT_ERROR_CONTAINS(tg::_group_sum(a, b, 0), "divisible by groups (0)");
  EXPECT_ERROR_CONTAINS(tg::_group_sum(a, b.narrow(3, 0, 4), 3), "_group_sum: b [3, 6, 2, 4]");
  EXPECT_ERROR_CONTAINS(tg::_group_sum(on(tg::randn({6}, kF64)), {}, 1), "_group_sum: a must be [N, C, ...]");
  EXPECT_ERROR_CONTAINS(tg::_group_center(a.to(tg::kInt64), 3), "_group_center: x must be floating");
  EXPECT_ERROR_CONTAINS(tg::_group_affine(a, on(tg::randn({N, 4}, kF64)), {}),
                        "_group_affine: scale must be [N or 1, K] with K dividing the channels");
  EXPECT_ERROR_CONTAINS(tg::_group_affine(a, {}, on(tg::randn({2, 3}, kF64))), "bias must be [N or 1, K]");
  EXPECT_ERROR_CONTAINS(tg::_group_affine(a, sc.to(tg::kFloat32), {}), "_group_affine: scale has dtype Float32");
  EXPECT_EQ(tg::_group_affine(a, sc, {}).sizes(), a.sizes());  // still usable
}

// The linear resampling primitives against their definition (grid.def's
// PyTorch stencil), each other's adjoint, every kernel path (rows of whole
// vectors, rows that are not, the last dim, a misaligned operand) against
// the CPU, reduced dtypes and the argument checks.
TEST_P(Grid, ResamplePrimitivesMatchTheirDefinition) {
  tg::manual_seed(23);
  struct Case {
    int64_t dim, size;
    double scale;
    bool corners;
  };
  const IntList shape = {2, 3, 5, 4};
  Tensor x = on(tg::randn(shape, kF64));
  const std::vector<double> xv = values(x);
  for (const Case& c : {Case{2, 9, 5.0 / 9, false}, Case{3, 3, 0, true}, Case{3, 7, 0.4, false}, Case{2, 2, 2.5, false},
                        Case{3, 1, 0, true}}) {
    Tensor y = tg::_resample_linear(x, c.dim, c.size, c.scale, c.corners);
    IntList ys = shape;
    ys[size_t(c.dim)] = c.size;
    ASSERT_EQ(y.sizes(), ys);
    const std::vector<double> yv = values(y);
    const int64_t in = shape[size_t(c.dim)], inner = c.dim == 2 ? shape[3] : 1;
    const int64_t outer = c.dim == 2 ? 6 : 30;  // the dims before dim
    for (int64_t m = 0; m < outer; ++m)
      for (int64_t j = 0; j < c.size; ++j)
        for (int64_t k = 0; k < inner; ++k) {
          double src = c.corners ? (c.size > 1 ? double(j) * double(in - 1) / double(c.size - 1) : 0.0)
                                 : std::max((double(j) + 0.5) * c.scale - 0.5, 0.0);
          const int64_t i0 = std::min(int64_t(std::floor(src)), in - 1), i1 = std::min(i0 + 1, in - 1);
          const double w = src - double(i0);
          const double want =
              (1 - w) * xv[size_t((m * in + i0) * inner + k)] + w * xv[size_t((m * in + i1) * inner + k)];
          EXPECT_NEAR(yv[size_t((m * c.size + j) * inner + k)], want, 1e-12) << c.dim << " " << c.size;
        }
    // <R x, g> = <x, R* g>.
    Tensor g = on(tg::randn(ys, kF64));
    Tensor back = tg::_resample_linear_backward(g, c.dim, in, c.scale, c.corners);
    ASSERT_EQ(back.sizes(), shape);
    EXPECT_NEAR((y * g).sum().item<double>(), (x * back).sum().item<double>(), 1e-11) << c.dim << " " << c.size;
  }
  // Large, every path, against the CPU.
  for (tg::ScalarType dt : {tg::kFloat32, tg::kFloat64}) {
    const double tol = dt == tg::kFloat32 ? 1e-5 : 1e-12;
    const tg::TensorOptions o = tg::TensorOptions().dtype(dt);
    for (const IntList& s : {IntList{4, 8, 32, 64}, IntList{2, 3, 17, 65}}) {
      Tensor h = tg::randn(s, o);
      const int64_t n = h.numel();
      Tensor hm = on(tg::cat({tg::zeros({1}, o), h.reshape({-1})})).narrow(0, 1, n).view(s);
      for (const Case& c :
           {Case{3, 2 * s[3], 0.5, false}, Case{2, 2 * s[2], 0, true}, Case{2, s[2] / 2 + 1, 0, true}}) {
        auto close = [&](const Tensor& got, const Tensor& want, const char* what) {
          const double err =
              tg::abs(got.to(Device(tg::kCPU)).to(tg::kFloat64) - want.to(tg::kFloat64)).amax().item<double>();
          EXPECT_LE(err, tol) << what << " " << tg::shape_str(s) << " dim " << c.dim << " " << dt;
        };
        Tensor want = tg::_resample_linear(h, c.dim, c.size, c.scale, c.corners);
        close(tg::_resample_linear(on(h), c.dim, c.size, c.scale, c.corners), want, "_resample_linear");
        close(tg::_resample_linear(hm, c.dim, c.size, c.scale, c.corners), want, "_resample_linear(misaligned)");
        close(tg::_resample_linear(on(grid_samples_cl(h)), c.dim, c.size, c.scale, c.corners), want,
              "_resample_linear(channels-last)");
        Tensor gy = tg::randn(want.sizes(), o);
        close(tg::_resample_linear_backward(on(gy), c.dim, s[size_t(c.dim)], c.scale, c.corners),
              tg::_resample_linear_backward(gy, c.dim, s[size_t(c.dim)], c.scale, c.corners),
              "_resample_linear_backward");
      }
    }
  }
  // Reduced dtypes: computed in Float32, rounded once.
  Tensor b = x.to(tg::kBFloat16);
  Tensor rb = tg::_resample_linear(b, 2, 9, 5.0 / 9, false);
  EXPECT_EQ(rb.dtype(), tg::kBFloat16);
  EXPECT_EQ(values(rb), values(tg::_resample_linear(b.to(tg::kFloat32), 2, 9, 5.0 / 9, false).to(tg::kBFloat16)));
  // Zero batch, and the checks.
  EXPECT_EQ(tg::_resample_linear(x.narrow(0, 0, 0), 3, 6, 0.5, false).sizes(), (IntList{0, 3, 5, 6}));
  EXPECT_ERROR_CONTAINS(tg::_resample_linear(x, 1, 4, 1.0, false),
                        "_resample_linear: dim 1 is not a spatial dim of input [2, 3, 5, 4] (2 to 3)");
  EXPECT_ERROR_CONTAINS(tg::_resample_linear(x, 4, 4, 1.0, false), "dim 4 is not a spatial dim");
  EXPECT_ERROR_CONTAINS(tg::_resample_linear(x, 2, 0, 1.0, false),
                        "_resample_linear: size must be >= 1 and below 2^31, got 0");
  EXPECT_ERROR_CONTAINS(tg::_resample_linear(x, 2, 3, std::nan(""), false), "scale must be finite and > 0");
  EXPECT_ERROR_CONTAINS(tg::_resample_linear(x, 2, 3, -1.0, false), "scale must be finite and > 0, got -1");
  EXPECT_ERROR_CONTAINS(tg::_resample_linear(x.to(tg::kInt64), 2, 3, 1.0, false), "input must be floating");
  EXPECT_ERROR_CONTAINS(tg::_resample_linear(on(tg::randn({2, 3}, kF64)), 2, 3, 1.0, false),
                        "input must be [N, C, spatial...], got [2, 3]");
  EXPECT_ERROR_CONTAINS(tg::_resample_linear_backward(x, 2, 0, 1.0, false),
                        "_resample_linear_backward: input_size must be >= 1 and below 2^31, got 0");
  EXPECT_EQ(tg::_resample_linear(x, 2, 3, 1.0, false).sizes(), (IntList{2, 3, 3, 4}));  // still usable
  // The adversary's findings. A dim whose size stays is copied, whatever
  // the scale or align_corners (PyTorch's stencils), so no neighbour's NaN
  // leaks in through a zero weight.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor l = on(tg::tensor({0.0, 1, nan, 3, 4}, {1, 1, 5}, kF64));
  for (const Tensor& r : {tg::interpolate(l, {}, {1.1}, "linear"), tg::interpolate(l, {5}, {}, "linear", true),
                          tg::interpolate(l, {}, {1.0}, "linear"), tg::_resample_linear(l, 2, 5, 0.7, false),
                          tg::interpolate(l, {}, {1.1}, "nearest")}) {
    const std::vector<double> rv = values(r);
    EXPECT_EQ(rv[0], 0.0);
    EXPECT_EQ(rv[1], 1.0);
    EXPECT_TRUE(std::isnan(rv[2]));
    EXPECT_EQ(rv[3], 3.0);
    EXPECT_EQ(rv[4], 4.0);
  }
  expect_near(values(tg::interpolate(on(tg::tensor({1.0, 2, 3, 4}, {1, 1, 2, 2}, kF64)), {}, {1.4, 1.5}, "bilinear")),
              {1, 1.5, 2, 3, 3.5, 4}, 1e-12, "bilinear, 2 rows kept, 2 -> 3 columns");
  // Nearest doubling: j / 2 whatever the scale (PyTorch's nearest_idx).
  EXPECT_EQ(values(tg::interpolate(on(tg::tensor({5.0, 6, 7}, {1, 1, 3}, kF64)), {}, {2.0000001}, "nearest")),
            (std::vector<double>{5, 5, 6, 6, 7, 7}));
  // Sizes past 2^31 points are refused before any stencil is made, and a
  // scale_factor that overflows says so.
  Tensor one = on(tg::randn({1, 1, 1}, kF64));
  EXPECT_ERROR_CONTAINS(tg::_resample_linear(one, 2, int64_t(1) << 40, 1.0, false),
                        "_resample_linear: size must be >= 1 and below 2^31, got 1099511627776");
  EXPECT_ERROR_CONTAINS(tg::_resample_linear_backward(one, 2, int64_t(1) << 62, 1.0, true), "input_size must be");
  EXPECT_ERROR_CONTAINS(tg::interpolate(one, {}, {1e12}, "linear"), "the most is 2^31 - 1");
  EXPECT_ERROR_CONTAINS(tg::interpolate(on(tg::randn({2, 3, 5, 4}, kF64)), {}, {1e19}, "bilinear"),
                        "interpolate: scale_factor 1e+19 makes spatial dim 0 of input [2, 3, 5, 4]");
  EXPECT_EQ(tg::interpolate(one, {}, {3.0}, "linear").sizes(), (IntList{1, 1, 3}));  // still usable
}

// The adversary's findings on group_norm and the group primitives: reduced
// dtypes computed in Float32 (a Float16 group's sum of squares passed 65504
// and the output was all zeros; BFloat16 rounded the mean before centring),
// the input's dtype also for an empty input, non-floating weights refused,
// the shapes in the messages.
TEST_P(Grid, GroupNormInReducedDtypesComputesInFloat32) {
  tg::manual_seed(5);
  Tensor x = on(tg::randn({1, 2, 70000}));  // per group: a sum of squares near 70000
  Tensor want = tg::group_norm(x, 2);
  Tensor half = tg::group_norm(x.to(tg::kFloat16), 2);
  EXPECT_EQ(half.dtype(), tg::kFloat16);
  EXPECT_GT(tg::abs(half.to(tg::kFloat32)).amax().item<double>(), 3.0);
  EXPECT_LT(tg::abs(half.to(tg::kFloat32) - want).amax().item<double>(), 1e-2);
  Tensor b = on(tg::tensor({100.0, 100.5, 100.5, 100.5}, {1, 1, 4})).to(tg::kBFloat16);
  const std::vector<double> gn = values(tg::group_norm(b, 1)), c = values(tg::_group_center(b, 1));
  const double r = std::sqrt(3.0);
  const std::vector<double> exact = {-r, 1 / r, 1 / r, 1 / r};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_NEAR(gn[i], exact[i], 0.01) << i;  // bfloat16's rounding of the Float32 result
    EXPECT_EQ(c[i], i == 0 ? -0.375 : 0.125) << i;
  }
  Tensor w = on(tg::randn({4}));
  EXPECT_EQ(tg::group_norm(on(tg::randn({0, 4, 2})).to(tg::kBFloat16), 2, w).dtype(), tg::kBFloat16);
  EXPECT_EQ(tg::group_norm(on(tg::randn({0, 4, 2}, kF64)).to(tg::kFloat32), 2, w.to(tg::kFloat64)).dtype(),
            tg::kFloat32);
  Tensor x4 = on(tg::randn({1, 4, 3}));
  EXPECT_ERROR_CONTAINS(tg::group_norm(x4, 2, w.to(tg::kInt64)), "group_norm: weight must be floating");
  EXPECT_ERROR_CONTAINS(tg::group_norm(x4, 2, {}, w.to(tg::kComplex64)), "group_norm: bias must be floating");
  EXPECT_ERROR_CONTAINS(tg::group_norm(x4, 3), "channels (4) of input [1, 4, 3] must be divisible");
  EXPECT_ERROR_CONTAINS(tg::_group_sum(on(tg::randn({4, 0, 3})), {}, int64_t(1) << 62), "_group_sum");
  EXPECT_EQ(tg::group_norm(x4, 2).sizes(), x4.sizes());  // still usable
}

TEST_P(Grid, BadArgumentsNameTheOpAndLeaveTheLibraryUsable) {
  Tensor x = on(tg::randn({1, 4, 5, 5}, kF64)), w = on(tg::randn({6, 2, 3, 3}, kF64));
  auto throws = [](const std::function<void()>& f, const char* what) {
    try {
      f();
    } catch (const tg::Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      return;
    }
    ADD_FAILURE() << "no error for " << what;
  };
  throws([&] { tg::conv2d(x, w); }, "expects 2 input channels");
  throws([&] { tg::conv2d(x, w, {}, {1}, {0}, {1}, 3); }, "divisible by groups");
  throws([&] { tg::conv2d(x, on(tg::randn({2, 4, 7, 7}, kF64))); }, "smaller than the (dilated) kernel");
  throws([&] { tg::conv2d(x, w, {}, {0}, {0}, {1}, 2); }, "stride must be >= 1");
  throws([&] { tg::conv2d(x, w, {}, {1}, {-1}, {1}, 2); }, "padding must be >= 0");
  throws([&] { tg::conv2d(x, w, {}, {1, 1, 1}, {0}, {1}, 2); }, "stride must have 1 or 2 entries");
  throws([&] { tg::conv2d(x, w.to(tg::kFloat32), {}, {1}, {0}, {1}, 2); }, "one dtype");
  throws([&] { tg::conv2d(x, w, on(tg::zeros({5}, kF64)), {1}, {0}, {1}, 2); }, "bias must be [6]");
  throws([&] { tg::conv_transpose2d(x, on(tg::randn({4, 2, 3, 3}, kF64)), {}, {1}, {0}, {1}); }, "output_padding");
  throws([&] { tg::pad(x, {5, 5}, "reflect"); }, "reflect padding");
  throws([&] { tg::pad(x, {1, 1}, "wrap"); }, "unknown mode");
  throws([&] { tg::max_pool2d(x, {2}, {}, {2}); }, "at most half");
  throws([&] { tg::interpolate(x, {}, {2.0}, "linear"); }, "does not apply");
  throws([&] { tg::interpolate(x, {3, 3}, {2.0}); }, "exactly one of size and scale_factor");
  throws([&] { tg::batch_norm(on(tg::randn({1, 4}, kF64)), {}, {}, {}, {}, true); }, "more than one value");
  throws([&] { tg::group_norm(x, 3); }, "divisible by num_groups");
  throws([&] { tg::pixel_shuffle(x, 3); }, "divisible by upscale_factor");
  throws([&] { tg::fold(on(tg::randn({1, 8, 5}, kF64)), {3, 3}, {2}); }, "window positions");
  throws(
      [&] {
        tg::_convolution_backward_input(on(tg::randn({1, 6, 2, 2}, kF64)), w, {5, 5}, {1}, {0}, {1}, 2);
      },
      "is not the output shape");
  throws([&] { tg::conv2d(x, w, {}, {1}, {int64_t(1) << 62}, {1}, 2); }, "below 2^31");
  throws(
      [&] {
        tg::conv_transpose1d(on(tg::randn({1, 2, 3}, kF64)), on(tg::randn({2, 2, 2}, kF64)), {}, {int64_t(1) << 40});
      },
      "below 2^31");
  throws(
      [&] {
        tg::_col2im(on(tg::randn({1, 4, 1}, kF64)), {int64_t(1) << 62, 1}, {2, 2}, {1}, {0}, {1});
      },
      "below 2^31");
  // Still usable.
  EXPECT_EQ(tg::conv2d(x, w, {}, {1}, {0}, {1}, 2).sizes(), (IntList{1, 6, 3, 3}));
}

TEST_P(Grid, SecondDerivativesWithRespectToTheInputFlowThroughEveryConvolution) {
  // u = sum(conv(tanh(conv(x)))): d^2u/dx^2 along a direction v by double
  // backward equals the central difference of the gradient.
  tg::manual_seed(15);
  Tensor w1 = on(tg::randn({3, 2, 3, 3}, kF64) * 0.5), w2 = on(tg::randn({1, 3, 3, 3}, kF64) * 0.5);
  auto grad_at = [&](const Tensor& x0, bool create) {
    Tensor x = x0.detach().requires_grad_();
    Tensor u = tg::sum(tg::conv2d(tg::tanh(tg::conv2d(x, w1, {}, {1}, {1})), w2, {}, {1}, {1}));
    return std::make_pair(x, tg::autograd::grad({u}, {x}, {}, std::nullopt, create)[0]);
  };
  Tensor x0 = on(tg::randn({1, 2, 5, 5}, kF64)), v = on(tg::randn({1, 2, 5, 5}, kF64));
  auto [x, g] = grad_at(x0, true);
  Tensor hv = tg::autograd::grad({tg::sum(g * v)}, {x})[0];
  const double h = 1e-5;
  Tensor fd = (grad_at(x0 + v * h, false).second - grad_at(x0 - v * h, false).second) / (2 * h);
  expect_near(values(hv), values(fd), 1e-6, "Hessian-vector product");
}

TEST_P(Grid, ModulesInitializeAsLibTorchAndKeepTheirState) {
  tg::manual_seed(16);
  tg::nn::Conv2d conv(4, 6, {3, 2}, {1}, {1}, {1}, 2, true, "circular", kF64);
  EXPECT_EQ(conv->weight.sizes(), (IntList{6, 2, 3, 2}));
  const double bound = 1 / std::sqrt(2.0 * 3 * 2);  // fan_in = in / groups * kernel
  EXPECT_LE(tg::abs(conv->weight).amax().item<double>(), bound);
  EXPECT_GT(tg::abs(conv->weight).amax().item<double>(), 0.8 * bound);
  EXPECT_LE(tg::abs(conv->bias).amax().item<double>(), bound);
  std::vector<std::string> names;
  for (const auto& kv : conv->state_dict())
    names.push_back(kv.first);
  EXPECT_EQ(names, (std::vector<std::string>{"weight", "bias"}));
  conv->to(dev());
  Tensor x = on(tg::randn({2, 4, 5, 6}, kF64));
  // Circular padding: the input padded in that mode, then an unpadded convolution.
  expect_near(values(conv->forward(x)),
              values(tg::conv2d(tg::pad(x, {1, 1, 1, 1}, "circular"), conv->weight, conv->bias, {1}, {0}, {1}, 2)),
              1e-14, "Conv2d circular");
  tg::nn::ConvTranspose2d up(4, 2, {2}, {2}, {0}, {0}, 1, true, {1}, kF64);
  up->to(dev());
  EXPECT_EQ(up->forward(x).sizes(), (IntList{2, 2, 10, 12}));
  EXPECT_LE(tg::abs(up->weight).amax().item<double>(), 1 / std::sqrt(2.0 * 4));
  tg::nn::BatchNorm2d bn(4, 1e-5, 0.1, true, true, kF64);
  bn->to(dev());
  bn->forward(x);
  EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 1);
  EXPECT_NEAR(values(bn->running_mean)[0], 0.1 * tg::mean(x.select(1, 0)).item<double>(), 1e-12);
  bn->eval();
  Tensor ev = bn->forward(x);
  expect_near(values(ev), values(tg::batch_norm(x, bn->running_mean, bn->running_var, bn->weight, bn->bias, false)),
              1e-14, "BatchNorm2d eval");
  EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 1);
  tg::nn::GroupNorm gn(2, 4, 1e-5, true, kF64);
  gn->to(dev());
  expect_near(values(gn->forward(x)), values(tg::group_norm(x, 2, {}, {}, 1e-5)), 1e-14, "GroupNorm");
  tg::nn::Upsample upsample({}, {2.0}, "bilinear", false);
  EXPECT_EQ(upsample->forward(x).sizes(), (IntList{2, 4, 10, 12}));
  tg::nn::MaxPool2d pool({2});
  auto [v, i] = pool->forward_with_indices(x);
  EXPECT_EQ(v.sizes(), (IntList{2, 4, 2, 3}));
  EXPECT_EQ(i.dtype(), tg::kInt64);
  tg::nn::AvgPool2d avg({2});
  EXPECT_EQ(avg->forward(x).sizes(), (IntList{2, 4, 2, 3}));
  tg::nn::AdaptiveAvgPool2d adaptive({1});
  expect_near(values(adaptive->forward(x)), values(tg::mean(x, {2, 3}, true)), 1e-14, "AdaptiveAvgPool2d");
  tg::nn::PixelShuffle shuffle(2);
  EXPECT_EQ(shuffle->forward(x).sizes(), (IntList{2, 1, 10, 12}));
  // The functional forms are tg::nn::functional's too.
  EXPECT_EQ(tg::nn::functional::conv2d(x, conv->weight, {}, {1}, {1}, {1}, 2).sizes(), (IntList{2, 6, 5, 7}));
}

// The adversary's findings (issue 48), each a regression test.
TEST_P(Grid, EdgeCasesFoundByTheAdversary) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  // Pools of an input without channels are empty, not a crash.
  EXPECT_EQ(tg::max_pool2d(on(tg::randn({1, 0, 4, 4}, kF64)), {2}).sizes(), (IntList{1, 0, 2, 2}));
  EXPECT_EQ(tg::avg_pool2d(on(tg::randn({1, 0, 4, 4}, kF64)), {2}, {}, {1}).sizes(), (IntList{1, 0, 3, 3}));
  // An upscale factor whose square overflows is an error.
  EXPECT_THROW(tg::pixel_shuffle(on(tg::randn({1, 4, 2, 2}, kF64)), int64_t(1) << 32), tg::Error);
  // Resampling keeps a NaN or inf to the outputs whose stencil holds it (PyTorch's).
  Tensor l = on(tg::tensor({1.0, 1, 1, 1, 1, 1, 1, nan}, {1, 1, 8}, kF64));
  std::vector<double> lv = values(tg::interpolate(l, {4}, {}, "linear"));
  EXPECT_EQ(lv[0], 1.0);
  EXPECT_EQ(lv[2], 1.0);
  EXPECT_TRUE(std::isnan(lv[3]));
  Tensor sq = tg::ones({1, 1, 4, 4}, kF64);
  sq.select(2, 0).select(2, 0).fill_(inf);
  std::vector<double> bv = values(tg::interpolate(on(sq), {8, 8}, {}, "bilinear"));
  EXPECT_EQ(bv[0], inf);
  EXPECT_EQ(bv[63], 1.0);
  std::vector<double> av = values(tg::adaptive_avg_pool1d(l, {3}));  // bins [0, 3), [2, 6), [5, 8)
  EXPECT_EQ(av[0], 1.0);
  EXPECT_EQ(av[1], 1.0);
  EXPECT_TRUE(std::isnan(av[2]));
  std::vector<double> nv = values(tg::interpolate(l, {16}, {}, "nearest"));  // source floor(j / 2)
  EXPECT_EQ(nv[13], 1.0);
  EXPECT_TRUE(std::isnan(nv[14]));
  // ceil_mode: an input smaller than the kernel still has a window.
  Tensor t3 = on(tg::tensor({1.0, 2, 3}, {1, 1, 3}, kF64));
  EXPECT_EQ(values(tg::avg_pool1d(t3, {4}, {4}, {0}, true)), (std::vector<double>{2.0}));
  EXPECT_EQ(values(tg::max_pool1d(t3, {4}, {4}, {0}, {1}, true)), (std::vector<double>{3.0}));
  // Constant pads: a crop past the other side's padding.
  EXPECT_EQ(values(tg::pad(t3, {2, -4}, "constant", 9)), (std::vector<double>{9.0}));
  EXPECT_EQ(tg::pad(t3, {1, -4}).numel(), 0);
  EXPECT_EQ(values(tg::pad(t3, {-4, 2}, "constant", 5)), (std::vector<double>{5.0}));
  // output_padding of the stride or more, below the dilation (PyTorch takes it).
  tg::manual_seed(18);
  Tensor x = tg::randn({1, 2, 4}, kF64), w = tg::randn({2, 3, 2}, kF64);
  IntList os;
  std::vector<double> want = ref_conv_transpose(x, w, {1}, {0}, {1}, {2}, 1, &os);
  Tensor y = tg::conv_transpose1d(on(x), on(w), {}, {1}, {0}, {1}, 1, {2});
  EXPECT_EQ(y.sizes(), os);
  expect_near(values(y), want, 1e-12, "conv_transpose with output_padding >= stride");
  // No result aliases its input.
  Tensor z = on(tg::randn({1, 4, 4, 4}, kF64));
  EXPECT_NE(tg::interpolate(z, {4, 4}).data_ptr(), z.data_ptr());
  EXPECT_NE(tg::interpolate(z, {}, {1.0}, "nearest").data_ptr(), z.data_ptr());
  EXPECT_NE(tg::pixel_shuffle(z, 1).data_ptr(), z.data_ptr());
  EXPECT_NE(tg::pixel_unshuffle(z, 1).data_ptr(), z.data_ptr());
  // Normalizations of an empty batch are empty.
  Tensor e = on(tg::randn({0, 4, 3, 3}, kF64));
  EXPECT_EQ(tg::group_norm(e, 2).sizes(), e.sizes());
  EXPECT_EQ(tg::instance_norm(e).sizes(), e.sizes());
  EXPECT_EQ(tg::batch_norm(e, {}, {}, {}, {}, true).sizes(), e.sizes());
  // A bias of another dtype is an error naming the conversion.
  EXPECT_THROW(tg::conv1d(on(x), on(tg::randn({3, 2, 2}, kF64)), on(tg::zeros({3}, tg::TensorOptions()))), tg::Error);
}

// Every grid op in one step: forward, a double-backward input derivative,
// the parameters' gradient (batch_norm's running mean updated in place).
struct GridStep {
  Tensor x, w, b, wt, rm, rv;
  explicit GridStep(Device dev) {
    const tg::TensorOptions o = tg::TensorOptions().dtype(tg::kFloat32).device(dev);
    tg::manual_seed(17);
    x = tg::randn({2, 3, 8, 8}, o).requires_grad_();
    w = (tg::randn({4, 3, 3, 3}, o) * 0.3).requires_grad_();
    b = tg::zeros({4}, o).requires_grad_();
    wt = (tg::randn({4, 2, 2, 2}, o) * 0.3).requires_grad_();
    rm = tg::zeros({4}, o);
    rv = tg::ones({4}, o);
  }
  std::vector<Tensor> operator()() {
    namespace ag = tg::autograd;
    Tensor h = tg::gelu(tg::group_norm(tg::conv2d(x, w, b, {1}, {1}), 2));
    h = tg::batch_norm(h, rm, rv, {}, {}, true);
    Tensor p = tg::max_pool2d(h, {2}) + tg::avg_pool2d(h, {3}, {2}, {1}) + tg::adaptive_avg_pool2d(h, {4, 4}) +
               tg::avg_pool2d(h, {3}, {2}, {1}, true).narrow(2, 0, 4).narrow(3, 0, 4);
    Tensor u = tg::conv_transpose2d(p, wt, {}, {2}) + tg::interpolate(p.narrow(1, 0, 2), {8, 8}, {}, "bilinear");
    u = u + tg::pad(u, {1, 1, 0, 0}, "circular").narrow(3, 0, 8) + tg::unfold(u, {2}, {1}, {0}, {2}).sum() * 0.01;
    Tensor ux = ag::grad({tg::sum(u)}, {x}, {}, true, true)[0];
    Tensor loss = tg::mean(u * u) + tg::mean(ux * ux);
    return ag::grad({loss}, {w, b, wt});
  }
};

TEST(Grid, EveryOpInOneStep) {
  GridStep step{Device(tg::kCPU)};
  std::vector<Tensor> g = step();
  ASSERT_EQ(g.size(), 3u);
  EXPECT_EQ(g[0].sizes(), (IntList{4, 3, 3, 3}));
  EXPECT_GT(tg::abs(g[0]).amax().item<double>(), 0.0);
}

// That step captured in one CUDA graph replays to the eager values.
TEST(GridGpu, CapturedStepMatchesEager) {
  REQUIRE_GPU();
  GridStep step{Device(tg::kCUDA, 0)};
  std::vector<Tensor> eager = step();
  Tensor rm_before = step.rm.clone();
  tg::cuda::CUDAGraph graph;
  std::vector<Tensor> captured = capture_after_warmup(graph, step);
  graph.replay();
  tg::cuda::synchronize();
  for (size_t i = 0; i < eager.size(); ++i)
    expect_near(values(captured[i]), values(eager[i]), 1e-4, "captured gradient");
  EXPECT_FALSE(tg::equal(step.rm, rm_before)) << "the replay updates batch_norm's running mean";
}

INSTANTIATE_TEST_SUITE_P(Devices, Grid, ::testing::Values(tg::kCPU, tg::kCUDA),
                         [](const auto& info) { return info.param == tg::kCPU ? "CPU" : "CUDA"; });

}  // namespace
