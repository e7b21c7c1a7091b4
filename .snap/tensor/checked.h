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

// The lowest and highest element index a shape with these strides reaches
// from `offset` (sizes non-negative, at least one element), or a tg::Error
// naming `op` on overflow.
struct Reach {
  int64_t lo, hi;
};
inline Reach checked_reach(const IntList& sizes, const IntList& strides, int64_t offset, const char* op) {
  Reach r{offset, offset};
  for (size_t i = 0; i < sizes.size(); ++i) {
    const int64_t step = checked_mul(sizes[i] - 1, strides[i], op, sizes);
    if (step < 0) r.lo = checked_add(r.lo, step, op, sizes);
    else r.hi = checked_add(r.hi, step, op, sizes);
  }
  return r;
}

}  // namespace tg::detail
