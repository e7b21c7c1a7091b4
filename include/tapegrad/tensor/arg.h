// Options structs with LibTorch's chained setters beside plain fields
// (docs/GUIDE.md "Porting from LibTorch"): a field declared with TG_ARG is
// set and read as a field (`o.lr = 1e-3; double r = o.lr;`), read as
// LibTorch's getter (`o.lr()`) and set as its chained setter
// (`AdamOptions(1e-3).weight_decay(0.01)` returns the options).
#pragma once

#include <cstddef>
#include <utility>

/// Declares the option `name` of type `T` in the options struct `Owner`
/// (which must stay standard-layout: options only, no virtual functions,
/// no base with members). Its value is `value`; `Owner` initializes it
/// (a constructor's parameters, as LibTorch's positional options). The
/// field's own type is copied only with its options (`auto x = o.lr;` does
/// not compile: write `double x = o.lr;` or `auto x = o.lr();`).
#define TG_ARG(Owner, T, name) TG_ARG_BODY(Owner, T, name, )

/// TG_ARG whose chained setter also takes a `U` and stores `T{u}` (an
/// IntList option set from one integer, as LibTorch's ExpandingArray:
/// `Conv2dOptions(1, 8, 3).padding(1)`).
#define TG_ARG_OR(Owner, T, name, U) \
  TG_ARG_BODY(                       \
      Owner, T, name, Owner& operator()(U u) { return (*this)(T{u}); })

/// TG_ARG's field type, with `extra` member declarations (more setters).
#define TG_ARG_BODY(Owner, T, name, extra)                                                     \
  struct name##_arg {                                                                          \
    T value{};                                                                                 \
    name##_arg() = default;                                                                    \
    name##_arg(T v) : value(std::move(v)) {} /* NOLINT: a field's assignment */                \
    name##_arg& operator=(T v) {                                                               \
      value = std::move(v);                                                                    \
      return *this;                                                                            \
    }                                                                                          \
    operator const T&() const { return value; } /* NOLINT: read as the field */                \
    const T& operator()() const { return value; }                                              \
    Owner& operator()(T v) {                                                                   \
      value = std::move(v);                                                                    \
      return *reinterpret_cast<Owner*>(reinterpret_cast<char*>(this) - offsetof(Owner, name)); \
    }                                                                                          \
    extra                                                                                      \
                                                                                               \
        private : /* copied only with its options: auto x = o.lr would lose them */            \
                  friend Owner;                                                                \
    name##_arg(const name##_arg&) = default;                                                   \
    name##_arg& operator=(const name##_arg&) = default;                                        \
  } name
