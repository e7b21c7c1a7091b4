// Sparse COO tensors: construction and validation, coalesce, the sparse ops
// against dense references, float64 gradcheck + gradgradcheck of every sparse
// op (compared as dense), and the accumulation rules of InputBuffer and
// AccumulateGrad for every layout pair, in place or out of place by storage
// identity. Each value test runs on the CPU and, where there is one, the GPU;
// the stream test needs a GPU and skips with a message without one.
#include "reference.h"

#include "autograd/accumulate_grad.h"
#include "autograd/input_buffer.h"
#include <tapegrad/cuda/allocator.h>
#include <tapegrad/cuda/stream.h>

namespace {

using tg::Device;
using tg::IntList;
using tg::Tensor;
using tg::autograd::variable_list;
namespace ag = tg::autograd;
using Fn = std::function<Tensor(const variable_list&)>;

const auto kF64 = tg::TensorOptions().dtype(tg::kFloat64);
const auto kI64 = tg::TensorOptions().dtype(tg::kInt64);

std::vector<Device> devices() {
  std::vector<Device> d{Device(tg::kCPU)};
  if (tg::cuda::is_available()) d.emplace_back(tg::kCUDA, 0);
  return d;
}

std::string where(const Device& d) { return d.is_cpu() ? "cpu" : "cuda"; }

Tensor idx(const std::vector<double>& v, IntList sizes, Device d = Device(tg::kCPU)) {
  return tg::tensor(v, sizes, kI64).to(d);
}

std::vector<double> V(const Tensor& t) { return tg::to_dense(t).to(tg::kFloat64).to_vector<double>(); }

// A random sparse tensor with duplicates: `nnz` entries over `sizes` (the
// first `sd` dims sparse), values standard normal; also its dense reference
// built element by element on the host.
struct Random {
  Tensor s, dense;
};
Random random_sparse(IntList sizes, int64_t sd, int64_t nnz, uint64_t seed, Device d,
                     tg::ScalarType dt = tg::kFloat64) {
  tg::manual_seed(seed);
  std::vector<double> ind;
  for (int64_t k = 0; k < sd; ++k) {
    Tensor r = (tg::rand({nnz}, kF64) * double(sizes[size_t(k)])).to(tg::kInt64);
    for (double x : r.to(tg::kFloat64).to_vector<double>())
      ind.push_back(x);
  }
  IntList vs = {nnz};
  vs.insert(vs.end(), sizes.begin() + sd, sizes.end());
  Tensor values = tg::randn(vs, kF64);
  std::vector<double> ref(size_t(tg::shape_numel(sizes)), 0.0);
  std::vector<double> vv = values.to_vector<double>();
  int64_t D = values.numel() / std::max<int64_t>(nnz, 1);
  for (int64_t j = 0; j < nnz; ++j) {
    int64_t lin = 0;
    for (int64_t k = 0; k < sd; ++k)
      lin = lin * sizes[size_t(k)] + int64_t(ind[size_t(k * nnz + j)]);
    for (int64_t c = 0; c < D; ++c)
      ref[size_t(lin * D + c)] += vv[size_t(j * D + c)];
  }
  Tensor s = tg::sparse_coo_tensor(idx(ind, {sd, nnz}, d), values.to(d).to(dt), sizes);
  return {s, tg::tensor(ref, sizes, kF64).to(d).to(dt)};
}

void expect_near(const std::vector<double>& a, const std::vector<double>& b, double tol, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_NEAR(a[i], b[i], tol * (1 + std::fabs(b[i]))) << what << " element " << i;
}

TEST(Sparse, ConstructInspectPrint) {
  for (Device d : devices()) {
    Tensor s = tg::sparse_coo_tensor(idx({0, 1, 1, 2, 0, 2}, {2, 3}, d), tg::tensor({3, 4, 5}, {}, kF64).to(d), {2, 3});
    EXPECT_TRUE(s.is_sparse());
    EXPECT_EQ(s.layout(), tg::kSparseCoo);
    EXPECT_EQ(s.device(), d);
    EXPECT_EQ(s.sparse_dim(), 2);
    EXPECT_EQ(s.dense_dim(), 0);
    EXPECT_EQ(s.nnz(), 3);
    EXPECT_EQ(s.sizes(), (IntList{2, 3}));
    EXPECT_FALSE(s.is_coalesced());
    EXPECT_EQ(V(s), (std::vector<double>{0, 0, 3, 4, 0, 5}));
    std::string p = s.to_string();
    EXPECT_NE(p.find("sparse_coo_tensor(indices=tensor([[0, 1, 1],"), std::string::npos) << p;
    EXPECT_NE(p.find("size=[2, 3], nnz=3, dtype=Float64"), std::string::npos) << p;
    // A dense dim: rows 0 and 2 of a [3, 2] matrix.
    Tensor h = tg::sparse_coo_tensor(idx({2, 0}, {1, 2}, d), tg::tensor({1, 2, 3, 4}, {2, 2}, kF64).to(d), {3, 2});
    EXPECT_EQ(h.sparse_dim(), 1);
    EXPECT_EQ(h.dense_dim(), 1);
    EXPECT_EQ(V(h), (std::vector<double>{3, 4, 0, 0, 1, 2})) << where(d);
  }
}

TEST(Sparse, ValidationAndErrors) {
  Tensor i = idx({0, 1, 2, 3}, {2, 2});
  Tensor v = tg::ones({2}, kF64);
  EXPECT_ERROR_CONTAINS(tg::sparse_coo_tensor(i, v, {2, 3}),
                        "sparse_coo_tensor: index 3 in sparse dim 1 is out of range for size 3");
  EXPECT_ERROR_CONTAINS(tg::sparse_coo_tensor(idx({0, -1}, {1, 2}), v, {2}),
                        "sparse_coo_tensor: index -1 in sparse dim 0 is out of range for size 2");
  EXPECT_ERROR_CONTAINS(tg::sparse_coo_tensor(tg::zeros({2, 2}, kF64), v, {2, 3}),
                        "indices must be an Int64 tensor of shape [sparse_dim, nnz]");
  EXPECT_ERROR_CONTAINS(tg::sparse_coo_tensor(i, tg::ones({3}, kF64), {4, 4}),
                        "values must have shape [nnz, dense sizes...] with nnz = indices.size(1) = 2");
  EXPECT_ERROR_CONTAINS(tg::sparse_coo_tensor(i, v, {4, 4, 4}), "must have sparse_dim + dense_dim = 2 + 0");
  Tensor s = tg::sparse_coo_tensor(idx({0, 0, 1, 1}, {2, 2}), v, {2, 2});
  EXPECT_ERROR_CONTAINS(tg::exp(s), "exp: input is a sparse COO tensor (shape [2, 2], nnz 2)");
  EXPECT_ERROR_CONTAINS(s.view({4}), "view: input is a sparse COO tensor");
  EXPECT_ERROR_CONTAINS(s.indices(), "indices: the sparse tensor");
  EXPECT_ERROR_CONTAINS(s.values(), "values: the sparse tensor");
  EXPECT_ERROR_CONTAINS(s + tg::ones({2, 3}, kF64), "add: a sparse COO operand needs an operand of the same shape");
  EXPECT_ERROR_CONTAINS(tg::mm(s, tg::ones({3, 2}, kF64)), "mm: shapes [2, 2] and [3, 2] cannot be multiplied");
  EXPECT_ERROR_CONTAINS(tg::index_select(tg::ones({2, 2}, kF64), 1, idx({0}, {1}), true),
                        "index_select: a sparse gradient is available for dim 0 only");
  Tensor d = tg::ones({2, 2}, kF64);
  EXPECT_ERROR_CONTAINS(s.add_(d), "add_: cannot add a dense tensor into a sparse one");
  // The library is usable after the errors.
  EXPECT_EQ(V(s + d), (std::vector<double>{1, 3, 1, 1}));  // (0, 1) twice: summed
}

TEST(Sparse, CoalesceSortsAndSumsDuplicates) {
  for (Device d : devices()) {
    Tensor s = tg::sparse_coo_tensor(idx({1, 0, 1, 0, 2, 1, 2, 1}, {2, 4}, d), tg::tensor({1, 2, 3, 4}, {}, kF64).to(d),
                                     {2, 3});
    Tensor c = s.coalesce();
    EXPECT_TRUE(c.is_coalesced());
    EXPECT_EQ(c.indices().to(Device(tg::kCPU)).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 1, 2}));
    EXPECT_EQ(c.values().to(Device(tg::kCPU)).to_vector<double>(), (std::vector<double>{6, 4}));
    EXPECT_TRUE(c.coalesce().is_same(c));  // already coalesced: itself
    // Larger, with dense dims and many duplicates, in float32 too.
    for (auto dt : {tg::kFloat64, tg::kFloat32}) {
      Random r = random_sparse({37, 23, 3}, 2, 4000, 7, d, dt);
      Tensor rc = r.s.coalesce();
      std::vector<int64_t> ii = rc.indices().to(Device(tg::kCPU)).to_vector<int64_t>();
      int64_t u = rc.nnz();
      EXPECT_LT(u, 37 * 23);
      for (int64_t j = 1; j < u; ++j) {
        int64_t a = ii[size_t(j - 1)] * 23 + ii[size_t(u + j - 1)], b = ii[size_t(j)] * 23 + ii[size_t(u + j)];
        ASSERT_LT(a, b) << "not sorted/unique at " << j << " on " << where(d);
      }
      expect_near(V(rc), V(r.dense), dt == tg::kFloat32 ? 1e-5 : 1e-12, "coalesce " + where(d));
      expect_near(V(r.s), V(r.dense), dt == tg::kFloat32 ? 1e-5 : 1e-12, "to_dense " + where(d));
    }
  }
}

