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
  // A bias of another dtype is refused, as PyTorch's (it would promote the
  // layer's output); the layer stays usable (adversary's finding).
  EXPECT_ERROR_CONTAINS(tg::linear(x, w, b.to(tg::kFloat32)), "linear: bias (Float32) must have the input's");
  EXPECT_ERROR_CONTAINS(tg::linear(x.to(tg::kFloat32), w.to(tg::kFloat32), b), "convert it with .to(Float32)");
  expect_values(tg::linear(x, w, b), ref, 1e-12, "linear with bias, after the errors");
  // No input features: the output is the bias, and every gradient is formed
  // (the weight's [5, 0]; -1 was not inferred from zero elements).
  for (const IntList& xs : {IntList{2, 0}, IntList{3, 2, 0}, IntList{0}, IntList{0, 0}}) {
    SCOPED_TRACE(tg::shape_str(xs));
    Tensor x0 = tg::zeros(xs, tg::kFloat64).requires_grad_(true);
    Tensor w0 = tg::zeros({5, 0}, tg::kFloat64).requires_grad_(true), b0 = b.detach().requires_grad_(true);
    Tensor y = tg::linear(x0, w0, b0);
    std::vector<Tensor> g = tg::autograd::grad({y.sum()}, {x0, w0, b0});
    EXPECT_EQ(g[0].sizes(), xs);
    EXPECT_EQ(g[1].sizes(), (IntList{5, 0}));
    int64_t rows = 1;
    for (size_t d = 0; d + 1 < xs.size(); ++d)
      rows *= xs[d];
    expect_values(g[2], std::vector<double>(5, double(rows)), 0, "bias gradient: the rows' count");
  }
}

}  // namespace
}  // namespace tgtest

