// Reductions against double loops: every dim subset, keepdim, layout, dtype.
#include <tbb/task_arena.h>

#include "reference.h"

namespace tgtest {
namespace {

enum class R { Sum, Mean, Max, Min };

std::vector<double> reduce_ref(const Tensor& x, const std::vector<bool>& red, R op) {
  std::vector<double> v = values(x);
  IntList out_shape;
  for (int64_t d = 0; d < x.dim(); ++d)
    out_shape.push_back(red[size_t(d)] ? 1 : x.sizes()[size_t(d)]);
  int64_t n_out = tg::shape_numel(out_shape);
  std::vector<double> acc(size_t(n_out), op == R::Max ? -INFINITY : op == R::Min ? INFINITY : 0.0);
  std::vector<int64_t> cnt(size_t(n_out), 0);
  IntList idx(size_t(x.dim()), 0);
  for (size_t i = 0; i < v.size(); ++i) {
    int64_t o = 0;
    for (int64_t d = 0; d < x.dim(); ++d)
      o = o * out_shape[size_t(d)] + (red[size_t(d)] ? 0 : idx[size_t(d)]);
    double& a = acc[size_t(o)];
    if (op == R::Max) a = std::max(a, v[i]);
    else if (op == R::Min) a = std::min(a, v[i]);
    else a += v[i];
    ++cnt[size_t(o)];
    for (int64_t d = x.dim() - 1; d >= 0; --d) {
      if (++idx[size_t(d)] < x.sizes()[size_t(d)]) break;
      idx[size_t(d)] = 0;
    }
  }
  if (op == R::Mean)
    for (size_t i = 0; i < acc.size(); ++i)
      acc[i] /= double(cnt[i]);
  return acc;
}

Tensor run(R op, const Tensor& x, const IntList& dims, bool keepdim) {
  switch (op) {
    case R::Sum: return tg::sum(x, dims, keepdim);
    case R::Mean: return tg::mean(x, dims, keepdim);
    case R::Max: return tg::amax(x, dims, keepdim);
    case R::Min: return tg::amin(x, dims, keepdim);
  }
  return {};
}

TEST(Reduce, EveryDimSubsetLayoutAndDtype) {
  tg::manual_seed(6);
  const std::vector<IntList> subsets = {{0}, {1}, {2}, {0, 1}, {1, 2}, {0, 2}, {-1}, {0, 1, 2}};
  for (R op : {R::Sum, R::Mean, R::Max, R::Min})
    for (ScalarType dt : kAllTypes) {
      if (op == R::Mean && !tg::is_floating_point(dt)) continue;
      for (Layout l : kLayouts)
        for (const IntList& dims : subsets)
          for (bool keepdim : {false, true}) {
            Tensor x = make({4, 5, 6}, dt, l);
            Tensor y = run(op, x, dims, keepdim);
            std::vector<bool> red(3, false);
            for (int64_t d : dims)
              red[size_t(d < 0 ? d + 3 : d)] = true;
            IntList want;
            for (int64_t d = 0; d < 3; ++d)
              if (!red[size_t(d)]) want.push_back(x.sizes()[size_t(d)]);
              else if (keepdim) want.push_back(1);
            std::string what = std::string(tg::to_string(dt)) + " " + layout_name(l) + " dims " + tg::shape_str(dims);
            ASSERT_EQ(y.sizes(), want) << what;
            ScalarType rt = (op == R::Sum && !tg::is_floating_point(dt)) ? tg::kInt64 : dt;
            EXPECT_EQ(y.dtype(), rt) << what;
            expect_values(y, reduce_ref(x, red, op), std::max(tol_for(rt), 1e-5), what);
          }
    }
}

// Under the sanitizers (10-30x slower; under TSan the CPU kernels run on the
// calling thread) a tenth of the size: still about ten grain-size chunks
// per reduction; the Release build runs the full size.
#ifdef TAPEGRAD_SANITIZE_BUILD
constexpr int64_t kLargeScale = 10;
#else
constexpr int64_t kLargeScale = 1;
#endif

TEST(Reduce, AllElementsLargeAndParallel) {
  tg::manual_seed(7);
  constexpr int64_t k = kLargeScale;
  for (IntList shape :
       {IntList{3000000 / k}, IntList{2, 1500000 / k}, IntList{1000 / k, 3000}, IntList{3000, 1000 / k}}) {
    Tensor x = tg::rand(shape, tg::kFloat32);
    std::vector<double> v = values(x);
    double s = 0, mx = -1;
    for (double e : v)
      s += e, mx = std::max(mx, e);
    EXPECT_NEAR(tg::sum(x).item<double>(), s, 1e-6 * s) << tg::shape_str(shape);
    EXPECT_NEAR(tg::mean(x).item<double>(), s / double(v.size()), 1e-6) << tg::shape_str(shape);
    EXPECT_EQ(tg::amax(x).item<double>(), mx);
    // Along the first dim (column reduction) and the last (row reduction).
    std::vector<bool> r0(shape.size(), false), r1(shape.size(), false);
    r0[0] = true;
    r1.back() = true;
    expect_values(tg::sum(x, {0}), reduce_ref(x, r0, R::Sum), 2e-5, "sum dim 0");
    expect_values(tg::sum(x, {-1}), reduce_ref(x, r1, R::Sum), 2e-5, "sum last dim");
    expect_values(tg::sum((x.dim() == 2 ? x.t() : x), {0}), reduce_ref((x.dim() == 2 ? x.t() : x), r0, R::Sum), 2e-5,
                  "sum transposed");
  }
}

// Few columns down many rows (bias gradients) split the rows in blocks
// fixed by the shape: values against the double loop, int64 sums wrapping,
// and the same bits on one thread as on every worker.
TEST(Reduce, FewColumnsManyRowsTheSameOnAnyWorkerCount) {
  tg::manual_seed(8);
  for (IntList shape : {IntList{1024, 64}, IntList{4097, 3}, IntList{300, 64}, IntList{65536, 1}, IntList{33, 200}})
    for (ScalarType dt : {tg::kFloat32, tg::kFloat64, tg::kInt64}) {
      Tensor x = make(shape, dt, Layout::Contiguous);
      std::vector<bool> red{true, false};
      for (R op : {R::Sum, R::Max, R::Min}) {
        Tensor y = run(op, x, {0}, false), y1;
        tbb::task_arena one(1);
        one.execute([&] { y1 = run(op, x, {0}, false); });
        std::string what = std::string(tg::to_string(dt)) + " " + tg::shape_str(shape);
        EXPECT_TRUE(tg::equal(y, y1)) << what << ": one thread and every worker differ";
        expect_values(y, reduce_ref(x, red, op), dt == tg::kFloat32 ? 1e-4 : 1e-9, what);
      }
    }
  // int64 sums wrap as PyTorch's do, across the row blocks too.
  Tensor big = tg::full({1024, 2}, double(int64_t(1) << 53), tg::TensorOptions().dtype(tg::kInt64));
  Tensor s = tg::sum(big, {0});
  EXPECT_EQ(s.dtype(), tg::kInt64);
  const uint64_t want = uint64_t(1024) * (uint64_t(1) << 53);  // 2^63: wraps to INT64_MIN
  EXPECT_EQ(s.select(0, 1).item<int64_t>(), int64_t(want));
}

// mean's backward in reduced floats divides in float32: a Float16 count
// past 65504 (the adversary's finding: "cannot be converted to Float16")
// and a BFloat16 count it cannot hold (1001) give the rounded 1 / N.
TEST(Reduce, MeanBackwardOfReducedFloatsOverManyElements) {
  for (auto [dt, n] : std::vector<std::pair<ScalarType, int64_t>>{{tg::kFloat16, 65505}, {tg::kBFloat16, 1001}}) {
    Tensor x = tg::randn({n, 1}).to(dt).requires_grad_();
    tg::mean(x, {0}).sum().backward();
    ASSERT_TRUE(x.grad().defined());
    EXPECT_EQ(x.grad().dtype(), dt);
    const double want = tg::full({1}, 1.0 / double(n)).to(dt).item<double>();
    EXPECT_NE(want, 0.0);
    EXPECT_TRUE(tg::equal(x.grad(), tg::full({n, 1}, want, tg::TensorOptions().dtype(dt)))) << dt;
    Tensor z = tg::randn({n}).to(dt).requires_grad_();
    tg::mean(z).backward();
    EXPECT_TRUE(tg::equal(z.grad(), tg::full({n}, want, tg::TensorOptions().dtype(dt)))) << dt << " (all elements)";
  }
}

TEST(Reduce, EmptyZeroDimAndNaN) {
  Tensor e = tg::empty({0, 3});
  expect_values(tg::sum(e, {0}), {0, 0, 0}, 0, "sum over empty dim");
  EXPECT_EQ(tg::sum(e).item<float>(), 0.0f);
  EXPECT_TRUE(std::isnan(tg::mean(e).item<float>()));
  EXPECT_EQ(tg::sum(e, {1}).sizes(), (IntList{0}));
  EXPECT_EQ(tg::amax(e, {1}).sizes(), (IntList{0}));
  Tensor s = tg::scalar_tensor(2.5, tg::kFloat64);
  EXPECT_EQ(tg::sum(s).dim(), 0);
  EXPECT_EQ(tg::sum(s, {0}).item<double>(), 2.5);
  EXPECT_EQ(tg::amax(s, {-1}, true).item<double>(), 2.5);
  Tensor n = tg::tensor({1, NAN, 3});
  EXPECT_TRUE(std::isnan(tg::amax(n).item<float>()));
  EXPECT_TRUE(std::isnan(tg::amin(n).item<float>()));
  EXPECT_TRUE(std::isnan(tg::sum(n).item<float>()));
  EXPECT_EQ(tg::sum(tg::ones({5}, tg::kBool)).item<int64_t>(), 5);
  EXPECT_TRUE(tg::amax(tg::gt(tg::tensor({-1, 1}), 0)).item<bool>());
}

// cumsum against a double loop along `dim` (of x read from storage).
std::vector<double> cumsum_ref(const Tensor& x, int64_t dim) {
  std::vector<double> v = values(x);
  if (x.dim() == 0) return v;
  int64_t inner = 1;
  for (int64_t d = dim + 1; d < x.dim(); ++d)
    inner *= x.sizes()[size_t(d)];
  const int64_t n = x.sizes()[size_t(dim)];
  for (size_t i = 0; i < v.size(); ++i)
    if ((int64_t(i) / inner) % n > 0) v[i] += v[i - size_t(inner)];
  return v;
}

TEST(Cumsum, EveryDimLayoutAndDtype) {
  tg::manual_seed(8);
  for (ScalarType dt : kAllTypes)
    for (Layout l : kLayouts)
      for (int64_t dim : {0, 1, 2, -1}) {
        Tensor x = make({4, 5, 6}, dt, l);
        Tensor y = tg::cumsum(x, dim);
        std::string what = std::string(tg::to_string(dt)) + " " + layout_name(l) + " dim " + std::to_string(dim);
        ASSERT_EQ(y.sizes(), x.sizes()) << what;
        // Integer and Bool inputs give Int64, as PyTorch's.
        EXPECT_EQ(y.dtype(), tg::is_floating_point(dt) ? dt : tg::kInt64) << what;
        expect_values(y, cumsum_ref(x, dim < 0 ? dim + 3 : dim), std::max(tol_for(dt), 1e-6), what);
      }
  Tensor i = tg::tensor({3, -1, 4, 1, -5}, {}, tg::kInt64);
  EXPECT_EQ(values(i.cumsum(0)), (std::vector<double>{3, 2, 6, 7, 2}));
  EXPECT_EQ(values(tg::cumsum(tg::gt(i, 0), 0)), (std::vector<double>{1, 1, 2, 3, 3}));
}

// 100000 elements along the dim: the triangular matrix it used to build
// (80 GB in float64) is gone; the scan is O(n) in time and memory. Rows,
// columns, a transposed (non-contiguous) input, and the gradient (the
// reverse cumulative sum) at that size.
TEST(Cumsum, LongDimInLinearMemory) {
  constexpr int64_t n = 100000;
  tg::manual_seed(9);
  Tensor x = tg::rand({n}, tg::kFloat64) - 0.5;
  std::vector<double> want = cumsum_ref(x, 0);
  expect_values(tg::cumsum(x, 0), want, 1e-12, "1-D");
  expect_values(x.view({1, n}).cumsum(1), want, 1e-12, "a row");
  Tensor cols = tg::rand({3, n}, tg::kFloat64).t();  // [n, 3], non-contiguous
  ASSERT_FALSE(cols.is_contiguous());
  expect_values(tg::cumsum(cols, 0), cumsum_ref(cols.contiguous(), 0), 1e-12, "transposed columns");
  Tensor f = tg::rand({n}, tg::kFloat32);  // float sums carried in double
  expect_values(tg::cumsum(f, -1), cumsum_ref(f, 0), 1e-6, "float32");
  Tensor w = tg::rand({n}, tg::kFloat64);
  Tensor xr = x.clone().requires_grad_();
  Tensor g = tg::autograd::grad({(tg::cumsum(xr, 0) * w).sum()}, {xr})[0];
  std::vector<double> wv = values(w), rev(wv.size());
  double acc = 0;
  for (size_t k = wv.size(); k-- > 0;)
    rev[k] = acc += wv[k];
  expect_values(g, rev, 1e-12, "gradient");
}

TEST(Cumsum, ZeroDimEmptyNonFiniteAndHigherOrder) {
  Tensor s = tg::scalar_tensor(2.5, tg::kFloat64);
  EXPECT_EQ(tg::cumsum(s, 0).dim(), 0);
  EXPECT_EQ(tg::cumsum(s, -1).item<double>(), 2.5);
  // A 0-d tensor takes dims 0 and -1 only, as sum (it used to accept any).
  EXPECT_ERROR_CONTAINS(tg::cumsum(s, 1), "cumsum: dimension 1 is out of range for a tensor of rank 0");
  EXPECT_ERROR_CONTAINS(tg::cumsum(tg::ones({2, 3}), -3), "cumsum: dimension -3 is out of range");
  EXPECT_EQ(tg::cumsum(tg::empty({0, 3}), 0).sizes(), (IntList{0, 3}));
  EXPECT_EQ(tg::cumsum(tg::empty({2, 0}), 0).sizes(), (IntList{2, 0}));
  expect_values(tg::cumsum(tg::tensor({1, NAN, 2}), 0), {1, NAN, NAN}, 0, "NaN");
  expect_values(tg::cumsum(tg::tensor({1, INFINITY, -1}), 0), {1, INFINITY, INFINITY}, 0, "inf");
  // Second order through the recorded backward: d/dx of the gradient of
  // sum(cumsum(x)^2) is 2 revcumsum(cumsum(1)) = [12, 10, 6] for n = 3.
  Tensor x = tg::tensor({0.5, -1, 2}, {}, tg::kFloat64).requires_grad_();
  Tensor g = tg::autograd::grad({tg::square(tg::cumsum(x, 0)).sum()}, {x}, {}, std::nullopt, true)[0];
  expect_values(g, {2 * (0.5 - 0.5 + 1.5), 2 * (-0.5 + 1.5), 2 * 1.5}, 1e-12, "gradient");
  expect_values(tg::autograd::grad({g.sum()}, {x})[0], {12, 10, 6}, 1e-12, "second order");
  Tensor s2 = tg::scalar_tensor(1.5, tg::kFloat64).requires_grad_();
  EXPECT_EQ(tg::autograd::grad({tg::cumsum(s2, 0) * 2.0}, {s2})[0].item<double>(), 2.0);
}

TEST(Compare, AllcloseAndEqual) {
  Tensor a = tg::tensor({1, 2, 3}, {}, tg::kFloat64);
  EXPECT_TRUE(tg::allclose(a, a + 1e-9));
  EXPECT_FALSE(tg::allclose(a, a + 1e-3));
  EXPECT_TRUE(tg::allclose(a, a + 1e-3, 1e-2));
  EXPECT_TRUE(tg::allclose(a.to(tg::kFloat32), a));             // dtypes may differ
  EXPECT_TRUE(tg::allclose(a, tg::tensor({1, 2, 3}, {1, 3})));  // broadcasts
  Tensor n = tg::tensor({1, NAN, INFINITY});
  EXPECT_FALSE(tg::allclose(n, n));
  EXPECT_TRUE(tg::allclose(n, n, 1e-5, 1e-8, true));
  EXPECT_TRUE(tg::equal(a, a.clone()));
  EXPECT_TRUE(tg::equal(a, a.to(tg::kInt64)));
  EXPECT_FALSE(tg::equal(a, a.view({1, 3})));  // sizes differ
  EXPECT_FALSE(tg::equal(a, a + 1e-12));
  EXPECT_FALSE(tg::equal(n, n));
  EXPECT_TRUE(a.allclose(a) && a.equal(a));
}

}  // namespace
}  // namespace tgtest