TEST(Sparse, OpsMatchDense) {
  for (Device d : devices()) {
    Random a = random_sparse({20, 30}, 2, 150, 1, d), b = random_sparse({20, 30}, 2, 90, 2, d);
    tg::manual_seed(3);
    Tensor x = tg::randn({20, 30}, kF64).to(d), w = tg::randn({30, 7}, kF64).to(d);
    std::string on = where(d);
    Tensor sd = a.s + x;
    EXPECT_FALSE(sd.is_sparse());
    expect_near(V(sd), V(a.dense + x), 1e-12, "sparse + dense " + on);
    expect_near(V(x + a.s), V(x + a.dense), 1e-12, "dense + sparse " + on);
    expect_near(V(x - a.s), V(x - a.dense), 1e-12, "dense - sparse " + on);
    Tensor ss = a.s + b.s;
    EXPECT_TRUE(ss.is_sparse());
    EXPECT_EQ(ss.nnz(), 240);  // concatenated, not coalesced
    expect_near(V(ss), V(a.dense + b.dense), 1e-12, "sparse + sparse " + on);
    expect_near(V(tg::sub(a.s, b.s, 2)), V(a.dense - b.dense * 2.0), 1e-12, "sparse - 2 sparse " + on);
    // A scale other than 1 with sparse operands (the alpha's checks take them).
    expect_near(V(tg::add(x, a.s, 0.5)), V(x + a.dense * 0.5), 1e-12, "dense + 0.5 sparse " + on);
    expect_near(V(tg::sub(a.s, x, 3)), V(a.dense - x * 3.0), 1e-12, "sparse - 3 dense " + on);
    Tensor acc = a.s.clone();
    acc.add_(b.s, -1.5);
    EXPECT_TRUE(acc.is_sparse());
    expect_near(V(acc), V(a.dense - b.dense * 1.5), 1e-12, "sparse add_ -1.5 sparse " + on);
    acc.sub_(b.s, 2);
    expect_near(V(acc), V(a.dense - b.dense * 3.5), 1e-12, "sparse sub_ 2 sparse " + on);
    // Bool + alpha Bool is Bool (logical or; alpha 0 adds nothing), sparse
    // or dense on either side, in and out of place; no Bool subtraction.
    Tensor bi = idx({0, 1, 1, 1, 0, 1}, {2, 3}, d);
    Tensor sb = tg::sparse_coo_tensor(bi, tg::tensor({1.0, 0.0, 1.0}).to(tg::kBool).to(d), {2, 2});
    Tensor db = tg::tensor({0.0, 1.0, 0.0, 0.0}).to(tg::kBool).to(d).view({2, 2});
    const std::vector<double> sv = {0, 1, 0, 1}, both = {0, 1, 0, 1};
    for (const tg::Scalar al : {tg::Scalar(int64_t(2)), tg::Scalar(int64_t(0))}) {
      const bool none = al.to_int() == 0;
      for (const auto& [x1, x2, want] : std::vector<std::tuple<Tensor, Tensor, std::vector<double>>>{
               {sb, sb, none ? sv : sv}, {db, sb, none ? V(db) : both}, {sb, db, none ? sv : both}}) {
        Tensor r = tg::add(x1, x2, al);
        EXPECT_EQ(r.dtype(), tg::kBool) << on;
        EXPECT_EQ(V(r), want) << on << " alpha " << al.to_int();
      }
      Tensor sin = sb.clone();
      sin.add_(sb, al);
      EXPECT_EQ(sin.dtype(), tg::kBool) << on;
      EXPECT_EQ(V(sin), sv) << on;
    }
    EXPECT_ERROR_CONTAINS(tg::sub(sb, sb), "sub: subtracting Bool tensors is not supported");
    EXPECT_ERROR_CONTAINS(tg::sub(db, sb), "sub: subtracting Bool tensors is not supported");
    EXPECT_ERROR_CONTAINS(sb.clone().sub_(sb), "sub_: subtracting Bool tensors is not supported");
    // In place, the promoted dtype casts back as dense add_ does.
    Tensor d32 = tg::zeros({20, 30}, tg::TensorOptions().dtype(tg::kFloat32)).to(d);
    d32.add_(a.s, 2);
    EXPECT_EQ(d32.dtype(), tg::kFloat32);
    expect_near(V(d32), V(a.dense * 2.0), 1e-6, "f32 add_ 2 f64 sparse " + on);
    Tensor s32 = a.s.to(tg::kFloat32);
    s32.add_(b.s, 2);
    EXPECT_EQ(s32.dtype(), tg::kFloat32);
    EXPECT_EQ(s32._values().dtype(), tg::kFloat32);
    expect_near(V(s32), V(a.dense + b.dense * 2.0), 1e-6, "f32 sparse add_ 2 f64 sparse " + on);
    EXPECT_ERROR_CONTAINS(db - 1, "sub: subtracting from a Bool tensor");
    EXPECT_ERROR_CONTAINS(db.clone().sub_(1),
                          "sub_: subtracting Bool tensors is not supported (operands Bool and Int64)");
    EXPECT_ERROR_CONTAINS(tg::sub(db, db, 2), "sub: subtracting Bool tensors is not supported");
    EXPECT_ERROR_CONTAINS(db.to(tg::kFloat32).sub_(db), "sub_: subtracting Bool tensors is not supported");
    Tensor m = a.s * 2.5;
    EXPECT_TRUE(m.is_sparse());
    expect_near(V(m), V(a.dense * 2.5), 1e-12, "sparse * scalar " + on);
    expect_near(V(-a.s), V(-a.dense), 1e-12, "neg " + on);
    expect_near(V(a.s / 4.0), V(a.dense / 4.0), 1e-12, "div " + on);
    EXPECT_NEAR(a.s.sum().item<double>(), a.dense.sum().item<double>(), 1e-10) << on;
    expect_near(V(tg::mm(a.s, w)), V(tg::mm(a.dense, w)), 1e-10, "spmm " + on);
    expect_near(V(tg::matmul(a.s.t(), x)), V(tg::mm(a.dense.t(), x)), 1e-10, "spmm of S^T " + on);
    Random f = random_sparse({40, 50}, 2, 300, 4, d, tg::kFloat32);
    Tensor wf = w.to(tg::kFloat32);
    Tensor w50 = tg::randn({50, 9}, tg::TensorOptions().dtype(tg::kFloat32)).to(d);
    expect_near(V(tg::mm(f.s, w50)), V(tg::mm(f.dense, w50)), 1e-4, "spmm f32 " + on);
    // clone copies indices and values; detach shares them; to() moves.
    Tensor cl = a.s.clone();
    EXPECT_FALSE(cl._values().impl()->storage() == a.s._values().impl()->storage());
    EXPECT_TRUE(a.s.detach()._values().is_same(a.s._values()));
    expect_near(V(a.s.to(tg::kFloat32)), V(a.dense.to(tg::kFloat32)), 1e-6, "to(f32) " + on);
    expect_near(V(a.s.to(Device(tg::kCPU))), V(a.dense), 1e-12, "to(cpu) " + on);
  }
}

