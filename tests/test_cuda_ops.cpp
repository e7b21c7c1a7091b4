// CUDA kernels against the CPU ones: every elementwise op in f32 and f64 on
// contiguous, transposed, sliced and broadcast operands; every dtype pair of
// copy; fill; device round trips. Skips without a GPU.
#include <array>
#include <limits>

#include "reference.h"

namespace {

using tg::Tensor;

const tg::Device kGpu(tg::kCUDA, 0);

// CPU operands in four layouts of shape [5, 7].
std::vector<std::pair<const char*, Tensor>> layouts(tg::ScalarType dt, uint64_t seed, double lo, double hi) {
  tg::manual_seed(seed);
  auto r = [&](tg::IntList s) { return tg::rand(s, tg::TensorOptions().dtype(tg::kFloat64)) * (hi - lo) + lo; };
  return {{"contiguous", r({5, 7}).to(dt)},
          {"transposed", r({7, 5}).to(dt).t()},
          {"sliced", r({5, 14}).to(dt).slice(1, 0, std::nullopt, 2)},
          {"broadcast", r({1, 7}).to(dt).expand({5, 7})}};
}

void expect_close(const Tensor& gpu, const Tensor& cpu, double tol, const std::string& what) {
  ASSERT_TRUE(gpu.is_cuda()) << what;
  Tensor back = gpu.to(tg::Device(tg::kCPU));
  ASSERT_EQ(back.sizes(), cpu.sizes()) << what;
  ASSERT_EQ(back.dtype(), cpu.dtype()) << what;
  EXPECT_TRUE(tg::allclose(back, cpu, tol, tol, true)) << what << "\ngpu " << back << "\ncpu " << cpu;
}

TEST(CudaGpuOps, RoundTripsEveryDtype) {
  REQUIRE_GPU();
  for (auto dt : {tg::kFloat32, tg::kFloat64, tg::kBFloat16, tg::kFloat16, tg::kInt64, tg::kBool}) {
    Tensor x = (tg::arange(0, 24, 1, tg::TensorOptions().dtype(tg::kFloat64)) - 7.0).to(dt).view({2, 3, 4});
    Tensor g = x.to(kGpu);
    EXPECT_TRUE(g.is_cuda());
    EXPECT_EQ(g.device(), kGpu);
    EXPECT_TRUE(tg::equal(g.to(tg::Device(tg::kCPU)), x)) << dt;
    EXPECT_TRUE(tg::equal(x.transpose(0, 2).contiguous(), g.transpose(0, 2).contiguous().to(tg::Device(tg::kCPU))))
        << dt;
  }
}

// silu's derivatives where the sigmoid saturates, also at +-inf (the
// element math shared with the CPU: s for the first, 0 from the second, not
// NaN), and the order-5 composite there: the CPU's values on the GPU.
TEST(CudaGpuOps, SiluDerivativesWhereTheSigmoidSaturatesMatchTheCpu) {
  REQUIRE_GPU();
  const double inf = std::numeric_limits<double>::infinity();
  for (auto dt : {tg::kFloat32, tg::kFloat64}) {
    Tensor x = tg::tensor({inf, -inf, 1e3, -1e3, 40.0, -40.0, 0.5}, {7}, tg::kFloat64).to(dt);
    for (int k = 1; k <= 5; ++k) {
      Tensor cpu = tg::activation_grad(tg::ones_like(x), x, tg::Activation::Silu, k);
      Tensor gpu = tg::activation_grad(tg::ones_like(x).to(kGpu), x.to(kGpu), tg::Activation::Silu, k);
      EXPECT_FALSE(tg::ne(cpu, cpu).any().item<bool>()) << dt << " order " << k << ": " << cpu;
      EXPECT_TRUE(tg::allclose(gpu.to(tg::Device(tg::kCPU)), cpu, 1e-6, 1e-30))
          << dt << " order " << k << ": gpu " << gpu << " cpu " << cpu;
    }
  }
}

// The comparison and logical operators and ops on the GPU: the CPU's Bool
// results, tensor with tensor (broadcast, strided) and with a scalar.
TEST(CudaGpuOps, ComparisonOperatorsMatchTheCpu) {
  REQUIRE_GPU();
  const tg::Device cpu(tg::kCPU);
  Tensor a = tg::tensor({1, 2, 3, 4, 5, 6}, {2, 3}, tg::kFloat64), b = tg::tensor({2, 5, 3}, {3}, tg::kInt64);
  Tensor ga = a.to(kGpu), gb = b.to(kGpu);
  const std::vector<std::pair<Tensor, Tensor>> pairs = {
      {ga < gb, a < b},          {ga <= gb, a <= b},
      {ga > gb, a > b},          {ga >= gb, a >= b},
      {ga == gb, a == b},        {ga != gb, a != b},
      {ga > 3.5, a > 3.5},       {2 >= ga, 2 >= a},
      {ga.t() != 4, a.t() != 4}, {gb.view({3, 1}) < ga.t(), b.view({3, 1}) < a.t()}};
  std::vector<std::pair<Tensor, Tensor>> all = pairs;
  Tensor gp = ga > 2.5, p = a > 2.5, gq = gb > 2, q = b > 2;
  for (auto& c : std::vector<std::pair<Tensor, Tensor>>{
           {tg::logical_and(ga, gb - 3), tg::logical_and(a, b - 3)},
           {tg::logical_or(ga - 1, gb - 2), tg::logical_or(a - 1, b - 2)},
           {tg::logical_xor(ga.t(), gb.view({3, 1})), tg::logical_xor(a.t(), b.view({3, 1}))},
           {!(ga - 2), !(a - 2)},
           {gp & gq, p & q},
           {gp | gq, p | q},
           {gp ^ gq, p ^ q},
           {~gp, ~p}})
    all.push_back(c);
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_TRUE(all[i].first.is_cuda()) << "case " << i;
    EXPECT_EQ(all[i].first.dtype(), tg::kBool) << "case " << i;
    EXPECT_TRUE(tg::equal(all[i].first.to(cpu), all[i].second)) << "case " << i;
  }
}

TEST(CudaGpuOps, CopyConvertsEveryDtypePair) {
  REQUIRE_GPU();
  std::vector<tg::ScalarType> all{tg::kFloat32, tg::kFloat64, tg::kBFloat16, tg::kFloat16, tg::kInt64, tg::kBool};
  Tensor base =
      tg::tensor({-3.75, -1, 0, 0.5, 1, 2.25, 100.125, 65504}, {2, 4}, tg::TensorOptions().dtype(tg::kFloat64));
  for (auto from : all)
    for (auto to : all) {
      Tensor cpu_src = base.to(from);
      Tensor expect = cpu_src.t().to(to);  // CPU conversion of a strided view
      Tensor got = cpu_src.to(kGpu).t().to(to);
      EXPECT_TRUE(tg::equal(got.to(tg::Device(tg::kCPU)), expect)) << from << " -> " << to;
    }
}

