// The grid family: convolutions (1-3 spatial dims, transposed, groups,
// stride, padding, dilation), pooling, padding modes, resampling and the
// normalizations of grid models, with derivatives of every order in every
// mode, torch.nn.functional's names and semantics, Float32, Float64 and
// BFloat16, on the CPU and CUDA. The ops are listed once in
// <tapegrad/tensor/grid.def>; docs/TENSOR.md "Grid ops" gives the
// differences from PyTorch. tg::nn::functional exports them too.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <tapegrad/tensor/op_forms.h>
#include <tapegrad/tensor/tensor.h>

namespace tg {

#define TG_D(...) = __VA_ARGS__
#define TG_GRID(ret, name, id, params, args, kind, taylor) ret name params;
#include <tapegrad/tensor/grid.def>
#undef TG_GRID
#undef TG_D

// The primitives' raw (never recorded) entries.
namespace raw::grid {
#define TG_GRID_IF_P_P(...) __VA_ARGS__
#define TG_GRID_IF_P_C(...)
#define TG_D(...) = __VA_ARGS__
#define TG_GRID(ret, name, id, params, args, kind, taylor) TG_GRID_IF_P_##kind(ret name params;)
#include <tapegrad/tensor/grid.def>
#undef TG_GRID
#undef TG_D
}  // namespace raw::grid

}  // namespace tg