// Functions of dense leaves (values v [5], and x of the shape given) that go
// through the sparse ops; compared as dense. A sparse gradient goes only to
// a leaf of the weight's own shape (view backward takes dense gradients).
struct Case {
  const char* name;
  IntList x_shape;
  Fn fn;
};
// Index sets for the sparse leaf S [3, 4]: repeated and unsorted entries,
// coalesced ones, and none at all.
struct IndexSet {
  const char* name;
  std::vector<double> ind;  // [2, nnz] row-major
  int64_t nnz;
};
const IndexSet kIndexSets[] = {
    {"repeated+unsorted", {0, 2, 1, 0, 2, 0, 1, 3, 0, 1}, 5},  // (0,0) and (2,1) twice
    {"unsorted", {0, 2, 1, 0, 2, 0, 1, 3, 1, 0}, 5},
    {"coalesced", {0, 0, 1, 2, 2, 0, 3, 1, 0, 3}, 5},
    {"empty", {}, 0},
};

std::vector<Case> sparse_cases(Device d, const IndexSet& set = kIndexSets[0]) {
  Tensor i2 = idx(set.ind, {2, set.nnz}, d);
  IntList sz = {3, 4};
  auto S = [=](const Tensor& v) { return tg::sparse_coo_tensor(i2, v, sz); };
  Tensor rows = idx({1, 3, 1, 0}, {4}, d);
  return {
      {"to_dense", {12}, [=](const variable_list& in) { return tg::tanh(S(in[0]).to_dense()); }},
      {"sparse+dense", {3, 4}, [=](const variable_list& in) { return tg::tanh(S(in[0]) + in[1]); }},
      {"dense-sparse", {3, 4}, [=](const variable_list& in) { return tg::tanh(in[1] - S(in[0])); }},
      {"sparse+sparse",
       {12},
       [=](const variable_list& in) { return tg::tanh((S(in[0]) + S(tg::sin(in[0]))).to_dense()); }},
      {"sparse*scalar", {12}, [=](const variable_list& in) { return (S(in[0]) * 2.5).to_dense().square(); }},
      {"sum", {12}, [=](const variable_list& in) { return tg::square(S(in[0]).sum()); }},
      {"coalesce+values", {12}, [=](const variable_list& in) { return S(in[0]).coalesce().values().square(); }},
      {"spmm", {4, 3}, [=](const variable_list& in) { return tg::tanh(tg::mm(S(in[0]), in[1])); }},
      {"spmm of S^T", {3, 4}, [=](const variable_list& in) { return tg::tanh(tg::mm(S(in[0]).t(), in[1])); }},
      {"embedding sparse", {4, 3}, [=](const variable_list& in) { return tg::tanh(tg::embedding(in[1], rows, true)); }},
      {"index_select sparse",
       {4, 3},
       [=](const variable_list& in) { return tg::square(tg::index_select(in[1], 0, rows, true)) * in[0].sum(); }},
  };
}

