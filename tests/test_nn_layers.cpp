// nn's losses, layers and containers (docs/NN.md): every loss against its
// formula written out per element (float64, 1e-12), gradcheck and
// gradgradcheck of each, and the layers' values, modes and saved state.
#include <cmath>
#include <cstdio>

#include "reference.h"

namespace {

using tg::Tensor;
using tg::nn::Reduction;
namespace nn = tg::nn;
namespace F = tg::nn::functional;
namespace ag = tg::autograd;
const auto kF64 = tg::TensorOptions().dtype(tg::kFloat64);

std::vector<double> vals(const Tensor& t) { return tgtest::values(t); }
double scalar(const Tensor& t) { return t.item<double>(); }
Tensor T(std::vector<double> v, tg::IntList s) { return tg::tensor(v, s, kF64); }
Tensor I(std::vector<double> v, tg::IntList s) { return tg::tensor(v, s, tg::TensorOptions().dtype(tg::kInt64)); }

// The reduction of per-element values `l` as the loss would reduce them.
double reduced(const std::vector<double>& l, Reduction r) {
  double s = 0;
  for (double e : l)
    s += e;
  return r == Reduction::kMean ? s / double(l.size()) : s;
}

void expect_loss(const Tensor& got_none, const Tensor& got_mean, const Tensor& got_sum, const std::vector<double>& l,
                 const char* what) {
  std::vector<double> g = vals(got_none);
  ASSERT_EQ(g.size(), l.size()) << what;
  for (size_t i = 0; i < l.size(); ++i)
    EXPECT_NEAR(g[i], l[i], 1e-12 * (1 + std::fabs(l[i]))) << what << " element " << i;
  EXPECT_NEAR(scalar(got_mean), reduced(l, Reduction::kMean), 1e-12) << what << " mean";
  EXPECT_NEAR(scalar(got_sum), reduced(l, Reduction::kSum), 1e-12) << what << " sum";
}

void expect_derivatives(const std::function<Tensor(const ag::variable_list&)>& fn, ag::variable_list in,
                        const char* what) {
  for (Tensor& t : in)
    t = t.detach().requires_grad_();
  auto r1 = ag::gradcheck(fn, in);
  EXPECT_TRUE(r1.ok) << what << " gradcheck: " << r1.message;
  auto r2 = ag::gradgradcheck(fn, in);
  EXPECT_TRUE(r2.ok) << what << " gradgradcheck: " << r2.message;
}

TEST(Losses, RegressionLossesMatchTheirFormulas) {
  Tensor x = T({0.5, -1.0, 2.0, 0.1, -3.0, 1.5}, {2, 3}), y = T({0.0, 1.0, 2.5, 0.05, 0.0, 1.5}, {2, 3});
  std::vector<double> xv = vals(x), yv = vals(y), mse, l1, sl1, hub;
  const double beta = 0.7, delta = 0.8;
  for (size_t i = 0; i < xv.size(); ++i) {
    const double d = xv[i] - yv[i], a = std::fabs(d);
    mse.push_back(d * d);
    l1.push_back(a);
    sl1.push_back(a < beta ? 0.5 * d * d / beta : a - 0.5 * beta);
    hub.push_back(a <= delta ? 0.5 * d * d : delta * (a - 0.5 * delta));
  }
  auto all3 = [&](auto f, const std::vector<double>& l, const char* what) {
    expect_loss(f(Reduction::kNone), f(Reduction::kMean), f(Reduction::kSum), l, what);
  };
  all3([&](Reduction r) { return F::mse_loss(x, y, r); }, mse, "mse_loss");
  all3([&](Reduction r) { return F::l1_loss(x, y, r); }, l1, "l1_loss");
  all3([&](Reduction r) { return F::smooth_l1_loss(x, y, r, beta); }, sl1, "smooth_l1_loss");
  all3([&](Reduction r) { return F::huber_loss(x, y, r, delta); }, hub, "huber_loss");
  EXPECT_NEAR(scalar(F::smooth_l1_loss(x, y, Reduction::kSum, 0.0)), reduced(l1, Reduction::kSum), 1e-12);
  EXPECT_NEAR(scalar(nn::MSELoss()(x, y)), reduced(mse, Reduction::kMean), 1e-12);
  EXPECT_NEAR(scalar(nn::HuberLoss(Reduction::kSum, delta)(x, y)), reduced(hub, Reduction::kSum), 1e-12);
  // Shapes must match: [N, 1] against [N] is refused rather than broadcast.
  EXPECT_ERROR_CONTAINS(F::mse_loss(T({1, 2}, {2, 1}), T({1, 2}, {2})), "mse_loss: input [2, 1] and target [2]");
  EXPECT_ERROR_CONTAINS(F::kl_div(x, y, Reduction::kNone).sum() + F::mse_loss(x, y, Reduction::kBatchMean),
                        "kBatchMean is kl_div's only");
  Tensor xs = T({0.5, -1.0, 2.0, 0.3}, {2, 2}), ys = T({0.1, 0.7, 1.2, 0.9}, {2, 2});
  for (auto [name, f] : std::vector<std::pair<const char*, std::function<Tensor(const ag::variable_list&)>>>{
           {"mse_loss", [](const ag::variable_list& v) { return F::mse_loss(v[0], v[1]); }},
           {"l1_loss", [](const ag::variable_list& v) { return F::l1_loss(v[0], v[1], Reduction::kNone); }},
           {"smooth_l1_loss",
            [](const ag::variable_list& v) { return F::smooth_l1_loss(v[0], v[1], Reduction::kSum, 1.0); }},
           {"huber_loss", [](const ag::variable_list& v) { return F::huber_loss(v[0], v[1], Reduction::kMean, 0.5); }},
       })
    expect_derivatives(f, {xs, ys}, name);
}

TEST(Losses, ClassificationLossesMatchTheirFormulas) {
  // Logits [N = 3, C = 4] and targets, one of them ignored.
  Tensor z = T({0.2, -1.0, 2.0, 0.5, 1.0, 0.0, -0.5, 0.3, -2.0, 1.5, 0.1, 0.7}, {3, 4});
  Tensor t = I({2, 0, 3}, {3}), w = T({1.0, 2.0, 0.5, 1.5}, {4});
  std::vector<double> zv = vals(z), wv = vals(w);
  std::vector<int> tv = {2, 0, 3};
  std::vector<std::vector<double>> logp(3, std::vector<double>(4));
  for (int n = 0; n < 3; ++n) {
    double m = 0;
    for (int c = 0; c < 4; ++c)
      m += std::exp(zv[size_t(n * 4 + c)]);
    for (int c = 0; c < 4; ++c)
      logp[size_t(n)][size_t(c)] = zv[size_t(n * 4 + c)] - std::log(m);
  }
  // cross_entropy and nll_loss, with weights and an ignored target (index 0 of sample 1 -> ignore 0).
  std::vector<double> ce, cew;
  double wsum = 0;
  for (int n = 0; n < 3; ++n) {
    ce.push_back(-logp[size_t(n)][size_t(tv[size_t(n)])]);
    cew.push_back(-wv[size_t(tv[size_t(n)])] * logp[size_t(n)][size_t(tv[size_t(n)])]);
    wsum += wv[size_t(tv[size_t(n)])];
  }
  expect_loss(F::cross_entropy(z, t, {}, Reduction::kNone), F::cross_entropy(z, t),
              F::cross_entropy(z, t, {}, Reduction::kSum), ce, "cross_entropy");
  EXPECT_NEAR(scalar(F::cross_entropy(z, t, w)), (cew[0] + cew[1] + cew[2]) / wsum, 1e-12);
  EXPECT_NEAR(scalar(F::nll_loss(tg::log_softmax(z, 1), t, w)), (cew[0] + cew[1] + cew[2]) / wsum, 1e-12);
  // ignore_index = 0 drops sample 1 from the sum and from the mean's weights.
  EXPECT_NEAR(scalar(F::cross_entropy(z, t, w, Reduction::kMean, 0)), (cew[0] + cew[2]) / (wv[2] + wv[3]), 1e-12);
  EXPECT_EQ(vals(F::cross_entropy(z, t, {}, Reduction::kNone, 0))[1], 0.0);
  // Label smoothing eps: (1 - eps) nll + eps / C * (-sum_c logp_c), PyTorch's.
  const double eps = 0.1;
  double ls = 0;
  for (int n = 0; n < 3; ++n) {
    double u = 0;
    for (int c = 0; c < 4; ++c)
      u -= logp[size_t(n)][size_t(c)];
    ls += (1 - eps) * ce[size_t(n)] + eps / 4 * u;
  }
  EXPECT_NEAR(scalar(F::cross_entropy(z, t, {}, Reduction::kMean, -100, eps)), ls / 3, 1e-12);
  // Probability targets: -sum_c p_c logp_c, and label smoothing mixes in 1/C.
  Tensor p = T({0.1, 0.2, 0.3, 0.4, 1, 0, 0, 0, 0.25, 0.25, 0.25, 0.25}, {3, 4});
  std::vector<double> pv = vals(p), soft;
  for (int n = 0; n < 3; ++n) {
    double s = 0;
    for (int c = 0; c < 4; ++c)
      s -= ((1 - eps) * pv[size_t(n * 4 + c)] + eps / 4) * logp[size_t(n)][size_t(c)];
    soft.push_back(s);
  }
  expect_loss(F::cross_entropy(z, p, {}, Reduction::kNone, -100, eps),
              F::cross_entropy(z, p, {}, Reduction::kMean, -100, eps),
              F::cross_entropy(z, p, {}, Reduction::kSum, -100, eps), soft, "cross_entropy with probabilities");
  // [N, C, d] inputs take [N, d] targets.
  Tensor z3 =
      z.reshape({1, 3, 4}).transpose(1, 2).contiguous().transpose(1, 2);  // [1, 3, 4] non-contiguous... classes 3
  Tensor t3 = I({0, 2, 1, 1}, {1, 4});
  std::vector<double> z3v = vals(z3.contiguous());
  double sum3 = 0;
  for (int d = 0; d < 4; ++d) {
    double m = 0;
    for (int c = 0; c < 3; ++c)
      m += std::exp(z3v[size_t(c * 4 + d)]);
    sum3 -= z3v[size_t(std::vector<int>{0, 2, 1, 1}[size_t(d)] * 4 + d)] - std::log(m);
  }
  EXPECT_NEAR(scalar(F::cross_entropy(z3, t3, {}, Reduction::kSum)), sum3, 1e-12);
  EXPECT_ERROR_CONTAINS(F::cross_entropy(z, I({2, 0, 4}, {3})),
                        "cross_entropy: target 4 is out of range for 4 classes");
  EXPECT_ERROR_CONTAINS(F::nll_loss(z, I({2, 0}, {2})),
                        "nll_loss: input [3, 4] (classes along dim 1) needs a target of shape [3]");
  EXPECT_NEAR(scalar(nn::CrossEntropyLoss(w)(z, t)), (cew[0] + cew[1] + cew[2]) / wsum, 1e-12);
  // Binary: probabilities and logits, weights and pos_weight.
  Tensor q = T({0.1, 0.8, 0.5, 0.99}, {4}), y = T({0, 1, 1, 0.3}, {4}), x = T({-2.0, 0.0, 1.5, 30.0}, {4});
  Tensor bw = T({1, 2, 0.5, 1}, {4}), pw = T({3.0, 3.0, 3.0, 3.0}, {4});
  std::vector<double> qv = vals(q), yv = vals(y), xv = vals(x), bwv = vals(bw), bce, bcel;
  for (size_t i = 0; i < 4; ++i) {
    bce.push_back(-bwv[i] * (yv[i] * std::log(qv[i]) + (1 - yv[i]) * std::log(1 - qv[i])));
    const double s = 1 / (1 + std::exp(-xv[i]));
    // log(1 - s) for x = 30 loses everything in 1 - s: use -x - log1p(e^-x).
    const double log_s = -std::log1p(std::exp(-xv[i])), log_1ms = -xv[i] - std::log1p(std::exp(-xv[i]));
    (void)s;
    bcel.push_back(-(3.0 * yv[i] * log_s + (1 - yv[i]) * log_1ms));
  }
  expect_loss(F::binary_cross_entropy(q, y, bw, Reduction::kNone), F::binary_cross_entropy(q, y, bw),
              F::binary_cross_entropy(q, y, bw, Reduction::kSum), bce, "binary_cross_entropy");
  expect_loss(F::binary_cross_entropy_with_logits(x, y, {}, Reduction::kNone, pw),
              F::binary_cross_entropy_with_logits(x, y, {}, Reduction::kMean, pw),
              F::binary_cross_entropy_with_logits(x, y, {}, Reduction::kSum, pw), bcel, "bce_with_logits");
  // Its gradient at logit 0 is sigmoid(0) - target = 0.5 - y (both branches meet there).
  Tensor x0 = T({0.0}, {1}).requires_grad_();
  F::binary_cross_entropy_with_logits(x0, T({0.25}, {1}), {}, Reduction::kSum).backward();
  EXPECT_NEAR(vals(x0.grad())[0], 0.25, 1e-15);
  // Huge logits stay finite.
  EXPECT_TRUE(std::isfinite(scalar(F::binary_cross_entropy_with_logits(T({1e4, -1e4}, {2}), T({0, 1}, {2})))));
  // kl_div: target (log target - input); 0 where the target is 0; batchmean.
  Tensor li = tg::log_softmax(z, 1), pt = p;
  double kl = 0;
  std::vector<double> liv = vals(li);
  for (size_t i = 0; i < pv.size(); ++i)
    if (pv[i] > 0) kl += pv[i] * (std::log(pv[i]) - liv[i]);
  EXPECT_NEAR(scalar(F::kl_div(li, pt, Reduction::kSum)), kl, 1e-12);
  EXPECT_NEAR(scalar(F::kl_div(li, pt, Reduction::kBatchMean)), kl / 3, 1e-12);
  EXPECT_NEAR(scalar(F::kl_div(li, pt, Reduction::kMean)), kl / 12, 1e-12);
  EXPECT_NEAR(scalar(F::kl_div(li, tg::log(pt + 1e-300), Reduction::kSum, true)), kl, 1e-9);
  // Derivatives of every one, to second order.
  Tensor zs = T({0.2, -1.0, 2.0, 0.5, 1.0, 0.0}, {2, 3}), ts = I({2, 0}, {2}), ws = T({1, 2, 0.5}, {3});
  Tensor ps = T({0.2, 0.3, 0.5, 0.6, 0.1, 0.3}, {2, 3});
  expect_derivatives(
      [&](const ag::variable_list& v) { return F::cross_entropy(v[0], ts, ws, Reduction::kMean, -100, 0.2); }, {zs},
      "cross_entropy");
  expect_derivatives([&](const ag::variable_list& v) { return F::cross_entropy(v[0], v[1], {}, Reduction::kSum); },
                     {zs, ps}, "cross_entropy with probabilities");
  expect_derivatives([&](const ag::variable_list& v) { return F::nll_loss(v[0], ts, {}, Reduction::kNone); }, {zs},
                     "nll_loss");
  expect_derivatives([&](const ag::variable_list& v) { return F::binary_cross_entropy(v[0], v[1], bw); }, {q, y},
                     "binary_cross_entropy");
  expect_derivatives(
      [&](const ag::variable_list& v) {
        return F::binary_cross_entropy_with_logits(v[0], v[1], bw, Reduction::kMean, pw);
      },
      {x * 0.1, y}, "binary_cross_entropy_with_logits");
  expect_derivatives(
      [&](const ag::variable_list& v) { return F::kl_div(tg::log_softmax(v[0], 1), v[1], Reduction::kBatchMean); },
      {zs, ps}, "kl_div");
}

TEST(Layers, ActivationsLayerNormDropoutAndFourierFeatures) {
  Tensor x = T({-2.0, -0.5, 0.3, 1.7}, {4});
  std::vector<double> xv = vals(x);
  std::vector<double> lr = vals(nn::LeakyReLU(0.2)(x)), el = vals(nn::ELU(1.5)(x)), ts = vals(nn::Tanhshrink()(x));
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_DOUBLE_EQ(lr[i], xv[i] > 0 ? xv[i] : 0.2 * xv[i]);
    EXPECT_NEAR(el[i], xv[i] > 0 ? xv[i] : 1.5 * std::expm1(xv[i]), 1e-15);
    EXPECT_NEAR(ts[i], xv[i] - std::tanh(xv[i]), 1e-15);
  }
  for (const char* name : {"leaky_relu", "elu", "tanhshrink"}) {
    auto act = nn::make_activation(name);
    expect_derivatives([&](const ag::variable_list& v) { return (*act)(v[0]); }, {x}, name);
  }
  // ELU's gradient at large inputs is finite (its exponential sees x <= 0 only).
  Tensor big = T({800.0}, {1}).requires_grad_();
  F::elu(big).sum().backward();
  EXPECT_EQ(vals(big.grad())[0], 1.0);
  // LayerNorm over the last dim, against the formula (biased variance).
  tg::manual_seed(4);
  nn::LayerNorm ln({3}, 1e-5, true, kF64);
  EXPECT_EQ(ln->named_parameters().size(), 2u);
  Tensor h = T({1, 2, 4, -1, 0, 5}, {2, 3});
  std::vector<double> hv = vals(h), got = vals(ln(h));
  for (int r = 0; r < 2; ++r) {
    double m = (hv[size_t(3 * r)] + hv[size_t(3 * r + 1)] + hv[size_t(3 * r + 2)]) / 3, v = 0;
    for (int c = 0; c < 3; ++c)
      v += (hv[size_t(3 * r + c)] - m) * (hv[size_t(3 * r + c)] - m) / 3;
    for (int c = 0; c < 3; ++c)
      EXPECT_NEAR(got[size_t(3 * r + c)], (hv[size_t(3 * r + c)] - m) / std::sqrt(v + 1e-5), 1e-12);
  }
  expect_derivatives([&](const ag::variable_list& v) { return F::layer_norm(v[0], {3}, v[1], v[2]); },
                     {h, T({1, 0.5, 2}, {3}), T({0.1, 0.2, 0.3}, {3})}, "layer_norm");
  EXPECT_ERROR_CONTAINS(ln(T({1, 2}, {2})), "layer_norm: normalized_shape [3] must be the last dims");
  // Dropout: zeros with probability p, the rest scaled by 1 / (1 - p); the
  // identity in eval mode; reproducible from the seed.
  nn::Dropout drop(0.25);
  Tensor ones = tg::ones({20000}, kF64);
  tg::manual_seed(5);
  std::vector<double> d = vals(drop(ones));
  tg::manual_seed(5);
  EXPECT_EQ(vals(drop(ones)), d);
  size_t zeros = 0;
  for (double e : d) {
    if (e == 0) ++zeros;
    else EXPECT_DOUBLE_EQ(e, 1 / 0.75);
  }
  EXPECT_NEAR(double(zeros) / 20000, 0.25, 0.015);
  drop->eval();
  EXPECT_TRUE(tg::equal(drop(ones), ones));
  EXPECT_ERROR_CONTAINS(nn::Dropout(1.5), "Dropout: p must be in [0, 1]");
  // FourierFeatures: [sin(2 pi x B), cos(2 pi x B)]; B a buffer or a parameter.
  tg::manual_seed(6);
  nn::FourierFeatures ff(2, 3, 2.0, false, kF64);
  EXPECT_EQ(ff->named_buffers().size(), 1u);
  EXPECT_EQ(ff->named_parameters().size(), 0u);
  Tensor pt = T({0.3, -0.7}, {1, 2});
  std::vector<double> b = vals(ff->B), f = vals(ff(pt));
  ASSERT_EQ(f.size(), 6u);
  for (int j = 0; j < 3; ++j) {
    const double zj = 2 * M_PI * (0.3 * b[size_t(j)] + -0.7 * b[size_t(3 + j)]);
    EXPECT_NEAR(f[size_t(j)], std::sin(zj), 1e-12);
    EXPECT_NEAR(f[size_t(3 + j)], std::cos(zj), 1e-12);
  }
  nn::FourierFeatures trainable(2, 3, 1.0, true, kF64);
  EXPECT_EQ(trainable->named_parameters().size(), 1u);
  EXPECT_ERROR_CONTAINS(ff(T({1, 2, 3}, {1, 3})), "FourierFeatures: expected inputs [..., 2]");
}

