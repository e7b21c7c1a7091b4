// The linear algebra kernels' layouts and routes, on the CPU and the GPU:
// operands read in place in either memory order (a row-major A is the
// column-major A^T, the other triangle), the Cholesky factor of a batch made
// row-major, and every route of the triangular solve (the GPU's
// shared-memory kernel up to order 64, cuBLAS above).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <sstream>
#include <type_traits>

#include <tbb/task_arena.h>

#include "reference.h"
#include "tensor/cpu/gemm.h"
#include "tensor/cpu/isa.h"
#include "tensor/cpu/vmath.h"

namespace tgtest {
namespace {

namespace la = tg::linalg;
const auto kF64 = tg::TensorOptions().dtype(tg::kFloat64);

// 0 for an empty tensor (no element differs).
double max_abs(const Tensor& t) {
  return t.numel() == 0 ? 0.0 : tg::abs(t).amax().to(tg::Device(tg::kCPU)).item<double>();
}

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

TEST(LinalgKernels, CholeskyReadsOnlyTheLowerTriangleOfEveryLayout) {
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
      EXPECT_EQ(max_abs(tg::triu(L, 1)), 0.0);
      const Tensor want = in.size(0) == 2 ? ref.select(0, 1).expand({2, 7, 7}) : ref;
      EXPECT_LT(max_abs(L.to(tg::Device(tg::kCPU)) - want), 1e-12);
    }
    Tensor U = la::cholesky(A.to(dev), true);
    EXPECT_LT(max_abs(U.to(tg::Device(tg::kCPU)) - ref.transpose(-2, -1)), 1e-12);
    // One matrix (the one-matrix routines), with junk above, both layouts,
    // small and above the batched routines' sizes.
    for (int64_t n : {7, 600}) {
      Tensor A1 = spd(1, n, 2).select(0, 0), ref1 = la::cholesky(A1);
      Tensor junk1 = A1 + tg::triu(tg::full({n, n}, 1e3, kF64), 1);
      for (const Tensor& in : {junk1, junk1.t().contiguous().t()}) {
        Tensor L1 = la::cholesky(in.to(dev));
        EXPECT_EQ(max_abs(tg::triu(L1, 1)), 0.0) << n;
        EXPECT_LT(max_abs(L1.to(tg::Device(tg::kCPU)) - ref1), 1e-10) << n;
      }
    }
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

// Every route of the triangular solve kernels against the substitution's
// defining equation: orders up to 64 (the GPU's shared-memory kernel, right-
// hand sides in chunks), above (cuBLAS's trsmBatched, or trsm per matrix),
// both triangles, left and right, unit diagonals, one A for the whole batch.
TEST(LinalgKernels, SolveTriangularEveryOrderAndRightHandSideCount) {
  for (const tg::Device& dev : devices()) {
    SCOPED_TRACE(name(dev));
    for (int64_t n : {1, 2, 31, 33, 64, 65, 100})
      for (int64_t k : {1, 3, 4, 5, 64, 70})
        for (tg::ScalarType dt : {tg::kFloat64, tg::kFloat32}) {
          const int64_t B = n * k % 2 == 0 ? 3 : 1;
          Tensor L = lower(B, n, uint64_t(n * 100 + k));
          for (bool upper : {false, true})
            for (bool left : {true, false})
              for (bool unit : {false, true}) {
                SCOPED_TRACE("n " + std::to_string(n) + " k " + std::to_string(k) + " " + tg::to_string(dt) +
                             (upper ? " upper" : " lower") + (left ? " left" : " right") + (unit ? " unit" : ""));
                Tensor T = upper ? L.transpose(-2, -1) : L;
                if (unit) T = T / tg::diagonal(T, 0, -2, -1).unsqueeze(upper ? -1 : -2);  // well conditioned
                Tensor Bm = left ? tg::randn({B, n, k}, kF64) : tg::randn({B, k, n}, kF64);
                Tensor X = la::solve_triangular(T.to(dt).to(dev), Bm.to(dt).to(dev), upper, left, unit)
                               .to(tg::Device(tg::kCPU))
                               .to(tg::kFloat64);
                Tensor Tref = unit ? (upper ? tg::triu(T, 1) : tg::tril(T, -1)) + tg::eye(n, kF64) : T;
                Tensor back = left ? tg::matmul(Tref, X) : tg::matmul(X, Tref);
                const double tol = dt == tg::kFloat64 ? 1e-10 : 1e-3;
                EXPECT_LT(max_abs(back - Bm), tol * (1 + max_abs(Bm)));
                if (B == 3 && !unit) {  // one A for the whole batch (batch stride 0)
                  Tensor T0 = T.select(0, 1);
                  Tensor X0 = la::solve_triangular(T0.to(dt).to(dev), Bm.to(dt).to(dev), upper, left)
                                  .to(tg::Device(tg::kCPU))
                                  .to(tg::kFloat64);
                  Tensor back0 = left ? tg::matmul(T0, X0) : tg::matmul(X0, T0);
                  EXPECT_LT(max_abs(back0 - Bm), tol * (1 + max_abs(Bm)));
                }
              }
        }
  }
}

// The Cholesky gradient of a batch (the two triangular solves of its
// backward on the kernels above) equals the closed form at first order and
// through create_graph.
TEST(LinalgKernels, CholeskyGradientOfABatchMatchesTheClosedForm) {
  for (const tg::Device& dev : devices()) {
    SCOPED_TRACE(name(dev));
    for (auto [B, n] : {std::pair<int64_t, int64_t>{5, 64}, {2, 33}, {1, 70}})
      for (bool create_graph : {false, true}) {
        SCOPED_TRACE("B " + std::to_string(B) + " n " + std::to_string(n) + (create_graph ? " create_graph" : ""));
        Tensor A = spd(B, n, uint64_t(B * n)).to(dev);
        Tensor Ar = A.detach().requires_grad_();
        // d logdet(A) / dA = A^-1 (symmetric A).
        Tensor L = la::cholesky(Ar);
        Tensor g = tg::autograd::grad({(tg::log(tg::diagonal(L, 0, -2, -1)) * 2.0).sum()}, {Ar}, {}, std::nullopt,
                                      create_graph)[0]
                       .detach();
        Tensor want = la::inv(A);
        EXPECT_LT(max_abs(g - want), 1e-9 * (1 + max_abs(want)));
      }
  }
}

// slogdet (its permutation's sign compares the pivots with 1..n) and argsort
// (its segment offsets and positions) make their index tensors on the
// device, so both capture; replays equal eager calls.
TEST(LinalgKernelsGpu, SlogdetAndArgsortCapture) {
  REQUIRE_GPU();
  namespace cu = tg::cuda;
  const tg::Device gpu(tg::kCUDA, 0);
  Tensor A = tg::randn({4, 5, 5}, kF64).to(gpu), v = tg::randn({3, 7}, kF64).to(gpu);
  auto step = [&] {
    auto [sign, logabs] = la::slogdet(A);
    return std::vector<Tensor>{sign, logabs, tg::argsort(v, -1)};
  };
  cu::CUDAGraph graph;
  std::vector<Tensor> out = capture_after_warmup(graph, step);
  for (uint64_t r = 0; r < 2; ++r) {
    tg::manual_seed(100 + r);
    A.copy_(tg::randn({4, 5, 5}, kF64).to(gpu));
    v.copy_(tg::randn({3, 7}, kF64).to(gpu));
    graph.replay();
    std::vector<Tensor> eager = step();
    for (size_t i = 0; i < out.size(); ++i)
      EXPECT_LT(max_abs(out[i].to(tg::kFloat64) - eager[i].to(tg::kFloat64)), 1e-12)
          << "output " << i << " replay " << r;
  }
}

// tril and triu (a copy whose other triangle a kernel zeros) against the
// recorded form's mask (a broadcast compare and where): every offset, far
// ones too, each element size, transposed, broadcast and empty inputs; the
// result is new contiguous storage.
TEST(LinalgKernels, TrilTriuEveryOffsetDtypeAndLayout) {
  const int64_t big = std::numeric_limits<int64_t>::max(), small = std::numeric_limits<int64_t>::min();
  for (const tg::Device& dev : devices()) {
    SCOPED_TRACE(name(dev));
    for (tg::ScalarType dt : {tg::kFloat64, tg::kFloat32, tg::kBFloat16, tg::kInt64, tg::kBool}) {
      SCOPED_TRACE(int(dt));
      tg::manual_seed(7);
      Tensor base = (tg::randn({2, 5, 7}, kF64) * 4).to(dt).to(dev);
      for (const Tensor& x : {base, base.transpose(-2, -1), base.select(0, 1).expand({3, 5, 7}), base.narrow(-1, 1, 4),
                              tg::zeros({0, 3, 4}, tg::TensorOptions().dtype(dt)).to(dev),
                              tg::zeros({2, 0, 4}, tg::TensorOptions().dtype(dt)).to(dev)}) {
        const int64_t r = x.size(-2), c = x.size(-1);
        const auto opt = tg::TensorOptions().dtype(tg::kInt64);
        Tensor diff = (tg::arange(0, c, 1, opt).reshape({1, c}) - tg::arange(0, r, 1, opt).reshape({r, 1})).to(dev);
        Tensor xc = x.to(tg::Device(tg::kCPU)).to(tg::kFloat64);
        for (int64_t k : {small, int64_t(-100), -r, int64_t(-2), int64_t(-1), int64_t(0), int64_t(1), int64_t(3), c,
                          int64_t(100), big}) {
          SCOPED_TRACE(k);
          const Tensor lo = tg::tril(x, k), up = tg::triu(x, k);
          ASSERT_EQ(lo.sizes(), x.sizes());
          EXPECT_TRUE(lo.is_contiguous() && up.is_contiguous());
          EXPECT_EQ(lo.dtype(), dt);
          // The mask (k clamped into int range of the compare's operands).
          const int64_t kk = std::clamp<int64_t>(k, -r - 1, c + 1);
          Tensor keep_lo = tg::le(diff, kk).to(tg::Device(tg::kCPU)),
                 keep_up = tg::ge(diff, kk).to(tg::Device(tg::kCPU));
          Tensor want_lo = tg::where(keep_lo, xc, 0.0), want_up = tg::where(keep_up, xc, 0.0);
          EXPECT_EQ(max_abs(lo.to(tg::Device(tg::kCPU)).to(tg::kFloat64) - want_lo), 0.0);
          EXPECT_EQ(max_abs(up.to(tg::Device(tg::kCPU)).to(tg::kFloat64) - want_up), 0.0);
        }
      }
      // New storage: writing the result leaves the input alone.
      const Tensor before = base.to(tg::Device(tg::kCPU)).to(tg::kFloat64);
      Tensor t = tg::tril(base, 100);
      EXPECT_FALSE(t.data_ptr() == base.data_ptr());
      t.fill_(1);
      EXPECT_EQ(max_abs(base.to(tg::Device(tg::kCPU)).to(tg::kFloat64) - before), 0.0);
    }
  }
}

// Elementwise kernels read an input that is dense along its second-to-last
// dim (a transpose) through shared-memory tiles when the output is dense
// along its last: values equal the CPU's exactly, partial tiles, more batch
// entries than the launch's blocks along z, mixed element sizes and four
// operands (where), and the shapes too small for tiles.
TEST(CudaGpu, ElementwiseReadsTransposedInputsThroughTiles) {
  REQUIRE_GPU();
  const tg::Device gpu(tg::kCUDA, 0), cpu(tg::kCPU);
  for (tg::ScalarType dt : {tg::kFloat64, tg::kFloat32, tg::kBFloat16, tg::kInt64, tg::kBool}) {
    for (const std::vector<int64_t>& shape :
         std::vector<std::vector<int64_t>>{{3, 130, 130}, {2, 2, 128, 128}, {1, 300, 300}, {5, 40, 40}, {2, 4, 4}}) {
      SCOPED_TRACE(int(dt) * 1000 + shape[0]);
      tg::manual_seed(3);
      Tensor x = (tg::randn(shape, kF64) * 8).to(dt), y = (tg::randn(shape, kF64) * 8).to(dt);
      Tensor m = tg::randn(shape, kF64) > 0;
      Tensor xg = x.to(gpu), yg = y.to(gpu), mg = m.to(gpu);
      auto same = [&](const Tensor& g, const Tensor& c) {
        ASSERT_EQ(g.sizes(), c.sizes());
        EXPECT_EQ(max_abs(g.to(cpu).to(tg::kFloat64) - c.to(tg::kFloat64)), 0.0);
      };
      same(xg.transpose(-2, -1).contiguous(), x.transpose(-2, -1).contiguous());
      same(xg.transpose(-2, -1).to(tg::kFloat32), x.transpose(-2, -1).to(tg::kFloat32));
      same(tg::where(mg, xg.transpose(-2, -1), yg), tg::where(m, x.transpose(-2, -1), y));
      same(tg::where(mg.transpose(-2, -1), yg, xg.transpose(-2, -1)),
           tg::where(m.transpose(-2, -1), y, x.transpose(-2, -1)));
      if (dt != tg::kBool) {
        same(xg + xg.transpose(-2, -1), x + x.transpose(-2, -1));
        same(xg.transpose(-2, -1) * yg.select(0, 0), x.transpose(-2, -1) * y.select(0, 0));  // broadcast too
      }
    }
  }
  // More batch entries than the tiled launch's blocks along z.
  tg::manual_seed(4);
  Tensor x = tg::randn({1100, 128, 128}, tg::TensorOptions().dtype(tg::kFloat32));
  Tensor got = (x.to(gpu) + x.to(gpu).transpose(-2, -1)).to(cpu);
  EXPECT_EQ(max_abs(got - (x + x.transpose(-2, -1))), 0.0);
}

}  // namespace
}  // namespace tgtest

