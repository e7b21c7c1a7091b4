// The engine: grad/backward semantics, exec_info and trimming, accumulation
// rules, saved tensors, hooks, custom functions, errors, threads.
#include <atomic>
#include <cmath>
#include <string>
#include <thread>

#include "autograd/accumulate_grad.h"
#include "autograd/input_buffer.h"
#include <tapegrad/tensor/raw.h>

#include "reference.h"

namespace {

using tg::Tensor;
using tg::autograd::AutogradContext;
using tg::autograd::variable_list;
namespace ag = tg::autograd;

const tg::TensorOptions kF64 = tg::TensorOptions().dtype(tg::kFloat64);

Tensor vec(std::vector<double> v, bool rg = true) {
  Tensor t = tg::tensor(v, {}, kF64);
  if (rg) t.requires_grad_(true);
  return t;
}
std::vector<double> V(const Tensor& t) { return t.to_vector<double>(); }

TEST(Engine, BackwardAccumulatesIntoLeaves) {
  Tensor x = vec({1, 2, 3}), w = vec({4, 5, 6});
  Tensor y = (x * w).sum();
  EXPECT_FALSE(y.is_leaf());
  EXPECT_TRUE(x.is_leaf());
  EXPECT_EQ(y.grad_fn()->name(), "SumBackward");
  y.backward({}, true);
  EXPECT_EQ(V(x.grad()), (std::vector<double>{4, 5, 6}));
  EXPECT_EQ(V(w.grad()), (std::vector<double>{1, 2, 3}));
  const tg::TensorImpl* first = x.grad().impl();
  y.backward();  // accumulates in place: .grad keeps its identity
  EXPECT_EQ(V(x.grad()), (std::vector<double>{8, 10, 12}));
  EXPECT_EQ(x.grad().impl(), first);
}

TEST(Engine, GradDoesNotTouchDotGrad) {
  Tensor x = vec({1, 2}), w = vec({3, 4});
  Tensor y = (x * w).sum();
  auto g = ag::grad({y}, {x});
  EXPECT_EQ(V(g[0]), (std::vector<double>{3, 4}));
  EXPECT_FALSE(x.grad().defined());
  EXPECT_FALSE(w.grad().defined());
  EXPECT_FALSE(g[0].requires_grad());
}

TEST(Engine, CreateGraphGivesHigherOrders) {
  Tensor x = vec({0.5, -2});
  Tensor y = (x * x * x).sum();
  Tensor g = ag::grad({y}, {x}, {}, std::nullopt, true)[0];  // 3x^2
  EXPECT_TRUE(g.requires_grad());
  Tensor h = ag::grad({g.sum()}, {x}, {}, std::nullopt, true)[0];  // 6x
  EXPECT_EQ(V(h), (std::vector<double>{3, -12}));
  Tensor t = ag::grad({h.sum()}, {x})[0];  // 6
  EXPECT_EQ(V(t), (std::vector<double>{6, 6}));
  // backward(create_graph) into .grad, then differentiate .grad again.
  Tensor z = vec({2});
  (z * z * z).sum().backward({}, std::nullopt, true);
  EXPECT_TRUE(z.grad().requires_grad());
  EXPECT_EQ(V(ag::grad({z.grad().sum()}, {z})[0]), (std::vector<double>{12}));
  z.mutable_grad() = Tensor();  // .grad with history references z: break the cycle
}

TEST(Engine, RetainGradAndHooks) {
  Tensor x = vec({1, 2});
  Tensor h = x * 3.0;
  h.retain_grad();
  int calls = 0;
  auto handle = h.register_hook([&](const Tensor& g) {
    ++calls;
    return g * 2.0;  // replaces the gradient
  });
  Tensor y = (h * h).sum();
  y.backward({}, true);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(V(h.grad()), (std::vector<double>{12, 24}));  // after the hook
  EXPECT_EQ(V(x.grad()), (std::vector<double>{36, 72}));
  handle.remove();
  x.mutable_grad() = Tensor();
  y.backward();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(V(x.grad()), (std::vector<double>{18, 36}));
  // Leaf hooks and post-accumulate-grad hooks.
  Tensor w = vec({1});
  std::vector<double> seen;
  w.register_hook([](const Tensor& g) { return g + 1.0; });
  w.register_post_accumulate_grad_hook([&](const Tensor& p) { seen.push_back(V(p.grad())[0]); });
  (w * 5.0).sum().backward({}, true);
  (w * 5.0).sum().backward();
  EXPECT_EQ(seen, (std::vector<double>{6, 12}));
  EXPECT_ERROR_CONTAINS(vec({1}, false).register_hook([](const Tensor& g) { return g; }),
                        "register_hook: cannot register a hook on a tensor that doesn't require gradient");
  // A hook's result must be a gradient of the same shape, dtype and device:
  // a leaf whose .grad changed shape silently wrecked an optimizer's step.
  Tensor z = vec({1, 2, 3});
  auto bad = z.register_hook([](const Tensor&) { return tg::ones({5}, tg::kFloat64); });
  EXPECT_ERROR_CONTAINS((z * 2.0).sum().backward(),
                        "AccumulateGrad: a tensor hook on the leaf returned a Float64 "
                        "[5] on cpu gradient for a Float64 [3] on cpu one");
  EXPECT_FALSE(z.grad().defined());
  bad.remove();
  auto wrong_dtype = z.register_hook([](const Tensor& g) { return g.to(tg::kFloat32); });
  EXPECT_ERROR_CONTAINS((z * 2.0).sum().backward(), "returned a Float32 [3]");
  wrong_dtype.remove();
  Tensor mid = z * 3.0;  // on a non-leaf too
  mid.register_hook([](const Tensor& g) { return g.sum(); });
  EXPECT_ERROR_CONTAINS(mid.sum().backward(),
                        "MulBackward: a tensor hook on input 0 returned a Float64 [] on cpu "
                        "gradient");
  (z * 2.0).sum().backward();  // usable afterwards
  EXPECT_EQ(V(z.grad()), (std::vector<double>{2, 2, 2}));
}

TEST(Engine, BackwardInputsOnlyAccumulatesThere) {
  Tensor x = vec({1, 2}), w = vec({3, 4});
  Tensor h = x * w;
  int h_node_runs = 0;
  h.grad_fn()->add_post_hook([&](const variable_list&, const variable_list&) { ++h_node_runs; });
  Tensor y = (h * h).sum();
  y.backward({}, true, false, {w});
  EXPECT_TRUE(w.grad().defined());
  EXPECT_FALSE(x.grad().defined());
  // A non-leaf input: its gradient is captured, its own node does not run.
  int before = h_node_runs;
  y.backward({}, true, false, {h});
  EXPECT_EQ(h_node_runs, before);
  EXPECT_EQ(V(h.grad()), (std::vector<double>{6, 16}));
  EXPECT_FALSE(x.grad().defined());
  // grad() w.r.t. a non-leaf does not run that node either.
  ag::grad({y}, {h}, {}, true);
  EXPECT_EQ(h_node_runs, before);
  y.backward();
  EXPECT_EQ(h_node_runs, before + 1);
}

TEST(Engine, PrunesOldGraphByTopologicalNumber) {
  // A long old chain; grad w.r.t. an intermediate runs only the new part.
  Tensor x = vec({1});
  Tensor h = x;
  std::atomic<int> runs{0};
  for (int i = 0; i < 50; ++i) {
    h = h * 1.0;
    h.grad_fn()->add_post_hook([&](const variable_list&, const variable_list&) { ++runs; });
  }
  Tensor mid = h;
  Tensor y = (mid * 2.0).sum();
  EXPECT_EQ(V(ag::grad({y}, {mid})[0]), (std::vector<double>{2}));
  EXPECT_EQ(runs.load(), 0);
}

TEST(Engine, EdgeTrimmingSkipsWeightGemms) {
  tg::manual_seed(3);
  Tensor x = tg::randn({8, 4}, kF64).requires_grad_();
  std::vector<Tensor> ws;
  for (int i = 0; i < 4; ++i)
    ws.push_back(tg::randn({4, 4}, kF64).requires_grad_());
  auto forward = [&] {
    Tensor h = x;
    for (auto& w : ws)
      h = tg::tanh(tg::linear(h, w));
    return h.sum();
  };
  Tensor y = forward();
  uint64_t before = tg::raw::gemm_calls();
  Tensor g_on = ag::grad({y}, {x}, {}, true)[0];
  uint64_t trimmed = tg::raw::gemm_calls() - before;
  EXPECT_EQ(trimmed, 4u);  // one input-gradient GEMM per layer, no weight GEMM
  ag::set_edge_trimming(false);
  before = tg::raw::gemm_calls();
  Tensor g_off = ag::grad({y}, {x}, {}, true)[0];
  uint64_t untrimmed = tg::raw::gemm_calls() - before;
  // Under create_graph the weight GEMMs run (each a node of the new graph);
  // without, their products go to AccumulateGrad nodes that do not run and
  // are never formed.
  before = tg::raw::gemm_calls();
  Tensor g_off_graph = ag::grad({y}, {x}, {}, true, /*create_graph=*/true)[0];
  uint64_t untrimmed_graph = tg::raw::gemm_calls() - before;
  ag::set_edge_trimming(true);
  EXPECT_EQ(untrimmed, tg::autograd::detail::products_enabled() ? 4u : 8u);
  EXPECT_EQ(untrimmed_graph, 8u);
  EXPECT_TRUE(tg::equal(g_on, g_off));
  EXPECT_TRUE(tg::equal(g_on, g_off_graph));
  // The weight gradient alone skips the input GEMM of the first layer only.
  before = tg::raw::gemm_calls();
  ag::grad({y}, {ws[0]});
  EXPECT_EQ(tg::raw::gemm_calls() - before, 4u);  // 3 input GEMMs + 1 weight GEMM
}

struct Scale : ag::Function<Scale> {
  static std::vector<bool> seen;
  static Tensor forward(AutogradContext* ctx, Tensor a, Tensor b) {
    ctx->save_for_backward({a, b});
    return a * b;
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    seen = {ctx->needs_input_grad(0), ctx->needs_input_grad(1)};
    auto s = ctx->get_saved_variables();
    return {ctx->needs_input_grad(0) ? g[0] * s[1] : Tensor(), ctx->needs_input_grad(1) ? g[0] * s[0] : Tensor()};
  }
};
std::vector<bool> Scale::seen;

TEST(Engine, CustomFunctionSeesTrimmedInputs) {
  Tensor a = vec({2}), b = vec({3});
  Tensor y = Scale::apply(a, b).sum();
  EXPECT_EQ(y.grad_fn()->next_edge(0).function->name(), "ScaleBackward");
  EXPECT_EQ(V(ag::grad({y}, {a}, {}, true)[0]), (std::vector<double>{3}));
  EXPECT_EQ(Scale::seen, (std::vector<bool>{true, false}));
  EXPECT_EQ(V(ag::grad({y}, {b}, {}, true)[0]), (std::vector<double>{2}));
  EXPECT_EQ(Scale::seen, (std::vector<bool>{false, true}));
  y.backward();
  EXPECT_EQ(Scale::seen, (std::vector<bool>{true, true}));
  // gradcheck and gradgradcheck accept it.
  auto fn = [](const variable_list& v) { return Scale::apply(v[0], v[1]); };
  EXPECT_TRUE(ag::gradcheck(fn, {vec({1, 2}), vec({3, -1})}).ok);
  EXPECT_TRUE(ag::gradgradcheck(fn, {vec({1, 2}), vec({3, -1})}).ok);
}

// Several outputs at once (a root node joins them): grad and backward sum
// each output's contribution, with and without grad_outputs.
TEST(Engine, SeveralOutputsContributeTheirGradients) {
  Tensor x = vec({1, 2, 3}), w = vec({0.5, -1, 2});
  Tensor y1 = x * 2.0, y2 = x * w;
  auto g = ag::grad({y1, y2}, {x, w}, {vec({1, 1, 1}), vec({1, 0, 2})});
  EXPECT_EQ(V(g[0]), (std::vector<double>{2 + 0.5, 2 + 0, 2 + 4}));
  EXPECT_EQ(V(g[1]), (std::vector<double>{1, 0, 6}));
  Tensor z1 = (x * w).sum(), z2 = (x * x).sum();
  auto h = ag::grad({z1, z2}, {x}, {}, /*retain_graph=*/true);
  EXPECT_EQ(V(h[0]), (std::vector<double>{0.5 + 2, -1 + 4, 2 + 6}));
  ag::backward({z1, z2}, {});
  EXPECT_EQ(V(x.grad()), (std::vector<double>{2.5, 3, 8}));
  EXPECT_EQ(V(w.grad()), (std::vector<double>{1, 2, 3}));
}

// A list argument: its tensors are inputs one by one; backward returns one
// gradient per tensor (the lists flattened), here with a scalar argument
// after the list.
struct WeightedSquares : ag::Function<WeightedSquares> {
  static Tensor forward(AutogradContext* ctx, variable_list xs, double w) {
    ctx->save_for_backward(xs);
    ctx->saved_data["w"] = w;
    Tensor s = xs[0].square().sum() * w;
    for (size_t i = 1; i < xs.size(); ++i)
      s = s + xs[i].square().sum() * (w * double(i + 1));
    return s;
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    auto xs = ctx->get_saved_variables();
    const double w = std::any_cast<double>(ctx->saved_data["w"]);
    variable_list out;
    for (size_t i = 0; i < xs.size(); ++i)
      out.push_back(g[0] * xs[i] * (2 * w * double(i + 1)));
    return out;
  }
};

TEST(Engine, CustomFunctionTakesListsOfTensors) {
  Tensor a = vec({1, 2}), b = vec({3}), c = vec({-1, 0.5, 2});
  Tensor y = WeightedSquares::apply(variable_list{a, b, c}, 0.5);
  EXPECT_DOUBLE_EQ(y.item<double>(), 0.5 * 5 + 1.0 * 9 + 1.5 * 5.25);
  auto g = ag::grad({y}, {a, b, c});
  EXPECT_EQ(V(g[0]), (std::vector<double>{1, 2}));
  EXPECT_EQ(V(g[1]), (std::vector<double>{6}));
  EXPECT_EQ(V(g[2]), (std::vector<double>{-3, 1.5, 6}));
  auto fn = [](const variable_list& v) { return WeightedSquares::apply(v, 0.25); };
  EXPECT_TRUE(ag::gradcheck(fn, {vec({1, 2}), vec({3, -1})}).ok);
  EXPECT_TRUE(ag::gradgradcheck(fn, {vec({1, 2}), vec({3, -1})}).ok);
}

struct WrongGrad : ag::Function<WrongGrad> {
  static Tensor forward(AutogradContext* ctx, Tensor x) {
    ctx->save_for_backward({x});
    return x * x;
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    return {g[0] * ctx->get_saved_variables()[0] * 3.0};  // should be 2x
  }
};

TEST(Engine, GradcheckReportsTheWorstElement) {
  auto fn = [](const variable_list& v) { return WrongGrad::apply(v[0]); };
  auto r = ag::gradcheck(fn, {vec({1, -2, 0.5})});
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.message.find("output 0 element [1] w.r.t. input 0 element [1]: analytic -6"), std::string::npos)
      << r.message;
  EXPECT_NEAR(r.max_error, 2.0, 1e-6);
  EXPECT_ERROR_CONTAINS(ag::gradcheck(fn, {tg::ones({2}).requires_grad_()}), "gradcheck: input 0 is Float32");
  EXPECT_ERROR_CONTAINS(ag::gradcheck(fn, {tg::ones({1}, kF64).expand({3}).requires_grad_()}),
                        "gradcheck: input 0 (shape [3], strides [0]) has elements sharing memory");
}