TEST(Layers, ContainersEmbeddingAndSavedState) {
  tg::manual_seed(7);
  nn::ModuleList list(nn::Linear(2, 3), nn::Identity());
  list->push_back(std::make_shared<nn::TanhImpl>());
  EXPECT_EQ(list->size(), 3u);
  EXPECT_EQ(list[1]->type_name(), "Identity");
  EXPECT_ERROR_CONTAINS(list[5], "ModuleList: index 5 is out of range for 3 modules");
  size_t n = 0;
  for (const auto& m : list)
    n += m != nullptr;
  EXPECT_EQ(n, 3u);
  nn::ModuleDict dict;
  dict->insert("embed", std::make_shared<nn::EmbeddingImpl>(5, 2, false, kF64));
  dict->insert("norm", std::make_shared<nn::LayerNormImpl>(tg::IntList{2}, 1e-5, true, kF64));
  EXPECT_TRUE(dict->contains("norm"));
  EXPECT_EQ(dict->keys(), (std::vector<std::string>{"embed", "norm"}));
  EXPECT_ERROR_CONTAINS(dict->insert("norm", std::make_shared<nn::IdentityImpl>()), "key 'norm' is already present");
  EXPECT_ERROR_CONTAINS(dict["nope"], "no module under 'nope'; the keys are 'embed', 'norm'");
  auto& emb = static_cast<nn::EmbeddingImpl&>(*dict["embed"]);
  Tensor rows = emb(I({4, 0, 4}, {3}));
  EXPECT_EQ(rows.sizes(), (tg::IntList{3, 2}));
  EXPECT_EQ(vals(rows.select(0, 0)), vals(emb.weight.select(0, 4)));
  EXPECT_ERROR_CONTAINS(emb(I({5}, {1})), "out of range");
  // state_dict and safetensors cover the new layers (dotted names), and a
  // reload into fresh modules reproduces the outputs.
  struct Net : nn::Module {
    Net() : Module("Net") {
      ff = register_module("ff", std::make_shared<nn::FourierFeaturesImpl>(2, 4, 1.0, false, kF64));
      norm = register_module("norm", std::make_shared<nn::LayerNormImpl>(tg::IntList{8}, 1e-5, true, kF64));
      out = register_module("out", std::make_shared<nn::LinearImpl>(8, 1, true, kF64));
    }
    Tensor forward(const Tensor& x) override { return (*out)((*norm)((*ff)(x))); }
    std::shared_ptr<nn::FourierFeaturesImpl> ff;
    std::shared_ptr<nn::LayerNormImpl> norm;
    std::shared_ptr<nn::LinearImpl> out;
  };
  tg::manual_seed(8);
  Net a;
  tg::manual_seed(9);
  Net b;
  Tensor pts = T({0.1, 0.2, -0.3, 0.4}, {2, 2});
  EXPECT_FALSE(tg::equal(a(pts), b(pts)));
  std::vector<std::string> keys;
  for (const auto& [k, v] : a.state_dict())
    keys.push_back(k);
  // parameters first, then buffers (named_parameters, named_buffers)
  EXPECT_EQ(keys, (std::vector<std::string>{"norm.weight", "norm.bias", "out.weight", "out.bias", "ff.B"}));
  const std::string path = ::testing::TempDir() + "tapegrad_layers.safetensors";
  nn::save(a, path);
  nn::load(b, path);
  EXPECT_TRUE(tg::equal(a(pts), b(pts)));
  std::remove(path.c_str());
}

