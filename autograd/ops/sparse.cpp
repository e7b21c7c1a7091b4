// Differentiable sparse COO ops: sparse_coo_tensor (in its values), values,
// coalesce, to_dense, sum, sparse @ dense, and embedding / index_select with
// a sparse gradient. add, sub, neg, mul/div by a scalar, transpose, clone and
// to() record their usual nodes, whose formulas hold for either layout.
//
// A gradient with respect to a sparse tensor S is the gradient with respect
// to the dense tensor S stands for (the sum of S's entries at each
// coordinate); it may arrive dense or sparse (OURS: PyTorch keeps it sparse).
// sparse_coo_tensor turns it into the gradient of its values by reading it at
// S's indices, so an entry whose coordinate repeats gets the gradient at that
// coordinate, once. The gradients sum and mm produce therefore live on S's
// coalesced (unique) coordinates. The one representation-level gradient is
// that of _values(): on S's own indices tensor, entry by entry, and read back
// as it is (the shortcut below).
#include <tapegrad/tensor/error.h>

#include "autograd/ops/ops.h"
#include "autograd/ops/record.h"
#include "tensor/composite.h"

namespace tg {

using autograd::variable_list;
using namespace autograd::ops_detail;

namespace {

// d values = G[indices] for G dense, or G's values when G is sparse with the
// very same indices tensor (sum and mm build their gradients that way).
class SparseCooTensorBackward final : public OpNode {
 public:
  SparseCooTensorBackward(const Tensor& indices, IntList sizes)
      : OpNode("sparse_coo_tensor", "SparseCooTensorBackward"), indices_(indices, false), sizes_(std::move(sizes)) {}
  variable_list apply(variable_list&& grads) override {
    variable_list out(1);
    if (!should_compute_output(0)) return out;
    // Version-checked (indices changed in place would read the gradient at
    // other coordinates), and a second backward says so.
    const Tensor indices = indices_.unpack(this, "indices");
    Tensor g = grads[0];
    if (g.is_sparse() && raw::sparse_indices(g).is_same(indices)) {
      out[0] = g._values();
      return out;
    }
    if (g.is_sparse()) {
      // Read at our coordinates without densifying: coalesce (differentiable,
      // the dense tensor is the same), find each coordinate among the unique
      // entries, and take that entry's values (zeros where there is none).
      Tensor gc = coalesce(g);
      Tensor v = gc._values();
      IntList zero_row = v.sizes();
      zero_row[0] = 1;
      Tensor pos = raw::sparse_positions(gc, indices);
      out[0] = index_select(cat({v, zeros(zero_row, v.options())}, 0), 0, pos);
      return out;
    }
    int64_t sd = indices.sizes()[0];
    IntList flat = {-1};
    flat.insert(flat.end(), sizes_.begin() + sd, sizes_.end());
    Tensor lin = raw::sparse_linear_index(indices, IntList(sizes_.begin(), sizes_.begin() + sd));
    out[0] = index_select(g.reshape(flat), 0, lin);
    return out;
  }
  void release_variables() override { indices_.release(); }

 private:
  autograd::SavedVariable indices_;
  IntList sizes_;
};

// values(): the gradient of the values is a sparse tensor with S's indices.
class SparseValuesBackward final : public OpNode {
 public:
  SparseValuesBackward(const Tensor& indices, IntList sizes, bool coalesced)
      : OpNode("values", "ValuesBackward"), indices_(indices, false), sizes_(std::move(sizes)), coalesced_(coalesced) {}
  variable_list apply(variable_list&& grads) override {
    variable_list out(1);
    if (should_compute_output(0))
      out[0] = autograd::impl::sparse_coo_unchecked(indices_.unpack(this, "indices"), grads[0], sizes_, coalesced_);
    return out;
  }
  void release_variables() override { indices_.release(); }

 private:
  autograd::SavedVariable indices_;
  IntList sizes_;
  bool coalesced_;
};

// coalesce and to_dense keep the dense tensor S stands for: identity.
class SparseIdentityBackward final : public OpNode {
 public:
  SparseIdentityBackward(const char* op, const char* name) : OpNode(op, name) {}
  variable_list apply(variable_list&& grads) override {
    variable_list out(1);
    if (should_compute_output(0)) out[0] = grads[0];
    return out;
  }
};

// sum(S): g at every coordinate S stores (a sparse gradient on S's unique
// coordinates).
class SparseSumBackward final : public OpNode {
 public:
  explicit SparseSumBackward(const Tensor& s) : OpNode("sum", "SparseSumBackward"), s_(s, false) {}
  variable_list apply(variable_list&& grads) override {
    variable_list out(1);
    if (!should_compute_output(0)) return out;
    Tensor c = raw::coalesce(s_.unpack(this, "self"));
    out[0] = autograd::impl::sparse_coo_unchecked(raw::sparse_indices(c),
                                                  grads[0].expand(raw::sparse_values(c).sizes()), c.sizes(), true);
    return out;
  }
  void release_variables() override { s_.release(); }