struct OnceDiff : ag::Function<OnceDiff> {
  static constexpr bool once_differentiable = true;
  static Tensor forward(AutogradContext* ctx, Tensor x) {
    ctx->save_for_backward({x});
    return x * x;
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    return {g[0] * ctx->get_saved_variables()[0] * 2.0};
  }
};

TEST(Engine, OnceDifferentiableFailsUnderDoubleBackward) {
  Tensor x = vec({3});
  Tensor y = OnceDiff::apply(x).sum();
  Tensor g = ag::grad({y}, {x}, {}, true, true)[0];
  EXPECT_EQ(V(g), (std::vector<double>{6}));
  EXPECT_ERROR_CONTAINS(ag::grad({g.sum()}, {x}),
                        "OnceDiffBackward is once-differentiable: its backward "
                        "ran under create_graph");
  EXPECT_EQ(V(ag::grad({y}, {x})[0]), (std::vector<double>{6}));  // first order still fine
}

struct Reentrant : ag::Function<Reentrant> {
  static Tensor forward(AutogradContext* ctx, Tensor x) {
    ctx->save_for_backward({x});
    return tg::sin(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    // d sin(x)/dx computed by a nested backward on a fresh graph.
    Tensor x = ctx->get_saved_variables()[0].detach().requires_grad_();
    Tensor d;
    {
      tg::EnableGradGuard on;
      d = ag::grad({tg::sin(x).sum()}, {x})[0];
    }
    return {g[0] * d};
  }
};

TEST(Engine, ReentrantBackward) {
  Tensor x = vec({0.3, 1.1});
  Tensor y = Reentrant::apply(Reentrant::apply(x)).sum();
  y.backward();
  std::vector<double> gx = V(x.grad());
  for (size_t i = 0; i < 2; ++i) {
    double v = i ? 1.1 : 0.3;
    EXPECT_NEAR(gx[i], std::cos(std::sin(v)) * std::cos(v), 1e-12);
  }
}

// A backward that runs a nested backward D deep: past the reentrant depth of
// 32 the nested tasks continue on a fresh thread, which takes over the
// caller's whole state as a device worker does: the dual level (so forward
// over reverse still gives the Hessian-vector product, -sin(x) v here),
// anomaly mode, grad mode and the hooks. Each level records what it saw.
struct NestedSin : ag::Function<NestedSin> {
  static std::atomic<int> dual_seen, anomaly_seen;
  static Tensor forward(AutogradContext* ctx, Tensor x, int64_t depth) {
    ctx->save_for_backward({x});
    ctx->saved_data["depth"] = depth;
    return tg::sin(x);
  }
  static variable_list jvp(AutogradContext* ctx, variable_list t) {
    return {t[0] * tg::cos(ag::forward_ad::unpack_dual(ctx->get_saved_variables()[0]).primal)};
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    const int64_t depth = std::any_cast<int64_t>(ctx->saved_data["depth"]);
    dual_seen += ag::forward_ad::is_active();
    anomaly_seen += ag::is_anomaly_enabled();
    Tensor xs = ctx->get_saved_variables()[0];
    if (depth == 0) return {g[0] * tg::cos(xs), Tensor()};
    auto p = ag::forward_ad::unpack_dual(xs);
    Tensor leaf = p.primal.detach().requires_grad_();
    tg::EnableGradGuard on;
    Tensor xd = p.tangent.defined() ? ag::forward_ad::make_dual(leaf, p.tangent) : leaf * 1.0;
    Tensor inner = ag::grad({NestedSin::apply(xd, depth - 1)}, {leaf}, {tg::ones_like(leaf)})[0];
    return {g[0] * inner, Tensor()};
  }
};
std::atomic<int> NestedSin::dual_seen{0}, NestedSin::anomaly_seen{0};

TEST(Engine, DeepReentrantBackwardCarriesTheDualLevelAndAnomalyMode) {
  const Tensor x = vec({0.3, -1.2, 2.0}, false), v = vec({1.0, 2.0, -0.5}, false);
  for (int64_t depth : {5, 40}) {
    SCOPED_TRACE("depth " + std::to_string(depth));
    NestedSin::dual_seen = 0;
    NestedSin::anomaly_seen = 0;
    ag::forward_ad::dual_level level;
    ag::DetectAnomalyGuard anomaly;
    Tensor leaf = x.clone().requires_grad_();
    Tensor g = ag::grad({NestedSin::apply(ag::forward_ad::make_dual(leaf, v), depth).sum()}, {leaf})[0];
    auto u = ag::forward_ad::unpack_dual(g);
    EXPECT_LT(tg::abs(u.primal - tg::cos(x)).amax().item<double>(), 1e-12);
    ASSERT_TRUE(u.tangent.defined());
    EXPECT_LT(tg::abs(u.tangent + tg::sin(x) * v).amax().item<double>(), 1e-12);
    EXPECT_EQ(NestedSin::dual_seen.load(), depth + 1);
    EXPECT_EQ(NestedSin::anomaly_seen.load(), depth + 1);
  }
}

struct DirtyAndNonDiff : ag::Function<DirtyAndNonDiff> {
  static variable_list forward(AutogradContext* ctx, Tensor x, Tensor buf) {
    buf.mul_(2.0);
    ctx->mark_dirty({buf});
    Tensor idx = tg::gt(x, 0.0).to(tg::kFloat64);
    ctx->mark_non_differentiable({idx});
    return {buf, idx, x * 3.0};
  }
  static variable_list backward(AutogradContext*, variable_list g) { return {g[2] * 3.0, g[0] * 2.0}; }
};

TEST(Engine, MarkDirtyAndNonDifferentiable) {
  Tensor x = vec({1, -1});
  Tensor base = vec({5, 6});
  Tensor buf = base * 1.0;  // non-leaf, modified in place by forward
  auto outs = DirtyAndNonDiff::apply(x, buf);
  EXPECT_TRUE(outs[0].is_same(buf));
  EXPECT_EQ(V(buf), (std::vector<double>{10, 12}));
  EXPECT_FALSE(outs[1].requires_grad());
  EXPECT_TRUE(outs[0].requires_grad());
  (outs[0].sum() + outs[2].sum()).backward();
  EXPECT_EQ(V(base.grad()), (std::vector<double>{2, 2}));
  EXPECT_EQ(V(x.grad()), (std::vector<double>{3, 3}));
  Tensor leaf_buf = vec({1, 1});
  EXPECT_ERROR_CONTAINS(DirtyAndNonDiff::apply(x, leaf_buf), "a leaf tensor that requires grad");
}

TEST(Engine, ErrorsNameWhatWentWrong) {
  Tensor x = vec({1, 2});
  Tensor y = (x.exp() * 2.0).sum();
  y.backward();
  EXPECT_ERROR_CONTAINS(y.backward(), "ExpBackward: trying to backward through the graph a second time");
  EXPECT_ERROR_CONTAINS(y.backward(), "saved tensor 'result' was freed after the previous backward");

  Tensor a = vec({1, 2}), b = vec({3, 4});
  Tensor p = a * b;
  b.detach().add_(1.0);  // b is saved by mul
  EXPECT_ERROR_CONTAINS(p.sum().backward(),
                        "MulBackward: one of the tensors needed for gradient "
                        "computation has been modified by an in-place operation: saved tensor 'other' "
                        "(Float64 [2], an input of MulBackward) is at version 1; expected version 0");
  Tensor e = a.exp();
  e.detach().mul_(2.0);
  EXPECT_ERROR_CONTAINS(e.sum().backward(),
                        "saved tensor 'result' (Float64 [2], output 0 of ExpBackward) "
                        "is at version 1; expected version 0");

  EXPECT_ERROR_CONTAINS((a * 2.0).backward(),
                        "backward: grad can be implicitly created only for outputs "
                        "with one element, but output 0 has shape [2]");
  Tensor u = vec({1});
  EXPECT_ERROR_CONTAINS(ag::grad({(a * 2.0).sum()}, {a, u}),
                        "grad: input 1 (shape [1]) was not used "
                        "to compute the outputs, so it has no gradient; pass allow_unused=true");
  auto g = ag::grad({(a * 2.0).sum()}, {a, u}, {}, std::nullopt, false, true);
  EXPECT_FALSE(g[1].defined());
  EXPECT_ERROR_CONTAINS(tg::ones({2}, tg::TensorOptions().dtype(tg::kInt64)).requires_grad_(),
                        "requires_grad_: only floating-point tensors can require gradients, got a tensor of Int64");
  EXPECT_ERROR_CONTAINS(ag::grad({a * 2.0}, {a}, {tg::ones({3}, kF64)}),
                        "grad: mismatch in shape: grad_outputs[0] has shape [3] but outputs[0] has shape [2]");
  EXPECT_ERROR_CONTAINS(ag::grad({vec({1}, false)}, {a}), "grad: output 0 (shape [1]) does not require grad");
  EXPECT_ERROR_CONTAINS(ag::grad({a.sum()}, {vec({1}, false)}), "grad: input 0 (shape [1]) does not require grad");
  EXPECT_ERROR_CONTAINS(a.add_(1.0),
                        "add_: a leaf tensor that requires grad (shape [2]) is being used in an in-place operation");
  Tensor base2 = a * 1.0;
  Tensor view2 = base2.narrow(0, 0, 1);
  EXPECT_ERROR_CONTAINS(view2.mul_(2.0), "mul_: in-place operation on a tensor that shares memory with another tensor");
  EXPECT_ERROR_CONTAINS(a.as_strided({1}, {1}), "as_strided: not differentiable");
  EXPECT_ERROR_CONTAINS((a * 1.0).requires_grad_(false),
                        "requires_grad_: you can only change the requires_grad flag of leaf tensors");
  // The engine is still usable.
  EXPECT_EQ(V(ag::grad({(a * b).sum()}, {a})[0]), (std::vector<double>{4, 5}));
}

struct Throws : ag::Function<Throws> {
  static Tensor forward(AutogradContext*, Tensor x) { return x * 1.0; }
  static variable_list backward(AutogradContext*, variable_list) { TG_ERROR("Throws: backward failed on purpose"); }
};

TEST(Engine, InPlaceOpsRebaseHistory) {
  Tensor x = vec({1, 2}), w = vec({3, 4});
  Tensor h = x * 2.0;
  h.mul_(w);       // h = 2 x w
  h.add_(x, 3.0);  // h = 2 x w + 3 x
  h.sub_(1.0);
  h.div_(2.0);                                    // h = x w + 1.5 x - 0.5
  EXPECT_EQ(h.grad_fn()->name(), "MulBackward");  // div by a scalar
  auto g = ag::grad({h.sum()}, {x, w});
  EXPECT_EQ(V(g[0]), (std::vector<double>{4.5, 5.5}));  // w + 1.5
  EXPECT_EQ(V(g[1]), (std::vector<double>{1, 2}));      // x
  // Writing a differentiable value into a plain buffer.
  Tensor buf = tg::zeros({2}, kF64);
  buf.copy_(x * x);
  EXPECT_TRUE(buf.requires_grad());
  EXPECT_EQ(V(ag::grad({buf.sum()}, {x})[0]), (std::vector<double>{2, 4}));
  // Second order through an in-place op.
  Tensor c = x * x;
  c.mul_(x);  // x^3
  Tensor d1 = ag::grad({c.sum()}, {x}, {}, std::nullopt, true)[0];
  EXPECT_EQ(V(ag::grad({d1.sum()}, {x})[0]), (std::vector<double>{6, 12}));
  // fill_ makes it a constant: no gradient flows through the new value.
  Tensor k = x * 1.0;
  k.fill_(5.0);
  EXPECT_FALSE(k.requires_grad());
  // A saved input modified in place afterwards is still caught.
  Tensor e = x * 1.0;
  Tensor f = e * w;  // saves e
  e.add_(1.0);
  EXPECT_ERROR_CONTAINS(f.sum().backward(), "saved tensor 'self'");
}

TEST(Engine, FirstExceptionPropagatesAndEngineStaysUsable) {
  Tensor x = vec({1});
  Tensor y = (Throws::apply(x) + x * 2.0).sum();
  EXPECT_ERROR_CONTAINS(y.backward(), "Throws: backward failed on purpose");
  Tensor z = (x * 4.0).sum();
  z.backward();
  EXPECT_EQ(V(x.grad()), (std::vector<double>{4}));
}

TEST(Engine, AnomalyModeNamesTheForwardOp) {
  Tensor x = vec({0, 1});
  Tensor y = (tg::sqrt(x) * 0.0).sum();  // sqrt backward: 0 / 0 at x = 0
  {
    ag::DetectAnomalyGuard anomaly;
    EXPECT_ERROR_CONTAINS(ag::grad({y}, {x}, {}, true),
                          "anomaly mode: SqrtBackward (the backward of the "
                          "forward op 'sqrt') returned NaN values in its output 0");
  }
  Tensor g = ag::grad({y}, {x})[0];  // without anomaly mode: NaN passes through
  EXPECT_TRUE(std::isnan(V(g)[0]));
}

TEST(Engine, AccumulationRules) {
  tg::NoGradGuard no_grad;
  // InputBuffer: in place only when uniquely owned and contiguous.
  Tensor old = tg::ones({4}, kF64);
  EXPECT_TRUE(ag::accumulate_into_buffer(old, tg::ones({4}, kF64)));
  EXPECT_EQ(V(old), (std::vector<double>{2, 2, 2, 2}));
  Tensor held = old;  // another handle to the TensorImpl
  const tg::TensorImpl* before = old.impl();
  EXPECT_FALSE(ag::accumulate_into_buffer(old, tg::ones({4}, kF64)));
  EXPECT_NE(old.impl(), before);
  EXPECT_EQ(V(held), (std::vector<double>{2, 2, 2, 2}));  // untouched
  Tensor base = tg::ones({8}, kF64);
  Tensor view = base.narrow(0, 0, 4);  // shares storage with base
  EXPECT_FALSE(ag::accumulate_into_buffer(view, tg::ones({4}, kF64)));
  EXPECT_EQ(V(base)[0], 1.0);
  Tensor strided = tg::ones({4, 2}, kF64).t();  // unique but not contiguous
  EXPECT_FALSE(ag::accumulate_into_buffer(strided, tg::ones({2, 4}, kF64)));
  {
    tg::EnableGradGuard create_graph;  // never in place under create_graph
    Tensor o = tg::ones({4}, kF64);
    EXPECT_FALSE(ag::accumulate_into_buffer(o, tg::ones({4}, kF64)));
  }
  // AccumulateGrad: steals a uniquely owned gradient, clones a shared one.
  Tensor p = vec({0, 0});
  Tensor g = tg::ones({2}, kF64);
  const tg::TensorImpl* gi = g.impl();
  ag::accumulate_grad(p, p.mutable_grad(), std::move(g), 1);
  EXPECT_EQ(p.grad().impl(), gi);  // stolen
  Tensor q = vec({0, 0});
  Tensor shared = tg::ones({2}, kF64);
  Tensor keep = shared;
  ag::accumulate_grad(q, q.mutable_grad(), std::move(shared), 1);
  EXPECT_NE(q.grad().impl(), keep.impl());  // cloned
}

// Small contributions to one slot wait and are summed kMaxAddN at a time in
// one kernel; the result must be bitwise the sequential sum in arrival order
// (f32 values of mixed magnitude, so any reordering shows), across batch
// boundaries and around contributions that cannot wait (non-contiguous,
// large, sparse), and a shared first contribution must stay untouched.
TEST(Engine, HeldContributionsSumInArrivalOrder) {
  tg::NoGradGuard no_grad;
  const tg::TensorOptions f32 = tg::TensorOptions().dtype(tg::kFloat32);
  tg::manual_seed(7);
  const int64_t n = 5;
  std::vector<Tensor> parts;
  for (int i = 0; i < 45; ++i) {
    Tensor t = tg::mul(tg::randn({n}, f32), std::pow(10.0, double(i % 7) - 3.0));
    if (i == 20) t = tg::randn({n, 2}, f32).select(1, 0);  // non-contiguous: added at once
    parts.push_back(t);
  }
  std::vector<float> expect = parts[0].to_vector<float>();
  for (size_t i = 1; i < parts.size(); ++i) {
    std::vector<float> v = parts[i].to_vector<float>();
    for (int64_t j = 0; j < n; ++j)
      expect[size_t(j)] = expect[size_t(j)] + v[size_t(j)];
  }
  const std::vector<float> first_before = parts[0].to_vector<float>();
  ag::InputBuffer buf(1);
  for (const Tensor& t : parts)
    buf.add(0, Tensor(t), tg::cuda::Stream(), tg::cuda::Stream());
  variable_list out = buf.release();
  EXPECT_EQ(out[0].to_vector<float>(), expect);          // bitwise
  EXPECT_EQ(parts[0].to_vector<float>(), first_before);  // shared first: out of place
  EXPECT_NE(out[0].impl(), parts[0].impl());

  // Large contributions (over the held size) and a sparse one in between.
  const int64_t big = 100000;
  ag::InputBuffer buf2(1);
  buf2.add(0, tg::ones({big}, f32), tg::cuda::Stream(), tg::cuda::Stream());
  for (int i = 0; i < 3; ++i)
    buf2.add(0, tg::full({big}, 0.5, f32), tg::cuda::Stream(), tg::cuda::Stream());
  Tensor idx = tg::tensor({3}, {1, 1}, tg::TensorOptions().dtype(tg::kInt64));
  buf2.add(0, tg::sparse_coo_tensor(idx, tg::full({1}, 2.0, f32), {big}), tg::cuda::Stream(), tg::cuda::Stream());
  std::vector<float> r = buf2.release()[0].to_vector<float>();
  EXPECT_EQ(r[0], 2.5f);
  EXPECT_EQ(r[3], 4.5f);

  // A leaf used a thousand times: x = x * w + b, grads against closed forms.
  Tensor w = vec({0.999}), b = vec({0.001});
  Tensor x = tg::ones({1}, kF64);
  {
    tg::EnableGradGuard on;
    for (int i = 0; i < 1000; ++i)
      x = x * w + b;
  }
  std::vector<Tensor> g;
  {
    tg::EnableGradGuard on;
    g = ag::grad({x.sum()}, {w, b});
  }
  // x_N = w^N + b (1 - w^N) / (1 - w): d/db = (1 - w^N) / (1 - w),
  // d/dw = N w^(N-1) - b (N w^(N-1) (1 - w) - (1 - w^N)) / (1 - w)^2.
  const double W = 0.999, B = 0.001, N = 1000, wn = std::pow(W, N), wn1 = std::pow(W, N - 1);
  EXPECT_NEAR(V(g[1])[0], (1 - wn) / (1 - W), 1e-9);
  EXPECT_NEAR(V(g[0])[0], N * wn1 - B * (N * wn1 * (1 - W) - (1 - wn)) / ((1 - W) * (1 - W)), 1e-8);
}

// mul's fused backward (both gradients from one kernel) is bitwise the two
// formulas; broadcast operands and one wanted gradient take the formulas.
TEST(Engine, MulBackwardBothGradientsEqualTheFormulas) {
  const tg::TensorOptions f32 = tg::TensorOptions().dtype(tg::kFloat32);
  tg::manual_seed(3);
  Tensor a = tg::randn({3, 4}, f32).requires_grad_(), b = tg::randn({3, 4}, f32).requires_grad_();
  Tensor g = tg::randn({3, 4}, f32);
  std::vector<Tensor> gr = ag::grad({a * b}, {a, b}, {g});
  tg::NoGradGuard no_grad;
  EXPECT_EQ(gr[0].to_vector<float>(), tg::mul(g, b).to_vector<float>());
  EXPECT_EQ(gr[1].to_vector<float>(), tg::mul(g, a).to_vector<float>());
  Tensor c = tg::randn({4}, f32).requires_grad_();
  std::vector<Tensor> gb;
  {
    tg::EnableGradGuard on;
    gb = ag::grad({a * c}, {a, c}, {g});
  }
  EXPECT_EQ(gb[0].to_vector<float>(), tg::mul(g, c.expand({3, 4})).to_vector<float>());
  EXPECT_EQ(gb[1].sizes(), (tg::IntList{4}));
  EXPECT_EQ(gb[1].to_vector<float>(), tg::mul(g, a).sum({0}).to_vector<float>());
}

// queue_callback: run on the calling thread after every node, in order
// (a callback may queue another), not when backward fails, and refused
// outside a backward.
TEST(Engine, FinalCallbacksRunAfterEveryNode) {
  EXPECT_THROW(ag::queue_callback([] {}), tg::Error);
  Tensor x = vec({1, 2});
  std::vector<std::string> log;
  const auto caller = std::this_thread::get_id();
  Tensor y = x * 2.0;
  y.register_hook([&](const Tensor& g) {
    log.push_back("hook");
    ag::queue_callback([&] {
      log.push_back(std::string("first, grad ") + (x.grad().defined() ? "set" : "unset"));
      EXPECT_EQ(std::this_thread::get_id(), caller);
      ag::queue_callback([&] { log.push_back("queued by the first"); });
    });
    ag::queue_callback([&] { log.push_back("second"); });
    return g;
  });
  (y * y).sum().backward();
  EXPECT_EQ(log, (std::vector<std::string>{"hook", "first, grad set", "second", "queued by the first"}));
  log.clear();
  Tensor z = x * 3.0;
  z.register_hook([&](const Tensor& g) {
    ag::queue_callback([&] { log.push_back("ran"); });
    TG_CHECK(false, "hook fails");
    return g;
  });
  EXPECT_THROW(z.sum().backward(), tg::Error);
  EXPECT_TRUE(log.empty());
}

TEST(Engine, SavedOutputsFormNoCycle) {
  tg::cpu_empty_cache();
  int64_t baseline = tg::cpu_allocator_stats().live_bytes;
  {
    Tensor x = tg::randn({256, 256}, kF64).requires_grad_();
    Tensor y = tg::tanh(tg::exp(x));  // exp and tanh save their outputs
    Tensor z = tg::sigmoid(y).sum();
    EXPECT_GT(tg::cpu_allocator_stats().live_bytes, baseline + 3 * 256 * 256 * 8);
  }
  EXPECT_EQ(tg::cpu_allocator_stats().live_bytes, baseline);
}

TEST(Engine, ThreadsOnIndependentGraphs) {
  auto run = [](uint64_t seed) {
    tg::manual_seed(seed);
    Tensor x = tg::randn({16, 8}, kF64).requires_grad_();
    Tensor w = tg::randn({4, 8}, kF64).requires_grad_();
    Tensor y = tg::silu(tg::linear(x, w)).sum();
    auto g = ag::grad({y}, {x, w}, {}, std::nullopt, true);
    Tensor h = ag::grad({g[0].sum()}, {w})[0];
    return std::vector<Tensor>{g[0].detach(), g[1].detach(), h};
  };
  std::vector<std::vector<Tensor>> expected;
  for (uint64_t t = 0; t < 8; ++t)
    expected.push_back(run(100 + t));
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (uint64_t t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int it = 0; it < 40; ++it) {
        // randn draws from one global Philox stream: build inputs under a lock-free
        // per-thread seed instead by reusing run() only through its values.
        tg::Tensor x, w;
        {
          static std::mutex m;
          std::lock_guard<std::mutex> lock(m);
          tg::manual_seed(100 + t);
          x = tg::randn({16, 8}, kF64).requires_grad_();
          w = tg::randn({4, 8}, kF64).requires_grad_();
        }
        Tensor y = tg::silu(tg::linear(x, w)).sum();
        auto g = ag::grad({y}, {x, w}, {}, std::nullopt, true);
        Tensor h = ag::grad({g[0].sum()}, {w})[0];
        if (!tg::equal(g[0], expected[t][0]) || !tg::equal(g[1], expected[t][1]) || !tg::equal(h, expected[t][2]))
          ++mismatches;
      }
    });
  for (auto& th : threads)
    th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(Engine, ThreadsOnOneRetainedGraph) {
  tg::manual_seed(7);
  Tensor x = tg::randn({32, 8}, kF64).requires_grad_();
  Tensor w = tg::randn({8, 8}, kF64).requires_grad_();
  Tensor y = tg::tanh(tg::linear(tg::tanh(tg::linear(x, w)), w)).sum();
  auto expected = ag::grad({y}, {x, w}, {}, true);
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] {
      for (int it = 0; it < 40; ++it) {
        auto g = ag::grad({y}, {x, w}, {}, true);
        if (!tg::equal(g[0], expected[0]) || !tg::equal(g[1], expected[1])) ++mismatches;
      }
    });
  for (auto& th : threads)
    th.join();
  EXPECT_EQ(mismatches.load(), 0);
  // Concurrent backward into .grad of the shared leaves: sums exactly.
  threads.clear();
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] {
      for (int it = 0; it < 10; ++it)
        y.backward({}, true);
    });
  for (auto& th : threads)
    th.join();
  EXPECT_TRUE(tg::allclose(w.grad(), expected[1] * 80.0, 1e-10, 1e-10));
}

