// The autograd layer's op table (tensor/op_table.h): the tensor layer's ops
// call these entries when libtapegrad is linked. Each recorded op's entry is
// wrapped by a forward-mode check: inside a dual level, an op that sees a
// tangent on an input and leaves none on its floating-point output has no
// tangent rule yet, and says so instead of dropping the tangent (a wrong,
// zero derivative).
#include <cstring>
#include <tuple>
#include <vector>
#include <string>
#include <string_view>

#include "autograd/ops/ops.h"
#include "autograd/thread_state.h"
#include "tensor/op_table.h"

#include <tapegrad/autograd/autograd_meta.h>
#include <tapegrad/autograd/forward_ad.h>
#include <tapegrad/tensor/error.h>

namespace tg {
namespace {

namespace fad = autograd::forward_ad;

bool has_tangent(const Tensor& t) { return autograd::impl::has_fw_grad(t); }
bool has_tangent(const std::vector<Tensor>& ts) {
  for (const Tensor& t : ts)
    if (has_tangent(t)) return true;
  return false;
}
template <class T> bool has_tangent(const T&) { return false; }

bool output_ok(const Tensor& o) { return !o.defined() || !is_differentiable(o.dtype()) || has_tangent(o); }
template <class T> bool output_ok(const T&) { return true; }
// Several outputs: some floating output carries a tangent (or none is
// floating). Outputs without a derivative (slogdet's sign) carry none.
bool floating(const Tensor& o) { return o.defined() && is_differentiable(o.dtype()); }
template <class... T> bool output_ok(const std::tuple<T...>& t) {
  return std::apply([](const auto&... o) { return !(floating(o) || ...) || ((floating(o) && has_tangent(o)) || ...); },
                    t);
}

// The Taylor-coverage guard (LinalgOpTable::no_taylor_rule, and the ops.def
// entries declared TG_TAYLOR(id, X)): inside a Taylor level of order >= 2,
// an op without a Taylor rule whose input carries coefficients throws at
// itself (a tangent rule alone would give wrong higher coefficients).
void no_taylor_rule(const char* op, std::initializer_list<const Tensor*> inputs) {
  const auto* l = fad::detail::current_state().taylor;
  if (!l || l->order < 2) return;
  for (const Tensor* t : inputs)
    TG_CHECK(!t->defined() || !has_tangent(*t), op, ": no Taylor-mode rule (Taylor level of order ", l->order,
             "): its tangent rule gives only first-order coefficients. Compute this step outside the Taylor level, "
             "or nest forward or reverse mode for its higher derivatives (docs/AUTOGRAD.md \"Taylor mode\")");
}
template <class T> void push_tensor(std::vector<const Tensor*>&, const T&) {}
void push_tensor(std::vector<const Tensor*>& v, const Tensor& t) { v.push_back(&t); }
template <class... A> void guard_taylor(const char* op, const A&... a) {
  std::vector<const Tensor*> ts;
  (push_tensor(ts, a), ...);
  for (const Tensor* t : ts)
    no_taylor_rule(op, {t});
}

// Ops called inside an op (composites) are checked through the outer one
// (the thread's op depth).
int& fw_depth() { return autograd::detail::thread_state().op_depth; }

// Ops whose tensor operands after the first only give a shape.
bool shape_only_operands(const char* op) { return std::strcmp(op, "expand_as") == 0; }
// Ops whose output carries no tangent by definition: detach drops it (as
// PyTorch; docs/AUTOGRAD.md), so in a dual or Taylor level it is not an op
// without a rule.
bool drops_tangent(const char* op) { return std::strcmp(op, "detach") == 0; }

template <class F, class In0, class... In>
decltype(auto) fw_checked(const char* op, F&& f, const In0& in0, const In&... in) {
  using R = decltype(f());
  if (fw_depth() > 0 || !fad::is_active() || !(has_tangent(in0) || (has_tangent(in) || ...))) return f();
  if ((shape_only_operands(op) && !has_tangent(in0)) || drops_tangent(op)) return f();
  struct Depth {
    Depth() { ++fw_depth(); }
    ~Depth() { --fw_depth(); }
  } depth;
  R out = f();
  TG_CHECK(output_ok(out), op,
           ": no forward-mode (tangent) rule yet; an input carries a tangent "
           "(forward_ad::make_dual) and its derivative would be lost. Compute this step outside the dual "
           "level, or use reverse mode (grad, vjp) for it");
  return out;
}

// The ops that ops.def declares without a Taylor rule (TG_TAYLOR(id, X)
// under the entry, which comes after it: hence this first pass). Their
// entries guard a Taylor level of order >= 2 before anything runs; `S` (a
// sparse input carries no coefficients) needs no guard.
constexpr std::string_view kNoTaylorRule[] = {
#define TG_OP0(...)
#define TG_OP(...)
#define TG_FN(...)
#define TG_TAYLOR_ID_X(id) #id,
#define TG_TAYLOR_ID_S(id)
#define TG_TAYLOR(id, coverage) TG_TAYLOR_ID_##coverage(id)
#include <tapegrad/tensor/ops.def>
#undef TG_TAYLOR
#undef TG_TAYLOR_ID_S
#undef TG_TAYLOR_ID_X
#undef TG_FN
#undef TG_OP
#undef TG_OP0
    ""};
constexpr bool declared_without_taylor_rule(std::string_view id) {
  for (std::string_view s : kNoTaylorRule)
    if (s == id) return true;
  return false;
}

namespace ops = autograd::ops;
#define TG_D(...)
#define TG_OP0(ret, name, id, form)                                             \
  TG_IF_RECORDED_##form(ret fw_##id(const Tensor& self) {                       \
    if constexpr (declared_without_taylor_rule(#id)) guard_taylor(#name, self); \
    return fw_checked(                                                          \
        #name, [&]() -> ret { return ops::name(self); }, self);                 \
  })
#define TG_OP(ret, name, id, extras, args, form)                                                  \
  TG_IF_RECORDED_##form(ret fw_##id(const Tensor& self, TG_UNPAREN extras) {                      \
    if constexpr (declared_without_taylor_rule(#id)) guard_taylor(#name, self, TG_UNPAREN args);  \
    return fw_checked(                                                                            \
        #name, [&]() -> ret { return ops::name(self, TG_UNPAREN args); }, self, TG_UNPAREN args); \
  })
#define TG_FN(ret, name, id, params, args, form)                                           \
  TG_IF_RECORDED_##form(ret fw_##id params {                                               \
    if constexpr (declared_without_taylor_rule(#id)) guard_taylor(#name, TG_UNPAREN args); \
    return fw_checked(                                                                     \
        #name, [&]() -> ret { return ops::name(TG_UNPAREN args); }, TG_UNPAREN args);      \
  })
#include <tapegrad/tensor/ops.def>
#undef TG_FN
#undef TG_OP
#undef TG_OP0
#undef TG_D

// The linear algebra primitives: the forward-mode check, and the Taylor
// guard where the op list declares no Taylor rule (`X`).
#define TG_LINALG_GUARD_T(...)
#define TG_LINALG_GUARD_A(...)
#define TG_LINALG_GUARD_X(op, ...) guard_taylor(op, __VA_ARGS__);
#define TG_LINALG_IF_P_P(...) __VA_ARGS__
#define TG_LINALG_IF_P_C(...)
#define TG_D(...)
#define TG_LINALG(ret, name, id, params, args, kind, taylor)                                \
  TG_LINALG_IF_P_##kind(ret linalg_##id params {                                            \
    TG_LINALG_GUARD_##taylor("linalg." #name, TG_UNPAREN args) return fw_checked(           \
        "linalg." #name, [&]() -> ret { return ops::linalg::name args; }, TG_UNPAREN args); \
  })
#include <tapegrad/tensor/linalg.def>
#undef TG_LINALG
#undef TG_D

// The grid primitives: the forward-mode check (each has a tangent and a
// Taylor rule: grid.def's column is T throughout).
#define TG_GRID_IF_P_P(...) __VA_ARGS__
#define TG_GRID_IF_P_C(...)
#define TG_D(...)
#define TG_GRID(ret, name, id, params, args, kind, taylor)                      \
  TG_GRID_IF_P_##kind(ret grid_##id params {                                    \
    return fw_checked(                                                          \
        #name, [&]() -> ret { return ops::grid::name args; }, TG_UNPAREN args); \
  })
#include <tapegrad/tensor/grid.def>
#undef TG_GRID
#undef TG_D

}  // namespace
}  // namespace tg

