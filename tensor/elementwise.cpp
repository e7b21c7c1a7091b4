// Elementwise ops: dtype promotion, broadcasting, in-place variants; then
// their CPU kernels (the Backend slots the CUDA kernels of
// cuda/kernels/elementwise.cu also fill).
#include "tensor/op_util.h"
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include "tensor/element_math.h"
#include "tensor/cpu/loops.h"
#include "tensor/cpu/vmath.h"
#include "tensor/cpu/cpu_kernels.h"

namespace tg {

using detail::cast;
using detail::compute_type;
using kernels::BinaryOp;
using kernels::CompareOp;
using kernels::UnaryOp;

IntList broadcast_shapes(const IntList& a, const IntList& b, const char* op) {
  size_t n = std::max(a.size(), b.size());
  IntList out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t x = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t y = i < n - b.size() ? 1 : b[i - (n - b.size())];
    TG_CHECK(x == y || x == 1 || y == 1, op, ": shapes ", shape_str(a), " and ", shape_str(b),
             " cannot be broadcast together (dim ", i, ": ", x, " vs ", y, ")");
    out[i] = x == 1 ? y : x;
  }
  return out;
}

Tensor broadcast_to(const Tensor& x, const IntList& sizes) { return x.expand(sizes); }

namespace {

const char* binary_name(BinaryOp op) {
  switch (op) {
#define TG_BINARY(name, Kernel, ...) \
  case BinaryOp::Kernel:             \
    return #name;
#include <tapegrad/tensor/binary.def>
#undef TG_BINARY
  }
  return "?";
}

ScalarType binary_result_type(BinaryOp op, ScalarType a, ScalarType b, const char* name) {
  ScalarType rt = promote_types(a, b);
  bool float_only = false;  // binary.def's float_only column
  switch (op) {
#define TG_BINARY(name, Kernel, arg, form, float_only_, ...) \
  case BinaryOp::Kernel:                                     \
    float_only = float_only_;                                \
    break;
#include <tapegrad/tensor/binary.def>
#undef TG_BINARY
  }
  if (float_only && !is_floating_point(rt) && !is_complex(rt)) rt = kFloat32;
  TG_CHECK(!is_complex(rt) || kernels::takes_complex(op), name, ": not defined for complex operands (", a, " and ", b,
           "); take real(t) and imag(t), or abs(t), and compute on the parts");
  TG_CHECK(!((op == BinaryOp::Fmod || op == BinaryOp::Remainder || op == BinaryOp::Pow) && rt == kBool), name,
           ": not defined on two Bool tensors; convert them with .to(kInt64)");
  TG_CHECK(!(op == BinaryOp::Sub && (a == kBool || b == kBool)), name,
           ": subtracting Bool tensors is not supported (operands ", a, " and ", b,
           "); invert a mask with logical_not(), or convert with .to(kInt64) first");
  return rt;
}

// Runs kernel(backend, out, a', b') with a, b broadcast to one shape and cast
// to rt's compute type, into a new tensor of dtype rt (a, b already checked).
template <class K>
Tensor broadcast_into_new(const Tensor& a, const Tensor& b, ScalarType rt, const char* name, K&& kernel) {
  IntList shape = broadcast_shapes(a.sizes(), b.sizes(), name);
  ScalarType ct = compute_type(rt);
  Tensor out = detail::new_empty(shape, ct, a.device());
  kernel(kernels::backend(a.device(), name), out, raw::expand(cast(a, ct), shape), raw::expand(cast(b, ct), shape));
  return cast(out, rt);
}

Tensor binary_into_new(BinaryOp op, const Tensor& a, const Tensor& b, ScalarType rt, const char* name) {
  return broadcast_into_new(a, b, rt, name,
                            [op](const kernels::Backend& be, const Tensor& out, const Tensor& x, const Tensor& y) {
                              be.binary(op, out, x, y);
                            });
}

// A 0-dim CPU tensor may join an operation on another device (as in
// PyTorch): it is copied there.
void to_one_device(Tensor& a, Tensor& b) {
  if (a.device() == b.device()) return;
  if (a.dim() == 0 && a.device().is_cpu()) a = raw::to(a, b.device());
  else if (b.dim() == 0 && b.device().is_cpu()) b = raw::to(b, a.device());
}

Tensor binary(BinaryOp op, const Tensor& a_in, const Tensor& b_in) {
  const char* name = binary_name(op);
  detail::check_defined(a_in, name, "first operand");
  detail::check_defined(b_in, name, "second operand");
  Tensor a = a_in, b = b_in;
  to_one_device(a, b);
  detail::check_same_device(a, b, name);
  return binary_into_new(op, a, b, binary_result_type(op, a.dtype(), b.dtype(), name), name);
}

// A 0-dim tensor holding s, typed and placed to pair with t (checked defined
// for `op`).
Tensor scalar_like(Scalar s, const Tensor& t, const char* op) {
  detail::check_defined(t, op);
  ScalarType rt = promote_with_scalar(t.dtype(), s);
  return scalar_tensor(s, TensorOptions().dtype(rt).device(t.device()));
}

// s rounded to dtype st, as a 0-dim tensor of st would hold it: (double,
// int64) for binary_scalar.
std::pair<double, int64_t> scalar_in(Scalar s, ScalarType st) {
  const double d = s.to_double();
  std::pair<double, int64_t> r;
  const bool floating = kernels::dispatch_if<is_floating_point>(st, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, double>) r = {d, s.to_int()};
    else r = {double(float(T(float(d)))), s.to_int()};
  });
  if (floating) return r;
  const int64_t i = s.to_int();
  return {double(i), i};
}

Tensor binary(BinaryOp op, const Tensor& a, Scalar s) {
  const char* name = binary_name(op);
  detail::check_defined(a, name, "first operand");
  const kernels::Backend& be = kernels::backend(a.device(), name);
  const ScalarType st = promote_with_scalar(a.dtype(), s);
  if (!be.binary_scalar || a.is_sparse() || is_complex(st) || st == kBool)
    return binary(op, a, scalar_like(s, a, name));
  // The scalar is a kernel argument: one launch, no 0-dim tensor to fill.
  const ScalarType rt = binary_result_type(op, a.dtype(), st, name);
  const ScalarType ct = compute_type(rt);
  const auto [sd, si] = scalar_in(s, st);
  Tensor out = detail::new_empty(a.sizes(), ct, a.device());
  be.binary_scalar(op, out, cast(a, ct), sd, si);
  return cast(out, rt);
}

Tensor compare(CompareOp op, const Tensor& a_in, const Tensor& b_in, const char* name) {
  detail::check_defined(a_in, name, "first operand");
  detail::check_defined(b_in, name, "second operand");
  Tensor a = a_in, b = b_in;
  to_one_device(a, b);
  detail::check_same_device(a, b, name);
  IntList shape = broadcast_shapes(a.sizes(), b.sizes(), name);
  ScalarType ct = compute_type(promote_types(a.dtype(), b.dtype()));
  TG_CHECK(!is_complex(ct) || op == CompareOp::Eq || op == CompareOp::Ne, name, ": complex numbers are not ordered (",
           a.dtype(), " and ", b.dtype(), "); compare abs(t) or real(t)");
  Tensor out = detail::new_empty(shape, kBool, a.device());
  kernels::backend(a.device(), name).compare(op, out, raw::expand(cast(a, ct), shape), raw::expand(cast(b, ct), shape));
  return out;
}

