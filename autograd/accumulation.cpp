#include "autograd/accumulation.h"

#include <tapegrad/autograd/forward_ad.h>
#include <tapegrad/autograd/grad_mode.h>
#include "autograd/accumulate_grad.h"
#include "autograd/input_buffer.h"
#include <tapegrad/tensor/error.h>
#include <tapegrad/tensor/ops.h>
#include <tapegrad/tensor/raw.h>
#include "tensor/env.h"
#include "tensor/kernels.h"

#include <algorithm>
#include <atomic>

namespace tg::autograd {

namespace {
std::atomic<int64_t> g_merged{0};    // sums of two or more products formed
std::atomic<int64_t> g_in_place{0};  // products formed into an existing .grad

// Summands up to this size are held for one add_n (at most kMaxAddN of
// them per slot: 4 MiB).
constexpr int64_t kHoldSummandBytes = 256 << 10;
// Products are held up to these bounds per slot (operands' bytes), each at
// most kHoldProductBytes; larger ones are multiplied at once.
constexpr int64_t kHoldProductBytes = 4 << 20;
constexpr int64_t kSlotProductBytes = 16 << 20;
constexpr size_t kMaxProducts = kernels::kMaxCopyN / 2;

int64_t nbytes(const Tensor& t) { return t.numel() * int64_t(element_size(t.dtype())); }

// `incoming` may wait beside `grad` for add_n: dense, contiguous, one shape
// and compute dtype, small, on a device whose backend has add_n, and no
// graph of the sum to record (create_graph, forward-mode tangents).
bool summand_may_wait(const Tensor& grad, const Tensor& incoming) {
  if (!grad.defined() || is_grad_enabled() || forward_ad::is_active()) return false;
  if (grad.is_sparse() || incoming.is_sparse() || grad.dtype() != incoming.dtype() ||
      grad.device() != incoming.device() || grad.sizes() != incoming.sizes())
    return false;
  const ScalarType t = grad.dtype();
  if (t != kFloat32 && t != kFloat64) return false;
  if (!grad.is_contiguous() || !incoming.is_contiguous() || nbytes(incoming) > kHoldSummandBytes) return false;
  return kernels::backend(grad.device(), "backward").add_n != nullptr;
}

// The operands of sum_i l_i^T r_i as one product L^T R: each l_i (r_i)
// into its rows of L (R), the contiguous ones in one copy_n launch (at most
// kMaxCopyN / 2 products are held), the rest one copy each; a single
// product is its own operands.
std::pair<Tensor, Tensor> concatenated(const std::vector<std::pair<Tensor, Tensor>>& products) {
  TG_INTERNAL_ASSERT(!products.empty(), "no products to sum");
  const Tensor& l0 = products[0].first;
  const Tensor& r0 = products[0].second;
  if (products.size() == 1) return {l0, r0};
  int64_t k = 0;
  for (const auto& [l, r] : products) {
    TG_INTERNAL_ASSERT(
        l.size(1) == l0.size(1) && r.size(1) == r0.size(1) && l.dtype() == l0.dtype() && r.dtype() == l0.dtype(),
        "products of one gradient differ in shape or dtype");
    k += l.size(0);
  }
  Tensor L = empty({k, l0.size(1)}, l0.options());
  Tensor R = empty({k, r0.size(1)}, l0.options());
  std::vector<Tensor> dst, src;
  int64_t at = 0;
  for (const auto& [l, r] : products) {
    const int64_t rows = l.size(0);
    dst.insert(dst.end(), {L.narrow(0, at, rows), R.narrow(0, at, rows)});
    src.insert(src.end(), {l, r});
    at += rows;
  }
  kernels::copy_pairs(dst, src, "backward");
  g_merged.fetch_add(1);
  return {L, R};
}
}  // namespace

HeldContributions::Decision HeldContributions::decide(const Tensor& grad, const Contribution& c,
                                                      bool crosses_streams) const {
  if (c.is_product())
    return nbytes(c.l) + nbytes(c.r) > kHoldProductBytes || (grad.defined() && grad.is_sparse()) ? Decision::Form
                                                                                                 : Decision::Hold;
  return !crosses_streams && summand_may_wait(grad, c.grad) ? Decision::Hold : Decision::Add;
}

bool HeldContributions::hold(Contribution&& c) {
  if (!c.is_product()) {
    summands_.push_back(std::move(c.grad));
    return summands_.size() == kernels::kMaxAddN;
  }
  product_bytes_ += nbytes(c.l) + nbytes(c.r);
  products_.emplace_back(std::move(c.l), std::move(c.r));
  return products_.size() == kMaxProducts || product_bytes_ > kSlotProductBytes;
}

const Tensor& HeldContributions::first() const {
  TG_INTERNAL_ASSERT(!empty(), "nothing held");
  return products_.empty() ? summands_.front() : products_.front().first;
}

Tensor HeldContributions::form(const Contribution& c) { return raw::mm(c.l.t(), c.r); }

std::vector<std::pair<Tensor, Tensor>> HeldContributions::take_products() {
  std::vector<std::pair<Tensor, Tensor>> products = std::move(products_);
  products_.clear();
  product_bytes_ = 0;
  return products;
}

void HeldContributions::sum_into(Tensor& grad) {
  // The summands, in place when grad is ours alone (as
  // accumulate_into_buffer's case 4).
  auto add_summands = [&] {
    if (summands_.empty()) return;
    std::vector<Tensor> summands = std::move(summands_);
    summands_.clear();
    Tensor out = uniquely_owned(grad) ? grad : empty_like(grad);
    kernels::backend(grad.device(), "backward").add_n(out, grad, summands);
    grad = std::move(out);
  };
  if (!products_.empty()) {
    std::vector<std::pair<Tensor, Tensor>> products = take_products();
    Tensor s = detail::sum_of_products(products);
    products.clear();
    if (!grad.defined()) {
      grad = std::move(s);
    } else if (summand_may_wait(grad, s)) {
      summands_.push_back(std::move(s));
      if (summands_.size() == kernels::kMaxAddN) add_summands();
    } else {
      add_summands();
      accumulate_into_buffer(grad, std::move(s));
    }
  }
  add_summands();
}

bool HeldContributions::form_into(const Tensor& target) {
  if (!summands_.empty() || products_.empty()) return false;
  const Tensor& l0 = products_.front().first;
  const kernels::Backend& be = kernels::backend(target.device(), "backward");
  if ((!be.mm_accumulate && !be.mm_sum) || target.dtype() != l0.dtype() || target.device() != l0.device() ||
      target.sizes() != IntList{l0.size(1), products_.front().second.size(1)} || !target.is_contiguous())
    return false;
  if (be.mm_sum && be.mm_sum(target, products_, /*accumulate=*/true)) {
    if (take_products().size() > 1) g_merged.fetch_add(1);  // as concatenated counts
    target.impl()->version_counter()->bump();
    g_in_place.fetch_add(1);
    return true;
  }
  if (!be.mm_accumulate) return false;
  std::vector<std::pair<Tensor, Tensor>> products = take_products();
  auto [L, R] = concatenated(products);
  products.clear();
  be.mm_accumulate(target, L.t(), R);
  target.impl()->version_counter()->bump();
  g_in_place.fetch_add(1);
  return true;
}

namespace {

// The outputs of fn whose gradient may be handed over as a product (see
// FormulaProducts::apply).
uint64_t product_outputs(const Node& fn, bool create_graph) {
  if (create_graph || fn.has_post_hooks() || is_anomaly_enabled() || !detail::products_enabled()) return 0;
  uint64_t allowed = 0;
  const size_t n = std::min<size_t>(fn.num_outputs(), 64);
  for (size_t i = 0; i < n; ++i)
    if (dynamic_cast<const AccumulateGrad*>(fn.next_edge(i).function.get())) allowed |= uint64_t(1) << i;
  return allowed;
}
}  // namespace

variable_list FormulaProducts::apply(Node& fn, variable_list&& inputs, bool create_graph) {
  allowed_ = product_outputs(fn, create_graph);
  variable_list outputs;
  // The node's sink (its mutex is held): this while its formula runs.
  ProductFormula* pf = allowed_ ? dynamic_cast<ProductFormula*>(&fn) : nullptr;
  if (!pf) {
    outputs = fn.apply(std::move(inputs));
  } else {
    struct Restore {
      ProductFormula& pf;
      ~Restore() { pf.sink_ = nullptr; }
    } restore{*pf};
    pf->sink_ = this;
    outputs = fn.apply(std::move(inputs));
  }
  if (products_.empty()) return outputs;
  TG_INTERNAL_ASSERT(outputs.size() == fn.num_outputs(), fn.name(), ": wrong number of gradients");
  products_.erase(
      std::remove_if(
          products_.begin(), products_.end(),
          [&](const Product& p) {
            const Edge& e = fn.next_edge(p.output);
            const InputMetadata& m = e.function->input_metadata(e.input_nr);
            if (m.sizes == IntList{p.l.size(1), p.r.size(1)} && m.dtype == p.l.dtype() && m.device == p.l.device())
              return false;
            outputs[p.output] = raw::mm(p.l.t(), p.r);
            return true;
          }),
      products_.end());
  return outputs;
}

Contribution FormulaProducts::take(size_t i, variable_list& outputs) {
  for (Product& p : products_)
    if (p.output == i) return Contribution::product(std::move(p.l), std::move(p.r));
  return Contribution(std::move(outputs[i]));
}

bool product_allowed(const ProductFormula& fn, size_t output) {
  const FormulaProducts* running = fn.sink_;
  return running && output < 64 && (running->allowed_ >> output & 1) && !is_grad_enabled() && !forward_ad::is_active();
}

Tensor product_grad(const ProductFormula& fn, size_t output, const Tensor& l, const Tensor& r) {
  if (product_allowed(fn, output) && l.dim() == 2 && r.dim() == 2 && !l.is_sparse() && !r.is_sparse() &&
      l.dtype() == r.dtype() && (l.dtype() == kFloat32 || l.dtype() == kFloat64) && l.device() == r.device() &&
      l.size(0) == r.size(0)) {
    fn.sink_->products_.push_back({output, l, r});
    return Tensor();
  }
  return tg::mm(l.t(), r);
}

namespace detail {

Tensor sum_of_products(const std::vector<std::pair<Tensor, Tensor>>& products) {
  const Tensor& l0 = products.front().first;
  if (const auto mm_sum = kernels::backend(l0.device(), "backward").mm_sum; mm_sum && products.size() > 1) {
    Tensor out = empty({l0.size(1), products.front().second.size(1)}, l0.options());
    if (mm_sum(out, products, /*accumulate=*/false)) {
      g_merged.fetch_add(1);
      return out;
    }
  }
  auto [L, R] = concatenated(products);
  return raw::mm(L.t(), R);
}

bool products_enabled() { return tg::detail::switched_on<tg::detail::OffSwitch::kMergeWeightGrads>(); }

int64_t merged_product_sums() { return g_merged.load(); }
int64_t products_formed_in_place() { return g_in_place.load(); }

}  // namespace detail

}  // namespace tg::autograd
