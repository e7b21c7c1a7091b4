// Differentiable mm, bmm, matmul, linear. Each backward computes only the
// gradients should_compute_output() asks for: under grad(y, x) through a
// linear layer the weight GEMM is skipped (edge trimming).
#include <tapegrad/tensor/error.h>

#include "autograd/accumulation.h"
#include "autograd/ops/ops.h"
#include "autograd/ops/record.h"
#include "autograd/ops/taylor.h"

#include "tensor/composite.h"

namespace tg {

using autograd::SavedVariable;
using autograd::variable_list;
using namespace autograd::ops_detail;

namespace {

// mm (batched = false) or bmm (batched = true): dA = g B^T, dB = A^T g.
class GemmBackward final : public OpNode {
 public:
  explicit GemmBackward(bool batched)
      : OpNode(batched ? "bmm" : "mm", batched ? "BmmBackward" : "MmBackward"), batched_(batched) {}
  variable_list apply(variable_list&& grads) override {
    variable_list out(2);
    const Tensor& g = grads[0];
    if (batched_) {
      if (should_compute_output(0)) out[0] = bmm(g, other_.unpack(this, "mat2").transpose(1, 2));
      if (should_compute_output(1)) out[1] = bmm(self_.unpack(this, "self").transpose(1, 2), g);
      return out;
    }
    // A leaf's gradient may go to the engine as a product (summed with the
    // leaf's other products in one GEMM). g b^T as linear(g, b): under
    // create_graph b stays a direct input (no transpose node before it).
    if (should_compute_output(0)) {
      const Tensor b = other_.unpack(this, "mat2");
      out[0] = autograd::product_allowed(0) ? autograd::product_grad(0, g.t(), b.t()) : linear(g, b);
    }
    if (should_compute_output(1)) out[1] = autograd::product_grad(1, self_.unpack(this, "self"), g);
    return out;
  }
  void release_variables() override {
    self_.release();
    other_.release();
  }
  SavedVariable self_, other_;

