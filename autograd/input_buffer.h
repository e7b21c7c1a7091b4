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
  void add(size_t pos, Tensor&& grad, const cuda::Stream& producer, const cuda::Stream& consumer);
  // The consumer, about to run on `consumer`, waits on the last writer of
  // each slot it did not write itself.
  void wait_for_consumer(const cuda::Stream& consumer) const;
  variable_list release();
  size_t size() const { return slots_.size(); }

 private:
  struct Slot {
    Tensor grad;
    cuda::Stream accumulate;            // chosen at the first producer
    cuda::Stream ready_stream;          // the last writer
    std::unique_ptr<cuda::Event> ready;  // recorded on ready_stream, if anyone waits
  };
  std::vector<Slot> slots_;
};

// old += incoming for InputBuffer (reference §3.1). Every layout pair is listed
// in the function; the result is in place only when `old` is uniquely owned
// (its TensorImpl and its storage), contiguous, and grad mode is off (no
// create_graph). Returns true when it accumulated in place.
bool accumulate_into_buffer(Tensor& old, Tensor&& incoming);

// True when t's TensorImpl has no other handle than the caller's `expected`
// ones, and its storage no other TensorImpl.
bool uniquely_owned(const Tensor& t, size_t expected_refs = 1);

// Until the sparse issue: a clear error naming `where` for a sparse operand.
void check_dense_pair(const Tensor& a, const Tensor& b, const char* where);

}  // namespace tg::autograd
