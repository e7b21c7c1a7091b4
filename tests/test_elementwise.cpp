// Elementwise ops against plain double loops, on every layout and dtype.
#include <cstring>
#include <limits>

#include "reference.h"

namespace tgtest {
namespace {

struct UnaryCase {
  const char* name;
  std::function<Tensor(const Tensor&)> fn;
  std::function<double(double)> ref;
  double lo, hi;
  bool float_only;  // Int64 input gives Float32
  bool int_ok;      // defined on Int64
};

double sigmoid_ref(double x) { return 1 / (1 + std::exp(-x)); }

std::vector<UnaryCase> unary_cases() {
  return {
      {"neg", [](const Tensor& x) { return tg::neg(x); }, [](double x) { return -x; }, -3, 3, false, true},
      {"exp", [](const Tensor& x) { return tg::exp(x); }, [](double x) { return std::exp(x); }, -3, 3, true, true},
      {"log", [](const Tensor& x) { return tg::log(x); }, [](double x) { return std::log(x); }, 0.1, 5, true, false},
      {"sin", [](const Tensor& x) { return tg::sin(x); }, [](double x) { return std::sin(x); }, -4, 4, true, true},
      {"cos", [](const Tensor& x) { return tg::cos(x); }, [](double x) { return std::cos(x); }, -4, 4, true, true},
      {"tanh", [](const Tensor& x) { return tg::tanh(x); }, [](double x) { return std::tanh(x); }, -4, 4, true, true},
      {"sigmoid", [](const Tensor& x) { return tg::sigmoid(x); }, sigmoid_ref, -6, 6, true, true},
      {"relu", [](const Tensor& x) { return tg::relu(x); }, [](double x) { return x < 0 ? 0 : x; }, -3, 3, false, true},
      {"silu", [](const Tensor& x) { return tg::silu(x); }, [](double x) { return x * sigmoid_ref(x); }, -6, 6, true,
       true},
      {"gelu", [](const Tensor& x) { return tg::gelu(x); },
       [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }, -4, 4, true, true},
      {"gelu_tanh", [](const Tensor& x) { return tg::gelu(x, "tanh"); },
       [](double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }, -4, 4,
       true, true},
      {"softplus", [](const Tensor& x) { return tg::softplus(x, 2.0, 5.0); },
       [](double x) { return 2 * x > 5 ? x : std::log1p(std::exp(2 * x)) / 2; }, -5, 5, true, true},
      {"sqrt", [](const Tensor& x) { return tg::sqrt(x); }, [](double x) { return std::sqrt(x); }, 0.01, 9, true,
       false},
      {"rsqrt", [](const Tensor& x) { return tg::rsqrt(x); }, [](double x) { return 1 / std::sqrt(x); }, 0.1, 9, true,
       false},
      {"abs", [](const Tensor& x) { return tg::abs(x); }, [](double x) { return std::fabs(x); }, -3, 3, false, true},
      {"sign", [](const Tensor& x) { return tg::sign(x); }, [](double x) { return double((x > 0) - (x < 0)); }, -3, 3,
       false, true},
      {"square", [](const Tensor& x) { return tg::square(x); }, [](double x) { return x * x; }, -3, 3, false, true},
      {"reciprocal", [](const Tensor& x) { return tg::reciprocal(x); }, [](double x) { return 1 / x; }, 0.2, 4, true,
       false},
      {"asin", [](const Tensor& x) { return tg::asin(x); }, [](double x) { return std::asin(x); }, -0.95, 0.95, true,
       true},
      {"acos", [](const Tensor& x) { return tg::acos(x); }, [](double x) { return std::acos(x); }, -0.95, 0.95, true,
       true},
      {"atan", [](const Tensor& x) { return tg::atan(x); }, [](double x) { return std::atan(x); }, -4, 4, true, true},
      {"sinh", [](const Tensor& x) { return tg::sinh(x); }, [](double x) { return std::sinh(x); }, -3, 3, true, true},
      {"cosh", [](const Tensor& x) { return tg::cosh(x); }, [](double x) { return std::cosh(x); }, -3, 3, true, true},
      {"asinh", [](const Tensor& x) { return tg::asinh(x); }, [](double x) { return std::asinh(x); }, -4, 4, true,
       true},
      {"acosh", [](const Tensor& x) { return tg::acosh(x); }, [](double x) { return std::acosh(x); }, 1, 5, true,
       false},
      {"atanh", [](const Tensor& x) { return tg::atanh(x); }, [](double x) { return std::atanh(x); }, -0.9, 0.9, true,
       true},
      {"log2", [](const Tensor& x) { return tg::log2(x); }, [](double x) { return std::log2(x); }, 0.1, 5, true, false},
      {"log10", [](const Tensor& x) { return tg::log10(x); }, [](double x) { return std::log10(x); }, 0.1, 5, true,
       false},
      {"exp2", [](const Tensor& x) { return tg::exp2(x); }, [](double x) { return std::exp2(x); }, -3, 3, true, true},
      {"floor", [](const Tensor& x) { return tg::floor(x); }, [](double x) { return std::floor(x); }, -3, 3, false,
       true},
      {"ceil", [](const Tensor& x) { return tg::ceil(x); }, [](double x) { return std::ceil(x); }, -3, 3, false, true},
      {"round", [](const Tensor& x) { return tg::round(x); }, [](double x) { return std::nearbyint(x); }, -3, 3, false,
       true},
      {"trunc", [](const Tensor& x) { return tg::trunc(x); }, [](double x) { return std::trunc(x); }, -3, 3, false,
       true},
      {"frac", [](const Tensor& x) { return tg::frac(x); }, [](double x) { return x - std::trunc(x); }, -3, 3, true,
       true},
      {"clamp", [](const Tensor& x) { return tg::clamp(x, -1, 0.5); },
       [](double x) { return std::min(std::max(x, -1.0), 0.5); }, -3, 3, true, true},
  };
}

TEST(Unary, EveryOpLayoutAndDtypeMatchesDoubleLoop) {
  tg::manual_seed(1);
  for (const UnaryCase& c : unary_cases()) {
    for (ScalarType dt : {tg::kFloat32, tg::kFloat64, tg::kBFloat16, tg::kFloat16, tg::kInt64}) {
      if (dt == tg::kInt64 && !c.int_ok) continue;
      for (Layout l : kLayouts) {
        for (IntList shape : {IntList{5, 7}, IntList{3, 40, 300}}) {
          Tensor x = make(shape, dt, l, c.lo, c.hi);
          Tensor y = c.fn(x);
          std::string what =
              std::string(c.name) + " " + tg::to_string(dt) + " " + layout_name(l) + " " + tg::shape_str(shape);
          ScalarType want = dt;
          if (dt == tg::kInt64 && c.float_only) want = tg::kFloat32;
          ASSERT_EQ(y.dtype(), want) << what;
          ASSERT_EQ(y.sizes(), shape) << what;
          std::vector<double> in = values(x), ref;
          for (double v : in)
            ref.push_back(c.ref(v));
          // Reduced-precision results are computed in f32 from rounded inputs.
          expect_values(y, ref, std::max(tol_for(want), 4e-6), what);
        }
      }
    }
  }
}

TEST(Unary, EmptyAndZeroDim) {
  for (const UnaryCase& c : unary_cases()) {
    Tensor e = tg::empty({0, 3});
    EXPECT_EQ(c.fn(e).sizes(), (IntList{0, 3})) << c.name;
    Tensor s = tg::scalar_tensor(0.7, tg::kFloat64);
    Tensor y = c.fn(s);
    EXPECT_EQ(y.dim(), 0) << c.name;
    if (std::isnan(c.ref(0.7)))  // outside the domain (acosh)
      EXPECT_TRUE(std::isnan(y.item<double>())) << c.name;
    else EXPECT_NEAR(y.item<double>(), c.ref(0.7), 1e-12) << c.name;
  }
}

TEST(Unary, SpecialValues) {
  Tensor x = tg::tensor({NAN, INFINITY, -INFINITY, 0.0}, {}, tg::kFloat64);
  expect_values(tg::relu(x), {NAN, INFINITY, 0, 0}, 0, "relu");
  expect_values(tg::tanh(x), {NAN, 1, -1, 0}, 0, "tanh");
  expect_values(tg::sign(x), {NAN, 1, -1, 0}, 0, "sign");
  expect_values(tg::clamp(x, -1, 1), {NAN, 1, -1, 0}, 0, "clamp");
  expect_values(tg::sigmoid(tg::tensor({-200, 200}, {}, tg::kFloat32)), {0, 1}, 0, "sigmoid");
}

struct BinaryCase {
  const char* name;
  std::function<Tensor(const Tensor&, const Tensor&)> fn;
  std::function<double(double, double)> ref;
  double lo, hi;
};

std::vector<BinaryCase> binary_cases() {
  return {
      {"add", [](const Tensor& a, const Tensor& b) { return a + b; }, [](double a, double b) { return a + b; }, -3, 3},
      {"sub", [](const Tensor& a, const Tensor& b) { return a - b; }, [](double a, double b) { return a - b; }, -3, 3},
      {"mul", [](const Tensor& a, const Tensor& b) { return a * b; }, [](double a, double b) { return a * b; }, -3, 3},
      {"div", [](const Tensor& a, const Tensor& b) { return a / b; }, [](double a, double b) { return a / b; }, 0.5, 3},
      {"add_alpha", [](const Tensor& a, const Tensor& b) { return tg::add(a, b, 3); },
       [](double a, double b) { return a + 3 * b; }, -3, 3},
      {"pow", [](const Tensor& a, const Tensor& b) { return tg::pow(a, b); },
       [](double a, double b) { return std::pow(a, b); }, 0.5, 2},
      {"maximum", [](const Tensor& a, const Tensor& b) { return tg::maximum(a, b); },
       [](double a, double b) { return std::max(a, b); }, -3, 3},
      {"minimum", [](const Tensor& a, const Tensor& b) { return tg::minimum(a, b); },
       [](double a, double b) { return std::min(a, b); }, -3, 3},
  };
}

void check_binary(const BinaryCase& c, const Tensor& a, const Tensor& b, const std::string& what) {
  Tensor y = c.fn(a, b);
  IntList shape = tg::broadcast_shapes(a.sizes(), b.sizes(), "test");
  ASSERT_EQ(y.sizes(), shape) << what;
  std::vector<double> va = values(a), vb = values(b), ref;
  for (int64_t i = 0; i < tg::shape_numel(shape); ++i)
    ref.push_back(
        c.ref(va[size_t(broadcast_pos(i, shape, a.sizes()))], vb[size_t(broadcast_pos(i, shape, b.sizes()))]));
  expect_values(y, ref, std::max(tol_for(y.dtype()), 4e-6), what);
}

// A NaN number bound makes clamp NaN, as a NaN tensor bound does (and
// PyTorch's): it used to leave the input as it was.
TEST(Unary, ClampWithANaNBoundIsNaN) {
  const double nan = std::nan("");
  Tensor f = tg::tensor({0, 5, -3}, {3}, tg::kFloat64);
  for (Tensor r :
       {tg::clamp(f, nan, std::nullopt), tg::clamp(f, std::nullopt, nan), tg::clamp(f, 0.0, nan), tg::clamp_min(f, nan),
        tg::clamp_max(f, nan), tg::clamp(tg::tensor({1, 2}, {2}, tg::kInt64), nan, 3)})
    for (double v : values(r))
      EXPECT_TRUE(std::isnan(v)) << r;
  expect_values(tg::clamp(f, -1.0, 1.0), {0, 1, -1}, 0, "finite bounds");
  expect_values(tg::clamp(tg::tensor({nan, 2}, {2}, tg::kFloat32), 0.0, 1.0), {nan, 1}, 0, "a NaN input stays NaN");
}

TEST(Binary, EveryOpLayoutAndDtypeMatchesDoubleLoop) {
  tg::manual_seed(2);
  for (const BinaryCase& c : binary_cases()) {
    for (ScalarType dt : {tg::kFloat32, tg::kFloat64, tg::kBFloat16, tg::kFloat16, tg::kInt64}) {
      double lo = c.lo, hi = c.hi;
      if (dt == tg::kInt64 && std::string(c.name) == "pow") lo = 0, hi = 1.5;
      if (dt == tg::kInt64 && std::string(c.name) == "div") lo = 0.6, hi = 4;
      for (Layout la : kLayouts)
        for (Layout lb : kLayouts) {
          IntList shape = la == Layout::Contiguous ? IntList{4, 50, 300} : IntList{6, 9};
          Tensor a = make(shape, dt, la, lo, hi), b = make(shape, dt, lb, lo, hi);
          check_binary(c, a, b,
                       std::string(c.name) + " " + tg::to_string(dt) + " " + layout_name(la) + " x " + layout_name(lb));
        }
    }
  }
}

TEST(Binary, BoolOperandsOnEveryLayout) {
  tg::manual_seed(15);
  for (const BinaryCase& c : binary_cases()) {
    std::string name = c.name;
    if (name != "add" && name != "mul" && name != "maximum" && name != "minimum") continue;
    for (Layout la : kLayouts)
      for (Layout lb : kLayouts) {
        Tensor a = make({6, 9}, tg::kBool, la), b = make({6, 9}, tg::kBool, lb);
        Tensor y = c.fn(a, b);
        ASSERT_EQ(y.dtype(), tg::kBool) << name;
        std::vector<double> va = values(a), vb = values(b), ref;
        for (size_t i = 0; i < va.size(); ++i)
          ref.push_back(c.ref(va[i], vb[i]) != 0);
        expect_values(y, ref, 0, name + " Bool " + layout_name(la) + " x " + layout_name(lb));
      }
  }
}

TEST(Binary, BroadcastShapes) {
  tg::manual_seed(3);
  for (const BinaryCase& c : binary_cases()) {
    std::vector<std::pair<IntList, IntList>> shapes = {{{3, 1, 5}, {4, 1}}, {{5}, {2, 3, 5}}, {{2, 1}, {1, 7}},
                                                       {{}, {3, 4}},        {{0, 3}, {1, 3}}, {{1}, {}}};
    for (auto& [sa, sb] : shapes) {
      Tensor a = tg::rand(sa, tg::kFloat64) * (c.hi - c.lo) + c.lo;
      Tensor b = tg::rand(sb, tg::kFloat64) * (c.hi - c.lo) + c.lo;
      check_binary(c, a, b, std::string(c.name) + " " + tg::shape_str(sa) + " with " + tg::shape_str(sb));
      check_binary(c, b, a, std::string(c.name) + " reversed");
    }
  }
}

TEST(Binary, DtypePromotion) {
  Tensor f = tg::ones({2}), d = tg::ones({2}, tg::kFloat64), i = tg::ones({2}, tg::kInt64);
  Tensor h = tg::ones({2}, tg::kFloat16), bf = tg::ones({2}, tg::kBFloat16);
  Tensor bo = tg::ones({2}, tg::kBool);
  EXPECT_EQ((f + d).dtype(), tg::kFloat64);
  EXPECT_EQ((i + f).dtype(), tg::kFloat32);
  EXPECT_EQ((h + bf).dtype(), tg::kFloat32);
  EXPECT_EQ((h + i).dtype(), tg::kFloat16);
  EXPECT_EQ((bo + i).dtype(), tg::kInt64);
  EXPECT_EQ((i / i).dtype(), tg::kFloat32);  // true division
  EXPECT_EQ((i * 2).dtype(), tg::kInt64);
  EXPECT_EQ((i * 2.5).dtype(), tg::kFloat32);
  EXPECT_EQ((f * 2.5).dtype(), tg::kFloat32);  // a number never widens a float tensor
  EXPECT_EQ((bo + 1).dtype(), tg::kInt64);
  EXPECT_EQ((bo * bo).dtype(), tg::kBool);
  EXPECT_EQ(tg::exp(i).dtype(), tg::kFloat32);
  EXPECT_EQ(tg::abs(i).dtype(), tg::kInt64);
  expect_values(tg::tensor({7, -7}, {}, tg::kInt64) / 2, {3.5, -3.5}, 0, "int div");
  expect_values(tg::pow(tg::tensor({2, 3, -2}, {}, tg::kInt64), 3), {8, 27, -8}, 0, "int pow");
  expect_values(tg::add(bo, bo), {1, 1}, 0, "bool add is or");
}

TEST(Binary, ScalarOperandsOnEitherSide) {
  Tensor x = tg::tensor({1, 2, 4}, {}, tg::kFloat64);
  expect_values(x + 1, {2, 3, 5}, 0, "x + 1");
  expect_values(1 + x, {2, 3, 5}, 0, "1 + x");
  expect_values(x - 1, {0, 1, 3}, 0, "x - 1");
  expect_values(1 - x, {0, -1, -3}, 0, "1 - x");
  expect_values(x * 2, {2, 4, 8}, 0, "x * 2");
  expect_values(2 * x, {2, 4, 8}, 0, "2 * x");
  expect_values(x / 2, {0.5, 1, 2}, 0, "x / 2");
  expect_values(2 / x, {2, 1, 0.5}, 0, "2 / x");
  expect_values(-x, {-1, -2, -4}, 0, "-x");
  expect_values(tg::pow(x, 2), {1, 4, 16}, 0, "x ^ 2");
  expect_values(tg::pow(2, x), {2, 4, 16}, 0, "2 ^ x");
  expect_values(x.pow(0.5), {1, std::sqrt(2.0), 2}, 1e-15, "x ^ 0.5");
}

TEST(Compare, AllOpsWithBroadcastAndScalars) {
  Tensor a = tg::tensor({1, 2, 3, 4, 5, 6}, {2, 3}, tg::kFloat64);
  Tensor b = tg::tensor({2, 2, 2}, {3}, tg::kInt64);
  Tensor r = tg::lt(a, b);
  EXPECT_EQ(r.dtype(), tg::kBool);
  expect_values(r, {1, 0, 0, 0, 0, 0}, 0, "lt");
  expect_values(tg::le(a, b), {1, 1, 0, 0, 0, 0}, 0, "le");
  expect_values(tg::gt(a, b), {0, 0, 1, 1, 1, 1}, 0, "gt");
  expect_values(tg::ge(a, b), {0, 1, 1, 1, 1, 1}, 0, "ge");
  expect_values(tg::eq(a, b), {0, 1, 0, 0, 0, 0}, 0, "eq");
  expect_values(tg::ne(a, b), {1, 0, 1, 1, 1, 1}, 0, "ne");
  expect_values(tg::gt(a.t(), 3.5), {0, 1, 0, 1, 0, 1}, 0, "gt scalar transposed");
  expect_values(tg::eq(a, 2), {0, 1, 0, 0, 0, 0}, 0, "eq scalar");
}

// The C++ comparison operators are the comparison ops: Bool results of the
// broadcast shape, never recorded; a scalar on the left mirrors the
// comparison (0.5 < x is x > 0.5).
TEST(Compare, OperatorsAreTheOpsOnEitherSide) {
  Tensor a = tg::tensor({1, 2, 3, 4, 5, 6}, {2, 3}, tg::kFloat64).requires_grad_();
  Tensor b = tg::tensor({2, 2, 2}, {3}, tg::kInt64);
  const std::vector<std::pair<Tensor, std::vector<double>>> cases = {
      {a < b, {1, 0, 0, 0, 0, 0}},       {a <= b, {1, 1, 0, 0, 0, 0}},
      {a > b, {0, 0, 1, 1, 1, 1}},       {a >= b, {0, 1, 1, 1, 1, 1}},
      {a == b, {0, 1, 0, 0, 0, 0}},      {a != b, {1, 0, 1, 1, 1, 1}},
      {a > 3.5, {0, 0, 0, 1, 1, 1}},     {a <= 2, {1, 1, 0, 0, 0, 0}},
      {a == 5, {0, 0, 0, 0, 1, 0}},      {a != 5, {1, 1, 1, 1, 0, 1}},
      {a < 2, {1, 0, 0, 0, 0, 0}},       {a >= 6, {0, 0, 0, 0, 0, 1}},
      {3.5 < a, {0, 0, 0, 1, 1, 1}},     {2 >= a, {1, 1, 0, 0, 0, 0}},
      {5 == a, {0, 0, 0, 0, 1, 0}},      {5 != a, {1, 1, 1, 1, 0, 1}},
      {2 > a, {1, 0, 0, 0, 0, 0}},       {6 <= a, {0, 0, 0, 0, 0, 1}},
      {a.t() > 2.5, {0, 1, 0, 1, 1, 1}}, {b.view({3, 1}) > a.t(), {1, 0, 0, 0, 0, 0}}};
  for (size_t i = 0; i < cases.size(); ++i) {
    const Tensor& r = cases[i].first;
    EXPECT_EQ(r.dtype(), tg::kBool) << "case " << i;
    EXPECT_FALSE(r.requires_grad()) << "case " << i;
    EXPECT_EQ(r.sizes(), (i + 2 == cases.size() || i + 1 == cases.size() ? tg::IntList{3, 2} : tg::IntList{2, 3}))
        << "case " << i;
    expect_values(r, cases[i].second, 0, "operator case " + std::to_string(i));
  }
  EXPECT_THROW(a < tg::ones({4}), tg::Error);  // shapes that do not broadcast
}

// The logical ops on every dtype (nonzero is true, NaN included), with
// broadcasting; the operators: ! on any dtype, & | ^ ~ on Bool only (an
// error names the operator otherwise, as LibTorch's are bitwise there).
TEST(Compare, LogicalOpsAndOperators) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor a = tg::tensor({0, 1, -2, nan, 0, 3}, {2, 3}, tg::kFloat64);
  Tensor b = tg::tensor({0, 5, 0}, {3}, tg::kInt64);
  expect_values(tg::logical_and(a, b), {0, 1, 0, 0, 0, 0}, 0, "logical_and");
  expect_values(tg::logical_or(a, b), {0, 1, 1, 1, 1, 1}, 0, "logical_or");
  expect_values(tg::logical_xor(a, b), {0, 0, 1, 1, 1, 1}, 0, "logical_xor");
  expect_values(tg::logical_not(a), {1, 0, 0, 0, 1, 0}, 0, "logical_not");
  expect_values(a.logical_and(b.to(tg::kBool)), {0, 1, 0, 0, 0, 0}, 0, "logical_and method, Bool operand");
  expect_values(!a, {1, 0, 0, 0, 1, 0}, 0, "!");
  for (const Tensor& r : {tg::logical_and(a, b), tg::logical_not(a.t()), !b})
    EXPECT_EQ(r.dtype(), tg::kBool);
  Tensor p = a > 0.0, q = tg::tensor({1, 0, 1}, {3}, tg::kFloat32) > 0.5;
  expect_values(p & q, {0, 0, 0, 0, 0, 1}, 0, "&");
  expect_values(p | q, {1, 1, 1, 1, 0, 1}, 0, "|");
  expect_values(p ^ q, {1, 1, 1, 1, 0, 0}, 0, "^");
  expect_values(~p, {1, 0, 1, 1, 1, 0}, 0, "~");
  EXPECT_ERROR_CONTAINS(a & b, "operator&: defined on Bool tensors only, got Float64");
  EXPECT_ERROR_CONTAINS(p | b, "operator|: defined on Bool tensors only, got Int64");
  EXPECT_ERROR_CONTAINS(~b, "operator~: defined on Bool tensors only");
  EXPECT_ERROR_CONTAINS(tg::logical_and(a, tg::ones({4})), "logical_and");
  EXPECT_ERROR_CONTAINS(tg::logical_not(Tensor()), "logical_not");
}

TEST(Where, BroadcastsAndPromotes) {
  Tensor c = tg::gt(tg::tensor({1, -1, 2}, {}, tg::kFloat32), 0);
  Tensor a = tg::tensor({10, 20, 30, 40, 50, 60}, {2, 3}, tg::kFloat64);
  Tensor b = tg::tensor({-1}, {1}, tg::kInt64);
  Tensor w = tg::where(c, a, b);
  EXPECT_EQ(w.dtype(), tg::kFloat64);
  expect_values(w, {10, -1, 30, 40, -1, 60}, 0, "where");
  expect_values(tg::where(c, a.t().t(), 0.5), {10, 0.5, 30, 40, 0.5, 60}, 0, "where scalar");
  expect_values(tg::where(c, 7, tg::zeros({3}, tg::kInt64)), {7, 0, 7}, 0, "where scalar first");
  for (ScalarType dt : kAllTypes) {
    Tensor x = tg::ones({3}, dt), y = tg::zeros({3}, dt);
    expect_values(tg::where(c, x, y), {1, 0, 1}, 0, std::string("where ") + tg::to_string(dt));
  }
}

TEST(InPlace, OpsWriteIntoSelfAndBumpVersion) {
  Tensor x = tg::tensor({1, 2, 3, 4}, {2, 2}, tg::kFloat64);
  uint32_t v = x.version();
  x.add_(tg::tensor({10, 20}, {2}, tg::kFloat64));
  expect_values(x, {11, 22, 13, 24}, 0, "add_ broadcast");
  x.sub_(1).mul_(2).div_(tg::full({1}, 4.0, tg::kFloat64));
  expect_values(x, {5, 10.5, 6, 11.5}, 0, "chain");
  x += 1;
  x -= tg::ones({2, 2}, tg::kFloat64);
  x *= 2;
  x /= 2;
  expect_values(x, {5, 10.5, 6, 11.5}, 0, "compound operators");
  x.add_(tg::ones({2, 2}, tg::kFloat64), -2);
  expect_values(x, {3, 8.5, 4, 9.5}, 0, "add_ alpha");
  EXPECT_EQ(x.version(), v + 9);  // one bump per in-place op
  // Different source dtype, transposed destination, self-aliasing source.
  Tensor f = tg::zeros({2, 3}).t();
  f.copy_(tg::arange(6, tg::kInt64).view({3, 2}));
  expect_values(f, {0, 1, 2, 3, 4, 5}, 0, "copy_ into transposed");
  Tensor s = tg::tensor({1, 2, 3, 4}, {2, 2}, tg::kFloat64);
  s.add_(s.t());
  expect_values(s, {2, 5, 5, 8}, 0, "x += x^T reads the original values");
  Tensor h = tg::ones({4}, tg::kBFloat16);
  h.mul_(tg::full({4}, 3.0, tg::kFloat64));
  EXPECT_EQ(h.dtype(), tg::kBFloat16);
  expect_values(h, {3, 3, 3, 3}, 0, "bf16 mul_ by f64");
  Tensor z = tg::ones({3});
  z.zero_();
  expect_values(z, {0, 0, 0}, 0, "zero_");
  z.fill_(2.5);
  expect_values(z, {2.5, 2.5, 2.5}, 0, "fill_");
}

TEST(InPlace, LargeStridedDestination) {
  tg::manual_seed(4);
  Tensor base = tg::rand({300, 400}, tg::kFloat64);
  Tensor view = base.t().slice(0, 0, std::nullopt, 2);  // [200, 300], strided
  std::vector<double> before = values(view);
  Tensor add = tg::rand({300}, tg::kFloat64);
  view.add_(add);
  std::vector<double> va = values(add), ref;
  for (size_t i = 0; i < before.size(); ++i)
    ref.push_back(before[i] + va[i % 300]);
  expect_values(view, ref, 1e-15, "strided in-place add");
}

// Int64 arithmetic wraps around (two's complement), as PyTorch's, on every
// path: binary and scalar ops, negation, abs, square, pow, sums. Signed
// overflow is undefined behaviour in C++ (fatal under the sanitizers).
TEST(Binary, Int64ArithmeticWrapsAround) {
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min(), kMax = std::numeric_limits<int64_t>::max();
  std::vector<int64_t> v{kMin, kMax, -1, 3};
  Tensor a = tg::from_blob(v.data(), {4}, {}, tg::kInt64, tg::Device(tg::kCPU)).clone();
  auto ints = [](const Tensor& t) {
    Tensor c = t.contiguous();
    return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
  };
  EXPECT_EQ(ints(a + 1), (std::vector<int64_t>{kMin + 1, kMin, 0, 4}));
  EXPECT_EQ(ints(a - 1), (std::vector<int64_t>{kMax, kMax - 1, -2, 2}));
  EXPECT_EQ(ints(a + a), (std::vector<int64_t>{0, -2, -2, 6}));
  EXPECT_EQ(ints(a * 2), (std::vector<int64_t>{0, -2, -2, 6}));
  EXPECT_EQ(ints(-a), (std::vector<int64_t>{kMin, -kMax, 1, -3}));
  EXPECT_EQ(ints(tg::neg(a)), (std::vector<int64_t>{kMin, -kMax, 1, -3}));
  EXPECT_EQ(ints(tg::abs(a)), (std::vector<int64_t>{kMin, kMax, 1, 3}));
  EXPECT_EQ(ints(tg::square(a)), (std::vector<int64_t>{0, 1, 1, 9}));
  EXPECT_EQ(ints(tg::pow(a, 2)), (std::vector<int64_t>{0, 1, 1, 9}));
  EXPECT_EQ(ints(a.sum()), (std::vector<int64_t>{1}));  // kMin + kMax - 1 + 3
  EXPECT_EQ(ints(a.view({2, 2}).sum({0})), (std::vector<int64_t>{kMax, kMin + 2}));
  EXPECT_EQ(ints(a.view({2, 2}).sum({1})), (std::vector<int64_t>{-1, 2}));
}

// add and sub with a scale, and add_ / sub_ with one, take one kernel
// (add_scaled) where the operands share a real floating dtype: bitwise the
// product, then the add, as before. Broadcast, transposed and sliced
// operands, both dtypes, scales that round in float32; int64 add_ with a
// scale wraps around as mul then add does.
TEST(Binary, AddWithAScaleIsBitwiseTheProductThenTheAdd) {
  auto bits_equal = [](const Tensor& x, const Tensor& y) {
    if (x.sizes() != y.sizes() || x.dtype() != y.dtype()) return false;
    if (x.numel() == 0) return true;  // memcmp's pointers must not be null, even for no bytes
    Tensor a = x.contiguous(), b = y.contiguous();
    return std::memcmp(a.data_ptr(), b.data_ptr(), size_t(a.numel()) * tg::element_size(a.dtype())) == 0;
  };
  tg::manual_seed(7);
  for (auto dt : {tg::kFloat32, tg::kFloat64}) {
    const auto o = tg::TensorOptions().dtype(dt);
    Tensor base = tg::randn({37, 300}, o) * 1e3, other = tg::randn({300, 37}, o);
    const std::vector<std::pair<Tensor, Tensor>> cases = {
        {base, other.t()},                                      // transposed second operand
        {base.narrow(1, 3, 250), other.t().narrow(1, 5, 250)},  // sliced
        {base, tg::randn({300}, o)},                            // broadcast second operand
        {tg::randn({37, 1}, o), other.t()},                     // broadcast first operand
        {tg::randn({0, 300}, o), tg::randn({300}, o)},          // empty
        {tg::full({4}, -0.0, o), tg::randn({4}, o)},            // signed zeros
    };
    // An integral alpha too: 0 keeps a - 0 * b's signed zeros.
    for (const tg::Scalar alpha : {tg::Scalar(0.1), tg::Scalar(-2.5), tg::Scalar(1.0 / 3), tg::Scalar(1e-30),
                                   tg::Scalar(int64_t(0)), tg::Scalar(int64_t(3))}) {
      for (size_t c = 0; c < cases.size(); ++c) {
        const auto& [x, y] = cases[c];
        const Tensor prod = y * alpha;
        EXPECT_TRUE(bits_equal(tg::add(x, y, alpha), x + prod))
            << dt << " case " << c << " alpha " << alpha.to_double();
        EXPECT_TRUE(bits_equal(tg::sub(x, y, alpha), x - prod))
            << dt << " case " << c << " alpha " << alpha.to_double();
        if (x.sizes() != tg::broadcast_shapes(x.sizes(), y.sizes(), "test")) continue;
        Tensor in = x.clone(), in_s = x.clone();
        in.add_(y, alpha);
        in_s.sub_(y, alpha);
        EXPECT_TRUE(bits_equal(in, x + prod)) << dt << " add_ case " << c;
        EXPECT_TRUE(bits_equal(in_s, x - prod)) << dt << " sub_ case " << c;
      }
    }
    // Into a strided destination, and a source overlapping it.
    Tensor buf = base.clone();
    Tensor view = buf.narrow(1, 1, 100);
    const Tensor expect = view + other.t().narrow(1, 0, 100) * 0.75;
    view.add_(other.t().narrow(1, 0, 100), 0.75);
    EXPECT_TRUE(bits_equal(view, expect)) << dt;
    Tensor self = base.clone();
    self.add_(self, 0.5);
    EXPECT_TRUE(bits_equal(self, base + base * 0.5)) << dt;
  }
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  std::vector<int64_t> v{kMax, -3, 5};
  Tensor i64 = tg::from_blob(v.data(), {3}, {}, tg::kInt64, tg::Device(tg::kCPU)).clone();
  i64.add_(tg::full({3}, 2, tg::TensorOptions().dtype(tg::kInt64)), 3);  // kMax + 6 wraps
  EXPECT_EQ(i64.select(0, 0).item<int64_t>(), std::numeric_limits<int64_t>::min() + 5);
  EXPECT_EQ(i64.select(0, 1).item<int64_t>(), 3);
  EXPECT_EQ(i64.select(0, 2).item<int64_t>(), 11);
}

// alpha's checks, as PyTorch's: a real floating result takes only an alpha
// its dtype holds (refused, not rounded to inf), an integral result only an
// integral alpha; Bool + alpha Bool is Bool; Bool - Bool is refused; an
// INT64_MIN alpha wraps around in sub (no signed overflow).
TEST(Binary, AddAndSubCheckTheirAlpha) {
  auto throws_naming = [](auto&& f, std::initializer_list<const char*> texts) {
    try {
      f();
      ADD_FAILURE() << "expected an error naming " << *texts.begin();
    } catch (const tg::Error& e) {
      const std::string m = e.what();
      for (const char* t : texts)
        EXPECT_NE(m.find(t), std::string::npos) << m;
    }
  };
  const auto f32 = tg::TensorOptions().dtype(tg::kFloat32), f16 = tg::TensorOptions().dtype(tg::kFloat16),
             i64 = tg::TensorOptions().dtype(tg::kInt64), b8 = tg::TensorOptions().dtype(tg::kBool);
  Tensor a = tg::ones({3}, f32), b = tg::ones({3}, f32);
  throws_naming([&] { tg::add(a, b, 1e300); }, {"add", "alpha", "Float32"});
  throws_naming([&] { tg::sub(a, b, 1e300); }, {"sub", "alpha"});
  throws_naming([&] { a.clone().add_(b, -1e300); }, {"add_", "alpha"});
  throws_naming([&] { a.clone().sub_(b, 1e300); }, {"sub_", "alpha"});
  throws_naming([&] { tg::add(tg::ones({3}, f16), tg::ones({3}, f16), int64_t(70000)); }, {"add", "alpha"});
  EXPECT_EQ(values(a), std::vector<double>({1, 1, 1}));  // nothing written
  // The largest finite float32 still passes; the result is what the product gives.
  EXPECT_EQ(values(tg::add(a * 0.f, b, 3.0e38)), std::vector<double>(3, double(3.0e38f)));
  Tensor n = tg::full({3}, 4, i64), m = tg::full({3}, 2, i64);
  throws_naming([&] { tg::add(n, m, 0.5); }, {"add", "alpha", "integral", "Int64"});
  throws_naming([&] { tg::sub(n, m, 2.0); }, {"sub", "alpha", "integral"});
  throws_naming([&] { n.clone().add_(m, 0.5); }, {"add_", "alpha"});
  // An int tensor in place with a float operand: the result (int) takes no float alpha.
  throws_naming([&] { n.clone().add_(tg::ones({3}, f32), 0.5); }, {"add_", "alpha"});
  EXPECT_EQ(values(tg::add(n, m, int64_t(3))), std::vector<double>({10, 10, 10}));
  Tensor t = tg::full({2}, 1, b8), f = tg::zeros({2}, b8);
  Tensor r = tg::add(f, t, int64_t(2));
  EXPECT_EQ(r.dtype(), tg::kBool);
  EXPECT_EQ(values(r), std::vector<double>({1, 1}));
  EXPECT_EQ(values(tg::add(f, t, int64_t(0))), std::vector<double>({0, 0}));
  Tensor fi = f.clone();
  fi.add_(t, int64_t(5));
  EXPECT_EQ(values(fi), std::vector<double>({1, 1}));
  throws_naming([&] { tg::sub(t, f, int64_t(2)); }, {"sub"});
  throws_naming([&] { t.clone().sub_(f, int64_t(2)); }, {"sub_"});
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  Tensor w = tg::full({2}, 1, i64);
  w.sub_(tg::full({2}, 1, i64), kMin);  // 1 - kMin * 1 wraps to kMin + 1
  EXPECT_EQ(w.select(0, 0).item<int64_t>(), kMin + 1);
  EXPECT_EQ(tg::sub(tg::full({1}, 1, i64), tg::full({1}, 1, i64), kMin).item<int64_t>(), kMin + 1);
  // No subtraction with any Bool operand (PyTorch's rule), with or without a scale.
  throws_naming([&] { tg::sub(n, t); }, {"sub", "Bool", "logical_not"});
  throws_naming([&] { tg::sub(tg::ones({2}, f32), t, 2); }, {"sub", "Bool"});
  throws_naming([&] { n.clone().sub_(t); }, {"sub_", "Bool"});
  // A complex result checks its alpha too, naming add.
  const auto c64 = tg::TensorOptions().dtype(tg::kComplex64);
  throws_naming([&] { tg::add(tg::ones({2}, c64), tg::ones({2}, c64), 1e300); }, {"add (its alpha)"});
}

// A number from a bool is Boolean, as PyTorch's: it keeps the tensor's dtype
// (a Bool tensor stays Bool: Bool + true, Bool * true), no subtraction takes
// it, and an alpha may be one only for a Bool result.
TEST(Binary, BooleanNumbersFollowPyTorch) {
  const auto f32 = tg::TensorOptions().dtype(tg::kFloat32), i64 = tg::TensorOptions().dtype(tg::kInt64),
             b8 = tg::TensorOptions().dtype(tg::kBool);
  EXPECT_TRUE(tg::Scalar(true).is_bool() && tg::Scalar(true).is_integral());
  EXPECT_FALSE(tg::Scalar(1).is_bool());
  Tensor m = tg::tensor({1.0, 0.0, 1.0}, {3}, f32).to(tg::kBool);
  Tensor r = m + true;
  EXPECT_EQ(r.dtype(), tg::kBool);
  EXPECT_EQ(values(r), std::vector<double>({1, 1, 1}));
  EXPECT_EQ((m * false).dtype(), tg::kBool);
  EXPECT_EQ(values(m * false), std::vector<double>({0, 0, 0}));
  EXPECT_EQ((m + 1).dtype(), tg::kInt64);  // an integer still promotes Bool
  Tensor mi = m.clone();
  mi.add_(true);
  EXPECT_EQ(values(mi), std::vector<double>({1, 1, 1}));
  Tensor k = tg::full({2}, 3, i64);
  EXPECT_EQ((k + true).dtype(), tg::kInt64);
  EXPECT_EQ(values(k + true), std::vector<double>({4, 4}));
  EXPECT_EQ(values(tg::ones({2}, f32) * true), std::vector<double>({1, 1}));
  EXPECT_ERROR_CONTAINS(tg::zeros({2}, f32) - true, "sub: subtracting a Boolean (true)");
  EXPECT_ERROR_CONTAINS(true - tg::zeros({2}, f32), "sub: subtracting a Boolean (true)");
  EXPECT_ERROR_CONTAINS(tg::zeros({2}, f32).sub_(false), "sub_: subtracting a Boolean (false)");
  EXPECT_ERROR_CONTAINS(1.5 - m, "sub: subtracting a Bool tensor is not supported (1.5 minus a Bool tensor [3])");
  EXPECT_ERROR_CONTAINS(m - true, "(a Bool tensor minus true)");
  EXPECT_ERROR_CONTAINS(tg::pow(m, m), "pow: not defined on two Bool tensors");  // as PyTorch's
  EXPECT_EQ(tg::pow(m, 2).dtype(), tg::kInt64);
  EXPECT_EQ(values(tg::pow(m, 2)), std::vector<double>({1, 0, 1}));
  EXPECT_ERROR_CONTAINS(tg::add(tg::ones({2}, f32), tg::ones({2}, f32), true),
                        "add: a Boolean alpha (true) is only supported for a Bool result, not Float32");
  EXPECT_ERROR_CONTAINS(tg::ones({2}, f32).add_(tg::ones({2}, f32), true), "add_: a Boolean alpha");
  EXPECT_ERROR_CONTAINS(tg::sub(tg::ones({2}, i64), tg::ones({2}, i64), false), "sub: a Boolean alpha");
  Tensor ba = tg::add(m, m, false);
  EXPECT_EQ(ba.dtype(), tg::kBool);
  EXPECT_EQ(values(ba), std::vector<double>({1, 0, 1}));
  EXPECT_EQ(values(tg::add(tg::zeros({3}, b8), m, true)), std::vector<double>({1, 0, 1}));
}

// alpha b at the result's precision: a narrower b (float32, float16, int64
// into float64; complex64 into complex128) is converted before its scale,
// in and out of place; a float16 result is a + alpha b in float32, rounded
// once.
TEST(Binary, AddWithAScaleComputesInTheResultDtype) {
  auto opts = [](tg::ScalarType d) { return tg::TensorOptions().dtype(d); };
  const auto f64 = opts(tg::kFloat64);
  for (auto bt : {tg::kFloat32, tg::kFloat16, tg::kInt64}) {
    Tensor z = tg::zeros({1}, f64), one = tg::ones({1}, opts(bt));
    EXPECT_EQ(tg::add(z, one, 0.1).item<double>(), 0.1) << bt;
    EXPECT_EQ(tg::sub(z, one, 0.1).item<double>(), -0.1) << bt;
    Tensor in = z.clone();
    in.add_(one, 0.1);
    EXPECT_EQ(in.item<double>(), 0.1) << bt;
    in.sub_(one, 0.3);
    EXPECT_EQ(in.item<double>(), 0.1 - 0.3) << bt;
    // An alpha float64 holds, beyond the narrower operand's range.
    EXPECT_EQ(tg::add(z, one, 1e300).item<double>(), 1e300) << bt;
  }
  Tensor zc = tg::zeros({1}, opts(tg::kComplex128)), oc = tg::ones({1}, opts(tg::kComplex64));
  EXPECT_EQ(tg::real(tg::add(zc, oc, 0.1)).item<double>(), 0.1);
  // float32 result, float16 b: the alpha is not rounded to half.
  EXPECT_EQ(tg::add(tg::zeros({1}), tg::ones({1}, opts(tg::kFloat16)), 0.1).item<double>(), double(0.1f));
  // float16: 1 + 0.3 * 1.013671875 = 1.3041015625 rounds once to 1.3037109375
  // (the product rounded to half first would give 1.3046875).
  const auto f16 = opts(tg::kFloat16);
  Tensor h1 = tg::ones({1}, f16), hb = tg::full({1}, 1.013671875, f16);
  EXPECT_EQ(tg::add(h1, hb, 0.3).item<double>(), 1.3037109375);
  Tensor hi = h1.clone();
  hi.add_(hb, 0.3);
  EXPECT_EQ(hi.dtype(), tg::kFloat16);
  EXPECT_EQ(hi.item<double>(), 1.3037109375);
  EXPECT_EQ(tg::add(h1, hb, 0.3).dtype(), tg::kFloat16);
}

}  // namespace
}  // namespace tgtest

