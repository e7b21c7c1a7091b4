// Internal: the autograd layer's entry for every recorded op and accessor of
// the op list (ops.def), in tg::autograd::ops, with the public signature.
// Each is defined in autograd/ops/<family>.cpp (accessors in
// autograd/autograd_meta.cpp); autograd/ops/table.cpp hands them to the
// tensor layer.
#pragma once

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
