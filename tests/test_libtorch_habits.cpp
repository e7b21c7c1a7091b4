// LibTorch's habits (issue 50 point 1): integer-dim overloads, randint and
// randperm, the *_like factories with options, cpu(), the in-place forms,
// x.index / index_put_ with torch::indexing's entries, accessors, the
// generator state, and every activation in nn::functional. Values against
// the long forms or closed forms; gradients through the new forms against
// finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <type_traits>

#include <tapegrad/tapegrad.h>

#include "reference.h"  // EXPECT_ERROR_CONTAINS

namespace {

using tg::Scalar;
using tg::Tensor;
using tg::indexing::Ellipsis;
using tg::indexing::None;
using tg::indexing::Slice;
namespace F = tg::nn::functional;
namespace ag = tg::autograd;

const auto f64 = tg::TensorOptions().dtype(tg::kFloat64);

double max_abs(const Tensor& a) { return tg::amax(tg::abs(a)).item<double>(); }
Tensor grid(int64_t r, int64_t c) { return tg::arange(0, r * c, 1, f64).reshape({r, c}); }

TEST(LibtorchHabits, IntegerDimOverloads) {
  Tensor x = grid(3, 4);
  EXPECT_TRUE(tg::equal(x.sum(1), x.sum(tg::IntList{1})));
  EXPECT_EQ(x.mean(1, true).sizes(), tg::IntList({3, 1}));
  EXPECT_TRUE(tg::equal(x.mean(-1, true), x.mean(tg::IntList{1}, true)));
  EXPECT_LT(max_abs(x.norm(2, 1) - tg::sqrt((x * x).sum(1))), 1e-12);
  EXPECT_TRUE(tg::equal(tg::sum(x, 0), x.sum(tg::IntList{0})));
  EXPECT_EQ(x.sum(tg::IntList{0, 1}).dim(), 0);
  EXPECT_EQ(x.sum({}).dim(), 0);  // a braced list is still a list: {} sums everything
  EXPECT_TRUE(tg::equal(x.sum({1}), x.sum(1)));
  EXPECT_TRUE(tg::equal(tg::mean(x, 1, true), x.mean(tg::IntList{1}, true)));
  EXPECT_LT(max_abs(tg::norm(x, 2, 0) - x.norm(2, tg::IntList{0})), 1e-12);
  EXPECT_TRUE(tg::equal(x.amax(int64_t(1)), x.amax(tg::IntList{1})));
  EXPECT_TRUE(tg::equal(x.var(0), x.var(tg::IntList{0})));
  EXPECT_TRUE(tg::equal(x.flip(1), x.flip(tg::IntList{1})));
  EXPECT_TRUE(tg::equal(x.roll(1, 0), x.roll(tg::IntList{1}, tg::IntList{0})));
}

TEST(LibtorchHabits, RandintAndRandperm) {
  tg::manual_seed(3);
  Tensor r = tg::randint(2, 7, {20000});
  EXPECT_EQ(r.dtype(), tg::kInt64);
  EXPECT_EQ(tg::amin(r).item<int64_t>(), 2);
  EXPECT_EQ(tg::amax(r).item<int64_t>(), 6);
  for (int64_t v = 2; v < 7; ++v) {  // each of 5 values 4000 +- 5 sigma (sigma ~ 57)
    const int64_t count = tg::eq(r, Scalar(v)).sum().item<int64_t>();
    EXPECT_NEAR(double(count), 4000.0, 300.0) << v;
  }
  tg::manual_seed(3);
  EXPECT_TRUE(tg::equal(tg::randint(2, 7, {20000}), r));  // the generator's stream
  EXPECT_EQ(tg::randint(5, {2, 3}, f64).dtype(), tg::kFloat64);
  EXPECT_EQ(tg::randint_like(grid(2, 2), 0, 3).dtype(), tg::kFloat64);
  EXPECT_ERROR_CONTAINS(tg::randint(3, 3, {2}), "randint: expected low < high");
  // Each dtype holds only the integers it represents exactly.
  EXPECT_EQ(tg::amax(tg::randint(2040, 2049, {500}, tg::kFloat16).to(tg::kFloat64)).item<double>(), 2048.0);
  EXPECT_ERROR_CONTAINS(tg::randint(0, 2050, {2}, tg::kFloat16), "cannot represent exactly (it does up to 2048)");
  EXPECT_ERROR_CONTAINS(tg::randint(0, 300, {2}, tg::kBFloat16), "BFloat16 cannot represent exactly");
  EXPECT_ERROR_CONTAINS(tg::randint(0, 20000000, {2}, tg::kFloat32), "Float32 cannot represent exactly");
  EXPECT_ERROR_CONTAINS(tg::randint(0, 10, {2}, tg::kBool), "randint: expected Int64 or a floating dtype, got Bool");
  Tensor p = tg::randperm(50);
  EXPECT_EQ(p.dtype(), tg::kInt64);
  EXPECT_TRUE(tg::equal(std::get<0>(tg::sort(p)), tg::arange(0, 50, 1)));
  EXPECT_FALSE(tg::equal(p, tg::arange(0, 50, 1)));
  EXPECT_EQ(tg::randperm(0).numel(), 0);
  EXPECT_ERROR_CONTAINS(tg::randperm(-1), "randperm: n must be >= 0");
  EXPECT_TRUE(tg::equal(std::get<0>(tg::sort(tg::randperm(257, tg::kFloat16))), tg::arange(0, 257, 1, f64)));
  EXPECT_ERROR_CONTAINS(tg::randperm(2050, tg::kFloat16), "randperm: Float16 cannot hold every integer below 2050");
  EXPECT_ERROR_CONTAINS(tg::randperm(3, tg::kBool), "randperm: Bool cannot hold");
}

TEST(LibtorchHabits, LikeFactoriesTakeOptionsAndKeepTheRest) {
  Tensor x = tg::ones({2, 3});
  Tensor z = tg::zeros_like(x, tg::kFloat64);
  EXPECT_EQ(z.dtype(), tg::kFloat64);
  EXPECT_EQ(z.device(), x.device());
  EXPECT_EQ(tg::ones_like(z).dtype(), tg::kFloat64);
  EXPECT_EQ(tg::full_like(x, 2.5, tg::kFloat64).sum().item<double>(), 15.0);
  EXPECT_EQ(tg::empty_like(x, tg::Device(tg::kCPU)).dtype(), tg::kFloat32);
  EXPECT_TRUE(tg::randn_like(x, f64.requires_grad(true)).requires_grad());
  EXPECT_TRUE(tg::equal(x.cpu(), x));
  if (!tg::cuda::is_available()) {
    EXPECT_ANY_THROW(x.cuda());
  }
}

TEST(LibtorchHabits, InPlaceFormsWriteThroughAndDifferentiate) {
  Tensor base = grid(2, 3) - 2.5;
  struct Case {
    const char* name;
    std::function<void(const Tensor&)> in_place;
    std::function<Tensor(const Tensor&)> out_of_place;
  };
  const std::vector<Case> cases = {
      {"abs_", [](const Tensor& t) { t.abs_(); }, [](const Tensor& t) { return tg::abs(t); }},
      {"neg_", [](const Tensor& t) { t.neg_(); }, [](const Tensor& t) { return -t; }},
      {"exp_", [](const Tensor& t) { t.exp_(); }, [](const Tensor& t) { return tg::exp(t); }},
      {"tanh_", [](const Tensor& t) { t.tanh_(); }, [](const Tensor& t) { return tg::tanh(t); }},
      {"sigmoid_", [](const Tensor& t) { t.sigmoid_(); }, [](const Tensor& t) { return tg::sigmoid(t); }},
      {"relu_", [](const Tensor& t) { t.relu_(); }, [](const Tensor& t) { return tg::relu(t); }},
      {"square_", [](const Tensor& t) { t.square_(); }, [](const Tensor& t) { return t * t; }},
      {"floor_", [](const Tensor& t) { t.floor_(); }, [](const Tensor& t) { return tg::floor(t); }},
      {"pow_", [](const Tensor& t) { t.pow_(3); }, [](const Tensor& t) { return t * t * t; }},
      {"clamp_", [](const Tensor& t) { t.clamp_(-1.0, 1.5); },
       [](const Tensor& t) { return tg::clamp(t, Scalar(-1.0), Scalar(1.5)); }},
      {"clamp_min_", [](const Tensor& t) { t.clamp_min_(0.5); },
       [](const Tensor& t) { return tg::clamp_min(t, Scalar(0.5)); }},
      {"masked_fill_", [](const Tensor& t) { t.masked_fill_(tg::gt(t, 0.0), 7.0); },
       [](const Tensor& t) { return tg::masked_fill(t, tg::gt(t, 0.0), Scalar(7.0)); }},
  };
  for (const Case& c : cases) {
    Tensor x = base.clone(), view = x.view({-1});
    const uint32_t v0 = x.version();
    c.in_place(x);
    EXPECT_TRUE(tg::equal(x, c.out_of_place(base))) << c.name;
    EXPECT_TRUE(tg::equal(view, c.out_of_place(base).view({-1}))) << c.name << ": a view sees the write";
    EXPECT_GT(x.version(), v0) << c.name;
  }
  // Through autograd: the old value is differentiated through.
  Tensor a = (tg::rand({3, 2}, f64) + 0.5).requires_grad_();
  auto fn = [](const ag::variable_list& in) {
    Tensor y = in[0] * 2.0;  // not a leaf: in place is allowed
    y.exp_().sqrt_();
    return y * in[0];
  };
  EXPECT_TRUE(ag::gradcheck(fn, {a}));
  EXPECT_TRUE(ag::gradgradcheck(fn, {a}));
  EXPECT_ANY_THROW(a.abs_());  // a leaf that requires grad, grad mode on
  {
    ag::NoGradGuard ng;
    Tensor before = a.detach().clone();
    a.abs_();  // allowed without grad mode, as PyTorch's
    EXPECT_TRUE(tg::equal(a.detach(), tg::abs(before)));
  }
  EXPECT_ERROR_CONTAINS(tg::zeros({2}, tg::kInt64).sqrt_(), "sqrt_: the result is Float32 but the tensor is Int64");
  Tensor ints = tg::tensor({-2.0, 3.0}).to(tg::kInt64);
  ints.abs_();  // same dtype: allowed
  EXPECT_EQ(ints.sum().item<int64_t>(), 5);
  Tensor u = tg::empty({1000}, f64);
  u.uniform_(-2, 3);
  EXPECT_GE(tg::amin(u).item<double>(), -2.0);
  EXPECT_LT(tg::amax(u).item<double>(), 3.0);
  EXPECT_NEAR(u.mean().item<double>(), 0.5, 0.15);
  u.normal_(1.0, 0.5);
  EXPECT_NEAR(u.mean().item<double>(), 1.0, 0.1);
  EXPECT_ERROR_CONTAINS(u.uniform_(3, 2), "uniform_: expected finite from <= to");
}

TEST(LibtorchHabits, IndexAsLibtorch) {
  Tensor x = grid(3, 4);
  EXPECT_TRUE(tg::equal(x.index({Slice(), 0}), x.select(1, 0)));
  EXPECT_TRUE(tg::equal(x.index({1}), x.select(0, 1)));
  EXPECT_TRUE(tg::equal(x.index({-1, -1}), x.select(0, 2).select(0, 3)));
  EXPECT_TRUE(tg::equal(x.index({Slice(1, None, 2)}), x.slice(0, 1, std::nullopt, 2)));
  EXPECT_TRUE(tg::equal(x.index({Slice(None, -1), Slice(1, 3)}), x.slice(0, 0, 2).slice(1, 1, 3)));
  EXPECT_EQ(x.index({None, Slice(), None}).sizes(), tg::IntList({1, 3, 1, 4}));
  EXPECT_TRUE(tg::equal(x.index({Ellipsis, 2}), x.select(1, 2)));
  EXPECT_TRUE(tg::equal(x.index({"...", 2}), x.select(1, 2)));
  // Basic indexing is a view: a write through it reaches x.
  Tensor col = x.index({Slice(), 1});
  col.fill_(-1.0);
  EXPECT_EQ(x.select(1, 1).sum().item<double>(), -3.0);
  // A tensor index: Int64 along one dim (any shape), a Bool mask.
  Tensor y = grid(3, 4);
  Tensor idx = tg::tensor({2, 0, 2}).to(tg::kInt64);
  EXPECT_TRUE(tg::equal(y.index({Slice(), idx}), y.index_select(1, idx)));
  EXPECT_EQ(y.index({idx.view({3, 1})}).sizes(), tg::IntList({3, 1, 4}));
  Tensor mask = tg::gt(y, 5.5);
  EXPECT_TRUE(tg::equal(y.index({mask}), tg::masked_select(y, mask)));
  Tensor rows = tg::tensor({1, 0, 1}).to(tg::kBool);
  EXPECT_TRUE(tg::equal(y.index({rows}), tg::stack({y.select(0, 0), y.select(0, 2)}, 0)));
  EXPECT_TRUE(tg::equal(y.index({Slice(), tg::tensor({0, 1, 1, 0}).to(tg::kBool)}),
                        tg::stack({y.select(1, 1), y.select(1, 2)}, 1)));
  EXPECT_TRUE(tg::equal(y.index({Slice(), tg::tensor({-1, 0}).to(tg::kInt64)}),
                        y.index_select(1, tg::tensor({3, 0}).to(tg::kInt64))));
  EXPECT_EQ(y.index({tg::full({}, 1, tg::kBool)}).sizes(), tg::IntList({1, 3, 4}));           // x[true]
  EXPECT_EQ(y.index({Slice(), tg::full({}, 0, tg::kBool)}).sizes(), tg::IntList({3, 0, 4}));  // x[:, false]
  // Bad indices.
  EXPECT_ERROR_CONTAINS(y.index({0, 0, 0}), "index: 3 dims indexed but the tensor has 2");
  EXPECT_ERROR_CONTAINS(y.index({Ellipsis, Ellipsis}), "at most one Ellipsis");
  EXPECT_ERROR_CONTAINS(y.index({Slice(None, None, -1)}), "step must be positive");
  EXPECT_ERROR_CONTAINS(y.index({tg::tensor({1.0})}), "must be Int64 or Bool");
  EXPECT_ERROR_CONTAINS(y.index({tg::tensor({1, 0}).to(tg::kBool)}), "mask's shape [2] does not match");
  EXPECT_ERROR_CONTAINS(y.index({"..x"}), "must be \"...\"");
  EXPECT_ANY_THROW(y.index({5}));
  EXPECT_ANY_THROW(y.index({Slice(), tg::tensor({4}).to(tg::kInt64)}));
  EXPECT_ANY_THROW(y.index({Slice(), tg::tensor({-5}).to(tg::kInt64)}));
  // Gradients through a tensor index.
  Tensor w = tg::rand({4, 3}, f64).requires_grad_();
  EXPECT_TRUE(ag::gradcheck(
      [&](const ag::variable_list& in) {
        return in[0].index({tg::tensor({3, 0, 3}).to(tg::kInt64), Slice(1)}) * 2.0;
      },
      {w}));
}

// Several tensor indices in one call, as PyTorch's advanced indexing: they
// broadcast together; their shape replaces the indexed dims where the first
// stood when they are adjacent, else it comes first. Values worked by hand
// on z[a][b][c] = 12a + 4b + c.
void several_tensor_indices(tg::Device dev) {
  const Tensor z = tg::arange(0, 24, 1, f64).reshape({2, 3, 4}).to(dev);
  auto I = [&](std::vector<int64_t> v, tg::IntList s) {
    return tg::tensor(std::vector<double>(v.begin(), v.end()), s, f64).to(tg::kInt64).to(dev);
  };
  auto vals = [](const Tensor& t) { return tgtest::values(t); };
  using V = std::vector<double>;
  Tensor r = z.index({I({1, 0}, {2}), I({2, 1}, {2})});
  EXPECT_EQ(r.sizes(), tg::IntList({2, 4}));
  EXPECT_EQ(vals(r), V({20, 21, 22, 23, 4, 5, 6, 7}));
  r = z.index({Slice(), I({0, 2}, {2}), I({1, 3}, {2})});  // adjacent, after a slice: in place
  EXPECT_EQ(r.sizes(), tg::IntList({2, 2}));
  EXPECT_EQ(vals(r), V({1, 11, 13, 23}));
  r = z.index({I({0, 1}, {2}), Slice(), I({3, 0}, {2})});  // apart: first
  EXPECT_EQ(r.sizes(), tg::IntList({2, 3}));
  EXPECT_EQ(vals(r), V({3, 7, 11, 12, 16, 20}));
  r = z.index({I({0, 1}, {2, 1}), I({0, 2}, {2})});  // broadcast to [2, 2]
  EXPECT_EQ(r.sizes(), tg::IntList({2, 2, 4}));
  EXPECT_EQ(vals(r.select(0, 1).select(0, 1)), V({20, 21, 22, 23}));
  EXPECT_EQ(vals(r.select(0, 0).select(0, 1)), V({8, 9, 10, 11}));
  EXPECT_EQ(vals(z.index({I({-1}, {1}), I({-1}, {1}), I({-2}, {1})})), V({22}));
  Tensor mask = tg::zeros({3, 4}, f64).to(dev);
  mask.index_put_({0, 1}, 1.0);
  mask.index_put_({2, 3}, 1.0);
  EXPECT_EQ(vals(z.index({I({1, 0}, {2}), tg::gt(mask, 0.5)})), V({13, 11}));  // a mask's positions as two indices
  EXPECT_EQ(z.index({I({0}, {1}), I({}, {0})}).sizes(), tg::IntList({0, 4}));
  EXPECT_EQ(tg::zeros({0, 3}, f64).to(dev).index({I({}, {0}), I({}, {0})}).sizes(), tg::IntList({0}));
  // Each index is checked against its own dim (a flat position in range is
  // not enough), and their shapes must broadcast.
  EXPECT_ERROR_CONTAINS(z.index({I({0}, {1}), I({3}, {1})}), "index: index 3 is out of bounds for dim 1 of size 3");
  EXPECT_ERROR_CONTAINS(z.index({I({0}, {1}), I({-4}, {1})}), "index -4 is out of bounds for dim 1");
  EXPECT_ANY_THROW(z.index({I({0, 1}, {2}), I({0, 1, 2}, {3})}));
  EXPECT_ERROR_CONTAINS(z.index({I({0}, {1}), tg::full({}, 1, tg::kBool).to(dev)}),
                        "must be Int64 or a Bool mask of at least one dim");
  // index_put_ through several indices; a position given twice is refused.
  Tensor y = tg::zeros({3, 4}, f64).to(dev);
  y.index_put_({I({0, 2}, {2}), I({1, 3}, {2})}, tg::tensor({5.0, 7.0}).to(dev));
  EXPECT_EQ(vals(y), V({0, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7}));
  EXPECT_ERROR_CONTAINS(y.index_put_({I({0, 0}, {2}), I({1, 1}, {2})}, 1.0), "more than once");
  // Differentiable, twice (gradcheck takes Float64 CPU leaves: the function
  // runs on dev and returns to the CPU).
  const Tensor w = tg::rand({3, 4, 2}, f64).requires_grad_();
  auto f = [&](const ag::variable_list& in) {
    const Tensor p = in[0].to(dev).index({I({2, 0, 2}, {3}), Slice(), I({1, 0, 1}, {3})});  // [3, 4], (2,1) twice
    EXPECT_EQ(p.device(), dev);
    return (p * p).to(tg::Device(tg::kCPU));
  };
  EXPECT_TRUE(ag::gradcheck(f, {w}));
  EXPECT_TRUE(ag::gradgradcheck(f, {w}));
}

TEST(LibtorchHabits, SeveralTensorIndicesAsPyTorch) { several_tensor_indices(tg::Device(tg::kCPU)); }

TEST(LibtorchHabitsGpu, SeveralTensorIndicesAsPyTorch) {
  REQUIRE_GPU();
  several_tensor_indices(tg::Device(tg::kCUDA, 0));
}

TEST(LibtorchHabits, IndexPutAsLibtorch) {
  Tensor x = grid(3, 4);
  x.index_put_({Slice(), 0}, -1.0);
  EXPECT_EQ(x.select(1, 0).sum().item<double>(), -3.0);
  x.index_put_({1}, tg::tensor({9.0, 8.0, 7.0, 6.0}).to(tg::kFloat64));
  EXPECT_TRUE(tg::equal(x.select(0, 1), tg::tensor({9.0, 8.0, 7.0, 6.0}).to(tg::kFloat64)));
  Tensor y = grid(3, 4);
  y.index_put_({tg::gt(y, 5.5)}, 0.0);
  EXPECT_EQ(y.sum().item<double>(), 15.0);  // 0 + 1 + ... + 5
  Tensor z = grid(3, 4);
  z.index_put_({Slice(), tg::tensor({3, 1}).to(tg::kInt64)}, tg::tensor({100.0, 200.0}).to(tg::kFloat64));
  EXPECT_TRUE(tg::equal(z.select(1, 3), tg::full({3}, 100.0, f64)));
  EXPECT_TRUE(tg::equal(z.select(1, 1), tg::full({3}, 200.0, f64)));
  EXPECT_TRUE(tg::equal(z.select(1, 0), grid(3, 4).select(1, 0)));
  EXPECT_ERROR_CONTAINS(z.index_put_({tg::tensor({1, 1}).to(tg::kInt64)}, 0.0), "more than once");
  EXPECT_ERROR_CONTAINS(z.index_put_({0}, tg::rand({5}, f64)),
                        "index_put_: a value of shape [5] does not broadcast to the indexed result's shape [4]");
  EXPECT_ERROR_CONTAINS(z.index({Tensor()}), "index: an index tensor is undefined");
  Tensor strided = grid(4, 3).t();  // [3, 4], strides {1, 3}
  strided.index_put_({tg::tensor({1}).to(tg::kInt64)}, 0.0);
  EXPECT_EQ(strided.select(0, 1).sum().item<double>(), 0.0);
  EXPECT_EQ(strided.sum().item<double>(), grid(4, 3).sum().item<double>() - (1 + 4 + 7 + 10));
  // Differentiable in the old values (where not overwritten) and in value.
  Tensor a = tg::rand({3, 4}, f64).requires_grad_(), v = tg::rand({3, 2}, f64).requires_grad_();
  EXPECT_TRUE(ag::gradcheck(
      [&](const ag::variable_list& in) {
        Tensor t = in[0] * 1.0;
        t.index_put_({Slice(), tg::tensor({2, 0}).to(tg::kInt64)}, in[1]);
        return t * t;
      },
      {a, v}));
  EXPECT_TRUE(ag::gradcheck(
      [&](const ag::variable_list& in) {
        Tensor t = in[0] * 1.0;
        t.index_put_({Slice(1), Slice(None, 2)}, in[1].narrow(0, 0, 2));
        return t.exp();
      },
      {a, v}));
}

TEST(LibtorchHabits, Accessors) {
  Tensor x = tg::zeros({2, 3});
  auto a = x.accessor<float, 2>();
  a[1][2] = 5.0f;
  EXPECT_EQ(x.select(0, 1).select(0, 2).item<float>(), 5.0f);
  EXPECT_EQ(a.size(0), 2);
  EXPECT_EQ(a.size(1), 3);
  Tensor t = grid(3, 2).t();  // strides {1, 2}
  auto at = t.accessor<double, 2>();
  EXPECT_EQ(at[1][2], 5.0);
  EXPECT_EQ(at.stride(0), 1);
  EXPECT_ERROR_CONTAINS(at[2][0], "accessor: index 2 is out of range for a dim of size 2");
  EXPECT_ERROR_CONTAINS(at[0][-1], "accessor: index -1 is out of range");
  EXPECT_ERROR_CONTAINS((x.accessor<float, 3>()), "accessor: asked for 3 dims but the tensor has 2");
  EXPECT_ERROR_CONTAINS((x.accessor<double, 2>()), "data_ptr: expected dtype");
  auto held = tg::ones({4}).accessor<float, 1>();  // keeps the temporary's memory
  EXPECT_EQ(held[3], 1.0f);
}

TEST(LibtorchHabits, GeneratorStateResumesTheStream) {
  tg::manual_seed(42);
  (void)tg::randn({7});
  Tensor state = tg::get_rng_state();
  Tensor a = tg::randn({5}), b = tg::rand({3}), c = tg::randint(0, 100, {4});
  (void)tg::randn({11});  // moves on
  tg::set_rng_state(state);
  EXPECT_TRUE(tg::equal(tg::randn({5}), a));
  EXPECT_TRUE(tg::equal(tg::rand({3}), b));
  EXPECT_TRUE(tg::equal(tg::randint(0, 100, {4}), c));
  EXPECT_ERROR_CONTAINS(tg::set_rng_state(tg::zeros({2})), "set_rng_state: expected the Int64 [2] tensor");
  EXPECT_ERROR_CONTAINS(tg::set_rng_state(tg::zeros({3}, tg::kInt64)), "set_rng_state");
}

TEST(LibtorchHabits, EveryActivationInFunctional) {
  Tensor x = tg::linspace(-4, 4, 41, f64);
  auto near = [&](const Tensor& got, const Tensor& want, const char* what) {
    EXPECT_LT(max_abs(got - want), 1e-12) << what;
  };
  near(F::relu(x), tg::clamp_min(x, Scalar(0.0)), "relu");
  near(F::relu6(x * 2.0), tg::clamp(x * 2.0, Scalar(0.0), Scalar(6.0)), "relu6");
  near(F::gelu(x), tg::gelu(x), "gelu");
  near(F::gelu(x, "tanh"), tg::gelu(x, "tanh"), "gelu tanh");
  near(F::silu(x), x * tg::sigmoid(x), "silu");
  near(F::softmin(x.view({1, -1}), 1), tg::softmax(-x.view({1, -1}), 1), "softmin");
  near(F::logsigmoid(x), tg::log(tg::sigmoid(x)), "logsigmoid");
  near(F::selu(tg::tensor({-1.0, 2.0}, {}, f64)),
       tg::tensor({1.0507009873554805 * 1.6732632423543772 * (std::exp(-1.0) - 1), 2 * 1.0507009873554805}, {}, f64),
       "selu");
  near(F::celu(x, 2.0), tg::where(tg::gt(x, 0.0), x, (tg::exp(x / 2.0) - 1.0) * 2.0), "celu");
  near(F::mish(x), x * tg::tanh(tg::log(tg::exp(x) + 1.0)), "mish");
  near(F::hardtanh(x), tg::clamp(x, Scalar(-1.0), Scalar(1.0)), "hardtanh");
  near(F::hardsigmoid(x), tg::clamp((x + 3.0) / 6.0, Scalar(0.0), Scalar(1.0)), "hardsigmoid");
  near(F::hardswish(x), x * tg::clamp((x + 3.0) / 6.0, Scalar(0.0), Scalar(1.0)), "hardswish");
  near(F::softsign(x), x / (tg::abs(x) + 1.0), "softsign");
  near(F::softshrink(x, 1.0), tg::sign(x) * tg::clamp_min(tg::abs(x) - 1.0, Scalar(0.0)), "softshrink");
  near(F::hardshrink(x, 1.0), x * tg::gt(tg::abs(x), 1.0).to(tg::kFloat64), "hardshrink");
  near(F::threshold(x, 0.5, -9.0), tg::where(tg::gt(x, 0.5), x, tg::full_like(x, -9.0)), "threshold");
  Tensor g = tg::rand({3, 4}, f64);
  near(F::glu(g, 1), g.narrow(1, 0, 2) * tg::sigmoid(g.narrow(1, 2, 2)), "glu");
  near(F::normalize(g, 2.0, 1), g / tg::sqrt((g * g).sum(1, true)), "normalize");
  EXPECT_ERROR_CONTAINS(F::glu(tg::rand({3, 5}), 1), "glu: dim 1 has size 5, which must be even");
  Tensor w = (tg::rand({2, 4}, f64) - 0.5).requires_grad_();
  for (auto fn : std::vector<std::function<Tensor(const Tensor&)>>{
           [](const Tensor& t) { return F::selu(t); }, [](const Tensor& t) { return F::mish(t); },
           [](const Tensor& t) { return F::celu(t, 0.7); }, [](const Tensor& t) { return F::glu(t, 1); },
           [](const Tensor& t) { return F::normalize(t, 2.0, 1); }, [](const Tensor& t) { return F::softsign(t); },
           [](const Tensor& t) { return F::logsigmoid(t); }}) {
    auto f = [&](const ag::variable_list& in) { return fn(in[0]); };
    EXPECT_TRUE(ag::gradcheck(f, {w}));
    EXPECT_TRUE(ag::gradgradcheck(f, {w}));
  }
}

}  // namespace