 private:
  autograd::SavedVariable s_;  // S without history (its parts), version-checked
};

// Y = S @ D: dS = (dY D^T) sampled at S's unique coordinates (sparse, the
// coalesced S's indices), dD = S^T @ dY (sparse @ dense again). Both are
// differentiable.
class SparseMmBackward final : public OpNode {
 public:
  SparseMmBackward() : OpNode("mm", "SparseMmBackward") {}
  variable_list apply(variable_list&& grads) override {
    variable_list out(2);
    const Tensor& g = grads[0];
    Tensor s = sparse_.unpack(this, "self");
    if (should_compute_output(0)) {
      Tensor d = dense_.unpack(this, "mat2");
      Tensor i = raw::sparse_indices(raw::coalesce(s));
      Tensor rows = raw::select(i, 0, 0), cols = raw::select(i, 0, 1);
      Tensor vals = sum(mul(index_select(g, 0, rows), index_select(d, 0, cols)), {1});
      out[0] = autograd::impl::sparse_coo_unchecked(i, vals, s.sizes(), true);
    }
    if (should_compute_output(1)) out[1] = mm(s.t(), g);
    return out;
  }
  void release_variables() override {
    sparse_.release();
    dense_.release();
  }
  autograd::SavedVariable sparse_, dense_;
};

// Rows of x picked by a 1-D index; the gradient of x is sparse when asked.
class SelectRowsBackward final : public OpNode {
 public:
  SelectRowsBackward(const char* op, Tensor index, IntList sizes, bool sparse)
      : OpNode(op, std::string(op) == "embedding" ? (sparse ? "EmbeddingSparseBackward" : "EmbeddingBackward")
                                                  : "IndexSelectSparseBackward"),
        index_(index, false),
        sizes_(std::move(sizes)),
        sparse_(sparse) {}
  variable_list apply(variable_list&& grads) override {
    variable_list out(1);
    if (!should_compute_output(0)) return out;
    const Tensor& g = grads[0];
    // Version-checked: rows changed in place after the forward would get
    // the gradient of others (or, unchecked, land outside the gradient).
    const Tensor index = index_.unpack(this, "index");
    int64_t n = index.numel();
    if (sparse_) {
      out[0] = autograd::impl::sparse_coo_unchecked(index.reshape({1, n}), g, sizes_);
    } else {
      IntList shape(size_t(g.dim()), 1);
      shape[0] = n;
      out[0] = scatter_add(zeros(sizes_, g.options()), 0, index.view(shape).expand(g.sizes()), g);
    }
    return out;
  }
  void release_variables() override { index_.release(); }

