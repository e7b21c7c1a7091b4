// Views: values, shared storage, writes through views, view vs reshape.
#include "reference.h"

namespace tgtest {
namespace {

Tensor base_2x3x4() { return tg::arange(24, tg::kFloat64).view({2, 3, 4}); }

TEST(Views, ValuesMatchIndexArithmetic) {
  Tensor x = base_2x3x4();
  auto at = [](int64_t i, int64_t j, int64_t k) { return double(i * 12 + j * 4 + k); };
  std::vector<double> ref;
  for (int64_t k = 0; k < 4; ++k)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t i = 0; i < 2; ++i)
        ref.push_back(at(i, j, k));
  expect_values(x.permute({2, 1, 0}), ref, 0, "permute");
  ref.clear();
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t k = 0; k < 4; ++k)
      for (int64_t j = 0; j < 3; ++j)
        ref.push_back(at(i, j, k));
  expect_values(x.transpose(1, 2), ref, 0, "transpose");
  expect_values(x.transpose(-1, -2), ref, 0, "transpose negative dims");
  expect_values(x.select(1, 2), {8, 9, 10, 11, 20, 21, 22, 23}, 0, "select");
  expect_values(x.select(-1, -1), {3, 7, 11, 15, 19, 23}, 0, "select negative");
  expect_values(x.slice(2, 1, std::nullopt, 2), {1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23}, 0, "slice step 2");
  expect_values(x.slice(1, -2, 100), {4, 5, 6, 7, 8, 9, 10, 11, 16, 17, 18, 19, 20, 21, 22, 23}, 0,
                "slice clamps bounds");
  EXPECT_EQ(x.slice(1, 2, 1).sizes(), (IntList{2, 0, 4}));
  expect_values(x.narrow(2, 1, 2).select(0, 0), {1, 2, 5, 6, 9, 10}, 0, "narrow");
  EXPECT_EQ(x.unsqueeze(0).sizes(), (IntList{1, 2, 3, 4}));
  EXPECT_EQ(x.unsqueeze(-1).sizes(), (IntList{2, 3, 4, 1}));
  EXPECT_EQ(x.unsqueeze(1).squeeze().sizes(), (IntList{2, 3, 4}));
  EXPECT_EQ(x.unsqueeze(1).squeeze(1).sizes(), (IntList{2, 3, 4}));
  EXPECT_EQ(x.squeeze(0).sizes(), (IntList{2, 3, 4}));
  EXPECT_EQ(x.flatten().sizes(), (IntList{24}));
  EXPECT_EQ(x.flatten(1).sizes(), (IntList{2, 12}));
  EXPECT_EQ(x.flatten(0, 1).sizes(), (IntList{6, 4}));
  EXPECT_EQ(x.view({-1, 8}).sizes(), (IntList{3, 8}));
  expect_values(x[1][2], {20, 21, 22, 23}, 0, "operator[]");
  Tensor e = tg::tensor({1, 2, 3}, {3, 1}, tg::kFloat64).expand({2, 3, 4});
  EXPECT_EQ(e.strides()[0], 0);
  expect_values(e.select(0, 1).select(0, 2), {3, 3, 3, 3}, 0, "expand");
  expect_values(tg::tensor({1, 2}, {2}).expand({-1}).t(), {1, 2}, 0, "t of 1-D");
}

TEST(Views, ShareStorageAndSeeWrites) {
  Tensor x = tg::zeros({3, 4}, tg::kFloat64);
  Tensor col = x.select(1, 2);
  col.fill_(7);
  Tensor row_view = x.t().slice(1, 1, 2);  // [4, 1]: row 1 of x
  row_view.add_(1);
  expect_values(x, {0, 0, 7, 0, 1, 1, 8, 1, 0, 0, 7, 0}, 0, "writes through views");
  EXPECT_EQ(col.impl()->storage(), x.impl()->storage());
  Tensor flat = x.view({12});
  flat.narrow(0, 0, 1).fill_(-1);
  EXPECT_EQ(x.select(0, 0).select(0, 0).item<double>(), -1);
}

TEST(Views, ViewOfNonContiguousAndReshape) {
  Tensor x = base_2x3x4();
  Tensor t = x.transpose(0, 1);  // [3, 2, 4]
  try {
    t.view({3, 8});  // dims 1 and 2 span two subspaces
    ADD_FAILURE() << "view should have thrown";
  } catch (const tg::Error& e) {
    EXPECT_NE(std::string(e.what()).find("view: size [3, 8] is not compatible with the input's sizes [3, 2, 4] "
                                         "and strides [4, 12, 1]"),
              std::string::npos)
        << e.what();
  }
  Tensor split = t.view({3, 2, 2, 2});  // splitting a dim stays a view
  EXPECT_EQ(split.impl()->storage(), x.impl()->storage());
  expect_values(split, values(t), 0, "split view");
  expect_values(t.reshape({3, 8}), values(t), 0, "reshape copies");
}

