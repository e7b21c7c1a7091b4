// Element types. BFloat16 and Float16 are storage types: arithmetic on them is
// done in float and rounded back (round to nearest even).
#pragma once

#include <cstdint>
#include <cstring>
#include <iosfwd>

namespace tg {

/// Element types; the k* constants name them as in LibTorch (kFloat = kFloat32, kDouble = kFloat64, kLong = kInt64).
enum class ScalarType : int8_t { Float32, Float64, BFloat16, Float16, Int64, Bool };

constexpr ScalarType kFloat32 = ScalarType::Float32;    ///< 32-bit float
constexpr ScalarType kFloat64 = ScalarType::Float64;    ///< 64-bit float
constexpr ScalarType kBFloat16 = ScalarType::BFloat16;  ///< bfloat16
constexpr ScalarType kFloat16 = ScalarType::Float16;    ///< IEEE half
constexpr ScalarType kInt64 = ScalarType::Int64;        ///< 64-bit integer
constexpr ScalarType kBool = ScalarType::Bool;          ///< bool
constexpr ScalarType kFloat = kFloat32;                 ///< kFloat32
constexpr ScalarType kDouble = kFloat64;                ///< kFloat64
constexpr ScalarType kLong = kInt64;                    ///< kInt64
constexpr int kNumScalarTypes = 6;                      ///< how many dtypes there are

/// The dtype's name ("Float32", ...); operator<< prints it.
const char* to_string(ScalarType t);
/// Prints to_string(t).
std::ostream& operator<<(std::ostream& os, ScalarType t);

/// Bytes per element.
constexpr size_t element_size(ScalarType t) {
  switch (t) {
    case ScalarType::Float32: return 4;
    case ScalarType::Float64: return 8;
    case ScalarType::BFloat16: return 2;
    case ScalarType::Float16: return 2;
    case ScalarType::Int64: return 8;
    case ScalarType::Bool: return 1;
  }
  return 0;
}

/// Float32, Float64, BFloat16 or Float16.
constexpr bool is_floating_point(ScalarType t) {
  return t == ScalarType::Float32 || t == ScalarType::Float64 || t == ScalarType::BFloat16 || t == ScalarType::Float16;
}
/// BFloat16 or Float16 (computed in Float32).
constexpr bool is_reduced_float(ScalarType t) { return t == ScalarType::BFloat16 || t == ScalarType::Float16; }

/// Type promotion for two tensor operands (see docs/TENSOR.md):
///   Bool < Int64 < {BFloat16, Float16} < Float32 < Float64,
///   and BFloat16 with Float16 gives Float32.
ScalarType promote_types(ScalarType a, ScalarType b);

/// The dtype of `tensor op scalar`: a floating scalar lifts a Bool/Int64
/// tensor to Float32 (the default float dtype), an integral one lifts Bool to
/// Int64; otherwise the tensor's dtype wins, as in PyTorch (a Python-number operand never widens a float tensor).
ScalarType promote_with_scalar(ScalarType t, bool scalar_is_integral);

/// IEEE binary16 storage type (Float16); converts to and from float.
struct Half {
  uint16_t bits = 0;  ///< the raw bits
  Half() = default;
  Half(float f);  ///< NOLINT: implicit like a built-in float type
  /// The value as a float.
  /// The value as a float.
  operator float() const;
};

/// bfloat16 storage type (the upper half of a float32); converts to and from float.
struct BFloat16 {
  uint16_t bits = 0;  ///< the raw bits
  BFloat16() = default;
  BFloat16(float f);  ///< NOLINT
  /// The value as a float.
  operator float() const;
};

/// IEEE half bits to float.
float half_bits_to_float(uint16_t h);
/// float to IEEE half bits (round to nearest even).
uint16_t float_to_half_bits(float f);

/// bfloat16 bits to float.
inline float bf16_bits_to_float(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t float_to_bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);                                         ///< round to nearest even
  return uint16_t(u >> 16);
}

inline Half::Half(float f) : bits(float_to_half_bits(f)) {}
inline Half::operator float() const { return half_bits_to_float(bits); }
inline BFloat16::BFloat16(float f) : bits(float_to_bf16_bits(f)) {}
inline BFloat16::operator float() const { return bf16_bits_to_float(bits); }

}  // namespace tg
