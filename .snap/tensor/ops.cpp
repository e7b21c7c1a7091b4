// The public ops and op methods, one definition per entry of the op list
// (ops.def): a recorded op calls the autograd layer's entry when it is
// linked, else its raw entry (tensor/op_table.h).
#include "tensor/op_table.h"

#include <optional>

#include <tapegrad/tensor/error.h>

namespace tg {

namespace detail {
const OpTable* autograd_ops() {
  static const OpTable* table = tapegrad_autograd_ops ? tapegrad_autograd_ops() : nullptr;
  return table;
}
}  // namespace detail

// ---- complex coverage (ops.def's TG_COMPLEX lines) ----
// takes(tag{}, 0): whether the op of that id takes complex operands (the
// int overload exists only for ops declared so).
namespace complex_tags {
#define TG_OP0(ret, name, id, form) \
  struct id {};                     \
  constexpr bool takes(id, long) { return false; }
#define TG_OP(ret, name, id, extras, args, form) TG_OP0(ret, name, id, form)
#define TG_FN(ret, name, id, params, args, form) TG_OP0(ret, name, id, form)
#define TG_COMPLEX(id) \
  constexpr bool takes(id, int) { return true; }
#include <tapegrad/tensor/ops.def>
#undef TG_COMPLEX
#undef TG_FN
#undef TG_OP
#undef TG_OP0
}  // namespace complex_tags

namespace detail {
namespace {
// A complex operand of an op that does not take one is refused naming the
// op. (A recorded op whose result would be complex is refused by the
// autograd layer: autograd/ops/record.h's finish.)
struct ComplexGuard {
  const char* op;
  bool takes;
  ScalarType dtype = kFloat32;
  bool found = false;

  void see(ScalarType t) {
    if (is_complex(t)) found = true, dtype = t;
  }
  void see(const Tensor& t) {
    if (t.defined()) see(t.dtype());
  }
  void see(const std::vector<Tensor>& v) {
    for (const Tensor& t : v)
      see(t);
  }
  void see(const std::optional<Tensor>& t) {
    if (t) see(*t);
  }
  void see(const std::optional<ScalarType>& t) {
    if (t) see(*t);
  }
  template <class T> void see(const T&) {}
  template <class... A> void check(const A&... a) {
    (see(a), ...);
    TG_CHECK(!found || takes, op, ": no complex support yet (a ", dtype,
             " operand); take view_as_real(t), or real(t) and imag(t), and compute on the parts");
  }
};
}  // namespace
}  // namespace detail

#define TG_COMPLEX_GUARD(name, id, args) \
  detail::ComplexGuard{#name, complex_tags::takes(complex_tags::id{}, 0)}.check args;
#define TG_CALL_REC(name, id, args)                                                     \
  {                                                                                     \
    TG_COMPLEX_GUARD(name, id, args)                                                    \
    if (const detail::OpTable* table_ = detail::autograd_ops()) return table_->id args; \
    return raw::name args;                                                              \
  }
#define TG_CALL_RAW(name, id, args)  \
  {                                  \
    TG_COMPLEX_GUARD(name, id, args) \
    return raw::name args;           \
  }
#define TG_CALL_ACC(name, id, args)                                                     \
  {                                                                                     \
    if (const detail::OpTable* table_ = detail::autograd_ops()) return table_->id args; \
    return no_autograd::name args;                                                      \
  }
#define TG_CALL_FM TG_CALL_REC
#define TG_CALL_F TG_CALL_REC
#define TG_CALL_M TG_CALL_REC
#define TG_CALL_IM TG_CALL_REC
#define TG_CALL_FMN TG_CALL_RAW
#define TG_CALL_FN TG_CALL_RAW
#define TG_CALL_MN TG_CALL_RAW
#define TG_CALL_MA TG_CALL_ACC

#define TG_D(...)
#define TG_DEFINE(ret, name, id, params, mparams, args, form)       \
  TG_IF_FREE_##form(ret name params TG_CALL_##form(name, id, args)) \
      TG_IF_METHOD_##form(ret Tensor::name mparams const {          \
        const Tensor& self = *this;                                 \
        TG_CALL_##form(name, id, args)                              \
      })
#define TG_OP0(ret, name, id, form) TG_DEFINE(ret, name, id, (const Tensor& self), (), (self), form)
#define TG_OP(ret, name, id, extras, args, form) \
  TG_DEFINE(ret, name, id, (const Tensor& self, TG_UNPAREN extras), extras, (self, TG_UNPAREN args), form)
#define TG_FN(ret, name, id, params, args, form) TG_IF_FREE_##form(ret name params TG_CALL_##form(name, id, args))
#include <tapegrad/tensor/ops.def>
#undef TG_FN
#undef TG_OP
#undef TG_OP0
#undef TG_DEFINE
#undef TG_D

namespace detail {
const std::vector<OpInfo>& op_list() {
  static const std::vector<OpInfo> list = {
#define TG_OP0(ret, name, id, form) {#name, #id, false TG_IF_RECORDED_##form(|| true)},
#define TG_OP(ret, name, id, extras, args, form) TG_OP0(ret, name, id, form)
#define TG_FN(ret, name, id, params, args, form) TG_OP0(ret, name, id, form)
#include <tapegrad/tensor/ops.def>
#undef TG_FN
#undef TG_OP
#undef TG_OP0
  // The linear algebra family: every op, primitive or composite, is
  // differentiable and has a test-table entry ("linalg.<id>").
#define TG_LINALG(ret, name, id, params, args, kind, taylor) {"linalg." #name, "linalg." #id, true},
#include <tapegrad/tensor/linalg.def>
#undef TG_LINALG
  // The grid family likewise (its own ids).
#define TG_GRID(ret, name, id, params, args, kind, taylor) {#name, #id, true},
#include <tapegrad/tensor/grid.def>
#undef TG_GRID
  };
  return list;
}
}  // namespace detail

}  // namespace tg
