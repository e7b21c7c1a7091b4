// LibTorch's indexing (include/tapegrad/tensor/indexing.h) and conveniences
// (Tensor::cpu/cuda, the in-place forms of unary ops, uniform_/normal_),
// each built from public ops, so that autograd records them as it records
// those (indexing: views for None/Ellipsis/integers/slices, index_select
// for a tensor index).
#include <tapegrad/tensor/indexing.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include <tapegrad/tensor/error.h>
#include <tapegrad/tensor/ops.h>

#include "tensor/op_util.h"

namespace tg {

TensorIndex::TensorIndex(const char* s) : kind_(Kind::Ellipsis) {
  TG_CHECK(s != nullptr && std::strcmp(s, "...") == 0, "index: a string index must be \"...\" (Ellipsis), got \"",
           s ? s : "(null)", "\"");
}

namespace detail {
void throw_accessor_index(int64_t index, int64_t size, size_t dim) {
  TG_CHECK(false, "accessor: index ", index, " is out of range for a dim of size ", size, " (", dim,
           " dims left to index)");
  throw 0;  // unreachable
}
void throw_accessor_misuse(const Tensor& t, size_t rank) {
  if (!t.defined()) TG_CHECK(false, "accessor: the tensor is undefined");
  TG_CHECK(!t.is_cuda(), "accessor: the tensor is on ", t.device(),
           "; accessors read CPU memory: copy it with .cpu() first");
  TG_CHECK(!t.is_sparse(), "accessor: the tensor is sparse; take to_dense() or values() first");
  TG_CHECK(false, "accessor: asked for ", rank, " dims but the tensor has ", t.dim(), " (shape ", shape_str(t.sizes()),
           ")");
  throw 0;  // unreachable
}
}  // namespace detail

namespace {

using Kind = TensorIndex::Kind;

// How many of self's dims an index uses.
int64_t dims_used(const TensorIndex& i) {
  switch (i.kind()) {
    case Kind::Integer:
    case Kind::Slice: return 1;
    case Kind::Tensor:  // a 0-dim mask adds a dim
      return i.tensor().defined() && i.tensor().dtype() == kBool ? i.tensor().dim() : 1;
    default: return 0;
  }
}

struct Indexed {
  Tensor result;
  bool advanced = false;
};

// r indexed at once by several index tensors, each at its dim of r (a Bool
// mask of k dims: its True positions as k Int64 indices), as PyTorch's: the
// indices broadcast to one shape B, which replaces the indexed dims where
// the first stood if they are adjacent, else comes first. A copy.
Tensor gather(const Tensor& r, const std::vector<std::pair<int64_t, Tensor>>& picks, const char* op) {
  std::vector<int64_t> dims;
  std::vector<Tensor> index;  // Int64, wrapped into range
  IntList b;                  // the broadcast shape
  for (const auto& [d, t] : picks) {
    std::vector<Tensor> parts;
    if (t.dtype() == kBool) {
      for (int64_t j = 0; j < t.dim(); ++j)
        TG_CHECK(t.size(j) == r.size(d + j), op, ": the mask's shape ", shape_str(t.sizes()),
                 " does not match the indexed dims of shape ", shape_str(r.sizes()), " from dim ", d);
      const Tensor nz = tg::nonzero(t);  // [n, k]
      for (int64_t j = 0; j < t.dim(); ++j)
        parts.push_back(nz.select(1, j));
    } else {
      parts.push_back(t);
    }
    for (size_t j = 0; j < parts.size(); ++j) {
      const int64_t dim = d + int64_t(j), n = r.size(dim);
      const Tensor& p = parts[j];
      if (p.numel() > 0) {
        const int64_t lo = tg::amin(p).item<int64_t>(), hi = tg::amax(p).item<int64_t>();
        TG_CHECK(lo >= -n && hi < n, op, ": index ", lo < -n ? lo : hi, " is out of bounds for dim ", dim, " of size ",
                 n, " (shape ", shape_str(r.sizes()), ")");
      }
      index.push_back(tg::where(tg::lt(p, Scalar(int64_t(0))), p + Scalar(n), p));
      dims.push_back(dim);
      b = index.size() == 1 ? p.sizes() : broadcast_shapes(b, p.sizes(), op);
    }
  }
  // The indexed dims first, then the others in order: one flat dim of the
  // indexed ones, picked at the row-major positions of the indices.
  std::vector<int64_t> perm(dims), rest;
  for (int64_t k = 0; k < r.dim(); ++k)
    if (std::find(dims.begin(), dims.end(), k) == dims.end()) perm.push_back(k), rest.push_back(k);
  Tensor linear;
  int64_t stride = 1;
  for (size_t j = dims.size(); j-- > 0;) {
    const Tensor term = index[j] * Scalar(stride);
    linear = linear.defined() ? linear + term : term;
    stride *= r.size(dims[j]);
  }
  IntList flat{stride}, shape(b);
  for (int64_t k : rest) {
    flat.push_back(r.size(k));
    shape.push_back(r.size(k));
  }
  const Tensor picked = r.permute(IntList(perm.begin(), perm.end()))
                            .reshape(flat)
                            .index_select(0, linear.expand(b).reshape({-1}))
                            .reshape(shape);
  bool adjacent = true;
  for (size_t j = 1; j < dims.size(); ++j)
    adjacent = adjacent && dims[j] == dims[j - 1] + 1;
  if (!adjacent || dims[0] == 0) return picked;
  // B where the first indexed dim stood: after the rest's first dims[0] dims.
  const int64_t nb = int64_t(b.size()), d0 = dims[0];
  std::vector<int64_t> to;
  for (int64_t k = 0; k < d0; ++k)
    to.push_back(nb + k);
  for (int64_t k = 0; k < nb; ++k)
    to.push_back(k);
  for (int64_t k = nb + d0; k < int64_t(shape.size()); ++k)
    to.push_back(k);
  return picked.permute(IntList(to.begin(), to.end()));
}

// self indexed by `idx` (several tensor indices pick together: gather).
Indexed apply(const Tensor& self, const std::vector<TensorIndex>& idx, const char* op) {
  detail::check_defined(self, op, "self");
  int64_t used = 0, ellipses = 0, tensors = 0;
  for (const TensorIndex& i : idx) {
    used += dims_used(i);
    ellipses += i.kind() == Kind::Ellipsis;
    if (i.kind() == Kind::Tensor) {
      TG_CHECK(i.tensor().defined(), op, ": an index tensor is undefined");
      tensors += 1;
    }
  }
  TG_CHECK(ellipses <= 1, op, ": at most one Ellipsis (\"...\") per index, got ", ellipses);
  TG_CHECK(used <= self.dim(), op, ": ", used, " dims indexed but the tensor has ", self.dim(), " (shape ",
           shape_str(self.sizes()), ")");
  Indexed out{self};
  // Several tensor indices (PyTorch's advanced indexing): each stands in as
  // full slices while the others apply, then they pick together (gather).
  const bool several = tensors > 1;
  std::vector<std::pair<int64_t, Tensor>> picks;  // (dim of out.result, Int64 or Bool index)
  int64_t d = 0;                                  // the dim of out.result the next index applies to
  for (const TensorIndex& i : idx) {
    Tensor& r = out.result;
    if (several && i.kind() == Kind::Tensor) {
      const Tensor& t = i.tensor();
      TG_CHECK(t.dtype() == kInt64 || (t.dtype() == kBool && t.dim() > 0), op,
               ": an index tensor beside other index tensors must be Int64 or a Bool mask of at least one dim, got ",
               t.dtype(), " of shape ", shape_str(t.sizes()));
      TG_CHECK(t.device() == r.device(), op, ": the index tensor is on ", t.device(), " but the tensor on ",
               r.device());
      picks.emplace_back(d, t);
      d += dims_used(i);
      continue;
    }
    switch (i.kind()) {
      case Kind::None: r = r.unsqueeze(d), d += 1; break;
      case Kind::Ellipsis: d += self.dim() - used; break;
      case Kind::Integer: r = r.select(d, i.integer()); break;
      case Kind::Slice: {
        const indexing::Slice& s = i.slice();
        const int64_t step = s.step.value_or(1);
        TG_CHECK(step > 0, op, ": a slice's step must be positive, got ", step, " (flip the tensor instead)");
        r = r.slice(d, s.start, s.stop, step);
        d += 1;
        break;
      }
      case Kind::Tensor: {
        const Tensor& t = i.tensor();
        TG_CHECK(t.device() == r.device(), op, ": the index tensor is on ", t.device(), " but the tensor on ",
                 r.device());
        out.advanced = true;
        if (t.dtype() == kBool) {                // a mask over dims d .. d + k - 1: their selected positions as one dim
          if (t.dim() == 0) r = r.unsqueeze(d);  // x[true]: a new dim of 1 (of 0 for false), as PyTorch's
          const int64_t k = std::max<int64_t>(t.dim(), 1);
          const Tensor mask = t.dim() == 0 ? t.reshape({1}) : t;
          IntList shape = r.sizes();
          for (int64_t j = 0; j < k; ++j)
            TG_CHECK(mask.size(j) == shape[size_t(d + j)], op, ": the mask's shape ", shape_str(t.sizes()),
                     " does not match the indexed dims ", shape_str(IntList(shape.begin() + d, shape.begin() + d + k)),
                     " of shape ", shape_str(shape));
          IntList flat(shape.begin(), shape.begin() + d);
          flat.push_back(-1);
          flat.insert(flat.end(), r.sizes().begin() + d + k, r.sizes().end());
          const Tensor positions = tg::nonzero(mask.reshape({-1})).reshape({-1});
          r = r.reshape(flat).index_select(d, positions);
          d += 1;
        } else {
          TG_CHECK(t.dtype() == kInt64, op, ": a tensor index must be Int64 or Bool, got ", t.dtype());
          IntList shape = r.sizes();
          TG_CHECK(d < r.dim(), op, ": a tensor index past the last dim of shape ", shape_str(shape));
          // Negative indices count from the end, as PyTorch's; out of range
          // either way, index_select names it.
          const Tensor flat_index = t.reshape({-1});
          const Tensor wrapped =
              tg::where(tg::lt(flat_index, Scalar(int64_t(0))), flat_index + Scalar(shape[size_t(d)]), flat_index);
          Tensor picked = r.index_select(d, wrapped);
          IntList out_shape(shape.begin(), shape.begin() + d);
          out_shape.insert(out_shape.end(), t.sizes().begin(), t.sizes().end());
          out_shape.insert(out_shape.end(), shape.begin() + d + 1, shape.end());
          r = picked.reshape(out_shape);
          d += t.dim();
        }
        break;
      }
    }
  }
  if (several) out = {gather(out.result, picks, op), true};
  return out;
}

const Tensor& put(const Tensor& self, const std::vector<TensorIndex>& idx, const Tensor& value) {
  detail::check_defined(value, "index_put_", "value");
  Indexed sel = apply(self, idx, "index_put_");
  // value broadcasts to what the indices select (PyTorch's "shape mismatch")
  const IntList want = sel.result.sizes();
  bool fits = value.dim() <= int64_t(want.size());
  for (int64_t j = 1; fits && j <= value.dim(); ++j) {
    const int64_t v = value.sizes()[size_t(value.dim() - j)], w = want[want.size() - size_t(j)];
    fits = v == w || v == 1;
  }
  TG_CHECK(fits, "index_put_: a value of shape ", shape_str(value.sizes()),
           " does not broadcast to the indexed result's shape ", shape_str(want), " (tensor ", shape_str(self.sizes()),
           ")");
  const bool grad = self.requires_grad() || value.requires_grad();
  if (!sel.advanced && !grad) {  // a view of self: copy into it (value broadcast to it)
    sel.result.copy_(value.expand(want));
    return self;
  }
  sel.result = Tensor();  // no view of self may live at the write below
  // A tensor index, or autograd (which refuses an in-place write through a
  // view): the positions the indices select, found by applying them to
  // self's row-major positions; then self's values plus a scatter of the
  // differences there, written back (differentiable in self's other values
  // and in value).
  const Tensor where =
      apply(tg::arange(self.numel(), TensorOptions().dtype(kInt64).device(self.device())).reshape(self.sizes()), idx,
            "index_put_")
          .result.reshape({-1});
  const int64_t n = where.numel();
  if (n == 0) return self;
  bool integer_index = false;
  for (const TensorIndex& i : idx)
    integer_index |= i.kind() == Kind::Tensor && i.tensor().dtype() != kBool;
  if (integer_index && n > 1) {  // a mask or a slice selects each position once; indices may repeat one
    const Tensor sorted = std::get<0>(tg::sort(where));
    TG_CHECK(!tg::any(tg::eq(sorted.slice(0, 1), sorted.slice(0, 0, n - 1))).item<bool>(),
             "index_put_: the index selects an element more than once; which assignment wins would be arbitrary: "
             "give each position once");
  }
  const Tensor flat = self.reshape({-1}).clone();  // no view of self outlives this line
  const Tensor v = value.to(self.dtype()).expand(want).reshape({-1});
  const Tensor delta = tg::scatter_add(tg::zeros_like(flat), 0, where, v - flat.index_select(0, where));
  self.copy_((flat + delta).reshape(self.sizes()));
  return self;
}

std::vector<TensorIndex> as_vector(std::initializer_list<TensorIndex> l) { return std::vector<TensorIndex>(l); }

// op(x) written into x (x's old value cloned first when autograd may need it).
template <class Op> const Tensor& in_place(const Tensor& x, Op op, const char* name) {
  detail::check_defined(x, name, "self");
  const Tensor r = x.requires_grad() ? op(x.clone()) : op(x);
  // As PyTorch's: a result of another dtype (sqrt_ of an Int64 or Bool
  // tensor gives Float32) is not cast into x.
  TG_CHECK(r.dtype() == x.dtype(), name, ": the result is ", r.dtype(), " but the tensor is ", x.dtype(),
           "; in place cannot change the dtype: use the out-of-place op (x = op(x)) or convert x first");
  x.copy_(r);
  return x;
}

}  // namespace

Tensor Tensor::index(std::initializer_list<TensorIndex> indices) const {
  return apply(*this, as_vector(indices), "index").result;
}
Tensor Tensor::index(const std::vector<TensorIndex>& indices) const { return apply(*this, indices, "index").result; }
const Tensor& Tensor::index_put_(std::initializer_list<TensorIndex> indices, const Tensor& value) const {
  return put(*this, as_vector(indices), value);
}
const Tensor& Tensor::index_put_(std::initializer_list<TensorIndex> indices, Scalar value) const {
  return put(*this, as_vector(indices), tg::scalar_tensor(value, options()));
}
const Tensor& Tensor::index_put_(const std::vector<TensorIndex>& indices, const Tensor& value) const {
  return put(*this, indices, value);
}
const Tensor& Tensor::index_put_(const std::vector<TensorIndex>& indices, Scalar value) const {
  return put(*this, indices, tg::scalar_tensor(value, options()));
}

Tensor Tensor::cpu() const { return to(Device(kCPU)); }
Tensor Tensor::cuda(int index) const { return to(Device(kCUDA, index)); }

#define TG_IN_PLACE(name)                                               \
  const Tensor& Tensor::name##_() const {                               \
    return in_place(                                                    \
        *this, [](const Tensor& x) { return tg::name(x); }, #name "_"); \
  }
TG_IN_PLACE(abs)
TG_IN_PLACE(neg)
TG_IN_PLACE(exp)
TG_IN_PLACE(log)
TG_IN_PLACE(sqrt)
TG_IN_PLACE(rsqrt)
TG_IN_PLACE(square)
TG_IN_PLACE(reciprocal)
TG_IN_PLACE(sign)
TG_IN_PLACE(sin)
TG_IN_PLACE(cos)
TG_IN_PLACE(tanh)
TG_IN_PLACE(sigmoid)
TG_IN_PLACE(relu)
TG_IN_PLACE(floor)
TG_IN_PLACE(ceil)
TG_IN_PLACE(round)
TG_IN_PLACE(trunc)
#undef TG_IN_PLACE

const Tensor& Tensor::pow_(Scalar e) const {
  return in_place(
      *this, [&](const Tensor& x) { return tg::pow(x, e); }, "pow_");
}
const Tensor& Tensor::clamp_(std::optional<Scalar> min, std::optional<Scalar> max) const {
  return in_place(
      *this, [&](const Tensor& x) { return tg::clamp(x, min, max); }, "clamp_");
}
const Tensor& Tensor::clamp_min_(Scalar min) const {
  return in_place(
      *this, [&](const Tensor& x) { return tg::clamp_min(x, min); }, "clamp_min_");
}
const Tensor& Tensor::clamp_max_(Scalar max) const {
  return in_place(
      *this, [&](const Tensor& x) { return tg::clamp_max(x, max); }, "clamp_max_");
}
const Tensor& Tensor::masked_fill_(const Tensor& mask, Scalar value) const {
  return in_place(
      *this, [&](const Tensor& x) { return tg::masked_fill(x, mask, value); }, "masked_fill_");
}

const Tensor& Tensor::uniform_(double from, double to) const {
  detail::check_defined(*this, "uniform_", "self");
  TG_CHECK(std::isfinite(from) && std::isfinite(to) && from <= to, "uniform_: expected finite from <= to, got [", from,
           ", ", to, ")");
  copy_(tg::rand(sizes(), options()) * (to - from) + from);
  return *this;
}
const Tensor& Tensor::normal_(double mean, double std) const {
  detail::check_defined(*this, "normal_", "self");
  TG_CHECK(std::isfinite(mean) && std::isfinite(std) && std >= 0, "normal_: expected a finite mean and std >= 0, got ",
           mean, ", ", std);
  copy_(tg::randn(sizes(), options()) * std + mean);
  return *this;
}

}  // namespace tg
