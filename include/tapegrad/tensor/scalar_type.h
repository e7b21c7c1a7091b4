// Element types. BFloat16 and Float16 are storage types: arithmetic on them is
// done in float and rounded back (round to nearest even).
#pragma once

#include <cstdint>
#include <cstring>
#include <iosfwd>

namespace tg {

/// Element types, in the order of <tapegrad/tensor/dtypes.def> (the one dtype
/// list); the k* constants name them as in LibTorch (kFloat = kFloat32,
/// kDouble = kFloat64, kLong = kInt64).
enum class ScalarType : int8_t {
#define TG_DTYPE(Name, ...) Name,
#include <tapegrad/tensor/dtypes.def>
#undef TG_DTYPE
};

constexpr ScalarType kFloat32 = ScalarType::Float32;    ///< 32-bit float
constexpr ScalarType kFloat64 = ScalarType::Float64;    ///< 64-bit float
constexpr ScalarType kBFloat16 = ScalarType::BFloat16;  ///< bfloat16
constexpr ScalarType kFloat16 = ScalarType::Float16;    ///< IEEE half
constexpr ScalarType kInt64 = ScalarType::Int64;        ///< 64-bit integer
constexpr ScalarType kBool = ScalarType::Bool;          ///< bool
constexpr ScalarType kFloat = kFloat32;                 ///< kFloat32
constexpr ScalarType kDouble = kFloat64;                ///< kFloat64
constexpr ScalarType kLong = kInt64;                    ///< kInt64
/// How many dtypes there are.
constexpr int kNumScalarTypes = 0
#define TG_DTYPE(...) +1
#include <tapegrad/tensor/dtypes.def>
#undef TG_DTYPE
    ;

/// What kind of number a dtype holds (the list's Category column).
enum class DtypeCategory : int8_t {
  Bool,             ///< bool
  Integral,         ///< an integer type
  Floating,         ///< a real floating type kernels compute in
  ReducedFloating,  ///< a real floating storage type computed in a wider one (BFloat16, Float16)
};

/// The dtype's category.
constexpr DtypeCategory category(ScalarType t) {
  switch (t) {
#define TG_DTYPE(Name, HostT, DeviceT, Category, ...) \
  case ScalarType::Name:                              \
    return DtypeCategory::Category;
#include <tapegrad/tensor/dtypes.def>
#undef TG_DTYPE
  }
  return DtypeCategory::Bool;
}

/// The dtype's name ("Float32", ...); operator<< prints it.
const char* to_string(ScalarType t);
/// Prints to_string(t).
std::ostream& operator<<(std::ostream& os, ScalarType t);
/// The dtype named `name`: to_string's name ("Float32") or the Python one
/// ("float32"); false (and *t untouched) for any other name.
bool scalar_type_from_string(const char* name, ScalarType* t);
/// The Python binding's lower-case name ("float32", ...).
const char* python_name(ScalarType t);

/// Float32, Float64, BFloat16 or Float16 (every real floating dtype).
constexpr bool is_floating_point(ScalarType t) {
  return category(t) == DtypeCategory::Floating || category(t) == DtypeCategory::ReducedFloating;
}
/// Whether a tensor of this dtype can require grad and carry gradients and
/// tangents: the floating dtypes (complex ones will be too). Prefer it to
/// is_floating_point where that is the question.
constexpr bool is_differentiable(ScalarType t) { return is_floating_point(t); }
/// BFloat16 or Float16 (computed in Float32).
constexpr bool is_reduced_float(ScalarType t) { return category(t) == DtypeCategory::ReducedFloating; }
/// An integer dtype (Int64), and Bool too when include_bool.
constexpr bool is_integral(ScalarType t, bool include_bool) {
  return category(t) == DtypeCategory::Integral || (include_bool && category(t) == DtypeCategory::Bool);
}

/// The dtype kernels compute in (the list's Compute column): BFloat16/Float16
/// -> Float32, Bool -> Int64, the others themselves.
constexpr ScalarType compute_type(ScalarType t) {
  switch (t) {
#define TG_DTYPE(Name, HostT, DeviceT, Category, Compute, ...) \
  case ScalarType::Name:                                       \
    return ScalarType::Compute;
#include <tapegrad/tensor/dtypes.def>
#undef TG_DTYPE
  }
  return t;
}

/// Type promotion for two tensor operands (see docs/TENSOR.md), by the list's
/// Rank column: Bool < Int64 < {BFloat16, Float16} < Float32 < Float64, and
/// two dtypes of one rank (BFloat16 with Float16) give their compute type
/// (Float32).
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

/// Bytes per element (sizeof the list's host type).
constexpr size_t element_size(ScalarType t) {
  switch (t) {
#define TG_DTYPE(Name, HostT, ...) \
  case ScalarType::Name:           \
    return sizeof(HostT);
#include <tapegrad/tensor/dtypes.def>
#undef TG_DTYPE
  }
  return 0;
}

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
