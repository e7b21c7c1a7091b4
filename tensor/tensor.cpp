// Tensor methods: metadata, views, conversions, in-place ops.
#include <tapegrad/tensor/tensor.h>

#include "tensor/checked.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include <tapegrad/cuda/capture.h>
#include "tensor/op_util.h"

namespace tg {

using detail::wrap_dim;

std::string shape_str(const IntList& shape) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < shape.size(); ++i)
    os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const IntList& l) { return os << shape_str(l); }

namespace detail {

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op, const IntList& shape) {
  int64_t n = std::max<int64_t>(ndim, 1);  // a 0-dim tensor accepts 0 and -1
  TG_CHECK(dim >= -n && dim < n, op, ": dimension ", dim, " is out of range for a tensor of rank ", ndim, " (shape ",
           shape_str(shape), "); expected a dim in [", -n, ", ", n - 1, "]");
  return dim < 0 ? dim + n : dim;
}

int64_t wrap_insert_dim(int64_t dim, int64_t ndim, const char* op, const IntList& shape) {
  TG_CHECK(dim >= -ndim - 1 && dim <= ndim, op, ": dimension ", dim,
           " is out of range for inserting a dim into a tensor of rank ", ndim, " (shape ", shape_str(shape),
           "); expected a dim in [", -ndim - 1, ", ", ndim, "]");
  return dim < 0 ? dim + ndim + 1 : dim;
}

void throw_undefined(const char* op) {
  TG_ERROR(op,
           ": called on an undefined tensor (a default-constructed Tensor, or the "
           ".grad() of a tensor that has not received a gradient yet); check .defined() first");
}

void check_defined(const Tensor& t, const char* op, const char* what) {
  TG_CHECK(t.defined(), op, ": ", what, " is an undefined tensor");
  TG_CHECK(!t.is_sparse(), op, ": ", what, " is a sparse COO tensor (shape ", shape_str(t.sizes()), ", nnz ", t.nnz(),
           ") and this op takes strided tensors only; "
           "convert it with .to_dense(), or use an op with sparse support (add, sub, mul or div "
           "by a scalar, neg, sum, mm, t, coalesce)");
}

void check_same_device(const Tensor& a, const Tensor& b, const char* op) {
  TG_CHECK(a.device() == b.device(), op, ": expected all tensors on the same device, got ", a.device(), " and ",
           b.device(), "; move one with .to(device)");
}

Tensor new_empty(const IntList& sizes, ScalarType dtype, Device device) {
  return new_empty(sizes, dtype, allocator_for(device));
}

Tensor new_empty(const IntList& sizes, ScalarType dtype, Allocator* allocator) {
  const int64_t n = detail::checked_numel(sizes, "empty");
  int64_t nbytes;
  TG_CHECK(!__builtin_mul_overflow(n, int64_t(element_size(dtype)), &nbytes), "empty: shape ", shape_str(sizes), " of ",
           dtype, " needs more bytes than fit in 64 bits");
  auto storage = IntrusivePtr<StorageImpl>::make(size_t(nbytes), allocator);
  return Tensor(IntrusivePtr<TensorImpl>::make(std::move(storage), sizes, contiguous_strides(sizes), 0, dtype,
                                               IntrusivePtr<VersionCounter>()));
}

bool may_overlap(const Tensor& dst, const Tensor& src) {
  if (dst.impl()->storage() != src.impl()->storage()) return false;
  if (dst.numel() == 0 || src.numel() == 0) return false;
  bool same_view = dst.storage_offset() == src.storage_offset() && dst.sizes() == src.sizes() &&
                   dst.strides() == src.strides() && dst.dtype() == src.dtype();
  return !same_view;
}

void check_writable(const Tensor& t, const char* op) {
  for (int64_t d = 0; d < t.dim(); ++d)
    TG_CHECK(t.strides()[d] != 0 || t.sizes()[d] <= 1, op,
             ": unsupported operation: more than one element of the written-to "
             "tensor (shape ",
             shape_str(t.sizes()), ", strides ", shape_str(t.strides()),
             ") refers to a single memory location; call .clone() first");
}

