// Internal: the autograd layer's entry for every recorded op and accessor of
// the op list (ops.def), in tg::autograd::ops, with the public signature.
// Each is defined in autograd/ops/<family>.cpp (accessors in
// autograd/autograd_meta.cpp); autograd/ops/table.cpp hands them to the
// tensor layer.
#pragma once

#include <tapegrad/tensor/grid.h>
#include <tapegrad/tensor/linalg.h>
#include <tapegrad/tensor/ops.h>

namespace tg::autograd::ops {
#define TG_D(...)
#define TG_OP0(ret, name, id, form) TG_IF_AUTOGRAD_##form(ret name(const Tensor& self);)
#define TG_OP(ret, name, id, extras, args, form) TG_IF_AUTOGRAD_##form(ret name(const Tensor& self, TG_UNPAREN extras);)
#define TG_FN(ret, name, id, params, args, form) TG_IF_AUTOGRAD_##form(ret name params;)
#include <tapegrad/tensor/ops.def>
#undef TG_FN
#undef TG_OP
#undef TG_OP0
#undef TG_D
}  // namespace tg::autograd::ops

// The linear algebra family's primitives (<tapegrad/tensor/linalg.def>),
// defined in autograd/ops/linalg.cpp.
namespace tg::autograd::ops::linalg {
#define TG_LINALG_IF_P_P(...) __VA_ARGS__
#define TG_LINALG_IF_P_C(...)
#define TG_D(...)
#define TG_LINALG(ret, name, id, params, args, kind, taylor) TG_LINALG_IF_P_##kind(ret name params;)
#include <tapegrad/tensor/linalg.def>
#undef TG_LINALG
#undef TG_D
}  // namespace tg::autograd::ops::linalg

// The grid family's primitives (<tapegrad/tensor/grid.def>), defined in
// autograd/ops/grid.cpp.
namespace tg::autograd::ops::grid {
#define TG_GRID_IF_P_P(...) __VA_ARGS__
#define TG_GRID_IF_P_C(...)
#define TG_D(...)
#define TG_GRID(ret, name, id, params, args, kind, taylor) TG_GRID_IF_P_##kind(ret name params;)
#include <tapegrad/tensor/grid.def>
#undef TG_GRID
#undef TG_D
}  // namespace tg::autograd::ops::grid