// Float-only ops give Float32 for Int64/Bool inputs (as PyTorch).
Tensor unary(UnaryOp op, const Tensor& x, const char* name, bool float_only, kernels::UnaryParams prm = {}) {
  detail::check_defined(x, name);
  ScalarType rt = x.dtype();
  TG_CHECK(!is_complex(rt) || kernels::takes_complex(op), name, ": not defined for a complex tensor (", rt, ", shape ",
           shape_str(x.sizes()), "); take real(t) and imag(t), or abs(t), and compute on the parts");
  if (float_only && !is_floating_point(rt) && !is_complex(rt)) rt = kFloat32;
  TG_CHECK(rt != kBool, name,
           ": Bool tensors are not supported; convert with "
           ".to(kInt64) first");
  ScalarType ct = compute_type(rt);
  Tensor out = detail::new_empty(x.sizes(), ct, x.device());
  kernels::backend(x.device(), name).unary(op, out, cast(x, ct), prm);
  return cast(out, rt);
}

// The shape of `self (op)= other`: other broadcast to self's shape, which
// the result cannot change.
IntList inplace_shape(const Tensor& self, const Tensor& other, const char* name) {
  IntList shape = broadcast_shapes(self.sizes(), other.sizes(), name);
  TG_CHECK(shape == self.sizes(), name, ": output with shape ", shape_str(self.sizes()),
           " doesn't match the broadcast shape ", shape_str(shape));
  return shape;
}

// self op= other, in place: other broadcasts to self; the promoted dtype
// must be castable to self's (no float -> integer, nothing -> Bool).
const Tensor& inplace_binary(const Tensor& self, BinaryOp op, const Tensor& other, const char* name) {
  detail::check_defined(self, name, "self");
  detail::check_defined(other, name, "other");
  detail::check_same_device(self, other, name);
  ScalarType rt = binary_result_type(op, self.dtype(), other.dtype(), name);
  TG_CHECK(detail::castable_in_place(rt, self.dtype()), name, ": result type ", rt,
           " can't be cast to the desired output type ", self.dtype());
  const IntList shape = inplace_shape(self, other, name);
  detail::check_writable(self, name);
  Tensor src = detail::may_overlap(self, other) ? other.clone() : other;
  ScalarType ct = compute_type(rt);
  if (self.dtype() == ct && ct == rt) {
    kernels::backend(self.device(), name).binary(op, self, self, raw::expand(cast(src, ct), shape));
  } else {
    Tensor r = binary_into_new(op, self, src, rt, name);
    kernels::backend(self.device(), name).copy(self, r);
  }
  self.bump_version();
  return self;
}

// self (op)= s: with the scalar as a kernel argument when self already has
// the op's compute dtype (one launch), else as inplace_binary.
const Tensor& inplace_scalar(const Tensor& self, BinaryOp op, Scalar s, const char* name) {
  detail::check_defined(self, name, "self");
  const kernels::Backend& be = kernels::backend(self.device(), name);
  const ScalarType st = promote_with_scalar(self.dtype(), s);
  const ScalarType rt = binary_result_type(op, self.dtype(), st, name);
  if (!be.binary_scalar || self.is_sparse() || self.dtype() != rt || compute_type(rt) != rt || is_complex(rt) ||
      rt == kBool)
    return inplace_binary(self, op, scalar_like(s, self, name), name);
  detail::check_writable(self, name);
  const auto [sd, si] = scalar_in(s, st);
  be.binary_scalar(op, self, self, sd, si);
  self.bump_version();
  return self;
}

}  // namespace

namespace raw {

static bool any_sparse(const Tensor& a, const Tensor& b) {
  return (a.defined() && a.is_sparse()) || (b.defined() && b.is_sparse());
}
// -a: integral a wraps around at INT64_MIN (as the int64 kernels do); where
// the result is floating, -a as a double, so an integral 0 becomes -0.0 and
// a - 0 * b keeps a's sign as a + (-0.0) * b does.
static Scalar negated(Scalar a, ScalarType rt = kInt64) {
  if (a.is_integral() && !is_floating_point(rt) && !is_complex(rt))
    return Scalar(int64_t(uint64_t(0) - uint64_t(a.to_int())));
  return Scalar(-a.to_double());
}

// PyTorch's rules for add's and sub's alpha, for a result of dtype rt: an
// integral (or Bool) result takes an integral alpha, a floating or complex
// one an alpha its dtype holds (refused rather than rounded to inf).
static void check_alpha(ScalarType rt, const Tensor& a, const Tensor& b, Scalar alpha, const char* name) {
  TG_CHECK(!alpha.is_bool() || rt == kBool, name, ": a Boolean alpha (", alpha,
           ") is only supported for a Bool result, not ", rt, " (operands ", a.dtype(), " and ", b.dtype(),
           "); pass a number");
  TG_CHECK(is_floating_point(rt) || is_complex(rt) || alpha.is_integral(), name, ": alpha ", alpha.to_double(),
           " is a floating point number but the operands (", a.dtype(), " and ", b.dtype(),
           ") are integral; pass an integer alpha, or convert the operands to floating point with .to(kFloat32)");
  if (is_floating_point(rt) || is_complex(rt))
    detail::check_scalar_fits(alpha, rt, (std::string(name) + " (its alpha)").c_str());
}
static ScalarType checked_alpha_result(const Tensor& a, const Tensor& b, Scalar alpha, const char* name) {
  TG_CHECK(a.defined(), name, ": first operand is an undefined tensor");  // sparse operands take sparse_add
  TG_CHECK(b.defined(), name, ": second operand is an undefined tensor");
  const ScalarType rt = promote_types(a.dtype(), b.dtype());
  check_alpha(rt, a, b, alpha, name);
  return rt;
}
// As PyTorch: no subtraction with a Bool operand. binary_result_type refuses
// it for the dense paths; this names it first, before the alpha checks, and
// for sparse operands, which do not pass through binary().
static void check_no_bool_sub(const Tensor& a, const Tensor& b, const char* name) {
  if (a.defined() && b.defined()) binary_result_type(BinaryOp::Sub, a.dtype(), b.dtype(), name);
}
// As PyTorch: no subtraction of (or from) a Boolean number either.
static void check_no_bool_scalar_sub(Scalar s, const char* name) {
  TG_CHECK(!s.is_bool(), name, ": subtracting a Boolean (", s,
           ") is not supported; pass the number 1 or 0, or invert a mask with logical_not()");
}
static bool is_one(Scalar alpha) { return alpha.is_integral() && !alpha.is_bool() && alpha.to_int() == 1; }
// alpha b in the compute dtype of the result rt: b converted first, so that
// a narrower b is scaled at the result's precision, and a reduced floating
// result is rounded once, after the add.
static Tensor scaled(const Tensor& b, Scalar alpha, ScalarType rt) {
  return raw::mul(cast(b, compute_type(rt)), alpha);
}
// Bool + alpha Bool is Bool (as PyTorch's): b's entries where alpha is nonzero.
static Scalar bool_alpha(Scalar alpha) { return Scalar(int64_t(alpha.to_int() != 0)); }

// Whether a + alpha * b may take the backend's add_scaled (one kernel, the
// product rounded first, so bitwise mul then add): dense operands of one
// device and one real, non-Bool compute dtype that alpha leaves unpromoted.
static bool takes_add_scaled(const kernels::Backend& be, const Tensor& a, const Tensor& b, Scalar alpha) {
  const ScalarType t = a.dtype();
  return be.add_scaled && a.device() == b.device() && b.dtype() == t && !is_complex(t) && t != kBool &&
         compute_type(t) == t && promote_with_scalar(t, alpha) == t;
}
// a + alpha * b through add_scaled; undefined where it does not apply (the
// caller takes mul, then add).
static Tensor add_scaled_new(const Tensor& a, const Tensor& b, Scalar alpha, const char* name) {
  if (!a.defined() || !b.defined()) return {};
  const kernels::Backend& be = kernels::backend(a.device(), name);
  if (!takes_add_scaled(be, a, b, alpha)) return {};
  const IntList shape = broadcast_shapes(a.sizes(), b.sizes(), name);
  Tensor out = detail::new_empty(shape, a.dtype(), a.device());
  const auto [ad, ai] = scalar_in(alpha, a.dtype());
  be.add_scaled(out, raw::expand(a, shape), raw::expand(b, shape), ad, ai);
  return out;
}
Tensor add(const Tensor& a, const Tensor& b, Scalar alpha) {
  if (is_one(alpha)) return any_sparse(a, b) ? sparse_add(a, b, alpha) : binary(BinaryOp::Add, a, b);
  const ScalarType rt = checked_alpha_result(a, b, alpha, "add");
  if (rt == kBool) alpha = bool_alpha(alpha);
  if (any_sparse(a, b)) return sparse_add(a, b, alpha);
  if (rt == kBool) return binary(BinaryOp::Add, a, is_one(alpha) ? b : tg::zeros_like(b));
  if (Tensor r = add_scaled_new(a, b, alpha, "add"); r.defined()) return r;
  return cast(binary(BinaryOp::Add, a, scaled(b, alpha, rt)), rt);
}
Tensor sub(const Tensor& a, const Tensor& b, Scalar alpha) {
  check_no_bool_sub(a, b, "sub");
  if (is_one(alpha)) return any_sparse(a, b) ? sparse_add(a, b, negated(alpha), "sub") : binary(BinaryOp::Sub, a, b);
  const ScalarType rt = checked_alpha_result(a, b, alpha, "sub");
  if (any_sparse(a, b)) return sparse_add(a, b, negated(alpha, rt), "sub");
  // a - alpha b = a + (-alpha) b exactly (negation is exact).
  if (Tensor r = add_scaled_new(a, b, negated(alpha, rt), "sub"); r.defined()) return r;
  return cast(binary(BinaryOp::Sub, a, scaled(b, alpha, rt)), rt);
}
// The binary ops of form G: one definition per line of binary.def.
#define TG_BINARY_RAW_A(name, Kernel)
#define TG_BINARY_RAW_R(name, Kernel)
#define TG_BINARY_RAW_G(name, Kernel) \
  Tensor name(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Kernel, a, b); }
