// Deterministic mode (tg::use_deterministic_algorithms): the switch and its
// scope guard; on a GPU, every op whose result used to depend on the order
// of atomic additions (scatter_add and what is built on it, to_dense of an
// uncoalesced tensor, sparse @ dense) gives bitwise equal results run after
// run, equal to the CPU's up to rounding, and the Hessian main job in
// deterministic mode is bitwise reproducible.
#include <cstring>

#include "reference.h"

#include "tensor/op_util.h"

namespace {

using tg::Device;
using tg::IntList;
using tg::kFloat32;
using tg::kFloat64;
using tg::ScalarType;
using tg::Tensor;
namespace ag = tg::autograd;

const Device kGpu(tg::kCUDA, 0);
const Device kCpu(tg::kCPU);

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  Tensor x = tg::to_dense(a).to(kCpu).contiguous(), y = tg::to_dense(b).to(kCpu).contiguous();
  if (x.sizes() != y.sizes() || x.dtype() != y.dtype()) return false;
  return std::memcmp(x.data_ptr(), y.data_ptr(), size_t(x.numel()) * tg::element_size(x.dtype())) == 0;
}

TEST(Deterministic, SwitchAndScopeGuard) {
  ASSERT_FALSE(tg::are_deterministic_algorithms_enabled());
  {
    tg::DeterministicGuard on;
    EXPECT_TRUE(tg::are_deterministic_algorithms_enabled());
    {
      tg::DeterministicGuard off(false);
      EXPECT_FALSE(tg::are_deterministic_algorithms_enabled());
    }
    EXPECT_TRUE(tg::are_deterministic_algorithms_enabled());
  }
  EXPECT_FALSE(tg::are_deterministic_algorithms_enabled());
  tg::use_deterministic_algorithms(true);
  EXPECT_TRUE(tg::are_deterministic_algorithms_enabled());
  tg::use_deterministic_algorithms(false);
  // On the CPU the mode changes nothing (the kernels are ordered already):
  // scatter_add with many collisions equals a host loop exactly.
  tg::DeterministicGuard on;
  tg::manual_seed(3);
  Tensor src = tg::randn({4000, 3}, tg::kFloat64);
  Tensor index = (tg::rand({4000, 3}, tg::kFloat64) * 7).to(tg::kInt64);
  Tensor out = tg::scatter_add(tg::zeros({7, 3}, tg::kFloat64), 0, index, src);
  std::vector<double> ref(21, 0.0), s = src.to_vector<double>();
  std::vector<int64_t> ix = index.to_vector<int64_t>();
  for (size_t k = 0; k < s.size(); ++k)
    ref[size_t(ix[k] * 3 + int64_t(k % 3))] += s[k];
  tgtest::expect_values(out, ref, 1e-12, "scatter_add in deterministic mode");
}

// The ordered scatter-add the GPU uses in deterministic mode, run on the CPU
// against a host loop: every dim, strided and broadcast operands, an index
// smaller than src, Int64 values.
TEST(Deterministic, SortedScatterAddMatchesAHostLoop) {
  tg::manual_seed(4);
  for (int64_t dim = 0; dim < 3; ++dim) {
    IntList self = {4, 5, 6}, isz = {3, 4, 5};
    isz[size_t(dim)] = 9;  // several additions per target along dim
    IntList ssz = isz;
    ssz[size_t(dim)] = 9;
    // a strided src (a slice of a bigger tensor).
    Tensor s2 = tg::randn({ssz[0] + 1, ssz[1] + 1, ssz[2] + 1}, tg::kFloat64).slice(0, 1).slice(1, 1).slice(2, 1);
    Tensor index = (tg::rand(isz, tg::kFloat64) * double(self[size_t(dim)])).to(tg::kInt64);
    Tensor out = tg::zeros(self, tg::kFloat64);
    tg::detail::scatter_add_sorted(out, dim, index, s2);
    std::vector<double> ref(size_t(tg::shape_numel(self)), 0.0);
    std::vector<int64_t> ix = index.to_vector<int64_t>();
    std::vector<double> sv = tgtest::values(s2);
    for (int64_t a = 0; a < isz[0]; ++a)
      for (int64_t b = 0; b < isz[1]; ++b)
        for (int64_t c = 0; c < isz[2]; ++c) {
          int64_t k = (a * isz[1] + b) * isz[2] + c;
          int64_t t[3] = {a, b, c};
          t[dim] = ix[size_t(k)];
          ref[size_t((t[0] * self[1] + t[1]) * self[2] + t[2])] += sv[size_t((a * ssz[1] + b) * ssz[2] + c)];
        }
    tgtest::expect_values(out, ref, 1e-12, "sorted scatter_add along dim " + std::to_string(dim));
  }
  Tensor oi = tg::zeros({3}, tg::kInt64);
  tg::detail::scatter_add_sorted(oi, 0, tg::tensor({2, 0, 2, 2}, {4}, tg::TensorOptions().dtype(tg::kInt64)),
                                 tg::tensor({5, 7, 11, 13}, {4}, tg::TensorOptions().dtype(tg::kInt64)));
  EXPECT_EQ(oi.to_vector<int64_t>(), (std::vector<int64_t>{7, 0, 29}));
}