TEST(Views, ReshapeCopiesOnlyWhenNeeded) {
  Tensor x = base_2x3x4();
  Tensor r = x.reshape({6, 4});
  EXPECT_EQ(r.impl()->storage(), x.impl()->storage());
  Tensor t = x.transpose(1, 2);  // [2, 4, 3]
  Tensor f = t.reshape({2, 12});
  EXPECT_NE(f.impl()->storage(), x.impl()->storage());
  std::vector<double> ref = values(t);
  expect_values(f, ref, 0, "reshape copy");
  Tensor z = tg::scalar_tensor(3.0).reshape({1, 1});
  EXPECT_EQ(z.sizes(), (IntList{1, 1}));
  EXPECT_EQ(z.reshape({}).item<float>(), 3.0f);
  EXPECT_EQ(tg::empty({0, 4}).reshape({-1, 2, 2}).sizes(), (IntList{0, 2, 2}));
}

}  // namespace
}  // namespace tgtest

// No view reaches outside its storage, and no size, stride or offset
// arithmetic wraps around: each was a heap overflow, a hang or a wrong
// shape before (issue: memory safety), now a tg::Error naming the op.
TEST(Views, EveryViewStaysInsideItsStorage) {
  using tg::Tensor;
  Tensor x = tg::ones({4});
  EXPECT_ERROR_CONTAINS(x.as_strided({1 << 20}, {1}), "as_strided: a view of shape [1048576]");
  EXPECT_ERROR_CONTAINS(x.as_strided({1 << 20}, {1}), "but the storage holds 4");
  EXPECT_ERROR_CONTAINS(x.as_strided({2}, {1}, 3), "reaches elements 3 to 4");
  EXPECT_ERROR_CONTAINS(x.as_strided({-2}, {1}), "as_strided: negative size -2");
  EXPECT_ERROR_CONTAINS(x.as_strided({2}, {1}, -1), "as_strided: negative storage offset -1");
  EXPECT_ERROR_CONTAINS(x.as_strided({2}, {-1}, 0), "reaches elements -1 to 0");
  EXPECT_ERROR_CONTAINS(x.as_strided({3}, {int64_t(1) << 62}),
                        "as_strided: shape [3] (with its strides and offset) overflows");
  EXPECT_ERROR_CONTAINS(x.as_strided({int64_t(1) << 62, 4}, {1, 1}), "has more elements than fit in 64 bits");
  // In bounds: fine, also an empty view anywhere.
  EXPECT_EQ(x.as_strided({2, 2}, {1, 1}, 1).sizes(), (tg::IntList{2, 2}));
  EXPECT_EQ(x.as_strided({0}, {1}, 0).numel(), 0);
  // expand: negative sizes were a crash (expand({-5}).sum()) or a hang.
  EXPECT_ERROR_CONTAINS(tg::ones({1}).expand({-5}), "expand: negative size -5");
  EXPECT_ERROR_CONTAINS(tg::ones({1}).expand({-3, -3}), "expand: negative size -3");
  EXPECT_ERROR_CONTAINS(tg::ones({1}).expand({-3, 1}), "expand: a new leading dim takes a size >= 0, got -3");
  EXPECT_EQ(tg::ones({1}).expand({3, -1}).sizes(), (tg::IntList{3, 1}));
  // narrow and slice at the ends of int64.
  Tensor y = tg::arange(10);
  EXPECT_ERROR_CONTAINS(y.narrow(0, 2, INT64_MAX), "narrow: start 2 and length 9223372036854775807 are out of range");
  Tensor s = y.slice(0, 0, 10, INT64_MAX);
  EXPECT_EQ(s.sizes(), (tg::IntList{1}));
  EXPECT_EQ(s.item<int64_t>(), 0);
  EXPECT_EQ(y.slice(0, 3, 10, 4).to_vector<int64_t>(), (std::vector<int64_t>{3, 7}));
  // Shapes: negative sizes and element counts beyond 64 bits.
  EXPECT_ERROR_CONTAINS(tg::empty({-5}), "empty: negative dimension -5");
  EXPECT_ERROR_CONTAINS(y.reshape({int64_t(1) << 40, int64_t(1) << 40, -1}), "overflows 64-bit arithmetic");
  EXPECT_ERROR_CONTAINS(
      tg::from_blob(nullptr, {int64_t(1) << 32, int64_t(1) << 32}, {0, 0}, tg::kFloat32, tg::Device(tg::kCPU)),
      "from_blob: shape [4294967296, 4294967296] has more elements than fit in 64 bits");
  // A block larger than the machine's memory is refused, not overcommitted.
  EXPECT_ERROR_CONTAINS(tg::zeros({int64_t(1) << 45}), "CPU allocator: out of memory allocating 140737488355328 bytes");
}