// Float to Int64 is defined for every value and the same on both devices:
// truncation, saturation at the limits, NaN to INT64_MIN; a number an integer tensor
// cannot hold is refused before any kernel runs.
TEST(CudaGpuOps, FloatToIntConversionSaturatesAsOnTheCpu) {
  REQUIRE_GPU();
  Tensor f = tg::tensor({std::nan(""), double(INFINITY), -double(INFINITY), 1e30, -1e30, 3.9, -3.9}, {7}, tg::kFloat64);
  for (tg::ScalarType src : {tg::kFloat64, tg::kFloat32}) {
    Tensor cpu = f.to(src).to(tg::kInt64);
    Tensor gpu = f.to(src).to(kGpu).to(tg::kInt64).to(tg::Device(tg::kCPU));
    EXPECT_EQ(gpu.to_vector<int64_t>(), cpu.to_vector<int64_t>()) << src;
    EXPECT_EQ(gpu.to_vector<int64_t>(),
              (std::vector<int64_t>{INT64_MIN, INT64_MAX, INT64_MIN, INT64_MAX, INT64_MIN, 3, -3}));
  }
  Tensor t = tg::zeros({3}, tg::TensorOptions().dtype(tg::kInt64).device(kGpu));
  EXPECT_ERROR_CONTAINS(t.fill_(1e30), "fill_: the value");
  EXPECT_ERROR_CONTAINS(tg::full({2}, std::nan(""), tg::TensorOptions().dtype(tg::kInt64).device(kGpu)),
                        "full: the value");
  EXPECT_EQ(t.to(tg::Device(tg::kCPU)).to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 0}));
}

TEST(CudaGpuOps, ClampWithANaNBoundIsNaNAsOnTheCpu) {
  REQUIRE_GPU();
  Tensor f = tg::tensor({0, 5, -3, std::nan("")}, {4}, tg::kFloat32).to(kGpu);
  for (Tensor r : {tg::clamp(f, std::nan(""), std::nullopt), tg::clamp_max(f, std::nan(""))})
    for (double v : tgtest::values(r.to(tg::Device(tg::kCPU))))
      EXPECT_TRUE(std::isnan(v));
  EXPECT_TRUE(tg::equal(tg::clamp(f, -1.0, 1.0).to(tg::Device(tg::kCPU)).narrow(0, 0, 3), tg::tensor({0, 1, -1}, {3})));
}

TEST(CudaGpuOps, FillAndFactories) {
  REQUIRE_GPU();
  for (auto dt : {tg::kFloat32, tg::kFloat64, tg::kBFloat16, tg::kFloat16, tg::kInt64, tg::kBool}) {
    Tensor g = tg::full({3, 5}, 1.5, tg::TensorOptions().dtype(dt).device(kGpu));
    EXPECT_TRUE(tg::equal(g.to(tg::Device(tg::kCPU)), tg::full({3, 5}, 1.5, tg::TensorOptions().dtype(dt)))) << dt;
  }
  Tensor e = tg::eye(4, tg::TensorOptions().device(kGpu));
  EXPECT_TRUE(tg::equal(e.to(tg::Device(tg::kCPU)), tg::eye(4)));
  Tensor z = tg::zeros({6}, tg::TensorOptions().device(kGpu));
  z.narrow(0, 2, 3).fill_(7);  // strided in-place fill
  EXPECT_EQ(z.to(tg::Device(tg::kCPU)).to_vector<float>(), (std::vector<float>{0, 0, 7, 7, 7, 0}));
}

TEST(CudaGpuOps, UnaryOpsMatchCpu) {
  REQUIRE_GPU();
  struct Case {
    const char* name;
    std::function<Tensor(const Tensor&)> f;
    double lo, hi;
  };
  std::vector<Case> cases = {
      {"neg", [](const Tensor& x) { return tg::neg(x); }, -3, 3},
      {"exp", [](const Tensor& x) { return tg::exp(x); }, -3, 3},
      {"log", [](const Tensor& x) { return tg::log(x); }, 0.1, 3},
      {"sin", [](const Tensor& x) { return tg::sin(x); }, -3, 3},
      {"cos", [](const Tensor& x) { return tg::cos(x); }, -3, 3},
      {"tanh", [](const Tensor& x) { return tg::tanh(x); }, -3, 3},
      {"sigmoid", [](const Tensor& x) { return tg::sigmoid(x); }, -3, 3},
      {"relu", [](const Tensor& x) { return tg::relu(x); }, -3, 3},
      {"silu", [](const Tensor& x) { return tg::silu(x); }, -3, 3},
      {"erf", [](const Tensor& x) { return tg::erf(x); }, -3, 3},
      {"gelu", [](const Tensor& x) { return tg::gelu(x); }, -3, 3},
      {"gelu_tanh", [](const Tensor& x) { return tg::gelu(x, "tanh"); }, -3, 3},
      {"softplus", [](const Tensor& x) { return tg::softplus(x, 2.0, 1.0); }, -3, 3},
      {"sqrt", [](const Tensor& x) { return tg::sqrt(x); }, 0.1, 3},
      {"rsqrt", [](const Tensor& x) { return tg::rsqrt(x); }, 0.1, 3},
      {"abs", [](const Tensor& x) { return tg::abs(x); }, -3, 3},
      {"sign", [](const Tensor& x) { return tg::sign(x); }, -3, 3},
      {"square", [](const Tensor& x) { return tg::square(x); }, -3, 3},
      {"reciprocal", [](const Tensor& x) { return tg::reciprocal(x); }, 0.1, 3},
      {"asin", [](const Tensor& x) { return tg::asin(x); }, -0.9, 0.9},
      {"acos", [](const Tensor& x) { return tg::acos(x); }, -0.9, 0.9},
      {"atan", [](const Tensor& x) { return tg::atan(x); }, -3, 3},
      {"sinh", [](const Tensor& x) { return tg::sinh(x); }, -3, 3},
      {"cosh", [](const Tensor& x) { return tg::cosh(x); }, -3, 3},
      {"asinh", [](const Tensor& x) { return tg::asinh(x); }, -3, 3},
      {"acosh", [](const Tensor& x) { return tg::acosh(x); }, 1.1, 3},
      {"atanh", [](const Tensor& x) { return tg::atanh(x); }, -0.9, 0.9},
      {"log2", [](const Tensor& x) { return tg::log2(x); }, 0.1, 3},
      {"log10", [](const Tensor& x) { return tg::log10(x); }, 0.1, 3},
      {"exp2", [](const Tensor& x) { return tg::exp2(x); }, -3, 3},
      {"floor", [](const Tensor& x) { return tg::floor(x); }, -3, 3},
      {"ceil", [](const Tensor& x) { return tg::ceil(x); }, -3, 3},
      {"round", [](const Tensor& x) { return tg::round(x); }, -3, 3},
      {"trunc", [](const Tensor& x) { return tg::trunc(x); }, -3, 3},
      {"frac", [](const Tensor& x) { return tg::frac(x); }, -3, 3},
      {"clamp", [](const Tensor& x) { return tg::clamp(x, -0.5, 0.7); }, -3, 3},
      {"pow_scalar", [](const Tensor& x) { return tg::pow(x, 2.5); }, 0.1, 3},
      {"mul_scalar", [](const Tensor& x) { return x * 1.5 + 2.0; }, -3, 3},
  };
  for (auto dt : {tg::kFloat32, tg::kFloat64}) {
    double tol = dt == tg::kFloat32 ? 2e-6 : 1e-13;
    for (const auto& c : cases)
      for (auto& [layout, x] : layouts(dt, 1, c.lo, c.hi))
        expect_close(c.f(x.to(kGpu)), c.f(x), tol, std::string(c.name) + " " + layout);
  }
  // Integer ops stay integers.
  Tensor i = tg::tensor({-3, -1, 0, 2, 5}, {}, tg::TensorOptions().dtype(tg::kInt64));
  EXPECT_TRUE(tg::equal(tg::abs(i.to(kGpu)).to(tg::Device(tg::kCPU)), tg::abs(i)));
  EXPECT_TRUE(tg::equal(tg::clamp(i.to(kGpu), -1, 3).to(tg::Device(tg::kCPU)), tg::clamp(i, -1, 3)));
  EXPECT_TRUE(tg::equal(tg::floor(i.to(kGpu)).to(tg::Device(tg::kCPU)), i));
}

