// InputBuffer: where the gradients flowing into one node's inputs are summed
// before the node runs.
#pragma once

#include <memory>
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
  // The consumer, about to run on `consumer`, waits on the last writer of
  // each slot it did not write itself (held contributions summed first).
  void wait_for_consumer(const cuda::Stream& consumer);
  // The gradients, held contributions summed first.
  variable_list release();
  size_t size() const { return slots_.size(); }

 private:
  struct Slot {
    Tensor grad;
    std::vector<Tensor> pending;        // contributions still to be added to grad
    cuda::Stream accumulate;            // chosen at the first producer
    cuda::Stream consumer;              // resolved at the first producer
    cuda::Stream ready_stream;          // the last writer
    std::unique_ptr<cuda::Event> ready;  // recorded on ready_stream, if anyone waits
  };
  // Adds slot.pending into slot.grad (on the accumulation stream).
  static void flush(Slot& slot);
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

}  // namespace tg::autograd
