// InputBuffer: where the gradients flowing into one node's inputs are summed
// before the node runs.
#pragma once

#include <vector>

#include <tapegrad/autograd/node.h>

namespace tg::autograd {

class InputBuffer {
 public:
  explicit InputBuffer(size_t size) : buffer_(size) {}
  // Adds `grad` at input `pos` (an undefined grad is a no-op). The stream
  // arguments arrive with the CUDA issue.
  void add(size_t pos, Tensor&& grad);
  variable_list release() { return std::move(buffer_); }
  size_t size() const { return buffer_.size(); }

 private:
  variable_list buffer_;
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
