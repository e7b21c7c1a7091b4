// Internal: the steps the functional API's files share (autograd/functional/).
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include <tapegrad/autograd/forward_ad.h>
#include <tapegrad/autograd/functional.h>
#include <tapegrad/tensor/tensor.h>

namespace tg::autograd::functional_detail {

// The tensor fn is evaluated at (reverse mode): with create_graph and an x
// that requires grad, a differentiable alias of x, else a fresh leaf.
Tensor input_for(const Tensor& x, const char* op, bool create_graph);
// The same for forward and Taylor mode.
Tensor forward_input(const Tensor& x, const char* op, bool create_graph);
// fn(x), checked to be defined.
Tensor call(const TensorFn& fn, const Tensor& x, const char* op);
// g, or zeros like `like` when g is undefined (an output independent of x).
Tensor or_zeros(const Tensor& g, const Tensor& like);
// t, detached unless create_graph.
Tensor result(const Tensor& t, bool create_graph);
// x must be [B, n]; y [rows, m].
void check_batched_input(const Tensor& x, const char* op);
void check_batched_output(const Tensor& y, int64_t rows, const char* op);
// set_check_rows_independent's flag.
std::atomic<bool>& check_rows_flag();
// Throws naming `op` when fn's output rows depend on other rows of x.
void require_independent_rows(const TensorFn& fn, const Tensor& x, const char* op);
// Per-row gradients of out's rows with respect to x's.
Tensor rows(const Tensor& out, const Tensor& x, bool create_graph);
// The n x n identity with like's dtype and device.
Tensor identity(int64_t n, const Tensor& like);
// The unit tangents of x, batched for forward mode.
Tensor basis_tangents(const Tensor& x);
// Jacobian columns t laid out as out's shape by x's.
Tensor columns_to_jacobian(const Tensor& t, const Tensor& out, const Tensor& x);
// fn's value and Taylor coefficients c_1..c_K at the active Taylor level
// along `dirs` (autograd/functional/common.cpp says more); `carries`, when
// given, is set to whether fn's output carries coefficients at all.
std::vector<Tensor> push_jet(const TensorFn& fn, const Tensor& xi, const Tensor& dirs, const char* op, bool record,
                             unsigned need = ~0u, bool* carries = nullptr);

// Taylor mode for per-sample Hessians: {value [B, m], c_1 [n, B, m] (when
// `jacobian`), H [B, m, n, n]}.
std::vector<Tensor> taylor_hessian(const TensorFn& fn, const Tensor& xi, const char* op, bool record, bool jacobian);
// The structure probe (docs/AUTOGRAD.md "Structural zeros"): fn on x's
// first 0 rows at a Taylor level of order 2 with an
// ops_detail::StructureProbe armed. Returns fn's value on the empty batch
// when no rule formed a second-order term (every Taylor coefficient of order
// >= 2 is then structurally zero: pushed through linear maps only from the
// input's, which are zero), else undefined; recorded when `record` (a
// function of what fn closes over). Undefined too when it would not pay
// (B <= 1), when TG_STRUCTURE_PROBE=0, or when fn throws on the empty batch
// (left to the full pass to report).
Tensor structurally_linear(const TensorFn& fn, const Tensor& xi, const char* op, bool record);
// Zeros of `shape` (`value`'s dtype and device) for a structurally zero
// derivative; with create_graph attached to value's history through the
// sum of its empty rows (exactly 0), so a loss on them backpropagates zeros
// into everything fn's output depends on, as the full pass would, with one
// pass over nothing.
Tensor structural_zeros(const IntList& shape, const Tensor& value, bool create_graph);
// For x with no input columns ([B, 0]), whose every derivative of fn is
// empty or 0: fn's value [0, m] on the empty batch of xi (recorded when
// `record`), for structural_zeros.
Tensor value_without_inputs(const TensorFn& fn, const Tensor& xi, const char* op, bool record);
// The second-order groups of Taylor mode's Hessian: one per pair j <= k;
// entry[j * n + k] names each pair's group.
std::vector<std::vector<forward_ad::SecondOrderPair>> hessian_groups(int64_t n, std::vector<int64_t>* entry);

}  // namespace tg::autograd::functional_detail
