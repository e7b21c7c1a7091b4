// Element types. BFloat16 and Float16 are storage types: arithmetic on them is
// done in float and rounded back (round to nearest even).
#pragma once

#include <cstdint>
#include <cstring>
#include <iosfwd>

#if defined(__CUDACC__)
#define TG_HOST_DEVICE __host__ __device__
#else
#define TG_HOST_DEVICE
#endif

namespace tg {

/// A complex number of two T (float or double), laid out as std::complex<T>
/// and C's T _Complex (real part first, aligned as T): the element type of
/// Complex64 and Complex128, on the host and in CUDA code.
template <class T> struct complex {
  T re{};  ///< the real part
  T im{};  ///< the imaginary part
  constexpr complex() = default;
  /// re + i im; a real number converts implicitly, as to std::complex.
  TG_HOST_DEVICE constexpr complex(T r, T i = T(0)) : re(r), im(i) {}  // NOLINT
  /// From the other precision.
  template <class U> TG_HOST_DEVICE constexpr explicit complex(const complex<U>& z) : re(T(z.re)), im(T(z.im)) {}
  /// The real part.
  TG_HOST_DEVICE constexpr T real() const { return re; }
  /// The imaginary part.
  TG_HOST_DEVICE constexpr T imag() const { return im; }
  /// Both parts equal.
  TG_HOST_DEVICE friend constexpr bool operator==(const complex& a, const complex& b) {
    return a.re == b.re && a.im == b.im;
  }
  /// Not ==.
  TG_HOST_DEVICE friend constexpr bool operator!=(const complex& a, const complex& b) { return !(a == b); }
};

/// Element types, in the order of <tapegrad/tensor/dtypes.def> (the one dtype
/// list); the k* constants name them as in LibTorch (kFloat = kFloat32,
/// kDouble = kFloat64, kLong = kInt64).
enum class ScalarType : int8_t {
#define TG_DTYPE(Name, ...) Name,
#include <tapegrad/tensor/dtypes.def>
#undef TG_DTYPE
};

constexpr ScalarType kFloat32 = ScalarType::Float32;        ///< 32-bit float
constexpr ScalarType kFloat64 = ScalarType::Float64;        ///< 64-bit float
constexpr ScalarType kBFloat16 = ScalarType::BFloat16;      ///< bfloat16
constexpr ScalarType kFloat16 = ScalarType::Float16;        ///< IEEE half
constexpr ScalarType kInt64 = ScalarType::Int64;            ///< 64-bit integer
constexpr ScalarType kBool = ScalarType::Bool;              ///< bool
constexpr ScalarType kComplex64 = ScalarType::Complex64;    ///< two float32 (real, imaginary)
constexpr ScalarType kComplex128 = ScalarType::Complex128;  ///< two float64 (real, imaginary)
constexpr ScalarType kComplexFloat = kComplex64;            ///< kComplex64
constexpr ScalarType kComplexDouble = kComplex128;          ///< kComplex128
constexpr ScalarType kFloat = kFloat32;                     ///< kFloat32
constexpr ScalarType kDouble = kFloat64;                    ///< kFloat64
constexpr ScalarType kLong = kInt64;                        ///< kInt64
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
  Complex,          ///< a complex type: two of a Floating type (Complex64, Complex128)
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

/// Complex64 or Complex128.
constexpr bool is_complex(ScalarType t) { return category(t) == DtypeCategory::Complex; }
/// Float32, Float64, BFloat16 or Float16 (every real floating dtype; not the
/// complex ones, as PyTorch's).
constexpr bool is_floating_point(ScalarType t) {
  return category(t) == DtypeCategory::Floating || category(t) == DtypeCategory::ReducedFloating;
}
/// Whether a tensor of this dtype can require grad and carry gradients and
/// tangents: the floating and the complex dtypes (as PyTorch's). Prefer it
/// to is_floating_point where that is the question.
constexpr bool is_differentiable(ScalarType t) { return is_floating_point(t) || is_complex(t); }
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

/// The dtype of a complex dtype's parts (Complex64 -> Float32, Complex128 ->
/// Float64); any other dtype itself. From the list: the Floating dtype of
/// half the element size.
constexpr ScalarType real_type(ScalarType t) {
  if (!is_complex(t)) return t;
  for (int i = 0; i < kNumScalarTypes; ++i)
    if (category(ScalarType(i)) == DtypeCategory::Floating && 2 * element_size(ScalarType(i)) == element_size(t))
      return ScalarType(i);
  return t;
}
/// The complex dtype that holds values of `t`: Complex128 for Float64,
/// Complex64 for the other real dtypes (PyTorch's; Int64 and Bool as the
/// default float dtype), a complex dtype itself.
constexpr ScalarType complex_type(ScalarType t) {
  if (is_complex(t)) return t;
  const ScalarType part = is_floating_point(t) ? compute_type(t) : ScalarType::Float32;
  for (int i = 0; i < kNumScalarTypes; ++i)
    if (category(ScalarType(i)) == DtypeCategory::Complex && element_size(ScalarType(i)) == 2 * element_size(part))
      return ScalarType(i);
  return t;
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