TEST(Engine, SavedTensorHooks) {
  int packs = 0, unpacks = 0;
  Tensor x = vec({0.5, 1.5});
  Tensor y;
  {
    ag::SavedTensorHooksGuard hooks(
        [&](const Tensor& t) -> std::any {
          ++packs;
          return t.clone();
        },
        [&](const std::any& p) {
          ++unpacks;
          return std::any_cast<Tensor>(p);
        });
    y = (tg::exp(x) * x).sum();  // exp saves its result; mul saves both inputs
  }
  EXPECT_EQ(packs, 3);
  EXPECT_EQ(unpacks, 0);  // lazy
  Tensor g = ag::grad({y}, {x}, {}, true)[0];
  EXPECT_EQ(unpacks, 3);  // one per use
  for (int i = 0; i < 2; ++i)
    EXPECT_NEAR(V(g)[size_t(i)], std::exp(V(x)[size_t(i)]) * (1 + V(x)[size_t(i)]), 1e-12);
  ag::grad({y}, {x}, {}, true);
  EXPECT_EQ(unpacks, 6);  // again with the retained graph
  // Under create_graph the unpacked tensors re-attach their history.
  Tensor g2 = ag::grad({y}, {x}, {}, true, true)[0];
  Tensor h = ag::grad({g2.sum()}, {x})[0];
  for (int i = 0; i < 2; ++i) {
    double v = V(x)[size_t(i)];
    EXPECT_NEAR(V(h)[size_t(i)], std::exp(v) * (2 + v), 1e-12);
  }
  // A pack hook may not modify its input.
  ag::SavedTensorHooksGuard bad(
      [](const Tensor& t) -> std::any {
        Tensor a = t;
        tg::NoGradGuard ng;
        a.add_(1.0);
        return t;
      },
      [](const std::any& p) { return std::any_cast<Tensor>(p); });
  EXPECT_ERROR_CONTAINS(tg::exp(x), "the pack hook modified its input in place");
}