// Each case runs on the GPU and returns what must be reproducible (a result
// or a gradient); float32 with many additions per target, so that atomics
// would make the last bits vary.
struct Case {
  const char* name;
  std::function<Tensor(const Device&, ScalarType)> run;
};

std::vector<Case> cases() {
  const int64_t n = 1 << 18, targets = 64;
  auto data = [=](const Device& d, ScalarType t) {
    tg::manual_seed(17);
    Tensor src = tg::randn({n, 4}).to(t).to(d);
    Tensor rows = (tg::rand({n}) * double(targets)).to(tg::kInt64).to(d);
    return std::make_pair(src, rows);
  };
  // Random Int64 in [0, k), from the global generator (seeded by data()).
  auto below = [=](int64_t k, const Device& d) { return (tg::rand({n}) * double(k)).to(tg::kInt64).to(d); };
  return {
      {"scatter_add",
       [=](const Device& d, ScalarType t) {
         auto [src, rows] = data(d, t);
         Tensor index = rows.view({n, 1}).expand({n, 4}).contiguous();
         return tg::scatter_add(tg::zeros({targets, 4}, tg::TensorOptions().device(d).dtype(t)), 0, index, src);
       }},
      {"scatter_add dim 1, strided src",
       [=](const Device& d, ScalarType t) {
         auto [src, rows] = data(d, t);
         Tensor index = below(3, d).view({1, n}).expand({4, n}).contiguous();
         return tg::scatter_add(tg::zeros({4, 3}, tg::TensorOptions().device(d).dtype(t)), 1, index, src.t());
       }},
      {"index_select backward",
       [=](const Device& d, ScalarType t) {
         auto [src, rows] = data(d, t);
         Tensor w = tg::randn({targets, 4}).to(t).to(d).requires_grad_(true);
         return ag::grad({(tg::index_select(w, 0, rows) * src).sum()}, {w})[0];
       }},
      {"gather backward",
       [=](const Device& d, ScalarType t) {
         auto [src, rows] = data(d, t);
         Tensor w = tg::randn({targets, 4}).to(t).to(d).requires_grad_(true);
         Tensor index = rows.view({n, 1}).expand({n, 4}).contiguous();
         return ag::grad({(tg::gather(w, 0, index) * src).sum()}, {w})[0];
       }},
      {"embedding backward (dense)",
       [=](const Device& d, ScalarType t) {
         auto [src, rows] = data(d, t);
         Tensor w = tg::randn({targets, 4}).to(t).to(d).requires_grad_(true);
         return ag::grad({(tg::embedding(w, rows, false) * src).sum()}, {w})[0];
       }},
      {"to_dense of an uncoalesced tensor",
       [=](const Device& d, ScalarType t) {
         auto [src, rows] = data(d, t);
         Tensor ind = tg::stack({rows, below(5, d)}).contiguous();
         return tg::sparse_coo_tensor(ind, src.select(1, 0).contiguous(), {targets, 5}).to_dense();
       }},
      {"sparse @ dense and its gradients",
       [=](const Device& d, ScalarType t) {
         auto [src, rows] = data(d, t);
         Tensor ind = tg::stack({below(16, d), rows}).contiguous();
         Tensor v = src.select(1, 1).contiguous().requires_grad_(true);
         Tensor D = tg::randn({targets, 8}).to(t).to(d).requires_grad_(true);
         Tensor y = tg::mm(tg::sparse_coo_tensor(ind, v, {16, targets}), D);
         auto g = ag::grad({(y * y).sum()}, {v, D});
         return tg::cat({y.flatten(), g[0], g[1].flatten()});
       }},
  };
}