 private:
  autograd::SavedVariable index_;
  IntList sizes_;
  bool sparse_;
};

Tensor select_rows(const Tensor& x, const Tensor& index, bool sparse, const char* op) {
  TG_CHECK(index.defined() && index.dim() == 1, op, ": expected a 1-D index, got ",
           index.defined() ? shape_str(index.sizes()) : std::string("an undefined tensor"));
  TG_CHECK(x.defined() && x.dim() >= 1, op,
           ": expected a tensor with at least one dim to "
           "select rows from");
  // Errors of the row lookup name the op the caller called (embedding).
  auto rows = [&] {
    try {
      return raw::index_select(x, 0, index);
    } catch (const Error& e) {
      if (std::string(op) == "index_select") throw;
      throw Error(std::string(op) + ": " + e.what());
    }
  };
  if (!should_record({&x}) && !fw_any({&x})) return rows();
  Tensor out = run_raw(rows);
  if (should_record({&x})) out = finish(out, make_node<SelectRowsBackward>({&x}, op, index, x.sizes(), sparse));
  return fw_linear(out, x, [&](const Tensor& t) { return tg::index_select(t, fw_dim(0, x.dim()), index); });
}

// A sparse op linear in x: `tangent_fn` applies it to x's tangent.
template <class N, class F, class T, class... Args>
Tensor unary_sparse_op(const Tensor& x, F&& raw_fn, T&& tangent_fn, Args&&... args) {
  if (!should_record({&x}) && !fw_any({&x})) return raw_fn();
  Tensor out = run_raw(raw_fn);
  if (out.is_same(x)) out = raw::detach(out);
  if (should_record({&x})) out = finish(out, make_node<N>({&x}, std::forward<Args>(args)...));
  return fw_linear(out, x, tangent_fn);
}

// sparse_coo_tensor is linear in its values: the tangent is the sparse
// tensor of the values' tangent on the same indices.
Tensor sparse_of_values(const Tensor& indices, const Tensor& values, const IntList& sizes, bool check, bool coalesced) {
  auto raw_fn = [&] { return raw::sparse_coo_tensor(indices, values, sizes, check, coalesced); };
  if (!should_record({&values}) && !fw_any({&values})) return raw_fn();
  Tensor out = run_raw(raw_fn);
  if (should_record({&values})) out = finish(out, make_node<SparseCooTensorBackward>({&values}, indices, sizes));
  return fw_linear(out, values, [&](const Tensor& t) {
    TG_CHECK(fw_batch() == 0, "sparse_coo_tensor: sparse tensors take no batched tangents (the values carry ",
             fw_batch(), " directions); use an unbatched forward_ad::dual_level");
    return autograd::impl::sparse_coo_unchecked(indices, t, sizes, coalesced);
  });
}

}  // namespace

namespace autograd::impl {
Tensor sparse_coo_unchecked(const Tensor& indices, const Tensor& values, const IntList& sizes, bool coalesced) {
  return sparse_of_values(indices, values, sizes, false, coalesced);
}
}  // namespace autograd::impl

Tensor autograd::ops::sparse_coo_tensor(const Tensor& indices, const Tensor& values, const IntList& sizes) {
  return sparse_of_values(indices, values, sizes, true, false);
}

Tensor autograd::ops::coalesce(const Tensor& s) {
  return unary_sparse_op<SparseIdentityBackward>(
      s, [&] { return raw::coalesce(s); }, [](const Tensor& t) { return tg::coalesce(t); }, "coalesce",
      "CoalesceBackward");
}

Tensor autograd::ops::to_dense(const Tensor& x) {
  TG_CHECK(x.defined(), "to_dense: input is an undefined tensor");
  if (!x.is_sparse()) return x;
  return unary_sparse_op<SparseIdentityBackward>(
      x, [&] { return raw::to_dense(x); }, [](const Tensor& t) { return tg::to_dense(t); }, "to_dense",
      "ToDenseBackward");
}

Tensor autograd::ops::_values(const Tensor& self) {
  Tensor v = raw::sparse_values(self);
  if (!should_record({&self}) && !fw_any({&self})) return v;
  v = raw::detach(v);
  if (should_record({&self}))
    v = finish(v,
               make_node<SparseValuesBackward>({&self}, raw::sparse_indices(self), self.sizes(), self.is_coalesced()));
  // Entry by entry: the tangent is sparse on the same indices (the tangent
  // of sparse_coo_tensor and of coalesce is).
  return fw_linear(v, self, [](const Tensor& t) { return t._values(); });
}

Tensor autograd::ops::values(const Tensor& self) {
  TG_CHECK(self.is_coalesced(), "values: the sparse tensor (shape ", shape_str(self.sizes()), ", nnz ", self.nnz(),
           ") is not coalesced; call .coalesce() first, or use ._values() "
           "for the values as stored");
  return _values(self);
}

namespace autograd::impl {
Tensor sparse_sum(const Tensor& s) {
  return unary_sparse_op<SparseSumBackward>(
      s, [&] { return raw::sparse_sum(s); }, [](const Tensor& t) { return tg::sum(t); }, raw::detach(s));
}

Tensor sparse_mm(const Tensor& s, const Tensor& d, const char* op) {
  auto raw_fn = [&] { return raw::sparse_mm(s, d, op); };
  const bool fw = fw_any({&s, &d});
  if (!should_record({&s, &d}) && !fw) return raw_fn();
  Tensor out = run_raw(raw_fn);
  if (should_record({&s, &d})) {
    auto node = make_node<SparseMmBackward>({&s, &d});
    node->sparse_ = SavedVariable(s, false);
    if (node->needs_input_grad(0)) node->dense_ = SavedVariable(d, false);
    out = finish(out, node);
  }
  if (fw) {  // bilinear: ts d + s td
    const Tensor ts = fw_t(s), td = fw_t(d);
    fw_rule(out, [&] {
      return fw_add(ts.defined() ? sparse_mm(ts, d, op) : Tensor(), td.defined() ? sparse_mm(s, td, op) : Tensor());
    });
  }
  return out;
}
}  // namespace autograd::impl

Tensor autograd::ops::embedding(const Tensor& weight, const Tensor& indices, bool sparse) {
  IntList shape = tg::detail::embedding_shape(weight, indices);
  return select_rows(weight, indices.reshape({-1}), sparse, "embedding").view(shape);
}

Tensor autograd::ops::index_select(const Tensor& x, int64_t dim, const Tensor& index, bool sparse_grad) {
  if (!sparse_grad) return tg::index_select(x, dim, index);
  TG_CHECK(x.defined() && (dim == 0 || dim == -x.dim()),
           "index_select: a sparse gradient "
           "is available for dim 0 only (rows), got dim ",
           dim);
  return select_rows(x, index, true, "index_select");
}

}  // namespace tg
