// The raw (non-recording) op layer. Every public op of <tapegrad/tensor/ops.h>
// that is differentiable is defined in autograd/ops/ as: run the raw op here,
// then record a backward node when grad mode is on and an input requires grad.
// Raw ops never look at autograd metadata; they are internal to the library
// (kernels, backward formulas that must not record, gradcheck).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <tapegrad/tensor/ops.h>
#include <tapegrad/tensor/tensor.h>

namespace tg::raw {

// elementwise
Tensor add(const Tensor& a, const Tensor& b, Scalar alpha = 1);
Tensor sub(const Tensor& a, const Tensor& b, Scalar alpha = 1);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, Scalar b);
Tensor sub(const Tensor& a, Scalar b);
Tensor mul(const Tensor& a, Scalar b);
Tensor div(const Tensor& a, Scalar b);
Tensor pow(const Tensor& a, Scalar exponent);
Tensor pow(Scalar base, const Tensor& exponent);
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor silu(const Tensor& x);
Tensor activation_grad(const Tensor& g, const Tensor& x, Activation act, int order);
Tensor erf(const Tensor& x);
Tensor gelu(const Tensor& x, const std::string& approximate);
Tensor softplus(const Tensor& x, double beta, double threshold);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor sign(const Tensor& x);
Tensor square(const Tensor& x);
Tensor reciprocal(const Tensor& x);
Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, Scalar b);
Tensor where(const Tensor& cond, Scalar a, const Tensor& b);

// in place (bump the version counter)
Tensor& add_(Tensor& self, const Tensor& o, Scalar alpha = 1);
Tensor& add_(Tensor& self, Scalar s);
Tensor& sub_(Tensor& self, const Tensor& o, Scalar alpha = 1);
Tensor& sub_(Tensor& self, Scalar s);
Tensor& mul_(Tensor& self, const Tensor& o);
Tensor& mul_(Tensor& self, Scalar s);
Tensor& div_(Tensor& self, const Tensor& o);
Tensor& div_(Tensor& self, Scalar s);
Tensor& zero_(Tensor& self);
Tensor& fill_(Tensor& self, Scalar s);
Tensor& copy_(Tensor& self, const Tensor& src, bool non_blocking = false);

// reductions
Tensor sum(const Tensor& x);
Tensor sum(const Tensor& x, const IntList& dims, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, const IntList& dims, bool keepdim = false);
Tensor amax(const Tensor& x);
Tensor amax(const Tensor& x, const IntList& dims, bool keepdim = false);
Tensor amin(const Tensor& x);
Tensor amin(const Tensor& x, const IntList& dims, bool keepdim = false);

// linear algebra
Tensor mm(const Tensor& a, const Tensor& b);
Tensor bmm(const Tensor& a, const Tensor& b);
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b = {});

// joining and indexing
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);

// views and conversions
Tensor view(const Tensor& self, const IntList& sizes);
Tensor reshape(const Tensor& self, const IntList& sizes);
Tensor as_strided(const Tensor& self, const IntList& sizes, const IntList& strides,
                  std::optional<int64_t> offset = std::nullopt);
Tensor transpose(const Tensor& self, int64_t d0, int64_t d1);
Tensor t(const Tensor& self);
Tensor permute(const Tensor& self, const IntList& dims);
Tensor select(const Tensor& self, int64_t dim, int64_t index);
Tensor slice(const Tensor& self, int64_t dim, std::optional<int64_t> start = std::nullopt,
             std::optional<int64_t> end = std::nullopt, int64_t step = 1);
Tensor narrow(const Tensor& self, int64_t dim, int64_t start, int64_t length);
Tensor unsqueeze(const Tensor& self, int64_t dim);
Tensor squeeze(const Tensor& self);
Tensor squeeze(const Tensor& self, int64_t dim);
Tensor expand(const Tensor& self, const IntList& sizes);
Tensor expand_as(const Tensor& self, const Tensor& other);
Tensor flatten(const Tensor& self, int64_t start_dim = 0, int64_t end_dim = -1);
Tensor contiguous(const Tensor& self);
Tensor clone(const Tensor& self);
Tensor detach(const Tensor& self);
Tensor to(const Tensor& self, ScalarType t);
Tensor to(const Tensor& self, Device d, bool non_blocking = false);
Tensor to(const Tensor& self, Device d, ScalarType t);
Tensor pin_memory(const Tensor& self);

// sparse COO (tensor/sparse.cpp). The ops above that take sparse operands
// (add, sub, add_, mul/div by a scalar, neg, sum, mm, matmul, transpose, t,
// clone, detach, to) route to these; every other op rejects them with an
// error naming the op (detail::check_defined).
// `coalesced`: the caller knows the indices are sorted and unique.
Tensor sparse_coo_tensor(const Tensor& indices, const Tensor& values, const IntList& sizes,
                         bool check = true, bool coalesced = false);
Tensor coalesce(const Tensor& s);
Tensor to_dense(const Tensor& s);
Tensor sparse_indices(const Tensor& s);  // the parts as stored (any coalesced state)
Tensor sparse_values(const Tensor& s);
// Int64 [nnz]: each entry's row-major position over the sparse sizes.
Tensor sparse_linear_index(const Tensor& s);
Tensor sparse_linear_index(const Tensor& indices, const IntList& sparse_sizes);
// Int64 [n]: for each column of `indices` (Int64 [sparse_dim, n]), the
// position of that coordinate among the entries of the coalesced tensor c,
// or c.nnz() where c has no entry there.
Tensor sparse_positions(const Tensor& c, const Tensor& indices);
Tensor sparse_add(const Tensor& a, const Tensor& b, Scalar alpha, const char* op = "add");  // one of them sparse
Tensor& sparse_add_(Tensor& self, const Tensor& o, Scalar alpha);
Tensor sparse_mul(const Tensor& s, Scalar c);
Tensor sparse_sum(const Tensor& s);
Tensor sparse_mm(const Tensor& s, const Tensor& dense, const char* op = "mm");
Tensor sparse_transpose(const Tensor& s, int64_t d0, int64_t d1);
Tensor sparse_clone(const Tensor& s);
Tensor sparse_detach(const Tensor& s);
Tensor sparse_to(const Tensor& s, ScalarType t);
Tensor sparse_to(const Tensor& s, Device d, bool non_blocking);

// Number of GEMM kernel launches since start (mm, bmm, matmul, linear all
// count each batched GEMM call once); lets tests see what trimming skips.
uint64_t gemm_calls();
uint64_t gemm_flops();  // 2 * m * k * n summed over the GEMMs launched

}  // namespace tg::raw