#define TG_BINARY(name, Kernel, arg, form, ...) TG_BINARY_RAW_##form(name, Kernel)
#include <tapegrad/tensor/binary.def>
#undef TG_BINARY
#undef TG_BINARY_RAW_A
#undef TG_BINARY_RAW_R
#undef TG_BINARY_RAW_G
// Integer division by zero is refused, as PyTorch's ZeroDivisionError (one
// look at the divisor: a host sync on a GPU, integer tensors only).
static Tensor integer_modulo(BinaryOp op, const Tensor& a, const Tensor& b) {
  if (a.defined() && b.defined() && !is_floating_point(promote_types(a.dtype(), b.dtype())) && b.numel() > 0)
    TG_CHECK(raw::sum(raw::eq(b, Scalar(int64_t(0)))).item<int64_t>() == 0, binary_name(op),
             ": integer division by zero (the divisor ", shape_str(b.sizes()), " ", b.dtype(),
             " holds a 0); use floating-point operands for NaN results");
  return binary(op, a, b);
}
Tensor fmod(const Tensor& a, const Tensor& b) { return integer_modulo(BinaryOp::Fmod, a, b); }
static Tensor integer_modulo(BinaryOp op, const Tensor& a, Scalar b) {
  TG_CHECK(!(b.is_integral() && b.to_int() == 0 && a.defined() && !is_floating_point(a.dtype())), binary_name(op),
           ": integer division by zero (", a.dtype(), " tensor by the number 0)");
  return binary(op, a, b);
}
Tensor fmod(const Tensor& a, Scalar b) { return integer_modulo(BinaryOp::Fmod, a, b); }
Tensor remainder(const Tensor& a, Scalar b) { return integer_modulo(BinaryOp::Remainder, a, b); }
Tensor remainder(const Tensor& a, const Tensor& b) { return integer_modulo(BinaryOp::Remainder, a, b); }
Tensor add(const Tensor& a, Scalar b) { return binary(BinaryOp::Add, a, b); }
Tensor sub(const Tensor& a, Scalar b) {
  TG_CHECK(!a.defined() || a.dtype() != kBool, "sub: subtracting from a Bool tensor is not supported (a Bool tensor ",
           "minus ", b, "); invert a mask with logical_not(), or convert with .to(kInt64) first");
  check_no_bool_scalar_sub(b, "sub");
  return binary(BinaryOp::Sub, a, b);
}
Tensor mul(const Tensor& a, Scalar b) {
  if (a.defined() && a.is_sparse()) return sparse_mul(a, b);
  return binary(BinaryOp::Mul, a, b);
}
Tensor div(const Tensor& a, Scalar b) {
  if (a.defined() && a.is_sparse()) return sparse_div(a, b);
  return binary(BinaryOp::Div, a, b);
}
Tensor pow(const Tensor& a, Scalar e) {
  detail::check_defined(a, "pow");
  TG_CHECK(!(e.is_integral() && e.to_int() < 0 && !is_floating_point(a.dtype())),
           "pow: integers to negative integer powers are not allowed (", a.dtype(), " tensor, exponent ", e.to_int(),
           ")");
  return binary(BinaryOp::Pow, a, e);
}
Tensor pow(Scalar base, const Tensor& e) {
  detail::check_defined(e, "pow");
  return binary(BinaryOp::Pow, scalar_like(base, e, "pow"), e);
}

Tensor eq(const Tensor& a, const Tensor& b) { return compare(CompareOp::Eq, a, b, "eq"); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare(CompareOp::Ne, a, b, "ne"); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare(CompareOp::Lt, a, b, "lt"); }
Tensor le(const Tensor& a, const Tensor& b) { return compare(CompareOp::Le, a, b, "le"); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare(CompareOp::Gt, a, b, "gt"); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare(CompareOp::Ge, a, b, "ge"); }
Tensor eq(const Tensor& a, Scalar b) { return raw::eq(a, scalar_like(b, a, "eq")); }
Tensor ne(const Tensor& a, Scalar b) { return raw::ne(a, scalar_like(b, a, "ne")); }
Tensor lt(const Tensor& a, Scalar b) { return raw::lt(a, scalar_like(b, a, "lt")); }
Tensor le(const Tensor& a, Scalar b) { return raw::le(a, scalar_like(b, a, "le")); }
Tensor gt(const Tensor& a, Scalar b) { return raw::gt(a, scalar_like(b, a, "gt")); }
Tensor ge(const Tensor& a, Scalar b) { return raw::ge(a, scalar_like(b, a, "ge")); }