// The CPU GEMM's row-block kernel of every instruction set this build and
// CPU run (tensor/cpu/gemm.h: chosen at run time), against a long-double
// reference: either memory order of A and B with padded leading
// dimensions, a row range of C (the rows outside it untouched), and sizes
// off the kernels' block widths.
namespace gemm_isa {

template <class T>
void check_kernel(const tg::cpu::GemmKernels& k, int64_t m, int64_t kk, int64_t n, bool a_rows, bool b_rows,
                  double tol) {
  auto fn = [&] {
    if constexpr (std::is_same_v<T, float>) return k.f32;
    else return k.f64;
  }();
  std::mt19937 gen(unsigned(m * 131 + kk * 7 + n));
  std::uniform_real_distribution<double> u(-1, 1);
  const int64_t pad = 3;
  // A: m x kk, B: kk x n, each in the order asked for with a padded leading dimension.
  tg::cpu::MatView av = a_rows ? tg::cpu::MatView{m, kk, kk + pad, 1} : tg::cpu::MatView{m, kk, 1, m + pad};
  tg::cpu::MatView bv = b_rows ? tg::cpu::MatView{kk, n, n + pad, 1} : tg::cpu::MatView{kk, n, 1, kk + pad};
  std::vector<T> a(size_t(a_rows ? m * (kk + pad) : kk * (m + pad))),
      b(size_t(b_rows ? kk * (n + pad) : n * (kk + pad)));
  for (T& v : a)
    v = T(u(gen));
  for (T& v : b)
    v = T(u(gen));
  const T sentinel = T(12345);
  std::vector<T> c(size_t(m * n), sentinel);
  const int64_t r0 = m / 3, r1 = m - (m > 2 ? 1 : 0);
  fn(a.data(), av, b.data(), bv, c.data(), r0, r1);
  double worst = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const T got = c[size_t(i * n + j)];
      if (i < r0 || i >= r1) {
        ASSERT_EQ(got, sentinel) << k.isa << ": row " << i << " outside [" << r0 << ", " << r1 << ") was written";
        continue;
      }
      long double want = 0;
      for (int64_t l = 0; l < kk; ++l)
        want += (long double)a[size_t(i * av.rs + l * av.cs)] * (long double)b[size_t(l * bv.rs + j * bv.cs)];
      worst = std::max(worst, double(std::fabs((long double)got - want)));
    }
  EXPECT_LE(worst, tol * double(kk)) << k.isa << " " << (std::is_same_v<T, float> ? "f32" : "f64") << " m=" << m
                                     << " k=" << kk << " n=" << n << " A " << (a_rows ? "rows" : "cols") << " B "
                                     << (b_rows ? "rows" : "cols");
}

}  // namespace gemm_isa