namespace {
template <class T> struct complex_part { using type = T; };
template <class T> struct complex_part<complex<T>> { using type = T; };
// A complex dtype's: its parts'.
template <class T> double largest_finite() {
  return double(std::numeric_limits<typename complex_part<T>::type>::max());
}
template <> double largest_finite<Half>() {
  Half h;
  h.bits = 0x7bff;  // 65504
  return double(float(h));
}
template <> double largest_finite<BFloat16>() {
  BFloat16 b;
  b.bits = 0x7f7f;  // 3.3895313892515355e38
  return double(float(b));
}
}  // namespace

IntList check_complex_parts(const Tensor& a, const Tensor& b, const char* op) {
  check_defined(a, op, "first part");
  check_defined(b, op, "second part");
  TG_CHECK(!a.is_sparse() && !b.is_sparse(), op, ": sparse parts; call to_dense() first");
  TG_CHECK(category(a.dtype()) == DtypeCategory::Floating && a.dtype() == b.dtype(), op,
           ": expected two Float32 or two Float64 tensors, got ", a.dtype(), " and ", b.dtype(),
           "; convert them with .to(kFloat64)");
  check_same_device(a, b, op);
  return broadcast_shapes(a.sizes(), b.sizes(), op);
}

void check_scalar_fits(Scalar v, ScalarType dtype, const char* op) {
  if (dtype == kBool || dtype == kFloat64) return;  // every int64 is some double
  if (v.is_integral() && (!is_floating_point(dtype) || dtype == kFloat32 || dtype == kBFloat16))
    return;  // int64's range fits in these; Float16's does not
  const double d = v.to_double();
  auto exact = [](double v) {  // all the digits: 9.22337e+18 or 3.40282e+38 would read as the limit itself
    std::ostringstream o;
    o.precision(17);
    o << v;
    return o.str();
  };
  if (dtype == kInt64) {
    TG_CHECK(fits_int64(d), op, ": the value ", exact(d), " cannot be converted to Int64 without overflow",
             std::isnan(d) ? " (NaN has no integer value)" : "",
             "; use a floating tensor, or a value in [-2^63, 2^63)");
    return;
  }
  double max = 0;  // the dtype's largest finite value, from the dtype list's host type
  switch (dtype) {
#define TG_DTYPE(Name, HostT, ...) \
  case ScalarType::Name:           \
    max = largest_finite<HostT>(); \
    break;
#include <tapegrad/tensor/dtypes.def>
#undef TG_DTYPE
  }
  TG_CHECK(!std::isfinite(d) || std::fabs(d) <= max, op, ": the value ", exact(d), " cannot be converted to ", dtype,
           " without overflow (its largest finite value is ", exact(max),
           "); use a wider dtype or pass inf explicitly");
}

}  // namespace detail