TEST(Engine, BuiltinCastAndOffloadHooks) {
  tg::manual_seed(11);
  Tensor x = tg::randn({64}, kF64).requires_grad_();
  Tensor ref = ag::grad({(tg::tanh(x) * tg::sigmoid(x)).sum()}, {x})[0];
  for (auto dt : {tg::kBFloat16, tg::kFloat16}) {
    Tensor y;
    {
      ag::SavedTensorHooksGuard hooks(ag::hooks::cast(dt));
      y = (tg::tanh(x) * tg::sigmoid(x)).sum();
    }
    Tensor g = ag::grad({y}, {x})[0];
    EXPECT_EQ(g.dtype(), tg::kFloat64);
    double tol = dt == tg::kBFloat16 ? 2e-2 : 2e-3;
    EXPECT_TRUE(tg::allclose(g, ref, tol, tol)) << tg::amax(tg::abs(g - ref)).item<double>();
    EXPECT_FALSE(tg::allclose(g, ref, 1e-9, 1e-9));  // it did go through the cast
  }
  Tensor y;
  {
    ag::SavedTensorHooksGuard hooks(ag::hooks::offload_to_cpu());
    y = (tg::tanh(x) * tg::sigmoid(x)).sum();
  }
  EXPECT_TRUE(tg::equal(ag::grad({y}, {x})[0], ref));  // CPU tensors: kept as they are
  EXPECT_ERROR_CONTAINS(ag::hooks::cast(tg::kFloat32), "hooks::cast: expected BFloat16 or Float16");
}

