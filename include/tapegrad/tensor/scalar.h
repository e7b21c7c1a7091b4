// Scalar: a number operand (integral or floating) for tensor-scalar ops.
#pragma once

#include <cstdint>
#include <iosfwd>

namespace tg {

/// A number argument: integral (from int, long, bool) or floating (from float, double).
class Scalar {
 public:
  /// From a number; integral for integer and bool types.
  Scalar(double v) : d_(v), i_(int64_t(v)), integral_(false) {}   // NOLINT
  Scalar(float v) : Scalar(double(v)) {}                          ///< floating
  Scalar(int v) : d_(v), i_(v), integral_(true) {}                ///< integral
  Scalar(long v) : d_(double(v)), i_(v), integral_(true) {}       ///< integral
  Scalar(long long v) : d_(double(v)), i_(v), integral_(true) {}  ///< integral
  Scalar(bool v) : d_(v), i_(v), integral_(true) {}               ///< integral (0 or 1)

  /// Whether it came from an integer; its value as double and as int64_t.
  bool is_integral() const { return integral_; }
  double to_double() const { return d_; }  ///< the value as double
  int64_t to_int() const { return i_; }    ///< the value as int64_t (truncated)

 private:
  double d_;
  int64_t i_;
  bool integral_;
};

/// Prints the value.
std::ostream& operator<<(std::ostream& os, const Scalar& s);

}  // namespace tg