namespace {

// A view of base's storage. Checked against the storage's extent with
// overflow-safe arithmetic: no view (as_strided, expand, narrow, slice, a
// DLPack or safetensors shape) can reach outside the memory it aliases.
Tensor make_view(const Tensor& base, IntList sizes, IntList strides, int64_t offset, const char* op = "view") {
  detail::check_defined(base, op);
  const int64_t n = detail::checked_numel(sizes, op);
  TG_CHECK(offset >= 0, op, ": negative storage offset ", offset);
  if (n > 0 && !base.is_sparse()) {
    const auto [lo, hi] = detail::checked_reach(sizes, strides, offset, op);
    const auto& st = base.impl()->storage();
    const int64_t elements = st ? int64_t(st->nbytes() / element_size(base.dtype())) : 0;
    TG_CHECK(lo >= 0 && hi < elements, op, ": a view of shape ", shape_str(sizes), ", strides ", shape_str(strides),
             " and offset ", offset, " reaches elements ", lo, " to ", hi, ", but the storage holds ", elements, " (",
             base.dtype(), ")");
  }
  return Tensor(IntrusivePtr<TensorImpl>::make(base.impl()->storage(), std::move(sizes), std::move(strides), offset,
                                               base.dtype(), base.impl()->version_counter()));
}

// A view of base's storage as another dtype (view_as_real, view_as_complex):
// sizes, strides and offset in elements of `dtype`, checked as make_view's.
Tensor make_typed_view(const Tensor& base, ScalarType dtype, IntList sizes, IntList strides, int64_t offset,
                       const char* op) {
  const int64_t n = detail::checked_numel(sizes, op);
  if (n > 0) {
    const auto [lo, hi] = detail::checked_reach(sizes, strides, offset, op);
    const auto& st = base.impl()->storage();
    const int64_t elements = st ? int64_t(st->nbytes() / element_size(dtype)) : 0;
    TG_CHECK(lo >= 0 && hi < elements, op, ": a view of shape ", shape_str(sizes), " reaches elements ", lo, " to ", hi,
             " of a storage of ", elements, " (", dtype, ")");
  }
  if (const auto& st = base.impl()->storage()) st->set_viewed_across_dtypes();
  return Tensor(IntrusivePtr<TensorImpl>::make(base.impl()->storage(), std::move(sizes), std::move(strides), offset,
                                               dtype, base.impl()->version_counter()));
}

IntList infer_size(const IntList& shape, int64_t numel, const char* op) {
  IntList res = shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      TG_CHECK(infer < 0, op, ": only one dimension can be inferred (-1) in ", shape_str(shape));
      infer = int64_t(i);
    } else {
      TG_CHECK(shape[i] >= 0, op, ": invalid shape dimension ", shape[i], " in ", shape_str(shape));
      known = detail::checked_mul(known, shape[i], op, shape);
    }
  }
  if (infer >= 0) {
    TG_CHECK(known != 0 && numel % known == 0, op, ": shape ", shape_str(shape), " is invalid for input of size ",
             numel);
    res[size_t(infer)] = numel / known;
  } else {
    TG_CHECK(known == numel, op, ": shape ", shape_str(shape), " is invalid for input of size ", numel);
  }
  return res;
}

