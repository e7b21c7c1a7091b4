// cat / stack / index_select / gather / scatter_add against loops.
#include "reference.h"
#include "tensor/op_util.h"  // detail::scatter_add_into: the path backward takes, unchecked by the op

namespace tgtest {
namespace {

TEST(Index, CatAlongEachDimWithPromotion) {
  Tensor a = tg::arange(6, tg::kInt64).view({2, 3});
  Tensor b = tg::arange(6, 12, 1, tg::kFloat64).view({2, 3}).t().contiguous().t();  // strided
  expect_values(tg::cat({a, b}, 0), {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 0, "cat 0");
  Tensor c1 = tg::cat({a, b}, 1);
  EXPECT_EQ(c1.dtype(), tg::kFloat64);
  expect_values(c1, {0, 1, 2, 6, 7, 8, 3, 4, 5, 9, 10, 11}, 0, "cat 1");
  expect_values(tg::cat({a, tg::empty({2, 0}, tg::kInt64), a}, -1), {0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5}, 0,
                "cat with empty part");
  Tensor e = tg::ones({3}).expand({2, 3});
  expect_values(tg::cat({e, e.select(0, 0).unsqueeze(0)}), {1, 1, 1, 1, 1, 1, 1, 1, 1}, 0, "cat expanded");
}

TEST(Index, StackInsertsADim) {
  Tensor a = tg::tensor({1, 2}), b = tg::tensor({3, 4});
  Tensor s0 = tg::stack({a, b}), s1 = tg::stack({a, b}, 1), sm = tg::stack({a, b}, -1);
  EXPECT_EQ(s0.sizes(), (IntList{2, 2}));
  expect_values(s0, {1, 2, 3, 4}, 0, "stack 0");
  expect_values(s1, {1, 3, 2, 4}, 0, "stack 1");
  expect_values(sm, {1, 3, 2, 4}, 0, "stack -1");
  Tensor sc = tg::stack({tg::scalar_tensor(1), tg::scalar_tensor(2)});
  expect_values(sc, {1, 2}, 0, "stack scalars");
}

TEST(Index, IndexSelectEveryDimAndDtype) {
  tg::manual_seed(13);
  for (ScalarType dt : kAllTypes)
    for (Layout l : kLayouts) {
      Tensor x = make({4, 5, 6}, dt, l);
      std::vector<double> vx = values(x);
      for (int64_t dim = 0; dim < 3; ++dim) {
        Tensor idx = tg::tensor({2, 0, 2, 3}, {}, tg::kInt64);
        Tensor y = tg::index_select(x, dim, idx);
        IntList shape = x.sizes();
        shape[size_t(dim)] = 4;
        ASSERT_EQ(y.sizes(), shape);
        std::vector<double> ref;
        std::vector<int64_t> id = {2, 0, 2, 3};
        for (int64_t i = 0; i < shape[0]; ++i)
          for (int64_t j = 0; j < shape[1]; ++j)
            for (int64_t k = 0; k < shape[2]; ++k) {
              int64_t ii = dim == 0 ? id[size_t(i)] : i, jj = dim == 1 ? id[size_t(j)] : j,
                      kk = dim == 2 ? id[size_t(k)] : k;
              ref.push_back(vx[size_t(ii * 30 + jj * 6 + kk)]);
            }
        expect_values(
            y, ref, 0,
            std::string("index_select ") + tg::to_string(dt) + " " + layout_name(l) + " dim " + std::to_string(dim));
      }
    }
  Tensor big = tg::rand({20000, 8});
  Tensor rows = tg::tensor({19999, 0, 5}, {}, tg::kInt64);
  expect_values(tg::index_select(big, 0, rows).select(1, 3),
                {values(big.select(0, 19999))[3], values(big.select(0, 0))[3], values(big.select(0, 5))[3]}, 0,
                "big index_select");
  EXPECT_EQ(tg::index_select(big, 0, tg::empty({0}, tg::kInt64)).sizes(), (IntList{0, 8}));
}

TEST(Index, GatherAndScatterAdd) {
  tg::manual_seed(14);
  for (Layout l : kLayouts) {
    Tensor x = make({3, 4}, tg::kFloat64, l);
    std::vector<double> vx = values(x);
    Tensor idx = tg::tensor({0, 3, 3, 1, 2, 2}, {3, 2}, tg::kInt64);
    Tensor g = tg::gather(x, 1, idx);
    expect_values(g, {vx[0], vx[3], vx[7], vx[5], vx[10], vx[10]}, 0, std::string("gather dim 1 ") + layout_name(l));
    Tensor idx0 = tg::tensor({2, 0, 1, 2}, {1, 4}, tg::kInt64);
    expect_values(tg::gather(x, 0, idx0), {vx[8], vx[1], vx[6], vx[11]}, 0, "gather dim 0");
    Tensor src = tg::tensor({1, 2, 3, 4, 5, 6}, {3, 2}, tg::kFloat64);
    Tensor s = tg::scatter_add(x, 1, idx, src);
    std::vector<double> ref = vx;
    std::vector<int64_t> id = {0, 3, 3, 1, 2, 2};
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 2; ++j)
        ref[size_t(i * 4 + id[size_t(i * 2 + j)])] += double(i * 2 + j + 1);
    expect_values(s, ref, 1e-15, std::string("scatter_add ") + layout_name(l));
    expect_values(x, vx, 0, "scatter_add leaves the input alone");
  }
  // Repeated targets accumulate; integer and reduced-precision dtypes.
  Tensor z = tg::zeros({3}, tg::kInt64);
  Tensor r = tg::scatter_add(z, 0, tg::tensor({1, 1, 1, 2}, {}, tg::kInt64), tg::ones({4}, tg::kInt64));
  expect_values(r, {0, 3, 1}, 0, "scatter_add repeats");
  Tensor h = tg::scatter_add(tg::zeros({2}, tg::kBFloat16), 0, tg::tensor({1, 1}, {}, tg::kInt64),
                             tg::ones({2}, tg::kBFloat16));
  EXPECT_EQ(h.dtype(), tg::kBFloat16);
  expect_values(h, {0, 2}, 0, "scatter_add bf16");
}

// Index tensors are untrusted after their range was checked: one changed in
// place after the forward is refused by the backward (saved tensors are
// version-checked), and a kernel that meets an index out of range never
// reads or writes outside its tensors: on the CPU it throws, on CUDA it
// skips the element and the next synchronization throws. The library works
// afterwards.
void stale_indices_on(tg::Device dev) {
  const std::string on = dev.is_cpu() ? "cpu" : "cuda";
  const auto f64 = tg::TensorOptions().dtype(tg::kFloat64).device(dev);
  const auto i64 = tg::TensorOptions().dtype(tg::kInt64).device(dev);
  const char* changed = "has been modified by an in-place operation: saved tensor 'index'";
  Tensor x = tg::arange(12, f64).view({4, 3}).requires_grad_();
  {
    Tensor idx = tg::tensor({0, 2}, {}, i64);
    Tensor y = tg::index_select(x, 0, idx);
    idx.fill_(3);
    EXPECT_ERROR_CONTAINS(y.sum().backward(), changed);
  }
  {
    Tensor idx = tg::tensor({0, 2, 1}, {1, 3}, i64);
    Tensor y = tg::gather(x, 0, idx);
    idx.add_(1);
    EXPECT_ERROR_CONTAINS(y.sum().backward(), changed);
  }
  {
    Tensor src = tg::ones({1, 3}, f64).requires_grad_();
    Tensor idx = tg::tensor({0, 2, 1}, {1, 3}, i64);
    Tensor y = tg::scatter_add(tg::zeros({4, 3}, f64), 0, idx, src);
    idx.zero_();
    EXPECT_ERROR_CONTAINS(y.sum().backward(), changed);
  }
  for (bool sparse : {false, true}) {
    Tensor idx = tg::tensor({3, 1}, {}, i64);
    Tensor y = tg::embedding(x, idx, sparse);
    idx.fill_(1 << 30);
    EXPECT_ERROR_CONTAINS(y.sum().backward(), changed);
  }
  EXPECT_FALSE(x.grad().defined()) << on << ": a refused backward wrote a gradient";
  // A sparse tensor's indices written in place after it was built: to_dense
  // scatters with them; sparse @ dense reads rows of the dense operand.
  Tensor s = tg::sparse_coo_tensor(tg::tensor({0, 1, 1, 2}, {2, 2}, i64), tg::ones({2}, f64), {3, 3});
  s._indices().select(0, 1).fill_(int64_t(1) << 30);
  if (dev.is_cpu()) {
    const char* stale = "sparse tensor: index 1073741824 in sparse dim 1 is out of range for size 3";
    EXPECT_ERROR_CONTAINS(s.to_dense(), stale);
    EXPECT_ERROR_CONTAINS(tg::mm(s, tg::ones({3, 2}, f64)), stale);
    EXPECT_ERROR_CONTAINS(s.coalesce(), stale);
    // A tensor coalesced before its indices were written: mm uses them as they are.
    Tensor c = tg::sparse_coo_tensor(tg::tensor({0, 1, 1, 2}, {2, 2}, i64), tg::ones({2}, f64), {3, 3}).coalesce();
    c._indices().select(0, 1).fill_(int64_t(1) << 30);
    EXPECT_ERROR_CONTAINS(tg::mm(c, tg::ones({3, 2}, f64)), stale);
  } else {
    // On the device the index is clamped (nothing leaves its memory) and
    // the copy to the host reports it.
    Tensor d = s.to_dense();
    EXPECT_ERROR_CONTAINS(d.to(tg::Device(tg::kCPU)), "sparse tensor indices: a CUDA kernel met index 1073741824");
    Tensor p = tg::mm(s, tg::ones({3, 2}, f64));
    EXPECT_ERROR_CONTAINS(tg::cuda::synchronize(), "sparse tensor indices: a CUDA kernel met index 1073741824");
    // Reported once; the next results are right.
    EXPECT_EQ(values(tg::index_select(tg::arange(5, f64), 0, tg::tensor({4, 0}, {}, i64))),
              (std::vector<double>{4, 0}));
  }
  // The kernels themselves: indices that changed after the op's range check
  // (the unchecked path that backward and to_dense take).
  Tensor bad = tg::tensor({0, 7}, {}, i64);
  Tensor out = tg::zeros({3}, f64);
  if (dev.is_cpu()) {
    EXPECT_ERROR_CONTAINS(tg::detail::scatter_add_into(out, 0, bad, tg::ones({2}, f64)),
                          "index 7 is out of range for a dimension of size 3");
  } else {
    tg::detail::scatter_add_into(out, 0, bad, tg::ones({2}, f64));
    EXPECT_ERROR_CONTAINS(tg::cuda::synchronize(), "scatter_add: a CUDA kernel met index 7");
    EXPECT_EQ(values(out), (std::vector<double>{1, 0, 0})) << "only the good index was added";
  }
  Tensor g = tg::autograd::grad({tg::index_select(x, 0, tg::tensor({1, 1}, {}, i64)).sum()}, {x})[0];
  EXPECT_EQ(values(g.sum()), (std::vector<double>{6})) << on << ": the library works afterwards";
}

TEST(Index, StaleIndicesAreRefusedWhereTheyAreUsed) { stale_indices_on(tg::Device(tg::kCPU)); }

TEST(IndexGpu, StaleIndicesAreRefusedWhereTheyAreUsed) {
  REQUIRE_GPU();
  stale_indices_on(tg::Device(tg::kCUDA, 0));
}

}  // namespace
}  // namespace tgtest