TEST(Engine, GradModeGuards) {
  Tensor x = vec({1});
  {
    tg::NoGradGuard g;
    EXPECT_FALSE((x * 2.0).requires_grad());
    {
      tg::EnableGradGuard e;
      EXPECT_TRUE((x * 2.0).requires_grad());
    }
    EXPECT_FALSE(ag::is_grad_enabled());
  }
  EXPECT_TRUE(ag::is_grad_enabled());
  bool other_thread = true;
  {
    tg::NoGradGuard g;
    std::thread([&] { other_thread = ag::is_grad_enabled(); }).join();
  }
  EXPECT_TRUE(other_thread);  // thread-local
  EXPECT_FALSE(x.detach().requires_grad());
  EXPECT_TRUE(tg::ones({2}, kF64.requires_grad(true)).requires_grad());
  // A thread's autograd state is its own, and what it owns (the hooks
  // stack, the engine's tasks) goes with it: a thread that ends with hooks
  // still pushed and a retained graph alive frees them (the sanitizers'
  // builds check), and this thread's state is untouched.
  Tensor kept;
  int packed = 0;
  std::thread([&] {
    ag::push_saved_tensor_hooks({[&](const Tensor& t) {
                                   ++packed;
                                   return std::any(t);
                                 },
                                 [](const std::any& a) { return std::any_cast<Tensor>(a); }});
    Tensor a = tg::ones({3}, kF64).requires_grad_();
    kept = (a * a).sum();
    EXPECT_FALSE(ag::is_anomaly_enabled());
    kept.backward({}, /*retain_graph=*/true);
    EXPECT_EQ(tgtest::values(a.grad()), std::vector<double>(3, 2.0));
  }).join();
  EXPECT_GT(packed, 0);
  EXPECT_EQ(ag::current_saved_tensor_hooks(), nullptr);
  EXPECT_TRUE(ag::is_grad_enabled());
  kept.backward({}, /*retain_graph=*/false);  // the graph outlives its thread; the hooks' unpack runs here
}