 private:
  bool batched_;
};

// Tangent: ta b + a tb.
Tensor gemm_op(const Tensor& a, const Tensor& b, bool batched) {
  Tensor out;
  if (!should_record({&a, &b})) {
    out = run_raw([&] { return batched ? raw::bmm(a, b) : raw::mm(a, b); });
  } else {
    out = run_raw([&] { return batched ? raw::bmm(a, b) : raw::mm(a, b); });
    auto node = make_node<GemmBackward>({&a, &b}, batched);
    if (node->needs_input_grad(1)) node->self_ = SavedVariable(a, false);
    if (node->needs_input_grad(0)) node->other_ = SavedVariable(b, false);
    out = finish(out, node);
  }
  if (fw_any({&a, &b})) {
    const Tensor ta = fw_t(a), tb = fw_t(b);
    fw_rule(out, [&] {
      // Batched tangents ([k] + shape): matmul broadcasts the batch.
      auto prod = [&](const Tensor& x, const Tensor& y) {
        return fw_batch() > 0 ? tg::matmul(x, y) : batched ? tg::bmm(x, y) : tg::mm(x, y);
      };
      return jet_product(a, ta, b, tb, prod);  // Taylor mode: with the c_i c_(k-i) products
    });
  }
  return out;
}

// y = x w^T + b over the last dim of x.
class LinearBackward final : public OpNode {
 public:
  LinearBackward() : OpNode("linear", "LinearBackward") {}
  variable_list apply(variable_list&& grads) override {
    variable_list out(3);
    const Tensor& g = grads[0];
    if (should_compute_output(0)) out[0] = matmul(g, weight_.unpack(this, "weight"));
    bool gw = should_compute_output(1), gb = should_compute_output(2);
    if (gw || gb) {
      Tensor g2 = g.reshape({-1, g.size(-1)});
      if (gw) {
        Tensor x = input_.unpack(this, "input");
        out[1] = autograd::product_grad(1, g2, x.reshape({-1, x.size(-1)}));
      }
      if (gb) out[2] = sum(g2, {0});
    }
    return out;
  }
  void release_variables() override {
    input_.release();
    weight_.release();
  }
  SavedVariable input_, weight_;
};

}  // namespace

Tensor autograd::ops::mm(const Tensor& a, const Tensor& b) {
  if (a.defined() && a.is_sparse()) return autograd::impl::sparse_mm(a, b);
  return gemm_op(a, b, false);
}
Tensor autograd::ops::bmm(const Tensor& a, const Tensor& b) { return gemm_op(a, b, true); }

// Tangent: tx w^T + x tw^T + tb.
Tensor autograd::ops::linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  Tensor out;
  if (!should_record({&x, &w, &b})) {
    out = run_raw([&] { return raw::linear(x, w, b); });
  } else {
    out = run_raw([&] { return raw::linear(x, w, b); });
    auto node = make_node<LinearBackward>({&x, &w, &b});
    if (node->needs_input_grad(1)) node->input_ = SavedVariable(x, false);
    if (node->needs_input_grad(0)) node->weight_ = SavedVariable(w, false);
    out = finish(out, node);
  }
  if (fw_any({&x, &w, &b})) {
    const Tensor tx = fw_t(x), tw = fw_t(w), tb = fw_t(b);
    if (tx.defined() && !tw.defined() && !tb.defined() && x.dim() >= 2 && forward_ad::taylor_layout() &&
        forward_ad::detail::deferring_tangents()) {
      // Taylor mode, a constant layer: tx w^T when (and where) it is read.
      forward_ad::detail::defer_tangent(
          out, tx, [w](const Tensor& t) { return tg::matmul(t, w.t()); }, {w}, "linear");
      return out;
    }
    fw_rule(out, [&] {
      // A 1-D x as a row [1, in] (so a batched tangent [k, 1, in] stays a
      // batch of rows in the Taylor cross terms); batched: tw^T [k, in, out]
      // padded so x's leading dims broadcast.
      const bool vec = x.dim() == 1;
      const Tensor x2 = vec ? x.unsqueeze(0) : x;
      const Tensor tx2 = vec && tx.defined() ? tx.unsqueeze(-2) : tx;
      Tensor twt = tw.defined() ? fw_pad(tw.transpose(-1, -2), x2.dim()) : Tensor();
      Tensor t = jet_product(x2, tx2, w.t(), twt, [](const Tensor& u, const Tensor& v) { return tg::matmul(u, v); });
      if (vec && t.defined()) t = t.squeeze(-2);
      return fw_add(t, fw_pad(tb, out.dim()));
    });
  }
  return out;
}

// Composite: the same cases as the raw op, expressed with differentiable
// views and mm/bmm, so each GEMM node trims on its own.
Tensor autograd::ops::matmul(const Tensor& a, const Tensor& b) {
  if (a.defined() && a.is_sparse()) return autograd::impl::sparse_mm(a, b, "matmul");
  // a broadcast along a leading dim (stride 0: e.g. Taylor mode's input
  // directions, the same for every sample) times a matrix: one copy's
  // product, expanded (the GEMM shrinks by that dim's size).
  if (a.defined() && b.defined() && a.dim() >= 2 && b.dim() == 2 && !b.is_sparse()) {
    Tensor one = a;
    for (int64_t d = 0; d + 1 < a.dim(); ++d)
      if (a.size(d) > 1 && a.stride(d) == 0) one = one.narrow(d, 0, 1);
    if (!one.is_same(a)) {
      IntList shape = a.sizes();
      shape.back() = b.size(1);
      return tg::matmul(one, b).expand(shape);
    }
  }
  if (!should_record({&a, &b}) && !fw_any({&a, &b})) return raw::matmul(a, b);
  return tg::detail::matmul_shapes<tg::detail::PublicOps>(a, b);
}

}  // namespace tg