// ---- module holders (TG_MODULE), as LibTorch's TORCH_MODULE ----

// A custom module written as LibTorch's guides write one.
struct TwoLayerImpl : tg::nn::Module {
  TwoLayerImpl(int64_t in, int64_t hidden, int64_t out) {
    fc1 = register_module("fc1", tg::nn::Linear(in, hidden));
    fc2 = register_module("fc2", tg::nn::Linear(hidden, out));
  }
  Tensor forward(const Tensor& x) override { return fc2(tg::tanh(fc1(x))); }
  tg::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TG_MODULE(TwoLayer);

TEST(LibtorchHabits, ModuleHoldersShareTheirModule) {
  tg::manual_seed(3);
  TwoLayer net(2, 5, 1);
  // The members and the registered children are the same modules.
  auto named = net->named_parameters();
  ASSERT_EQ(named.size(), 4u);
  EXPECT_EQ(named[0].first, "fc1.weight");
  EXPECT_TRUE(named[0].second.is_same(net->fc1->weight));
  EXPECT_TRUE(named[3].second.is_same(net->fc2->bias));
  // operator() forwards to forward, with the holder's module.
  Tensor x = tg::randn({4, 2});
  Tensor want = tg::linear(tg::tanh(tg::linear(x, net->fc1->weight, net->fc1->bias)), net->fc2->weight, net->fc2->bias);
  EXPECT_TRUE(tg::allclose(net(x), want, 0, 0));
  // Copies share: a change through one is seen through the other.
  TwoLayer alias = net;
  alias->fc1->weight.detach().fill_(0.5);
  EXPECT_EQ(net->fc1->weight.max().item<float>(), 0.5f);
  EXPECT_EQ(alias.get(), net.get());
  // Holders convert to the pointers the rest of the library takes.
  std::shared_ptr<tg::nn::Module> as_module = net;
  std::shared_ptr<TwoLayerImpl> as_impl = net;
  EXPECT_EQ(as_module.get(), static_cast<tg::nn::Module*>(net.get()));
  EXPECT_EQ(as_impl.get(), net.get());
  // An empty holder says so instead of dereferencing null, and stays usable.
  tg::nn::Linear empty{nullptr};
  EXPECT_TRUE(empty.is_empty());
  EXPECT_ERROR_CONTAINS(empty->forward(x), "empty module holder of tg::nn::LinearImpl");
  EXPECT_ERROR_CONTAINS(empty(x), "empty module holder");
  empty = tg::nn::Linear(2, 3);
  EXPECT_EQ(empty(x).sizes(), (tg::IntList{4, 3}));
}

TEST(LibtorchHabits, SequentialAndModuleListTakeModulesOneByOne) {
  tg::manual_seed(4);
  tg::nn::Sequential seq(tg::nn::Linear(3, 4), tg::nn::Tanh(), tg::nn::Linear(4, 2));
  ASSERT_EQ(seq->size(), 3u);
  auto l0 = std::dynamic_pointer_cast<tg::nn::LinearImpl>(seq[0]);
  auto l2 = std::dynamic_pointer_cast<tg::nn::LinearImpl>(seq[2]);
  ASSERT_TRUE(l0 && l2);
  Tensor x = tg::randn({5, 3});
  Tensor want = tg::linear(tg::tanh(tg::linear(x, l0->weight, l0->bias)), l2->weight, l2->bias);
  EXPECT_TRUE(tg::allclose(seq(x), want, 0, 0));
  EXPECT_EQ(seq->named_parameters()[2].first, "2.weight");
  // A Sequential first among several nests; alone it is shared.
  tg::nn::Sequential outer(seq, tg::nn::Tanh());
  ASSERT_EQ(outer->size(), 2u);
  EXPECT_TRUE(tg::allclose(outer(x), tg::tanh(want), 0, 0));
  tg::nn::Sequential same(seq);
  EXPECT_EQ(same.get(), seq.get());
  // MLP gives a Sequential holder.
  tg::nn::Sequential mlp = tg::nn::MLP({2, 8, 1});
  EXPECT_EQ(mlp->size(), 3u);
  tg::nn::ModuleList list(tg::nn::Linear(2, 3), tg::nn::Identity(), tg::nn::Dropout(0.1));
  EXPECT_EQ(list->size(), 3u);
  EXPECT_EQ(list[2]->type_name(), "Dropout");
  // Losses as modules keep their two-argument call.
  tg::nn::MSELoss mse;
  Tensor a = tg::tensor({1.0, 2.0}), b = tg::tensor({0.0, 4.0});
  EXPECT_DOUBLE_EQ(mse(a, b).item<double>(), 2.5);
}

// ---- options builders and PyTorch's defaults ----

TEST(LibtorchHabits, OptimizerOptionsChainAsLibtorchAndStayFields) {
  namespace optim = tg::optim;
  auto o = optim::AdamOptions(1e-2).weight_decay(0.01).betas(std::make_tuple(0.8, 0.9)).amsgrad(true);
  EXPECT_EQ(o.lr(), 1e-2);
  EXPECT_EQ(o.weight_decay(), 0.01);
  EXPECT_EQ(o.beta1(), 0.8);
  EXPECT_EQ(std::get<1>(o.betas()), 0.9);
  EXPECT_TRUE(o.amsgrad());
  EXPECT_EQ(o.eps(), 1e-8);  // untouched: PyTorch's default
  // The fields as before: assigned, read, positional braces.
  optim::AdamOptions f;
  f.lr = 0.5;
  const double r = f.lr;
  EXPECT_EQ(r, 0.5);
  EXPECT_EQ(f.lr * 2, 1.0);
  optim::AdamOptions pos{1e-3, 0.7};
  EXPECT_EQ(pos.beta1(), 0.7);
  EXPECT_EQ(pos.beta2(), 0.999);
  auto s = optim::SGDOptions(0.1).momentum(0.9).nesterov(true);
  EXPECT_EQ(s.lr(), 0.1);
  EXPECT_EQ(s.momentum(), 0.9);
  EXPECT_TRUE(s.nesterov());
  EXPECT_EQ(optim::AdamWOptions().weight_decay(), 1e-2);
  EXPECT_EQ(optim::AdamWOptions(3e-4).lr(), 3e-4);
  auto l = optim::LBFGSOptions(1).max_iter(5).line_search_fn("strong_wolfe");
  EXPECT_TRUE(l.strong_wolfe);
  EXPECT_EQ(l.max_iter(), 5);
  EXPECT_EQ(l.line_search_fn().value_or(""), "strong_wolfe");
  EXPECT_ERROR_CONTAINS(optim::LBFGSOptions().line_search_fn(std::string("backtracking")),
                        "expected \"strong_wolfe\" or none, got \"backtracking\"");
  // Chained and field-set options give the same training.
  auto run = [](const optim::AdamOptions& opts) {
    Tensor w = tg::tensor({1.0, -2.0, 0.5}, {3}, tg::kFloat64).requires_grad_();
    optim::Adam opt({w}, opts);
    for (int i = 0; i < 3; ++i) {
      opt.zero_grad();
      (w * w).sum().backward();
      opt.step();
    }
    return w.detach();
  };
  optim::AdamOptions byfield;
  byfield.lr = 0.1;
  byfield.weight_decay = 0.05;
  byfield.amsgrad = true;
  EXPECT_TRUE(tg::equal(run(optim::AdamOptions(0.1).weight_decay(0.05).amsgrad(true)), run(byfield)));
}

TEST(LibtorchHabits, EachOptimizerHasPyTorchsDefaults) {
  namespace optim = tg::optim;
  EXPECT_EQ(optim::RMSprop::defaults().lr(), 1e-2);
  EXPECT_EQ(optim::RMSprop::defaults().alpha(), 0.99);
  EXPECT_EQ(optim::Adagrad::defaults().lr(), 1e-2);
  EXPECT_EQ(optim::Adagrad::defaults().eps(), 1e-10);
  EXPECT_EQ(optim::Adamax::defaults().lr(), 2e-3);
  EXPECT_EQ(optim::NAdam::defaults().lr(), 2e-3);
  EXPECT_EQ(optim::NAdam::defaults().momentum_decay(), 4e-3);
  EXPECT_EQ(optim::RAdam::defaults().lr(), 1e-3);
  EXPECT_EQ(optim::AdamOptions().lr(), 1e-3);
  EXPECT_EQ(optim::SGDOptions().lr(), 1e-3);
  EXPECT_EQ(optim::LBFGSOptions().lr(), 1.0);
  // RMSprop(params) steps with lr 1e-2: from p = 1 (loss p^2, g = 2) the first
  // step is lr g / sqrt((1 - alpha) g^2) = 0.1 (it would be 0.01 with 1e-3).
  Tensor w = tg::tensor({1.0}, {1}, tg::kFloat64).requires_grad_();
  optim::RMSprop opt({w});
  (w * w).sum().backward();
  opt.step();
  EXPECT_NEAR(w.item<double>(), 0.9, 1e-6);
}

// ---- scheduler state and checkpoints ----

// A training run that draws from the generator every step (a random
// minibatch, Dropout), with Adam and a StepLR; `steps` steps from `start`.
struct TrainingRun {
  tg::nn::Sequential net{nullptr};
  std::unique_ptr<tg::optim::Adam> opt;
  std::unique_ptr<tg::optim::StepLR> sched;
  Tensor x, y;
  explicit TrainingRun(uint64_t seed) {
    tg::manual_seed(seed);
    net = tg::nn::Sequential(tg::nn::Linear(2, 8), tg::nn::Tanh(), tg::nn::Dropout(0.25), tg::nn::Linear(8, 1));
    net->to(tg::kFloat64);
    opt = std::make_unique<tg::optim::Adam>(net->parameters(), tg::optim::AdamOptions(1e-2).weight_decay(1e-3));
    sched = std::make_unique<tg::optim::StepLR>(*opt, 3, 0.5);
    x = tg::linspace(-1.0, 1.0, 128, tg::kFloat64).reshape({64, 2});  // the data: the same in every run
    y = tg::sin(x.sum(1, true));
  }
  void train(int steps) {
    for (int i = 0; i < steps; ++i) {
      Tensor idx = tg::randint(0, 64, {16});
      opt->zero_grad();
      tg::square(net(x.index({idx})) - y.index({idx})).mean().backward();
      opt->step();
      sched->step();
    }
  }
};

TEST(LibtorchHabits, CheckpointResumesBitwiseWithGeneratorAndScheduler) {
  TrainingRun straight(11);
  straight.train(10);
  const std::string path = ::testing::TempDir() + "tg_checkpoint_resume.safetensors";
  {
    TrainingRun first(11);
    first.train(4);
    tg::optim::save_checkpoint(path, *first.net, *first.opt, 4, {first.sched.get()});
  }
  TrainingRun resumed(99);  // other initial values and generator position
  (void)tg::rand({1000});   // the generator moved on
  EXPECT_EQ(tg::optim::load_checkpoint(path, *resumed.net, *resumed.opt, {resumed.sched.get()}), 4);
  EXPECT_EQ(resumed.sched->epoch(), 4);
  EXPECT_EQ(resumed.opt->lr(0), straight.opt->lr(0) * 4);  // epoch 4 of StepLR(3, 0.5) against epoch 10
  resumed.train(6);
  auto a = straight.net->parameters(), b = resumed.net->parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(tg::equal(a[i], b[i])) << "parameter " << i;
  EXPECT_EQ(straight.opt->lr(0), resumed.opt->lr(0));
  // Without the generator state the resumed run would differ (the check can fail).
  TrainingRun no_rng(99);
  tg::optim::load_checkpoint(path, *no_rng.net, *no_rng.opt, {no_rng.sched.get()});
  tg::manual_seed(5);
  no_rng.train(6);
  EXPECT_FALSE(tg::equal(straight.net->parameters()[0], no_rng.net->parameters()[0]));
  // Bad files and mismatched parts name what is wrong, and change nothing after the check.
  EXPECT_ERROR_CONTAINS(tg::optim::load_checkpoint(path, *no_rng.net, *no_rng.opt),
                        "holds an epoch scheduler's state but none was passed");
  const std::string module_only = ::testing::TempDir() + "tg_checkpoint_module.safetensors";
  tg::nn::save(*no_rng.net, module_only);
  EXPECT_ERROR_CONTAINS(tg::optim::load_checkpoint(module_only, *no_rng.net, *no_rng.opt),
                        "not a save_checkpoint file");
  TrainingRun other(3);
  tg::nn::Sequential wider(tg::nn::Linear(2, 9));
  EXPECT_ERROR_CONTAINS(tg::optim::load_checkpoint(path, *wider, *other.opt, {other.sched.get()}),
                        "restoring the module failed");
  std::remove(path.c_str());
  std::remove(module_only.c_str());
}

TEST(LibtorchHabits, SchedulerStateDictsResume) {
  auto make = [](double lr) {
    Tensor w = tg::ones({2}, tg::kFloat64).requires_grad_();
    return std::make_unique<tg::optim::SGD>(std::vector<Tensor>{w}, tg::optim::SGDOptions(lr));
  };
  const std::vector<double> metrics = {5, 4, 4, 4, 4, 3, 3, 3, 3, 3, 3, 2};
  auto straight = make(1.0);
  tg::optim::ReduceLROnPlateau plateau(*straight, 0.5, 2, 1e-4, 1);
  std::vector<double> want;
  for (double m : metrics) {
    plateau.step(m);
    want.push_back(straight->lr(0));
  }
  EXPECT_LT(want.back(), 1.0);  // it did lower the rate
  // Stopped after 5 metrics: the optimizer's and the scheduler's states carry on.
  auto first = make(1.0);
  tg::optim::ReduceLROnPlateau p1(*first, 0.5, 2, 1e-4, 1);
  for (size_t i = 0; i < 5; ++i)
    p1.step(metrics[i]);
  auto second = make(1.0);
  second->load_state_dict(first->state_dict());
  tg::optim::ReduceLROnPlateau p2(*second, 0.5, 2, 1e-4, 1);
  p2.load_state_dict(p1.state_dict());
  EXPECT_EQ(p2.best(), 4.0);
  for (size_t i = 5; i < metrics.size(); ++i) {
    p2.step(metrics[i]);
    EXPECT_EQ(second->lr(0), want[i]) << "metric " << i;
  }
  EXPECT_ERROR_CONTAINS(p2.load_state_dict({{"best", tg::full({}, 1.0)}}),
                        "ReduceLROnPlateau.load_state_dict: no \"num_bad_epochs\" in the state");
  EXPECT_ERROR_CONTAINS(p2.load_state_dict({{"best", tg::full({}, 1.0)},
                                            {"num_bad_epochs", tg::full({}, -1.0)},
                                            {"cooldown_counter", tg::full({}, 0.0)}}),
                        "\"num_bad_epochs\" must be a whole number in [0, 2^53], got -1");
  // An epoch scheduler: its epoch and base rates.
  auto o = make(0.2);
  tg::optim::CosineAnnealingLR cos(*o, 10, 0.01);
  for (int i = 0; i < 3; ++i)
    cos.step();
  auto o2 = make(0.7);  // another base rate: the saved one wins
  tg::optim::CosineAnnealingLR cos2(*o2, 10, 0.01);
  cos2.load_state_dict(cos.state_dict());
  EXPECT_EQ(cos2.epoch(), 3);
  EXPECT_EQ(o2->lr(0), o->lr(0));
  EXPECT_EQ(o2->initial_lr(0), 0.2);
  EXPECT_ERROR_CONTAINS(
      cos2.load_state_dict({{"last_epoch", tg::full({}, 1.0)}, {"base_lrs", tg::full({2}, 0.1, tg::kFloat64)}}),
      "\"base_lrs\" must be a tensor of 1 values");
  EXPECT_EQ(cos2.epoch(), 3);  // unchanged by the refused state
}

// What the adversary of the options, holders and checkpoints found (each was
// wrong before its fix).
static_assert(!std::is_copy_constructible<tg::optim::SGDOptions::lr_arg>::value,
              "auto x = o.lr would copy the field out of its options (its chained setter would then write "
              "past it)");
static_assert(std::is_copy_constructible<tg::optim::SGDOptions>::value, "options copy whole");

// Modules and losses from LibTorch's options structs: each option reaches
// the module (its shapes, buffers and values against the positional form).
TEST(LibtorchHabits, ModuleAndLossOptionsChainAsLibtorch) {
  namespace nn = tg::nn;
  nn::Linear lin(nn::LinearOptions(2, 3).bias(false));
  EXPECT_FALSE(lin->bias.defined());
  EXPECT_EQ(lin->weight.sizes(), tg::IntList({3, 2}));
  nn::Conv2d conv(nn::Conv2dOptions(2, 4, 3).padding(1).stride({2, 1}).bias(false).padding_mode("circular"));
  nn::Conv2d pos(2, 4, {3}, {2, 1}, {1}, {1}, 1, false, "circular");
  pos->weight = conv->weight;
  Tensor x = tg::randn({1, 2, 6, 5}, f64);
  conv->to(tg::kFloat64);
  pos->to(tg::kFloat64);
  EXPECT_FALSE(conv->bias.defined());
  EXPECT_EQ(conv->forward(x).sizes(), tg::IntList({1, 4, 3, 5}));
  EXPECT_TRUE(tg::allclose(conv->forward(x), pos->forward(x)));
  nn::ConvTranspose2d up(nn::ConvTranspose2dOptions(2, 3, 3).stride(2).padding(1).output_padding(1));
  EXPECT_EQ(up->forward(tg::randn({1, 2, 4, 4})).sizes(), tg::IntList({1, 3, 8, 8}));
  nn::Conv1d c1(nn::Conv1dOptions(4, 4, 3).groups(2).dilation(2));
  EXPECT_EQ(c1->weight.sizes(), tg::IntList({4, 2, 3}));
  EXPECT_EQ(c1->forward(tg::randn({1, 4, 9})).sizes(), tg::IntList({1, 4, 5}));
  nn::GroupNorm gn(nn::GroupNormOptions(2, 4).eps(1e-2).affine(false));
  EXPECT_FALSE(gn->weight.defined());
  Tensor g = tg::randn({2, 4, 3}) * 0.1;
  EXPECT_TRUE(tg::allclose(gn->forward(g), tg::group_norm(g, 2, {}, {}, 1e-2)));
  EXPECT_FALSE(tg::allclose(gn->forward(g), tg::group_norm(g, 2)));  // the eps reached the module
  nn::BatchNorm2d bn(nn::BatchNorm2dOptions(3).momentum(0.5).track_running_stats(false));
  EXPECT_FALSE(bn->running_mean.defined());
  nn::BatchNorm1d bn1(nn::BatchNorm1dOptions(3).momentum(0.5));
  Tensor b = tg::randn({4, 3}) + 2.0;
  bn1->forward(b);
  EXPECT_LT(max_abs(bn1->running_mean - b.mean(0) * 0.5), 1e-6);
  nn::InstanceNorm2d in(nn::InstanceNorm2dOptions(3).affine(true));
  EXPECT_TRUE(in->weight.defined());
  nn::LayerNorm ln(nn::LayerNormOptions({4}).elementwise_affine(false).eps(1e-3));
  EXPECT_FALSE(ln->weight.defined());
  nn::Dropout drop(nn::DropoutOptions(0.25));
  EXPECT_NE(drop->extra_repr().find("0.25"), std::string::npos) << drop->extra_repr();
  nn::Embedding emb(nn::EmbeddingOptions(10, 3).padding_idx(-1));
  ASSERT_TRUE(emb->padding_idx().has_value());
  EXPECT_EQ(*emb->padding_idx(), 9);
  // Pooling and upsampling.
  Tensor img = tg::randn({1, 2, 6, 6}, f64);
  nn::MaxPool2d mp(nn::MaxPool2dOptions(3).stride(2).padding(1));
  EXPECT_TRUE(tg::equal(mp(img), tg::max_pool2d(img, {3}, {2}, {1})));
  nn::AvgPool2d ap(nn::AvgPool2dOptions({2, 3}).count_include_pad(false).padding(1));
  EXPECT_TRUE(tg::allclose(ap(img), tg::avg_pool2d(img, {2, 3}, {}, {1}, false, false)));
  nn::AvgPool2d braced({2});  // a braced list is still the kernel size
  EXPECT_EQ(braced(img).sizes(), tg::IntList({1, 2, 3, 3}));
  nn::AdaptiveAvgPool2d aap(nn::AdaptiveAvgPool2dOptions(1));
  EXPECT_EQ(aap(img).sizes(), tg::IntList({1, 2, 1, 1}));
  nn::Upsample upsample(nn::UpsampleOptions().scale_factor({2.0, 2.0}).mode("bilinear").align_corners(false));
  EXPECT_TRUE(tg::allclose(upsample(img), tg::interpolate(img, {}, {2.0, 2.0}, "bilinear", false)));
  // The losses: functional forms with LibTorch's FuncOptions, and modules.
  Tensor logits = tg::randn({5, 4}, f64), labels = tg::randint(0, 4, {5}), w = tg::rand({4}, f64) + 0.5;
  EXPECT_TRUE(tg::allclose(
      F::cross_entropy(logits, labels, F::CrossEntropyFuncOptions().label_smoothing(0.1).reduction(tg::kSum).weight(w)),
      F::cross_entropy(logits, labels, w, tg::nn::Reduction::kSum, -100, 0.1)));
  nn::CrossEntropyLoss ce(nn::CrossEntropyLossOptions().ignore_index(int64_t(1)));
  EXPECT_TRUE(tg::allclose(ce(logits, labels), F::cross_entropy(logits, labels, {}, tg::kMean, 1)));
  Tensor p = tg::randn({3, 4}, f64), q = tg::randn({3, 4}, f64);
  EXPECT_TRUE(tg::allclose(F::mse_loss(p, q, F::MSELossFuncOptions().reduction(tg::kSum)), ((p - q) * (p - q)).sum()));
  EXPECT_EQ(F::l1_loss(p, q, F::L1LossFuncOptions().reduction(tg::kNone)).sizes(), p.sizes());
  EXPECT_TRUE(tg::allclose(F::smooth_l1_loss(p, q, F::SmoothL1LossFuncOptions().beta(0.5)),
                           F::smooth_l1_loss(p, q, tg::kMean, 0.5)));
  EXPECT_TRUE(
      tg::allclose(F::huber_loss(p, q, F::HuberLossFuncOptions().delta(0.3)), F::huber_loss(p, q, tg::kMean, 0.3)));
  Tensor lp = tg::log_softmax(logits, 1);
  EXPECT_TRUE(tg::allclose(F::nll_loss(lp, labels, F::NLLLossFuncOptions().weight(w)), F::nll_loss(lp, labels, w)));
  Tensor pr = tg::rand({3, 4}, f64) * 0.8 + 0.1, t = tg::rand({3, 4}, f64), pw = tg::rand({4}, f64) + 1.0;
  EXPECT_TRUE(tg::allclose(F::binary_cross_entropy(pr, t, F::BinaryCrossEntropyFuncOptions().weight(pr)),
                           F::binary_cross_entropy(pr, t, pr)));
  EXPECT_TRUE(tg::allclose(
      F::binary_cross_entropy_with_logits(p, t, F::BinaryCrossEntropyWithLogitsFuncOptions().pos_weight(pw)),
      F::binary_cross_entropy_with_logits(p, t, {}, tg::kMean, pw)));
  EXPECT_TRUE(tg::allclose(F::kl_div(lp, lp, F::KLDivFuncOptions().log_target(true).reduction(tg::kBatchMean)),
                           F::kl_div(lp, lp, tg::kBatchMean, true)));
  nn::MSELoss mse(nn::MSELossOptions().reduction(tg::kSum));
  EXPECT_TRUE(tg::allclose(mse(p, q), ((p - q) * (p - q)).sum()));
  nn::HuberLoss hub(nn::HuberLossOptions().delta(0.3));
  EXPECT_TRUE(tg::allclose(hub(p, q), F::huber_loss(p, q, tg::kMean, 0.3)));
  // Still fields: read and set as before.
  nn::CrossEntropyLossOptions o;
  o.label_smoothing = 0.2;
  const double ls = o.label_smoothing;
  EXPECT_EQ(ls, 0.2);
  EXPECT_EQ(o.ignore_index(), -100);
}

TEST(LibtorchHabits, AdversaryFindingsStayFixed) {
  namespace optim = tg::optim;
  Tensor w = tg::ones({2}, tg::kFloat64).requires_grad_();
  // A bare rate or {} converts to the rule's own options, keeping its other defaults (as LibTorch).
  {
    Tensor p = tg::ones({1}, tg::kFloat64).requires_grad_();
    optim::AdamW aw({p}, 1e-1);  // weight decay 1e-2: p *= 1 - 0.1 * 0.01 with a zero gradient
    (p * 0.0).sum().backward();
    aw.step();
    EXPECT_DOUBLE_EQ(p.item<double>(), 1 - 0.1 * 0.01);
    Tensor q = tg::ones({1}, tg::kFloat64).requires_grad_();
    optim::Adagrad ag({q}, 0.1);  // eps 1e-10: the first step is lr exactly (1e-8 would show)
    (q * 1e-6).sum().backward();
    ag.step();
    EXPECT_NEAR(q.item<double>(), 1 - 0.1 * 1e-6 / (1e-6 + 1e-10), 1e-15);
    Tensor r = tg::ones({1}, tg::kFloat64).requires_grad_();
    optim::RMSprop rms({r}, {});
    (r * r).sum().backward();
    rms.step();
    EXPECT_NEAR(r.item<double>(), 0.9, 1e-6);  // lr 1e-2
  }
  // Rates and weight decays are finite at construction, as load_state_dict requires.
  EXPECT_ERROR_CONTAINS(optim::SGD({w}, optim::SGDOptions(INFINITY)), "learning rate must be finite and >= 0");
  EXPECT_ERROR_CONTAINS(optim::AdamW({w}, optim::AdamWOptions().weight_decay(INFINITY)),
                        "weight_decay finite and >= 0");
  EXPECT_ERROR_CONTAINS(optim::SGD({w}, optim::SGDOptions(0.1).momentum(0.9).dampening(NAN)), "dampening not NaN");
  // Sequential's [] past the end is a tg::Error.
  tg::nn::Sequential s(tg::nn::Linear(2, 2));
  EXPECT_ERROR_CONTAINS(s[5], "Sequential: no module 5 (it holds 1)");
  // A checkpoint's scheduler must schedule its optimizer.
  tg::nn::Linear net(2, 1);
  optim::Adam adam(net->parameters());
  optim::SGD other({w});
  optim::StepLR foreign(other, 1, 0.1);
  const std::string path = ::testing::TempDir() + "tg_checkpoint_adversary.safetensors";
  EXPECT_ERROR_CONTAINS(optim::save_checkpoint(path, *net, adam, 0, {&foreign}),
                        "schedules another optimizer than the one passed");
  optim::StepLR own(adam, 1, 0.1);
  optim::save_checkpoint(path, *net, adam, 7, {&own});
  EXPECT_ERROR_CONTAINS(optim::load_checkpoint(path, *net, adam, {&foreign}),
                        "schedules another optimizer than the one passed");
  EXPECT_EQ(optim::load_checkpoint(path, *net, adam, {&own}), 7);
  // The step is digits only; anything else is refused before anything changes.
  auto tensors = tg::nn::load_safetensors(path);
  for (const char* bad : {" 5", "+5", "5 ", "1e3", "-1", "", "99999999999999999999"}) {
    tg::nn::save_safetensors(path, tensors, {{"format", "tapegrad-checkpoint-1"}, {"step", bad}});
    SCOPED_TRACE(bad);
    EXPECT_ERROR_CONTAINS(optim::load_checkpoint(path, *net, adam, {&own}), "is not a whole number");
  }
  tg::nn::save_safetensors(path, tensors, {{"format", "tapegrad-checkpoint-1"}});
  EXPECT_ERROR_CONTAINS(optim::load_checkpoint(path, *net, adam, {&own}), "its metadata has no step");
  // A generator state of another shape is refused before any part is restored.
  auto bad_rng = tensors;
  for (auto& [k, v] : bad_rng)
    if (k == "rng_state") v = tg::zeros({3}, tg::kInt64);
  tg::nn::save_safetensors(path, bad_rng, {{"format", "tapegrad-checkpoint-1"}, {"step", "3"}});
  const double before = net->weight.sum().item<double>();
  net->weight.detach().add_(1.0);
  EXPECT_ERROR_CONTAINS(optim::load_checkpoint(path, *net, adam, {&own}), "its random generator state is Int64 [3]");
  EXPECT_NEAR(net->weight.sum().item<double>(), before + 2.0, 1e-5);  // the module was not restored
  std::remove(path.c_str());
  // A key twice in a scheduler state is refused.
  EXPECT_ERROR_CONTAINS(own.load_state_dict({{"last_epoch", tg::full({}, 0.0)},
                                             {"last_epoch", tg::full({}, 7.0)},
                                             {"base_lrs", tg::full({1}, 1e-3, tg::kFloat64)}}),
                        "\"last_epoch\" is in the state 2 times");
}
