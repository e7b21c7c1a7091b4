// Scalar: a number operand (integral or floating) for tensor-scalar ops.
#pragma once

#include <cstdint>
#include <iosfwd>

namespace tg {

class Scalar {
 public:
  Scalar(double v) : d_(v), i_(int64_t(v)), integral_(false) {}  // NOLINT
  Scalar(float v) : Scalar(double(v)) {}                           // NOLINT
  Scalar(int v) : d_(v), i_(v), integral_(true) {}                 // NOLINT
  Scalar(long v) : d_(double(v)), i_(v), integral_(true) {}        // NOLINT
  Scalar(long long v) : d_(double(v)), i_(v), integral_(true) {}   // NOLINT
  Scalar(bool v) : d_(v), i_(v), integral_(true) {}                // NOLINT

  bool is_integral() const { return integral_; }
  double to_double() const { return d_; }
  int64_t to_int() const { return i_; }

 private:
  double d_;
  int64_t i_;
  bool integral_;
};

std::ostream& operator<<(std::ostream& os, const Scalar& s);

}  // namespace tg