TEST(CudaGpuOps, BinaryCompareAndWhereMatchCpu) {
  REQUIRE_GPU();
  std::vector<std::pair<const char*, std::function<Tensor(const Tensor&, const Tensor&)>>> ops = {
      {"add", [](const Tensor& a, const Tensor& b) { return tg::add(a, b, 2.0); }},
      {"sub", [](const Tensor& a, const Tensor& b) { return a - b; }},
      {"mul", [](const Tensor& a, const Tensor& b) { return a * b; }},
      {"div", [](const Tensor& a, const Tensor& b) { return a / b; }},
      {"pow", [](const Tensor& a, const Tensor& b) { return tg::pow(tg::abs(a), b); }},
      {"maximum", [](const Tensor& a, const Tensor& b) { return tg::maximum(a, b); }},
      {"minimum", [](const Tensor& a, const Tensor& b) { return tg::minimum(a, b); }},
      {"atan2", [](const Tensor& a, const Tensor& b) { return tg::atan2(a, b); }},
      {"hypot", [](const Tensor& a, const Tensor& b) { return tg::hypot(a, b); }},
      {"fmod", [](const Tensor& a, const Tensor& b) { return tg::fmod(a * 3.0, b); }},
      {"remainder", [](const Tensor& a, const Tensor& b) { return tg::remainder(a * 3.0, b); }},
      {"lt", [](const Tensor& a, const Tensor& b) { return tg::lt(a, b); }},
      {"ge", [](const Tensor& a, const Tensor& b) { return tg::ge(a, b); }},
      {"eq", [](const Tensor& a, const Tensor& b) { return tg::eq(a, tg::maximum(a, b)); }},
      {"where", [](const Tensor& a, const Tensor& b) { return tg::where(tg::gt(a, 0.0), a, b); }},
  };
  for (auto dt : {tg::kFloat32, tg::kFloat64}) {
    double tol = dt == tg::kFloat32 ? 2e-6 : 1e-13;
    auto as = layouts(dt, 2, -2, 2), bs = layouts(dt, 3, 0.5, 2);
    for (const auto& [name, f] : ops)
      for (size_t i = 0; i < as.size(); ++i) {
        const Tensor& a = as[i].second;
        const Tensor& b = bs[(i + 1) % bs.size()].second;
        expect_close(f(a.to(kGpu), b.to(kGpu)), f(a, b), tol,
                     std::string(name) + " " + as[i].first + "/" + bs[(i + 1) % bs.size()].first);
        Tensor row = b.select(0, 0);  // NumPy broadcasting of a [7] operand
        expect_close(f(a.to(kGpu), row.to(kGpu)), f(a, row), tol, std::string(name) + " broadcast row");
      }
  }
  // Mixed dtypes promote, in place works, NaN propagates like the CPU.
  Tensor a = tg::tensor({1, 2, 3}, {}, tg::TensorOptions().dtype(tg::kInt64));
  Tensor b = tg::tensor({0.5, NAN, 2}, {});
  expect_close(tg::maximum(a.to(kGpu), b.to(kGpu)), tg::maximum(a, b), 0, "maximum with NaN");
  Tensor g = b.to(kGpu);
  g.add_(a.to(kGpu));
  g.mul_(2.0);
  Tensor c = b.clone();
  c.add_(a);
  c.mul_(2.0);
  expect_close(g, c, 0, "in place");
}

