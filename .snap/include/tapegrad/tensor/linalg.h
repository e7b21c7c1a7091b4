// tg::linalg: linear algebra with derivatives of every order (torch.linalg's
// names and semantics), batched over leading dims, Float32 and Float64, on
// the CPU (Eigen) and CUDA (cuSOLVER, cuBLAS). The ops are listed once in
// <tapegrad/tensor/linalg.def>; docs/TENSOR.md "Linear algebra" gives the
// differences from PyTorch (pivots and info are Int64; lu_factor is square
// only). Multi-output ops return std::tuple (structured bindings:
// `auto [L, info] = tg::linalg::cholesky_ex(A);`); a gradient may flow from
// any subset of their outputs.
#pragma once

#include <optional>
#include <string>
#include <tuple>

#include <tapegrad/tensor/op_forms.h>
#include <tapegrad/tensor/tensor.h>

namespace tg {

/// Three results (lu_factor_ex: LU, pivots, info; svd: U, S, Vh).
using TensorTriple = std::tuple<Tensor, Tensor, Tensor>;
/// Four results (lstsq: solution, residuals, rank, singular values).
using TensorQuad = std::tuple<Tensor, Tensor, Tensor, Tensor>;

namespace linalg {
#define TG_D(...) = __VA_ARGS__
#define TG_LINALG(ret, name, id, params, args, kind, taylor) ret name params;
#include <tapegrad/tensor/linalg.def>
#undef TG_LINALG
#undef TG_D
}  // namespace linalg

// The primitives' raw (never recorded) entries.
namespace raw::linalg {
#define TG_LINALG_IF_P_P(...) __VA_ARGS__
#define TG_LINALG_IF_P_C(...)
#define TG_D(...) = __VA_ARGS__
#define TG_LINALG(ret, name, id, params, args, kind, taylor) TG_LINALG_IF_P_##kind(ret name params;)
#include <tapegrad/tensor/linalg.def>
#undef TG_LINALG
#undef TG_D
}  // namespace raw::linalg

}  // namespace tg