// A thread_local made before autograd's per-thread storage is destroyed
// after it, when the thread ends; its destructor runs a backward, which makes
// the storage again. That one is freed too (LeakSanitizer's builds check),
// and the value is right.
struct BackwardAtThreadExit {
  double* out = nullptr;
  ~BackwardAtThreadExit() {
    if (!out) return;
    Tensor a = tg::tensor({1.0, 2.0}, {2}, kF64).requires_grad_();
    (a * a).sum().backward();
    *out = a.grad().sum().item<double>();
  }
};
thread_local BackwardAtThreadExit t_backward_at_exit;

TEST(Engine, AutogradInAThreadLocalsDestructorAtThreadExit) {
  double got = 0;
  std::thread([&] {
    t_backward_at_exit.out = &got;  // made first: destroyed after the storage's owner
    Tensor z = tg::tensor({3.0}, {1}, kF64).requires_grad_();
    (z * z).sum().backward();
    EXPECT_EQ(tgtest::values(z.grad()), std::vector<double>{6.0});
  }).join();
  EXPECT_EQ(got, 6.0);  // d/da sum(a^2) = 2a = [2, 4]
}

TEST(Functional, ShapesAndValues) {
  auto f = [](const Tensor& x) { return tg::sin(x) * x; };  // elementwise
  Tensor x = tg::tensor({0.3, -0.7, 1.2}, {3}, kF64);
  Tensor j = ag::jacobian(f, x);
  EXPECT_EQ(j.sizes(), (tg::IntList{3, 3}));
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t k = 0; k < 3; ++k) {
      double v = V(x)[size_t(i)];
      EXPECT_NEAR(V(j)[size_t(i * 3 + k)], i == k ? std::cos(v) * v + std::sin(v) : 0, 1e-12);
    }
  auto cubic = [](const Tensor& x) { return (x * x * x).sum() + (x.select(0, 0) * x.select(0, 1)); };
  Tensor h = ag::hessian(cubic, x);
  EXPECT_EQ(h.sizes(), (tg::IntList{3, 3}));
  std::vector<double> expect{6 * 0.3, 1, 0, 1, 6 * -0.7, 0, 0, 0, 6 * 1.2};
  for (size_t i = 0; i < 9; ++i)
    EXPECT_NEAR(V(h)[i], expect[i], 1e-12);
  Tensor v = tg::tensor({1, 2, 3}, {3}, kF64);
  auto [y1, vjp] = ag::vjp(f, x, v);
  auto [y2, jvp] = ag::jvp(f, x, v);
  auto [y3, hvp] = ag::hvp(cubic, x, v);
  EXPECT_TRUE(tg::allclose(y1, f(x)));
  EXPECT_TRUE(tg::allclose(vjp, tg::matmul(v, j)));
  EXPECT_TRUE(tg::allclose(jvp, tg::matmul(j, v)));
  EXPECT_TRUE(tg::allclose(hvp, tg::matmul(h, v)));
  EXPECT_FALSE(hvp.requires_grad());
  // A matrix-valued fn: jacobian has fn(x).sizes() + x.sizes().
  Tensor w = tg::randn({2, 3}, kF64);
  Tensor jm = ag::jacobian([&](const Tensor& t) { return tg::matmul(w, t.view({3, 1})); }, x);
  EXPECT_EQ(jm.sizes(), (tg::IntList{2, 1, 3}));
  EXPECT_TRUE(tg::allclose(jm.view({2, 3}), w));
}