TEST(CudaGpuOps, ReductionsMatchCpu) {
  REQUIRE_GPU();
  for (auto dt : {tg::kFloat32, tg::kFloat64}) {
    double tol = dt == tg::kFloat32 ? 1e-5 : 1e-12;
    for (auto& [layout, x] : layouts(dt, 4, -2, 2)) {
      Tensor g = x.to(kGpu);
      std::string w = std::string(layout) + " " + tg::to_string(dt);
      expect_close(tg::sum(g), tg::sum(x), tol, "sum " + w);
      expect_close(tg::sum(g, {0}), tg::sum(x, {0}), tol, "sum0 " + w);
      expect_close(tg::sum(g, {1}, true), tg::sum(x, {1}, true), tol, "sum1 " + w);
      expect_close(tg::mean(g, {-1}), tg::mean(x, {-1}), tol, "mean " + w);
      expect_close(tg::amax(g, {0}), tg::amax(x, {0}), 0, "amax " + w);
      expect_close(tg::amin(g), tg::amin(x), 0, "amin " + w);
    }
    // Large reductions take the split-across-blocks path; 3-D with mixed dims.
    tg::manual_seed(5);
    Tensor big = tg::randn({3, 200000}, tg::TensorOptions().dtype(dt));
    expect_close(tg::sum(big.to(kGpu), {1}), tg::sum(big, {1}), dt == tg::kFloat32 ? 1e-4 : 1e-10, "big sum");
    expect_close(tg::amax(big.to(kGpu)), tg::amax(big), 0, "big amax");
    // Rows read 16 bytes per load where every row start is aligned: row
    // lengths that are and are not a multiple of the pack, a tail past the
    // last whole pack, a view starting one element in (unaligned).
    for (int64_t len : {70000, 70002, 70003}) {
      Tensor rows = tg::randn({32, len}, tg::TensorOptions().dtype(dt));
      const std::string w = std::string(tg::to_string(dt)) + " rows of " + std::to_string(len);
      expect_close(tg::sum(rows.to(kGpu), {1}), tg::sum(rows, {1}), dt == tg::kFloat32 ? 1e-4 : 1e-10, "sum " + w);
      expect_close(tg::amin(rows.to(kGpu), {1}), tg::amin(rows, {1}), 0, "amin " + w);
      Tensor shifted = rows.to(kGpu).narrow(1, 1, len - 1);
      expect_close(tg::sum(shifted, {1}), tg::sum(rows.narrow(1, 1, len - 1), {1}), dt == tg::kFloat32 ? 1e-4 : 1e-10,
                   "sum shifted " + w);
      Tensor cut = rows.to(kGpu).narrow(1, 0, len - 1);  // aligned rows, a tail
      expect_close(tg::sum(cut, {1}), tg::sum(rows.narrow(1, 0, len - 1), {1}), dt == tg::kFloat32 ? 1e-4 : 1e-10,
                   "sum cut " + w);
    }
    Tensor cube = tg::randn({4, 300, 5}, tg::TensorOptions().dtype(dt)).transpose(0, 2);
    expect_close(tg::sum(cube.to(kGpu), {0, 2}), tg::sum(cube, {0, 2}), tol * 10, "cube sum");
    // Outputs contiguous in x (a bias gradient: [B, W] over B) take the
    // coalesced column kernel: single pass, split, widths not a multiple of
    // 32, and a kept middle dim under reduced outer and inner ones.
    for (auto [rows, width] : {std::pair<int64_t, int64_t>{8192, 64}, {130, 7}, {100000, 3}, {2000, 1000}, {129, 33}}) {
      std::string w =
          tg::to_string(dt) + std::string(" columns [") + std::to_string(rows) + ", " + std::to_string(width) + "]";
      Tensor c = tg::randn({rows, width}, tg::TensorOptions().dtype(dt));
      Tensor cg = c.to(kGpu);
      expect_close(tg::sum(cg, {0}), tg::sum(c, {0}), dt == tg::kFloat32 ? 1e-4 : 1e-10, "sum " + w);
      expect_close(tg::amax(cg, {0}), tg::amax(c, {0}), 0, "amax " + w);
      expect_close(tg::amin(cg, {0}, true), tg::amin(c, {0}, true), 0, "amin " + w);
    }
    Tensor slab = tg::randn({6, 50, 40}, tg::TensorOptions().dtype(dt));
    expect_close(tg::sum(slab.to(kGpu), {0, 2}), tg::sum(slab, {0, 2}), tol * 10, "slab sum");
    expect_close(tg::sum(slab.to(kGpu), {0}), tg::sum(slab, {0}), tol * 10, "slab sum0");
  }
  // A NaN in a column propagates through the column kernel's max.
  Tensor colnan = tg::zeros({300, 40});
  colnan.select(0, 250).narrow(0, 3, 1).fill_(NAN);
  Tensor mx = tg::amax(colnan.to(kGpu), {0}).to(tg::Device(tg::kCPU));
  EXPECT_TRUE(std::isnan(mx.select(0, 3).item<float>()));
  EXPECT_EQ(mx.select(0, 4).item<float>(), 0.0f);
  Tensor i = tg::arange(0, 1000, 1, tg::TensorOptions().dtype(tg::kInt64)).view({10, 100});
  EXPECT_TRUE(tg::equal(tg::sum(i.to(kGpu), {1}).to(tg::Device(tg::kCPU)), tg::sum(i, {1})));
  // A NaN inside a pack and one in a row's tail propagate through max.
  Tensor rownan = tg::zeros({4, 80004});
  rownan.select(0, 1).narrow(0, 40001, 1).fill_(NAN);
  rownan.select(0, 3).narrow(0, 80002, 1).fill_(NAN);
  Tensor rmx = tg::amax(rownan.to(kGpu).narrow(1, 0, 80003), {1}).to(tg::Device(tg::kCPU));
  EXPECT_TRUE(std::isnan(rmx.select(0, 1).item<float>()) && std::isnan(rmx.select(0, 3).item<float>()));
  EXPECT_EQ(rmx.select(0, 2).item<float>(), 0.0f);
  Tensor irows = tg::arange(0, 3 * 50000, 1, tg::TensorOptions().dtype(tg::kInt64)).view({3, 50000});
  EXPECT_TRUE(tg::equal(tg::sum(irows.to(kGpu), {1}).to(tg::Device(tg::kCPU)), tg::sum(irows, {1})));
  Tensor nan = tg::tensor({1, NAN, 3}, {});
  EXPECT_TRUE(std::isnan(tg::amax(nan.to(kGpu)).item<float>()));
}

