// Internal: the seam between the tensor layer and the autograd layer.
//
// The tensor layer defines every public op and op method (tensor/ops.cpp,
// generated from ops.def). Each asks the autograd layer's table for the op's
// differentiable entry and calls it; without the autograd layer (a program
// that links tapegrad::tensor alone) the table is absent and the op runs its
// raw entry (accessors answer as for a tensor that never required grad).
//
// The table is found at link time, not registered: tapegrad_autograd_ops()
// is a weak reference here and is defined by libtapegrad_autograd
// (autograd/ops/table.cpp). Every target that links tapegrad::tapegrad
// compiles cmake/autograd_anchor.cpp (an interface source), whose strong
// reference keeps that library in --as-needed shared links and the table's
// object in static links.
#pragma once

#include <initializer_list>
#include <string>
#include <vector>

#include <tapegrad/tensor/grid.h>
#include <tapegrad/tensor/linalg.h>
#include <tapegrad/tensor/ops.h>
#include <tapegrad/tensor/raw.h>

namespace tg::detail {

// Signatures of the table's slots: one function type per op id.
namespace op_sig {
#define TG_D(...)
#define TG_OP0(ret, name, id, form) TG_IF_AUTOGRAD_##form(ret id(const Tensor& self);)
#define TG_OP(ret, name, id, extras, args, form) TG_IF_AUTOGRAD_##form(ret id(const Tensor& self, TG_UNPAREN extras);)
#define TG_FN(ret, name, id, params, args, form) TG_IF_AUTOGRAD_##form(ret id params;)
#include <tapegrad/tensor/ops.def>
#undef TG_FN
#undef TG_OP
#undef TG_OP0
#undef TG_D
}  // namespace op_sig

struct OpTable {
#define TG_OP0(ret, name, id, form) TG_IF_AUTOGRAD_##form(decltype(&op_sig::id) id = nullptr;)
#define TG_OP(ret, name, id, extras, args, form) TG_OP0(ret, name, id, form)
#define TG_FN(ret, name, id, params, args, form) TG_OP0(ret, name, id, form)
#include <tapegrad/tensor/ops.def>
#undef TG_FN
#undef TG_OP
#undef TG_OP0
};

// The autograd layer's table, or nullptr when it is not linked.
const OpTable* autograd_ops();

// The linear algebra family's table (<tapegrad/tensor/linalg.def>): a slot per
// primitive, and the Taylor-coverage guard the composites declared `X` call
// (throws at `op` when a Taylor level of order >= 2 is active and an input
// carries coefficients). Found like OpTable, through
// tapegrad_autograd_linalg_ops().
namespace linalg_sig {
#define TG_LINALG_IF_P_P(...) __VA_ARGS__
#define TG_LINALG_IF_P_C(...)
#define TG_D(...)
#define TG_LINALG(ret, name, id, params, args, kind, taylor) TG_LINALG_IF_P_##kind(ret id params;)
#include <tapegrad/tensor/linalg.def>
#undef TG_LINALG
#undef TG_D
}  // namespace linalg_sig
struct LinalgOpTable {
#define TG_LINALG(ret, name, id, params, args, kind, taylor) \
  TG_LINALG_IF_P_##kind(decltype(&linalg_sig::id) id = nullptr;)
#include <tapegrad/tensor/linalg.def>
#undef TG_LINALG
  void (*no_taylor_rule)(const char* op, std::initializer_list<const Tensor*> inputs) = nullptr;
};
const LinalgOpTable* autograd_linalg_ops();

// The grid family's table (<tapegrad/tensor/grid.def>): a slot per
// primitive, found through tapegrad_autograd_grid_ops().
namespace grid_sig {
#define TG_GRID_IF_P_P(...) __VA_ARGS__
#define TG_GRID_IF_P_C(...)
#define TG_D(...)
#define TG_GRID(ret, name, id, params, args, kind, taylor) TG_GRID_IF_P_##kind(ret id params;)
#include <tapegrad/tensor/grid.def>
#undef TG_GRID
#undef TG_D
}  // namespace grid_sig
struct GridOpTable {
#define TG_GRID(ret, name, id, params, args, kind, taylor) TG_GRID_IF_P_##kind(decltype(&grid_sig::id) id = nullptr;)
#include <tapegrad/tensor/grid.def>
#undef TG_GRID
};
const GridOpTable* autograd_grid_ops();

// One row per op of the list: its name, its id (unique per overload) and
// whether autograd records it (so it needs a backward formula and an entry
// in the gradient test table).
struct OpInfo {
  const char* name;  // linalg ops: "linalg.<name>"
  const char* id;
  bool recorded;
};
const std::vector<OpInfo>& op_list();

}  // namespace tg::detail

// What the autograd accessors answer without the autograd layer
// (tensor/no_autograd.cpp).
namespace tg::no_autograd {
#define TG_D(...)
#define TG_OP0(ret, name, id, form) TG_IF_ACCESSOR_##form(ret name(const Tensor& self);)
#define TG_OP(ret, name, id, extras, args, form) TG_IF_ACCESSOR_##form(ret name(const Tensor& self, TG_UNPAREN extras);)
#define TG_FN(...)
#include <tapegrad/tensor/ops.def>
#undef TG_FN
#undef TG_OP
#undef TG_OP0
#undef TG_D
}  // namespace tg::no_autograd

extern "C" const tg::detail::OpTable* tapegrad_autograd_ops() __attribute__((weak));
extern "C" const tg::detail::LinalgOpTable* tapegrad_autograd_linalg_ops() __attribute__((weak));
extern "C" const tg::detail::GridOpTable* tapegrad_autograd_grid_ops() __attribute__((weak));