// binary_cross_entropy takes probabilities only (PyTorch's rule: today 1.5
// gave NaN), and weights that would broadcast the loss to another shape are
// refused (today a [3, 1] weight made a [3, 3] loss of a [3] input).
TEST(Losses, BinaryCrossEntropyRefusesInputsOutsideZeroOneAndWeightsThatChangeTheShape) {
  Tensor y = T({0, 1, 0}, {3});
  EXPECT_ERROR_CONTAINS(F::binary_cross_entropy(T({0.2, 1.5, 0.3}, {3}), y),
                        "binary_cross_entropy: all elements of input should be between 0 and 1, got 1.5 at "
                        "(flattened) index 1 of input [3]");
  EXPECT_ERROR_CONTAINS(F::binary_cross_entropy(T({-0.25, 0.5, 0.3}, {3}), y, {}, Reduction::kNone),
                        "got -0.25 at (flattened) index 0");
  EXPECT_ERROR_CONTAINS(F::binary_cross_entropy(T({0.2, 0.5, std::nan("")}, {3}), y), "got nan at (flattened) index 2");
  EXPECT_ERROR_CONTAINS(nn::BCELoss()(T({0.5, 2.0}, {1, 2}), T({1, 0}, {1, 2})), "got 2 at (flattened) index 1");
  // 0 and 1 themselves are probabilities (the logs clamp at -100).
  EXPECT_NEAR(scalar(F::binary_cross_entropy(T({0, 1, 0.5}, {3}), T({1, 0, 1}, {3}), {}, Reduction::kSum)),
              200 + std::log(2.0), 1e-12);
  Tensor q = T({0.2, 0.6, 0.9}, {3}).requires_grad_();
  std::vector<double> qv = vals(q), yv = vals(y);
  auto bce = [&](size_t i) { return -(yv[i] * std::log(qv[i]) + (1 - yv[i]) * std::log(1 - qv[i])); };
  // Weights of shape [3], [1] and [] keep the [3] loss; [3, 1] is refused.
  EXPECT_ERROR_CONTAINS(F::binary_cross_entropy(q, y, T({1, 2, 3}, {3, 1}), Reduction::kNone),
                        "binary_cross_entropy: weight [3, 1] does not broadcast to input's shape [3] without changing "
                        "it");
  EXPECT_ERROR_CONTAINS(nn::BCELoss(T({1, 2}, {2}))(q, y), "weight [2] does not broadcast to input's shape [3]");
  std::vector<double> l3 = vals(F::binary_cross_entropy(q, y, T({1, 2, 3}, {3}), Reduction::kNone));
  std::vector<double> l1 = vals(F::binary_cross_entropy(q, y, T({2}, {1}), Reduction::kNone));
  std::vector<double> l0 = vals(F::binary_cross_entropy(q, y, T({2}, {}), Reduction::kNone));
  ASSERT_EQ(l3.size(), 3u);
  ASSERT_EQ(l1.size(), 3u);
  ASSERT_EQ(l0.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_NEAR(l3[i], double(i + 1) * bce(i), 1e-12);
    EXPECT_NEAR(l1[i], 2 * bce(i), 1e-12);
    EXPECT_NEAR(l0[i], 2 * bce(i), 1e-12);
  }
  F::binary_cross_entropy(q, y).backward();  // nothing refused is left half-done
  EXPECT_NEAR(vals(q.grad())[1], -1 / 0.6 / 3, 1e-12);
  // The logits form: weight and pos_weight by the same rule; pos_weight [C]
  // for an [N, C] input multiplies each class's positive term.
  Tensor x = T({-1, 0.5, 2, -0.3}, {2, 2}), t = T({1, 0, 1, 1}, {2, 2});
  const char* logits = "binary_cross_entropy_with_logits: ";
  EXPECT_ERROR_CONTAINS(F::binary_cross_entropy_with_logits(x, t, T({1, 2}, {2, 1, 1})),
                        std::string(logits) + "weight [2, 1, 1] does not broadcast to input's shape [2, 2]");
  EXPECT_ERROR_CONTAINS(F::binary_cross_entropy_with_logits(x.reshape({4}), t.reshape({4}), {}, Reduction::kNone,
                                                            T({1, 2, 3, 4}, {4, 1})),
                        std::string(logits) + "pos_weight [4, 1] does not broadcast to input's shape [4]");
  EXPECT_ERROR_CONTAINS(nn::BCEWithLogitsLoss(Tensor(), Reduction::kMean, T({1, 2, 3}, {3}))(x, t),
                        "pos_weight [3] does not broadcast to input's shape [2, 2]");
  std::vector<double> xv = vals(x), tv = vals(t), pw = {2, 5};
  std::vector<double> got = vals(F::binary_cross_entropy_with_logits(x, t, {}, Reduction::kNone, T(pw, {2})));
  ASSERT_EQ(got.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    const double log_s = -std::log1p(std::exp(-xv[i])), log_1ms = -xv[i] + log_s;
    EXPECT_NEAR(got[i], -(pw[i % 2] * tv[i] * log_s + (1 - tv[i]) * log_1ms), 1e-12);
  }
}