TEST(CudaGpuOps, GemmMatchesCpu) {
  REQUIRE_GPU();
  tg::manual_seed(6);
  for (auto dt : {tg::kFloat32, tg::kFloat64, tg::kBFloat16}) {
    double tol = dt == tg::kFloat64 ? 1e-12 : dt == tg::kFloat32 ? 1e-4 : 2e-2;
    auto o = tg::TensorOptions().dtype(dt);
    Tensor a = tg::randn({37, 19}, o), b = tg::randn({19, 23}, o);
    expect_close(tg::mm(a.to(kGpu), b.to(kGpu)), tg::mm(a, b), tol, "mm");
    expect_close(tg::mm(a.t().contiguous().to(kGpu).t(), b.to(kGpu).t().contiguous().t()), tg::mm(a, b), tol,
                 "mm transposed operands");
    Tensor ba = tg::randn({4, 7, 5}, o), bb = tg::randn({4, 5, 3}, o);
    expect_close(tg::bmm(ba.to(kGpu), bb.to(kGpu)), tg::bmm(ba, bb), tol, "bmm");
    Tensor x = tg::randn({2, 6, 19}, o), w = tg::randn({8, 19}, o), bias = tg::randn({8}, o);
    expect_close(tg::linear(x.to(kGpu), w.to(kGpu), bias.to(kGpu)), tg::linear(x, w, bias), tol, "linear");
    expect_close(tg::matmul(ba.to(kGpu), b.narrow(0, 0, 5).narrow(1, 0, 3).to(kGpu)),
                 tg::matmul(ba, b.narrow(0, 0, 5).narrow(1, 0, 3)), tol, "matmul broadcast");
    Tensor sliced = tg::randn({10, 40}, o).slice(1, 0, std::nullopt, 2);  // needs a copy
    Tensor b20 = tg::randn({20, 23}, o);
    expect_close(tg::mm(sliced.to(kGpu), b20.to(kGpu)), tg::mm(sliced, b20), tol, "mm strided operand");
    // A 0-dim CPU tensor joins a CUDA op; its gradient comes back to the CPU.
    Tensor s0 = tg::scalar_tensor(3.0, o);
    expect_close(a.to(kGpu) * s0, a * s0, tol, "cpu scalar operand");
  }
  Tensor ia = tg::arange(0, 12, 1, tg::TensorOptions().dtype(tg::kInt64)).view({3, 4});
  EXPECT_TRUE(tg::equal(tg::mm(ia.to(kGpu), ia.t().to(kGpu)).to(tg::Device(tg::kCPU)), tg::mm(ia, ia.t())));
  // TF32: close to f32, and switchable.
  Tensor a = tg::randn({256, 256}), b = tg::randn({256, 256});
  tg::cuda::set_allow_tf32(true);
  Tensor t32 = tg::mm(a.to(kGpu), b.to(kGpu));
  tg::cuda::set_allow_tf32(false);
  EXPECT_FALSE(tg::cuda::allow_tf32());
  expect_close(t32, tg::mm(a, b), 5e-2, "tf32");
}

// Products of at most 2^21 multiply-adds take the tiled kernel (TG_SMALL_GEMM):
// shapes that are not multiples of its 16 x 16 tiles, k longer than a tile,
// one-element dims, transposed and strided operands, batches with one side
// broadcast, a bias, and products just above the bound (cuBLAS's) — each
// against the CPU. The MLP of a neural ODE (256 x 64 by 64) among them.
TEST(CudaGpuOps, SmallProductsMatchCpuAcrossTileEdges) {
  REQUIRE_GPU();
  tg::manual_seed(11);
  for (auto dt : {tg::kFloat32, tg::kFloat64}) {
    const double tol = dt == tg::kFloat64 ? 1e-12 : 1e-4;
    auto o = tg::TensorOptions().dtype(dt);
    const std::vector<std::array<int64_t, 3>> shapes = {{1, 1, 1},    {1, 40, 1},    {17, 33, 15}, {256, 2, 64},
                                                        {256, 64, 2}, {64, 256, 64}, {5, 300, 7},  {129, 129, 129}};
    for (const auto& s : shapes) {
      const std::string name = "mm " + std::to_string(s[0]) + "x" + std::to_string(s[1]) + "x" + std::to_string(s[2]);
      Tensor a = tg::randn({s[0], s[1]}, o), b = tg::randn({s[1], s[2]}, o);
      expect_close(tg::mm(a.to(kGpu), b.to(kGpu)), tg::mm(a, b), tol, name);
      expect_close(tg::mm(a.t().contiguous().to(kGpu).t(), b.t().contiguous().to(kGpu).t()), tg::mm(a, b), tol,
                   name + " transposed operands");
      Tensor w = tg::randn({s[2], s[1]}, o), bias = tg::randn({s[2]}, o);
      expect_close(tg::linear(a.to(kGpu), w.to(kGpu), bias.to(kGpu)), tg::linear(a, w, bias), tol, name + " linear");
    }
    Tensor wide = tg::randn({7, 64}, o).slice(1, 0, std::nullopt, 3), bw = tg::randn({22, 9}, o);
    expect_close(tg::mm(wide.to(kGpu), bw.to(kGpu)), tg::mm(wide, bw), tol, "mm strided operand");
    Tensor ba = tg::randn({6, 19, 21}, o), bb = tg::randn({21, 5}, o);
    expect_close(tg::matmul(ba.to(kGpu), bb.to(kGpu)), tg::matmul(ba, bb), tol, "matmul broadcast right");
    Tensor left = tg::randn({5, 19}, o);
    expect_close(tg::matmul(left.to(kGpu), ba.to(kGpu)), tg::matmul(left, ba), tol, "matmul broadcast left");
    Tensor b1 = tg::randn({3, 40, 17}, o), b2 = tg::randn({3, 17, 40}, o);
    expect_close(tg::bmm(b1.to(kGpu), b2.to(kGpu)), tg::bmm(b1, b2), tol, "bmm");
  }
}

// linear's bias rides in the product's epilogue (cuBLASLt) where it can: a
// contiguous input of 2 or 3 dims, wide and narrow outputs; else the
// product and an add: a bias at an odd offset (not 16-byte aligned), a
// transposed input, a long thin product (k = 20000), an input of one dim.
// Every form equals the CPU's.
TEST(CudaGpuOps, LinearWithBiasMatchesCpuInEveryForm) {
  REQUIRE_GPU();
  tg::manual_seed(62);
  for (auto dt : {tg::kFloat32, tg::kFloat64}) {
    const auto o = tg::TensorOptions().dtype(dt);
    const double tol = dt == tg::kFloat64 ? 1e-10 : 2e-4;
    auto check = [&](const Tensor& x, const Tensor& w, const Tensor& b, const char* what) {
      expect_close(tg::linear(x.to(kGpu), w.to(kGpu), b.to(kGpu)), tg::linear(x, w, b), tol, what);
    };
    Tensor w = tg::randn({40, 33}, o), b = tg::randn({40}, o);
    check(tg::randn({300, 33}, o), w, b, "rows");
    check(tg::randn({4, 50, 33}, o), w, b, "batched rows");
    check(tg::randn({300, 33}, o), tg::randn({1, 33}, o), tg::randn({1}, o), "one output");
    check(tg::randn({2000, 3}, o), tg::randn({128, 3}, o), tg::randn({128}, o), "wide, k = 3");
    check(tg::randn({33}, o), w, b, "one input vector");
    check(tg::randn({33, 300}, o).t(), w, b, "transposed input");
    const Tensor odd = tg::randn({41}, o);
    Tensor x = tg::randn({300, 33}, o);
    const Tensor want = tg::linear(x, w, odd.narrow(0, 1, 40));
    expect_close(tg::linear(x.to(kGpu), w.to(kGpu), odd.to(kGpu).narrow(0, 1, 40)), want, tol, "bias at an odd offset");
    check(tg::randn({8, 20000}, o), tg::randn({16, 20000}, o), tg::randn({16}, o), "long thin product");
  }
}

