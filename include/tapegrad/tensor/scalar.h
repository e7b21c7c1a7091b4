// Scalar: a number operand (integral or floating) for tensor-scalar ops.
#pragma once

#include <cstdint>
#include <iosfwd>

#include <tapegrad/tensor/scalar_type.h>

namespace tg {

/// Whether v lies in int64_t's range, so that int64_t(v) is defined (false
/// for NaN, +-inf and magnitudes of 2^63 and beyond).
inline bool fits_int64(double v) { return v >= -9223372036854775808.0 && v < 9223372036854775808.0; }

/// A number argument: integral (from int, long, bool) or floating (from float, double); one from a bool is also
/// marked Boolean, as PyTorch's: it keeps a tensor's dtype (Bool too), a sub refuses it, and an alpha may be one
/// only for a Bool result.
class Scalar {
 public:
  /// From a number; integral for integer and bool types.
  Scalar(double v) : d_(v), i_(fits_int64(v) ? int64_t(v) : 0), integral_(false) {}  // NOLINT
  Scalar(float v) : Scalar(double(v)) {}                                             ///< floating
  Scalar(int v) : d_(v), i_(v), integral_(true) {}                                   ///< integral
  Scalar(long v) : d_(double(v)), i_(v), integral_(true) {}                          ///< integral
  Scalar(long long v) : d_(double(v)), i_(v), integral_(true) {}                     ///< integral
  Scalar(bool v) : d_(v), i_(v), integral_(true), bool_(true) {}                     ///< Boolean (0 or 1)

  /// Whether it came from an integer; its value as double and as int64_t.
  bool is_integral() const { return integral_; }
  bool is_bool() const { return bool_; }   ///< whether it came from a bool (integral too)
  double to_double() const { return d_; }  ///< the value as double
  /// The value as int64_t (truncated toward zero); 0 for a floating value
  /// outside int64_t's range (fits_int64 tells; ops that write a number into an
  /// integer tensor refuse such a value first).
  int64_t to_int() const { return i_; }

 private:
  double d_;
  int64_t i_;
  bool integral_;
  bool bool_ = false;
};

/// The dtype of `t (op) s` for a tensor of dtype t and a number s, as
/// PyTorch's: a Boolean s keeps t, else promote_with_scalar(t, s.is_integral()).
ScalarType promote_with_scalar(ScalarType t, const Scalar& s);

/// Prints the value (a Boolean as true or false).
std::ostream& operator<<(std::ostream& os, const Scalar& s);

}  // namespace tg