// Strides for viewing (sizes, strides) as new_sizes without a copy, or
// false when the memory layout does not allow it.
bool view_strides(const IntList& sizes, const IntList& strides, const IntList& new_sizes, IntList& out) {
  out.assign(new_sizes.size(), 0);
  if (sizes.empty() || shape_numel(sizes) == 0) {
    out = contiguous_strides(new_sizes);
    return true;
  }
  int64_t view_d = int64_t(new_sizes.size()) - 1;
  int64_t chunk_base = strides.back(), tensor_numel = 1, view_numel = 1;
  for (int64_t d = int64_t(sizes.size()) - 1; d >= 0; --d) {
    tensor_numel *= sizes[d];
    if (d == 0 || (sizes[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_base)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_sizes[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base;
        view_numel *= new_sizes[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (d > 0) {
        chunk_base = strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

}  // namespace

int64_t Tensor::size(int64_t d) const {
  const TensorImpl& i = checked("size");
  TG_CHECK(i.dim() > 0, "size: dimension specified as ", d, " but the tensor has no dimensions (0-dim)");
  return i.sizes()[size_t(wrap_dim(d, i.dim(), "size", i.sizes()))];
}
bool Tensor::is_pinned() const {
  detail::check_defined(*this, "is_pinned");
  const Allocator* pinned = registered_pinned_allocator();
  return pinned && impl_->storage() && impl_->storage()->allocator() == pinned;
}

int64_t Tensor::stride(int64_t d) const {
  const TensorImpl& i = checked("stride");
  TG_CHECK(i.dim() > 0, "stride: dimension specified as ", d, " but the tensor has no dimensions (0-dim)");
  return i.strides()[size_t(wrap_dim(d, i.dim(), "stride", i.sizes()))];
}

namespace raw {

// ---- views ----------------------------------------------------------------------

Tensor view(const Tensor& self, const IntList& new_shape) {
  detail::check_defined(self, "view");
  IntList shape = infer_size(new_shape, self.numel(), "view");
  IntList st;
  TG_CHECK(view_strides(self.sizes(), self.strides(), shape, st), "view: size ", shape_str(shape),
           " is not compatible with the input's sizes ", shape_str(self.sizes()), " and strides ",
           shape_str(self.strides()),
           " (at least one dimension spans two contiguous subspaces); use "
           ".reshape(...) instead");
  return make_view(self, shape, st, self.storage_offset());
}

Tensor reshape(const Tensor& self, const IntList& new_shape) {
  detail::check_defined(self, "reshape");
  IntList shape = infer_size(new_shape, self.numel(), "reshape");
  IntList st;
  if (view_strides(self.sizes(), self.strides(), shape, st)) return make_view(self, shape, st, self.storage_offset());
  return view(contiguous(self), shape);
}

Tensor as_strided(const Tensor& self, const IntList& sz, const IntList& st, std::optional<int64_t> offset) {
  detail::check_defined(self, "as_strided");
  TG_CHECK(sz.size() == st.size(), "as_strided: sizes ", shape_str(sz), " and strides ", shape_str(st),
           " have different lengths");
  return make_view(self, sz, st, offset.value_or(self.storage_offset()), "as_strided");
}

Tensor transpose(const Tensor& self, int64_t d0, int64_t d1) {
  if (self.defined() && self.is_sparse()) return sparse_transpose(self, d0, d1);
  detail::check_defined(self, "transpose");
  int64_t n = self.dim();
  d0 = wrap_dim(d0, n, "transpose", self.sizes());  // a 0-dim tensor takes 0 and -1 only
  d1 = wrap_dim(d1, n, "transpose", self.sizes());
  if (n == 0) return self;
  IntList sz = self.sizes(), st = self.strides();
  std::swap(sz[d0], sz[d1]);
  std::swap(st[d0], st[d1]);
  return make_view(self, sz, st, self.storage_offset());
}

Tensor t(const Tensor& self) {
  TG_CHECK(self.dim() <= 2, "t: expects a tensor with <= 2 dimensions, but got shape ", shape_str(self.sizes()),
           "; use transpose(d0, d1)");
  return self.dim() < 2 ? self : transpose(self, 0, 1);
}

Tensor permute(const Tensor& self, const IntList& dims) {
  detail::check_defined(self, "permute");
  int64_t n = self.dim();
  TG_CHECK(int64_t(dims.size()) == n, "permute: got ", dims.size(), " dims ", shape_str(dims),
           " for a tensor of shape ", shape_str(self.sizes()));
  IntList sz(n), st(n);
  std::vector<bool> seen(size_t(n), false);
  for (int64_t i = 0; i < n; ++i) {
    int64_t d = wrap_dim(dims[i], n, "permute", self.sizes());
    TG_CHECK(!seen[size_t(d)], "permute: dims ", shape_str(dims), " is not a permutation (dim ", d, " repeats)");
    seen[size_t(d)] = true;
    sz[i] = self.sizes()[d];
    st[i] = self.strides()[d];
  }
  return make_view(self, sz, st, self.storage_offset());
}

Tensor select(const Tensor& self, int64_t d, int64_t index) {
  detail::check_defined(self, "select");
  TG_CHECK(self.dim() > 0, "select: cannot select on a 0-dim tensor");
  d = wrap_dim(d, self.dim(), "select", self.sizes());
  int64_t size = self.sizes()[d];
  TG_CHECK(index >= -size && index < size, "select: index ", index, " is out of range for dim ", d, " with size ", size,
           " (shape ", shape_str(self.sizes()), ")");
  if (index < 0) index += size;
  IntList sz = self.sizes(), st = self.strides();
  int64_t off = self.storage_offset() + index * st[d];
  sz.erase(sz.begin() + d);
  st.erase(st.begin() + d);
  return make_view(self, sz, st, off);
}

Tensor slice(const Tensor& self, int64_t d, std::optional<int64_t> start, std::optional<int64_t> end, int64_t step) {
  detail::check_defined(self, "slice");
  TG_CHECK(self.dim() > 0, "slice: cannot slice a 0-dim tensor");
  d = wrap_dim(d, self.dim(), "slice", self.sizes());
  TG_CHECK(step > 0, "slice: step must be positive, got ", step);
  int64_t size = self.sizes()[d];
  auto clamp_index = [size](int64_t i) {
    if (i < 0) i += size;
    return std::min(std::max<int64_t>(i, 0), size);
  };
  int64_t s = clamp_index(start.value_or(0));
  int64_t e = clamp_index(end.value_or(size));
  int64_t len = e > s ? (e - s - 1) / step + 1 : 0;  // (e - s + step - 1) / step, without overflow
  IntList sz = self.sizes(), st = self.strides();
  sz[d] = len;
  st[d] = len > 1 ? detail::checked_mul(st[d], step, "slice", self.sizes()) : st[d];
  return make_view(
      self, sz, st,
      detail::checked_add(self.storage_offset(), detail::checked_mul(s, self.strides()[d], "slice", self.sizes()),
                          "slice", self.sizes()),
      "slice");
}

Tensor narrow(const Tensor& self, int64_t d, int64_t start, int64_t length) {
  detail::check_defined(self, "narrow");
  TG_CHECK(self.dim() > 0, "narrow: cannot narrow a 0-dim tensor");
  d = wrap_dim(d, self.dim(), "narrow", self.sizes());
  int64_t size = self.sizes()[d];
  if (start < 0) start += size;
  TG_CHECK(start >= 0 && length >= 0 && start <= size && length <= size - start, "narrow: start ", start,
           " and length ", length, " are out of range for dim ", d, " with size ", size, " (shape ",
           shape_str(self.sizes()), ")");
  return slice(self, d, start, start + length, 1);
}

Tensor unsqueeze(const Tensor& self, int64_t d) {
  detail::check_defined(self, "unsqueeze");
  d = detail::wrap_insert_dim(d, self.dim(), "unsqueeze", self.sizes());
  IntList sz = self.sizes(), st = self.strides();
  int64_t s = d < self.dim() ? self.sizes()[d] * self.strides()[d] : 1;
  sz.insert(sz.begin() + d, 1);
  st.insert(st.begin() + d, s);
  return make_view(self, sz, st, self.storage_offset());
}

Tensor squeeze(const Tensor& self) {
  detail::check_defined(self, "squeeze");
  IntList sz, st;
  for (int64_t d = 0; d < self.dim(); ++d)
    if (self.sizes()[d] != 1) {
      sz.push_back(self.sizes()[d]);
      st.push_back(self.strides()[d]);
    }
  return make_view(self, sz, st, self.storage_offset());
}

Tensor squeeze(const Tensor& self, int64_t d) {
  detail::check_defined(self, "squeeze");
  d = wrap_dim(d, self.dim(), "squeeze", self.sizes());  // a 0-dim tensor takes 0 and -1 only
  if (self.dim() == 0) return self;
  if (self.sizes()[d] != 1) return self;
  IntList sz = self.sizes(), st = self.strides();
  sz.erase(sz.begin() + d);
  st.erase(st.begin() + d);
  return make_view(self, sz, st, self.storage_offset());
}

Tensor expand(const Tensor& self, const IntList& target) {
  detail::check_defined(self, "expand");
  if (target == self.sizes()) return self;  // nothing to broadcast
  int64_t n = int64_t(target.size()), nd = self.dim();
  TG_CHECK(n >= nd, "expand: the number of sizes provided (", n,
           ") must be greater or equal to the number of dimensions in the "
           "tensor (",
           nd, "); shape ", shape_str(self.sizes()), " to ", shape_str(target));
  IntList sz(n), st(n);
  for (int64_t i = n - 1; i >= 0; --i) {
    int64_t j = i - (n - nd);
    int64_t want = target[i];
    if (j < 0) {
      TG_CHECK(want >= 0, "expand: a new leading dim takes a size >= 0, got ", want, " in ", shape_str(target),
               " (-1 is only for existing dims)");
      sz[i] = want;
      st[i] = 0;
      continue;
    }
    int64_t have = self.sizes()[j];
    if (want == -1) want = have;
    TG_CHECK(want >= 0, "expand: negative size ", want, " in ", shape_str(target), " (shape ", shape_str(self.sizes()),
             "); -1 keeps a dim's size");
    TG_CHECK(have == want || have == 1, "expand: cannot expand shape ", shape_str(self.sizes()), " to ",
             shape_str(target), " (dim ", i, ": ", have, " != ", want, " and is not 1)");
    sz[i] = want;
    st[i] = have == want ? self.strides()[j] : 0;
  }
  return make_view(self, sz, st, self.storage_offset(), "expand");
}

Tensor expand_as(const Tensor& self, const Tensor& other) { return expand(self, other.sizes()); }

Tensor flatten(const Tensor& self, int64_t start, int64_t end) {
  detail::check_defined(self, "flatten");
  if (self.dim() == 0) return reshape(self, {1});
  start = wrap_dim(start, self.dim(), "flatten", self.sizes());
  end = wrap_dim(end, self.dim(), "flatten", self.sizes());
  TG_CHECK(start <= end, "flatten: start_dim ", start, " must not come after end_dim ", end);
  IntList sz(self.sizes().begin(), self.sizes().begin() + start);
  int64_t m = 1;
  for (int64_t d = start; d <= end; ++d)
    m *= self.sizes()[d];
  sz.push_back(m);
  sz.insert(sz.end(), self.sizes().begin() + end + 1, self.sizes().end());
  return reshape(self, sz);
}

// ---- conversions -------------------------------------------------------------------

Tensor contiguous(const Tensor& self) {
  detail::check_defined(self, "contiguous");
  return self.is_contiguous() ? self : clone(self);
}

Tensor clone(const Tensor& self) {
  if (self.defined() && self.is_sparse()) return sparse_clone(self);
  detail::check_defined(self, "clone");
  Tensor out = detail::new_empty(self.sizes(), self.dtype(), self.device());
  kernels::backend(self.device(), "clone").copy(out, self);
  return out;
}

// ---- complex ----

Tensor view_as_real(const Tensor& self) {
  detail::check_defined(self, "view_as_real");
  TG_CHECK(!self.is_sparse(), "view_as_real: a sparse tensor; call to_dense() first");
  TG_CHECK(is_complex(self.dtype()), "view_as_real: expected a complex tensor (Complex64 or Complex128), got ",
           self.dtype(), " (shape ", shape_str(self.sizes()), "); a real tensor is its own real part");
  IntList sz = self.sizes(), st;
  sz.push_back(2);
  for (int64_t x : self.strides())
    st.push_back(detail::checked_mul(x, 2, "view_as_real", self.sizes()));
  st.push_back(1);
  return make_typed_view(self, real_type(self.dtype()), sz, st,
                         detail::checked_mul(self.storage_offset(), 2, "view_as_real", self.sizes()), "view_as_real");
}

Tensor view_as_complex(const Tensor& self) {
  const char* op = "view_as_complex";
  detail::check_defined(self, op);
  TG_CHECK(!self.is_sparse(), op, ": a sparse tensor; call to_dense() first");
  TG_CHECK(category(self.dtype()) == DtypeCategory::Floating, op, ": expected a Float32 or Float64 tensor, got ",
           self.dtype(), " (shape ", shape_str(self.sizes()), "); convert it with .to(kFloat32) first");
  const IntList& sz = self.sizes();
  const IntList& st = self.strides();
  TG_CHECK(self.dim() >= 1 && sz.back() == 2, op, ": expected a last dim of size 2 (real, imaginary), got shape ",
           shape_str(sz));
  TG_CHECK(st.back() == 1, op, ": the last dim must have stride 1, got strides ", shape_str(st), " (shape ",
           shape_str(sz), "); call contiguous() first");
  for (size_t d = 0; d + 1 < st.size(); ++d)
    TG_CHECK(st[d] % 2 == 0 || sz[d] == 1, op,
             ": every stride but the last must be even (whole complex elements), got strides ", shape_str(st),
             " (shape ", shape_str(sz), "); call contiguous() first");
  TG_CHECK(self.storage_offset() % 2 == 0, op, ": the storage offset must be even (whole complex elements), got ",
           self.storage_offset(), "; call contiguous() first");
  IntList csz(sz.begin(), sz.end() - 1), cst;
  for (size_t d = 0; d + 1 < st.size(); ++d)
    cst.push_back(st[d] / 2);
  return make_typed_view(self, complex_type(self.dtype()), csz, cst, self.storage_offset() / 2, op);
}

Tensor real(const Tensor& self) {
  detail::check_defined(self, "real");
  if (!is_complex(self.dtype())) return self;
  return raw::select(raw::view_as_real(self), -1, 0);
}

Tensor imag(const Tensor& self) {
  detail::check_defined(self, "imag");
  TG_CHECK(is_complex(self.dtype()), "imag: a ", self.dtype(), " tensor (shape ", shape_str(self.sizes()),
           ") has no imaginary part; imag takes Complex64 or Complex128");
  return raw::select(raw::view_as_real(self), -1, 1);
}

Tensor conj(const Tensor& self) {
  detail::check_defined(self, "conj");
  if (!is_complex(self.dtype())) return self;
  // The real parts copied, the imaginary ones negated: a pass over each half.
  Tensor out = detail::new_empty(self.sizes(), self.dtype(), self.device());
  if (out.numel() == 0) return out;
  const Tensor o = raw::view_as_real(out), x = raw::view_as_real(self);
  raw::copy_(raw::select(o, -1, 0), raw::select(x, -1, 0));
  const Tensor oi = raw::select(o, -1, 1), xi = raw::select(x, -1, 1);
  const kernels::Backend& be = kernels::backend(self.device(), "conj");
  if (be.binary_scalar) {
    be.binary_scalar(kernels::BinaryOp::Mul, oi, xi, -1.0, -1);
  } else {
    raw::copy_(oi, raw::neg(xi));
  }
  return out;
}

Tensor angle(const Tensor& self) {
  detail::check_defined(self, "angle");
  if (is_complex(self.dtype())) return raw::atan2(raw::imag(self), raw::real(self));
  // A real x: pi where negative, else 0 (NaN stays), in its floating dtype.
  const Tensor x = is_floating_point(self.dtype()) ? self : raw::to(self, kFloat32);
  const Tensor neg = raw::to(raw::lt(x, 0), x.dtype());
  return raw::where(raw::ne(x, x), x, raw::mul(neg, 3.14159265358979323846));
}

Tensor complex_from(const Tensor& re, const Tensor& im) {
  const IntList shape = detail::check_complex_parts(re, im, "complex_from");
  Tensor out = detail::new_empty(shape, complex_type(re.dtype()), re.device());
  Tensor parts = raw::view_as_real(out);
  raw::copy_(raw::select(parts, -1, 0), raw::expand(re, shape));
  raw::copy_(raw::select(parts, -1, 1), raw::expand(im, shape));
  return out;
}

Tensor polar(const Tensor& abs, const Tensor& angle) {
  detail::check_complex_parts(abs, angle, "polar");
  return raw::complex_from(raw::mul(abs, raw::cos(angle)), raw::mul(abs, raw::sin(angle)));
}

Tensor detach(const Tensor& self) {
  if (!self.defined()) detail::throw_undefined("detach");
  if (self.is_sparse()) return sparse_detach(self);
  return make_view(self, self.sizes(), self.strides(), self.storage_offset());
}

Tensor to(const Tensor& self, ScalarType t) {
  if (self.defined() && self.is_sparse()) return sparse_to(self, t);
  detail::check_defined(self, "to");
  if (t == self.dtype()) return self;
  Tensor out = detail::new_empty(self.sizes(), t, self.device());
  kernels::backend(self.device(), "to").copy(out, self);
  return out;
}

Tensor to(const Tensor& self, Device d, bool non_blocking) {
  if (self.defined() && self.is_sparse()) return sparse_to(self, d, non_blocking);
  detail::check_defined(self, "to");
  if (d == self.device()) return self;
  // The device side's backend moves the bytes (both devices' kernels exist
  // before any allocation, so a missing backend fails cleanly).
  const kernels::Backend& be = kernels::backend(d.is_cuda() ? d : self.device(), "to");
  Tensor src = contiguous(self);
  // A non-blocking copy to the host lands in pinned memory (as PyTorch):
  // the copy stays asynchronous, and the caller synchronises before reading.
  Tensor out = non_blocking && d.is_cpu() ? detail::new_empty(self.sizes(), self.dtype(), pinned_allocator())
                                          : detail::new_empty(self.sizes(), self.dtype(), d);
  be.copy_across(out, src, non_blocking);
  return out;
}

Tensor pin_memory(const Tensor& self) {
  detail::check_defined(self, "pin_memory");
  TG_CHECK(self.device().is_cpu(), "pin_memory: only CPU tensors can be pinned, got a tensor on ", self.device());
  if (self.is_pinned()) return self;
  Tensor out = detail::new_empty(self.sizes(), self.dtype(), pinned_allocator());
  kernels::backend(self.device(), "pin_memory").copy(out, self);
  return out;
}

Tensor to(const Tensor& self, Device d, ScalarType t) { return to(to(self, d), t); }

}  // namespace raw

// The dtype of a host type (the dtype list's HostT column).
template <class T> static constexpr ScalarType dtype_of();
#define TG_DTYPE(Name, HostT, ...) \
  template <> constexpr ScalarType dtype_of<HostT>() { return ScalarType::Name; }
#include <tapegrad/tensor/dtypes.def>
#undef TG_DTYPE

// Reading a complex tensor's values as a real type would drop the imaginary
// parts without a word (a cast with to() does so by request, as PyTorch's).
static void check_parts_kept(const Tensor& t, ScalarType want, const char* op) {
  TG_CHECK(!is_complex(t.dtype()) || is_complex(want), op, ": the tensor is ", t.dtype(), ", which ", want,
           " cannot hold (its imaginary parts would be dropped); read it as tg::complex<float> or "
           "tg::complex<double>, or take real(t) / imag(t) first");
}

template <class T> T* Tensor::data_ptr() const {
  detail::check_defined(*this, "data_ptr");
  TG_CHECK(dtype() == dtype_of<T>(), "data_ptr: expected dtype ", dtype_of<T>(), " but the tensor is ", dtype());
  return static_cast<T*>(impl_->data());
}

template <class T> T Tensor::item() const {
  detail::check_defined(*this, "item");
  TG_CHECK(numel() == 1, "item: a tensor with ", numel(), " elements (shape ", shape_str(sizes()),
           ") cannot be converted to a scalar");
  check_parts_kept(*this, dtype_of<T>(), "item");
  if (is_cuda()) cuda::detail::check_not_capturing("item", device().index());
  Tensor one = raw::contiguous(raw::to(raw::to(*this, Device(kCPU)), dtype_of<T>()));
  return *one.data_ptr<T>();
}

template <class T> std::vector<T> Tensor::to_vector() const {
  detail::check_defined(*this, "to_vector");
  check_parts_kept(*this, dtype_of<T>(), "to_vector");
  Tensor c = raw::contiguous(raw::to(raw::to(*this, Device(kCPU)), dtype_of<T>()));
  const T* p = c.numel() ? c.data_ptr<T>() : nullptr;
  return std::vector<T>(p, p + c.numel());
}

#define TG_INSTANTIATE_ACCESS(T)           \
  template T* Tensor::data_ptr<T>() const; \
  template T Tensor::item<T>() const;      \
  template std::vector<T> Tensor::to_vector<T>() const;
#define TG_DTYPE(Name, HostT, ...) TG_INSTANTIATE_ACCESS(HostT)
#include <tapegrad/tensor/dtypes.def>
#undef TG_DTYPE
#undef TG_INSTANTIATE_ACCESS

}  // namespace tg
