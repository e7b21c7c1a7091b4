// Internal helpers shared by the op layer (tensor/*.cpp).
#pragma once

#include <tapegrad/tensor/error.h>
#include "tensor/kernels.h"
#include <tapegrad/tensor/ops.h>
#include <tapegrad/tensor/raw.h>

namespace tg::detail {

// Wraps a possibly negative dim into [0, ndim); throws naming the op.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op, const IntList& shape);
// For ops that insert a dim (unsqueeze, stack): dim in [-ndim-1, ndim].
int64_t wrap_insert_dim(int64_t dim, int64_t ndim, const char* op, const IntList& shape);

// The dtype kernels compute in: BFloat16/Float16 -> Float32, Bool -> Int64.
// (tg::compute_type, the dtype list's Compute column.)
using tg::compute_type;

inline Tensor cast(const Tensor& t, ScalarType d) { return t.dtype() == d ? t : t.to(d); }

// Whether an in-place op may write a `result`-dtype value into a self of
// dtype `self` (PyTorch's rule): the same dtype, a real result into a
// floating self, anything into a complex self; never a float into an
// integer or Bool self, nor a complex value into a real one (its imaginary
// part would be lost).
inline bool castable_in_place(ScalarType result, ScalarType self) {
  return result == self || (is_floating_point(self) && !is_complex(result)) || is_complex(self);
}

void check_defined(const Tensor& t, const char* op, const char* what = "input");
void check_same_device(const Tensor& a, const Tensor& b, const char* op);

// A fresh contiguous tensor on a device, bypassing option checks.
Tensor new_empty(const IntList& sizes, ScalarType dtype, Device device);
// ... with storage from a given allocator (pinned host memory, say).
Tensor new_empty(const IntList& sizes, ScalarType dtype, Allocator* allocator);

// An Int64 index tensor [v.size()] on `device` whose range is recorded
// (StorageImpl::set_known_index_range): index ops on it or its views read nothing back
// from the device, so they neither sync nor refuse to be captured.
Tensor index_tensor(const std::vector<int64_t>& v, Device device);

// Whether writing into `dst` could clobber `src` before it is read
// (shared storage with a different view); callers then copy src first.
bool may_overlap(const Tensor& dst, const Tensor& src);
// Throws when `t` has several elements at one address (an expanded view).
void check_writable(const Tensor& t, const char* op);
// Throws, naming `op`, when `v` cannot be stored in `dtype` without
// overflow (as PyTorch's): NaN, +-inf or an out-of-range number into Int64,
// a finite number beyond the largest finite value of a narrower float.
void check_scalar_fits(Scalar v, ScalarType dtype, const char* op);
// The two real parts of a complex result (complex_from's real and imag,
// polar's abs and angle): defined, one Float32 or Float64 dtype, one device,
// broadcastable; throws naming `op`. Returns the broadcast shape.
IntList check_complex_parts(const Tensor& a, const Tensor& b, const char* op);

// out (contiguous, compute dtype) [index along d] += src, index validated.
// Deterministic mode on a GPU: a sorted, ordered sum instead of atomics.
void scatter_add_into(const Tensor& out, int64_t d, const Tensor& index, const Tensor& src);
// The ordered form on any device: each element's target position, a stable
// sort with one sum per target in element order (the backend's coalesce),
// then one addition per distinct target.
void scatter_add_sorted(const Tensor& out, int64_t d, const Tensor& index, const Tensor& src);

}  // namespace tg::detail
