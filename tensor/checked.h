// Internal: overflow-checked arithmetic for sizes, strides, offsets and
// element counts. Every place that multiplies or adds them uses these, so
// a shape from outside (a file, a DLPack capsule, a user's as_strided)
// fails with a tg::Error naming the op instead of wrapping around.
#pragma once

#include <cstdint>
#include <string>

#include <tapegrad/tensor/error.h>
#include <tapegrad/tensor/tensor_impl.h>

namespace tg {
std::string shape_str(const IntList& shape);  // tensor.h
}

namespace tg::detail {

inline int64_t checked_mul(int64_t a, int64_t b, const char* op, const IntList& shape) {
  int64_t r;
  TG_CHECK(!__builtin_mul_overflow(a, b, &r), op, ": shape ", shape_str(shape),
           " (with its strides and offset) overflows 64-bit arithmetic");
  return r;
}

inline int64_t checked_add(int64_t a, int64_t b, const char* op, const IntList& shape) {
  int64_t r;
  TG_CHECK(!__builtin_add_overflow(a, b, &r), op, ": shape ", shape_str(shape),
           " (with its strides and offset) overflows 64-bit arithmetic");
  return r;
}

// The number of elements of `sizes`: a negative size or a count beyond
// 64 bits is an error naming `op`.
inline int64_t checked_numel(const IntList& sizes, const char* op) {
  int64_t n = 1;
  for (int64_t s : sizes) {
    TG_CHECK(s >= 0, op, ": negative size ", s, " in shape ", shape_str(sizes));
    TG_CHECK(!__builtin_mul_overflow(n, s, &n), op, ": shape ", shape_str(sizes),
             " has more elements than fit in 64 bits");
  }
  return n;
}

}  // namespace tg::detail