TEST(CpuGemm, EveryInstructionSetMatchesTheReference) {
  int ran = 0;
  std::string which;
  for (const tg::cpu::GemmKernels* k :
       {tg::cpu::gemm_kernels_generic(), tg::cpu::gemm_kernels_avx2(), tg::cpu::gemm_kernels_avx512()}) {
    if (!k || !tg::cpu::gemm_isa_supported(k->isa)) continue;
    ++ran;
    which += std::string(" ") + k->isa;
    for (auto [m, kk, n] : std::vector<std::array<int64_t, 3>>{{1, 1, 1}, {7, 13, 5}, {64, 512, 33}, {130, 17, 260}})
      for (bool ar : {true, false})
        for (bool br : {true, false}) {
          gemm_isa::check_kernel<float>(*k, m, kk, n, ar, br, 1e-6);
          gemm_isa::check_kernel<double>(*k, m, kk, n, ar, br, 1e-15);
        }
  }
  ASSERT_GE(ran, 1);
  std::printf("CPU GEMM kernels checked:%s; in use: %s\n", which.c_str(), tg::cpu::gemm_kernels().isa);
  // The one in use is the widest this CPU runs (TG_CPU_GEMM unset in the suite).
  if (!std::getenv("TG_CPU_GEMM")) {
    const char* widest = tg::cpu::gemm_isa_supported("avx512") ? "avx512"
                         : tg::cpu::gemm_isa_supported("avx2") ? "avx2"
                                                               : "generic";
    EXPECT_STREQ(tg::cpu::gemm_kernels().isa, widest);
  }
}

