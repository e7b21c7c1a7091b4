// mm / bmm / matmul / linear against double loops.
#include "reference.h"

namespace tgtest {
namespace {

// C[b] = A[b] @ B[b] over row-major double vectors.
std::vector<double> gemm_ref(const std::vector<double>& a, const std::vector<double>& b, int64_t batch, int64_t n,
                             int64_t k, int64_t m, bool bcast_a = false, bool bcast_b = false) {
  std::vector<double> c(size_t(batch * n * m), 0);
  for (int64_t p = 0; p < batch; ++p)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < m; ++j) {
        double s = 0;
        for (int64_t q = 0; q < k; ++q)
          s += a[size_t((bcast_a ? 0 : p) * n * k + i * k + q)] * b[size_t((bcast_b ? 0 : p) * k * m + q * m + j)];
        c[size_t(p * n * m + i * m + j)] = s;
      }
  return c;
}

double gemm_tol(ScalarType t, int64_t k) {
  if (t == tg::kInt64 || t == tg::kFloat64) return 1e-11;
  if (t == tg::kFloat32) return 1e-5 * double(k);
  return 2 * tol_for(t);  // inputs already rounded; output rounded once
}

TEST(Linalg, MmEveryLayoutAndDtype) {
  tg::manual_seed(8);
  for (ScalarType dt : {tg::kFloat32, tg::kFloat64, tg::kBFloat16, tg::kFloat16, tg::kInt64})
    for (Layout la : kLayouts)
      for (Layout lb : kLayouts)
        for (IntList s : {IntList{7, 5, 9}, IntList{64, 33, 17}}) {
          Tensor a = make({s[0], s[1]}, dt, la, -1, 1), b = make({s[1], s[2]}, dt, lb, -1, 1);
          Tensor c = tg::mm(a, b);
          ASSERT_EQ(c.dtype(), dt);
          ASSERT_EQ(c.sizes(), (IntList{s[0], s[2]}));
          expect_values(c, gemm_ref(values(a), values(b), 1, s[0], s[1], s[2]), gemm_tol(dt, s[1]),
                        std::string("mm ") + tg::to_string(dt) + " " + layout_name(la) + " x " + layout_name(lb));
        }
}

TEST(Linalg, LargeMmUsesParallelRowSplit) {
  tg::manual_seed(9);
  Tensor a = tg::randn({700, 300}, tg::kFloat64), b = tg::randn({300, 200}, tg::kFloat64);
  expect_values(tg::mm(a, b), gemm_ref(values(a), values(b), 1, 700, 300, 200), 1e-11, "large mm");
  expect_values(tg::mm(b.t(), a.t()), gemm_ref(values(b.t()), values(a.t()), 1, 200, 300, 700), 1e-11, "large mm^T");
}

TEST(Linalg, BmmAndBatchedMatmulBroadcast) {
  tg::manual_seed(10);
  for (Layout l : kLayouts) {
    Tensor a = make({3, 4, 5}, tg::kFloat64, l), b = make({3, 5, 6}, tg::kFloat64, l);
    expect_values(tg::bmm(a, b), gemm_ref(values(a), values(b), 3, 4, 5, 6), 1e-12,
                  std::string("bmm ") + layout_name(l));
  }
  Tensor a = tg::randn({2, 1, 4, 5}, tg::kFloat64), b = tg::randn({3, 5, 2}, tg::kFloat64);
  Tensor c = tg::matmul(a, b);
  ASSERT_EQ(c.sizes(), (IntList{2, 3, 4, 2}));
  std::vector<double> va = values(a), vb = values(b), vc = values(c);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j) {
      std::vector<double> ai(va.begin() + i * 20, va.begin() + (i + 1) * 20);
      std::vector<double> bj(vb.begin() + j * 10, vb.begin() + (j + 1) * 10);
      std::vector<double> r = gemm_ref(ai, bj, 1, 4, 5, 2);
      for (size_t q = 0; q < r.size(); ++q)
        EXPECT_NEAR(vc[size_t((i * 3 + j) * 8) + q], r[q], 1e-12);
    }
}

TEST(Linalg, MatmulRankCombinations) {
  tg::manual_seed(11);
  Tensor v = tg::randn({5}, tg::kFloat64), w = tg::randn({5}, tg::kFloat64);
  Tensor m = tg::randn({4, 5}, tg::kFloat64), n = tg::randn({5, 3}, tg::kFloat64);
  Tensor t3 = tg::randn({2, 4, 5}, tg::kFloat64);
  std::vector<double> vv = values(v), vw = values(w);
  double dot = 0;
  for (size_t i = 0; i < 5; ++i)
    dot += vv[i] * vw[i];
  Tensor d = tg::matmul(v, w);
  EXPECT_EQ(d.dim(), 0);
  EXPECT_NEAR(d.item<double>(), dot, 1e-12);
  expect_values(tg::matmul(m, v), gemm_ref(values(m), vv, 1, 4, 5, 1), 1e-12, "2-D @ 1-D");
  expect_values(tg::matmul(v, n), gemm_ref(vv, values(n), 1, 1, 5, 3), 1e-12, "1-D @ 2-D");
  EXPECT_EQ(tg::matmul(v, n).sizes(), (IntList{3}));
  expect_values(tg::matmul(t3, n), gemm_ref(values(t3), values(n), 2, 4, 5, 3, false, true), 1e-12, "3-D @ 2-D");
  expect_values(tg::matmul(t3, v), gemm_ref(values(t3), vv, 2, 4, 5, 1, false, true), 1e-12, "3-D @ 1-D");
  EXPECT_EQ(tg::matmul(t3, v).sizes(), (IntList{2, 4}));
  Tensor t3b = tg::randn({2, 5, 3}, tg::kFloat64);
  expect_values(tg::matmul(v, t3b), gemm_ref(vv, values(t3b), 2, 1, 5, 3, true, false), 1e-12, "1-D @ 3-D");
  EXPECT_EQ(tg::matmul(v, t3b).sizes(), (IntList{2, 3}));
  expect_values(m.matmul(n), values(tg::mm(m, n)), 0, "method");
  // Empty inner and outer dims.
  expect_values(tg::mm(tg::ones({2, 0}), tg::ones({0, 3})), {0, 0, 0, 0, 0, 0}, 0, "k = 0");
  EXPECT_EQ(tg::mm(tg::ones({0, 4}), tg::ones({4, 3})).sizes(), (IntList{0, 3}));
}

TEST(Linalg, LinearWithAndWithoutBias) {
  tg::manual_seed(12);
  Tensor x = tg::randn({2, 3, 4}, tg::kFloat64), w = tg::randn({5, 4}, tg::kFloat64);
  Tensor b = tg::randn({5}, tg::kFloat64);
  std::vector<double> ref = gemm_ref(values(x), values(w.t()), 2, 3, 4, 5, false, true);
  expect_values(tg::linear(x, w), ref, 1e-12, "linear no bias");
  std::vector<double> vb = values(b);
  for (size_t i = 0; i < ref.size(); ++i)
    ref[i] += vb[i % 5];
  expect_values(tg::linear(x, w, b), ref, 1e-12, "linear with bias");
}

}  // namespace
}  // namespace tgtest