// per_sample_hessian: both strategies against the closed form of a [B, 2] ->
// [B, 3] function, against each other on an MLP (values, and the gradient of
// H.sum() into the weights with create_graph), and the shape errors.
TEST(Functional, PerSampleHessianStrategiesAgree) {
  auto f = [](const Tensor& x) {
    Tensor a = x.select(1, 0), b = x.select(1, 1);
    return tg::stack({a * a * b, tg::sin(a) + b * b * b, tg::tanh(a * b)}, 1);
  };
  tg::manual_seed(61);
  Tensor x = tg::rand({5, 2}, kF64) * 2 - 1;
  for (auto s :
       {ag::HessianStrategy::Rows, ag::HessianStrategy::BatchedCotangents, ag::HessianStrategy::ForwardOverReverse}) {
    Tensor h = ag::per_sample_hessian(f, x, s);
    ASSERT_EQ(h.sizes(), (tg::IntList{5, 3, 2, 2}));
    EXPECT_FALSE(h.requires_grad());
    std::vector<double> H = V(h), X = V(x);
    for (size_t bi = 0; bi < 5; ++bi) {
      double a = X[2 * bi], b = X[2 * bi + 1];
      double t = std::tanh(a * b), s2 = 1 - t * t;  // sech^2(ab)
      double expect[3][2][2] = {
          {{2 * b, 2 * a}, {2 * a, 0}},
          {{-std::sin(a), 0}, {0, 6 * b}},
          {{-2 * t * s2 * b * b, s2 - 2 * t * s2 * a * b}, {s2 - 2 * t * s2 * a * b, -2 * t * s2 * a * a}}};
      for (size_t i = 0; i < 3; ++i)
        for (size_t j = 0; j < 2; ++j)
          for (size_t k = 0; k < 2; ++k)
            EXPECT_NEAR(H[bi * 12 + i * 4 + j * 2 + k], expect[i][j][k], 1e-12)
                << "sample " << bi << " H[" << i << "][" << j << "][" << k << "]";
    }
  }
  // An MLP with parameters: equal Hessians and equal weight gradients.
  Tensor w1 = (tg::randn({8, 2}, kF64) * 0.7).requires_grad_();
  Tensor w2 = (tg::randn({3, 8}, kF64) * 0.7).requires_grad_();
  auto mlp = [&](const Tensor& t) { return tg::linear(tg::silu(tg::linear(t, w1)), w2); };
  std::vector<Tensor> hs, g1s;
  for (auto s :
       {ag::HessianStrategy::Rows, ag::HessianStrategy::BatchedCotangents, ag::HessianStrategy::ForwardOverReverse}) {
    Tensor h = ag::per_sample_hessian(mlp, x, s, /*create_graph=*/true);
    ASSERT_TRUE(h.requires_grad());
    hs.push_back(h.detach());
    g1s.push_back(ag::grad({h.sum()}, {w1})[0]);
  }
  for (size_t k = 1; k < hs.size(); ++k) {
    EXPECT_TRUE(tg::allclose(hs[0], hs[k], 1e-12, 1e-12)) << "strategy " << k;
    EXPECT_TRUE(tg::allclose(g1s[0], g1s[k], 1e-12, 1e-12)) << "strategy " << k;
  }
  EXPECT_GT(tg::abs(g1s[0]).sum().item<double>(), 1e-3);  // a real gradient
  try {
    ag::per_sample_hessian(mlp, tg::ones({4}, kF64));
    ADD_FAILURE() << "no error";
  } catch (const tg::Error& e) {
    EXPECT_NE(std::string(e.what()).find("per_sample_hessian: x must have shape [B, n], got [4]"), std::string::npos)
        << e.what();
  }
}

// The default strategy (batched cotangents) on a fn that closes over
// per-row tensors (per-sample weights, expanded from one): such a fn cannot
// run on one row or on stacked copies; it falls back and gives the same
// Hessians as the other strategies (it failed with a bare broadcast error
// from mul). A fn with a [B] output is refused naming that shape (it said
// "[1]", the shape of the one-row probe).
TEST(Functional, PerSampleHessianDefaultHandlesPerRowClosuresAndNamesRealShapes) {
  tg::manual_seed(63);
  const int64_t B = 4, n = 3;
  Tensor x = tg::rand({B, n}, kF64) * 2 - 1;
  Tensor w = tg::randn({1, n, 2}, kF64).expand({B, n, 2}).contiguous();  // per-sample weights
  Tensor scale = tg::rand({B, 1}, kF64) + 0.5;                           // per-row
  auto per_row = [&](const Tensor& t) { return tg::tanh(tg::bmm(t.unsqueeze(1), w).squeeze(1)) * scale; };
  Tensor ref = ag::per_sample_hessian(per_row, x, ag::HessianStrategy::Rows);
  ASSERT_EQ(ref.sizes(), (tg::IntList{B, 2, n, n}));
  EXPECT_GT(tg::abs(ref).sum().item<double>(), 1e-3);
  Tensor h = ag::per_sample_hessian(per_row, x);
  EXPECT_TRUE(tg::allclose(h, ref, 1e-12, 1e-12));
  Tensor hc = ag::per_sample_hessian(per_row, x, ag::HessianStrategy::BatchedCotangents, /*create_graph=*/true);
  EXPECT_TRUE(tg::allclose(hc.detach(), ref, 1e-12, 1e-12));
  {  // inside a caller's dual level too (no nested levels: the reverse rows)
    tg::autograd::forward_ad::dual_level level;
    EXPECT_TRUE(tg::allclose(ag::per_sample_hessian(per_row, x), ref, 1e-12, 1e-12));
  }
  auto flat = [](const Tensor& t) { return (t * t).sum({1}); };  // [B], not [B, m]
  EXPECT_ERROR_CONTAINS(ag::per_sample_hessian(flat, x), "fn must map [B, n] to [B, m] (B = 4), got shape [4]");
}

// mlp_taylor (forward Taylor mode) against the reference reverse-mode path:
// value, Jacobian and Hessian per sample, and the gradient of a loss of the
// Hessian into the weights and biases (third derivatives through the
// activation), for each activation, on 3 inputs (6 second-derivative pairs).
TEST(Functional, MlpTaylorMatchesReverseMode) {
  tg::manual_seed(71);
  for (auto act : {tg::Activation::Silu, tg::Activation::Tanh, tg::Activation::Sigmoid, tg::Activation::Relu,
                   tg::Activation::Gelu}) {
    SCOPED_TRACE(int(act));
    std::vector<int64_t> sizes{3, 7, 5, 2};
    std::vector<Tensor> w, b;
    for (size_t l = 0; l + 1 < sizes.size(); ++l) {
      w.push_back((tg::randn({sizes[l + 1], sizes[l]}, kF64) * 0.8).requires_grad_());
      b.push_back((tg::randn({sizes[l + 1]}, kF64) * 0.3).requires_grad_());
    }
    auto mlp = [&](const Tensor& x) {
      Tensor h = x;
      for (size_t l = 0; l < w.size(); ++l) {
        h = tg::linear(h, w[l], b[l]);
        if (l + 1 < w.size()) h = tg::activation_grad(tg::ones_like(h), h, act, 0);
      }
      return h;
    };
    Tensor x = tg::rand({4, 3}, kF64) * 2 - 1;
    auto t = ag::mlp_taylor(w, b, act, x);
    ASSERT_EQ(t.hessian.sizes(), (tg::IntList{4, 2, 3, 3}));
    ASSERT_EQ(t.jacobian.sizes(), (tg::IntList{4, 2, 3}));
    EXPECT_TRUE(tg::allclose(t.value, mlp(x), 1e-12, 1e-12));
    Tensor h_ref = ag::per_sample_hessian(mlp, x, ag::HessianStrategy::Rows, true);
    EXPECT_TRUE(tg::allclose(t.hessian, h_ref, 1e-10, 1e-12));
    for (int64_t i = 0; i < 2; ++i) {  // Jacobian row i
      Tensor xl = x.detach().requires_grad_();
      Tensor g = ag::grad({mlp(xl).select(1, i).sum()}, {xl})[0];
      EXPECT_TRUE(tg::allclose(t.jacobian.select(1, i), g, 1e-12, 1e-12));
    }
    // The same loss of the Hessian differentiated into the parameters.
    Tensor weights_pattern = tg::rand({4, 2, 3, 3}, kF64);
    auto params = w;
    params.insert(params.end(), b.begin(), b.end());
    auto g_taylor = ag::grad({(t.hessian * weights_pattern).sum()}, params, {}, std::nullopt, false, true);
    auto g_ref = ag::grad({(h_ref * weights_pattern).sum()}, params, {}, std::nullopt, false, true);
    for (size_t p = 0; p < params.size(); ++p) {
      SCOPED_TRACE(p);
      if (!g_ref[p].defined()) {  // e.g. the last bias does not reach the Hessian
        EXPECT_TRUE(!g_taylor[p].defined() || tg::equal(g_taylor[p], tg::zeros_like(g_taylor[p])));
        continue;
      }
      ASSERT_TRUE(g_taylor[p].defined());
      EXPECT_TRUE(tg::allclose(g_taylor[p], g_ref[p], 1e-9, 1e-11));
    }
  }
}

}  // namespace

