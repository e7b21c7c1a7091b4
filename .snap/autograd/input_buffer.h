// InputBuffer: where the gradients flowing into one node's inputs are summed
// before the node runs.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include <tapegrad/autograd/node.h>
#include "autograd/accumulation.h"
#include "autograd/stream_rules.h"

namespace tg::autograd {

class InputBuffer {
 public:
  explicit InputBuffer(size_t size) : slots_(size) {}
  // Adds contribution `c` at input `pos` (an undefined one is a no-op).
  // `producer` is the stream of the node that computed it and `consumer` the
  // stream of the node that will read it (either may be invalid: see
  // stream_rules.h). GPU gradients are accumulated on the slot's
  // accumulation stream after event waits, never with a host sync; the
  // cases are labelled in the code. The slot's accumulation strategy
  // (accumulation.h) decides, at one point, whether c is held back to be
  // added with others; a held product makes the accumulation stream wait
  // for its producer.
  void add(size_t pos, Contribution&& c, const cuda::Stream& producer, const cuda::Stream& consumer);
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
    HeldContributions held;              // the accumulation strategy's (accumulation.h)
    cuda::Stream accumulate;             // chosen at the first producer
    cuda::Stream consumer;               // resolved at the first producer
    cuda::Stream ready_stream;           // the last writer
    std::unique_ptr<cuda::Event> ready;  // recorded on ready_stream, if anyone waits
  };
  // Hands c to slot.held (it decided to hold c); a product's GEMM will
  // wait for its producer P.
  static void hold(Slot& slot, Contribution&& c, const cuda::Stream& P, const cuda::Stream& C,
                   const cuda::Stream& current);
  // Adds what slot.held holds into slot.grad (on the accumulation stream).
  static void flush(Slot& slot);
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

}  // namespace tg::autograd