// The logical ops, as comparisons under their own names: with p = a != 0
// and z = b == 0 (Bool, false < true), a and b is p > z, a or b is p >= z;
// a xor b is p != (b != 0).
namespace {
Tensor vs_zero(CompareOp op, const Tensor& x, const char* name) {
  return compare(op, x, scalar_like(0, x, name), name);
}
}  // namespace
Tensor logical_not(const Tensor& x) { return vs_zero(CompareOp::Eq, x, "logical_not"); }
Tensor logical_and(const Tensor& a, const Tensor& b) {
  const char* name = "logical_and";
  return compare(CompareOp::Gt, vs_zero(CompareOp::Ne, a, name), vs_zero(CompareOp::Eq, b, name), name);
}
Tensor logical_or(const Tensor& a, const Tensor& b) {
  const char* name = "logical_or";
  return compare(CompareOp::Ge, vs_zero(CompareOp::Ne, a, name), vs_zero(CompareOp::Eq, b, name), name);
}
Tensor logical_xor(const Tensor& a, const Tensor& b) {
  const char* name = "logical_xor";
  return compare(CompareOp::Ne, vs_zero(CompareOp::Ne, a, name), vs_zero(CompareOp::Ne, b, name), name);
}

// The plain unary ops: one definition per line of unary.def (neg of a
// sparse tensor negates its values).
// abs of a complex tensor is its modulus (real), hypot of the parts.
static Tensor sparse_neg(const Tensor& x) {
  TG_CHECK(x.dtype() != kBool, "neg: Bool tensors are not supported (a sparse Bool tensor ", shape_str(x.sizes()),
           "); invert a mask with logical_not(), or convert with .to(kInt64) first");
  return sparse_mul(x, -1);
}
#define TG_UNARY(name, Kernel, float_only, ...)                                                    \
  Tensor name(const Tensor& x) {                                                                   \
    if (UnaryOp::Kernel == UnaryOp::Neg && x.defined() && x.is_sparse()) return sparse_neg(x);     \
    if (UnaryOp::Kernel == UnaryOp::Abs && x.defined() && is_complex(x.dtype()) && !x.is_sparse()) \
      return raw::hypot(raw::real(x), raw::imag(x));                                               \
    return unary(UnaryOp::Kernel, x, #name, float_only);                                           \
  }
#include <tapegrad/tensor/unary.def>
#undef TG_UNARY
Tensor gelu(const Tensor& x, const std::string& approximate) {
  TG_CHECK(approximate == "none" || approximate == "tanh", "gelu: approximate must be \"none\" or \"tanh\", got \"",
           approximate, "\"");
  return unary(approximate == "tanh" ? UnaryOp::GeluTanh : UnaryOp::Gelu, x, "gelu", true);
}
Tensor softplus(const Tensor& x, double beta, double threshold) {
  TG_CHECK(beta != 0, "softplus: beta must be nonzero");
  kernels::UnaryParams p;
  p.a = beta;
  p.b = threshold;
  return unary(UnaryOp::Softplus, x, "softplus", true, p);
}

Tensor clamp(const Tensor& x, std::optional<Scalar> lo, std::optional<Scalar> hi) {
  detail::check_defined(x, "clamp");
  TG_CHECK(lo || hi, "clamp: at least one of min and max must be given");
  kernels::UnaryParams p;
  Tensor in = x;
  bool float_bound = (lo && !lo->is_integral()) || (hi && !hi->is_integral());
  if (float_bound && !x.is_floating_point()) in = x.to(kFloat32);
  if (lo) {
    p.a = lo->to_double();
    p.has_a = true;
  }
  if (hi) {
    p.b = hi->to_double();
    p.has_b = true;
  }
  return unary(UnaryOp::Clamp, in, "clamp", false, p);
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  detail::check_defined(cond, "where", "condition");
  detail::check_defined(a, "where", "first value");
  detail::check_defined(b, "where", "second value");
  TG_CHECK(cond.dtype() == kBool, "where: condition must be a Bool tensor, got ", cond.dtype(),
           "; compare first (e.g. gt(x, 0))");
  detail::check_same_device(cond, a, "where");
  detail::check_same_device(a, b, "where");
  IntList shape = broadcast_shapes(broadcast_shapes(cond.sizes(), a.sizes(), "where"), b.sizes(), "where");
  ScalarType rt = promote_types(a.dtype(), b.dtype());
  Tensor out = detail::new_empty(shape, rt, a.device());
  kernels::backend(a.device(), "where")
      .where(out, raw::expand(cond, shape), raw::expand(cast(a, rt), shape), raw::expand(cast(b, rt), shape));
  return out;
}
Tensor where(const Tensor& cond, const Tensor& a, Scalar b) {
  detail::check_defined(a, "where", "first value");
  return raw::where(cond, a, scalar_like(b, a, "where"));
}
Tensor where(const Tensor& cond, Scalar a, const Tensor& b) {
  detail::check_defined(b, "where", "second value");
  return raw::where(cond, scalar_like(a, b, "where"), b);
}

// ---- operators ------------------------------------------------------------------
}  // namespace raw

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, Scalar b) { return add(a, b); }
Tensor operator-(const Tensor& a, Scalar b) { return sub(a, b); }
Tensor operator*(const Tensor& a, Scalar b) { return mul(a, b); }
Tensor operator/(const Tensor& a, Scalar b) { return div(a, b); }
Tensor operator+(Scalar a, const Tensor& b) { return add(b, a); }
Tensor operator-(Scalar a, const Tensor& b) {
  raw::check_no_bool_scalar_sub(a, "sub");
  TG_CHECK(!b.defined() || b.dtype() != kBool, "sub: subtracting a Bool tensor is not supported (", a,
           " minus a Bool tensor ", shape_str(b.sizes()),
           "); invert a mask with logical_not(), or convert with .to(kInt64) first");
  return add(neg(b), a);
}
Tensor operator*(Scalar a, const Tensor& b) { return mul(b, a); }
Tensor operator/(Scalar a, const Tensor& b) { return mul(reciprocal(b), a); }
Tensor operator-(const Tensor& x) { return neg(x); }
Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
Tensor operator==(const Tensor& a, Scalar b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, Scalar b) { return ne(a, b); }
Tensor operator<(const Tensor& a, Scalar b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, Scalar b) { return le(a, b); }
Tensor operator>(const Tensor& a, Scalar b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, Scalar b) { return ge(a, b); }
Tensor operator==(Scalar a, const Tensor& b) { return eq(b, a); }
Tensor operator!=(Scalar a, const Tensor& b) { return ne(b, a); }
Tensor operator<(Scalar a, const Tensor& b) { return gt(b, a); }
Tensor operator<=(Scalar a, const Tensor& b) { return ge(b, a); }
Tensor operator>(Scalar a, const Tensor& b) { return lt(b, a); }
Tensor operator>=(Scalar a, const Tensor& b) { return le(b, a); }

