// Element types. BFloat16 and Float16 are storage types: arithmetic on them is
// done in float and rounded back (round to nearest even).
#pragma once

#include <cstdint>
#include <cstring>
#include <iosfwd>

namespace tg {

enum class ScalarType : int8_t { Float32, Float64, BFloat16, Float16, Int64, Bool };

constexpr ScalarType kFloat32 = ScalarType::Float32;
constexpr ScalarType kFloat64 = ScalarType::Float64;
constexpr ScalarType kBFloat16 = ScalarType::BFloat16;
constexpr ScalarType kFloat16 = ScalarType::Float16;
constexpr ScalarType kInt64 = ScalarType::Int64;
constexpr ScalarType kBool = ScalarType::Bool;
constexpr ScalarType kFloat = kFloat32;
constexpr ScalarType kDouble = kFloat64;
constexpr ScalarType kLong = kInt64;
constexpr int kNumScalarTypes = 6;

const char* to_string(ScalarType t);
std::ostream& operator<<(std::ostream& os, ScalarType t);

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

constexpr bool is_floating_point(ScalarType t) {
  return t == ScalarType::Float32 || t == ScalarType::Float64 ||
         t == ScalarType::BFloat16 || t == ScalarType::Float16;
}
constexpr bool is_reduced_float(ScalarType t) {
  return t == ScalarType::BFloat16 || t == ScalarType::Float16;
}

// Type promotion for two tensor operands (see docs/TENSOR.md):
//   Bool < Int64 < {BFloat16, Float16} < Float32 < Float64,
//   and BFloat16 with Float16 gives Float32.
ScalarType promote_types(ScalarType a, ScalarType b);

// The dtype of `tensor op scalar`: a floating scalar lifts a Bool/Int64
// tensor to Float32 (the default float dtype), an integral one lifts Bool to
// Int64; otherwise the tensor's dtype wins, as in PyTorch (a Python-number operand never widens a float tensor).
ScalarType promote_with_scalar(ScalarType t, bool scalar_is_integral);

struct Half {
  uint16_t bits = 0;
  Half() = default;
  Half(float f);  // NOLINT: implicit like a built-in float type
  operator float() const;
};

struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  BFloat16(float f);  // NOLINT
  operator float() const;
};

float half_bits_to_float(uint16_t h);
uint16_t float_to_half_bits(float f);

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
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return uint16_t(u >> 16);
}

inline Half::Half(float f) : bits(float_to_half_bits(f)) {}
inline Half::operator float() const { return half_bits_to_float(bits); }
inline BFloat16::BFloat16(float f) : bits(float_to_bf16_bits(f)) {}
inline BFloat16::operator float() const { return bf16_bits_to_float(bits); }

}  // namespace tg