// Products with few rows and a long k (weight gradients g^T x) split k into
// blocks fixed by the shape: values against a long double loop, the
// operands transposed views as the backward's, and the same bits on 1, 3
// and 8 threads as on every worker (the split shapes, the first three, and
// row blocks cut at multiples of 16 rows: 255 rows, 31, 100, 200 and 300
// differed when blocks were cut anywhere).
TEST(CpuGemm, LongKProductsSplitKTheSameOnAnyWorkerCount) {
  using tgtest::Tensor;
  using tgtest::values;
  tg::manual_seed(21);
  const std::vector<std::array<int64_t, 3>> shapes{{64, 1024, 64}, {16, 5000, 32}, {48, 3000, 100},  {3, 777, 5},
                                                   {130, 2048, 8}, {64, 4096, 1},  {255, 600, 20},   {255, 1024, 64},
                                                   {31, 600, 16},  {100, 4096, 5}, {200, 1000, 200}, {1000, 300, 70},
                                                   {300, 257, 70}};
  for (size_t s = 0; s < shapes.size(); ++s)
    for (tg::ScalarType dt : {tg::kFloat32, tg::kFloat64}) {
      const auto [m, kk, n] = shapes[s];
      Tensor g = tg::randn({kk, m}, tg::TensorOptions().dtype(dt));
      Tensor x = tg::randn({kk, n}, tg::TensorOptions().dtype(dt));
      Tensor c = tg::mm(g.t(), x);
      Tensor c1;
      tbb::task_arena one(1);
      one.execute([&] { c1 = tg::mm(g.t(), x); });
      std::string what =
          std::string(tg::to_string(dt)) + " " + std::to_string(m) + "x" + std::to_string(kk) + "x" + std::to_string(n);
      EXPECT_TRUE(tg::equal(c, c1)) << what << ": one thread and every worker differ";
      for (int threads : {3, 8}) {  // the arena's concurrency sets the row blocks
        Tensor ct;
        tbb::task_arena arena(threads);
        arena.execute([&] { ct = tg::mm(g.t(), x); });
        EXPECT_TRUE(tg::equal(c, ct)) << what << ": " << threads << " threads and every worker differ";
      }
      std::vector<double> gv = values(g), xv = values(x), want(size_t(m * n));
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          long double s = 0;
          for (int64_t l = 0; l < kk; ++l)
            s += (long double)gv[size_t(l * m + i)] * (long double)xv[size_t(l * n + j)];
          want[size_t(i * n + j)] = double(s);
        }
      tgtest::expect_values(c, want, (dt == tg::kFloat32 ? 2e-6 : 1e-14) * double(kk), what);
    }
}