TEST(Sparse, GradcheckAndGradgradcheck) {
  for (Device d : devices()) {
    for (const IndexSet& set : kIndexSets) {
      for (const Case& c : sparse_cases(d, set)) {
        const std::string name = std::string(c.name) + " (" + set.name + ")";
        Fn fn = c.fn;
        tg::manual_seed(11);
        Tensor v = (tg::rand({set.nnz}, kF64) * 2 - 1).requires_grad_(true);
        Tensor x = (tg::rand(c.x_shape, kF64) * 2 - 1).requires_grad_(true);
        Fn f = fn;
        if (d.is_cuda())  // leaves stay on the CPU (finite differences), work runs on the GPU
          f = [fn, d](const variable_list& in) { return fn({in[0].to(d), in[1].to(d)}).to(Device(tg::kCPU)); };
        auto r1 = ag::gradcheck(f, {v, x});
        EXPECT_TRUE(r1.ok) << name << " on " << where(d) << ": " << r1.message;
        auto r2 = ag::gradgradcheck(f, {v, x});
        EXPECT_TRUE(r2.ok) << name << " on " << where(d) << " gradgradcheck: " << r2.message;
      }
    }
  }
}

// f(v, D) = sum((S(v) @ D)^2) with S's entries (r_k, c_k) repeated and
// unsorted: the Hessian in v is H[j, k] = 2 [r_j == r_k] <D[c_j], D[c_k]>,
// against the closed form, through spmm and through to_dense.
TEST(Sparse, SecondDerivativesWithRepeatedCoordinatesMatchClosedForm) {
  for (Device d : devices()) {
    const std::vector<double> r = {0, 2, 1, 0, 2, 0}, c = {0, 1, 3, 0, 1, 2};  // (0,0), (2,1) twice
    std::vector<double> ind = r;
    ind.insert(ind.end(), c.begin(), c.end());
    Tensor I = idx(ind, {2, 6}, d);
    tg::manual_seed(5);
    Tensor D = tg::randn({4, 3}, kF64);
    Tensor v0 = tg::randn({6}, kF64);
    std::vector<double> dv = D.to_vector<double>();
    for (int via_dense = 0; via_dense < 2; ++via_dense) {
      Tensor v = v0.to(d).requires_grad_(true);
      Tensor Dd = D.to(d).requires_grad_(true);
      Tensor S = tg::sparse_coo_tensor(I, v, {3, 4});
      Tensor y = via_dense ? tg::mm(S.to_dense(), Dd) : tg::mm(S, Dd);
      Tensor f = tg::square(y).sum();
      auto g = ag::grad({f}, {v, Dd}, {}, std::nullopt, true);
      // Row j of the Hessian in v: d g_v[j] / dv.
      for (int64_t j = 0; j < 6; ++j) {
        Tensor h = ag::grad({g[0].select(0, j)}, {v}, {}, true)[0];
        std::vector<double> hv = h.to(Device(tg::kCPU)).to_vector<double>();
        for (int64_t k = 0; k < 6; ++k) {
          double e = 0;
          if (r[size_t(j)] == r[size_t(k)])
            for (int64_t m = 0; m < 3; ++m)
              e += 2 * dv[size_t(int64_t(c[size_t(j)]) * 3 + m)] * dv[size_t(int64_t(c[size_t(k)]) * 3 + m)];
          EXPECT_NEAR(hv[size_t(k)], e, 1e-12)
              << where(d) << (via_dense ? " via to_dense" : " via spmm") << " H[" << j << ", " << k << "]";
        }
      }
      // The mixed derivative d(sum g_D)/dv runs through g_D = S^T @ 2y (a
      // transposed sparse operand): the sparse path against the dense one.
      Tensor mixed = ag::grad({g[1].sum()}, {v})[0].to(Device(tg::kCPU));
      Tensor vr = v0.requires_grad_(false).to(d).requires_grad_(true);
      Tensor Dr = D.to(d).requires_grad_(true);
      Tensor yr = tg::mm(tg::sparse_coo_tensor(I, vr, {3, 4}).to_dense(), Dr);
      Tensor gr = ag::grad({tg::square(yr).sum()}, {Dr}, {}, std::nullopt, true)[0];
      Tensor mixed_ref = ag::grad({gr.sum()}, {vr})[0].to(Device(tg::kCPU));
      tgtest::expect_values(mixed, tgtest::values(mixed_ref), 1e-12, "d sum(dD) / dv");
    }
  }
}

