// The autograd layer's op table (tensor/op_table.h): the tensor layer's ops
// call these entries when libtapegrad is linked.
#include "autograd/ops/ops.h"
#include "tensor/op_table.h"

extern "C" const tg::detail::OpTable* tapegrad_autograd_ops() {
  namespace ops = tg::autograd::ops;
  static const tg::detail::OpTable table = [] {
    tg::detail::OpTable t;
#define TG_OP0(ret, name, id, form) \
  TG_IF_AUTOGRAD_##form(t.id = static_cast<decltype(t.id)>(&ops::name);)
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