namespace vmath_isa {

// Inputs across each function's range, with the special values.
template <class T> std::vector<T> inputs() {
  std::vector<T> x;
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(-1, 1);
  for (int i = 0; i < 997; ++i)  // an odd count: every kernel's tail
    x.push_back(T(u(rng) * (i % 3 == 0 ? 30 : i % 3 == 1 ? 3 : 0.01)));
  const T inf = std::numeric_limits<T>::infinity();
  for (T v : {T(0), T(-0.0), inf, -inf, std::numeric_limits<T>::quiet_NaN(), T(-104.5), T(-750), T(89), T(710),
              std::numeric_limits<T>::min(), T(1e-30)})
    x.push_back(v);
  return x;
}

// got agrees with want: the same class (NaN, infinity of a sign) and within
// rel |want| + abs elsewhere (zero exactly where abs is 0).
template <class T> bool agrees(T got, T want, double rel, double abs = 0) {
  if (std::isnan(want) || std::isnan(got)) return std::isnan(want) && std::isnan(got);
  if (std::isinf(want) || std::isinf(got)) return got == want;
  if ((want == 0 || got == 0) && abs == 0) return got == want;
  return std::fabs(double(got) - double(want)) <= rel * std::fabs(double(want)) + abs;
}

}  // namespace vmath_isa