namespace {
// A weight W [5, 4] used `reps` times in each of four GEMM forms (linear,
// W as mm's second and as its first operand, linear of a transposed input)
// and once elementwise; the loss is linear in each product, so dL/dW has a
// closed form, returned in `expect` (sum of the separate products, formed
// one by one without autograd).
struct SharedWeight {
  Tensor w, x1, a, b, x3, c1, c2, c3, c4, expect;
  int reps;
  SharedWeight(tg::ScalarType dt, int reps_, tg::Device d = tg::Device(tg::kCPU)) : reps(reps_) {
    tg::manual_seed(41);
    auto r = [&](tg::IntList s) { return tg::randn(s, kF64).to(dt).to(d); };
    w = r({5, 4}).requires_grad_();
    x1 = r({6, 4});
    a = r({7, 5});
    b = r({4, 3});
    x3 = r({4, 9}).t();  // [9, 4], strided
    c1 = r({6, 5});
    c2 = r({7, 4});
    c3 = r({5, 3});
    c4 = r({9, 5});
    tg::NoGradGuard no_grad;
    Tensor e = w.detach().clone();
    for (int i = 1; i <= reps; ++i) {
      const double s = double(i);
      e = e + tg::mm(c1.t(), x1) * s + tg::mm(a.t(), c2) * s + tg::mm(c3, b.t()) * s + tg::mm(c4.t(), x3) * s;
    }
    expect = e;
  }
  Tensor loss(const Tensor& weight) const {
    Tensor l = (weight * weight).sum() * 0.5;
    for (int i = 1; i <= reps; ++i) {
      const double s = double(i);
      l = l + (tg::linear(x1, weight) * c1).sum() * s + (tg::mm(a, weight) * c2).sum() * s +
          (tg::mm(weight, b) * c3).sum() * s + (tg::linear(x3, weight) * c4).sum() * s;
    }
    return l;
  }
};
}  // namespace

// The gradient contributions l_i^T r_i of one weight are summed by one GEMM
// over their rows concatenated, whatever the GEMM form (strided operands
// too), mixed with a dense contribution, past the 16 products a slot holds,
// accumulated into an existing .grad, captured by grad(), seen whole by a
// hook; never under create_graph. Float64: within rounding of the separate
// products.
TEST(Engine, WeightGradientProductsSumInOneGemm) {
  using tgtest::expect_values;
  using tgtest::values;
  const bool on = ag::detail::products_enabled();
  SharedWeight sw(tg::kFloat64, 5);  // 20 products
  const double tol = 1e-12;
  int64_t merged = ag::detail::merged_product_sums();
  sw.loss(sw.w).backward();
  const std::vector<double> expect = values(sw.expect);
  expect_values(sw.w.grad(), expect, tol, "backward");
  if (on) {
    EXPECT_EQ(ag::detail::merged_product_sums() - merged, 2);  // 16, then 4
  }
  sw.loss(sw.w).backward();
  std::vector<double> twice = expect;
  for (double& v : twice)
    v *= 2;
  expect_values(sw.w.grad(), twice, tol, "backward into an existing .grad");

  merged = ag::detail::merged_product_sums();
  std::vector<Tensor> g = ag::grad({sw.loss(sw.w)}, {sw.w, sw.x1.requires_grad_()});
  expect_values(g[0], expect, tol, "grad");
  if (on) {
    EXPECT_EQ(ag::detail::merged_product_sums() - merged, 2);
  }
  {
    tg::NoGradGuard no_grad;
    expect_values(g[1], values(tg::mm(sw.c1, sw.w.detach()) * 15.0), tol, "grad of the input");
  }
  sw.x1 = sw.x1.detach();

  merged = ag::detail::merged_product_sums();
  Tensor gg = ag::grad({sw.loss(sw.w)}, {sw.w}, {}, true, /*create_graph=*/true)[0];
  EXPECT_TRUE(gg.requires_grad());
  expect_values(gg, expect, tol, "create_graph");
  EXPECT_EQ(ag::detail::merged_product_sums(), merged);  // each product a node of the new graph
  expect_values(ag::grad({(gg * gg).sum()}, {sw.w})[0], values(sw.expect.detach() * 2.0), tol,
                "double backward (dL/dW = W + const: d|dL/dW|^2/dW = 2 dL/dW)");

  Tensor w2 = sw.w.detach().clone().requires_grad_();
  std::vector<double> seen;
  w2.register_hook([&](const Tensor& grad) {
    seen = values(grad);
    return grad * 2.0;
  });
  sw.loss(w2).backward();
  expect_values(tg::tensor(seen, {5, 4}, kF64), expect, tol, "hook");
  expect_values(w2.grad(), twice, tol, "after the hook");

  // Float32 within its rounding; one use alone is mm(c^T, x) bitwise.
  SharedWeight s32(tg::kFloat32, 5);
  s32.loss(s32.w).backward();
  expect_values(s32.w.grad(), values(s32.expect), 2e-5 * 40, "float32");
  Tensor w1 = s32.w.detach().clone().requires_grad_();
  (tg::linear(s32.x1, w1) * s32.c1).sum().backward();
  tg::NoGradGuard no_grad;
  EXPECT_TRUE(tg::equal(w1.grad(), tg::mm(s32.c1.t(), s32.x1)));
}

// Long products (k in the thousands, each split in blocks; the CPU sums them
// without concatenating the operands: mm_sum), a transposed input, into a
// fresh and into an existing .grad, float32 and float64, against the sum of
// the separate products.
TEST(Engine, LongWeightGradientProductsSumWithoutConcatenating) {
  for (auto dt : {tg::kFloat64, tg::kFloat32}) {
    tg::manual_seed(31);
    auto opt = tg::TensorOptions().dtype(dt);
    Tensor w = tg::randn({40, 24}, opt).requires_grad_();
    std::vector<Tensor> xs{tg::randn({3000, 24}, opt), tg::randn({24, 1700}, opt).t(), tg::randn({513, 24}, opt)};
    std::vector<Tensor> cs{tg::randn({3000, 40}, opt), tg::randn({1700, 40}, opt), tg::randn({513, 40}, opt)};
    auto loss = [&] {
      Tensor l;
      for (size_t i = 0; i < xs.size(); ++i) {
        Tensor t = (tg::linear(xs[i], w) * cs[i]).sum();
        l = l.defined() ? l + t : t;
      }
      return l;
    };
    Tensor want;
    {
      tg::NoGradGuard no_grad;
      Tensor acc = tg::zeros({40, 24}, tg::TensorOptions().dtype(tg::kFloat64));
      for (size_t i = 0; i < xs.size(); ++i)
        acc = acc + tg::mm(cs[i].t().to(tg::kFloat64), xs[i].to(tg::kFloat64));
      want = acc;
    }
    const double tol = dt == tg::kFloat32 ? 2e-4 : 1e-11;
    const int64_t merged = ag::detail::merged_product_sums();
    loss().backward();
    if (ag::detail::products_enabled()) {
      EXPECT_EQ(ag::detail::merged_product_sums() - merged, 1) << dt;
    }
    EXPECT_EQ(w.grad().dtype(), dt);
    tgtest::expect_values(w.grad(), tgtest::values(want), tol, "fresh .grad");
    loss().backward();
    tgtest::expect_values(w.grad(), tgtest::values(want * 2.0), tol, "into an existing .grad");
    std::vector<Tensor> g = ag::grad({loss()}, {w});
    tgtest::expect_values(g[0], tgtest::values(want), tol, "grad()");
  }
}
