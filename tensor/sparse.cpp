// Sparse COO tensors: construction and validation, coalesce, to_dense, and
// the raw ops that take sparse operands (docs/TENSOR.md "Sparse COO tensors");
// then the CPU kernels (coalesce, spmm).
#include <sstream>

#include <tapegrad/cuda/capture.h>
#include "tensor/op_util.h"
#include <algorithm>
#include <numeric>
#include <tbb/parallel_sort.h>
#include "tensor/cpu/loops.h"
#include "tensor/cpu/cpu_kernels.h"

namespace tg {

using detail::cast;
using detail::compute_type;

namespace {

const SparseCooParts& parts(const Tensor& s) { return s.impl()->sparse_parts(); }
Tensor ind(const Tensor& s) { return Tensor(parts(s).indices); }
Tensor val(const Tensor& s) { return Tensor(parts(s).values); }

Tensor make(IntList sizes, const Tensor& indices, const Tensor& values, bool coalesced,
            IntrusivePtr<VersionCounter> version = {}) {
  return Tensor(TensorImpl::make_sparse_coo(
      std::move(sizes), SparseCooParts{indices.impl_ptr(), values.impl_ptr(), coalesced}, std::move(version)));
}

void check_sparse(const Tensor& s, const char* op) {
  TG_CHECK(s.defined() && s.is_sparse(), op, ": expected a sparse COO tensor, got ",
           s.defined() ? "a strided tensor of shape " + shape_str(s.sizes()) : "an undefined tensor");
}

std::string describe(const Tensor& t) {
  std::ostringstream os;
  os << (t.is_sparse() ? "sparse " : "") << shape_str(t.sizes()) << ' ' << t.dtype() << " on " << t.device();
  return os.str();
}

// Sizes of the sparse dims, and the product of the dense ones.
IntList sparse_sizes(const Tensor& s) { return IntList(s.sizes().begin(), s.sizes().begin() + s.sparse_dim()); }

// values as [nnz, D] in `ct`, contiguous.
Tensor values_2d(const Tensor& s, ScalarType ct) {
  Tensor v = raw::contiguous(cast(val(s), ct));
  return raw::reshape(v, {s.nnz(), -1});
}

// dense (contiguous, compute dtype, s's shape) += alpha * s, in place.
// Deterministic mode on a GPU: s is coalesced first (an ordered sum), so no
// two additions target one element.
void scatter_into(const Tensor& dense, const Tensor& s_in, Scalar alpha) {
  if (s_in.nnz() == 0 || dense.numel() == 0) return;
  const Tensor s = dense.is_cuda() && are_deterministic_algorithms_enabled() ? raw::coalesce(s_in) : s_in;
  int64_t nnz = s.nnz();
  TG_INTERNAL_ASSERT(dense.is_contiguous(), "scatter_into: dense side not contiguous");
  Tensor v = values_2d(s, dense.dtype());
  if (!(alpha.is_integral() && alpha.to_int() == 1)) v = raw::mul(v, alpha);
  int64_t D = v.sizes()[1];
  Tensor target = raw::view(dense, {dense.numel() / D, D});
  Tensor index = raw::expand(raw::view(raw::sparse_linear_index(s), {nnz, 1}), {nnz, D});
  kernels::backend(dense.device(), "add").scatter_add(target, 0, index, v);
}

void check_same_shape(const Tensor& a, const Tensor& b, const char* op) {
  TG_CHECK(a.sizes() == b.sizes(), op,
           ": a sparse COO operand needs an operand of the same "
           "shape (got ",
           describe(a), " and ", describe(b),
           "); broadcasting with sparse "
           "tensors is not supported");
  detail::check_same_device(a, b, op);
}

}  // namespace

// ---- Tensor methods -------------------------------------------------------------------

int64_t Tensor::sparse_dim() const {
  check_sparse(*this, "sparse_dim");
  return ind(*this).sizes()[0];
}
int64_t Tensor::dense_dim() const {
  check_sparse(*this, "dense_dim");
  return val(*this).dim() - 1;
}
int64_t Tensor::nnz() const {
  check_sparse(*this, "nnz");
  return val(*this).sizes()[0];
}
bool Tensor::is_coalesced() const {
  check_sparse(*this, "is_coalesced");
  return parts(*this).coalesced;
}
namespace raw {
Tensor _indices(const Tensor& self) {
  check_sparse(self, "_indices");
  return ind(self);
}
Tensor indices(const Tensor& self) {
  check_sparse(self, "indices");
  TG_CHECK(self.is_coalesced(), "indices: the sparse tensor (", describe(self),
           ") is not coalesced; call .coalesce() first, or use ._indices() for the indices as stored");
  return ind(self);
}
}  // namespace raw

namespace raw {

Tensor sparse_coo_tensor(const Tensor& indices, const Tensor& values, const IntList& sizes, bool check,
                         bool coalesced) {
  const char* op = "sparse_coo_tensor";
  detail::check_defined(indices, op, "indices");
  detail::check_defined(values, op, "values");
  TG_CHECK(indices.dtype() == kInt64 && indices.dim() == 2, op,
           ": indices must be an Int64 tensor of shape [sparse_dim, nnz], got ", describe(indices));
  TG_CHECK(values.dim() >= 1 && values.sizes()[0] == indices.sizes()[1], op,
           ": values must have shape [nnz, dense sizes...] with nnz = indices.size(1) = ", indices.sizes()[1], ", got ",
           describe(values));
  detail::check_same_device(indices, values, op);
  int64_t sd = indices.sizes()[0], dd = values.dim() - 1;
  TG_CHECK(sd >= 1 && int64_t(sizes.size()) == sd + dd, op, ": sizes ", shape_str(sizes),
           " must have sparse_dim + dense_dim = ", sd, " + ", dd, " = ", sd + dd, " entries (indices ",
           shape_str(indices.sizes()), ", values ", shape_str(values.sizes()), ")");
  for (int64_t d = 0; d < dd; ++d)
    TG_CHECK(sizes[size_t(sd + d)] == values.sizes()[size_t(1 + d)], op, ": sizes ", shape_str(sizes),
             " do not match the dense sizes of values ", shape_str(values.sizes()), " at dim ", sd + d);
  for (int64_t s : sizes)
    TG_CHECK(s >= 0, op, ": negative size in ", shape_str(sizes));
  int64_t nnz = values.sizes()[0];
  if (check && nnz > 0) {
    if (indices.is_cuda())
      cuda::detail::check_not_capturing(
          "sparse_coo_tensor (its index check reads the indices on "
          "the host)",
          indices.device().index());
    std::vector<int64_t> lo = raw::amin(indices, {1}).to_vector<int64_t>();
    std::vector<int64_t> hi = raw::amax(indices, {1}).to_vector<int64_t>();
    for (int64_t d = 0; d < sd; ++d) {
      int64_t bad = lo[size_t(d)] < 0 ? lo[size_t(d)] : hi[size_t(d)];
      TG_CHECK(lo[size_t(d)] >= 0 && hi[size_t(d)] < sizes[size_t(d)], op, ": index ", bad, " in sparse dim ", d,
               " is out of range for size ", sizes[size_t(d)], " (indices ", shape_str(indices.sizes()), ", sizes ",
               shape_str(sizes), ")");
    }
  }
  return make(sizes, indices, values, coalesced || nnz <= 1);
}

Tensor sparse_indices(const Tensor& s) {
  check_sparse(s, "_indices");
  return ind(s);
}

Tensor sparse_values(const Tensor& s) {
  check_sparse(s, "_values");
  return val(s);
}

Tensor sparse_linear_index(const Tensor& s) { return sparse_linear_index(ind(s), sparse_sizes(s)); }

namespace {
// Sparse dim k of the indices, checked again where it is used: indices are
// checked when the tensor is built, but _indices() can change them since,
// and a linear index made from one out of range would address another entry
// or memory outside the tensor. The CPU throws. CUDA (no host read) clamps
// it into range, so nothing downstream (scatter, cuSPARSE) leaves its
// memory, and a kernel reports it at the next synchronization (cuda/check.h
// BadIndex).
Tensor checked_sparse_dim(const Tensor& i, int64_t k, int64_t size) {
  Tensor ik = raw::select(i, 0, k);
  if (ik.numel() == 0) return ik;
  if (!ik.is_cuda()) {
    Tensor c = raw::contiguous(ik);
    const int64_t* p = c.data_ptr<int64_t>();
    for (int64_t j = 0; j < c.numel(); ++j)
      TG_CHECK(p[j] >= 0 && p[j] < size, "sparse tensor: index ", p[j], " in sparse dim ", k,
               " is out of range for size ", size,
               " (the indices were written in place after the tensor "
               "was built, through _indices(); build it afresh)");
    return ik;
  }
  kernels::backend(ik.device(), "sparse tensor indices").report_bad_indices(ik, size);
  return raw::clamp(ik, Scalar(int64_t(0)), Scalar(size - 1));
}
}  // namespace

Tensor sparse_linear_index(const Tensor& i, const IntList& sparse_sizes) {
  int64_t sd = i.sizes()[0];
  if (sd == 1) return checked_sparse_dim(i, 0, sparse_sizes[0]);
  // sum_k i[k] * stride_k with the strides as scalars: no host tensor to
  // copy (a copy from pageable memory cannot be captured into a CUDA graph).
  IntList st = contiguous_strides(sparse_sizes);
  Tensor lin = raw::mul(checked_sparse_dim(i, 0, sparse_sizes[0]), Scalar(st[0]));
  for (int64_t k = 1; k < sd; ++k)
    lin = raw::add(lin, raw::mul(checked_sparse_dim(i, k, sparse_sizes[size_t(k)]), Scalar(st[size_t(k)])));
  return lin;
}

Tensor sparse_positions(const Tensor& c, const Tensor& indices) {
  check_sparse(c, "sparse_positions");
  TG_INTERNAL_ASSERT(c.is_coalesced(), "sparse_positions: needs a coalesced tensor");
  const int64_t n = indices.sizes()[1], nnz = c.nnz();
  Tensor lin_c = raw::contiguous(sparse_linear_index(c));
  Tensor lin_q = raw::contiguous(sparse_linear_index(indices, sparse_sizes(c)));
  Tensor pos = detail::new_empty({n}, kInt64, c.device());
  if (n == 0) return pos;
  kernels::backend(c.device(), "sparse_positions").lower_bound(pos, lin_c, lin_q);
  // A lower bound is a hit only where the key there equals the query.
  Tensor keys = raw::cat({lin_c, full_like(raw::narrow(lin_q, 0, 0, 1), Scalar(int64_t(-1)))}, 0);
  Tensor hit = raw::eq(raw::index_select(keys, 0, pos), lin_q);
  return raw::where(hit, pos, Scalar(nnz));
}

namespace {
// Sorts the indices and sums duplicates; `unique`: there are none (then
// nothing is read on the host).
Tensor coalesce_impl(const Tensor& s, bool unique) {
  ScalarType ct = compute_type(s.dtype());
  Tensor oi, ov;
  kernels::backend(s.device(), "coalesce")
      .coalesce(raw::contiguous(sparse_linear_index(s)), values_2d(s, ct), sparse_sizes(s), oi, ov, unique);
  IntList vs = val(s).sizes();
  vs[0] = ov.sizes()[0];
  return make(s.sizes(), oi, cast(raw::reshape(ov, vs), s.dtype()), true);
}
}  // namespace

Tensor coalesce(const Tensor& s) {
  check_sparse(s, "coalesce");
  if (s.is_coalesced()) return s;
  if (s.is_cuda())  // the unique count sizes the result: read on the host
    cuda::detail::check_not_capturing("coalesce (of a sparse tensor)", s.device().index());
  return coalesce_impl(s, false);
}

Tensor to_dense(const Tensor& s) {
  if (!s.is_sparse()) return s;
  ScalarType ct = compute_type(s.dtype());
  Tensor out = detail::new_empty(s.sizes(), ct, s.device());
  raw::zero_(out);
  scatter_into(out, s, 1);
  return cast(out, s.dtype());
}

Tensor sparse_add(const Tensor& a, const Tensor& b, Scalar alpha, const char* op) {
  TG_CHECK(a.defined() && b.defined(), op, ": an operand is an undefined tensor");
  check_same_shape(a, b, op);
  ScalarType rt = promote_types(a.dtype(), b.dtype());
  if (rt == kBool && !(a.is_sparse() && b.is_sparse())) {
    // Bool + alpha Bool with a dense side: the sum in Int64, then nonzero
    // (logical or; alpha is 0 or 1 here).
    return raw::ne(sparse_add(a.to(kInt64), b.to(kInt64), alpha, op), Scalar(int64_t(0)));
  }
  if (a.is_sparse() && b.is_sparse()) {
    TG_CHECK(a.sparse_dim() == b.sparse_dim(), op,
             ": sparse operands with different "
             "sparse_dim (",
             a.sparse_dim(), " and ", b.sparse_dim(), ") cannot be added");
    Tensor bv = cast(val(b), rt);
    if (!(alpha.is_integral() && alpha.to_int() == 1))  // Bool: alpha is 0 or 1, b's entries or none
      bv = rt == kBool ? tg::zeros_like(bv) : raw::mul(bv, alpha);
    if (a.nnz() == 0) return make(a.sizes(), ind(b), bv, parts(b).coalesced);
    if (b.nnz() == 0) return make(a.sizes(), ind(a), cast(val(a), rt), parts(a).coalesced);
    return make(a.sizes(), raw::cat({ind(a), ind(b)}, 1), raw::cat({cast(val(a), rt), bv}, 0), false);
  }
  // One side dense: the result is dense, a copy of the dense side with the
  // sparse entries added into it.
  ScalarType ct = compute_type(rt);
  if (a.is_sparse()) {
    Tensor out = raw::mul(cast(b, ct), alpha);  // new and contiguous
    scatter_into(out, a, 1);
    return cast(out, rt);
  }
  Tensor out = raw::clone(cast(a, ct));
  if (!out.is_contiguous()) out = raw::contiguous(out);
  scatter_into(out, b, alpha);
  return cast(out, rt);
}

const Tensor& sparse_add_(const Tensor& self, const Tensor& o, Scalar alpha, const char* op) {
  check_same_shape(self, o, op);
  TG_CHECK(o.is_sparse(), op, ": cannot add a dense tensor into a sparse one (", describe(self),
           ") in place; use add(), which gives a dense tensor");
  // As the dense add_: the promoted dtype computes, and casts back into
  // self where that loses no kind (no float -> integer, complex -> real).
  const ScalarType rt = promote_types(self.dtype(), o.dtype()), st = self.dtype();
  TG_CHECK(detail::castable_in_place(rt, st), op, ": result dtype ", rt, " cannot be cast to ", st, " in place");
  if (self.is_sparse()) {  // the handle keeps its identity; its parts are new
    Tensor sum = sparse_add(self, o, alpha);
    // Duplicates summed before the cast: rounded once, as dense add_ is.
    if (sum.dtype() != st) sum = raw::coalesce(sum).to(st);
    self.impl()->set_sparse_parts(parts(sum));
    self.bump_version();
    return self;
  }
  if (o.dtype() == st && self.is_contiguous() && compute_type(st) == st) {
    scatter_into(self, o, alpha);
    self.bump_version();
    return self;
  }
  return raw::copy_(self, sparse_add(self, o, alpha));
}

Tensor sparse_mul(const Tensor& s, Scalar c) {
  ScalarType rt = promote_with_scalar(s.dtype(), c);
  return make(s.sizes(), ind(s), raw::mul(cast(val(s), rt), c), parts(s).coalesced);
}

Tensor sparse_div(const Tensor& s, Scalar c) {
  return make(s.sizes(), ind(s), raw::div(val(s), c), parts(s).coalesced);
}

// self *= c or self /= c in place, as the dense mul_ and div_: the handle
// keeps its identity and takes new values (the indices stay); a result
// dtype that self cannot hold (float into integer, complex into real) is
// refused.
const Tensor& sparse_scale_(const Tensor& self, Scalar c, bool divide, const char* op) {
  check_sparse(self, op);
  Tensor r = divide ? sparse_div(self, c) : sparse_mul(self, c);
  const ScalarType rt = r.dtype(), st = self.dtype();
  TG_CHECK(detail::castable_in_place(rt, st), op, ": result dtype ", rt, " cannot be cast to ", st, " in place");
  if (rt != st) r = sparse_to(r, st);
  self.impl()->set_sparse_parts(parts(r));
  self.bump_version();
  return self;
}

Tensor sparse_sum(const Tensor& s) { return raw::sum(val(s)); }

Tensor sparse_mm(const Tensor& s, const Tensor& dense, const char* op) {
  detail::check_defined(dense, op,
                        "second operand (dense @ sparse is not supported: use "
                        "(S^T @ D^T)^T)");
  TG_CHECK(s.dim() == 2 && s.sparse_dim() == 2 && dense.dim() == 2, op,
           ": expected a 2-D sparse matrix with 2 sparse dims times a 2-D dense matrix, got ", describe(s), " and ",
           describe(dense));
  TG_CHECK(s.sizes()[1] == dense.sizes()[0], op, ": shapes ", shape_str(s.sizes()), " and ", shape_str(dense.sizes()),
           " cannot be multiplied (", s.sizes()[1], " vs ", dense.sizes()[0], ")");
  detail::check_same_device(s, dense, op);
  ScalarType rt = promote_types(s.dtype(), dense.dtype());
  TG_CHECK(is_floating_point(rt), op, ": sparse @ dense needs floating-point operands, got ", s.dtype(), " and ",
           dense.dtype());
  ScalarType ct = compute_type(rt);
  Tensor out = detail::new_empty({s.sizes()[0], dense.sizes()[1]}, ct, s.device());
  if (out.numel() == 0) return cast(out, rt);
  if (s.nnz() == 0) return cast(raw::zero_(out), rt);
  // Indices coalesce() sorts are checked there (and its output is made in
  // range); a tensor already coalesced keeps the indices it was given.
  const bool already_checked = !s.is_coalesced();
  Tensor c = raw::coalesce(s);
  Tensor i = ind(c);
  auto dim = [&](int64_t k) { return already_checked ? raw::select(i, 0, k) : checked_sparse_dim(i, k, s.sizes()[k]); };
  kernels::backend(s.device(), op)
      .spmm(out, raw::contiguous(dim(0)), raw::contiguous(dim(1)), raw::contiguous(cast(val(c), ct)),
            raw::contiguous(cast(dense, ct)));
  return cast(out, rt);
}

Tensor sparse_transpose(const Tensor& s, int64_t d0, int64_t d1) {
  int64_t sd = s.sparse_dim();
  d0 = detail::wrap_dim(d0, s.dim(), "transpose", s.sizes());
  d1 = detail::wrap_dim(d1, s.dim(), "transpose", s.sizes());
  if (d0 == d1) return sparse_detach(s);
  TG_CHECK(d0 < sd && d1 < sd, "transpose: a sparse COO tensor (", describe(s), ", sparse_dim ", sd,
           ") can only swap two sparse dims, got ", d0, " and ", d1);
  // The index rows swapped (rows of the device tensor: nothing from the host).
  std::vector<Tensor> rows;
  for (int64_t d = 0; d < sd; ++d)
    rows.push_back(raw::select(ind(s), 0, d == d0 ? d1 : d == d1 ? d0 : d));
  IntList sizes = s.sizes();
  std::swap(sizes[size_t(d0)], sizes[size_t(d1)]);
  Tensor t = make(sizes, raw::stack(rows, 0), val(s), s.nnz() <= 1);
  // The transpose of a coalesced tensor has unique indices: coalescing it is
  // a sort, with no count to read on the host (capturable), and the product
  // that usually follows (a backward's S^T @ G) needs it sorted.
  return s.is_coalesced() && !t.is_coalesced() ? coalesce_impl(t, true) : t;
}

Tensor sparse_clone(const Tensor& s) {
  return make(s.sizes(), raw::clone(ind(s)), raw::clone(val(s)), parts(s).coalesced);
}

Tensor sparse_detach(const Tensor& s) {
  return make(s.sizes(), ind(s), val(s), parts(s).coalesced, s.impl()->version_counter());
}

Tensor sparse_to(const Tensor& s, ScalarType t) {
  if (t == s.dtype()) return s;
  TG_CHECK(!is_complex(t), "to: sparse tensors cannot be ", t, " (no sparse op takes complex values yet; shape ",
           shape_str(s.sizes()), "); convert to_dense() first");
  return make(s.sizes(), ind(s), raw::to(val(s), t), parts(s).coalesced);
}

Tensor sparse_to(const Tensor& s, Device d, bool non_blocking) {
  if (d == s.device()) return s;
  return make(s.sizes(), raw::to(ind(s), d, non_blocking), raw::to(val(s), d, non_blocking), parts(s).coalesced);
}

Tensor sparse_coo_tensor(const Tensor& indices, const Tensor& values, const IntList& sizes) {
  return sparse_coo_tensor(indices, values, sizes, true, false);
}
Tensor _values(const Tensor& self) { return sparse_values(self); }
Tensor values(const Tensor& self) {
  check_sparse(self, "values");
  TG_CHECK(self.is_coalesced(), "values: the sparse tensor (", describe(self),
           ") is not coalesced; call .coalesce() first, or use ._values() for the values as stored");
  return sparse_values(self);
}

}  // namespace raw

void print_sparse(std::ostream& os, const Tensor& s) {
  os << "sparse_coo_tensor(indices=" << ind(s) << ",\n       values=" << val(s)
     << ",\n       size=" << shape_str(s.sizes()) << ", nnz=" << s.nnz() << (s.is_coalesced() ? ", coalesced" : "");
  if (s.dtype() != kFloat32) os << ", dtype=" << s.dtype();
  if (!s.device().is_cpu()) os << ", device=" << s.device();
  os << ')';
}

}  // namespace tg