namespace {
// The operands of a Bool-only operator (`op`: its spelling).
void check_bool(const char* op, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) {
    detail::check_defined(*t, op);
    TG_CHECK(t->dtype() == kBool, op, ": defined on Bool tensors only, got ", t->dtype(),
             " (bitwise operators are not supported; use logical_and, logical_or, logical_xor or logical_not)");
  }
}
}  // namespace

Tensor operator!(const Tensor& x) { return logical_not(x); }
Tensor operator~(const Tensor& x) {
  check_bool("operator~", {&x});
  return logical_not(x);
}
Tensor operator&(const Tensor& a, const Tensor& b) {
  check_bool("operator&", {&a, &b});
  return logical_and(a, b);
}
Tensor operator|(const Tensor& a, const Tensor& b) {
  check_bool("operator|", {&a, &b});
  return logical_or(a, b);
}
Tensor operator^(const Tensor& a, const Tensor& b) {
  check_bool("operator^", {&a, &b});
  return logical_xor(a, b);
}
Tensor& operator+=(Tensor& a, const Tensor& b) {
  a.add_(b);
  return a;
}
Tensor& operator-=(Tensor& a, const Tensor& b) {
  a.sub_(b);
  return a;
}
Tensor& operator*=(Tensor& a, const Tensor& b) {
  a.mul_(b);
  return a;
}
Tensor& operator/=(Tensor& a, const Tensor& b) {
  a.div_(b);
  return a;
}
Tensor& operator+=(Tensor& a, Scalar b) {
  a.add_(b);
  return a;
}
Tensor& operator-=(Tensor& a, Scalar b) {
  a.sub_(b);
  return a;
}
Tensor& operator*=(Tensor& a, Scalar b) {
  a.mul_(b);
  return a;
}
Tensor& operator/=(Tensor& a, Scalar b) {
  a.div_(b);
  return a;
}

namespace raw {

// ---- in-place methods ---------------------------------------------------------------
// self += alpha * o in one kernel where the backend has add_scaled and no
// dtype changes (the optimizer step's update); false: not done here.
static bool add_scaled_(const Tensor& self, const Tensor& o, Scalar alpha, const char* name) {
  detail::check_defined(self, name, "self");
  detail::check_defined(o, name, "other");
  const kernels::Backend& be = kernels::backend(self.device(), name);
  if (!takes_add_scaled(be, self, o, alpha) || detail::may_overlap(self, o)) return false;
  const IntList shape = inplace_shape(self, o, name);
  detail::check_writable(self, name);
  const auto [ad, ai] = scalar_in(alpha, self.dtype());
  be.add_scaled(self, self, raw::expand(o, shape), ad, ai);
  self.bump_version();
  return true;
}
// add_'s and sub_'s alpha checks (alpha must suit the promoted dtype and
// self's): the promoted dtype, or nothing for alpha 1, which needs no scaling.
static std::optional<ScalarType> inplace_alpha_result(const Tensor& self, const Tensor& o, Scalar alpha,
                                                      const char* name) {
  if (is_one(alpha)) return std::nullopt;
  const ScalarType pt = checked_alpha_result(self, o, alpha, name);
  check_alpha(self.dtype(), self, o, alpha, name);
  return pt;
}
const Tensor& add_(const Tensor& self, const Tensor& o, Scalar alpha) {
  const std::optional<ScalarType> scaled_pt = inplace_alpha_result(self, o, alpha, "add_");
  const bool one = !scaled_pt;
  const ScalarType pt = scaled_pt.value_or(kFloat32);
  if (pt == kBool) alpha = bool_alpha(alpha);
  if (any_sparse(self, o)) return sparse_add_(self, o, alpha);
  if (one) return inplace_binary(self, BinaryOp::Add, o, "add_");
  if (pt == kBool) return inplace_binary(self, BinaryOp::Add, is_one(alpha) ? o : tg::zeros_like(o), "add_");
  if (add_scaled_(self, o, alpha, "add_")) return self;
  return inplace_binary(self, BinaryOp::Add, scaled(o, alpha, pt), "add_");
}
const Tensor& sub_(const Tensor& self, const Tensor& o, Scalar alpha) {
  check_no_bool_sub(self, o, "sub_");
  const std::optional<ScalarType> scaled_pt = inplace_alpha_result(self, o, alpha, "sub_");
  const bool one = !scaled_pt;
  const ScalarType pt = scaled_pt.value_or(kFloat32);
  if (any_sparse(self, o)) return sparse_add_(self, o, negated(alpha, self.dtype()), "sub_");
  if (one) return inplace_binary(self, BinaryOp::Sub, o, "sub_");
  if (add_scaled_(self, o, negated(alpha, self.dtype()), "sub_")) return self;
  return inplace_binary(self, BinaryOp::Sub, scaled(o, alpha, pt), "sub_");
}
const Tensor& add_(const Tensor& self, Scalar s) { return inplace_scalar(self, BinaryOp::Add, s, "add_"); }
const Tensor& sub_(const Tensor& self, Scalar s) {
  check_no_bool_scalar_sub(s, "sub_");
  return inplace_scalar(self, BinaryOp::Sub, s, "sub_");
}
const Tensor& mul_(const Tensor& self, const Tensor& o) { return inplace_binary(self, BinaryOp::Mul, o, "mul_"); }
const Tensor& mul_(const Tensor& self, Scalar s) {
  if (self.defined() && self.is_sparse()) return sparse_scale_(self, s, false, "mul_");
  return inplace_scalar(self, BinaryOp::Mul, s, "mul_");
}
const Tensor& div_(const Tensor& self, const Tensor& o) { return inplace_binary(self, BinaryOp::Div, o, "div_"); }
const Tensor& div_(const Tensor& self, Scalar s) {
  if (self.defined() && self.is_sparse()) return sparse_scale_(self, s, true, "div_");
  return inplace_scalar(self, BinaryOp::Div, s, "div_");
}

const Tensor& fill_(const Tensor& self, Scalar s) {
  detail::check_defined(self, "fill_");
  detail::check_writable(self, "fill_");
  detail::check_scalar_fits(s, self.dtype(), "fill_");
  kernels::backend(self.device(), "fill_").fill(self, s);
  self.bump_version();
  return self;
}
const Tensor& zero_(const Tensor& self) { return fill_(self, 0); }

Tensor activation_grad(const Tensor& g_in, const Tensor& x_in, Activation act, int order) {
  const char* name = "activation_grad";
  detail::check_defined(g_in, name, "g");
  detail::check_defined(x_in, name, "x");
  TG_CHECK(order >= 0 && order <= kernels::kMaxFusedActivationOrder, name, ": order ", order,
           " is out of the fused range 0..", kernels::kMaxFusedActivationOrder);
  Tensor g = g_in, x = x_in;
  to_one_device(g, x);
  detail::check_same_device(g, x, name);
  const bool cx = is_complex(g.dtype()) || is_complex(x.dtype());
  TG_CHECK((g.is_floating_point() || is_complex(g.dtype())) && (x.is_floating_point() || is_complex(x.dtype())), name,
           ": g and x must be floating point or complex, got ", g.dtype(), " and ", x.dtype());
  TG_CHECK(!cx || (act != Activation::Relu && act != Activation::Gelu), name, ": ",
           act == Activation::Relu ? "relu" : "gelu", " has no complex meaning (", g.dtype(), " and ", x.dtype(), ")");
  return broadcast_into_new(g, x, promote_types(g.dtype(), x.dtype()), name,
                            [act, order](const kernels::Backend& be, const Tensor& out, const Tensor& gb,
                                         const Tensor& xb) { be.activation_grad(act, order, out, gb, xb); });
}

const Tensor& copy_(const Tensor& self, const Tensor& src, bool non_blocking) {
  detail::check_defined(self, "copy_", "self");
  detail::check_defined(src, "copy_", "src");
  IntList shape = broadcast_shapes(self.sizes(), src.sizes(), "copy_");
  TG_CHECK(shape == self.sizes(), "copy_: src of shape ", shape_str(src.sizes()),
           " cannot be broadcast to self of shape ", shape_str(self.sizes()));
  detail::check_writable(self, "copy_");
  if (self.device() != src.device()) {
    // Between devices: shape and dtype are fixed on the source's side, the
    // bytes move in one copy (asynchronous with pinned host memory and
    // non_blocking), and a strided self is filled from a staging tensor.
    const kernels::Backend& be = kernels::backend(self.is_cuda() ? self.device() : src.device(), "copy_");
    Tensor s = contiguous(to(expand(src, self.sizes()), self.dtype()));
    if (self.is_contiguous()) be.copy_across(self, s, non_blocking);
    else kernels::backend(self.device(), "copy_").copy(self, to(s, self.device()));
    self.bump_version();
    return self;
  }
  Tensor s = detail::may_overlap(self, src) ? src.clone() : src;
  kernels::backend(self.device(), "copy_").copy(self, raw::expand(s, self.sizes()));
  self.bump_version();
  return self;
}

}  // namespace raw

}  // namespace tg

