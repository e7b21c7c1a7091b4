#include <tapegrad/tensor/scalar_type.h>

#include <cstring>
#include <ostream>

namespace tg {

const char* to_string(ScalarType t) {
  switch (t) {
#define TG_DTYPE(Name, ...) \
  case ScalarType::Name:    \
    return #Name;
#include <tapegrad/tensor/dtypes.def>
#undef TG_DTYPE
  }
  return "Unknown";
}

const char* python_name(ScalarType t) {
  switch (t) {
#define TG_DTYPE(Name, HostT, DeviceT, Category, Compute, Rank, DlCode, DlBits, CudaType, NcclType, py, ...) \
  case ScalarType::Name:                                                                                     \
    return py;
#include <tapegrad/tensor/dtypes.def>
#undef TG_DTYPE
  }
  return "unknown";
}

bool scalar_type_from_string(const char* name, ScalarType* t) {
  for (int i = 0; i < kNumScalarTypes; ++i) {
    const auto d = ScalarType(i);
    if (std::strcmp(name, to_string(d)) == 0 || std::strcmp(name, python_name(d)) == 0) {
      *t = d;
      return true;
    }
  }
  return false;
}

std::ostream& operator<<(std::ostream& os, ScalarType t) { return os << to_string(t); }

namespace {
// The list's Rank column.
int rank(ScalarType t) {
  switch (t) {
#define TG_DTYPE(Name, HostT, DeviceT, Category, Compute, Rank, ...) \
  case ScalarType::Name:                                             \
    return Rank;
#include <tapegrad/tensor/dtypes.def>
#undef TG_DTYPE
  }
  return 0;
}
}  // namespace

ScalarType promote_types(ScalarType a, ScalarType b) {
  if (a == b) return a;
  // A complex operand: the complex dtype of the promoted parts (Complex64
  // with Float64 is Complex128, with BFloat16 Complex64).
  if (is_complex(a) || is_complex(b)) return complex_type(promote_types(real_type(a), real_type(b)));
  if (rank(a) == rank(b)) {
    // Storage types of one rank meet in their compute type (two compute
    // dtypes of one rank would be an error in the list: the first wins).
    const ScalarType ca = compute_type(a), cb = compute_type(b);
    return ca == a && cb == b ? a : promote_types(ca, cb);
  }
  return rank(a) > rank(b) ? a : b;
}

ScalarType promote_with_scalar(ScalarType t, bool scalar_is_integral) {
  if (!scalar_is_integral && !is_floating_point(t) && !is_complex(t)) return ScalarType::Float32;
  if (scalar_is_integral && t == ScalarType::Bool) return ScalarType::Int64;
  return t;
}

// IEEE binary16 <-> binary32, round to nearest even, with subnormals.
float half_bits_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        man <<= 1;
      } while ((man & 0x400u) == 0);
      u = sign | (uint32_t(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (man << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t float_to_half_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return uint16_t(sign | 0x7e00u);   // NaN
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // overflow -> inf
  if (abs < 0x38800000u) {                                  // result is subnormal or zero
    if (abs < 0x33000000u) return uint16_t(sign);           // < half of smallest subnormal
    uint32_t e = abs >> 23;
    uint32_t man = (abs & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e;  // 14 - (e - 127) + 13 - 1 + 1
    uint32_t res = man >> shift;
    uint32_t rem = man & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (res & 1u))) ++res;
    return uint16_t(sign | res);
  }
  uint32_t res = ((abs >> 13) - ((127 - 15) << 10));
  uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (res & 1u))) ++res;
  return uint16_t(sign | res);
}

}  // namespace tg