// cross_entropy with a floating target of the class-index shape says to pass
// Int64 class indices (it read as a probability target of the wrong shape).
TEST(Losses, CrossEntropyWithAFloatingClassIndexTargetSaysToPassInt64) {
  Tensor z = T({0.2, -1.0, 2.0, 0.5, 1.0, 0.0}, {2, 3});
  EXPECT_ERROR_CONTAINS(F::cross_entropy(z, T({2, 0}, {2})),
                        "cross_entropy: target [2] is Float64 of the class-index shape (input [2, 3] without its "
                        "class dim); pass the class indices as Int64");
  EXPECT_ERROR_CONTAINS(nn::CrossEntropyLoss()(T({0.2, -1.0, 2.0}, {3}), T({1}, {1}).reshape({})),
                        "pass the class indices as Int64");
  EXPECT_ERROR_CONTAINS(F::cross_entropy(z, T({1, 0, 0, 0}, {2, 2})), "probability targets must have input's shape");
  EXPECT_NEAR(scalar(F::cross_entropy(z, T({2, 0}, {2}).to(tg::kInt64))), scalar(F::cross_entropy(z, I({2, 0}, {2}))),
              0);
}

// Embedding's padding_idx (PyTorch's): a negative one wraps, its row starts at
// zero, lookups read it but give it no gradient; max_norm scales the rows
// looked up (only those) down to it, in place.
TEST(Layers, EmbeddingPaddingIdxAndMaxNorm) {
  tg::manual_seed(11);
  nn::Embedding e(5, 3, false, kF64, -2);
  ASSERT_TRUE(e->padding_idx().has_value());
  EXPECT_EQ(*e->padding_idx(), 3);
  EXPECT_EQ(vals(e->weight.select(0, 3)), (std::vector<double>{0, 0, 0}));
  EXPECT_NE(vals(e->weight.select(0, 2)), (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(e->extra_repr(), "Embedding(5, 3, padding_idx=3)");
  {
    ag::NoGradGuard no_grad;
    e->weight.select(0, 3).fill_(2.0);  // the forward still reads the row
  }
  Tensor idx = I({3, 1, 3, 0}, {2, 2});
  Tensor out = e(idx);
  ASSERT_EQ(out.sizes(), (tg::IntList{2, 2, 3}));
  EXPECT_EQ(vals(out.select(0, 0).select(0, 0)), (std::vector<double>{2, 2, 2}));
  Tensor coef = tg::arange(12, kF64).reshape({2, 2, 3}) + 1.0;
  (out * coef).sum().backward();
  std::vector<double> g = vals(e->weight.grad());
  const std::vector<double> want = {10, 11, 12, 4, 5, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(g, want);
  // The sparse gradient sums to the same table; the functional form too.
  nn::Embedding es(5, 3, true, kF64, 3);
  es->weight.select(0, 3).detach().fill_(2.0);
  (es(idx) * coef).sum().backward();
  ASSERT_TRUE(es->weight.grad().is_sparse());
  EXPECT_EQ(vals(es->weight.grad().to_dense()), want);
  Tensor w = T({1, 2, 3, 4, 5, 6}, {3, 2}).requires_grad_();
  F::embedding(I({0, 0, 2}, {3}), w, 0).sum().backward();
  EXPECT_EQ(vals(w.grad()), (std::vector<double>{0, 0, 0, 0, 1, 1}));
  EXPECT_ERROR_CONTAINS(nn::Embedding(5, 3, false, kF64, 5),
                        "Embedding: padding_idx 5 is out of range for 5 embeddings; it must be in [-5, 5)");
  EXPECT_ERROR_CONTAINS(F::embedding(I({0}, {1}), w, -4), "embedding: padding_idx -4 is out of range for 3 embeddings");
  // max_norm: rows 0 and 2 are looked up and too long; row 1 is as long but
  // not looked up, row 3 exactly at the limit.
  Tensor m = T({3, 4, 3, 4, 6, 8, 1, 0}, {4, 2}).requires_grad_();
  Tensor r = F::embedding(I({2, 0, 2, 3}, {4}), m, std::nullopt, 1.0);
  const double s0 = 1 / (5 + 1e-7), s2 = 1 / (10 + 1e-7);
  std::vector<double> mv = vals(m), rv = vals(r);
  const std::vector<double> renormed = {3 * s0, 4 * s0, 3, 4, 6 * s2, 8 * s2, 1, 0};
  for (size_t i = 0; i < 8; ++i)
    EXPECT_DOUBLE_EQ(mv[i], renormed[i]) << i;
  const std::vector<double> looked = {6 * s2, 8 * s2, 3 * s0, 4 * s0, 6 * s2, 8 * s2, 1, 0};
  for (size_t i = 0; i < 8; ++i)
    EXPECT_DOUBLE_EQ(rv[i], looked[i]) << i;
  EXPECT_TRUE(m.is_leaf());
  r.sum().backward();
  EXPECT_EQ(vals(m.grad()), (std::vector<double>{1, 1, 0, 0, 2, 2, 1, 1}));
  // The 1-norm, through the module.
  nn::Embedding en(4, 2, false, kF64, std::nullopt, 2.0, 1.0);
  {
    ag::NoGradGuard no_grad;
    en->weight.copy_(T({3, 4, 0.5, 0.5, 1, 1, 2, -2}, {4, 2}));
  }
  en(I({0, 1, 3}, {3}));
  std::vector<double> ev = vals(en->weight);
  EXPECT_DOUBLE_EQ(ev[0], 3 * 2 / (7 + 1e-7));
  EXPECT_DOUBLE_EQ(ev[2], 0.5);
  EXPECT_DOUBLE_EQ(ev[6], 2 * 2 / (4 + 1e-7));
  EXPECT_EQ(en->extra_repr(), "Embedding(4, 2, max_norm=2, norm_type=1)");
  EXPECT_ERROR_CONTAINS(nn::Embedding(4, 2, false, kF64, std::nullopt, -1.0),
                        "Embedding: max_norm must be a finite number >= 0, got -1");
  EXPECT_ERROR_CONTAINS(F::embedding(I({7}, {1}), m, std::nullopt, 1.0), "out of range");
}

// On a GPU the range is read on the host too (one sync: the same error as on
// the CPU); under CUDA graph capture nothing can be read, so a replay with an
// input out of range gives a NaN loss, never a finite wrong one.
// At an input of exactly 0 or 1 (sigmoid(20) in float32) the gradient is
// PyTorch's (x - t) / 1e-12: 0 where the target matches, +-1e12 where it
// does not, never NaN (the clamp's zero slope times the log's infinite one
// was NaN even for a matching target); inside (0, 1) it is the exact one.
TEST(Losses, BinaryCrossEntropyGradientAtZeroAndOneIsPyTorchsNotNaN) {
  Tensor x = T({0, 1, 0, 1, 0.25}, {5}).requires_grad_();
  Tensor t = T({0, 1, 1, 0, 1}, {5});
  Tensor loss = F::binary_cross_entropy(x, t, {}, Reduction::kSum);
  EXPECT_NEAR(loss.item<double>(), 200 - std::log(0.25), 1e-12);
  loss.backward();
  tgtest::expect_values(x.grad(), {0, 0, -1e12, 1e12, -4}, 1e-3, "d/dx at the edges and inside");
  // Through a float32 sigmoid that rounds to 1 and 0: finite, 0 where it matches.
  Tensor z = tg::tensor({20.0, -20.0, 0.5}, {3}).requires_grad_();
  F::binary_cross_entropy(tg::sigmoid(z), tg::tensor({1.0, 0.0, 1.0}, {3})).backward();
  std::vector<double> g = tgtest::values(z.grad());
  EXPECT_EQ(g[0], 0.0);
  EXPECT_TRUE(std::isfinite(g[1]) && std::fabs(g[1]) < 1e-8) << g[1];
  EXPECT_NEAR(g[2], -(1 - 1 / (1 + std::exp(-0.5))) / 3, 1e-6);
  // Second derivatives inside (0, 1) are the exact ones: d2/dx2 = t/x^2 + (1-t)/(1-x)^2.
  Tensor xi = T({0.25, 0.6}, {2}).requires_grad_();
  Tensor gi =
      tg::autograd::grad({F::binary_cross_entropy(xi, T({1, 0}, {2}), {}, Reduction::kSum)}, {xi}, {}, true, true)[0];
  Tensor hi = tg::autograd::grad({gi.sum()}, {xi})[0];
  tgtest::expect_values(hi, {16, 1 / 0.16}, 1e-12, "second derivative");
}

TEST(Losses, BinaryCrossEntropyChecksItsRangeOnTheGpuAndIsNaNUnderCapture) {
  REQUIRE_GPU();
  namespace cu = tg::cuda;
  const tg::Device gpu(tg::kCUDA, 0);
  Tensor y = T({0, 1, 0}, {3}).to(gpu), good = T({0.2, 0.5, 0.3}, {3}), bad = T({0.2, 1.5, 0.3}, {3});
  EXPECT_ERROR_CONTAINS(F::binary_cross_entropy(bad.to(gpu), y),
                        "binary_cross_entropy: all elements of input should be between 0 and 1, got 1.5 at "
                        "(flattened) index 1");
  const double want = scalar(F::binary_cross_entropy(good, y.to(tg::Device(tg::kCPU))));
  EXPECT_NEAR(scalar(F::binary_cross_entropy(good.to(gpu), y)), want, 1e-12);
  Tensor x = good.to(gpu), loss;
  cu::Stream side = cu::stream_from_pool();
  side.wait_stream(cu::current_stream());
  {
    cu::StreamGuard g(side);
    F::binary_cross_entropy(x, y);  // warm-up on the capture stream
  }
  cu::current_stream().wait_stream(side);
  cu::CUDAGraph graph;
  {
    cu::Graph capture(graph);
    loss = F::binary_cross_entropy(x, y);
  }
  graph.replay();
  EXPECT_NEAR(scalar(loss), want, 1e-12);
  x.copy_(bad.to(gpu));
  graph.replay();
  EXPECT_TRUE(std::isnan(scalar(loss)));
}

// The Nd norm layers check their input's rank (a 3-D input to BatchNorm2d
// would normalize the wrong dims), and InstanceNormNd takes one unbatched
// sample [C, spatial...] as torch's.
TEST(NNLayers, NormLayersCheckTheRankAndInstanceNormTakesAnUnbatchedSample) {
  tg::manual_seed(31);
  nn::InstanceNorm2d in(3, 1e-5, 0.1, false, false, kF64);
  Tensor x = tg::randn({3, 5, 4}, kF64);  // [C, H, W]
  Tensor y = in->forward(x);
  ASSERT_EQ(y.sizes(), x.sizes());
  Tensor want = in->forward(x.unsqueeze(0)).squeeze(0);
  EXPECT_TRUE(tg::allclose(y, want, 0, 1e-14));
  // Each channel over its H x W: mean 0, (biased) variance 1 - eps / (var + eps).
  EXPECT_LT(tg::amax(tg::abs(y.mean({1, 2}))).item<double>(), 1e-12);
  EXPECT_ERROR_CONTAINS(in->forward(tg::randn({3, 5}, kF64)),
                        "InstanceNorm2d: expected a 4-D input [N, C, ...] or a 3-D unbatched one [C, ...], got [3, 5]");
  nn::BatchNorm2d bn(3, 1e-5, 0.1, true, true, kF64);
  EXPECT_ERROR_CONTAINS(bn->forward(tg::randn({3, 5, 4}, kF64)),
                        "BatchNorm2d: expected a 4-D input [N, C, H, W], got [3, 5, 4]");
  EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 0) << "a refused call changes nothing";
  nn::BatchNorm1d bn1(3, 1e-5, 0.1, true, true, kF64);
  EXPECT_ERROR_CONTAINS(bn1->forward(tg::randn({2, 3, 4, 4}, kF64)), "BatchNorm1d: expected a 2-D or 3-D input");
  EXPECT_EQ(bn1->forward(tg::randn({4, 3}, kF64)).sizes(), (tg::IntList{4, 3}));
  EXPECT_EQ(bn1->forward(tg::randn({4, 3, 6}, kF64)).sizes(), (tg::IntList{4, 3, 6}));
}

}  // namespace
