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

// Ops that are no views return new storage even where their formula comes
// out as a view of the input (repeats of one, flips of size-1 dims or of a
// 0-dim tensor, shifts of 0 or of the size, products over a size-1 dim):
// writing the result leaves the input alone, raw and recorded (issue 45).
TEST(Views, ShapeOpsThatAreNoViewsReturnNewStorage) {
  using tg::Tensor;
  for (bool record : {false, true}) {
    Tensor x = tg::tensor({1, 2, 3}, {3, 1}, tg::kFloat64);
    Tensor s = tg::scalar_tensor(5.0, tg::kFloat64);
    if (record) {
      x.requires_grad_();
      s.requires_grad_();
    }
    const Tensor ones = tg::tensor({1, 1, 1}, {3}, tg::kInt64);
    struct Case {
      const char* what;
      const Tensor& input;
      std::function<Tensor()> fn;
    };
    const std::vector<Case> cases = {
        {"repeat", x,
         [&] {
           return x.repeat({1, 1});
         }},
        {"tile", x, [&] { return tg::tile(x, {1}); }},
        {"repeat_interleave dim", x, [&] { return tg::repeat_interleave(x, 1, 0); }},
        {"repeat_interleave flat", x, [&] { return tg::repeat_interleave(x, 1); }},
        {"repeat_interleave counts", x, [&] { return tg::repeat_interleave(x, ones, 0); }},
        {"flip size-1 dim", x, [&] { return tg::flip(x, {1}); }},
        {"flip no dims", x, [&] { return tg::flip(x, {}); }},
        {"roll 0", x, [&] { return tg::roll(x, {0}, {0}); }},
        {"roll by the size", x, [&] { return tg::roll(x, {3}, {0}); }},
        {"roll flat by the size", x, [&] { return tg::roll(x, {-3}); }},
        {"prod size-1 dim", x, [&] { return tg::prod(x, 1); }},
        {"prod size-1 dim keepdim", x, [&] { return tg::prod(x, 1, true); }},
        {"prod one element", x, [&] { return tg::prod(x.narrow(0, 1, 1)); }},
        {"flip 0-dim", s, [&] { return tg::flip(s, {0}); }},
        {"roll 0-dim", s, [&] { return tg::roll(s, {1}, {0}); }},
        {"prod 0-dim", s, [&] { return tg::prod(s); }},
        {"prod 0-dim dim", s, [&] { return tg::prod(s, -1); }},
        {"repeat 0-dim", s, [&] { return s.repeat({}); }},
    };
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(c.what) + (record ? " (recorded)" : " (raw)"));
      Tensor y = c.fn();
      EXPECT_NE(y.impl()->storage(), c.input.impl()->storage());
      EXPECT_NE(y.data_ptr(), c.input.data_ptr());
      EXPECT_EQ(y.requires_grad(), record);
      y.detach().fill_(-7.0);
      EXPECT_EQ(tgtest::values(x), (std::vector<double>{1, 2, 3}));
      EXPECT_EQ(s.item<double>(), 5.0);
    }
  }
}

