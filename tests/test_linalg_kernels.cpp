// The linear algebra kernels' layouts and fast paths, on the CPU and the GPU:
// operands read in place in either memory order (a row-major A is the
// column-major A^T, the other triangle), the Cholesky factor made row-major,
// the batched triangular inverse (matinvBatched blocks joined by GEMMs; trtri
// for one or large matrices) and the first-order Cholesky backward through it
// against the recorded (create_graph) formula's triangular solves.
#include <sstream>

#include "reference.h"
#include "tensor/linalg_kernels.h"

namespace tgtest {
namespace {

namespace la = tg::linalg;
const auto kF64 = tg::TensorOptions().dtype(tg::kFloat64);

double max_abs(const Tensor& t) { return tg::abs(t).amax().to(tg::Device(tg::kCPU)).item<double>(); }

std::string name(const tg::Device& d) {
  std::ostringstream os;
  os << d;
  return os.str();
}
std::vector<tg::Device> devices() {
  std::vector<tg::Device> d{tg::Device(tg::kCPU)};
  if (tg::cuda::is_available()) d.emplace_back(tg::kCUDA, 0);
  return d;
}

// B SPD n x n matrices (well conditioned).
Tensor spd(int64_t B, int64_t n, uint64_t seed, tg::ScalarType dt = tg::kFloat64) {
  tg::manual_seed(seed);
  Tensor M = tg::randn({B, n, n}, kF64);
  return (tg::matmul(M, M.transpose(-2, -1)) / double(n) + tg::eye(n, kF64)).to(dt);
}
// A well-conditioned lower triangular [B, n, n]: the factor of spd.
Tensor lower(int64_t B, int64_t n, uint64_t seed) { return la::cholesky(spd(B, n, seed)); }

TEST(LinalgKernels, CholeskyReadsTheLowerTriangleOfEveryLayoutAndGivesAContiguousFactor) {
  for (const tg::Device& dev : devices()) {
    SCOPED_TRACE(name(dev));
    Tensor A = spd(3, 7, 1);
    Tensor ref = la::cholesky(A);  // CPU, contiguous input
    // Garbage in the strict upper triangle is not read.
    Tensor junk = A + tg::triu(tg::full({3, 7, 7}, 1e3, kF64), 1);
    for (const Tensor& in : {junk, junk.transpose(-2, -1).contiguous().transpose(-2, -1),
                             A.transpose(-2, -1),  // column-major (A symmetric)
                             A.select(0, 1).expand({2, 7, 7})}) {
      Tensor L = la::cholesky(in.to(dev));
      EXPECT_TRUE(L.is_contiguous());
      EXPECT_EQ(max_abs(tg::triu(L, 1)), 0.0);
      const Tensor want = in.size(0) == 2 ? ref.select(0, 1).expand({2, 7, 7}) : ref;
      EXPECT_LT(max_abs(L.to(tg::Device(tg::kCPU)) - want), 1e-12);
    }
    Tensor U = la::cholesky(A.to(dev), true);
    EXPECT_LT(max_abs(U.to(tg::Device(tg::kCPU)) - ref.transpose(-2, -1)), 1e-12);
  }
}

TEST(LinalgKernels, SolveTriangularReadsRowAndColumnMajorAndBroadcastOperandsInPlace) {
  for (const tg::Device& dev : devices()) {
    SCOPED_TRACE(name(dev));
    Tensor L = lower(4, 6, 2);  // [4, 6, 6]
    Tensor B = tg::randn({4, 6, 3}, kF64);
    for (bool upper : {false, true})
      for (bool left : {true, false}) {
        SCOPED_TRACE(std::string(upper ? "upper" : "lower") + (left ? " left" : " right"));
        Tensor T = upper ? L.transpose(-2, -1).contiguous() : L;
        Tensor rhs = left ? B : B.transpose(-2, -1);
        auto check = [&](const Tensor& Tin, const Tensor& Bin, const Tensor& Tref) {
          Tensor X = la::solve_triangular(Tin.to(dev), Bin.to(dev), upper, left).to(tg::Device(tg::kCPU));
          Tensor back = left ? tg::matmul(Tref, X) : tg::matmul(X, Tref);
          EXPECT_LT(max_abs(back - Bin), 1e-10);
        };
        check(T, rhs, T);                                                   // row-major
        check(T.transpose(-2, -1).contiguous().transpose(-2, -1), rhs, T);  // column-major
        // Only the triangle is read: junk in the other one.
        Tensor other = upper ? tg::tril(tg::full({6, 6}, 7.0, kF64), -1) : tg::triu(tg::full({6, 6}, 7.0, kF64), 1);
        check(T + other, rhs, T);
        check((T + other).transpose(-2, -1).contiguous().transpose(-2, -1), rhs, T);
        // One A for every right-hand side (batch stride 0), and a strided slice.
        Tensor T0 = T.select(0, 0);
        check(T0, rhs, T0.expand({4, 6, 6}));
        Tensor wide = tg::zeros({6, 12}, kF64);
        wide.narrow(1, 0, 6).copy_(T0);
        check(wide.narrow(1, 0, 6), rhs, T0.expand({4, 6, 6}));
        // Mixed broadcast (batch dims that do not collapse): copied.
        Tensor T2 = T.narrow(0, 0, 2).unsqueeze(1);  // [2, 1, 6, 6]
        Tensor R2 = (left ? tg::randn({2, 3, 6, 3}, kF64) : tg::randn({2, 3, 3, 6}, kF64));
        check(T2, R2, T2.expand({2, 3, 6, 6}));
      }
  }
}

// detail::triangular_inverse against the solve T X = I, every path: the
// blocks (n <= 32 one matinvBatched, one split, several levels, odd sizes),
// one matrix and large ones (trtri).
TEST(LinalgKernels, TriangularInverseEveryPathMatchesTheSolve) {
  for (const tg::Device& dev : devices()) {
    SCOPED_TRACE(name(dev));
    for (int64_t n : {1, 2, 31, 32, 33, 64, 65, 100, 257, 600})
      for (int64_t B : {1, 3}) {
        if (n == 600 && (B == 3 || dev.type() == tg::kCPU)) continue;  // one large one: enough
        for (bool upper : {false, true})
          for (tg::ScalarType dt : {tg::kFloat64, tg::kFloat32}) {
            SCOPED_TRACE("n " + std::to_string(n) + " B " + std::to_string(B) + (upper ? " upper" : " lower") + " " +
                         std::string(tg::to_string(dt)));
            Tensor L = lower(B, n, uint64_t(n + B));
            Tensor T = (upper ? L.transpose(-2, -1) : L).to(dt);
            // The other triangle holds junk, which must not be read.
            Tensor junk = upper ? tg::tril(tg::full({n, n}, 5.0, kF64), -1) : tg::triu(tg::full({n, n}, 5.0, kF64), 1);
            Tensor Ti = tg::detail::triangular_inverse((T + junk.to(dt)).to(dev), upper).to(tg::Device(tg::kCPU));
            Tensor want = la::solve_triangular(T.to(tg::kFloat64), tg::eye(n, kF64).expand({B, n, n}), upper);
            const double tol = dt == tg::kFloat64 ? 1e-10 : 2e-3;
            EXPECT_LT(max_abs(Ti.to(tg::kFloat64) - want), tol * (1 + max_abs(want)));
            EXPECT_EQ(max_abs(upper ? tg::tril(Ti, -1) : tg::triu(Ti, 1)), 0.0) << "the other triangle is not zero";
          }
      }
  }
}

// The first-order Cholesky backward (a triangular inverse and GEMMs where the
// device has one) equals the recorded formula's (create_graph: the triangular
// solves), batched and single, lower and upper.
TEST(LinalgKernels, FirstOrderCholeskyBackwardEqualsTheRecordedFormula) {
  for (const tg::Device& dev : devices()) {
    SCOPED_TRACE(name(dev));
    for (auto [B, n] : {std::pair<int64_t, int64_t>{5, 64}, {2, 33}, {1, 300}})
      for (bool upper : {false, true}) {
        SCOPED_TRACE("B " + std::to_string(B) + " n " + std::to_string(n) + (upper ? " upper" : " lower"));
        Tensor A = spd(B, n, uint64_t(B * n)).to(dev);
        Tensor W = tg::randn({B, n, n}, kF64).to(dev);
        auto grad = [&](bool create_graph) {
          Tensor Ar = A.detach().requires_grad_();
          Tensor loss = (la::cholesky(Ar, upper) * W).sum() + la::logdet(Ar).sum();
          return tg::autograd::grad({loss}, {Ar}, {}, std::nullopt, create_graph)[0].detach();
        };
        Tensor fast = grad(false), recorded = grad(true);
        EXPECT_LT(max_abs(fast - recorded), 1e-9 * (1 + max_abs(recorded)));
      }
  }
}

}  // namespace
}  // namespace tgtest