// ---- tg::linalg: closed forms, third derivatives, multi-output nodes, bad inputs
namespace tgtest {
namespace {

namespace la = tg::linalg;
using tg::autograd::grad;

const tg::TensorOptions kF64 = tg::TensorOptions().dtype(tg::kFloat64);

class LinalgFamily : public ::testing::TestWithParam<tg::DeviceType> {
 protected:
  void SetUp() override {
    if (GetParam() == tg::kCUDA) {
      REQUIRE_GPU();
    }
  }
  tg::Device dev() const { return GetParam() == tg::kCUDA ? tg::Device(tg::kCUDA, 0) : tg::Device(tg::kCPU); }
  Tensor T(std::vector<double> v, IntList s) const { return tg::tensor(v, s, kF64).to(dev()); }
};

double max_abs(const Tensor& t) { return tg::abs(t).amax().to(tg::Device(tg::kCPU)).item<double>(); }

TEST_P(LinalgFamily, FactorizationsReconstructTheirInput) {
  const Tensor A = T({4, 2, 0.6, 2, 5, 1, 0.6, 1, 3}, {3, 3});  // symmetric positive definite
  const Tensor L = la::cholesky(A);
  EXPECT_LT(max_abs(tg::matmul(L, L.transpose(0, 1)) - A), 1e-12);
  EXPECT_EQ(max_abs(tg::triu(L, 1)), 0.0);
  const Tensor U = la::cholesky(A, true);
  EXPECT_LT(max_abs(tg::matmul(U.transpose(0, 1), U) - A), 1e-12);
  auto [w, V] = la::eigh(A);
  EXPECT_LT(max_abs(tg::matmul(tg::mul(V, w.unsqueeze(0)), V.transpose(0, 1)) - A), 1e-12);
  EXPECT_LT(values(w)[0], values(w)[1]);  // ascending
  const Tensor B = T({1, 2, 3, 4, 5, 6, 7, 8, 10, 1, 0, 2}, {4, 3});
  auto [Q, R] = la::qr(B);
  EXPECT_LT(max_abs(tg::matmul(Q, R) - B), 1e-12);
  EXPECT_LT(max_abs(tg::matmul(Q.transpose(0, 1), Q) - tg::eye(3, kF64).to(dev())), 1e-12);
  auto [Us, S, Vh] = la::svd(B, false);
  EXPECT_LT(max_abs(tg::matmul(tg::mul(Us, S.unsqueeze(0)), Vh) - B), 1e-12);
  auto [Uf, Sf, Vhf] = la::svd(B);
  EXPECT_EQ(Uf.sizes(), (IntList{4, 4}));
  EXPECT_LT(max_abs(tg::matmul(Uf.transpose(0, 1), Uf) - tg::eye(4, kF64).to(dev())), 1e-12);
  // LAPACK's pivots: [[1, 2], [3, 4]] swaps its rows first.
  auto [LU, piv] = la::lu_factor(T({1, 2, 3, 4}, {2, 2}));
  expect_values(LU, {3, 4, 1.0 / 3, 2.0 / 3}, 1e-12, "");
  EXPECT_EQ(values(piv), (std::vector<double>{2, 2}));
  expect_values(la::lu_solve(LU, piv, T({5, 6}, {2, 1})), {-4, 4.5}, 1e-12, "");  // [[1,2],[3,4]] x = [5, 6]
}

TEST_P(LinalgFamily, ValuesMatchClosedForms) {
  const Tensor A = T({2, 1, 1, 3}, {2, 2});  // det 5
  expect_values(la::det(A), {5}, 1e-12, "");
  expect_values(la::logdet(A), {std::log(5.0)}, 1e-12, "");
  auto [sign, logabs] = la::slogdet(T({0, 1, 1, 0}, {2, 2}));  // det -1
  expect_values(sign, {-1}, 0, "");
  expect_values(logabs, {0}, 1e-14, "");
  EXPECT_TRUE(std::isnan(values(la::logdet(T({0, 1, 1, 0}, {2, 2})))[0]));
  auto [s0, l0] = la::slogdet(T({1, 2, 2, 4}, {2, 2}));  // singular
  expect_values(s0, {0}, 0, "");
  EXPECT_EQ(values(l0)[0], -std::numeric_limits<double>::infinity());
  expect_values(la::inv(A), {0.6, -0.2, -0.2, 0.4}, 1e-12, "");
  expect_values(la::solve(A, T({3, 4}, {2})), {1, 1}, 1e-12, "");  // a vector right-hand side
  // exp of a nilpotent and of a rotation generator (scaling and squaring at t = 10).
  expect_values(la::matrix_exp(T({0, 1, 0, 0}, {2, 2})), {1, 1, 0, 1}, 1e-14, "");
  expect_values(la::matrix_exp(T({0, 10, -10, 0}, {2, 2})), {std::cos(10), std::sin(10), -std::sin(10), std::cos(10)},
                1e-11, "rotation");
  expect_values(la::matrix_norm(T({1, -2, 3, 4}, {2, 2}), 1.0), {6}, 1e-14, "");
  expect_values(la::matrix_norm(T({1, -2, 3, 4}, {2, 2}), std::numeric_limits<double>::infinity()), {7}, 1e-14, "");
  expect_values(la::matrix_norm(T({3, 0, 0, 4}, {2, 2}), "nuc"), {7}, 1e-12, "");
  expect_values(la::vector_norm(T({3, -4, 0}, {3}), 0.0), {2}, 0, "");
  expect_values(la::pinv(T({1, 0, 0, 0}, {2, 2})), {1, 0, 0, 0}, 1e-14, "");  // the zero singular value drops
  auto [X, res, rank, sv] = la::lstsq(T({1, 0, 0, 1, 1, 1}, {3, 2}), T({1, 2, 4}, {3, 1}));
  expect_values(X, {4.0 / 3, 7.0 / 3}, 1e-12, "");    // normal equations [[2,1],[1,2]] x = [5, 6]
  expect_values(res, {1.0 / 3}, 1e-12, "residuals");  // A x - b = [1, -1, 1] / 3
}

// d logdet(A)/dA = A^-T, and its derivative along E: -(A^-1 E A^-1)^T.
TEST_P(LinalgFamily, LogdetGradientAndHessianAreClosedForms) {
  const Tensor A0 = T({3, 1, 0.5, 0.2, 2, 0.3, 0.1, 0.4, 4}, {3, 3});
  const Tensor E = T({0.1, -0.2, 0.3, 0.4, 0.5, -0.6, 0.7, 0.8, 0.9}, {3, 3});
  const Tensor A = A0.detach().requires_grad_();
  const Tensor g = grad({la::logdet(A)}, {A}, {}, false, true)[0];
  const Tensor Ainv = la::inv(A0);
  EXPECT_LT(max_abs(g - Ainv.transpose(0, 1)), 1e-12);
  const Tensor h = grad({tg::sum(g * E)}, {A})[0];
  EXPECT_LT(max_abs(h + tg::matmul(tg::matmul(Ainv, E), Ainv).transpose(0, 1)), 1e-12);
}

// d lambda_i / dA = v_i v_i^T for a symmetric A with distinct eigenvalues;
// a gradient from the eigenvalues alone (the eigenvectors' undefined).
TEST_P(LinalgFamily, EigenvalueDerivativesAreOuterProducts) {
  const Tensor A = T({4, 1, 0, 1, 3, 1, 0, 1, 2}, {3, 3}).requires_grad_();
  auto [w, V] = la::eigh(A);
  const Tensor g = grad({w.select(0, 2)}, {A})[0];
  const Tensor v = V.select(1, 2).detach();
  EXPECT_LT(max_abs(g - tg::mul(v.unsqueeze(1), v.unsqueeze(0))), 1e-12);
  // sum of eigenvalues = trace: gradient I.
  auto [w2, V2] = la::eigh(A);
  EXPECT_LT(max_abs(grad({w2.sum()}, {A})[0] - tg::eye(3, kF64).to(dev())), 1e-12);
  // svd: only S, sum S = nuclear norm, gradient U Vh.
  const Tensor B = T({1, 2, 3, 4, 5, 7}, {3, 2}).requires_grad_();
  auto [U, S, Vh] = la::svd(B, false);
  EXPECT_LT(max_abs(grad({S.sum()}, {B})[0] - tg::matmul(U, Vh).detach()), 1e-12);
  // qr: only R.
  auto [Q, R] = la::qr(B);
  EXPECT_EQ(grad({R.sum()}, {B})[0].sizes(), B.sizes());
}

// f(t) = logdet(A + t E): f''' = 2 tr(M^3), M = A^-1 E; x(t) = (A + t E)^-1 b:
// x''' = -6 M^3 A^-1 b; cholesky's third derivative against differences of its second.
TEST_P(LinalgFamily, ThirdDerivativesOfLogdetSolveAndCholesky) {
  const Tensor A = T({3, 1, 0.5, 1, 2, 0.3, 0.5, 0.3, 4}, {3, 3});
  const Tensor E = T({0.1, 0.2, 0.3, 0.2, 0.5, -0.1, 0.3, -0.1, 0.9}, {3, 3});  // symmetric
  const Tensor b = T({1, -1, 2}, {3, 1});
  auto third = [&](const std::function<Tensor(const Tensor&)>& f, double t0) {
    Tensor t = tg::full({}, t0, kF64).to(dev()).requires_grad_();
    Tensor d1 = grad({f(t)}, {t}, {}, true, true)[0];
    Tensor d2 = grad({d1}, {t}, {}, true, true)[0];
    return std::vector<double>{values(d2)[0], values(grad({d2}, {t})[0])[0]};
  };
  const Tensor M = tg::matmul(la::inv(A), E);
  const Tensor M3 = tg::matmul(M, tg::matmul(M, M));
  const double want_logdet = 2 * values(tg::diagonal(M3, 0, 0, 1).sum())[0];
  EXPECT_NEAR(third([&](const Tensor& t) { return la::logdet(A + E * t); }, 0)[1], want_logdet, 1e-10);
  const Tensor w = T({0.3, -0.7, 1.1}, {3, 1});
  const double want_solve = values(tg::sum(w * tg::matmul(M3, la::solve(A, b)) * -6.0))[0];
  EXPECT_NEAR(third([&](const Tensor& t) { return tg::sum(w * la::solve(A + E * t, b)); }, 0)[1], want_solve, 1e-10);
  const Tensor W = T({1, 0.5, -0.3, 0.2, 1, 0.7, -0.4, 0.9, 1}, {3, 3});
  auto chol = [&](const Tensor& t) { return tg::sum(W * la::cholesky(A + E * t)); };
  const double h = 1e-4;
  const double fd = (third(chol, h)[0] - third(chol, -h)[0]) / (2 * h);
  EXPECT_NEAR(third(chol, 0)[1], fd, 1e-6 * (1 + std::abs(fd)));
}

TEST_P(LinalgFamily, BadInputsNameTheOpAndWhatIsWrong) {
  EXPECT_ERROR_CONTAINS(la::cholesky(T({1, 2, 3, 4, 5, 6}, {2, 3})), "linalg.cholesky: expected A to be a square");
  // Batch element [1] fails at its leading minor of order 2.
  const Tensor bad = T({4, 0, 0, 1, 1, 0, 1, 1, 1, 2, 0, 2, 0, 0, 0, 3}, {2, 2, 2, 2}).reshape({2, 2, 2, 2});
  const Tensor spd_then_not = T({2, 0, 0, 2, 1, 2, 2, 1}, {2, 2, 2});
  EXPECT_ERROR_CONTAINS(la::cholesky(spd_then_not), "leading minor of order 2");
  EXPECT_ERROR_CONTAINS(la::cholesky(spd_then_not), "batch element [1]");
  auto [L, info] = la::cholesky_ex(spd_then_not);  // no throw: the info tensor says it
  EXPECT_EQ(values(info), (std::vector<double>{0, 2}));
  (void)bad;
  EXPECT_ERROR_CONTAINS(la::solve(T({1, 2, 2, 4}, {2, 2}), T({1, 1}, {2})), "singular");
  EXPECT_ERROR_CONTAINS(la::inv(T({1, 2, 2, 4}, {2, 2})), "singular");
  EXPECT_ERROR_CONTAINS(la::solve(T({1, 0, 0, 1}, {2, 2}), T({1, 1, 1}, {3, 1})), "do not match");
  EXPECT_ERROR_CONTAINS(la::solve_triangular(T({1, 0, 0, 1}, {2, 2}), T({1, 1, 1}, {3, 1}), false), "do not match");
  EXPECT_ERROR_CONTAINS(la::cholesky(tg::ones({2, 2}, tg::TensorOptions().dtype(tg::kInt64)).to(dev())),
                        "Float32 or Float64");
  EXPECT_ERROR_CONTAINS(la::eigh(T({1, 0, 0, 1}, {2, 2}), "X"), "UPLO");
  EXPECT_ERROR_CONTAINS(la::qr(T({1, 0, 0, 1}, {2, 2}), "full"), "mode");
  EXPECT_ERROR_CONTAINS(la::matrix_norm(T({1, 0, 0, 1}, {2, 2}), 3.0), "ord");
  auto [LU, piv] = la::lu_factor(T({1, 2, 3, 4}, {2, 2}));
  EXPECT_ERROR_CONTAINS(la::lu_solve(LU, piv * 0, T({1, 1}, {2, 1})), "pivots");
  // The adversary's findings: B's rows checked against LU (a silently
  // truncated solve before), pivots never broadcast over LU's batch, NaN not
  // positive definite (as LAPACK's potrf), composites name themselves.
  EXPECT_ERROR_CONTAINS(la::lu_solve(LU, piv, T({1, 1, 1}, {3, 1})), "linalg.lu_solve: LU [2, 2] and B [3, 1]");
  auto [LU3, piv3] = la::lu_factor(T({4, 1, 2, 5, 3, 1, 1, 1, 6, 2, 1, 0}, {3, 2, 2}));
  EXPECT_ERROR_CONTAINS(la::lu_solve(LU3, piv3.narrow(0, 0, 1), T({1, 1}, {2, 1})), "expected pivots");
  EXPECT_ERROR_CONTAINS(la::lu_solve(LU, piv.to(tg::kFloat64), T({1, 1}, {2, 1})), "Float64");
  EXPECT_ERROR_CONTAINS(la::lu_solve(LU, piv * 0 + 3, T({1, 1}, {2, 1})), "pivots[0] = 3");
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(values(std::get<1>(la::cholesky_ex(T({nan, 0, 0, 1}, {2, 2})))), (std::vector<double>{1}));
  EXPECT_ERROR_CONTAINS(la::cholesky(T({1, 0, 0, nan}, {2, 2})), "order 2 is not positive definite");
  EXPECT_ERROR_CONTAINS(la::det(T({1, 2}, {2})), "linalg.det");
  EXPECT_ERROR_CONTAINS(la::cholesky_solve(T({1, 1, 1}, {3, 1}), T({1, 0, 0, 1}, {2, 2})), "linalg.cholesky_solve");
  EXPECT_ERROR_CONTAINS(la::inv_ex(T({1, 2, 2, 4}, {2, 2}), true), "linalg.inv");
  EXPECT_ERROR_CONTAINS(la::vector_norm(tg::zeros({0}, kF64).to(dev()), std::numeric_limits<double>::infinity()),
                        "linalg.vector_norm");
  EXPECT_ERROR_CONTAINS(la::vector_norm(T({1, 2}, {2}), 2.0, {0, -1}), "appears twice");
  expect_values(la::vector_norm(T({1, 2}, {2}), -1.0), {2.0 / 3}, 1e-14, "p = -1");
  EXPECT_FALSE(std::signbit(values(la::det(T({1, 2, 2, 4}, {2, 2})))[0]));  // 0, not -0
  // Still usable.
  expect_values(la::cholesky(T({4, 0, 0, 9}, {2, 2})), {2, 0, 0, 3}, 1e-14, "");
}

// An op without a Taylor rule refuses a Taylor level at itself; one with a
// rule gives the coefficients of the composed polynomial.
TEST_P(LinalgFamily, TaylorCoverageIsDeclaredAndChecked) {
  namespace fwd = tg::autograd::forward_ad;
  const Tensor A = T({3, 1, 1, 2}, {2, 2});
  const Tensor v = T({1, 0, 0, 1}, {1, 2, 2});
  const Tensor z = tg::zeros({1, 2, 2}, kF64).to(dev());
  {
    fwd::taylor_level level(2, 1);
    Tensor x = fwd::make_jet(A, {v, z});
    EXPECT_ERROR_CONTAINS(la::qr(x), "linalg.qr: no Taylor-mode rule");
    EXPECT_ERROR_CONTAINS(la::svdvals(x), "no Taylor-mode rule");
    // eigvalsh(A + t I) = eigvalsh(A) + t: c_1 = 1, c_2 = 0.
    auto e = fwd::jet_coefficients(la::eigvalsh(x));
    expect_values(e[0], {1, 1}, 1e-12, "eigvalsh c_1");
    expect_values(e[1], {0, 0}, 1e-12, "eigvalsh c_2");
    // logdet(A + t I) = logdet A + t tr(A^-1) - t^2 tr(A^-2) / 2 + ...
    auto c = fwd::jet_coefficients(la::logdet(x));
    const Tensor Ai = la::inv(A);
    EXPECT_NEAR(values(c[0])[0], values(tg::diagonal(Ai, 0, 0, 1).sum())[0], 1e-12);
    EXPECT_NEAR(values(c[1])[0], -0.5 * values(tg::diagonal(tg::matmul(Ai, Ai), 0, 0, 1).sum())[0], 1e-12);
  }
}

// eigh's Taylor rule (the implicit jet of A V = V Lambda, V^T V = I) at
// order 4. A 2 x 2 [[a, b], [b, c]](t), linear in t, has the closed form
// lambda = p -+ s, s = sqrt(h^2 + b^2), p = (a + c) / 2, h = (a - c) / 2, and
// the larger one's eigenvector (cos th, sin th) has cos^2 th = (1 + h / s) / 2;
// their series follow from s^2 = q and r s = h (r = h / s).
TEST_P(LinalgFamily, EighTaylorCoefficientsMatchTheTwoByTwoClosedForm) {
  namespace fwd = tg::autograd::forward_ad;
  const int K = 4;
  const double a0 = 2, b0 = 0.7, c0 = -1, a1 = 0.3, b1 = -0.5, c1 = 1.1;
  const double h0 = (a0 - c0) / 2, h1 = (a1 - c1) / 2;
  std::vector<double> q = {h0 * h0 + b0 * b0, 2 * (h0 * h1 + b0 * b1), h1 * h1 + b1 * b1, 0, 0};
  std::vector<double> hs = {h0, h1, 0, 0, 0}, sq(K + 1), r(K + 1);
  sq[0] = std::sqrt(q[0]);
  for (int m = 1; m <= K; ++m) {
    double acc = q[size_t(m)];
    for (int i = 1; i < m; ++i)
      acc -= sq[size_t(i)] * sq[size_t(m - i)];
    sq[size_t(m)] = acc / (2 * sq[0]);
  }
  for (int m = 0; m <= K; ++m) {
    double acc = hs[size_t(m)];
    for (int i = 0; i < m; ++i)
      acc -= r[size_t(i)] * sq[size_t(m - i)];
    r[size_t(m)] = acc / sq[0];
  }
  for (const char* uplo : {"L", "U"}) {
    SCOPED_TRACE(uplo);
    fwd::taylor_level level(K, 1);
    const Tensor z = tg::zeros({1, 2, 2}, kF64).to(dev());
    // The unread triangle holds garbage (the coefficients' too): eigh reads one.
    const bool lower = std::string(uplo) == "L";
    const Tensor A = lower ? T({a0, 9, b0, c0}, {2, 2}) : T({a0, b0, 9, c0}, {2, 2});
    const Tensor E = T({a1, b1, b1, c1}, {1, 2, 2});
    Tensor x = fwd::make_jet(A, {E, z, z, z});
    auto [w, V] = la::eigh(x, uplo);
    auto cw = fwd::jet_coefficients(w), cv = fwd::jet_coefficients(tg::mul(V, V));
    auto cs = fwd::jet_coefficients(la::eigvalsh(x, uplo));
    for (int m = 1; m <= K; ++m) {
      const double p = m == 1 ? (a1 + c1) / 2 : 0;
      const double sm = sq[size_t(m)], rm = r[size_t(m)] / 2;
      const std::string at = "c_" + std::to_string(m);
      expect_values(cw[size_t(m - 1)], {p - sm, p + sm}, 1e-11, (at + " eigenvalues").c_str());
      expect_values(cs[size_t(m - 1)], {p - sm, p + sm}, 1e-11, (at + " eigvalsh").c_str());
      // V o V = [[sin^2, cos^2], [cos^2, sin^2]] of the larger's angle.
      expect_values(cv[size_t(m - 1)], {-rm, rm, rm, -rm}, 1e-11, (at + " eigenvectors squared").c_str());
    }
  }
}

// Order 4 on a batch of 4 x 4 matrices, two directions with their own second
// input coefficients (A(t) = A0 + E t + G t^2), against nested reverse mode
// (the fourth derivative of a weighted sum of the eigenvalues and of the
// squared eigenvectors, sign-free functions of them).
TEST_P(LinalgFamily, EighTaylorCoefficientsMatchNestedReverseMode) {
  namespace fwd = tg::autograd::forward_ad;
  const int K = 4;
  auto symmetric = [&](const Tensor& t) { return (t + t.transpose(-2, -1)) * 0.5; };
  tg::manual_seed(46);
  const Tensor A0 = (symmetric(tg::randn({2, 4, 4}, kF64)) +
                     tg::diag_embed(tg::tensor({-3.0, -1.0, 1.0, 3.0}, {4}, kF64)).unsqueeze(0))
                        .to(dev());
  const Tensor E = symmetric(tg::randn({2, 2, 4, 4}, kF64)).to(dev());
  const Tensor G = (symmetric(tg::randn({2, 2, 4, 4}, kF64)) * 0.5).to(dev());
  const Tensor Ww = tg::randn({2, 4}, kF64).to(dev()), Wv = tg::randn({2, 4, 4}, kF64).to(dev());
  auto scalar = [&](const Tensor& A) {
    auto [w, V] = la::eigh(A);
    return tg::sum(Ww * w) + tg::sum(Wv * V * V);
  };
  std::vector<Tensor> c;
  {
    fwd::taylor_level level(K, 2);
    const Tensor z = tg::zeros({2, 2, 4, 4}, kF64).to(dev());
    auto [w, V] = la::eigh(fwd::make_jet(A0, {E, G, z, z}));
    auto cw = fwd::jet_coefficients(w), cv = fwd::jet_coefficients(V * V);
    for (int m = 0; m < K; ++m)  // [2 directions]
      c.push_back(tg::sum(Ww * cw[size_t(m)], {1, 2}) + tg::sum(Wv * cv[size_t(m)], {1, 2, 3}));
  }
  double factorial = 1;
  for (int d = 0; d < 2; ++d) {
    Tensor t = tg::zeros({}, kF64).to(dev()).requires_grad_();
    Tensor f = scalar(A0 + E.select(0, d) * t + G.select(0, d) * (t * t));
    factorial = 1;
    for (int m = 1; m <= K; ++m) {
      f = grad({f}, {t}, {}, true, true)[0];
      factorial *= m;
      const double want = values(f)[0] / factorial, got = values(c[size_t(m - 1)])[size_t(d)];
      EXPECT_NEAR(got, want, 1e-9 * (1 + std::abs(want))) << "direction " << d << ", c_" << m;
    }
  }
}

// per_sample_hessian(..., Taylor) and laplacian through eigh (second-order
// groups: the cross terms polarized over pairs) against the reverse rows.
TEST_P(LinalgFamily, HessianAndLaplacianThroughEighInTaylorMode) {
  namespace ag = tg::autograd;
  tg::manual_seed(7);
  const Tensor basis = tg::randn({3, 9}, kF64).to(dev());
  const Tensor A0 = T({3, 0.5, 0.2, 0.5, 1, -0.3, 0.2, -0.3, -2}, {3, 3});
  auto fn = [&](const Tensor& x) {  // x [B, 3] -> [B, 3 + 9]
    const int64_t B = x.size(0);
    Tensor S = tg::matmul(x, basis).reshape({B, 3, 3});
    auto [w, V] = la::eigh(A0 + (S + S.transpose(-2, -1)) * 0.5, "U");
    return tg::cat({w, (V * V).reshape({B, 9}), la::eigvalsh(S + S.transpose(-2, -1) + A0 * 2.0)}, 1);
  };
  const Tensor x = (tg::randn({5, 3}, kF64) * 0.3).to(dev());
  const Tensor want = ag::per_sample_hessian(fn, x, ag::HessianStrategy::Rows);
  const Tensor h = ag::per_sample_hessian(fn, x, ag::HessianStrategy::Taylor);
  EXPECT_LT(max_abs(h - want), 1e-9 * (1 + max_abs(want)));
  const Tensor lap = ag::laplacian(fn, x);
  EXPECT_LT(max_abs(lap - tg::sum(tg::diagonal(want, 0, -2, -1), {-1})), 1e-9 * (1 + max_abs(want)));
}

// per_sample_hessian(..., Taylor) through each composite where it is fn's
// only nonlinearity, with and without create_graph, against the reverse rows.
// Without create_graph the structure probe first runs fn on an empty batch:
// a composite whose empty-batch path were a different function of its input
// (matrix_exp's copy of A was linear) would make the Hessian zeros.
TEST_P(LinalgFamily, HessianThroughEachCompositeInTaylorModeMatchesTheRows) {
  namespace ag = tg::autograd;
  using Fn = std::function<Tensor(const Tensor&)>;
  const double inf = std::numeric_limits<double>::infinity();
  const Tensor A0 = T({2, 0.3, 0.1, 1.5}, {2, 2}), S0 = T({2, 0.3, 0.3, 1.5}, {2, 2});
  const Tensor b = T({1, -0.5, 0.25, 2, 0.5, -1}, {2, 3});
  const auto [LU0, piv0] = la::lu_factor(T({0.5, 2, 1.5, 0.3}, {2, 2}));
  auto M = [](const Tensor& x) { return x.view({x.size(0), 2, 2}); };  // x [B, 4] -> [B, 2, 2]
  auto sym = [](const Tensor& X) { return (X + X.transpose(-2, -1)) * 0.5; };
  const std::vector<std::pair<std::string, Fn>> cases = {
      {"matrix_exp", [&](const Tensor& x) { return la::matrix_exp(M(x)).flatten(1); }},
      // Scaled and squared (s > 0) on the real rows; s = 0 on the empty batch.
      {"matrix_exp squared", [&](const Tensor& x) { return la::matrix_exp(M(x) * 8.0 + A0).flatten(1); }},
      {"inv", [&](const Tensor& x) { return la::inv(M(x) + A0).flatten(1); }},
      {"det", [&](const Tensor& x) { return la::det(M(x) + A0).unsqueeze(1); }},
      {"logdet", [&](const Tensor& x) { return la::logdet(M(x) + A0).unsqueeze(1); }},
      {"solve", [&](const Tensor& x) { return la::solve(M(x) + A0, b).flatten(1); }},
      {"cholesky, cholesky_solve",
       [&](const Tensor& x) { return la::cholesky_solve(b, la::cholesky(sym(M(x)) + S0)).flatten(1); }},
      {"lu_solve",
       [&](const Tensor& x) {
         const int64_t B = x.size(0);
         return la::lu_solve(M(x) * 0.2 + LU0, piv0.expand({B, 2}), b).flatten(1);
       }},
      {"eigvalsh", [&](const Tensor& x) { return la::eigvalsh(sym(M(x)) + S0); }},
      {"vector_norm 2", [&](const Tensor& x) { return la::vector_norm(x + 1.0, 2.0, {1}, true); }},
      {"vector_norm 3", [&](const Tensor& x) { return la::vector_norm(x + 1.0, 3.0, {1}, true); }},
      {"vector_norm -1", [&](const Tensor& x) { return la::vector_norm(x + 1.0, -1.0, {1}, true); }},
      // Piecewise linear: zero Hessians, the probe's shortcut.
      {"vector_norm inf", [&](const Tensor& x) { return la::vector_norm(x, inf, {1}, true); }},
      {"matrix_norm fro", [&](const Tensor& x) { return la::matrix_norm(M(x) + A0).unsqueeze(1); }},
      {"matrix_norm 1", [&](const Tensor& x) { return la::matrix_norm(M(x) + A0, 1.0).unsqueeze(1); }},
  };
  tg::manual_seed(0);
  const Tensor x = (tg::randn({3, 4}, kF64) * 0.3).to(dev());
  for (const auto& [name, fn] : cases) {
    SCOPED_TRACE(name);
    const Tensor want = ag::per_sample_hessian(fn, x, ag::HessianStrategy::Rows);
    const double scale = 1 + max_abs(want);
    const bool zero = name == "vector_norm inf" || name == "matrix_norm 1";
    EXPECT_EQ(max_abs(want) == 0.0, zero);
    for (bool create_graph : {false, true}) {
      const Tensor h = ag::per_sample_hessian(fn, x, ag::HessianStrategy::Taylor, create_graph);
      ASSERT_EQ(h.sizes(), want.sizes());
      EXPECT_LT(max_abs(h - want), 1e-9 * scale) << "create_graph " << create_graph;
    }
  }
}

// An output carrying no Taylor coefficients on the probe's empty batch (a
// path that drops x there) leaves the structure unknown: the pass runs.
TEST_P(LinalgFamily, TaylorHessianProbeTreatsAnOutputWithoutCoefficientsAsUnknown) {
  namespace ag = tg::autograd;
  const tg::TensorOptions o = kF64.device(dev());
  auto fn = [&](const Tensor& x) {
    if (x.size(0) == 0) return tg::zeros({0, 1}, o);  // as an op's constant shortcut would
    return tg::exp(x).sum({1}, true);
  };
  const Tensor x = T({0.1, -0.2, 0.3, 0.4, 0.5, -0.6}, {3, 2});
  const Tensor want = ag::per_sample_hessian(fn, x, ag::HessianStrategy::Rows);
  EXPECT_GT(max_abs(want), 0.5);
  const Tensor h = ag::per_sample_hessian(fn, x, ag::HessianStrategy::Taylor);
  EXPECT_LT(max_abs(h - want), 1e-12 * (1 + max_abs(want)));
}

// The composites on an empty batch (and on 0 x 0 matrices) give their
// results' shapes, as on a nonempty batch.
TEST_P(LinalgFamily, CompositesOnEmptyBatchesGiveTheirShapes) {
  const double inf = std::numeric_limits<double>::infinity();
  const tg::TensorOptions o = kF64.device(dev());
  auto shape = [](const Tensor& t) { return t.sizes(); };
  using S = tg::IntList;
  const Tensor A = tg::zeros({0, 3, 3}, o), W = tg::zeros({0, 2, 3}, o), Bm = tg::zeros({0, 3, 2}, o);
  EXPECT_EQ(shape(la::matrix_exp(A)), (S{0, 3, 3}));
  EXPECT_EQ(shape(la::matrix_exp(tg::zeros({2, 0, 0}, o))), (S{2, 0, 0}));
  EXPECT_EQ(shape(la::inv(A)), (S{0, 3, 3}));
  EXPECT_EQ(shape(la::det(A)), (S{0}));
  EXPECT_EQ(shape(la::logdet(A)), (S{0}));
  EXPECT_EQ(values(la::det(tg::zeros({2, 0, 0}, o))), (std::vector<double>{1, 1}));
  EXPECT_EQ(shape(la::solve(A, Bm)), (S{0, 3, 2}));
  EXPECT_EQ(shape(la::cholesky(A)), (S{0, 3, 3}));
  EXPECT_EQ(shape(la::cholesky_solve(Bm, A)), (S{0, 3, 2}));
  auto [LU, piv] = la::lu_factor(A);
  EXPECT_EQ(shape(piv), (S{0, 3}));
  EXPECT_EQ(shape(la::lu_solve(LU, piv, Bm)), (S{0, 3, 2}));
  EXPECT_EQ(shape(la::eigvalsh(A)), (S{0, 3}));
  EXPECT_EQ(shape(la::svdvals(W)), (S{0, 2}));
  EXPECT_EQ(shape(la::pinv(W)), (S{0, 3, 2}));
  EXPECT_EQ(shape(la::pinv(A, std::nullopt, std::nullopt, true)), (S{0, 3, 3}));
  EXPECT_EQ(shape(std::get<0>(la::lstsq(tg::zeros({0, 3, 2}, o), tg::zeros({0, 3, 4}, o)))), (S{0, 2, 4}));
  EXPECT_EQ(shape(la::matrix_norm(W)), (S{0}));
  EXPECT_EQ(shape(la::matrix_norm(W, "nuc")), (S{0}));
  for (double ord : {1.0, -1.0, 2.0, -2.0, inf, -inf})
    EXPECT_EQ(shape(la::matrix_norm(W, ord, true)), (S{0, 1, 1})) << "ord " << ord;
  const Tensor v = tg::zeros({0, 4}, o);
  for (double ord : {0.0, 0.5, 1.0, 2.0, 3.0, inf, -inf, -1.0, -0.5})
    EXPECT_EQ(shape(la::vector_norm(v, ord, {1})), (S{0})) << "ord " << ord;
  // A reduction over no element has no inf or negative-p norm (no identity:
  // PyTorch's refusal); 0 and positive p are 0 there.
  EXPECT_ERROR_CONTAINS(la::vector_norm(v, inf, {0}), "over no element");
  EXPECT_ERROR_CONTAINS(la::vector_norm(v, -inf), "linalg.vector_norm");
  EXPECT_ERROR_CONTAINS(la::vector_norm(v, -1.0, {0}), "over no element");
  EXPECT_ERROR_CONTAINS(la::vector_norm(v, -0.5), "linalg.vector_norm");
  EXPECT_EQ(tgtest::values(la::vector_norm(v, 2.0, {0}).to(tg::Device(tg::kCPU))), (std::vector<double>{0, 0, 0, 0}));
}

INSTANTIATE_TEST_SUITE_P(Devices, LinalgFamily, ::testing::Values(tg::kCPU, tg::kCUDA),
                         [](const ::testing::TestParamInfo<tg::DeviceType>& i) {
                           return i.param == tg::kCUDA ? std::string("Cuda") : std::string("Cpu");
                         });

}  // namespace
}  // namespace tgtest

