// InputBuffer: where the gradients flowing into one node's inputs are summed
// before the node runs.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include <tapegrad/autograd/node.h>

namespace tg::autograd {

class InputBuffer {
 public:
  explicit InputBuffer(size_t size) : slots_(size) {}
  // Adds `grad` at input `pos` (an undefined grad is a no-op). `producer` is
  // the stream of the node that computed it and `consumer` the stream of the
  // node that will read it (either may be invalid: see stream_rules.h). GPU
  // gradients are accumulated on the slot's accumulation stream after event
  // waits, never with a host sync; the cases are labelled in the code.
  //
  // Small dense contributions (not create_graph, same shape and dtype,
  // contiguous, on the slot's accumulation stream) are held and summed
  // kernels::kMaxAddN at a time in one kernel (add_n) instead of one add
  // each, in arrival order, so the sum is bitwise the sequential one
  // (docs/AUTOGRAD.md "Accumulation").
  void add(size_t pos, Tensor&& grad, const cuda::Stream& producer, const cuda::Stream& consumer);
  // Adds the gradient l^T r at input `pos` (l [k, m], r [k, n], of one
  // dtype and device: a weight gradient handed over by its formula, see
  // detail::product_grad). Products up to 4 MiB are held (the accumulation
  // stream waits on their producer's) and every held product of the slot is
  // summed at once by one GEMM on the accumulation stream over their rows
  // concatenated (docs/AUTOGRAD.md "Weight gradients"); a larger one is
  // multiplied on its producer's stream and added as `add` would. What is
  // held depends on sizes only, not on streams.
  void add_product(size_t pos, Tensor&& l, Tensor&& r, const cuda::Stream& producer, const cuda::Stream& consumer);
  // When input `pos` holds products alone (no other contribution) that
  // were to be formed on `consumer`: forms them into `target` (its
  // existing gradient: contiguous, of their shape, dtype and device) by
  // one GEMM that adds into it (beta 1), bumps its version and returns
  // true; else changes nothing and returns false.
  bool form_products_into(size_t pos, const Tensor& target, const cuda::Stream& consumer);
  // The consumer, about to run on `consumer`, waits on the last writer of
  // each slot it did not write itself (held contributions summed first).
  void wait_for_consumer(const cuda::Stream& consumer);
  // The gradients, held contributions summed first.
  variable_list release();
  size_t size() const { return slots_.size(); }

 private:
  struct Slot {
    Tensor grad;
    std::vector<Tensor> pending;                      // contributions still to be added to grad
    std::vector<std::pair<Tensor, Tensor>> products;  // held l^T r, still to be formed
    int64_t product_bytes = 0;                        // what `products` holds
    cuda::Stream accumulate;                          // chosen at the first producer
    cuda::Stream consumer;                            // resolved at the first producer
    cuda::Stream ready_stream;                        // the last writer
    std::unique_ptr<cuda::Event> ready;               // recorded on ready_stream, if anyone waits
  };
  // Forms slot.products and adds them and slot.pending into slot.grad (on
  // the accumulation stream).
  static void flush(Slot& slot);
  // Empties slot.products, returning them.
  static std::vector<std::pair<Tensor, Tensor>> take_products(Slot& slot);
  // Holds var in slot.pending; a full list is added at once.
  static void hold(Slot& slot, Tensor&& var);
  std::vector<Slot> slots_;
};

// old += incoming for InputBuffer (docs/AUTOGRAD.md "Accumulation"). Every layout pair is listed
// in the function, in order: grad mode on (create_graph) -> out of place;
// sparse + sparse -> a new sparse tensor; dense + sparse either way -> into
// the dense side when it is contiguous and uniquely owned (TensorImpl and
// storage), else out of place; dense + dense -> in place into `old` under the
// same condition, else out of place. Returns true when it accumulated in
// place (into whichever tensor `old` holds afterwards).
bool accumulate_into_buffer(Tensor& old, Tensor&& incoming);

// The dense/sparse pair rule shared with AccumulateGrad: adds the sparse one
// into the dense one in place when that is contiguous and uniquely owned,
// leaving the result in `old`; else old = dense + sparse. True when in place.
bool add_into_dense_side(Tensor& old, Tensor&& incoming);

// True when t's TensorImpl has no other handle than the caller's `expected`
// ones, and its storage no other TensorImpl.
bool uniquely_owned(const Tensor& t, size_t expected_refs = 1);

// A sparse tensor whose indices and values (TensorImpls and storages) are
// referenced by it alone: it may be stolen into .grad without a copy.
bool parts_uniquely_owned(const Tensor& s);

namespace detail {

// A weight gradient l^T r left unformed by a backward formula.
struct ProductGrad {
  size_t output;  // the formula's output index
  Tensor l, r;
};

// Set by the engine while a node's formula runs (engine.cpp): the outputs
// (bit i for output i < 64) whose gradient may be handed over as a product,
// and the products handed over.
struct ProductSink {
  uint64_t allowed = 0;
  std::vector<ProductGrad> products;
};

// The sink of this thread's running formula (null: none). Scoped.
class ProductSinkGuard {
 public:
  explicit ProductSinkGuard(ProductSink* sink);
  ~ProductSinkGuard();
  ProductSinkGuard(const ProductSinkGuard&) = delete;
  ProductSinkGuard& operator=(const ProductSinkGuard&) = delete;

 private:
  ProductSink* prev_;
};

// Whether the running sink lets output `output` be handed over (grad mode
// and forward mode off).
bool product_allowed(size_t output);

// For a formula: the gradient l^T r of its output `output`. Handed to the
// engine (an undefined tensor is returned) when the running sink allows it
// and l, r are dense 2-D Float32/Float64 of one dtype and device with equal
// row counts, grad mode and forward mode off; else mm(l^T, r).
Tensor product_grad(size_t output, const Tensor& l, const Tensor& r);

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
