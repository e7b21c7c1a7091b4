// A small MLP's recorded forward in one launch and its backward in one
// (autograd/fused_mlp.h).
#include "autograd/fused_mlp.h"

#include <atomic>

#include "autograd/accumulation.h"
#include "autograd/ops/record.h"
#include "tensor/env.h"
#include "tensor/kernels.h"

namespace tg::autograd {

using namespace ops_detail;

namespace {

std::atomic<int64_t> g_fallbacks{0};

// The activation as the layers compute it.
Tensor activate(Activation act, const Tensor& x) {
  switch (act) {
    case Activation::Tanh: return tg::tanh(x);
    case Activation::Sigmoid: return tg::sigmoid(x);
    case Activation::Silu: return tg::silu(x);
    case Activation::Relu: return tg::relu(x);
    default: TG_CHECK(false, "Sequential: no fused MLP for this activation"); return {};
  }
}

// Inputs: x, then each layer's weight and bias (an undefined bias: no edge).
class MlpBackward final : public OpNode, public ProductFormula {
 public:
  MlpBackward(Activation act, bool last_act, size_t layers)
      : OpNode("Sequential", "MlpBackward"),
        act_(act),
        last_act_(last_act),
        w_(layers),
        b_(layers),
        z_(layers),
        h_(layers) {}

  variable_list apply(variable_list&& grads) override {
    const size_t L = w_.size();
    variable_list out(1 + 2 * L);
    const Tensor& g = grads[0];
    if (!g.defined()) return out;
    // Recorded (create_graph), or tangents to carry (forward over reverse):
    // the formulas in public ops.
    if (is_grad_enabled() || forward_ad::is_active()) return recorded(g);
    auto activated = [&](size_t l) { return l + 1 < L || last_act_; };
    auto params = [&](size_t l) { return should_compute_output(1 + 2 * l) || should_compute_output(2 + 2 * l); };
    const bool need_x = should_compute_output(0);
    // The lowest layer whose pre-activation gradient is needed (0 for x's).
    size_t lowest = L;
    for (size_t l = L; l-- > 0;)
      if (params(l) || (l == 0 && need_x)) lowest = l;
    if (lowest == L) return out;
    // Only what this backward reads is unpacked (and version-checked), as
    // the layers' own nodes save only what their gradients need.
    std::vector<Tensor> w(L), z(L), gz(L);
    for (size_t l = lowest; l < L; ++l) {
      if (l > lowest || (l == 0 && need_x)) w[l] = w_[l].unpack(this, "weight");
      if (activated(l)) z[l] = z_[l].unpack(this, "pre-activation");
      // dL/dz_l in memory where layer l's parameters need it (the kernel
      // carries it down in shared memory); a last layer without
      // activation has g itself.
      if (params(l) && activated(l)) gz[l] = tg::empty({g.size(0), widths_[l + 1]}, g.options());
    }
    const Tensor gc = g.contiguous();
    Tensor gx = need_x ? tg::empty({g.size(0), widths_[0]}, g.options()) : Tensor();
    const bool kernel = need_x || lowest + 1 < L || activated(lowest);
    if (kernel) {
      const kernels::Backend& be = kernels::backend(g.device(), "Sequential backward");
      if (!be.mlp_backward || !be.mlp_backward(act_, last_act_, gc, widths_, z, w, gx, gz, int(lowest))) {
        g_fallbacks.fetch_add(1);
        return recorded(g);
      }
    }
    for (size_t l = lowest; l < L; ++l) {
      const Tensor& gl = activated(l) ? gz[l] : gc;
      if (should_compute_output(1 + 2 * l)) {
        const Tensor in = l == 0 ? x_.unpack(this, "input") : h_[l - 1].unpack(this, "hidden");
        out[1 + 2 * l] = product_grad(*this, 1 + 2 * l, gl, in);
      }
      if (should_compute_output(2 + 2 * l)) out[2 + 2 * l] = tg::sum(gl, {0});
    }
    out[0] = gx;
    return out;
  }

  void release_variables() override {
    x_.release();
    for (auto* v : {&w_, &b_, &z_, &h_})
      for (SavedVariable& s : *v)
        s.release();
  }

  Activation act_;
  bool last_act_;
  std::vector<int64_t> widths_;  // the layers' widths, input first
  SavedVariable x_;
  std::vector<SavedVariable> w_, b_, z_, h_;