// Each instruction set's vector math against the generic build's (whose
// values the op tests check against the element math): the same special
// values, and a few ulps elsewhere.
TEST(CpuVectorMath, EveryInstructionSetAgreesWithTheGeneric) {
  using tg::cpu::VAct;
  using tg::cpu::VUnary;
  const tg::cpu::VMathKernels& ref = *tg::cpu::vmath_kernels_generic();
  int ran = 0;
  std::string which;
  const auto xf = vmath_isa::inputs<float>();
  const auto xd = vmath_isa::inputs<double>();
  const int64_t nf = int64_t(xf.size()), nd = int64_t(xd.size());
  for (const tg::cpu::VMathKernels* k :
       {tg::cpu::vmath_kernels_generic(), tg::cpu::vmath_kernels_avx2(), tg::cpu::vmath_kernels_avx512()}) {
    if (!k || !tg::cpu::cpu_has_isa(k->isa)) continue;
    ++ran;
    which += std::string(" ") + k->isa;
    for (int f = 0; f <= int(VUnary::Reciprocal); ++f) {
      std::vector<float> gf(xf.size()), wf(xf.size());
      std::vector<double> gd(xd.size()), wd(xd.size());
      k->unary_f32(VUnary(f), gf.data(), xf.data(), nf);
      ref.unary_f32(VUnary(f), wf.data(), xf.data(), nf);
      k->unary_f64(VUnary(f), gd.data(), xd.data(), nd);
      ref.unary_f64(VUnary(f), wd.data(), xd.data(), nd);
      for (int64_t i = 0; i < nf; ++i)
        EXPECT_TRUE(vmath_isa::agrees(gf[size_t(i)], wf[size_t(i)], 1e-5))
            << k->isa << " f32 function " << f << " at " << xf[size_t(i)] << ": " << gf[size_t(i)] << " against "
            << wf[size_t(i)];
      for (int64_t i = 0; i < nd; ++i)
        EXPECT_TRUE(vmath_isa::agrees(gd[size_t(i)], wd[size_t(i)], 1e-13))
            << k->isa << " f64 function " << f << " at " << xd[size_t(i)] << ": " << gd[size_t(i)] << " against "
            << wd[size_t(i)];
    }
    // g * act^(order)(x), g one value or one per element. The derivatives
    // are polynomials in tanh or the sigmoid, whose few ulps of difference
    // 1 - t^2 turns into absolute ones near saturation: 4e-6 (order + 1) |g|.
    std::vector<float> g(xf.size() + 1);  // g[1...]: not the first element
    for (size_t i = 0; i < g.size(); ++i)
      g[i] = float(i % 7) - 3.0f;
    for (VAct a : {VAct::Tanh, VAct::Sigmoid, VAct::Silu})
      for (int order = 0; order <= 4; ++order)
        for (int64_t step : {0, 1}) {
          std::vector<float> got(xf.size()), want(xf.size());
          k->act_grad_f32(a, order, got.data(), g.data() + 1, step, xf.data(), nf);
          ref.act_grad_f32(a, order, want.data(), g.data() + 1, step, xf.data(), nf);
          for (int64_t i = 0; i < nf; ++i)
            EXPECT_TRUE(vmath_isa::agrees(got[size_t(i)], want[size_t(i)], 2e-5,
                                          4e-6 * (order + 1) * std::fabs(double(g[size_t(step == 0 ? 1 : i + 1)]))))
                << k->isa << " activation " << int(a) << " order " << order << " g step " << step << " at "
                << xf[size_t(i)] << ": " << got[size_t(i)] << " against " << want[size_t(i)];
        }
  }
  ASSERT_GE(ran, 1);
  std::printf("CPU vector math checked:%s; in use: %s\n", which.c_str(), tg::cpu::vmath_kernels().isa);
  if (!std::getenv("TG_CPU_VMATH")) {
    const char* widest = tg::cpu::vmath_kernels_avx512() && tg::cpu::cpu_has_isa("avx512") ? "avx512"
                         : tg::cpu::vmath_kernels_avx2() && tg::cpu::cpu_has_isa("avx2")   ? "avx2"
                                                                                           : "generic";
    EXPECT_STREQ(tg::cpu::vmath_kernels().isa, widest);
  }
}