TEST(Sparse, GradientsAreSparseWhereAsked) {
  for (Device d : devices()) {
    Tensor w = tg::randn({6, 3}, kF64).to(d).requires_grad_(true);
    Tensor rows = idx({4, 1, 4}, {3}, d);
    tg::embedding(w, rows, true).sum().backward();
    ASSERT_TRUE(w.grad().is_sparse()) << where(d);
    EXPECT_EQ(w.grad().nnz(), 3);
    EXPECT_EQ(V(w.grad()), (std::vector<double>{0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 2, 2, 2, 0, 0, 0}));
    Tensor w2 = tg::randn({6, 3}, kF64).to(d).requires_grad_(true);
    tg::embedding(w2, rows, false).sum().backward();
    EXPECT_FALSE(w2.grad().is_sparse());
    EXPECT_EQ(V(w2.grad()), V(w.grad()));
    EXPECT_EQ(tg::index_select(w2, 0, rows, true).grad_fn()->name(), "IndexSelectSparseBackward");
    // A second sparse backward accumulates in place on the .grad handle.
    Tensor h = w.grad();
    tg::embedding(w, idx({0}, {1}, d), true).sum().backward();
    EXPECT_TRUE(w.grad().is_same(h));
    EXPECT_EQ(w.grad().nnz(), 4);
    EXPECT_EQ(V(w.grad())[0], 1.0);
    // A sparse leaf gets a gradient through spmm: sparse, on its unique coordinates.
    Tensor vals = tg::ones({3}, kF64).to(d);
    Tensor s = tg::sparse_coo_tensor(idx({0, 1, 1, 0, 2, 1}, {2, 3}, d), vals, {2, 3}).requires_grad_(true);
    Tensor y = tg::ones({3, 2}, kF64).to(d).requires_grad_(true);
    tg::mm(s, y).sum().backward();
    ASSERT_TRUE(s.grad().is_sparse());
    EXPECT_EQ(V(s.grad()), (std::vector<double>{2, 0, 0, 0, 2, 2}));
    EXPECT_EQ(V(y.grad()), (std::vector<double>{1, 1, 1, 1, 1, 1}));  // S^T @ ones: one entry per column
    // A coordinate stored twice: the gradient of the dense tensor there is
    // counted once (d sum(S @ Y) / dS[0, 0] = sum of Y's row 0 = 2).
    Tensor s2 = tg::sparse_coo_tensor(idx({0, 0, 1, 0, 0, 2}, {2, 3}, d), vals, {2, 3}).requires_grad_(true);
    tg::mm(s2, y).sum().backward();
    EXPECT_EQ(V(s2.grad()), (std::vector<double>{2, 0, 0, 0, 0, 2})) << where(d);
  }
}

// Storage identity of a dense tensor, of both parts of a sparse one.
const void* data_of(const Tensor& t) {
  return t.is_sparse() ? t._values().impl()->storage().get() : t.impl()->storage().get();
}