extern "C" const tg::detail::GridOpTable* tapegrad_autograd_grid_ops() {
  static const tg::detail::GridOpTable table = [] {
    tg::detail::GridOpTable t;
#define TG_GRID(ret, name, id, params, args, kind, taylor) TG_GRID_IF_P_##kind(t.id = &tg::grid_##id;)
#include <tapegrad/tensor/grid.def>
#undef TG_GRID
    return t;
  }();
  return &table;
}

extern "C" const tg::detail::LinalgOpTable* tapegrad_autograd_linalg_ops() {
  static const tg::detail::LinalgOpTable table = [] {
    tg::detail::LinalgOpTable t;
#define TG_LINALG(ret, name, id, params, args, kind, taylor) TG_LINALG_IF_P_##kind(t.id = &tg::linalg_##id;)
#include <tapegrad/tensor/linalg.def>
#undef TG_LINALG
    t.no_taylor_rule = &tg::no_taylor_rule;
    return t;
  }();
  return &table;
}

extern "C" const tg::detail::OpTable* tapegrad_autograd_ops() {
  namespace ops = tg::autograd::ops;
  using namespace tg;
  static const tg::detail::OpTable table = [] {
    tg::detail::OpTable t;
#define TG_OP0(ret, name, id, form) \
  TG_IF_ACCESSOR_##form(t.id = static_cast<decltype(t.id)>(&ops::name);) TG_IF_RECORDED_##form(t.id = &fw_##id;)
#define TG_OP(ret, name, id, extras, args, form) TG_OP0(ret, name, id, form)
#define TG_FN(ret, name, id, params, args, form) TG_OP0(ret, name, id, form)
#include <tapegrad/tensor/ops.def>
#undef TG_FN
#undef TG_OP
#undef TG_OP0
    return t;
  }();
  return &table;
}
