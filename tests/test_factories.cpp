// Factories and the Philox random streams.
#include "reference.h"

namespace tgtest {
namespace {

TEST(Factories, ShapesDtypesAndValues) {
  EXPECT_EQ(tg::empty({2, 3}).dtype(), tg::kFloat32);
  EXPECT_EQ(tg::zeros({2, 3}, tg::kFloat64).dtype(), tg::kFloat64);
  expect_values(tg::zeros({2, 2}), {0, 0, 0, 0}, 0, "zeros");
  expect_values(tg::ones({3}, tg::kInt64), {1, 1, 1}, 0, "ones");
  expect_values(tg::full({2}, 2.5, tg::kBFloat16), {2.5, 2.5}, 0, "full");
  expect_values(tg::full({2}, true, tg::kBool), {1, 1}, 0, "full bool");
  EXPECT_EQ(tg::arange(5).dtype(), tg::kInt64);
  EXPECT_EQ(tg::arange(5.0).dtype(), tg::kFloat32);
  expect_values(tg::arange(1, 2, 0.25), {1, 1.25, 1.5, 1.75}, 0, "arange float");
  expect_values(tg::arange(5, 0, -2), {5, 3, 1}, 0, "arange negative step");
  EXPECT_EQ(tg::arange(0).numel(), 0);
  expect_values(tg::linspace(0, 1, 5, tg::kFloat64), {0, 0.25, 0.5, 0.75, 1}, 0, "linspace");
  expect_values(tg::linspace(2, 3, 1), {2}, 0, "linspace 1");
  EXPECT_EQ(tg::linspace(2, 3, 0).numel(), 0);
  expect_values(tg::eye(2, 3), {1, 0, 0, 0, 1, 0}, 0, "eye");
  expect_values(tg::eye(2), {1, 0, 0, 1}, 0, "eye square");
  Tensor t = tg::tensor({1, 2, 3, 4, 5, 6}, {2, 3}, tg::kInt64);
  EXPECT_EQ(t.sizes(), (IntList{2, 3}));
  EXPECT_EQ(t.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(tg::scalar_tensor(3).dim(), 0);
  Tensor like = tg::full_like(t, 7);
  EXPECT_EQ(like.dtype(), tg::kInt64);
  expect_values(like, {7, 7, 7, 7, 7, 7}, 0, "full_like");
  EXPECT_EQ(tg::zeros_like(t).sizes(), t.sizes());
  EXPECT_EQ(tg::ones_like(t).sum().item<int64_t>(), 6);
  EXPECT_EQ(tg::empty_like(t).dtype(), tg::kInt64);
  EXPECT_EQ(tg::empty({0}).numel(), 0);
  EXPECT_EQ(tg::empty({}).numel(), 1);
}

TEST(Random, PhiloxKnownAnswer) {
  // Random123's known-answer vector for Philox4x32-10, counter 0, key 0.
  tg::PhiloxBlock b = tg::philox4x32_10(0, 0);
  EXPECT_EQ(b.w[0], 0x6627e8d5u);
  EXPECT_EQ(b.w[1], 0xe169c58du);
  EXPECT_EQ(b.w[2], 0xbc57ac4cu);
  EXPECT_EQ(b.w[3], 0x9b00dbd8u);
}

TEST(Random, SameSeedSameNumbersAndStreamAdvances) {
  tg::manual_seed(42);
  Tensor a = tg::rand({1000});
  Tensor b = tg::randn({100, 10}, tg::kFloat64);
  tg::manual_seed(42);
  EXPECT_TRUE(tg::equal(a, tg::rand({1000})));
  EXPECT_TRUE(tg::equal(b, tg::randn({100, 10}, tg::kFloat64)));
  tg::manual_seed(42);
  Tensor a1 = tg::rand({1000}), a2 = tg::rand({1000});
  EXPECT_FALSE(tg::equal(a1, a2));
  tg::manual_seed(43);
  EXPECT_FALSE(tg::equal(a, tg::rand({1000})));
  // Element i depends only on (seed, offset + i): a split draw equals one draw.
  tg::manual_seed(7);
  Tensor whole = tg::rand({20});
  tg::manual_seed(7);
  Tensor part1 = tg::rand({8}), part2 = tg::rand({12});
  EXPECT_TRUE(tg::equal(whole, tg::cat({part1, part2})));
  // The documented mapping, element by element.
  tg::manual_seed(99);
  Tensor u = tg::rand({5});
  for (int64_t i = 0; i < 5; ++i)
    EXPECT_EQ(u.to_vector<float>()[size_t(i)], tg::philox_u24(tg::philox4x32_10(99, uint64_t(i)).w[0]));
}

TEST(Random, DistributionsLookRight) {
  tg::manual_seed(1);
  Tensor u = tg::rand({200000}, tg::kFloat64);
  EXPECT_GE(tg::amin(u).item<double>(), 0.0);
  EXPECT_LT(tg::amax(u).item<double>(), 1.0);
  EXPECT_NEAR(tg::mean(u).item<double>(), 0.5, 0.005);
  Tensor n = tg::randn({200000});
  double m = tg::mean(n).item<double>();
  double var = tg::mean(tg::square(n - m)).item<double>();
  EXPECT_NEAR(m, 0.0, 0.01);
  EXPECT_NEAR(var, 1.0, 0.01);
  EXPECT_NEAR(tg::mean(tg::gt(n, 1.0).to(tg::kFloat64)).item<double>(), 0.158655, 0.004);
  Tensor h = tg::randn({1000}, tg::kBFloat16);
  EXPECT_EQ(h.dtype(), tg::kBFloat16);
}

}  // namespace
}  // namespace tgtest

namespace tgtest {
namespace {

// A number that an integer tensor cannot hold is refused, as PyTorch's
// "cannot be converted ... without overflow" (a plain cast of NaN, +-inf or
// 1e30 to int64_t is undefined behaviour and gave INT64_MIN here), and the
// tensor is left as it was.
TEST(Factories, NumbersThatDoNotFitAnIntegerTensorAreRefused) {
  Tensor t = tg::tensor({1, 2, 3}, {3}, tg::kInt64);
  for (double bad : {1e30, -1e30, 9223372036854775808.0, std::nan(""), double(INFINITY), -double(INFINITY)}) {
    EXPECT_ERROR_CONTAINS(t.fill_(bad), "fill_: the value");
    EXPECT_ERROR_CONTAINS(tg::full({2}, bad, tg::kInt64), "cannot be converted to Int64 without overflow");
    EXPECT_ERROR_CONTAINS(t.masked_fill(tg::tensor({1, 0, 1}, {3}, tg::kBool), bad), "masked_fill: the value");
    // The 0-dim tensor form too (it wrote INT64_MAX, or 0 for NaN).
    EXPECT_ERROR_CONTAINS(t.masked_fill(tg::tensor({1, 0, 1}, {3}, tg::kBool), tg::scalar_tensor(bad, tg::kFloat64)),
                          "masked_fill: the value");
  }
  EXPECT_ERROR_CONTAINS(
      tg::zeros({2}, tg::kFloat16).masked_fill(tg::ones({2}, tg::kBool), tg::scalar_tensor(1e10, tg::kFloat64)),
      "cannot be converted to Float16");
  EXPECT_EQ(
      t.masked_fill(tg::tensor({1, 0, 1}, {3}, tg::kBool), tg::scalar_tensor(-2.5, tg::kFloat64)).to_vector<int64_t>(),
      (std::vector<int64_t>{-2, 2, -2}));
  EXPECT_EQ(t.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3})) << "a refused fill_ writes nothing";
  // In range: truncated toward zero, as PyTorch; -2^63 is the smallest.
  t.fill_(-2.75);
  EXPECT_EQ(t.to_vector<int64_t>(), (std::vector<int64_t>{-2, -2, -2}));
  EXPECT_EQ(tg::full({1}, -9223372036854775808.0, tg::kInt64).to_vector<int64_t>()[0], INT64_MIN);
  // A narrower float refuses a finite value beyond its range; inf and NaN are its own values.
  EXPECT_ERROR_CONTAINS(tg::full({1}, 1e300, tg::kFloat32), "cannot be converted to Float32 without overflow");
  EXPECT_ERROR_CONTAINS(tg::zeros({1}, tg::kFloat16).fill_(1e5), "Float16");
  // The largest finite values (from the dtype list's host types) fit; beyond them, refused.
  EXPECT_EQ(tg::full({1}, 65504.0, tg::kFloat16).to(tg::kFloat64).item<double>(), 65504.0);
  EXPECT_ERROR_CONTAINS(tg::full({1}, 65520.0, tg::kFloat16), "its largest finite value is 65504");
  EXPECT_EQ(tg::full({1}, 3.3895313892515355e38, tg::kBFloat16).to(tg::kFloat64).item<double>(), 3.3895313892515355e38);
  EXPECT_ERROR_CONTAINS(tg::full({1}, 3.39e38, tg::kBFloat16), "cannot be converted to BFloat16");
  EXPECT_ERROR_CONTAINS(tg::full({1}, 3.5e38, tg::kFloat32), "cannot be converted to Float32");
  EXPECT_TRUE(std::isinf(tg::full({1}, INFINITY, tg::kFloat32).item<float>()));
  EXPECT_TRUE(std::isnan(tg::full({1}, std::nan(""), tg::kFloat16).to(tg::kFloat32).item<float>()));
  expect_values(tg::full({1}, 1e300, tg::kFloat64), {1e300}, 0, "Float64 holds it");
  // arange and linspace: a range that is not finite, or that has more
  // elements than 64 bits count, is a named error before anything is
  // allocated (they threw std::length_error or bad_alloc from a host vector,
  // or cast inf to int64_t); integer ranges are exact (no round trip through
  // double) and a floating bound must fit an integer dtype.
  EXPECT_ERROR_CONTAINS(tg::arange(0.0, double(INFINITY), 1.0), "arange: unsupported range 0 -> inf");
  EXPECT_ERROR_CONTAINS(tg::arange(0.0, 1.0, std::nan("")), "must be finite");
  EXPECT_ERROR_CONTAINS(tg::arange(0, 1.0, 1e-300), "more than fit in 64 bits");
  EXPECT_ERROR_CONTAINS(tg::arange(INT64_MIN, INT64_MAX, 1), "has more elements than fit in 64 bits");
  EXPECT_ERROR_CONTAINS(tg::arange(1e30, 1e30 + 1e15, 1e14, tg::kInt64), "arange: the value 1e+30 cannot be converted");
  EXPECT_THROW(tg::arange(0, INT64_MAX, 1), tg::Error);  // 2^66 bytes: the allocator's error
  EXPECT_THROW(tg::linspace(0, 1, INT64_MAX), tg::Error);
  const int64_t big = (int64_t(1) << 62) + 1;
  EXPECT_EQ(tg::arange(big, big + 7, 3).to_vector<int64_t>(), (std::vector<int64_t>{big, big + 3, big + 6}));
  EXPECT_EQ(tg::arange(INT64_MAX - 2, INT64_MAX, 1).to_vector<int64_t>(),
            (std::vector<int64_t>{INT64_MAX - 2, INT64_MAX - 1}));
  EXPECT_EQ(tg::arange(INT64_MIN, INT64_MIN + 5, 2).to_vector<int64_t>(),
            (std::vector<int64_t>{INT64_MIN, INT64_MIN + 2, INT64_MIN + 4}));
  // A Scalar of a floating value out of int64's range has no integer value:
  // to_int() is 0 (defined), fits_int64 says so.
  EXPECT_FALSE(tg::fits_int64(std::nan("")));
  EXPECT_FALSE(tg::fits_int64(9223372036854775808.0));
  EXPECT_TRUE(tg::fits_int64(-9223372036854775808.0));
  EXPECT_EQ(tg::Scalar(1e30).to_int(), 0);
  EXPECT_EQ(tg::Scalar(-7.9).to_int(), -7);
  // Converting a float tensor to Int64 is defined for every value: saturating,
  // NaN to INT64_MIN (as CUDA's conversion; UBSan's float-cast-overflow checks it).
  Tensor f = tg::tensor({std::nan(""), double(INFINITY), -double(INFINITY), 1e30, -1e30, 3.9, -3.9}, {7}, tg::kFloat64);
  EXPECT_EQ(f.to(tg::kInt64).to_vector<int64_t>(),
            (std::vector<int64_t>{INT64_MIN, INT64_MAX, INT64_MIN, INT64_MAX, INT64_MIN, 3, -3}));
  EXPECT_EQ(f.to(tg::kFloat32).to(tg::kInt64).to_vector<int64_t>(),
            (std::vector<int64_t>{INT64_MIN, INT64_MAX, INT64_MIN, INT64_MAX, INT64_MIN, 3, -3}));
}

// rand in the half types stays in [0, 1): drawn in float32 and rounded, about
// 240 (float16) and 1926 (bfloat16) draws in a million were exactly 1.0.
TEST(Random, HalfTypesNeverDrawOne) {
  std::vector<tg::Device> devices{tg::Device(tg::kCPU)};
  if (tg::cuda::is_available()) devices.push_back(tg::Device(tg::kCUDA, 0));
  for (const tg::Device& d : devices)
    for (tg::ScalarType dt : {tg::kFloat16, tg::kBFloat16}) {
      tg::manual_seed(5);
      Tensor r = tg::rand({1 << 20}, tg::TensorOptions().dtype(dt).device(d)).to(tg::kFloat32);
      EXPECT_LT(r.max().item<double>(), 1.0) << dt << " on " << d;
      EXPECT_GE(r.min().item<double>(), 0.0) << dt << " on " << d;
      EXPECT_GT(r.max().item<double>(), dt == tg::kFloat16 ? 0.999 : 0.99)
          << dt << " on " << d;  // still reaches the top
      EXPECT_NEAR(r.mean().item<double>(), 0.5, 2e-3) << dt << " on " << d;
    }
}

}  // namespace
}  // namespace tgtest