// The rules are the same code on every device; on a GPU the buffers are CUDA
// tensors (the stream side is tested in SparseGpu below).
void input_buffer_rules(Device d) {
  tg::NoGradGuard no_grad;
  const auto o64 = kF64.device(d);
  auto sp = [d, o64] { return tg::sparse_coo_tensor(idx({1, 3}, {1, 2}, d), tg::ones({2}, o64), {4}); };
  // dense + sparse: into the dense side in place (uniquely owned, contiguous).
  Tensor old = tg::zeros({4}, o64);
  const void* before = data_of(old);
  EXPECT_TRUE(ag::accumulate_into_buffer(old, sp()));
  EXPECT_EQ(data_of(old), before);
  EXPECT_EQ(V(old), (std::vector<double>{0, 1, 0, 1}));
  // sparse + dense: into the incoming dense tensor in place.
  Tensor olds = sp();
  Tensor inc = tg::full({4}, 2.0, o64);
  const void* inc_data = data_of(inc);
  EXPECT_TRUE(ag::accumulate_into_buffer(olds, std::move(inc)));
  EXPECT_FALSE(olds.is_sparse());
  EXPECT_EQ(data_of(olds), inc_data);
  EXPECT_EQ(V(olds), (std::vector<double>{2, 3, 2, 3}));
  // Another tensor shares the dense storage: out of place, the sharer unchanged.
  Tensor base = tg::zeros({8}, o64);
  Tensor view = base.narrow(0, 0, 4);
  EXPECT_FALSE(ag::accumulate_into_buffer(view, sp()));
  EXPECT_NE(data_of(view), data_of(base));
  EXPECT_EQ(V(base), std::vector<double>(8, 0.0));
  EXPECT_EQ(V(view), (std::vector<double>{0, 1, 0, 1}));
  Tensor shared = tg::zeros({4}, o64), holder = shared;  // a second handle
  EXPECT_FALSE(ag::accumulate_into_buffer(shared, sp()));
  EXPECT_EQ(V(holder), std::vector<double>(4, 0.0));
  Tensor olds2 = sp();
  Tensor inc2 = tg::full({4}, 2.0, o64), holder2 = inc2;
  EXPECT_FALSE(ag::accumulate_into_buffer(olds2, std::move(inc2)));
  EXPECT_EQ(V(holder2), std::vector<double>(4, 2.0));
  EXPECT_EQ(V(olds2), (std::vector<double>{2, 3, 2, 3}));
  // Not contiguous: out of place.
  Tensor strided = tg::zeros({4, 2}, o64).select(1, 0);
  EXPECT_FALSE(ag::accumulate_into_buffer(strided, sp()));
  EXPECT_EQ(V(strided), (std::vector<double>{0, 1, 0, 1}));
  // sparse + sparse: a new sparse tensor, operands untouched.
  Tensor a = sp(), keep = a;
  EXPECT_FALSE(ag::accumulate_into_buffer(a, sp()));
  EXPECT_TRUE(a.is_sparse());
  EXPECT_EQ(a.nnz(), 4);
  EXPECT_EQ(keep.nnz(), 2);
  EXPECT_EQ(V(a), (std::vector<double>{0, 2, 0, 2}));
  // create_graph: never in place, whatever the pair.
  {
    tg::EnableGradGuard create_graph;
    Tensor o = tg::zeros({4}, o64);
    const void* od = data_of(o);
    EXPECT_FALSE(ag::accumulate_into_buffer(o, sp()));
    EXPECT_NE(data_of(o), od);
    Tensor os = sp();
    Tensor in3 = tg::zeros({4}, o64);
    const void* in3d = data_of(in3);
    EXPECT_FALSE(ag::accumulate_into_buffer(os, std::move(in3)));
    EXPECT_NE(data_of(os), in3d);
  }
}

void accumulate_grad_rules(Device d) {
  tg::NoGradGuard no_grad;
  const auto o64 = kF64.device(d);
  auto sp = [d, o64] { return tg::sparse_coo_tensor(idx({1, 3}, {1, 2}, d), tg::ones({2}, o64), {4}); };
  // No .grad: a sparse gradient whose parts are its own is stolen.
  Tensor p = tg::zeros({4}, o64);
  Tensor g = tg::sparse_coo_tensor(idx({1, 3}, {1, 2}, d), tg::ones({2}, o64), {4});
  const tg::TensorImpl* gi = g.impl();
  ag::accumulate_grad(p, p.mutable_grad(), std::move(g), 1);
  EXPECT_EQ(p.grad().impl(), gi);
  // ... one whose values are shared elsewhere is copied.
  Tensor q = tg::zeros({4}, o64);
  Tensor vals = tg::ones({2}, o64);
  Tensor g2 = tg::sparse_coo_tensor(idx({1, 3}, {1, 2}, d), vals, {4});
  ag::accumulate_grad(q, q.mutable_grad(), std::move(g2), 1);
  EXPECT_NE(q.grad()._values().impl()->storage().get(), vals.impl()->storage().get());
  vals.fill_(5.0);
  EXPECT_EQ(V(q.grad()), (std::vector<double>{0, 1, 0, 1}));  // unaffected
  // sparse .grad + sparse: in place on the handle.
  const tg::TensorImpl* qi = q.grad().impl();
  ag::accumulate_grad(q, q.mutable_grad(), sp(), 1);
  EXPECT_EQ(q.grad().impl(), qi);
  EXPECT_EQ(V(q.grad()), (std::vector<double>{0, 2, 0, 2}));
  // sparse .grad + dense: .grad becomes the incoming dense tensor (ours alone).
  Tensor dn = tg::ones({4}, o64);
  const void* dnd = data_of(dn);
  ag::accumulate_grad(q, q.mutable_grad(), std::move(dn), 1);
  EXPECT_FALSE(q.grad().is_sparse());
  EXPECT_EQ(data_of(q.grad()), dnd);
  EXPECT_EQ(V(q.grad()), (std::vector<double>{1, 3, 1, 3}));
  // dense .grad + sparse: in place (same storage, same handle).
  const tg::TensorImpl* qd = q.grad().impl();
  ag::accumulate_grad(q, q.mutable_grad(), sp(), 1);
  EXPECT_EQ(q.grad().impl(), qd);
  EXPECT_EQ(V(q.grad()), (std::vector<double>{1, 4, 1, 4}));
  // dense .grad whose storage another tensor shares: out of place.
  Tensor alias = q.grad().detach();
  ag::accumulate_grad(q, q.mutable_grad(), sp(), 1);
  EXPECT_NE(data_of(q.grad()), data_of(alias));
  EXPECT_EQ(V(alias), (std::vector<double>{1, 4, 1, 4}));
  EXPECT_EQ(V(q.grad()), (std::vector<double>{1, 5, 1, 5}));
  // create_graph: out of place, with history.
  {
    tg::EnableGradGuard create_graph;
    Tensor r = tg::zeros({4}, o64).requires_grad_(true);
    Tensor v = tg::ones({2}, o64).requires_grad_(true);
    Tensor sg = tg::sparse_coo_tensor(idx({1, 3}, {1, 2}, d), v, {4});
    ag::accumulate_grad(r, r.mutable_grad(), Tensor(sg), 1);
    EXPECT_TRUE(r.grad().requires_grad());
    const void* rd = data_of(r.grad());
    ag::accumulate_grad(r, r.mutable_grad(), Tensor(sg), 1);
    EXPECT_NE(data_of(r.grad()), rd);
    EXPECT_EQ(V(r.grad().detach()), (std::vector<double>{0, 2, 0, 2}));
  }
}

