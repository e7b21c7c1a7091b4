// The raw (non-recording) op layer: what the ops of <tapegrad/tensor/ops.h>
// run without autograd. The autograd layer's differentiable ops (in
// autograd/ops/) run the raw op and record a backward node when grad mode is
// on and an input requires grad. Raw ops never look at autograd metadata; use
// them where nothing may record (kernels, backward formulas, gradcheck).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <tapegrad/tensor/ops.h>
#include <tapegrad/tensor/tensor.h>

namespace tg::raw {

// Every op of the op list (ops.def) that is not an autograd accessor, with
// the public signature; in-place ops take and return a const handle.
#define TG_D(...) = __VA_ARGS__
#define TG_OP0(ret, name, id, form) TG_IF_RAW_##form(ret name(const Tensor& self);)
#define TG_OP(ret, name, id, extras, args, form) TG_IF_RAW_##form(ret name(const Tensor& self, TG_UNPAREN extras);)
#define TG_FN(ret, name, id, params, args, form) TG_IF_RAW_##form(ret name params;)
#include <tapegrad/tensor/ops.def>
#undef TG_FN
#undef TG_OP
#undef TG_OP0
#undef TG_D

///@{

/// sparse COO (tensor/sparse.cpp). The ops above that take sparse operands
/// (add, sub, add_, mul/div by a scalar, neg, sum, mm, matmul, transpose, t,
/// clone, detach, to) route to these; every other op rejects them with an
/// error naming the op (detail::check_defined).
/// `coalesced`: the caller knows the indices are sorted and unique.
Tensor sparse_coo_tensor(const Tensor& indices, const Tensor& values, const IntList& sizes, bool check,
                         bool coalesced = false);
Tensor sparse_indices(const Tensor& s);  ///< the parts as stored (any coalesced state)
Tensor sparse_values(const Tensor& s);
///@}
///@{

/// Int64 [nnz]: each entry's row-major position over the sparse sizes.
Tensor sparse_linear_index(const Tensor& s);
Tensor sparse_linear_index(const Tensor& indices, const IntList& sparse_sizes);
///@}
///@{

/// Int64 [n]: for each column of `indices` (Int64 [sparse_dim, n]), the
/// position of that coordinate among the entries of the coalesced tensor c,
/// or c.nnz() where c has no entry there.
Tensor sparse_positions(const Tensor& c, const Tensor& indices);
Tensor sparse_add(const Tensor& a, const Tensor& b, Scalar alpha, const char* op = "add");  ///< one of them sparse
const Tensor& sparse_add_(const Tensor& self, const Tensor& o, Scalar alpha, const char* op = "add_");
Tensor sparse_mul(const Tensor& s, Scalar c);
Tensor sparse_div(const Tensor& s, Scalar c);  ///< s / c, the values divided (true division)
/// self *= c, or self /= c (divide), in place: the values replaced, the indices kept.
const Tensor& sparse_scale_(const Tensor& self, Scalar c, bool divide, const char* op);
Tensor sparse_sum(const Tensor& s);
Tensor sparse_mm(const Tensor& s, const Tensor& dense, const char* op = "mm");
Tensor sparse_transpose(const Tensor& s, int64_t d0, int64_t d1);
Tensor sparse_clone(const Tensor& s);
Tensor sparse_detach(const Tensor& s);
Tensor sparse_to(const Tensor& s, ScalarType t);
Tensor sparse_to(const Tensor& s, Device d, bool non_blocking);
///@}

/// Number of GEMM kernel launches since start (mm, bmm, matmul, linear all
/// count each batched GEMM call once); lets tests see what trimming skips.
uint64_t gemm_calls();
uint64_t gemm_flops();  ///< 2 * m * k * n summed over the GEMMs launched

}  // namespace tg::raw
