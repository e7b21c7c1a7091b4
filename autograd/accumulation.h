// The accumulation strategy: which gradient contributions a node input holds
// back to add several at once, and how it adds them (docs/AUTOGRAD.md
// "Accumulation", "Weight gradients"). Two kinds are held:
// - small dense summands, added kernels::kMaxAddN at a time by one add_n in
//   arrival order (bitwise the sequential sum);
// - weight-gradient products l^T r that a formula handed over unformed
//   (product_grad), summed by one GEMM over their rows concatenated.
// It knows no streams: InputBuffer (the numbered stream cases) asks it at one
// point what to do with each contribution and runs what it holds on the
// slot's accumulation stream.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include <tapegrad/autograd/node.h>

namespace tg::autograd {

// One gradient contribution to a node input: a tensor, or a weight gradient
// l^T r (l [k, m], r [k, n], one dtype and device) left unformed.
struct Contribution {
  Contribution() = default;
  Contribution(Tensor g) : grad(std::move(g)) {}  // NOLINT: a tensor is a contribution
  static Contribution product(Tensor l, Tensor r) {
    Contribution c;
    c.l = std::move(l);
    c.r = std::move(r);
    return c;
  }
  bool defined() const { return grad.defined() || l.defined(); }
  bool is_product() const { return l.defined(); }
  // A tensor of the contribution (its device).
  const Tensor& any() const { return is_product() ? l : grad; }
  Tensor grad;
  Tensor l, r;
};

// What one node input holds back.
class HeldContributions {
 public:
  enum class Decision {
    Hold,  // hold it (hold())
    Add,   // a summand to add now, after what is held
    Form,  // a product to multiply now (form()), then offer as a summand
  };
  // For c arriving at a slot whose gradient so far is `grad`. A summand is
  // held when grad mode and forward mode are off, `grad` is dense,
  // contiguous, of its shape, dtype (Float32/64) and device, it is at most
  // 256 KiB and `crosses_streams` is false. A product is held when its
  // operands are at most 4 MiB and `grad` is not sparse: by size alone,
  // never by streams, so a gradient rounds alike on one stream, on several
  // and under capture.
  Decision decide(const Tensor& grad, const Contribution& c, bool crosses_streams) const;
  // Holds c (decide said Hold). True when the slot now holds all it may
  // (kMaxAddN summands, or kMaxCopyN / 2 products or 16 MiB of them): the
  // caller sums now.
  bool hold(Contribution&& c);
  bool empty() const { return summands_.empty() && products_.empty(); }
  bool holds_summands() const { return !summands_.empty(); }
  // A held tensor (for its device); empty() must be false.
  const Tensor& first() const;
  // grad += everything held, on the current stream: the products by one
  // GEMM (an undefined grad becomes their sum), then the summands. In place
  // when grad is ours alone.
  void sum_into(Tensor& grad);
  // When only products are held: forms them into `target` (contiguous, of
  // their shape, dtype and device) by one GEMM that adds into it (beta 1) on
  // the current stream, bumps its version and returns true; else false.
  bool form_into(const Tensor& target);
  // A product formed alone: mm(l^T, r).
  static Tensor form(const Contribution& c);

 private:
  // Empties the held products, returning them.
  std::vector<std::pair<Tensor, Tensor>> take_products();
  std::vector<Tensor> summands_;
  std::vector<std::pair<Tensor, Tensor>> products_;
  int64_t product_bytes_ = 0;
};

class FormulaProducts;

// A node whose formula may hand weight gradients over as products
// (product_grad): the engine points its sink at the running formula's
// FormulaProducts (under the node's mutex) when the formula may, and back to
// none after; the formula passes itself to product_allowed / product_grad.
class ProductFormula {
 private:
  FormulaProducts* sink_ = nullptr;
  friend class FormulaProducts;
  friend bool product_allowed(const ProductFormula& fn, size_t output);
  friend Tensor product_grad(const ProductFormula& fn, size_t output, const Tensor& l, const Tensor& r);
};

// The products a node's formula hands over (docs/AUTOGRAD.md "Weight
// gradients"): the engine runs each formula through one of these.
class FormulaProducts {
 public:
  // Runs fn's formula. The gradients of its outputs that flow straight into
  // a leaf's AccumulateGrad may be handed over as products (product_grad),
  // unless the backward is recorded (create_graph), a post hook or anomaly
  // mode must see them, or TG_MERGE_WEIGHT_GRADS=0. A product is checked
  // against the input it flows into as validate_outputs would; one that
  // would need a conversion is formed at once into the outputs.
  variable_list apply(Node& fn, variable_list&& inputs, bool create_graph);
  // Output i's gradient: the product handed over, else outputs[i].
  Contribution take(size_t i, variable_list& outputs);

 private:
  struct Product {
    size_t output;
    Tensor l, r;
  };
  uint64_t allowed_ = 0;  // bit i: output i may be handed over (i < 64)
  std::vector<Product> products_;
  friend bool product_allowed(const ProductFormula& fn, size_t output);
  friend Tensor product_grad(const ProductFormula& fn, size_t output, const Tensor& l, const Tensor& r);
};

// Whether fn's running formula may hand its output `output` over as a
// product (grad mode and forward mode off).
bool product_allowed(const ProductFormula& fn, size_t output);

// For fn's formula: the gradient l^T r of its output `output`. Handed to the
// engine (an undefined tensor is returned) when product_allowed(fn, output)
// and l, r are dense 2-D Float32/Float64 of one dtype and device with equal
// row counts; else mm(l^T, r).
Tensor product_grad(const ProductFormula& fn, size_t output, const Tensor& l, const Tensor& r);

namespace detail {

// sum_i l_i^T r_i: one GEMM over the rows of every l_i (and r_i)
// concatenated (one copy_n launch where the backend has it); a single
// product is one GEMM, as mm(l^T, r).
Tensor sum_of_products(const std::vector<std::pair<Tensor, Tensor>>& products);

// Whether weight gradients may be handed over as products (TG_MERGE_WEIGHT_GRADS=0: never).
bool products_enabled();

// How many sums of two or more products have been formed, and how many
// times products were formed into an existing .grad (for tests).
int64_t merged_product_sums();
int64_t products_formed_in_place();

}  // namespace detail

}  // namespace tg::autograd