// In-place ops on a sparse tensor under autograd keep its handle and record
// (add_ of two sparse tensors, as the raw op); a second backward through
// sparse_coo_tensor or values() says retain_graph; indices changed in place
// after the forward are refused by the version check.
TEST(Sparse, InPlaceUnderAutogradAndSecondBackward) {
  for (Device d : devices()) {
    const std::string on = where(d);
    Tensor i = idx({0, 1, 1, 0, 2, 1}, {2, 3}, d);
    Tensor v = tg::tensor({1.0, 2.0, 3.0}, {3}, kF64).to(d).requires_grad_(true);
    Tensor w = tg::tensor({4.0, -1.0, 0.5}, {3}, kF64).to(d).requires_grad_(true);
    Tensor s = tg::sparse_coo_tensor(i, v, {3, 3});
    Tensor s2 = tg::sparse_coo_tensor(i, w, {3, 3});
    Tensor sm = s * 1.0;
    sm.add_(s2, 2);
    EXPECT_TRUE(sm.is_sparse()) << on;
    expect_near(V(sm), V(tg::sparse_coo_tensor(i, v.detach() + w.detach() * 2.0, {3, 3})), 1e-15, "add_ " + on);
    Tensor wt = tg::tensor({1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0}, {3, 3}, kF64).to(d);
    (tg::to_dense(sm) * wt).sum().backward();
    // the coordinates (0,0), (1,2), (1,1) weigh 1, 6, 5
    expect_near(V(v.grad()), {1.0, 6.0, 5.0}, 1e-15, "v grad " + on);
    expect_near(V(w.grad()), {2.0, 12.0, 10.0}, 1e-15, "w grad " + on);
    Tensor once = tg::sparse_coo_tensor(i, v, {3, 3});
    Tensor loss = (tg::to_dense(once) * wt).sum();
    loss.backward();
    EXPECT_ERROR_CONTAINS(loss.backward(), "backward through the graph a second time");
    Tensor vals = tg::sparse_coo_tensor(i, v, {3, 3}).coalesce().values();
    Tensor l2 = (vals * vals).sum();
    l2.backward();
    EXPECT_ERROR_CONTAINS(l2.backward(), "backward through the graph a second time");
    Tensor i2 = i.clone();
    Tensor late = tg::sparse_coo_tensor(i2, v, {3, 3});
    Tensor l3 = (tg::to_dense(late) * wt).sum();
    i2.zero_();
    EXPECT_ERROR_CONTAINS(l3.backward(), "modified by an in-place operation");
    // The parts of a saved sparse tensor are version-checked too: mm and sum
    // saved S itself, whose indices and values have counters of their own.
    Tensor wl = tg::tensor({1.0, 2.0, 3.0, 4.0, 5.0, 6.0}, {3, 2}, kF64).to(d).requires_grad_(true);
    Tensor iv = i.clone(), vv = v.detach() * 1.0;
    Tensor sp = tg::sparse_coo_tensor(iv, vv, {3, 3});
    Tensor lm = tg::mm(sp, wl).sum();
    iv.fill_(0);
    EXPECT_ERROR_CONTAINS(lm.backward(), "the indices of saved sparse tensor");
    Tensor sq = tg::sparse_coo_tensor(i, vv, {3, 3});
    Tensor lq = tg::mm(sq, wl).sum();
    vv.mul_(2.0);
    EXPECT_ERROR_CONTAINS(lq.backward(), "the values of saved sparse tensor");
    Tensor iw = i.clone();
    Tensor lsum = tg::sum(tg::sparse_coo_tensor(iw, v, {3, 3}) * 1.0);
    iw.zero_();
    EXPECT_ERROR_CONTAINS(lsum.backward(), "modified by an in-place operation");
    Tensor ok = tg::mm(tg::sparse_coo_tensor(i, v.detach() * 1.0, {3, 3}), wl).sum();
    ok.backward();  // unmodified: the gradient is S^T 1
    expect_near(V(wl.grad()), {1.0, 1.0, 3.0, 3.0, 2.0, 2.0}, 1e-15, "mm grad " + on);
    Tensor sbool = tg::sparse_coo_tensor(i, tg::tensor({1.0, 0.0, 1.0}, {3}, kF64).to(d).to(tg::kBool), {3, 3});
    EXPECT_ERROR_CONTAINS(-sbool, "neg: Bool tensors are not supported (a sparse Bool tensor");
    Tensor dense = tg::zeros({3, 3}, kF64).to(d);
    EXPECT_ERROR_CONTAINS(sm.add_(dense), "add_");
    (void)tg::ones({2}).sum().item<float>();  // still usable
  }
}