// ---- the CPU kernels -------------------------------------------------------------
// CPU elementwise kernels: copy/convert, fill, binary, compare, unary, where.

namespace tg::cpu {
namespace {

using kernels::BinaryOp;
using kernels::CompareOp;
using kernels::UnaryOp;

// ---- conversions ---------------------------------------------------------------
template <class T> constexpr bool is_half_v = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

using kernels::is_complex_t;

// Between complex and real: a real value is the real part (imaginary 0); a
// complex value to a real dtype keeps its real part (PyTorch's cast, which
// warns), to Bool whether it is nonzero.
template <class D, class S> inline D convert(S s) {
  if constexpr (is_complex_t<D>::value && is_complex_t<S>::value) {
    return D(s);
  } else if constexpr (is_complex_t<D>::value) {
    using P = decltype(D{}.re);
    return D(convert<P>(s), P(0));
  } else if constexpr (is_complex_t<S>::value) {
    if constexpr (std::is_same_v<D, bool>) return s.re != 0 || s.im != 0;
    else return convert<D>(s.re);
  } else if constexpr (is_half_v<S>) {
    return convert<D>(float(s));
  } else if constexpr (is_half_v<D>) {
    return D(float(s));
  } else if constexpr (std::is_same_v<D, bool>) {
    return s != S(0);
  } else if constexpr (std::is_integral_v<D> && std::is_floating_point_v<S>) {
    // Defined for every input (a plain cast of NaN, +-inf or 1e30 is
    // undefined behaviour): saturating, NaN to the smallest value, as CUDA's
    // conversion (and what PyTorch gives on both devices).
    if (fits_int64(double(s))) return static_cast<D>(s);
    return s > 0 ? std::numeric_limits<D>::max() : std::numeric_limits<D>::min();
  } else {
    return static_cast<D>(s);
  }
}

using kernels::dispatch_all;

template <class D, class S> void copy_typed(const Tensor& dst, const Tensor& src) {
  Tensor ops[2] = {dst, src};
  for_each(ops, 2, [](char** p, const int64_t* s, int64_t n) {
    if (s[0] == sizeof(D) && s[1] == sizeof(S)) {
      D* o = reinterpret_cast<D*>(p[0]);
      const S* a = reinterpret_cast<const S*>(p[1]);
      if constexpr (std::is_same_v<D, S>) {
        std::memcpy(o, a, size_t(n) * sizeof(D));
      } else {
        for (int64_t i = 0; i < n; ++i)
          o[i] = convert<D>(a[i]);
      }
      return;
    }
    for (int64_t i = 0; i < n; ++i)
      *reinterpret_cast<D*>(p[0] + i * s[0]) = convert<D>(*reinterpret_cast<const S*>(p[1] + i * s[1]));
  });
}

void copy_kernel(const Tensor& dst, const Tensor& src) {
  dispatch_all(dst.dtype(), [&](auto d) {
    dispatch_all(src.dtype(), [&](auto s) { copy_typed<decltype(d), decltype(s)>(dst, src); });
  });
}

void fill_kernel(const Tensor& dst, Scalar v) {
  dispatch_all(dst.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T value = v.is_integral() ? convert<T>(v.to_int()) : convert<T>(v.to_double());
    Tensor ops[1] = {dst};
    for_each(ops, 1, [value](char** p, const int64_t* s, int64_t n) {
      if (s[0] == sizeof(T)) {
        T* o = reinterpret_cast<T*>(p[0]);
        for (int64_t i = 0; i < n; ++i)
          o[i] = value;
      } else {
        for (int64_t i = 0; i < n; ++i)
          *reinterpret_cast<T*>(p[0] + i * s[0]) = value;
      }
    });
  });
}

// ---- binary (element math: tensor/element_math.h) ------------------------------
// out[i] = f(a[i], b[i]); contiguous and scalar-operand fast paths.
template <class T, class R, class F> void binary_loop(const Tensor& out, const Tensor& a, const Tensor& b, F f) {
  Tensor ops[3] = {out, a, b};
  for_each(ops, 3, [f](char** p, const int64_t* s, int64_t n) {
    R* o = reinterpret_cast<R*>(p[0]);
    const T* x = reinterpret_cast<const T*>(p[1]);
    const T* y = reinterpret_cast<const T*>(p[2]);
    if (s[0] == sizeof(R) && s[1] == sizeof(T) && s[2] == sizeof(T)) {
      for (int64_t i = 0; i < n; ++i)
        o[i] = f(x[i], y[i]);
    } else if (s[0] == sizeof(R) && s[1] == sizeof(T) && s[2] == 0) {
      const T yv = *y;
      for (int64_t i = 0; i < n; ++i)
        o[i] = f(x[i], yv);
    } else if (s[0] == sizeof(R) && s[1] == 0 && s[2] == sizeof(T)) {
      const T xv = *x;
      for (int64_t i = 0; i < n; ++i)
        o[i] = f(xv, y[i]);
    } else {
      for (int64_t i = 0; i < n; ++i)
        *reinterpret_cast<R*>(p[0] + i * s[0]) =
            f(*reinterpret_cast<const T*>(p[1] + i * s[1]), *reinterpret_cast<const T*>(p[2] + i * s[2]));
    }
  });
}

// The complex dtypes' kernels: T is tg::complex<R>, the math in std::complex
// (element_math.h); the op layer passes only the ops whose def line says C.
template <class F> bool dispatch_complex(ScalarType t, F&& f) {
  return kernels::dispatch_if<is_complex>(t, std::forward<F>(f));
}

void binary_kernel(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  if (dispatch_complex(out.dtype(), [&](auto tag) {
        using T = decltype(tag);
        using R = decltype(T{}.re);
        TG_INTERNAL_ASSERT(kernels::takes_complex(op), "binary: complex operands for a real-only op");
        kernels::visit_binary(op, [&](auto o) {
          binary_loop<T, T>(out, a, b,
                            [](T x, T y) { return kernels::binary_complex_fn<decltype(o)::value, R>(x, y); });
        });
      }))
    return;
  dispatch_compute(out.dtype(), "binary", [&](auto tag) {
    using T = decltype(tag);
    kernels::visit_binary(op, [&](auto o) {
      binary_loop<T, T>(out, a, b, [](T x, T y) { return kernels::binary_fn<decltype(o)::value>(x, y); });
    });
  });
}

// out = g * act^(order)(x). The switch on (act, order) is hoisted out of the
// loop so each instance vectorises; tanh, sigmoid and silu of float take the
// vector math's kernels (tensor/cpu/vmath.h: Eigen's packet tanh and exp at
// the CPU's widest instruction set, instead of libm's scalar tanhf and expf,
// which took 59% of a CPU PINN step's time) on contiguous runs (g contiguous
// or one broadcast value).
template <class T, Activation A, int K>
void activation_grad_typed(const Tensor& out, const Tensor& g, const Tensor& x) {
  auto scalar = [](T gv, T xv) { return gv * kernels::activation_derivative<T>(A, K, xv); };
  if constexpr (std::is_same_v<T, float> &&
                (A == Activation::Tanh || A == Activation::Sigmoid || A == Activation::Silu)) {
    constexpr VAct act = A == Activation::Tanh ? VAct::Tanh : A == Activation::Sigmoid ? VAct::Sigmoid : VAct::Silu;
    const VMathKernels& vm = vmath_kernels();
    Tensor ops[3] = {out, g, x};
    for_each(
        ops, 3,
        [scalar, &vm](char** p, const int64_t* s, int64_t n) {
          if (s[0] == sizeof(T) && s[2] == sizeof(T) && (s[1] == sizeof(T) || s[1] == 0)) {
            vm.act_grad_f32(act, K, reinterpret_cast<T*>(p[0]), reinterpret_cast<const T*>(p[1]), s[1] == 0 ? 0 : 1,
                            reinterpret_cast<const T*>(p[2]), n);
            return;
          }
          for (int64_t i = 0; i < n; ++i)
            *reinterpret_cast<T*>(p[0] + i * s[0]) =
                scalar(*reinterpret_cast<const T*>(p[1] + i * s[1]), *reinterpret_cast<const T*>(p[2] + i * s[2]));
        },
        true, cpu::kCostTranscendental);
    return;
  }
  binary_loop<T, T>(out, g, x, scalar);
}

template <class T, Activation A>
void activation_grad_order(int order, const Tensor& out, const Tensor& g, const Tensor& x) {
  switch (order) {
    case 0: return activation_grad_typed<T, A, 0>(out, g, x);
    case 1: return activation_grad_typed<T, A, 1>(out, g, x);
    case 2: return activation_grad_typed<T, A, 2>(out, g, x);
    case 3: return activation_grad_typed<T, A, 3>(out, g, x);
    default: return activation_grad_typed<T, A, 4>(out, g, x);
  }
}

void activation_grad_kernel(Activation act, int order, const Tensor& out, const Tensor& g, const Tensor& x) {
  if (dispatch_complex(out.dtype(), [&](auto tag) {
        using T = decltype(tag);
        using R = decltype(T{}.re);
        binary_loop<T, T>(out, g, x, [act, order](T gv, T xv) {
          return kernels::from_math<R>(kernels::to_math(gv) *
                                       kernels::to_math(kernels::activation_derivative_complex<R>(act, order, xv)));
        });
      }))
    return;
  dispatch_compute(out.dtype(), "activation_grad", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T>) {
      switch (act) {
        case Activation::Silu: return activation_grad_order<T, Activation::Silu>(order, out, g, x);
        case Activation::Sigmoid: return activation_grad_order<T, Activation::Sigmoid>(order, out, g, x);
        case Activation::Tanh: return activation_grad_order<T, Activation::Tanh>(order, out, g, x);
        case Activation::Relu: return activation_grad_order<T, Activation::Relu>(order, out, g, x);
        case Activation::Gelu: return activation_grad_order<T, Activation::Gelu>(order, out, g, x);
      }
    } else {
      TG_INTERNAL_ASSERT(false, "activation_grad: integer dtype");
    }
  });
}