// ---- CUDA graphs: the factorizations, solves and their gradients capture
// (workspaces from the graph's pool; cholesky's info check becomes the
// device's, raised at the next synchronization).
namespace tgtest {
namespace {

// matrix_exp reads the batch's largest 1-norm on the host: under capture it
// refuses naming itself (not item()), ending the capture; then eager work and
// a new capture work.
TEST(LinalgGpu, MatrixExpUnderCaptureRefusesNamingItself) {
  REQUIRE_GPU();
  namespace cu = tg::cuda;
  const tg::Device gpu(tg::kCUDA, 0);
  const Tensor A = tg::full({2, 3, 3}, 0.1, tg::TensorOptions().dtype(tg::kFloat64)).to(gpu);
  cu::CUDAGraph g;
  bool thrown = false;
  try {
    cu::Graph capture(g);
    (void)tg::linalg::matrix_exp(A);
  } catch (const tg::Error& e) {
    thrown = true;
    const std::string msg = e.what();
    EXPECT_NE(msg.find("linalg.matrix_exp"), std::string::npos) << msg;
    EXPECT_NE(msg.find("cannot run while a CUDA graph is being captured"), std::string::npos) << msg;
  }
  EXPECT_TRUE(thrown);
  EXPECT_FALSE(cu::is_current_stream_capturing());
  const Tensor e = tg::linalg::matrix_exp(A);
  EXPECT_LT(max_abs(e - tg::linalg::matrix_exp(A.to(tg::Device(tg::kCPU))).to(gpu)), 1e-13);
  cu::CUDAGraph g2;
  Tensor y;
  {
    cu::Graph capture(g2);
    y = A * 2.0;
  }
  g2.replay();
  EXPECT_LT(max_abs(y - A * 2.0), 1e-15);
}

TEST(LinalgGpu, CapturedCholeskySolveEighAndGradientReplayEqualsEager) {
  REQUIRE_GPU();
  namespace cu = tg::cuda;
  namespace la = tg::linalg;
  const tg::Device gpu(tg::kCUDA, 0);
  const auto f64 = tg::TensorOptions().dtype(tg::kFloat64);
  auto spd = [&](uint64_t seed) {
    tg::manual_seed(seed);
    Tensor M = tg::randn({8, 16, 16}, f64);
    return (tg::matmul(M, M.transpose(-2, -1)) / 16.0 + tg::eye(16, f64)).to(gpu);
  };
  Tensor A = spd(1), b = tg::randn({8, 16, 1}, f64).to(gpu);
  auto step = [&](const Tensor& Ain, const Tensor& bin) {
    Tensor Ar = Ain.detach().requires_grad_();
    Tensor L = la::cholesky(Ar);
    Tensor x = la::cholesky_solve(bin, L);
    Tensor logdet = tg::log(tg::diagonal(L, 0, -2, -1)).sum({-1}) * 2.0;
    Tensor w = la::eigvalsh(Ain);
    Tensor g = tg::autograd::grad({x.sum() + logdet.sum()}, {Ar})[0];
    return std::vector<Tensor>{x.detach(), logdet.detach(), w, g};
  };
  cu::CUDAGraph graph;
  std::vector<Tensor> out = capture_after_warmup(graph, [&] { return step(A, b); });
  for (uint64_t r = 0; r < 3; ++r) {
    Tensor fresh = spd(10 + r);
    A.copy_(fresh);
    graph.replay();
    std::vector<Tensor> eager = step(fresh, b);
    for (size_t i = 0; i < out.size(); ++i)
      EXPECT_LT(max_abs(out[i] - eager[i]), 1e-9 * (1 + max_abs(eager[i]))) << "output " << i << " replay " << r;
  }
  // A replay on a matrix that is not positive definite: cholesky's check is
  // raised at the next synchronization, naming the op.
  A.copy_(-spd(20));
  graph.replay();
  EXPECT_ERROR_CONTAINS(cu::synchronize(), "linalg.cholesky");
  // Still usable.
  A.copy_(spd(21));
  graph.replay();
  cu::synchronize();
  EXPECT_LT(max_abs(out[0] - step(A, b)[0]), 1e-9 * (1 + max_abs(out[0])));
}

}  // namespace
}  // namespace tgtest
