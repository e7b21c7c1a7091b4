// CPU elementwise kernels: copy/convert, fill, binary, compare, unary, where.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <Eigen/Core>

#include "tensor/element_math.h"
#include "tensor/cpu/cpu_kernels.h"
#include "tensor/cpu/loops.h"

namespace tg::cpu {
namespace {

using kernels::BinaryOp;
using kernels::CompareOp;
using kernels::UnaryOp;

// ---- conversions ---------------------------------------------------------------
template <class T> constexpr bool is_half_v = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

template <class D, class S> inline D convert(S s) {
  if constexpr (is_half_v<S>) {
    return convert<D>(float(s));
  } else if constexpr (is_half_v<D>) {
    return D(float(s));
  } else if constexpr (std::is_same_v<D, bool>) {
    return s != S(0);
  } else {
    return static_cast<D>(s);
  }
}

template <class F> void dispatch_all(ScalarType t, F&& f) {
  switch (t) {
    case ScalarType::Float32: f(float{}); return;
    case ScalarType::Float64: f(double{}); return;
    case ScalarType::BFloat16: f(BFloat16{}); return;
    case ScalarType::Float16: f(Half{}); return;
    case ScalarType::Int64: f(int64_t{}); return;
    case ScalarType::Bool: f(bool{}); return;
  }
}

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

void binary_kernel(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  dispatch_compute(out.dtype(), "binary", [&](auto tag) {
    using T = decltype(tag);
    kernels::visit_binary(op, [&](auto o) {
      binary_loop<T, T>(out, a, b, [](T x, T y) { return kernels::binary_fn<decltype(o)::value>(x, y); });
    });
  });
}

// out = g * act^(order)(x). The switch on (act, order) is hoisted out of the
// loop so each instance vectorises.
template <class T, Activation A, int K>
void activation_grad_typed(const Tensor& out, const Tensor& g, const Tensor& x) {
  binary_loop<T, T>(out, g, x, [](T gv, T xv) { return gv * kernels::activation_derivative<T>(A, K, xv); });
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
  dispatch_compute(out.dtype(), "activation_grad", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T>) {
      switch (act) {
        case Activation::Silu: return activation_grad_order<T, Activation::Silu>(order, out, g, x);
        case Activation::Sigmoid: return activation_grad_order<T, Activation::Sigmoid>(order, out, g, x);
        case Activation::Tanh: return activation_grad_order<T, Activation::Tanh>(order, out, g, x);
        case Activation::Relu: return activation_grad_order<T, Activation::Relu>(order, out, g, x);
      }
    } else {
      TG_INTERNAL_ASSERT(false, "activation_grad: integer dtype");
    }
  });
}

void compare_kernel(CompareOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  dispatch_compute(a.dtype(), "compare", [&](auto tag) {
    using T = decltype(tag);
    binary_loop<T, bool>(out, a, b, [op](T x, T y) { return kernels::compare_apply(op, x, y); });
  });
}

// ---- unary -----------------------------------------------------------------------
template <class T> using ArrayMap = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <class T> using ConstArrayMap = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

// f: scalar function; v: Eigen array expression used on contiguous runs
// (vectorized exp/log/tanh/...), or nullptr_t to use f there too.
template <class T, class F, class V> void unary_loop(const Tensor& out, const Tensor& x, F f, V v) {
  Tensor ops[2] = {out, x};
  for_each(ops, 2, [f, v](char** p, const int64_t* s, int64_t n) {
    if (s[0] == sizeof(T) && s[1] == sizeof(T)) {
      T* o = reinterpret_cast<T*>(p[0]);
      const T* a = reinterpret_cast<const T*>(p[1]);
      if constexpr (!std::is_same_v<V, std::nullptr_t>) {
        ArrayMap<T>(o, n) = v(ConstArrayMap<T>(a, n));
      } else {
        for (int64_t i = 0; i < n; ++i)
          o[i] = f(a[i]);
      }
      return;
    }
    for (int64_t i = 0; i < n; ++i)
      *reinterpret_cast<T*>(p[0] + i * s[0]) = f(*reinterpret_cast<const T*>(p[1] + i * s[1]));
  });
}

// Eigen's vectorized form of an op that is one library function, used on
// contiguous runs; nullptr for the others (their element loop vectorizes or
// calls the element math). The special-value test checks both paths agree.
template <UnaryOp Op> auto eigen_form() {
  if constexpr (Op == UnaryOp::Exp) return [](const auto& a) { return a.exp(); };
  else if constexpr (Op == UnaryOp::Log) return [](const auto& a) { return a.log(); };
  else if constexpr (Op == UnaryOp::Sin) return [](const auto& a) { return a.sin(); };
  else if constexpr (Op == UnaryOp::Cos) return [](const auto& a) { return a.cos(); };
  else if constexpr (Op == UnaryOp::Tanh) return [](const auto& a) { return a.tanh(); };
  else if constexpr (Op == UnaryOp::Sigmoid) return [](const auto& a) { return a.logistic(); };
  else if constexpr (Op == UnaryOp::Rsqrt) return [](const auto& a) { return a.rsqrt(); };
  else if constexpr (Op == UnaryOp::Reciprocal) return [](const auto& a) { return a.inverse(); };
  else return nullptr;  // sqrt too: Eigen's packet sqrt of float gives NaN for +inf
}

void unary_kernel(UnaryOp op, const Tensor& out, const Tensor& x, const kernels::UnaryParams& prm) {
  dispatch_compute(out.dtype(), "unary", [&](auto tag) {
    using T = decltype(tag);
    const kernels::UnaryArgs<T> args{T(prm.a), T(prm.b), prm.has_a, prm.has_b};
    kernels::visit_unary(op, [&](auto o) {
      constexpr UnaryOp O = decltype(o)::value;
      if constexpr (std::is_integral_v<T> && kernels::is_float_only(O)) {
        TG_INTERNAL_ASSERT(false, "float-only unary op on an integer tensor");
      } else if constexpr (std::is_integral_v<T>) {
        unary_loop<T>(
            out, x, [args](T a) { return kernels::unary_fn<O>(a, args); }, nullptr);
      } else {
        unary_loop<T>(
            out, x, [args](T a) { return kernels::unary_fn<O>(a, args); }, eigen_form<O>());
      }
    });
  });
}

// ---- the engine's fused accumulation and mul backward (contiguous operands) ------
void add_n_kernel(const Tensor& out, const Tensor& a, const std::vector<Tensor>& s) {
  dispatch_compute(out.dtype(), "add_n", [&](auto tag) {
    using T = decltype(tag);
    T* o = static_cast<T*>(out.data_ptr());
    const T* x = static_cast<const T*>(a.data_ptr());
    std::vector<const T*> p;
    for (const Tensor& t : s)
      p.push_back(static_cast<const T*>(t.data_ptr()));
    parallel_for(out.numel(), 16384, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        T acc = x[i];
        for (const T* q : p)
          acc = acc + q[i];
        o[i] = acc;
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
  b.compare = compare_kernel;
  b.unary = unary_kernel;
  b.where = where_kernel;
  b.activation_grad = activation_grad_kernel;
}

}  // namespace tg::cpu