// Sparse in-place ops, recorded or not: mul_ and div_ by a number scale
// the values in place (the handle kept, its version bumped; a result its
// dtype cannot hold refused), and every refusal names the in-place op the
// user called (under autograd they run through the out-of-place op, whose
// name the message carried; sub_ of sparse operands said add_).
TEST(Sparse, InPlaceOpsScaleByNumbersAndNameThemselves) {
  const auto f32 = tg::TensorOptions().dtype(tg::kFloat32);
  Tensor i = idx({0, 1, 1, 0, 1, 1}, {2, 3});
  Tensor v = tg::tensor({1.5, -2, 4}, {3}, f32);
  for (bool recorded : {false, true}) {
    Tensor vals = recorded ? v.clone().requires_grad_() : v.clone();
    Tensor base = tg::sparse_coo_tensor(i, vals, {2, 2});
    Tensor s = base.clone();
    const auto* impl = s.impl();
    const int64_t version = s.version();
    s.mul_(2.0);
    EXPECT_EQ(s.impl(), impl);
    EXPECT_GT(s.version(), version);
    EXPECT_TRUE(tg::equal(s.to_dense(), base.to_dense().detach() * 2)) << recorded;
    s.div_(4);
    EXPECT_TRUE(tg::equal(s.to_dense(), base.to_dense().detach() / 2)) << recorded;
    if (recorded) {
      Tensor g = ag::grad({tg::sum(s.to_dense() * 3)}, {vals})[0];
      EXPECT_TRUE(tg::allclose(g, tg::full({3}, 1.5, f32), 1e-6, 1e-6));
    }
    const Tensor other = tg::sparse_coo_tensor(i, v, {3, 3});
    EXPECT_ERROR_CONTAINS(base.clone().add_(other), "add_: a sparse COO operand needs an operand of the same shape");
    EXPECT_ERROR_CONTAINS(base.clone().sub_(other), "sub_: a sparse COO operand needs an operand of the same shape");
    EXPECT_ERROR_CONTAINS(base.clone().add_(tg::ones({3, 3})), "add_: a sparse COO operand needs");
    EXPECT_ERROR_CONTAINS(base.clone().mul_(tg::ones({2, 2})), "mul_: ");
    EXPECT_ERROR_CONTAINS(base.clone().div_(tg::ones({2, 2})), "div_: ");
  }
  Tensor n = tg::sparse_coo_tensor(i, tg::tensor({1, 2, 3}, {3}, tg::TensorOptions().dtype(tg::kInt64)), {2, 2});
  n.mul_(3);
  EXPECT_TRUE(tg::equal(n.to_dense(), tg::tensor({3, 0, 0, 15}, {2, 2}, tg::TensorOptions().dtype(tg::kInt64))));
  EXPECT_ERROR_CONTAINS(n.mul_(2.5), "mul_: result dtype Float32 cannot be cast to Int64 in place");
  EXPECT_ERROR_CONTAINS(n.div_(2), "div_: result dtype");
  EXPECT_TRUE(tg::equal(n.to_dense(), tg::tensor({3, 0, 0, 15}, {2, 2}, tg::TensorOptions().dtype(tg::kInt64))));
  // Division divides (x / 7, not x * (1 / 7): those differ in 33 of these 64
  // float32 values), out of place and in place, as the dense op.
  Tensor rows = tg::zeros({2, 64}, tg::TensorOptions().dtype(tg::kInt64));
  rows.select(0, 1).copy_(tg::arange(64).to(tg::kInt64));
  Tensor x = tg::arange(64).to(tg::kFloat32) + 1;
  Tensor q = tg::sparse_coo_tensor(rows, x, {1, 64});
  EXPECT_TRUE(tg::equal(tg::div(q, 7).to_dense(), (x / 7).reshape({1, 64})));
  EXPECT_TRUE(tg::equal(q.clone().div_(7).to_dense(), (x / 7).reshape({1, 64})));
}

TEST(Sparse, InputBufferRulesForEveryLayoutPair) {
  for (Device d : devices())
    input_buffer_rules(d);
}

TEST(Sparse, AccumulateGradRulesForEveryLayoutPair) {
  for (Device d : devices())
    accumulate_grad_rules(d);
}

// Two branches produce sparse gradients for one embedding weight on side
// streams behind a delay: the accumulation must wait for both (events),
// and the sparse buffer's indices and values must survive allocator reuse.
TEST(SparseGpu, SparseGradientsAcrossStreams) {
  if (!tg::cuda::is_available())
    GTEST_SKIP() << "no CUDA GPU here (built with CUDA: " << (tg::cuda::is_built() ? "yes" : "no")
                 << "); this test runs on the GPU machine";
  Device d(tg::kCUDA, 0);
  Tensor w = tg::randn({1000, 64}, kF64).to(d).requires_grad_(true);
  Tensor r1 = idx({3, 5, 3}, {3}, d), r2 = idx({5, 999}, {2}, d);
  tg::cuda::Stream s1 = tg::cuda::stream_from_pool(0), s2 = tg::cuda::stream_from_pool(0);
  Tensor y1, y2;
  {
    tg::cuda::StreamGuard g(s1);
    tg::cuda::delay(s1, 50);  // 50 ms on the producer stream
    y1 = tg::embedding(w, r1, true).sum();
  }
  {
    tg::cuda::StreamGuard g(s2);
    y2 = (tg::embedding(w, r2, true) * 2.0).sum();
  }
  (y1 + y2).backward();
  ASSERT_TRUE(w.grad().is_sparse());
  std::vector<double> dense = V(w.grad());
  EXPECT_EQ(dense[3 * 64], 2.0);
  EXPECT_EQ(dense[5 * 64 + 7], 3.0);
  EXPECT_EQ(dense[999 * 64 + 63], 2.0);
  EXPECT_EQ(dense[0], 0.0);
  // The same through a dense .grad accumulation on the GPU.
  Tensor w2 = tg::randn({1000, 64}, kF64).to(d).requires_grad_(true);
  {
    tg::cuda::StreamGuard g(s1);
    tg::cuda::delay(s1, 50);
    y1 = tg::embedding(w2, r1, false).sum();
  }
  {
    tg::cuda::StreamGuard g(s2);
    y2 = (tg::embedding(w2, r2, true) * 2.0).sum();
  }
  (y1 + y2).backward();
  EXPECT_FALSE(w2.grad().is_sparse());
  EXPECT_EQ(V(w2.grad()), dense);
}

}  // namespace