namespace tgtest {
namespace {

// activation_grad in float32 takes Eigen's packet tanh / logistic on
// contiguous runs (blocks of 256): every order of tanh, sigmoid and silu
// against the float64 kernel, on lengths around the block size, with g
// contiguous, broadcast (one value) and strided, x strided (the element
// loop), and special values (the two paths agree on what they give).
TEST(ActivationGrad, Float32PacketPathMatchesFloat64) {
  const auto f32 = tg::TensorOptions().dtype(tg::kFloat32);
  tg::manual_seed(5);
  for (tg::Activation act : {tg::Activation::Tanh, tg::Activation::Sigmoid, tg::Activation::Silu})
    for (int order = 0; order <= 5; ++order)
      for (int64_t n : {1, 255, 256, 257, 1000}) {
        SCOPED_TRACE("act " + std::to_string(int(act)) + " order " + std::to_string(order) + " n " + std::to_string(n));
        Tensor x = tg::randn({n}, f32) * 4.0, g = tg::randn({n}, f32);
        Tensor want = tg::activation_grad(g.to(tg::kFloat64), x.to(tg::kFloat64), act, order);
        auto close = [&](const Tensor& got, const Tensor& ref, const char* what) {
          const double err = tg::amax(tg::abs(got.to(tg::kFloat64) - ref) / (tg::abs(ref) + 1.0)).item<double>();
          EXPECT_LE(err, 2e-5) << what;  // float32 rounding of the polynomials (up to ~7e-6 either path)
        };
        close(tg::activation_grad(g, x, act, order), want, "contiguous");
        Tensor one = tg::full({1}, 0.75, f32).expand({n});
        close(tg::activation_grad(one, x, act, order),
              tg::activation_grad(one.to(tg::kFloat64), x.to(tg::kFloat64), act, order), "g broadcast");
        Tensor gs = tg::stack({g, g}, 1).select(1, 1), xs = tg::stack({x, x}, 1).select(1, 0);
        close(tg::activation_grad(gs, x, act, order), want, "g strided");
        close(tg::activation_grad(g, xs, act, order), want, "x strided");
      }
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  // Past -log(FLT_MAX) (-88.7228394) expf(-x) overflows and the element
  // math's sigmoid is 1 / inf = 0; above it, a denormal.
  const std::vector<double> specials{
      inf, -inf, nan, 0.0, -0.0, 20.0, -20.0, 100.0, -100.0, -88.7, -88.72283935546875, -89.0, -104.0, -1e4};
  const int64_t ns = int64_t(specials.size());
  Tensor special = tg::tensor(specials, {ns}, f32);
  for (tg::Activation act : {tg::Activation::Tanh, tg::Activation::Sigmoid, tg::Activation::Silu})
    for (int order = 0; order <= 3; ++order) {
      SCOPED_TRACE("special values, act " + std::to_string(int(act)) + " order " + std::to_string(order));
      Tensor packet = tg::activation_grad(tg::ones_like(special), special, act, order);  // contiguous
      Tensor element =
          tg::activation_grad(tg::ones({2 * ns}, f32).narrow(0, 0, ns), tg::stack({special, special}, 1).select(1, 0),
                              act, order);  // x strided: the element loop
      std::vector<double> a = values(packet), b = values(element);
      for (size_t i = 0; i < a.size(); ++i) {
        if (std::isnan(b[i]) || std::isinf(b[i]))
          EXPECT_TRUE(std::isnan(b[i]) ? std::isnan(a[i]) : a[i] == b[i])
              << "element " << i << ": " << a[i] << " against " << b[i];
        else if (b[i] == 0) EXPECT_EQ(a[i], 0.0) << "element " << i << " (x = " << specials[i] << ")";
        else
          EXPECT_NEAR(a[i], b[i], 1e-5 * std::abs(b[i]) + 1e-44) << "element " << i << " (x = " << specials[i] << ")";
      }
    }
}

}  // namespace
}  // namespace tgtest