// Long, thin products (weight gradients, k = batch x points): k cut into
// slices whose products are summed, a remainder shorter than a slice added
// last (k = 70001 is not a multiple of the slice length); either operand
// stored transposed; an accumulating product (a weight's .grad, twice).
TEST(CudaGpuOps, LongThinGemmMatchesCpu) {
  REQUIRE_GPU();
  tg::manual_seed(61);
  for (auto dt : {tg::kFloat32, tg::kFloat64}) {
    const auto o = tg::TensorOptions().dtype(dt);
    const double tol = dt == tg::kFloat64 ? 1e-10 : 2e-3;
    Tensor a = tg::randn({24, 70001}, o), b = tg::randn({70001, 20}, o);
    const Tensor want = tg::mm(a.to(tg::kFloat64), b.to(tg::kFloat64)).to(dt);
    expect_close(tg::mm(a.to(kGpu), b.to(kGpu)), want, tol, "long thin mm");
    expect_close(tg::mm(a.t().contiguous().to(kGpu).t(), b.t().contiguous().to(kGpu).t()), want, tol,
                 "long thin mm, transposed operands");
    Tensor w = tg::randn({20, 24}, o).to(kGpu).requires_grad_(true);
    Tensor x = a.to(kGpu);
    Tensor g = tg::randn({20, 70001}, o);
    for (int i = 0; i < 2; ++i)
      tg::mm(w, x).backward(g.to(kGpu));
    expect_close(w.grad(), tg::mm(g.to(tg::kFloat64), a.to(tg::kFloat64).t()).to(dt) * 2.0, 2 * tol,
                 "weight gradient, accumulated twice");
  }
}

TEST(CudaGpuOps, IndexingJoiningAndRandomMatchCpu) {
  REQUIRE_GPU();
  tg::manual_seed(7);
  auto f64 = tg::TensorOptions().dtype(tg::kFloat64);
  auto i64 = tg::TensorOptions().dtype(tg::kInt64);
  Tensor x = tg::randn({4, 6}, f64);
  Tensor idx1 = tg::tensor({5, 0, 2, 2}, {4}, i64), idx0 = tg::tensor({3, 0, 1, 1}, {4}, i64);
  expect_close(tg::index_select(x.to(kGpu), 1, idx1.to(kGpu)), tg::index_select(x, 1, idx1), 0, "isel1");
  expect_close(tg::index_select(x.to(kGpu), 0, idx0.to(kGpu)), tg::index_select(x, 0, idx0), 0, "isel0");
  Tensor gidx = tg::tensor({0, 5, 1, 1, 4, 0, 2, 3}, {4, 2}, i64);
  expect_close(tg::gather(x.to(kGpu), 1, gidx.to(kGpu)), tg::gather(x, 1, gidx), 0, "gather");
  Tensor src = tg::randn({4, 2}, f64);
  expect_close(tg::scatter_add(x.to(kGpu), 1, gidx.to(kGpu), src.to(kGpu)), tg::scatter_add(x, 1, gidx, src), 1e-12,
               "scatter_add (repeated targets)");
  Tensor y = tg::randn({2, 6}, f64);
  expect_close(tg::cat({x.to(kGpu), y.to(kGpu)}, 0), tg::cat({x, y}, 0), 0, "cat");
  expect_close(tg::stack({x.to(kGpu), x.to(kGpu)}, 1), tg::stack({x, x}, 1), 0, "stack");
  // Philox: the same numbers on both devices for the same seed.
  for (auto dt : {tg::kFloat32, tg::kFloat64}) {
    tg::manual_seed(42);
    Tensor cu = tg::rand({1000}, tg::TensorOptions().dtype(dt).device(kGpu));
    Tensor cn = tg::randn({1000}, tg::TensorOptions().dtype(dt).device(kGpu));
    tg::manual_seed(42);
    Tensor hu = tg::rand({1000}, tg::TensorOptions().dtype(dt));
    Tensor hn = tg::randn({1000}, tg::TensorOptions().dtype(dt));
    EXPECT_TRUE(tg::equal(cu.to(tg::Device(tg::kCPU)), hu)) << dt;
    expect_close(cn, hn, dt == tg::kFloat32 ? 1e-6 : 1e-12, "randn");
  }
}

// The 16-byte vectorized path (dense, aligned operands of one element size,
// or broadcast scalars) and the generic loop it falls back to (a view one
// element into its storage is misaligned; a dtype change mixes sizes) agree
// with the CPU at lengths with and without a tail, for every element size.
TEST(CudaGpuOps, VectorizedAndGenericPathsMatchCpu) {
  REQUIRE_GPU();
  const tg::Device cpu(tg::kCPU);
  for (auto dt : {tg::kFloat32, tg::kFloat64, tg::kBFloat16, tg::kFloat16, tg::kInt64, tg::kBool}) {
    for (int64_t n : {int64_t(1), int64_t(3), int64_t(4), int64_t(17), int64_t(4099), (int64_t(1) << 20) + 5}) {
      std::string what = std::string(tg::to_string(dt)) + " n=" + std::to_string(n);
      tg::manual_seed(uint64_t(n));
      Tensor base = (tg::rand({n + 1}, tg::TensorOptions().dtype(tg::kFloat64)) * 8 - 4).to(dt);
      Tensor full = base.narrow(0, 0, n), shifted = base.narrow(0, 1, n);
      for (auto [name, x] : {std::pair<const char*, Tensor>{"aligned", full}, {"misaligned", shifted}}) {
        std::string w = what + " " + name;
        Tensor g = x.to(kGpu);
        expect_close(g.clone(), x.clone(), 0, w + " clone");
        expect_close(tg::full({n}, 1, tg::TensorOptions().dtype(dt).device(kGpu)),
                     tg::full({n}, 1, tg::TensorOptions().dtype(dt)), 0, w + " fill");
        expect_close(g.to(tg::kFloat64), x.to(tg::kFloat64), 0, w + " widening copy");
        if (dt == tg::kBool) continue;
        const double tol = (dt == tg::kBFloat16 || dt == tg::kFloat16) ? 1e-2 : 0;
        Tensor y = (tg::rand({n}, tg::TensorOptions().dtype(tg::kFloat64)) * 8 - 4).to(dt);
        expect_close(g + y.to(kGpu), x + y, tol, w + " add");
        Tensor two = tg::full({}, 2, tg::TensorOptions().dtype(dt));
        expect_close(g * two.to(kGpu), x * two, tol, w + " mul by a broadcast scalar");
        expect_close(-g, -x, 0, w + " neg");
        Tensor acc = g.clone();
        acc.sub_(g);
        EXPECT_TRUE(tg::equal(acc.to(cpu), tg::zeros({n}, tg::TensorOptions().dtype(dt)))) << w << " sub_";
      }
    }
  }
}

