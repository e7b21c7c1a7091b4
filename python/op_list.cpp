// Not compiled: run through the C preprocessor (python/CMakeLists.txt) to
// list every op of the op lists, one line each, for python/gen_ops.py,
// which writes the Python bindings of all of them. Each line is
//   KIND | "ret" | "name" | "id" | "(params)" | "(args)" | "form"
// (TGOP0 lines have no params or args); the preprocessor expands the lists'
// nested entries (binary.def, unary.def), so the bindings follow the lists
// exactly.
#define TG_OP0(ret, name, id, form) TGOP0 | #ret | #name | #id | #form
#define TG_OP(ret, name, id, extras, args, form) TGOP | #ret | #name | #id | #extras | #args | #form
#define TG_FN(ret, name, id, params, args, form) TGFN | #ret | #name | #id | #params | #args | #form
#include <tapegrad/tensor/ops.def>
#define TG_GRID(ret, name, id, params, args, kind, taylor) TGGRID | #ret | #name | #id | #params | #args | #kind
#include <tapegrad/tensor/grid.def>
#define TG_LINALG(ret, name, id, params, args, kind, taylor) TGLINALG | #ret | #name | #id | #params | #args | #kind
#include <tapegrad/tensor/linalg.def>
