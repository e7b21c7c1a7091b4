// Scalar types, conversions, storage, allocator accounting, version counters.
#include <limits>

#include "reference.h"

namespace tgtest {
namespace {

TEST(ScalarTypes, SizesNamesAndPromotion) {
  EXPECT_EQ(tg::element_size(tg::kFloat32), 4u);
  EXPECT_EQ(tg::element_size(tg::kBFloat16), 2u);
  EXPECT_EQ(tg::element_size(tg::kBool), 1u);
  EXPECT_STREQ(tg::to_string(tg::kFloat16), "Float16");
  EXPECT_EQ(tg::promote_types(tg::kBool, tg::kInt64), tg::kInt64);
  EXPECT_EQ(tg::promote_types(tg::kInt64, tg::kBFloat16), tg::kBFloat16);
  EXPECT_EQ(tg::promote_types(tg::kFloat16, tg::kBFloat16), tg::kFloat32);
  EXPECT_EQ(tg::promote_types(tg::kFloat32, tg::kFloat64), tg::kFloat64);
  EXPECT_EQ(tg::promote_types(tg::kFloat16, tg::kFloat32), tg::kFloat32);
}

TEST(ScalarTypes, HalfConversionRoundsToNearestEven) {
  EXPECT_EQ(tg::float_to_half_bits(1.0f), 0x3c00);
  EXPECT_EQ(tg::float_to_half_bits(-2.0f), 0xc000);
  EXPECT_EQ(tg::float_to_half_bits(65504.0f), 0x7bff);
  EXPECT_EQ(tg::float_to_half_bits(65520.0f), 0x7c00);            // rounds to inf
  EXPECT_EQ(tg::float_to_half_bits(1.0f + 1.0f / 2048), 0x3c00);  // tie -> even
  EXPECT_EQ(tg::float_to_half_bits(1.0f + 3.0f / 2048), 0x3c02);  // tie -> even
  EXPECT_EQ(tg::float_to_half_bits(5.9604645e-8f), 0x0001);       // smallest subnormal
  EXPECT_EQ(tg::float_to_half_bits(2.9802322e-8f), 0x0000);       // half of it: tie -> 0
  EXPECT_TRUE(std::isnan(tg::half_bits_to_float(tg::float_to_half_bits(NAN))));
  EXPECT_EQ(tg::half_bits_to_float(0x0001), 5.9604645e-8f);
  EXPECT_EQ(tg::half_bits_to_float(0x3555), 0.333251953125f);
  // Every finite half survives a round trip through float.
  for (uint32_t b = 0; b < 0x7c00; ++b)
    ASSERT_EQ(tg::float_to_half_bits(tg::half_bits_to_float(uint16_t(b))), b);
}

TEST(ScalarTypes, BFloat16ConversionRoundsToNearestEven) {
  EXPECT_EQ(tg::float_to_bf16_bits(1.0f), 0x3f80);
  EXPECT_EQ(tg::bf16_bits_to_float(0x3f80), 1.0f);
  EXPECT_EQ(tg::float_to_bf16_bits(1.0f + 1.0f / 256), 0x3f80);  // tie -> even
  EXPECT_EQ(tg::float_to_bf16_bits(1.0f + 3.0f / 256), 0x3f82);  // tie -> even
  EXPECT_TRUE(std::isnan(tg::bf16_bits_to_float(tg::float_to_bf16_bits(NAN))));
}

TEST(Conversions, EveryDtypePairOnEveryLayout) {
  tg::manual_seed(5);
  for (ScalarType from : kAllTypes)
    for (ScalarType to : kAllTypes)
      for (Layout l : kLayouts) {
        Tensor x = make({6, 5}, from, l, -4, 4);
        Tensor y = x.to(to);
        ASSERT_EQ(y.dtype(), to);
        std::vector<double> ref;
        for (double v : values(x)) {
          double r = v;
          if (to == tg::kInt64) r = std::trunc(v);
          if (to == tg::kBool) r = v != 0;
          if (to == tg::kFloat32) r = float(v);
          if (to == tg::kBFloat16) r = tg::bf16_bits_to_float(tg::float_to_bf16_bits(float(v)));
          if (to == tg::kFloat16) r = tg::half_bits_to_float(tg::float_to_half_bits(float(v)));
          ref.push_back(r);
        }
        expect_values(y, ref, 0, std::string(tg::to_string(from)) + " -> " + tg::to_string(to) + " " + layout_name(l));
      }
}

TEST(Storage, AllocatorCountsLiveAndPeakBytes) {
  tg::AllocatorStats s0 = tg::cpu_allocator_stats();
  tg::reset_cpu_peak_bytes();
  {
    Tensor a = tg::empty({1000}, tg::kFloat64);
    tg::AllocatorStats s1 = tg::cpu_allocator_stats();
    EXPECT_EQ(s1.live_bytes - s0.live_bytes, 8000);
    Tensor v = a.view({10, 100});  // views allocate nothing
    EXPECT_EQ(tg::cpu_allocator_stats().live_bytes, s1.live_bytes);
    {
      Tensor b = tg::empty({500}, tg::kFloat32);
      EXPECT_EQ(tg::cpu_allocator_stats().peak_bytes, s0.live_bytes + 10000);
    }
    EXPECT_EQ(tg::cpu_allocator_stats().live_bytes, s1.live_bytes);
  }
  EXPECT_EQ(tg::cpu_allocator_stats().live_bytes, s0.live_bytes);
  EXPECT_GE(tg::cpu_allocator_stats().peak_bytes, s0.live_bytes + 10000);
  tg::reset_cpu_peak_bytes();
  EXPECT_EQ(tg::cpu_allocator_stats().peak_bytes, s0.live_bytes);
}

TEST(Storage, LargeFreedBlocksAreCachedAndReused) {
  tg::cpu_empty_cache();
  EXPECT_EQ(tg::cpu_allocator_stats().cached_bytes, 0);
  void* first;
  {
    Tensor a = tg::empty({1 << 20}, tg::kFloat32);  // 4 MiB
    first = a.data_ptr();
  }
  EXPECT_EQ(tg::cpu_allocator_stats().cached_bytes, int64_t(4) << 20);
  {
    Tensor b = tg::empty({1 << 20}, tg::kFloat32);  // same size class: reused
    EXPECT_EQ(b.data_ptr(), first);
    EXPECT_EQ(tg::cpu_allocator_stats().cached_bytes, 0);
  }
  tg::cpu_empty_cache();
  EXPECT_EQ(tg::cpu_allocator_stats().cached_bytes, 0);
}

TEST(Storage, HandlesShareOneTensor) {
  Tensor a = tg::zeros({3});
  Tensor b = a;  // a handle copy, as in LibTorch
  EXPECT_TRUE(a.is_same(b));
  EXPECT_EQ(a.use_count(), 2u);
  b.fill_(1);
  expect_values(a, {1, 1, 1}, 0, "shared");
  EXPECT_EQ(a.impl()->storage().use_count(), 1u);
  Tensor v = a.view({1, 3});
  EXPECT_EQ(a.impl()->storage().use_count(), 2u);
  EXPECT_EQ(a.layout(), tg::kStrided);
  EXPECT_FALSE(a.is_sparse());
  EXPECT_EQ(a.device(), tg::Device(tg::kCPU));
}

TEST(Versions, InPlaceOpsBumpTheSharedCounter) {
  Tensor a = tg::zeros({2, 3});
  Tensor v = a.t();
  Tensor d = a.detach();
  Tensor c = a.clone();
  uint32_t base = a.version();
  v.add_(1);
  EXPECT_EQ(a.version(), base + 1);
  EXPECT_EQ(v.version(), base + 1);
  EXPECT_EQ(d.version(), base + 1);  // detach shares the version counter
  EXPECT_EQ(c.version(), 0u);        // a clone has its own
  a.select(0, 1).fill_(5);
  a.narrow(1, 0, 2).mul_(2);
  a.copy_(a + 1);
  a.zero_();
  EXPECT_EQ(v.version(), base + 5);
  Tensor r = a + 1;  // out-of-place ops do not bump
  EXPECT_EQ(a.version(), base + 5);
}

TEST(Printing, MatchesPyTorchStyle) {
  EXPECT_EQ(tg::tensor({1, 2.5, -3, 4}, {2, 2}).to_string(),
            "tensor([[ 1.0000,  2.5000],\n        [-3.0000,  4.0000]])");
  EXPECT_EQ(tg::arange(3).to_string(), "tensor([0, 1, 2], dtype=Int64)");
  EXPECT_EQ(tg::scalar_tensor(1.5, tg::kFloat64).to_string(), "tensor(1.5000, dtype=Float64)");
  EXPECT_EQ(tg::gt(tg::arange(2), 0).to_string(), "tensor([False,  True], dtype=Bool)");
  EXPECT_EQ(tg::empty({0, 2}).to_string(), "tensor([], size=[0, 2])");
  EXPECT_EQ(tg::tensor({1e-6, 1}).to_string(), "tensor([1.0000e-06, 1.0000e+00])");
  std::string big = tg::arange(2000).to_string();
  EXPECT_NE(big.find("2, ..., 1997, 1998, 1999], dtype=Int64)"), std::string::npos) << big;
  EXPECT_EQ(Tensor().to_string(), "[ undefined tensor ]");
  // Int64 values print exactly (a double holds 53 bits: the limits and
  // 2^53 + 1 printed wrong, INT64_MAX as INT64_MIN).
  Tensor ints = tg::tensor({1.0}, {1}, tg::kInt64).expand({3}).contiguous();
  ints.select(0, 0).fill_(std::numeric_limits<int64_t>::max());
  ints.select(0, 1).fill_(std::numeric_limits<int64_t>::min());
  ints.select(0, 2).fill_(int64_t(9007199254740993));
  EXPECT_EQ(ints.to_string(),
            "tensor([ 9223372036854775807, -9223372036854775808,     9007199254740993], dtype=Int64)");
  EXPECT_EQ(tg::tensor({double(INFINITY)}, {1}, tg::kFloat64).to(tg::kInt64).to_string(),
            "tensor([9223372036854775807], dtype=Int64)");
}

}  // namespace
}  // namespace tgtest