void compare_kernel(CompareOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  if (dispatch_complex(a.dtype(), [&](auto tag) {  // eq and ne only (the op layer)
        using T = decltype(tag);
        binary_loop<T, bool>(out, a, b, [op](T x, T y) { return op == CompareOp::Eq ? x == y : x != y; });
      }))
    return;
  dispatch_compute(a.dtype(), "compare", [&](auto tag) {
    using T = decltype(tag);
    binary_loop<T, bool>(out, a, b, [op](T x, T y) { return kernels::compare_apply(op, x, y); });
  });
}

// ---- unary -----------------------------------------------------------------------

// f: scalar function; v (float and double): the vector math's form used on
// contiguous runs (tensor/cpu/vmath.h), or -1 to use f there too; cost: the
// per-element cost (cpu::elementwise_grain).
template <class T, class F> void unary_loop(const Tensor& out, const Tensor& x, F f, int v = -1, int cost = 1) {
  const VMathKernels* vm = nullptr;
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>)
    if (v >= 0) vm = &vmath_kernels();
  Tensor ops[2] = {out, x};
  for_each(
      ops, 2,
      [f, v, vm](char** p, const int64_t* s, int64_t n) {
        if (s[0] == sizeof(T) && s[1] == sizeof(T)) {
          T* o = reinterpret_cast<T*>(p[0]);
          const T* a = reinterpret_cast<const T*>(p[1]);
          if constexpr (std::is_same_v<T, float>) {
            if (vm) return vm->unary_f32(VUnary(v), o, a, n);
          } else if constexpr (std::is_same_v<T, double>) {
            if (vm) return vm->unary_f64(VUnary(v), o, a, n);
          }
          for (int64_t i = 0; i < n; ++i)
            o[i] = f(a[i]);
          return;
        }
        for (int64_t i = 0; i < n; ++i)
          *reinterpret_cast<T*>(p[0] + i * s[0]) = f(*reinterpret_cast<const T*>(p[1] + i * s[1]));
      },
      true, cost);
}