// An operand broadcast along the outer dim and dense along the inner one (a
// batch of tangents against its primal, a bias against rows) takes the
// periodic linear path: vectorized when the period is whole 16-byte vectors
// and the pointers are aligned, element by element otherwise; both equal
// the CPU, as do the shapes that keep the generic path.
TEST(CudaGpuOps, PeriodicBroadcastOperandsMatchCpu) {
  REQUIRE_GPU();
  const tg::Device cpu(tg::kCPU);
  for (auto dt : {tg::kFloat32, tg::kFloat64, tg::kFloat16}) {
    const double tol = dt == tg::kFloat16 ? 1e-2 : 0;
    for (auto [rows, period] : {std::pair<int64_t, int64_t>{3, 8}, {5, 7}, {100, 4096}, {2, 1}}) {
      std::string w =
          std::string(tg::to_string(dt)) + " [" + std::to_string(rows) + ", " + std::to_string(period) + "]";
      tg::manual_seed(uint64_t(rows * period));
      Tensor big = (tg::rand({rows, period}, tg::TensorOptions().dtype(tg::kFloat64)) * 4 - 2).to(dt);
      Tensor base = (tg::rand({period + 1}, tg::TensorOptions().dtype(tg::kFloat64)) * 4 - 2).to(dt);
      for (auto [name, v] : {std::pair<const char*, Tensor>{"aligned", base.narrow(0, 0, period)},
                             {"misaligned", base.narrow(0, 1, period)}}) {
        Tensor bg = big.to(kGpu), vg = v.to(kGpu);
        expect_close(bg * vg, big * v, tol, w + " " + name + " big * row");
        expect_close(vg - bg, v - big, tol, w + " " + name + " row - big");
        expect_close(tg::where(tg::gt(bg, 0.0), vg, bg), tg::where(tg::gt(big, 0.0), v, big), tol,
                     w + " " + name + " where");
      }
      // A strided column ([rows, 1] of stride period) stays on the generic path.
      Tensor col = big.narrow(1, 0, 1);
      expect_close(big.to(kGpu) + col.to(kGpu), big + col, tol, w + " column");
    }
  }
}

// Strided operands with long rows take the row kernel (offsets once per
// row): a batch transposed whole rows at a time, a row broadcast across
// channels, a narrowed matrix with more rows than a grid has blocks along y,
// rows not a multiple of the block; every dtype class; equal to the CPU.
TEST(CudaGpuOps, LongRowStridedOperandsMatchCpu) {
  REQUIRE_GPU();
  for (auto dt : {tg::kFloat32, tg::kFloat64, tg::kInt64, tg::kComplex64}) {
    const std::string w = tg::to_string(dt);
    tg::manual_seed(3);
    Tensor x = (tg::rand({3, 5, 300}, tg::TensorOptions().dtype(tg::kFloat64)) * 100).to(dt);
    Tensor xg = x.to(kGpu);
    expect_close(xg.permute({1, 0, 2}).contiguous(), x.permute({1, 0, 2}).contiguous(), 0, w + " batch transpose");
    Tensor row = x.narrow(1, 0, 1);  // [3, 1, 300] of stride 1500
    expect_close(xg * row.to(kGpu), x * row, 0, w + " row broadcast");
    Tensor wide = (tg::rand({70000, 260}, tg::TensorOptions().dtype(tg::kFloat64)) * 100).to(dt);
    expect_close(wide.to(kGpu).narrow(1, 2, 256).contiguous(), wide.narrow(1, 2, 256).contiguous(), 0,
                 w + " 70000 rows");
  }
}

// One value per channel against [batch, channels, points] or [channels,
// points] (a bias in channels-first layout) takes the divided linear path:
// one value per 16-byte vector when the points are whole vectors, element by
// element otherwise; mixed with dense and scalar operands; equal to the CPU.
TEST(CudaGpuOps, PerChannelBroadcastOperandsMatchCpu) {
  REQUIRE_GPU();
  for (auto dt : {tg::kFloat32, tg::kFloat64, tg::kFloat16}) {
    const double tol = dt == tg::kFloat16 ? 1e-2 : 0;
    for (const tg::IntList& shape : {tg::IntList{3, 5, 8}, tg::IntList{2, 3, 7}, tg::IntList{20, 32, 4096},
                                     tg::IntList{5, 16}, tg::IntList{4, 9}, tg::IntList{3, 1, 8}}) {
      const std::string w = std::string(tg::to_string(dt)) + " " + tg::shape_str(shape);
      tg::manual_seed(uint64_t(shape.back() * 7 + int64_t(shape.size())));
      const int64_t c = shape[shape.size() - 2];
      Tensor big = (tg::rand(shape, tg::TensorOptions().dtype(tg::kFloat64)) * 4 - 2).to(dt);
      Tensor other = (tg::rand(shape, tg::TensorOptions().dtype(tg::kFloat64)) * 4 - 2).to(dt);
      Tensor base = (tg::rand({c + 1}, tg::TensorOptions().dtype(tg::kFloat64)) * 4 - 2).to(dt);
      for (auto [name, v] : {std::pair<const char*, Tensor>{"aligned", base.narrow(0, 0, c).view({c, 1})},
                             {"misaligned", base.narrow(0, 1, c).view({c, 1})}}) {
        Tensor bg = big.to(kGpu), vg = v.to(kGpu), og = other.to(kGpu);
        expect_close(bg + vg, big + v, tol, w + " " + name + " big + channel");
        expect_close(vg - bg, v - big, tol, w + " " + name + " channel - big");
        expect_close(tg::where(tg::gt(bg, 0.0), vg, og), tg::where(tg::gt(big, 0.0), v, other), tol,
                     w + " " + name + " where(dense, channel, dense)");
        expect_close(tg::where(tg::gt(bg, 0.0), vg, tg::full({}, 0.5, og.options())),
                     tg::where(tg::gt(big, 0.0), v, tg::full({}, 0.5, other.options())), tol,
                     w + " " + name + " where(dense, channel, scalar)");
        // An outer product (a channel operand times one row of points for
        // every channel, as mm's of an inner size 1), rows aligned or not.
        const tg::IntList rs = shape.size() == 2 ? tg::IntList{1, shape.back()} : tg::IntList{1, 1, shape.back()};
        Tensor rowv = (tg::rand(rs, tg::TensorOptions().dtype(tg::kFloat64)) * 4 - 2).to(dt);
        expect_close(vg * rowv.to(kGpu), v * rowv, tol, w + " " + name + " channel * row");
        expect_close(tg::where(tg::gt(bg, 0.0), rowv.to(kGpu), vg), tg::where(tg::gt(big, 0.0), rowv, v), tol,
                     w + " " + name + " where(dense, row, channel)");
      }
    }
  }
}

}  // namespace

