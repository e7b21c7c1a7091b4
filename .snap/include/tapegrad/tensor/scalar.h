// Scalar: a number operand (integral or floating) for tensor-scalar ops.
#pragma once

#include <cstdint>
#include <iosfwd>

namespace tg {

/// Whether v lies in int64_t's range, so that int64_t(v) is defined (false
/// for NaN, +-inf and magnitudes of 2^63 and beyond).
inline bool fits_int64(double v) { return v >= -9223372036854775808.0 && v < 9223372036854775808.0; }

/// A number argument: integral (from int, long, bool) or floating (from float, double).
class Scalar {
 public:
  /// From a number; integral for integer and bool types.
  Scalar(double v) : d_(v), i_(fits_int64(v) ? int64_t(v) : 0), integral_(false) {}  // NOLINT
  Scalar(float v) : Scalar(double(v)) {}                                             ///< floating
  Scalar(int v) : d_(v), i_(v), integral_(true) {}                                   ///< integral
  Scalar(long v) : d_(double(v)), i_(v), integral_(true) {}                          ///< integral
  Scalar(long long v) : d_(double(v)), i_(v), integral_(true) {}                     ///< integral
  Scalar(bool v) : d_(v), i_(v), integral_(true) {}                                  ///< integral (0 or 1)

  /// Whether it came from an integer; its value as double and as int64_t.
  bool is_integral() const { return integral_; }
  double to_double() const { return d_; }  ///< the value as double
  /// The value as int64_t (truncated toward zero); 0 for a floating value
  /// outside int64_t's range (fits_int64 tells; ops that write a number into an
  /// integer tensor refuse such a value first).
  int64_t to_int() const { return i_; }

 private:
  double d_;
  int64_t i_;
  bool integral_;
};

/// Prints the value.
std::ostream& operator<<(std::ostream& os, const Scalar& s);

}  // namespace tg