// The vector math's form of an op that is one library function, used on
// contiguous runs; -1 for the others (their element loop vectorizes or
// calls the element math; sqrt too: Eigen's packet sqrt of float gives NaN
// for +inf). The special-value test checks both paths agree.
constexpr int vector_form(UnaryOp op) {
  switch (op) {
    case UnaryOp::Exp: return int(VUnary::Exp);
    case UnaryOp::Log: return int(VUnary::Log);
    case UnaryOp::Sin: return int(VUnary::Sin);
    case UnaryOp::Cos: return int(VUnary::Cos);
    case UnaryOp::Tanh: return int(VUnary::Tanh);
    case UnaryOp::Sigmoid: return int(VUnary::Sigmoid);
    case UnaryOp::Rsqrt: return int(VUnary::Rsqrt);
    case UnaryOp::Reciprocal: return int(VUnary::Reciprocal);
    default: return -1;
  }
}

void unary_kernel(UnaryOp op, const Tensor& out, const Tensor& x, const kernels::UnaryParams& prm) {
  if (dispatch_complex(out.dtype(), [&](auto tag) {
        using T = decltype(tag);
        using R = decltype(T{}.re);
        TG_INTERNAL_ASSERT(kernels::takes_complex(op), "unary: a complex input for a real-only op");
        kernels::visit_unary(op, [&](auto o) {
          unary_loop<T>(out, x, [](T z) { return kernels::unary_complex_fn<decltype(o)::value, R>(z); });
        });
      }))
    return;
  dispatch_compute(out.dtype(), "unary", [&](auto tag) {
    using T = decltype(tag);
    const kernels::UnaryArgs<T> args{T(prm.a), T(prm.b), prm.has_a, prm.has_b};
    kernels::visit_unary(op, [&](auto o) {
      constexpr UnaryOp O = decltype(o)::value;
      if constexpr (std::is_integral_v<T> && kernels::is_float_only(O)) {
        TG_INTERNAL_ASSERT(false, "float-only unary op on an integer tensor");
      } else if constexpr (std::is_integral_v<T>) {
        unary_loop<T>(out, x, [args](T a) { return kernels::unary_fn<O>(a, args); });
      } else {
        // Float-only ops (exp, tanh, erf, ...) cost several adds per element.
        unary_loop<T>(
            out, x, [args](T a) { return kernels::unary_fn<O>(a, args); }, vector_form(O),
            kernels::is_float_only(O) ? cpu::kCostTranscendental : 1);
      }
    });
  });
}

// out = a + alpha * b (add_, and add with a scale): each product rounded before
// its add, as mul then add would (the products go through a block buffer, so
// that no build contracts them into an fma); out may alias a.
void add_scaled_kernel(const Tensor& out, const Tensor& a, const Tensor& b, double alpha, int64_t ialpha) {
  dispatch_compute(out.dtype(), "add_", [&](auto tag) {
    using T = decltype(tag);
    const T s = std::is_integral<T>::value ? T(ialpha) : T(alpha);
    Tensor ops[3] = {out, a, b};
    for_each(ops, 3, [s](char** p, const int64_t* st, int64_t n) {
      constexpr int64_t kBlock = 256;
      T prod[kBlock];
      const bool dense = st[0] == sizeof(T) && st[1] == sizeof(T) && st[2] == sizeof(T);
      for (int64_t i0 = 0; i0 < n; i0 += kBlock) {
        const int64_t m = std::min(kBlock, n - i0);
        if (dense) {
          const T* x = reinterpret_cast<const T*>(p[1]) + i0;
          const T* y = reinterpret_cast<const T*>(p[2]) + i0;
          T* o = reinterpret_cast<T*>(p[0]) + i0;
          for (int64_t j = 0; j < m; ++j)
            prod[j] = kernels::binary_fn<BinaryOp::Mul>(y[j], s);
          for (int64_t j = 0; j < m; ++j)
            o[j] = kernels::binary_fn<BinaryOp::Add>(x[j], prod[j]);
          continue;
        }
        for (int64_t j = 0; j < m; ++j)
          prod[j] = kernels::binary_fn<BinaryOp::Mul>(*reinterpret_cast<const T*>(p[2] + (i0 + j) * st[2]), s);
        for (int64_t j = 0; j < m; ++j)
          *reinterpret_cast<T*>(p[0] + (i0 + j) * st[0]) =
              kernels::binary_fn<BinaryOp::Add>(*reinterpret_cast<const T*>(p[1] + (i0 + j) * st[1]), prod[j]);
      }
    });
  });
}

// ---- the engine's fused accumulation and mul backward (contiguous operands) ------
void add_n_kernel(const Tensor& out, const Tensor& a, const std::vector<Tensor>& s) {
  if (is_complex(out.dtype())) {  // componentwise: the sums of the parts
    std::vector<Tensor> parts;
    for (const Tensor& t : s)
      parts.push_back(raw::view_as_real(t));
    return add_n_kernel(raw::view_as_real(out), raw::view_as_real(a), parts);
  }
  dispatch_compute(out.dtype(), "add_n", [&](auto tag) {
    using T = decltype(tag);
    T* o = static_cast<T*>(out.data_ptr());
    const T* x = static_cast<const T*>(a.data_ptr());
    std::vector<const T*> p;
    for (const Tensor& t : s)
      p.push_back(static_cast<const T*>(t.data_ptr()));
    // Summed in order ((x + s0) + s1) + ..., one source (or two) per pass
    // over a block that stays in cache, so each pass vectorizes (a loop over
    // the sources per element did not).
    const size_t ns = p.size();
    parallel_for(out.numel(), 16384, [&](int64_t b, int64_t e) {
      T* ob = o + b;
      const int64_t m = e - b;
      const T* s0 = ns > 0 ? p[0] + b : nullptr;
      if (s0) {
        const T* xb = x + b;
        for (int64_t i = 0; i < m; ++i)
          ob[i] = xb[i] + s0[i];
      } else if (ob != x + b) {
        std::memcpy(ob, x + b, size_t(m) * sizeof(T));
      }
      size_t k = 1;
      for (; k + 1 < ns; k += 2) {
        const T* s1 = p[k] + b;
        const T* s2 = p[k + 1] + b;
        for (int64_t i = 0; i < m; ++i)
          ob[i] = ob[i] + s1[i] + s2[i];
      }
      if (k < ns) {
        const T* s1 = p[k] + b;
        for (int64_t i = 0; i < m; ++i)
          ob[i] = ob[i] + s1[i];
      }
    });
  });
}

// ---- where: moves bytes, so one instantiation per element size -------------------
template <class U> void where_typed(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  Tensor ops[4] = {out, cond, a, b};
  for_each(ops, 4, [](char** p, const int64_t* s, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      bool c = *reinterpret_cast<const bool*>(p[1] + i * s[1]);
      *reinterpret_cast<U*>(p[0] + i * s[0]) = *reinterpret_cast<const U*>(c ? p[2] + i * s[2] : p[3] + i * s[3]);
    }
  });
}

void where_kernel(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  dispatch_bytes(element_size(out.dtype()), [&](auto u) { where_typed<decltype(u)>(out, cond, a, b); });
}

}  // namespace

void register_elementwise(kernels::Backend& b) {
  b.copy = copy_kernel;
  b.fill = fill_kernel;
  b.binary = binary_kernel;
  b.add_n = add_n_kernel;
  b.add_scaled = add_scaled_kernel;
  b.compare = compare_kernel;
  b.unary = unary_kernel;
  b.where = where_kernel;
  b.activation_grad = activation_grad_kernel;
}

}  // namespace tg::cpu