// float tanh from |x| = 0.625 up within 2 ulp of the double result in every
// instruction set (Eigen's rational form alone was 4.7 ulp off near 5.7,
// 6.5 in the baseline build).
TEST(CpuVectorMath, FloatTanhIsWithinTwoUlpAwayFromZero) {
  std::vector<float> x;
  for (float v = 0.625f; v < 12.0f; v += 0.0000613f) {
    x.push_back(v);
    x.push_back(-v);
  }
  int ran = 0;
  for (const tg::cpu::VMathKernels* k :
       {tg::cpu::vmath_kernels_generic(), tg::cpu::vmath_kernels_avx2(), tg::cpu::vmath_kernels_avx512()}) {
    if (!k || !tg::cpu::cpu_has_isa(k->isa)) continue;
    ++ran;
    std::vector<float> y(x.size());
    k->unary_f32(tg::cpu::VUnary::Tanh, y.data(), x.data(), int64_t(x.size()));
    double worst = 0, at = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double want = std::tanh(double(x[i]));
      const float wf = float(want);
      const double ulp = std::fabs(double(std::nextafter(wf, 0.0f)) - double(wf));
      const double e = std::fabs(double(y[i]) - want) / ulp;
      if (e > worst) worst = e, at = x[i];
    }
    EXPECT_LE(worst, 2.0) << k->isa << ": " << worst << " ulp at " << at;
  }
  ASSERT_GE(ran, 1);
}