// ---- the CPU kernels -------------------------------------------------------------
// CPU kernels for sparse COO tensors: coalesce (sort + merge) and spmm.

namespace tg::cpu {
namespace {

void coalesce_kernel(const Tensor& lin_t, const Tensor& values, const IntList& sparse_sizes, Tensor& out_indices,
                     Tensor& out_values, bool /*unique: the host reads anyway*/) {
  const int64_t nnz = lin_t.numel();
  const int64_t D = values.numel() / std::max<int64_t>(nnz, 1);
  const int64_t* lin = lin_t.data_ptr<int64_t>();
  // Stable order of the keys: ties keep their original order, so duplicates
  // are summed in a fixed order (results do not depend on the thread count).
  std::vector<int64_t> perm(static_cast<size_t>(nnz));
  std::iota(perm.begin(), perm.end(), int64_t(0));
  auto less = [lin](int64_t a, int64_t b) { return lin[a] < lin[b] || (lin[a] == lin[b] && a < b); };
#ifdef TAPEGRAD_TSAN
  std::sort(perm.begin(), perm.end(), less);  // see parallel_for: TBB is not TSan-built
#else
  tbb::parallel_sort(perm.begin(), perm.end(), less);
#endif
  std::vector<int64_t> starts;
  for (int64_t p = 0; p < nnz; ++p)
    if (p == 0 || lin[perm[size_t(p)]] != lin[perm[size_t(p - 1)]]) starts.push_back(p);
  const int64_t u = int64_t(starts.size());
  starts.push_back(nnz);
  const int64_t sd = int64_t(sparse_sizes.size());
  out_indices = detail::new_empty({sd, u}, kInt64, lin_t.device());
  IntList vsizes = values.sizes();
  vsizes[0] = u;
  out_values = detail::new_empty(vsizes, values.dtype(), values.device());
  int64_t* oi = out_indices.data_ptr<int64_t>();
  for (int64_t s = 0; s < u; ++s) {
    int64_t l = lin[perm[size_t(starts[size_t(s)])]];
    for (int64_t d = sd - 1; d >= 0; --d) {
      oi[d * u + s] = l % sparse_sizes[size_t(d)];
      l /= sparse_sizes[size_t(d)];
    }
  }
  dispatch_compute(values.dtype(), "coalesce", [&](auto tag) {
    using T = decltype(tag);
    const T* v = static_cast<const T*>(values.data_ptr());
    T* o = static_cast<T*>(out_values.data_ptr());
    parallel_for(u, std::max<int64_t>(1, 4096 / std::max<int64_t>(D, 1)), [&](int64_t b, int64_t e) {
      for (int64_t s = b; s < e; ++s) {
        T* row = o + s * D;
        std::fill(row, row + D, T(0));
        for (int64_t p = starts[size_t(s)]; p < starts[size_t(s + 1)]; ++p) {
          const T* src = v + perm[size_t(p)] * D;
          for (int64_t c = 0; c < D; ++c)
            row[c] += src[c];
        }
      }
    });
  });
}

void spmm_kernel(const Tensor& out, const Tensor& rows_t, const Tensor& cols_t, const Tensor& values,
                 const Tensor& dense) {
  const int64_t n = out.sizes()[0], k = out.sizes()[1], nnz = rows_t.numel();
  const int64_t* rows = rows_t.data_ptr<int64_t>();
  const int64_t* cols = cols_t.data_ptr<int64_t>();
  const int64_t dense_rows = dense.sizes()[0];
  FirstBadIndex bad_col;  // a column index out of range (stale indices): never read
  dispatch_compute(out.dtype(), "mm", [&](auto tag) {
    using T = decltype(tag);
    const T* v = static_cast<const T*>(values.data_ptr());
    const T* d = static_cast<const T*>(dense.data_ptr());
    T* o = static_cast<T*>(out.data_ptr());
    // Rows are sorted: each output row is one contiguous run of entries.
    parallel_for(n, std::max<int64_t>(1, 2048 / std::max<int64_t>(k, 1)), [&](int64_t b, int64_t e) {
      const int64_t* p = std::lower_bound(rows, rows + nnz, b);
      for (int64_t r = b; r < e; ++r) {
        T* orow = o + r * k;
        std::fill(orow, orow + k, T(0));
        for (; p != rows + nnz && *p == r; ++p) {
          int64_t j = p - rows;
          const T a = v[j];
          if (cols[j] < 0 || cols[j] >= dense_rows) {
            bad_col.note(cols[j]);
            continue;
          }
          const T* drow = d + cols[j] * k;
          for (int64_t c = 0; c < k; ++c)
            orow[c] += a * drow[c];
        }
      }
    });
  });
  TG_CHECK(!bad_col.any, "mm (sparse @ dense): the sparse tensor's column index ", bad_col.value.load(),
           " is out of range for the dense operand's ", dense_rows,
           " rows (its indices were written in place after it was built; build it afresh)");
}

void lower_bound_kernel(const Tensor& out, const Tensor& sorted_t, const Tensor& values_t) {
  const int64_t n = sorted_t.numel();
  const int64_t* sorted = sorted_t.data_ptr<int64_t>();
  const int64_t* v = values_t.data_ptr<int64_t>();
  int64_t* o = out.data_ptr<int64_t>();
  parallel_for(values_t.numel(), 4096, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      o[i] = std::lower_bound(sorted, sorted + n, v[i]) - sorted;
  });
}

}  // namespace

void register_sparse(kernels::Backend& b) {
  b.coalesce = coalesce_kernel;
  b.spmm = spmm_kernel;
  b.lower_bound = lower_bound_kernel;
}

}  // namespace tg::cpu