// Every size a shape op works out from its arguments is checked before it
// allocates: huge repeats, sizes, chunks and offsets are a tg::Error at once,
// not a wrapped size or a host vector of terabytes (issue 45).
TEST(Views, ShapeOpSizesAreCheckedBeforeTheyAllocate) {
  using tg::IntList;
  using tg::Tensor;
  const int64_t big = int64_t(1) << 62;
  const auto i64 = tg::TensorOptions().dtype(tg::kInt64);
  Tensor x = tg::tensor({1, 2, 3}, {3}, tg::kFloat32);
  // split by sizes: their sum wrapped to 3 and passed.
  EXPECT_ERROR_CONTAINS(tg::split(x, IntList{INT64_MAX, INT64_MAX, 5}, 0),
                        "split: sizes [9223372036854775807, 9223372036854775807, 5] sum past 2^63 - 1");
  // split of a huge empty dim: a piece per element, without bound.
  Tensor wide = tg::empty({0, big});
  EXPECT_ERROR_CONTAINS(tg::split(wide, 1, 1),
                        "split: dim 1 of shape [0, 4611686018427387904] would make "
                        "4611686018427387904 pieces, more than the limit of 1048576");
  EXPECT_EQ(tg::split(wide, big / 2, 1).size(), 2u);
  // chunk: PyTorch's rule, pieces of ceil(n / chunks); more chunks than
  // elements give one-element pieces (n + chunks - 1 overflowed).
  for (int64_t chunks : {int64_t(4), int64_t(3), big, INT64_MAX}) {
    std::vector<Tensor> c = x.chunk(chunks);
    ASSERT_EQ(c.size(), 3u) << chunks;
    for (size_t i = 0; i < 3; ++i)
      EXPECT_EQ(tgtest::values(c[i]), (std::vector<double>{double(i + 1)})) << chunks;
  }
  EXPECT_EQ(tg::ones({5}).chunk(3).size(), 3u);          // 2, 2, 1
  EXPECT_EQ(tg::ones({6}).chunk(4).size(), 3u);          // 2, 2, 2
  EXPECT_EQ(tg::ones({10}).chunk(4).back().numel(), 1);  // 3, 3, 3, 1
  EXPECT_EQ(tg::zeros({0, 4}).chunk(3).size(), 3u);      // an empty dim: chunks empty pieces, as PyTorch
  EXPECT_ERROR_CONTAINS(tg::zeros({0, 4}).chunk(big), "chunk: dim 0 of shape [0, 4] would make");
  EXPECT_ERROR_CONTAINS(x.chunk(0), "chunk: chunks must be positive, got 0");
  EXPECT_ERROR_CONTAINS(x.chunk(-2), "chunk: chunks must be positive, got -2");
  // repeat and tile: each repeated dim and the element count.
  EXPECT_ERROR_CONTAINS(x.repeat({INT64_MAX}), "repeat: repeats [9223372036854775807] of shape [3] make dim 0");
  EXPECT_ERROR_CONTAINS(tg::ones({1}).repeat({big, 4}), "repeat: shape [4611686018427387904, 4] has more elements");
  EXPECT_ERROR_CONTAINS(tg::tile(x, {big}), "tile: repeat: repeats [4611686018427387904] of shape [3]");
  EXPECT_EQ(tg::empty({0}).repeat({big}).sizes(), (IntList{0}));  // nothing to allocate
  EXPECT_EQ(tg::empty({0, 2}).repeat({big, 1}).sizes(), (IntList{0, 2}));
  // repeat_interleave: the int count and the counts' sum.
  EXPECT_ERROR_CONTAINS(tg::repeat_interleave(x, INT64_MAX),
                        "repeat_interleave: 9223372036854775807 repeats of dim 0 of size 3");
  Tensor counts = tg::tensor({double(big), double(big), double(big)}, {3}, i64);
  EXPECT_ERROR_CONTAINS(tg::repeat_interleave(x, counts, 0), "repeat_interleave: the repeats sum past 2^63 - 1");
  EXPECT_ERROR_CONTAINS(tg::repeat_interleave(x, tg::tensor({double(big)}, {1}, i64), 0),
                        "repeat_interleave: 4611686018427387904 repeats of dim 0 of size 3");
  // A sum that fits but cannot be allocated: the allocator's error, not a
  // host vector of 8 TB; nothing to allocate: the shape at once.
  Tensor tera = tg::tensor({double(int64_t(1) << 40), 1, 1}, {3}, i64);
  EXPECT_ERROR_CONTAINS(tg::repeat_interleave(x, tera, 0), "repeat_interleave: CPU allocator: out of memory");
  EXPECT_EQ(tg::repeat_interleave(tg::zeros({3, 0}), tera, 0).sizes(), (IntList{(int64_t(1) << 40) + 2, 0}));
  // diag_embed: |offset| + size and its square.
  EXPECT_ERROR_CONTAINS(tg::diag_embed(x, INT64_MAX),
                        "diag_embed: offset 9223372036854775807 with a last dim of size 3");
  EXPECT_ERROR_CONTAINS(tg::diag_embed(x, INT64_MIN), "diag_embed: offset -9223372036854775808");
  EXPECT_ERROR_CONTAINS(tg::diag_embed(x, big), "whose elements do not fit in 64 bits; use a smaller offset");
  EXPECT_ERROR_CONTAINS(tg::diag(x, -big), "diag: diag_embed: offset -4611686018427387904");
  // The library is usable afterwards.
  EXPECT_EQ(tgtest::values(x.repeat({2})), (std::vector<double>{1, 2, 3, 1, 2, 3}));
}