// Scalar operands are kernel arguments on the GPU and `add_`/`sub_` with an
// alpha one kernel: the results equal the CPU's, where the scalar is a 0-dim
// tensor and alpha a separate mul, bit for bit (the scalar rounded to the
// tensor's dtype first, the product rounded before the add), every dtype.
TEST(CudaGpuOps, ScalarOperandsAndScaledAddsMatchCpu) {
  REQUIRE_GPU();
  const tg::Device kCpu(tg::kCPU);
  for (tg::ScalarType dt : {tg::kFloat32, tg::kFloat64, tg::kInt64, tg::kBFloat16, tg::kFloat16}) {
    SCOPED_TRACE(::testing::Message() << "dtype " << dt);
    tg::manual_seed(5);
    Tensor a = (tg::randn({7, 33}) * 8.0).to(dt), b = (tg::randn({33}) * 8.0).to(dt);
    auto both = [&](auto f) {
      Tensor c = f(a.clone()), g = f(a.clone().to(kGpu));
      EXPECT_EQ(g.dtype(), c.dtype());
      EXPECT_TRUE(tg::equal(g.to(kCpu), c))
          << "max |diff| " << tg::amax(tg::abs(g.to(kCpu).to(tg::kFloat64) - c.to(tg::kFloat64))).item<double>();
    };
    const bool is_float = tg::is_floating_point(dt);
    both([](const Tensor& x) { return x * 3; });
    both([](const Tensor& x) { return x + 2; });
    both([](const Tensor& x) { return x - 0.1; });
    both([](const Tensor& x) { return x * 0.37; });
    both([](const Tensor& x) { return x / 7.0; });
    both([](const Tensor& x) { return x.mul_(3); });
    both([](const Tensor& x) { return x.add_(5); });
    if (is_float) both([](const Tensor& x) { return x.sub_(0.3); });
    const Tensor bd = b;
    both([&](const Tensor& x) {
      return x.add_(x.device().is_cuda() ? bd.to(kGpu) : bd, is_float ? tg::Scalar(0.25) : tg::Scalar(3));
    });
    both([&](const Tensor& x) {
      return x.sub_(x.device().is_cuda() ? bd.to(kGpu) : bd, is_float ? tg::Scalar(1e-3) : tg::Scalar(2));
    });
  }
  // The alpha path on a non-contiguous self and a broadcast other.
  Tensor a = tg::randn({8, 6}, tg::TensorOptions().dtype(tg::kFloat64));
  Tensor b = tg::randn({8, 1}, tg::TensorOptions().dtype(tg::kFloat64));
  Tensor ga = a.to(kGpu);
  a.t().sub_(b.t(), 0.5);
  ga.t().sub_(b.t().to(kGpu), 0.5);
  EXPECT_TRUE(tg::equal(ga.to(kCpu), a));
}

// cumsum's three CUDA paths against the CPU scan: rows (one CUB scan by
// key over every element), many columns (a thread each) and few long
// columns (transposed to rows); every layout, float sums carried in double
// on both, Int64 and Bool exactly, and the gradient (a reverse scan).
TEST(CudaGpuOps, CumsumMatchesCpu) {
  REQUIRE_GPU();
  const tg::Device kCpu(tg::kCPU);
  for (auto dt : {tg::kFloat32, tg::kFloat64}) {
    const double tol = dt == tg::kFloat32 ? 1e-5 : 1e-12;
    for (auto& [layout, x] : layouts(dt, 6, -2, 2))
      for (int64_t dim : {0, 1, -1})
        expect_close(tg::cumsum(x.to(kGpu), dim), tg::cumsum(x, dim), tol,
                     std::string("cumsum ") + layout + " dim " + std::to_string(dim) + " " + tg::to_string(dt));
    tg::manual_seed(7);
    for (tg::IntList shape : {tg::IntList{100000}, tg::IntList{3, 70000}, tg::IntList{1000, 5}, tg::IntList{4, 3000, 2},
                              tg::IntList{2, 50, 300}, tg::IntList{1, 1}}) {
      Tensor c = tg::rand(shape, tg::TensorOptions().dtype(dt)) - 0.5;
      for (int64_t dim = 0; dim < c.dim(); ++dim)
        expect_close(tg::cumsum(c.to(kGpu), dim), tg::cumsum(c, dim), dt == tg::kFloat32 ? 1e-4 : 1e-10,
                     "cumsum " + tg::shape_str(shape) + " dim " + std::to_string(dim) + " " + tg::to_string(dt));
    }
  }
  Tensor i = (tg::randn({5, 9}) * 100.0).to(tg::kInt64);
  EXPECT_TRUE(tg::equal(tg::cumsum(i.to(kGpu), 1).to(kCpu), tg::cumsum(i, 1)));
  EXPECT_TRUE(tg::equal(tg::cumsum(i.t().to(kGpu), 1).to(kCpu), tg::cumsum(i.t(), 1)));
  Tensor b = tg::gt(tg::randn({4, 6}), 0.0);
  Tensor bg = tg::cumsum(b.to(kGpu), 0);
  EXPECT_EQ(bg.dtype(), tg::kInt64);
  EXPECT_TRUE(tg::equal(bg.to(kCpu), tg::cumsum(b, 0)));
  EXPECT_EQ(tg::cumsum(tg::scalar_tensor(2.5).to(kGpu), 0).item<float>(), 2.5f);
  EXPECT_EQ(tg::cumsum(tg::empty({0, 4}).to(kGpu), 1).sizes(), (tg::IntList{0, 4}));
  Tensor h = tg::rand({3, 40}).to(tg::kFloat16);
  expect_close(tg::cumsum(h.to(kGpu), 1), tg::cumsum(h, 1), 1e-2, "cumsum Float16");
  Tensor x = tg::randn({6, 500}, tg::TensorOptions().dtype(tg::kFloat64));
  Tensor w = tg::randn({6, 500}, tg::TensorOptions().dtype(tg::kFloat64));
  auto grad_on = [&](tg::Device d) {
    Tensor xl = x.to(d).detach().requires_grad_();
    return tg::autograd::grad({(tg::cumsum(xl, 1) * w.to(d)).sum()}, {xl})[0];
  };
  expect_close(grad_on(kGpu), grad_on(kCpu), 1e-12, "cumsum gradient");
}