TEST(DeterministicGpu, EachOpRunTwiceIsBitwiseEqualAndMatchesTheCpu) {
  REQUIRE_GPU();
  tg::DeterministicGuard on;
  // Bitwise reproducible in float32 and float64; the values in float64
  // against the CPU's. (Some of these sums cancel: sparse @ dense's weight
  // gradient sums ~4096 terms of magnitude ~100 to ~8.6, so float32 results
  // are ~5e-4 from the truth on either device, and comparing float32 with
  // float32 tested the rounding, not the kernel.)
  for (const Case& c : cases()) {
    for (ScalarType t : {kFloat32, kFloat64}) {
      Tensor a = c.run(kGpu, t), b = c.run(kGpu, t);
      EXPECT_EQ(a.dtype(), t) << c.name;
      EXPECT_TRUE(bitwise_equal(a, b)) << c.name << ": two runs in deterministic mode differ (" << t << ")";
      if (t != kFloat64) continue;
      Tensor ref;
      {
        tg::DeterministicGuard off(false);
        ref = c.run(kCpu, t);
      }
      tgtest::expect_values(a.to(kCpu), tgtest::values(ref), 1e-9, c.name);
    }
  }
}

TEST(DeterministicGpu, HessianMainJobIsBitwiseReproducible) {
  REQUIRE_GPU();
  tg::DeterministicGuard on;
  tg::manual_seed(99);
  const auto o = tg::TensorOptions().device(kGpu);
  std::vector<Tensor> w = {tg::randn({256, 2}, o) / 2.0, tg::randn({256, 256}, o) / 16.0,
                           tg::randn({3, 256}, o) / 16.0};
  std::vector<Tensor> b = {tg::randn({256}, o), tg::randn({256}, o), tg::randn({3}, o)};
  for (auto& t : w)
    t.requires_grad_(true);
  Tensor x = tg::rand({2000, 2}, o) * 2 - 1;
  auto net = [&](const Tensor& in) {
    Tensor h = tg::silu(tg::linear(in, w[0], b[0]));
    h = tg::silu(tg::linear(h, w[1], b[1]));
    return tg::linear(h, w[2], b[2]);
  };
  auto job = [&](ag::HessianStrategy s) {
    Tensor H = ag::per_sample_hessian(net, x, s, true);
    auto g = ag::grad({tg::square(H).sum()}, w);  // hess+bwd
    return tg::cat({H.flatten(), g[0].flatten(), g[1].flatten(), g[2].flatten()});
  };
  for (auto s : {ag::HessianStrategy::Rows, ag::HessianStrategy::BatchedCotangents}) {
    Tensor first = job(s), second = job(s);
    EXPECT_TRUE(bitwise_equal(first, second)) << "per_sample_hessian strategy " << int(s);
  }
  auto taylor = [&] {
    auto t = ag::mlp_taylor(w, b, tg::Activation::Silu, x);
    auto g = ag::grad({tg::square(t.hessian).sum()}, w);
    return tg::cat({t.hessian.flatten(), g[0].flatten(), g[1].flatten(), g[2].flatten()});
  };
  EXPECT_TRUE(bitwise_equal(taylor(), taylor())) << "mlp_taylor";
}

}  // namespace