 private:
  // The backward in public ops (recorded under create_graph; also where the
  // kernel declines): the forward again from the saved inputs, then each
  // layer's formulas, as Linear's and the activation's nodes compute them.
  variable_list recorded(const Tensor& g) {
    const size_t L = w_.size();
    variable_list out(1 + 2 * L);
    std::vector<Tensor> in(L), pre(L), w(L);
    Tensor hcur = x_.unpack(this, "input");
    for (size_t l = 0; l < L; ++l) {
      w[l] = w_[l].unpack(this, "weight");
      in[l] = hcur;
      if (l + 1 == L && !last_act_) break;  // the last layer's output is not needed
      pre[l] = tg::linear(hcur, w[l], b_[l].unpack(this, "bias"));
      hcur = activate(act_, pre[l]);
    }
    Tensor gl = g;
    for (size_t l = L; l-- > 0;) {
      if (l + 1 < L || last_act_) gl = tg::activation_grad(gl, pre[l], act_, 1);
      if (should_compute_output(1 + 2 * l)) out[1 + 2 * l] = tg::mm(gl.t(), in[l]);
      if (should_compute_output(2 + 2 * l)) out[2 + 2 * l] = tg::sum(gl, {0});
      if (l > 0 || should_compute_output(0)) gl = tg::mm(gl, w[l]);
    }
    out[0] = should_compute_output(0) ? gl : Tensor();
    return out;
  }
};

}  // namespace

int64_t fused_mlp_fallbacks() { return g_fallbacks.load(); }

Tensor fused_mlp(Activation act, bool last_act, const Tensor& x, const std::vector<Tensor>& weights,
                 const std::vector<Tensor>& biases) {
  const kernels::Backend& be = kernels::backend(x.device(), "Sequential");
  if (!be.mlp_forward || !be.mlp_backward || weights.empty() || biases.size() != weights.size() || x.dim() != 2)
    return {};
  if (act != Activation::Tanh && act != Activation::Sigmoid && act != Activation::Silu && act != Activation::Relu)
    return {};
  const size_t L = weights.size();
  const TensorOptions o = x.options();
  // The kernels' sizes (cuda/kernels/small_mlp.cuh: at most 8 layers,
  // widths <= 64, each layer's product <= 2^21 multiply-adds), checked
  // before the saved buffer is allocated; the backend checks the rest.
  if (L > 8) return {};
  const int64_t rows = x.size(0);
  int64_t in = x.size(1);
  for (size_t l = 0; l < L; ++l) {
    if (!weights[l].defined() || weights[l].dim() != 2) return {};
    const int64_t w = weights[l].size(0);
    if (in > 64 || w > 64 || double(rows) * double(in) * double(w) > 0x1p21) return {};
    in = w;
  }
  std::vector<Tensor> inputs{x};
  for (size_t l = 0; l < L; ++l)
    inputs.insert(inputs.end(), {weights[l], biases[l]});
  const bool record = should_record(inputs);
  if (record && !tg::detail::switched_on<tg::detail::OffSwitch::kFusedMlpRecorded>()) return {};
  // Recorded: the pre-activations z where an activation follows and the
  // hidden layers' outputs h, views of one buffer (one span for a captured
  // head's group to keep out of).
  std::vector<Tensor> z(L), h(L);
  if (record) {
    int64_t total = 0;
    for (size_t l = 0; l < L; ++l)
      total += weights[l].size(0) * (int64_t(l + 1 < L || last_act) + int64_t(l + 1 < L));
    const Tensor buf = tg::empty({rows * total}, o);
    int64_t at = 0;
    auto take = [&](int64_t w) {
      Tensor t = buf.narrow(0, at, rows * w).view({rows, w});
      at += rows * w;
      return t;
    };
    for (size_t l = 0; l < L; ++l) {
      const int64_t w = weights[l].size(0);
      if (l + 1 < L || last_act) z[l] = take(w);
      if (l + 1 < L) h[l] = take(w);
    }
  }
  Tensor out = tg::empty({rows, weights.back().size(0)}, o);
  bool ran = false;
  {
    AutoGradMode no_grad(false);
    ran = be.mlp_forward(act, last_act, out, x, weights, biases, record ? z : std::vector<Tensor>{},
                         record ? h : std::vector<Tensor>{});
  }
  if (!ran) return {};
  if (!record) return out;
  auto node = make_node<MlpBackward>(inputs, act, last_act, L);
  node->widths_.push_back(x.size(1));
  for (const Tensor& w : weights)
    node->widths_.push_back(w.size(0));
  node->x_ = SavedVariable(x, false);
  for (size_t l = 0; l < L; ++l) {
    node->w_[l] = SavedVariable(weights[l], false);
    if (biases[l].defined()) node->b_[l] = SavedVariable(biases[l], false);
    if (z[l].defined()) node->z_[l] = SavedVariable(z[l], false);
    if (h[l].defined()) node->h_[l] = SavedVariable(h[l], false);
  }
  return finish(out, node);
}

}  // namespace tg::autograd