// Subnormal inputs of log and rsqrt (Eigen's packets took them for the
// smallest normal number: log(denorm_min) gave -87.3, not -103.3) and silu's
// derivatives at +-inf (x u = inf * 0 gave NaN, not the limits 1, 0 and 0),
// in every instruction set and, for float64, through the element math.
TEST(CpuVectorMath, SubnormalsAndSaturatedSiluTakeTheirValues) {
  using tg::cpu::VAct;
  using tg::cpu::VUnary;
  auto subnormals = [](auto one) {
    using T = decltype(one);
    const T lo = std::numeric_limits<T>::min(), dmin = std::numeric_limits<T>::denorm_min();
    std::vector<T> x;
    for (int r = 0; r < 20; ++r)  // past a vector block, with a tail
      for (T v : {dmin, -dmin, lo / T(2), lo / T(1024), T(3) * dmin, lo})
        x.push_back(v);
    return x;
  };
  const auto xf = subnormals(1.0f);
  const auto xd = subnormals(1.0);
  int ran = 0;
  for (const tg::cpu::VMathKernels* k :
       {tg::cpu::vmath_kernels_generic(), tg::cpu::vmath_kernels_avx2(), tg::cpu::vmath_kernels_avx512()}) {
    if (!k || !tg::cpu::cpu_has_isa(k->isa)) continue;
    ++ran;
    for (VUnary f : {VUnary::Log, VUnary::Rsqrt}) {
      std::vector<float> of(xf.size());
      std::vector<double> od(xd.size());
      k->unary_f32(f, of.data(), xf.data(), int64_t(xf.size()));
      k->unary_f64(f, od.data(), xd.data(), int64_t(xd.size()));
      auto want = [f](auto v) { return f == VUnary::Log ? std::log(v) : decltype(v)(1) / std::sqrt(v); };
      for (size_t i = 0; i < xf.size(); ++i)
        EXPECT_TRUE(vmath_isa::agrees(of[i], want(xf[i]), 1e-6))
            << k->isa << " f32 function " << int(f) << " at " << xf[i] << ": " << of[i] << " against " << want(xf[i]);
      for (size_t i = 0; i < xd.size(); ++i)
        EXPECT_TRUE(vmath_isa::agrees(od[i], want(xd[i]), 1e-14))
            << k->isa << " f64 function " << int(f) << " at " << xd[i] << ": " << od[i] << " against " << want(xd[i]);
      std::vector<float> in_place = xf;  // out = x: an in-place op
      k->unary_f32(f, in_place.data(), in_place.data(), int64_t(in_place.size()));
      for (size_t i = 0; i < xf.size(); ++i)
        EXPECT_TRUE(vmath_isa::agrees(in_place[i], of[i], 0))  // the same value (NaN: NaN)
            << k->isa << " in place, function " << int(f) << " at " << xf[i] << ": " << in_place[i] << " against "
            << of[i];
    }
    // The sigmoid where it is subnormal (the AVX-512 build gave 0 for x in
    // [-88.7, -87.4]) and 0 where the element math's exp(-x) overflows; exp
    // where it is subnormal or underflows (the AVX-512 packets give 0 below
    // -87.3).
    std::vector<float> xs, ys, es;
    for (float v = -105.5f; v < -85.0f; v += 0.0137f)
      xs.push_back(v);
    ys.resize(xs.size());
    es.resize(xs.size());
    k->unary_f32(VUnary::Sigmoid, ys.data(), xs.data(), int64_t(xs.size()));
    k->unary_f32(VUnary::Exp, es.data(), xs.data(), int64_t(xs.size()));
    for (size_t i = 0; i < xs.size(); ++i) {
      const float want = 1.0f / (1.0f + std::exp(-xs[i])), want_exp = std::exp(xs[i]);
      EXPECT_TRUE(vmath_isa::agrees(ys[i], want, 1e-5, want == 0.0f ? 0.0 : 3e-45))
          << k->isa << " sigmoid at " << xs[i] << ": " << ys[i] << " against " << want;
      EXPECT_TRUE(vmath_isa::agrees(es[i], want_exp, 1e-5, want_exp == 0.0f ? 0.0 : 3e-45))
          << k->isa << " exp at " << xs[i] << ": " << es[i] << " against " << want_exp;
    }
    const float inf = std::numeric_limits<float>::infinity();
    std::vector<float> x;
    for (int r = 0; r < 20; ++r)
      for (float v : {inf, -inf, 200.0f, -200.0f})  // 200: the sigmoid saturates
        x.push_back(v);
    const float g = 2.0f;
    for (int order = 1; order <= 4; ++order) {
      std::vector<float> out(x.size());
      k->act_grad_f32(VAct::Silu, order, out.data(), &g, 0, x.data(), int64_t(x.size()));
      for (size_t i = 0; i < x.size(); ++i)
        EXPECT_EQ(out[i], order == 1 && x[i] > 0 ? g : 0.0f) << k->isa << " silu order " << order << " at " << x[i];
    }
  }
  ASSERT_GE(ran, 1);
  // float64 takes the element math: silu'(+-inf) = 1, 0; silu'' = 0.
  const double inf = std::numeric_limits<double>::infinity();
  tg::Tensor x = tg::tensor({inf, -inf, 800.0, -800.0}, {4}, tg::TensorOptions().dtype(tg::kFloat64)).requires_grad_();
  tg::Tensor d1 = tg::autograd::grad({tg::silu(x).sum()}, {x}, {}, std::nullopt, true)[0];
  tg::Tensor d2 = tg::autograd::grad({d1.sum()}, {x})[0];
  for (int64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(d1[i].item<double>(), i % 2 == 0 ? 1.0 : 0.0) << "silu' at " << x[i].item<double>();
    EXPECT_EQ(d2[i].item<double>(), 0.0) << "silu'' at " << x[i].item<double>();
  }
}
