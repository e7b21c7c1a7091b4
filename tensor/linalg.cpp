// The linear algebra family's tensor layer: mm, bmm, matmul (NumPy
// semantics), linear; the tg::linalg ops (<tapegrad/tensor/linalg.def>: the
// primitives' raw entries, their public entries, the composites); then the
// CPU kernels (the GEMM, and the LinalgKernels table on Eigen's
// decompositions).
#include <cstdlib>
#include <memory>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <complex>
#include <cstdio>
#include <limits>
#include <sstream>
#include <type_traits>

#include <tapegrad/cuda/capture.h>
#include <tapegrad/tensor/linalg.h>

#include "tensor/env.h"
#include "tensor/linalg_kernels.h"
#include "tensor/op_table.h"
#include "tensor/op_util.h"

#include "tensor/composite.h"
#include <Eigen/Cholesky>
#include <Eigen/Core>
#include <Eigen/Eigenvalues>
#include <Eigen/LU>
#include <Eigen/QR>
#include <Eigen/SVD>
#include "tensor/cpu/loops.h"
#include "tensor/cpu/cpu_kernels.h"
#include "tensor/cpu/gemm.h"

namespace tg {

using detail::cast;
using detail::compute_type;

namespace {

void check_gemm_operands(const Tensor& a, const Tensor& b, const char* op) {
  detail::check_defined(a, op, "first operand");
  detail::check_defined(b, op, "second operand");
  detail::check_same_device(a, b, op);
  TG_CHECK(a.dtype() == b.dtype(), op, ": expected both operands to have the same dtype, got ", a.dtype(), " and ",
           b.dtype(), "; convert one with .to(dtype)");
  TG_CHECK(a.dtype() != kBool, op, ": Bool tensors are not supported");
}

// a: [B, n, k], b: [B, k, m] (checked) -> [B, n, m].
std::atomic<uint64_t> g_gemm_calls{0};
std::atomic<uint64_t> g_gemm_flops{0};

Tensor bmm_impl(const Tensor& a, const Tensor& b, const char* op) {
  g_gemm_calls.fetch_add(1, std::memory_order_relaxed);
  g_gemm_flops.fetch_add(
      2 * uint64_t(a.sizes()[0]) * uint64_t(a.sizes()[1]) * uint64_t(a.sizes()[2]) * uint64_t(b.sizes()[2]),
      std::memory_order_relaxed);
  ScalarType rt = a.dtype(), ct = compute_type(rt);
  // An outer product (inner size 1): one broadcast multiply, the same
  // products bit for bit; a GEMM library runs these far below bandwidth
  // (cuBLAS: 0.22 ms for 10^4 64 x 1 by 1 x 64 in float32 on an H200).
  if (a.sizes()[2] == 1 && (rt == kFloat32 || rt == kFloat64)) return raw::mul(a, b);
  IntList shape{a.sizes()[0], a.sizes()[1], b.sizes()[2]};
  Tensor out = detail::new_empty(shape, ct, a.device());
  kernels::backend(a.device(), op).bmm(out, cast(a, ct), cast(b, ct));
  return cast(out, rt);
}

void check_inner(const Tensor& a, const Tensor& b, int64_t ka, int64_t kb, const char* op) {
  TG_CHECK(ka == kb, op, ": cannot multiply ", shape_str(a.sizes()), " by ", shape_str(b.sizes()), " (", ka, " != ", kb,
           ")");
}

}  // namespace

namespace raw {

uint64_t gemm_calls() { return g_gemm_calls.load(std::memory_order_relaxed); }
uint64_t gemm_flops() { return g_gemm_flops.load(std::memory_order_relaxed); }

Tensor mm(const Tensor& a, const Tensor& b) {
  if (a.defined() && a.is_sparse()) return sparse_mm(a, b);
  check_gemm_operands(a, b, "mm");
  TG_CHECK(a.dim() == 2 && b.dim() == 2, "mm: expected 2-D tensors, got ", shape_str(a.sizes()), " and ",
           shape_str(b.sizes()));
  check_inner(a, b, a.sizes()[1], b.sizes()[0], "mm");
  return bmm_impl(a.unsqueeze(0), b.unsqueeze(0), "mm").squeeze(0);
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  check_gemm_operands(a, b, "bmm");
  TG_CHECK(a.dim() == 3 && b.dim() == 3, "bmm: expected 3-D tensors, got ", shape_str(a.sizes()), " and ",
           shape_str(b.sizes()));
  TG_CHECK(a.sizes()[0] == b.sizes()[0], "bmm: batch sizes differ: ", shape_str(a.sizes()), " and ",
           shape_str(b.sizes()));
  check_inner(a, b, a.sizes()[2], b.sizes()[1], "bmm");
  return bmm_impl(a, b, "bmm");
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  if (a.defined() && a.is_sparse()) return sparse_mm(a, b, "matmul");
  check_gemm_operands(a, b, "matmul");
  return detail::matmul_shapes<detail::RawOps>(a, b);
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  detail::check_defined(x, "linear", "input");
  detail::check_defined(w, "linear", "weight");
  TG_CHECK(w.dim() == 2, "linear: weight must be 2-D [out_features, in_features], got ", shape_str(w.sizes()));
  TG_CHECK(x.dim() >= 1 && x.sizes().back() == w.sizes()[1], "linear: input shape ", shape_str(x.sizes()),
           " doesn't match weight ", shape_str(w.sizes()), " (in_features ", w.sizes()[1], ")");
  TG_CHECK(x.dtype() == w.dtype(), "linear: input (", x.dtype(), ") and weight (", w.dtype(),
           ") must have the same dtype; convert one with .to(dtype)");
  detail::check_same_device(x, w, "linear");
  if (b.defined()) detail::check_same_device(x, b, "linear");
  if (b.defined()) {
    TG_CHECK(b.dim() == 1 && b.sizes()[0] == w.sizes()[0], "linear: bias shape ", shape_str(b.sizes()),
             " doesn't match weight ", shape_str(w.sizes()), " (out_features ", w.sizes()[0], ")");
    // As PyTorch's: no promotion through the bias (a Float64 bias would
    // silently turn a Float32 layer's output into Float64).
    TG_CHECK(b.dtype() == x.dtype(), "linear: bias (", b.dtype(), ") must have the input's and weight's dtype (",
             x.dtype(), "); convert it with .to(", x.dtype(), ")");
  }
  // A bias on a backend that adds it in the product (CUDA: the GEMM's
  // epilogue), for a contiguous input of two dims or more: one launch.
  const kernels::Backend& be = kernels::backend(x.device(), "linear");
  if (b.defined() && be.mm_bias && x.dim() >= 2 && x.is_contiguous() && b.is_contiguous() &&
      (x.dtype() == kFloat32 || x.dtype() == kFloat64) && b.dtype() == x.dtype() && x.numel() > 0 && w.size(0) > 0) {
    const int64_t in = w.size(1), rows = x.numel() / in;
    IntList shape = x.sizes();
    shape.back() = w.size(0);
    Tensor y = detail::new_empty({rows, w.size(0)}, x.dtype(), x.device());
    be.mm_bias(y, raw::view(x, {rows, in}), w.t(), b);
    return raw::view(y, shape);
  }
  Tensor y = raw::matmul(x, w.t());
  return b.defined() ? raw::add(y, b) : y;
}

}  // namespace raw

// ---- tg::linalg ------------------------------------------------------------------
namespace {

std::string shape_of(const Tensor& t) { return shape_str(t.sizes()); }

// Float32 or Float64 (the decompositions' dtypes; half types refused).
void check_float(const Tensor& t, const char* op, const char* what) {
  detail::check_defined(t, op, what);
  TG_CHECK(t.dtype() == kFloat32 || t.dtype() == kFloat64, op, ": expected ", what,
           " of dtype Float32 or Float64, got ", t.dtype(), "; convert it with .to(tg::kFloat64)");
}
// A matrix or a batch of them [..., m, n].
void check_matrix(const Tensor& t, const char* op, const char* what) {
  check_float(t, op, what);
  TG_CHECK(t.dim() >= 2, op, ": expected ", what, " to be a matrix or a batch of matrices [..., m, n], got ",
           shape_of(t));
}
void check_square(const Tensor& t, const char* op, const char* what = "A") {
  check_matrix(t, op, what);
  TG_CHECK(t.size(-1) == t.size(-2), op, ": expected ", what,
           " to be a square matrix or a batch of square matrices [..., n, n], got ", shape_of(t));
}
void check_pair(const Tensor& a, const Tensor& b, const char* op) {
  detail::check_same_device(a, b, op);
  TG_CHECK(a.dtype() == b.dtype(), op, ": expected both operands to have the same dtype, got ", a.dtype(), " and ",
           b.dtype(), "; convert one with .to(dtype)");
}

// A x = B (left) or x A = B: A square, B a matrix of the same dtype and
// device whose rows (left) or columns match A's size.
void check_system(const Tensor& A, const Tensor& Bm, bool left, const char* op, const char* a_name) {
  check_square(A, op, a_name);
  check_matrix(Bm, op, "B");
  check_pair(A, Bm, op);
  const int64_t n = A.size(-1), along = left ? Bm.size(-2) : Bm.size(-1);
  TG_CHECK(along == n, op, ": ", a_name, " ", shape_of(A), " and B ", shape_of(Bm), " do not match: B's ",
           left ? "rows" : "columns", " (", along, ") must equal ", a_name, "'s size (", n, ")");
}

IntList batch_of(const Tensor& t, int64_t matrix_dims = 2) {
  return IntList(t.sizes().begin(), t.sizes().end() - matrix_dims);
}
int64_t count(const IntList& batch) {
  int64_t b = 1;
  for (int64_t s : batch)
    b *= s;
  return b;
}
IntList join(IntList a, std::initializer_list<int64_t> tail) {
  a.insert(a.end(), tail.begin(), tail.end());
  return a;
}

// A fresh [B, r, c] copy of t ([..batch, r, c], expanded to `batch`) in
// batched column-major layout (strides {r c, 1, r}), the kernels' layout.
Tensor fortran_copy(const Tensor& t, const IntList& batch) {
  const int64_t r = t.size(-2), c = t.size(-1), B = count(batch);
  Tensor src = t.expand(join(batch, {r, c})).reshape({B, r, c});
  Tensor out = detail::new_empty({B, c, r}, t.dtype(), t.device());
  out.copy_(src.transpose(1, 2));
  return out.transpose(1, 2);
}
// A square operand [..batch, n, n] that a kernel only reads, as [B, n, n]
// in batched column-major layout without a copy where its memory allows:
// column-major already, or row-major (then the view is of A^T and `flipped`
// is set; the caller swaps upper/lower and the transpose). Else a copy.
Tensor read_operand(const Tensor& A, const IntList& batch, bool& flipped) {
  const int64_t n = A.size(-1);
  Tensor v = A.expand(join(batch, {n, n})).reshape({count(batch), n, n});
  const auto st = v.strides();
  flipped = false;
  if (n <= 1 || (st[1] == 1 && st[2] == n)) return v;
  if (st[2] == 1 && st[1] == n) {
    flipped = true;
    return v.transpose(1, 2);
  }
  return fortran_copy(A, batch);
}
// A fresh batched column-major [B, r, c] tensor.
Tensor fortran_empty(int64_t B, int64_t r, int64_t c, const Tensor& like) {
  return detail::new_empty({B, c, r}, like.dtype(), like.device()).transpose(1, 2);
}
Tensor int64_zeros(const IntList& s, Device d) {
  Tensor t = detail::new_empty(s, kInt64, d);
  t.fill_(0);
  return t;
}

const kernels::LinalgKernels& kern(const Tensor& t, const char* op) { return kernels::linalg_kernels(t.device(), op); }

std::string batch_index(int64_t b, const IntList& batch) {
  if (batch.empty()) return "";
  IntList idx(batch.size());
  for (size_t i = batch.size(); i-- > 0;) {
    idx[i] = b % batch[i];
    b /= batch[i];
  }
  std::ostringstream os;
  os << " (batch element " << shape_str(idx) << " of batch shape " << shape_str(batch) << ")";
  return os.str();
}

// Raises the first nonzero info (in batch order) as `op`: `what` with %v
// replaced by the value. On a capturing stream the check is the device's,
// raised at the next synchronization (kernels' report_info).
void check_info(const Tensor& info, const IntList& batch, const char* op, const char* what) {
  if (info.numel() == 0) return;
  Tensor host = info;
  if (info.device().type() == kCUDA) {
    if (cuda::is_current_stream_capturing()) {
      const auto& k = kern(info, op);
      TG_CHECK(k.report_info, op, ": cannot check its result while a CUDA graph captures; use the *_ex form");
      k.report_info(info.contiguous(), op, what);
      return;
    }
    host = info.to(Device(kCPU));
  }
  host = host.contiguous();
  const int64_t* v = static_cast<const int64_t*>(host.data_ptr());
  for (int64_t b = 0; b < host.numel(); ++b)
    if (v[b] != 0) {
      std::string w = what;
      const size_t at = w.find("%v");
      if (at != std::string::npos) w.replace(at, 2, std::to_string(v[b]));
      TG_ERROR(op, ": ", w, batch_index(b, batch));
    }
}

// The identity's first c columns as [batch..., r, c] (a fresh tensor).
Tensor eye_batch(const IntList& batch, int64_t r, int64_t c, const Tensor& like) {
  Tensor e = tg::eye(r, c, TensorOptions().dtype(like.dtype()).device(like.device()));
  return e.expand(join(batch, {r, c})).contiguous();
}

// Empty outputs (a zero-size batch or 0 x 0 matrices): the kernels see none.
bool is_empty(const Tensor& t) { return t.numel() == 0; }

}  // namespace

namespace detail {
Tensor permute_rows(const Tensor& X, const Tensor& p, const char* op) {
  const IntList s = broadcast_shapes(batch_of(X), batch_of(p, 1), op);
  Tensor Xb = X.expand(join(s, {X.size(-2), X.size(-1)}));
  return tg::gather(Xb, -2, p.unsqueeze(-1).expand(join(s, {p.size(-1), X.size(-1)})));
}
}  // namespace detail

namespace raw::linalg {

TensorPair cholesky_ex(const Tensor& A, bool upper, bool check_errors) {
  const char* op = "linalg.cholesky";
  check_square(A, op);
  const IntList batch = batch_of(A);
  const int64_t n = A.size(-1), B = count(batch);
  Tensor info = int64_zeros(batch, A.device());
  if (is_empty(A)) return {detail::new_empty(A.sizes(), A.dtype(), A.device()), info};
  const auto& k = kern(A, op);
  Tensor L;
  // The factor overwrites a copy of A (the kernels zero the other triangle).
  if (B > 1 && n <= k.batched_max_n) {
    // Row-major, the copy is the column-major A^T, whose upper triangle is
    // A's lower: its factor U (A = U^T U) read row-major is L, contiguous.
    Tensor c = detail::new_empty({B, n, n}, A.dtype(), A.device());
    c.copy_(A.expand(join(batch, {n, n})).reshape({B, n, n}));
    k.cholesky(c.transpose(1, 2), info.reshape({B}), true);
    L = c.reshape(join(batch, {n, n}));
  } else {
    Tensor a = fortran_copy(A, batch);  // column-major L
    k.cholesky(a, info.reshape({B}), false);
    L = a.reshape(join(batch, {n, n}));
  }
  if (check_errors)
    check_info(info, batch, op,
               "the input is not positive definite: its leading minor of order %v is not positive definite");
  return {upper ? L.transpose(-2, -1) : L, info};
}

Tensor solve_triangular(const Tensor& A, const Tensor& Bm, bool upper, bool left, bool unitriangular) {
  const char* op = "linalg.solve_triangular";
  check_system(A, Bm, left, op, "A");
  const int64_t n = A.size(-1);
  const IntList batch = broadcast_shapes(batch_of(A), batch_of(Bm), op);
  const int64_t k = left ? Bm.size(-1) : Bm.size(-2), B = count(batch);
  const IntList out_shape = join(batch, {left ? n : k, left ? k : n});
  if (B == 0 || n == 0 || k == 0) {
    Tensor out = detail::new_empty(out_shape, A.dtype(), A.device());
    out.fill_(0);
    return out;
  }
  // X A = B is A^T X^T = B^T: the kernel solves with A^T on B^T. A is read
  // in place when it is row- or column-major (row-major: the kernel sees
  // A^T, the other triangle, and transposes back).
  const auto& kt = kern(A, op);
  const Tensor rhs = left ? Bm : Bm.transpose(-2, -1);
  // The solution overwrites a copy of B: in B's own memory order where the
  // kernel takes any layout (a plain copy), else column-major.
  Tensor b;
  if (n <= kt.solve_any_layout_max_n && k <= kt.solve_any_layout_max_k && rhs.stride(-1) == 1) {
    b = detail::new_empty({B, n, k}, rhs.dtype(), rhs.device());
    b.copy_(rhs.expand(join(batch, {n, k})).reshape({B, n, k}));
  } else {
    b = fortran_copy(rhs, batch);
  }
  bool flipped = false;
  Tensor a = read_operand(A, batch, flipped);
  kt.triangular_solve(a, b, flipped ? !upper : upper, unitriangular, flipped ? left : !left);
  Tensor x = b.reshape(join(batch, {n, k}));
  return left ? x : x.transpose(-2, -1);
}

namespace {
// A vector right-hand side of solve: B [..., n] with A [..., n, n], as
// torch.linalg.solve reads it (B 1-D, or B's shape A's without the last dim).
bool vector_rhs(const Tensor& A, const Tensor& Bm) {
  if (Bm.dim() == 1) return true;
  return Bm.dim() == A.dim() - 1 && IntList(A.sizes().begin(), A.sizes().end() - 1) == Bm.sizes();
}
}  // namespace

TensorPair solve_ex(const Tensor& A, const Tensor& Bin, bool left, bool check_errors) {
  const char* op = "linalg.solve";
  check_square(A, op, "A");
  check_float(Bin, op, "B");
  check_pair(A, Bin, op);
  const bool vec = vector_rhs(A, Bin);
  TG_CHECK(left || !vec, op, ": B ", shape_of(Bin), " is read as a batch of vectors for A ", shape_of(A),
           ", which left=false does not take (as PyTorch); give B as matrices [..., k, n] (unsqueeze a batch dim) ",
           "or divide by A's single entry");
  Tensor Bm = vec ? Bin.unsqueeze(-1) : Bin;
  TG_CHECK(Bm.dim() >= 2, op, ": expected B to be a vector or a matrix (or batches of them), got ", shape_of(Bin));
  const int64_t n = A.size(-1);
  if (!left) Bm = Bm.transpose(-2, -1);
  TG_CHECK(Bm.size(-2) == n, op, ": A ", shape_of(A), " and B ", shape_of(Bin), " do not match: B's ",
           left ? "rows" : "columns", " (", Bm.size(-2), ") must equal A's size (", n, ")");
  const IntList abatch = batch_of(A);
  const IntList batch = broadcast_shapes(abatch, batch_of(Bm), op);
  const int64_t k = Bm.size(-1), B = count(batch);
  Tensor info = int64_zeros(batch, A.device());
  Tensor x;
  if (B == 0 || n == 0 || k == 0) {
    x = detail::new_empty(join(batch, {n, k}), A.dtype(), A.device());
    x.fill_(0);
  } else {
    Tensor lu = fortran_copy(A, batch);
    Tensor piv = detail::new_empty({B, n}, kInt64, A.device());
    const auto& kk = kern(A, op);
    kk.lu_factor(lu, piv, info.reshape({B}));
    if (check_errors) check_info(info, batch, op, "the input is singular: U's diagonal element %v is zero");
    Tensor b = fortran_copy(Bm, batch);
    kk.lu_solve(lu, piv, b, !left);
    x = b.reshape(join(batch, {n, k}));
  }
  if (!left) x = x.transpose(-2, -1);
  if (vec) x = x.squeeze(-1);
  return {x, info};
}

TensorPair slogdet(const Tensor& A) {
  const char* op = "linalg.slogdet";
  check_square(A, op);
  const IntList batch = batch_of(A);
  const int64_t n = A.size(-1), B = count(batch);
  if (is_empty(A)) {  // det of a 0 x 0 matrix is 1
    Tensor sign = detail::new_empty(batch, A.dtype(), A.device()),
           logabs = detail::new_empty(batch, A.dtype(), A.device());
    sign.fill_(1);
    logabs.fill_(0);
    return {sign, logabs};
  }
  Tensor lu = fortran_copy(A, batch);
  Tensor piv = detail::new_empty({B, n}, kInt64, A.device());
  Tensor info = int64_zeros({B}, A.device());
  kern(A, op).lu_factor(lu, piv, info);
  Tensor d = raw::diagonal(lu, 0, -2, -1);  // [B, n]
  Tensor logabs = raw::sum(raw::log(raw::abs(d)), {-1});
  // The permutation's sign: (-1)^(rows interchanged).
  Tensor swaps = raw::sum(raw::ne(piv, raw::add(detail::index_range(0, n, 1, A.device()), Scalar(1))), {-1});
  Tensor perm_sign = raw::sub(raw::mul(raw::remainder(swaps, 2).to(A.dtype()), -2.0), -1.0);
  // + 0: a singular matrix's sign is 0, not -0.
  Tensor sign = raw::add(raw::mul(raw::prod(raw::sign(d), -1), perm_sign), 0.0);
  return {sign.reshape(batch), logabs.reshape(batch)};
}

TensorTriple lu_factor_ex(const Tensor& A, bool pivot, bool check_errors) {
  const char* op = "linalg.lu_factor";
  check_square(A, op);
  TG_CHECK(pivot, op, ": only pivot=true (partial pivoting) is supported");
  const IntList batch = batch_of(A);
  const int64_t n = A.size(-1), B = count(batch);
  Tensor info = int64_zeros(batch, A.device());
  Tensor piv = detail::new_empty(join(batch, {n}), kInt64, A.device());
  if (is_empty(A)) return {detail::new_empty(A.sizes(), A.dtype(), A.device()), piv, info};
  Tensor lu = fortran_copy(A, batch);
  kern(A, op).lu_factor(lu, piv.view({B, n}), info.reshape({B}));
  if (check_errors) check_info(info, batch, op, "the input is singular: U's diagonal element %v is zero");
  return {lu.reshape(join(batch, {n, n})), piv, info};
}

TensorPair eigh(const Tensor& A, const std::string& UPLO) {
  const char* op = "linalg.eigh";
  check_square(A, op);
  TG_CHECK(UPLO == "L" || UPLO == "U", op, ": UPLO must be \"L\" or \"U\", got \"", UPLO, "\"");
  const IntList batch = batch_of(A);
  const int64_t n = A.size(-1), B = count(batch);
  Tensor w = detail::new_empty(join(batch, {n}), A.dtype(), A.device());
  if (is_empty(A)) return {w, detail::new_empty(A.sizes(), A.dtype(), A.device())};
  // The upper triangle of A is the lower one of A^T.
  Tensor a = fortran_copy(UPLO == "L" ? A : A.transpose(-2, -1), batch);
  Tensor v = fortran_empty(B, n, n, a);
  Tensor info = int64_zeros({B}, A.device());
  kern(A, op).eigh(a, w.view({B, n}), v, info);
  check_info(info, batch, op, "the eigenvalue algorithm did not converge (info %v)");
  return {w, v.reshape(join(batch, {n, n}))};
}

TensorPair qr(const Tensor& A, const std::string& mode) {
  const char* op = "linalg.qr";
  check_matrix(A, op, "A");
  TG_CHECK(mode == "reduced" || mode == "complete" || mode == "r", op,
           ": mode must be \"reduced\", \"complete\" or \"r\", got \"", mode, "\"");
  const IntList batch = batch_of(A);
  const int64_t m = A.size(-2), n = A.size(-1), B = count(batch), k = std::min(m, n);
  const int64_t kq = mode == "complete" ? m : k;
  Tensor q = mode == "r" ? Tensor() : fortran_empty(B, m, kq, A);
  Tensor r = fortran_empty(B, kq, n, A);
  if (B == 0 || m == 0 || n == 0) {
    // Q of an m x 0 matrix (complete): the identity; R: zeros.
    Tensor qq = mode == "r" ? detail::new_empty({0}, A.dtype(), A.device()) : eye_batch(batch, m, kq, A);
    Tensor rr = detail::new_empty(join(batch, {kq, n}), A.dtype(), A.device());
    rr.fill_(0);
    return {qq, rr};
  }
  Tensor a = fortran_copy(A, batch);
  kern(A, op).qr(a, q, r);
  Tensor Q = mode == "r" ? detail::new_empty({0}, A.dtype(), A.device()) : q.reshape(join(batch, {m, kq}));
  return {Q, r.reshape(join(batch, {kq, n}))};
}

TensorTriple svd(const Tensor& A, bool full_matrices) {
  const char* op = "linalg.svd";
  check_matrix(A, op, "A");
  const IntList batch = batch_of(A);
  const int64_t m = A.size(-2), n = A.size(-1), B = count(batch), k = std::min(m, n);
  const int64_t ku = full_matrices ? m : k, kv = full_matrices ? n : k;
  if (B == 0 || m == 0 || n == 0) {
    Tensor s = detail::new_empty(join(batch, {k}), A.dtype(), A.device());
    return {eye_batch(batch, m, ku, A), s, eye_batch(batch, kv, n, A)};
  }
  Tensor a = fortran_copy(A, batch);
  Tensor u = fortran_empty(B, m, ku, a), vh = fortran_empty(B, kv, n, a);
  Tensor s = detail::new_empty({B, k}, A.dtype(), A.device());
  Tensor info = int64_zeros({B}, A.device());
  kern(A, op).svd(a, u, s, vh, info);
  check_info(info, batch, op, "the SVD algorithm did not converge (info %v)");
  return {u.reshape(join(batch, {m, ku})), s.reshape(join(batch, {k})), vh.reshape(join(batch, {kv, n}))};
}

}  // namespace raw::linalg

namespace raw {
// The identity's first c columns as [batch..., r, c] (a fresh tensor).
Tensor eye_like_batch(const IntList& batch, int64_t r, int64_t c, const Tensor& like) {
  Tensor e = tg::eye(r, c, TensorOptions().dtype(like.dtype()).device(like.device()));
  return e.expand(join(batch, {r, c})).contiguous();
}
}  // namespace raw

namespace detail {
const LinalgOpTable* autograd_linalg_ops() {
  static const LinalgOpTable* table = tapegrad_autograd_linalg_ops ? tapegrad_autograd_linalg_ops() : nullptr;
  return table;
}
}  // namespace detail

// The primitives' public entries: the autograd layer's when linked.
namespace linalg {
#define TG_LINALG_IF_P_P(...) __VA_ARGS__
#define TG_LINALG_IF_P_C(...)
#define TG_D(...)
#define TG_LINALG(ret, name, id, params, args, kind, taylor)                                         \
  TG_LINALG_IF_P_##kind(ret name params {                                                            \
    if (const detail::LinalgOpTable* table_ = detail::autograd_linalg_ops()) return table_->id args; \
    return raw::linalg::name args;                                                                   \
  })
#include <tapegrad/tensor/linalg.def>
#undef TG_LINALG
#undef TG_D

namespace {
// The composites declared `X` (no Taylor rule) say so at themselves.
void no_taylor(const char* op, std::initializer_list<const Tensor*> inputs) {
  if (const detail::LinalgOpTable* t = detail::autograd_linalg_ops()) t->no_taylor_rule(op, inputs);
}
Tensor mT(const Tensor& t) { return t.transpose(-2, -1); }
}  // namespace

// ---- the composites: public ops only, so every mode differentiates them ----
Tensor cholesky(const Tensor& A, bool upper) { return std::get<0>(cholesky_ex(A, upper, true)); }

Tensor cholesky_solve(const Tensor& Bm, const Tensor& L, bool upper) {
  check_system(L, Bm, true, "linalg.cholesky_solve", "L");
  // A = L L^T: X = L^-T (L^-1 B); A = U^T U: X = U^-1 (U^-T B).
  if (upper) return solve_triangular(L, solve_triangular(mT(L), Bm, false), true);
  return solve_triangular(mT(L), solve_triangular(L, Bm, false), true);
}

Tensor solve(const Tensor& A, const Tensor& Bm, bool left) { return std::get<0>(solve_ex(A, Bm, left, true)); }

TensorPair inv_ex(const Tensor& A, bool check_errors) {
  check_square(A, "linalg.inv");
  Tensor I = eye_batch({}, A.size(-1), A.size(-1), A);
  TensorPair r = solve_ex(A, I.expand(A.sizes()), true, false);
  if (check_errors)
    check_info(std::get<1>(r), batch_of(A), "linalg.inv", "the input is singular: U's diagonal element %v is zero");
  return r;
}
Tensor inv(const Tensor& A) {
  check_square(A, "linalg.inv");
  auto [X, info] = inv_ex(A, false);
  check_info(info, batch_of(A), "linalg.inv", "the input is singular: U's diagonal element %v is zero");
  return X;
}

Tensor det(const Tensor& A) {
  check_square(A, "linalg.det");
  auto [sign, logabs] = slogdet(A);
  return tg::mul(sign, tg::exp(logabs));
}
Tensor logdet(const Tensor& A) {
  check_square(A, "linalg.logdet");
  auto [sign, logabs] = slogdet(A);
  return tg::add(logabs, tg::log(sign));  // log(-1) = NaN, log(0) = -inf (as torch.logdet)
}

TensorPair lu_factor(const Tensor& A, bool pivot) {
  no_taylor("linalg.lu_factor", {&A});
  auto [LU, piv, info] = lu_factor_ex(A, pivot, true);
  return {LU, piv};
}

Tensor lu_solve(const Tensor& LU, const Tensor& pivots, const Tensor& Bm, bool left, bool adjoint) {
  const char* op = "linalg.lu_solve";
  check_system(LU, Bm, left, op, "LU");
  const int64_t n = LU.size(-1);
  // Pivots exactly LU's shape without the last dim (no broadcasting: each
  // matrix has its own interchanges).
  const IntList want = IntList(LU.sizes().begin(), LU.sizes().end() - 1);
  TG_CHECK(pivots.defined() && pivots.dtype() == kInt64 && pivots.sizes() == want && pivots.device() == LU.device(), op,
           ": expected pivots of dtype Int64 and shape ", shape_str(want), " on ", LU.device(), " (lu_factor's), got ",
           pivots.defined() ? shape_of(pivots) + " of dtype " + to_string(pivots.dtype()) : std::string("undefined"));
  // Pivot i must lie in [i + 1, n] (LAPACK's ipiv): checked, one read.
  Tensor perm = detail::new_empty(pivots.sizes(), kInt64, pivots.device());
  if (pivots.numel() > 0) {
    if (pivots.is_cuda())  // item() below would name only itself
      cuda::detail::check_not_capturing(
          "linalg.lu_solve (it checks its pivots' ranges on the host; solve with the factor outside the capture, or "
          "use linalg.solve)",
          pivots.device().index());
    Tensor lo = tg::arange(1, n + 1, 1, TensorOptions().dtype(kInt64).device(pivots.device()));
    Tensor bad = raw::logical_or(raw::lt(pivots, lo), raw::gt(pivots, tg::full_like(pivots, n)));
    if (raw::any(bad).item<bool>()) {
      Tensor hb = bad.to(Device(kCPU)).contiguous(), hp = pivots.to(Device(kCPU)).contiguous();
      const bool* b = static_cast<const bool*>(hb.data_ptr());
      const int64_t* v = static_cast<const int64_t*>(hp.data_ptr());
      int64_t at = 0;
      while (!b[at])
        ++at;
      TG_ERROR(op, ": pivots[", at % n, "] = ", v[at], batch_index(at / n, IntList(want.begin(), want.end() - 1)),
               " is outside [", at % n + 1, ", ", n, "]: pivots must come from lu_factor");
    }
    kern(LU, op).pivots_to_permutation(pivots.contiguous().view({-1, n}), perm.view({-1, n}));
  }
  auto rows = [&](const Tensor& X, const Tensor& p) { return detail::permute_rows(X, p, op); };
  // A = P L U (L unit lower, U upper, both packed in LU).
  auto solve_left = [&](const Tensor& Bx) {  // A X = B: X = U^-1 L^-1 P^T B
    Tensor y = solve_triangular(LU, rows(Bx, perm), false, true, true);
    return solve_triangular(LU, y, true);
  };
  auto solve_adjoint = [&](const Tensor& Bx) {  // A^T X = B: X = P L^-T U^-T B
    Tensor y = solve_triangular(mT(LU), Bx, false);
    Tensor z = solve_triangular(mT(LU), y, true, true, true);
    return rows(z, tg::argsort(perm, -1));
  };
  if (left) return adjoint ? solve_adjoint(Bm) : solve_left(Bm);
  // X A = B is A^T X^T = B^T; X A^T = B is A X^T = B^T.
  return mT(adjoint ? solve_left(mT(Bm)) : solve_adjoint(mT(Bm)));
}

Tensor eigvalsh(const Tensor& A, const std::string& UPLO) {
  check_square(A, "linalg.eigvalsh");
  TG_CHECK(UPLO == "L" || UPLO == "U", "linalg.eigvalsh: UPLO must be \"L\" or \"U\", got \"", UPLO, "\"");
  return std::get<0>(eigh(A, UPLO));
}

Tensor svdvals(const Tensor& A) {
  check_matrix(A, "linalg.svdvals", "A");
  no_taylor("linalg.svdvals", {&A});
  return std::get<1>(svd(A, false));
}

TensorQuad lstsq(const Tensor& A, const Tensor& Bm) {
  const char* op = "linalg.lstsq";
  check_matrix(A, op, "A");
  check_matrix(Bm, op, "B");
  check_pair(A, Bm, op);
  no_taylor(op, {&A, &Bm});
  const int64_t m = A.size(-2), n = A.size(-1);
  TG_CHECK(Bm.size(-2) == m, op, ": A ", shape_of(A), " and B ", shape_of(Bm), " do not match: B's rows (", Bm.size(-2),
           ") must equal A's (", m, ")");
  Tensor X, residuals;
  if (m >= n) {  // A = Q R: X = R^-1 Q^T B
    auto [Q, R] = qr(A, "reduced");
    X = solve_triangular(R, tg::matmul(mT(Q), Bm), true);
    if (m > n) residuals = tg::sum(tg::pow(tg::sub(tg::matmul(A, X), Bm), 2.0), {-2});
  } else {  // the least-norm solution: A^T = Q R, X = Q R^-T B
    auto [Q, R] = qr(mT(A), "reduced");
    X = tg::matmul(Q, solve_triangular(mT(R), Bm, false));
  }
  const TensorOptions o = TensorOptions().dtype(A.dtype()).device(A.device());
  if (!residuals.defined()) residuals = tg::empty({0}, o);
  return {X, residuals, tg::empty({0}, TensorOptions().dtype(kInt64).device(A.device())), tg::empty({0}, o)};
}

Tensor matrix_exp(const Tensor& A) {
  const char* op = "linalg.matrix_exp";
  check_square(A, op);
  // Scaling and squaring with the degree-13 Pade approximant (Higham 2005):
  // exp(A) = r(A / 2^s)^(2^s), s from the largest 1-norm of the batch (one
  // read on the host).
  static const double b[] = {64764752532480000.0,
                             32382376266240000.0,
                             7771770303897600.0,
                             1187353796428800.0,
                             129060195264000.0,
                             10559470521600.0,
                             670442572800.0,
                             33522128640.0,
                             1323241920.0,
                             40840800.0,
                             960960.0,
                             16380.0,
                             182.0,
                             1.0};
  // An empty batch (or 0 x 0 matrices) has no norm to read: s = 0, and the
  // same ops still run (on no elements), so the result stays the same
  // function of A as for a nonempty batch. A shortcut (a copy of A) would be
  // linear in A: per_sample_hessian's structure probe, which runs fn on an
  // empty batch and watches which rules form second-order terms, took
  // matrix_exp's Hessian for zero.
  double norm1 = 0;
  if (A.numel() > 0) {
    // The read cannot be captured in a CUDA graph: refused naming the op
    // (item() would name only itself), the capture ended.
    if (A.is_cuda())
      cuda::detail::check_not_capturing(
          "linalg.matrix_exp (it chooses its scaling on the host from the batch's "
          "largest 1-norm, a read of device memory)",
          A.device().index());
    Tensor cols = raw::amax(raw::sum(raw::abs(A), {-2}), {-1});  // raw: reads values only
    norm1 = raw::amax(cols).to(kFloat64).item<double>();
  }
  const double theta13 = 5.371920351148152;
  int s = 0;
  if (std::isfinite(norm1) && norm1 > theta13) s = int(std::ceil(std::log2(norm1 / theta13)));
  Tensor X = s > 0 ? tg::mul(A, std::ldexp(1.0, -s)) : A;
  const int64_t n = A.size(-1);
  Tensor I = eye_batch({}, n, n, A);
  Tensor X2 = tg::matmul(X, X), X4 = tg::matmul(X2, X2), X6 = tg::matmul(X4, X2);
  auto lin = [&](double c6, double c4, double c2) {
    return tg::add(tg::add(tg::mul(X6, c6), tg::mul(X4, c4)), tg::mul(X2, c2));
  };
  Tensor U =
      tg::matmul(X, tg::add(tg::add(tg::matmul(X6, lin(b[13], b[11], b[9])), lin(b[7], b[5], b[3])), tg::mul(I, b[1])));
  Tensor V = tg::add(tg::add(tg::matmul(X6, lin(b[12], b[10], b[8])), lin(b[6], b[4], b[2])), tg::mul(I, b[0]));
  Tensor R = solve(tg::sub(V, U), tg::add(V, U));
  for (int i = 0; i < s; ++i)
    R = tg::matmul(R, R);
  return R;
}

Tensor pinv(const Tensor& A, std::optional<double> atol, std::optional<double> rtol, bool hermitian) {
  const char* op = "linalg.pinv";
  check_matrix(A, op, "A");
  no_taylor(op, {&A});
  const int64_t m = A.size(-2), n = A.size(-1);
  double eps = 0;
  kernels::dispatch_floating(A.dtype(), op,
                             [&](auto tag) { eps = double(std::numeric_limits<decltype(tag)>::epsilon()); });
  const double r = rtol ? *rtol : (atol && *atol > 0 ? 0.0 : double(std::max(m, n)) * eps);
  const double a = atol ? *atol : 0.0;
  TG_CHECK(a >= 0 && r >= 0, op, ": atol and rtol must be >= 0, got ", a, " and ", r);
  auto cutoff_inv = [&](const Tensor& s, const Tensor& mag) {  // 1/s where |s| > cutoff, else 0
    // The mask reads values only: a raw copy carries no derivative or tangent.
    const Tensor vals = raw::clone(mag);
    Tensor big = vals.size(-1) > 0 ? raw::amax(vals, {-1}, true) : vals;
    Tensor keep = raw::gt(vals, raw::clamp_min(raw::mul(big, r), a));
    return tg::where(keep, tg::reciprocal(tg::where(keep, s, tg::ones_like(s))), tg::zeros_like(s));
  };
  if (hermitian) {
    TG_CHECK(m == n, op, ": hermitian=true needs a square A, got ", shape_of(A));
    auto [w, V] = eigh(A);
    return tg::matmul(tg::mul(V, cutoff_inv(w, tg::abs(w)).unsqueeze(-2)), mT(V));
  }
  auto [U, S, Vh] = svd(A, false);
  return tg::matmul(tg::mul(mT(Vh), cutoff_inv(S, S).unsqueeze(-2)), mT(U));
}

namespace {
Tensor keep2(Tensor t, bool keepdim) { return keepdim ? t.unsqueeze(-1).unsqueeze(-1) : t; }
}  // namespace

Tensor matrix_norm(const Tensor& A, const std::string& ord, bool keepdim) {
  const char* op = "linalg.matrix_norm";
  check_matrix(A, op, "A");
  if (ord == "fro") return tg::sqrt(tg::sum(tg::mul(A, A), {-2, -1}, keepdim));
  TG_CHECK(ord == "nuc", op, ": ord must be \"fro\" or \"nuc\" (or a number: 1, -1, 2, -2, inf, -inf), got \"", ord,
           "\"");
  no_taylor(op, {&A});  // through the SVD
  return keep2(tg::sum(svdvals(A), {-1}), keepdim);
}

Tensor matrix_norm(const Tensor& A, double ord, bool keepdim) {
  const char* op = "linalg.matrix_norm";
  check_matrix(A, op, "A");
  const bool inf = std::isinf(ord);
  TG_CHECK(inf || ord == 1 || ord == -1 || ord == 2 || ord == -2, op,
           ": ord must be 1, -1, 2, -2, inf or -inf (or \"fro\", \"nuc\"), got ", ord);
  TG_CHECK(A.size(-1) > 0 && A.size(-2) > 0, op, ": ord ", ord, " is not defined for an empty matrix ", shape_of(A));
  Tensor t;
  if (ord == 2 || ord == -2) {
    no_taylor(op, {&A});  // through the SVD
    Tensor s = svdvals(A);
    t = ord > 0 ? tg::amax(s, {-1}) : tg::amin(s, {-1});
  } else {
    Tensor sums = tg::sum(tg::abs(A), {inf ? -1 : -2});  // row sums for inf, column sums for 1
    t = ord > 0 ? tg::amax(sums, {-1}) : tg::amin(sums, {-1});
  }
  return keep2(t, keepdim);
}

Tensor vector_norm(const Tensor& x, double ord, const IntList& dim, bool keepdim) {
  const char* op = "linalg.vector_norm";
  check_float(x, op, "x");
  TG_CHECK(!std::isnan(ord), op, ": ord must be a number (0, inf, -inf or any p), got NaN");
  {  // the dims, named here (the reductions below would name themselves)
    std::vector<bool> seen(size_t(std::max<int64_t>(x.dim(), 1)), false);
    for (int64_t d : dim) {
      const int64_t w = detail::wrap_dim(d, std::max<int64_t>(x.dim(), 1), op, x.sizes());
      TG_CHECK(!seen[size_t(w)], op, ": dim ", d, " appears twice in ", shape_str(dim));
      seen[size_t(w)] = true;
    }
  }
  if (ord == 0) return tg::sum(tg::ne(x, 0.0).to(x.dtype()), dim, keepdim);
  if (std::isinf(ord) || ord < 0) {
    // inf, -inf and negative p have no value over no element (no identity:
    // max, min, and (sum |x|^p)^(1/p) = 0^(1/p) = inf), so a reduction over
    // a zero-size dim is refused, as PyTorch's; an empty batch reduced over
    // nonempty dims gives an empty result.
    bool over_nothing = x.numel() == 0 && dim.empty();
    for (int64_t d : dim)
      over_nothing = over_nothing || (x.dim() > 0 && x.size(d) == 0);
    TG_CHECK(!over_nothing, op, ": ord ", ord, " is not defined for a reduction over no element (", shape_of(x),
             " over dims ", dim.empty() ? std::string("all") : shape_str(dim),
             "): it has no identity; reduce over nonempty dims");
  }
  if (std::isinf(ord)) {
    auto red = [&](const Tensor& a) {
      if (ord > 0) return dim.empty() && !keepdim ? tg::amax(a) : tg::amax(a, dim, keepdim);
      return dim.empty() && !keepdim ? tg::amin(a) : tg::amin(a, dim, keepdim);
    };
    return red(tg::abs(x));
  }
  // (sum |x|^p)^(1/p) for negative and fractional p (torch's); norm's fused
  // form for p >= 1.
  if (ord < 1) return tg::pow(tg::sum(tg::pow(tg::abs(x), ord), dim, keepdim), 1.0 / ord);
  return tg::norm(x, ord, dim, keepdim);
}

}  // namespace linalg

}  // namespace tg

// ---- the CPU kernels -------------------------------------------------------------
// CPU GEMM through Eigen maps (any row/column strides without copies);
// batches, or row blocks of one large product, run in parallel with TBB.
// float and double take the kernels of the widest instruction set the CPU
// has (tensor/cpu/gemm.h); complex ones these.

namespace tg::cpu {
namespace {

template <class T> using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T> using ColMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
using Stride = Eigen::OuterStride<>;

// C[r0:r1] = A[r0:r1] * B, C row-major contiguous with ldc = n.
template <class T, class MA, class MB>
void gemm_rows(const MA& a, const MB& b, T* c, int64_t n, int64_t r0, int64_t r1) {
  Eigen::Map<RowMat<T>> cm(c + r0 * n, r1 - r0, n);
  cm.noalias() = a.middleRows(r0, r1 - r0) * b;
}

template <class T, class MA>
void gemm_b(const MA& a, const T* b, const MatView& bv, T* c, int64_t n, int64_t r0, int64_t r1) {
  if (bv.row_major()) {
    Eigen::Map<const RowMat<T>, 0, Stride> bm(b, bv.rows, bv.cols, Stride(bv.rs));
    gemm_rows<T>(a, bm, c, n, r0, r1);
  } else {
    Eigen::Map<const ColMat<T>, 0, Stride> bm(b, bv.rows, bv.cols, Stride(bv.cs));
    gemm_rows<T>(a, bm, c, n, r0, r1);
  }
}

template <class T>
void gemm(const T* a, const MatView& av, const T* b, const MatView& bv, T* c, int64_t r0, int64_t r1) {
  if constexpr (std::is_same_v<T, float>) {
    gemm_kernels().f32(a, av, b, bv, c, r0, r1);
  } else if constexpr (std::is_same_v<T, double>) {
    gemm_kernels().f64(a, av, b, bv, c, r0, r1);
  } else {
    int64_t n = bv.cols;
    if (av.row_major()) {
      Eigen::Map<const RowMat<T>, 0, Stride> am(a, av.rows, av.cols, Stride(av.rs));
      gemm_b<T>(am, b, bv, c, n, r0, r1);
    } else {
      Eigen::Map<const ColMat<T>, 0, Stride> am(a, av.rows, av.cols, Stride(av.cs));
      gemm_b<T>(am, b, bv, c, n, r0, r1);
    }
  }
}

// The k blocks of one product [m, k] x [k, n] (bmm_kernel): products of
// fewer than 16 row blocks of kGemmRowsPerBlock rows whose k is long split
// k in blocks of at least 256, up to 16 tasks in all of at least 0.5 MFLOP;
// the partial products' buffers stay under 1 Mi elements. 1: no split.
constexpr int64_t kGemmRowsPerBlock = 16;
int64_t row_blocks(int64_t m) { return (m + kGemmRowsPerBlock - 1) / kGemmRowsPerBlock; }
int64_t k_blocks(int64_t m, int64_t n, int64_t k) {
  const int64_t rb = row_blocks(m);
  if (rb >= 16 || k < 512 || m * n > (int64_t(1) << 20) || !detail::switched_on<detail::OffSwitch::kCpuSplitInner>())
    return 1;
  const int64_t by_work = 2 * m * n * k / (rb << 19);
  const int64_t kb = std::min<int64_t>({k / 256, 16 / rb, by_work, (int64_t(1) << 20) / (m * n)});
  return std::max<int64_t>(kb, 1);
}

// One piece of a sum of products: A [m, len] (a, av) times B [len, n] (b, bv).
template <class T> struct GemmPiece {
  const T* a;
  MatView av;
  const T* b;
  MatView bv;
};

// C [m, n] (row-major contiguous) = (accumulate: +=) the sum of the pieces'
// products, in tasks of one piece and one block of kGemmRowsPerBlock rows,
// each piece into its own partial buffer (the first straight into C unless
// accumulating), the partials then added in order: the bits depend on the
// pieces alone, not on the worker count. At least one piece.
template <class T>
void gemm_pieces(const std::vector<GemmPiece<T>>& pieces, int64_t m, int64_t n, T* c, bool accumulate) {
  const int64_t rb = row_blocks(m), np = int64_t(pieces.size()), direct = accumulate ? 0 : 1;
  std::unique_ptr<T[]> part(new T[size_t((np - direct) * m * n)]);  // written whole by the tasks
  parallel_for(np * rb, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const GemmPiece<T>& pc = pieces[size_t(t / rb)];
      const int64_t r0 = (t % rb) * kGemmRowsPerBlock, r1 = std::min(m, r0 + kGemmRowsPerBlock);
      gemm<T>(pc.a, pc.av, pc.b, pc.bv, t / rb < direct ? c : part.get() + (t / rb - direct) * m * n, r0, r1);
    }
  });
  parallel_for(m * n, int64_t(1) << 14, [&](int64_t e0, int64_t e1) {
    for (int64_t j = 0; j < np - direct; ++j) {
      const T* pj = part.get() + j * m * n;
      for (int64_t e = e0; e < e1; ++e)
        c[e] += pj[e];
    }
  });
}

// The least multiply-adds x 2 of a row block of one product:
// TG_CPU_GEMM_BLOCK_FLOPS, by default 2^19. The CPU PINN step (B = 1024,
// products [1024, 64] x [64, 64]) on 16 cores: 8.65 ms at 2^20, 7.69 at
// 2^19, 7.61 at 2^18 (two runs each, one job).
int64_t gemm_block_flops() {
  static const int64_t v = [] {
    constexpr int64_t kDefault = int64_t(1) << 19;
    const double x = tg::detail::env_number("TG_CPU_GEMM_BLOCK_FLOPS", double(kDefault));
    return x < 1 ? kDefault : int64_t(std::min(x, 0x1p62));
  }();
  return v;
}

MatView view_of(const Tensor& t) {  // t: [B, r, c]
  return {t.sizes()[1], t.sizes()[2], t.strides()[1], t.strides()[2]};
}

void bmm_kernel(const Tensor& out, const Tensor& a_in, const Tensor& b_in) {
  int64_t batch = a_in.sizes()[0], m = a_in.sizes()[1], k = a_in.sizes()[2];
  int64_t n = b_in.sizes()[2];
  if (out.numel() == 0) return;
  if (k == 0) {
    kernels::cpu_backend().fill(out, 0);
    return;
  }
  Tensor a = a_in, b = b_in;
  if (!view_of(a).either_major()) a = a.contiguous();
  if (!view_of(b).either_major()) b = b.contiguous();
  MatView av = view_of(a), bv = view_of(b);
  int64_t esz = int64_t(element_size(out.dtype()));
  char* a0 = static_cast<char*>(a.data_ptr());
  char* b0 = static_cast<char*>(b.data_ptr());
  char* c0 = static_cast<char*>(out.data_ptr());
  int64_t sa = a.strides()[0] * esz, sb = b.strides()[0] * esz, sc = m * n * esz;
  auto run = [&](auto tag) {
    using T = decltype(tag);
    auto one = [&](int64_t i, int64_t r0, int64_t r1) {
      gemm<T>(reinterpret_cast<const T*>(a0 + i * sa), av, reinterpret_cast<const T*>(b0 + i * sb), bv,
              reinterpret_cast<T*>(c0 + i * sc), r0, r1);
    };
    const int64_t flops_per_row = 2 * n * k;
    if (batch > 1) {
      int64_t grain = std::max<int64_t>(1, (int64_t(1) << 22) / std::max<int64_t>(flops_per_row * m, 1));
      parallel_for(batch, grain, [&](int64_t b0_, int64_t e) {
        for (int64_t i = b0_; i < e; ++i)
          one(i, 0, m);
      });
    } else if (const int64_t kb = k_blocks(m, n, k); kb > 1) {
      // Few rows and a long k (a weight gradient g^T x: [64, 1024] x [1024,
      // 64]) leave too few row blocks for the workers: k is split too, in
      // blocks fixed by the shape (not by the worker count, so the sums are
      // the same on any machine). Block j's partial product goes to its own
      // buffer (block 0's to C) and the partials are added in order.
      const int64_t kk = (k + kb - 1) / kb;
      const T* a = reinterpret_cast<const T*>(a0);
      const T* b = reinterpret_cast<const T*>(b0);
      std::vector<GemmPiece<T>> pieces;
      for (int64_t k0 = 0; k0 < k; k0 += kk) {
        const int64_t len = std::min(kk, k - k0);
        pieces.push_back({a + k0 * av.cs, {av.rows, len, av.rs, av.cs}, b + k0 * bv.rs, {len, bv.cols, bv.rs, bv.cs}});
      }
      gemm_pieces<T>(pieces, m, n, reinterpret_cast<T*>(c0), /*accumulate=*/false);
    } else {
      // One product: split rows in about one block per worker (each block
      // packs all of B: more, smaller blocks would pack it more often), of
      // at least 0.5 MFLOP (gemm_block_flops) and 16 rows. A training step's products are small
      // ([1024, 64] x [64, 64]: 8 MFLOP; a weight gradient [64, 1024] x
      // [1024, 64]) and ran on one core under a 16 MFLOP minimum per block.
      // Blocks start at multiples of 16 rows (a whole number of the
      // kernels' widest packets), so each row takes the same kernel path
      // and the same sums whatever the worker count: the bits of C do not
      // depend on it (the k blocking depends on k alone).
      const int64_t per_worker = (m + parallel_workers() - 1) / parallel_workers();
      int64_t grain =
          std::max<int64_t>({kGemmRowsPerBlock, per_worker, gemm_block_flops() / std::max<int64_t>(flops_per_row, 1)});
      grain = (grain + kGemmRowsPerBlock - 1) / kGemmRowsPerBlock * kGemmRowsPerBlock;
      parallel_for((m + grain - 1) / grain, 1, [&](int64_t b0_, int64_t e) {
        for (int64_t i = b0_; i < e; ++i)
          one(0, i * grain, std::min(m, (i + 1) * grain));
      });
    }
  };
  // Complex: Eigen's complex GEMM on std::complex (tg::complex's layout).
  if (kernels::dispatch_if<is_complex>(out.dtype(), [&](auto tag) {
        using R = decltype(decltype(tag){}.re);
        run(std::complex<R>{});
      }))
    return;
  dispatch_compute(out.dtype(), "bmm", run);
}

// mm_sum (kernels.h): out (+)= sum_i l_i^T r_i for outputs of fewer than
// 16 row blocks (weight gradients of narrow layers), in tasks of one row
// block and one k block of one product, each into its own partial buffer
// (the first straight into out when not accumulating), the partials then
// added in order: a double backward's weight gradient sums 5-10 products
// [1024, 64]^T [1024, 64], which the engine would otherwise copy into one
// [k, 64] pair of operands. Blocks are fixed by the shapes.
bool mm_sum_kernel(const Tensor& out, const std::vector<std::pair<Tensor, Tensor>>& products, bool accumulate) {
  const int64_t m = out.size(0), n = out.size(1);
  const int64_t rb = row_blocks(m);
  if (products.empty() || rb >= 16 || m * n > (int64_t(1) << 20) || !out.is_contiguous()) return false;
  int64_t K = 0;
  for (const auto& [l, r] : products) {
    if (l.dim() != 2 || r.dim() != 2 || l.dtype() != out.dtype() || r.dtype() != out.dtype() || l.is_cuda() ||
        r.is_cuda() || l.size(1) != m || r.size(1) != n || l.size(0) != r.size(0))
      return false;
    K += l.size(0);
  }
  if (m == 0 || n == 0) return true;
  // Each product's k in blocks of kk: up to 16 tasks over all of K.
  const int64_t kk = std::max<int64_t>(256, (K + 16 / rb - 1) / (16 / rb));
  int64_t nseg = 0;
  for (const auto& [l, r] : products)
    nseg += (l.size(0) + kk - 1) / kk;
  if ((nseg - (accumulate ? 0 : 1)) * m * n > (int64_t(1) << 22)) return false;
  if (nseg == 0) {  // every k_i is 0
    if (!accumulate) kernels::cpu_backend().fill(out, 0);
    return true;
  }
  // A = l^T [m, k] and B = r [k, n] read in place where row- or
  // column-major, else copied.
  std::vector<Tensor> as, bs;
  for (const auto& [l, r] : products) {
    const Tensor a = l.t();
    as.push_back(view_of(a.unsqueeze(0)).either_major() ? a : l.contiguous().t());
    bs.push_back(view_of(r.unsqueeze(0)).either_major() ? r : r.contiguous());
  }
  kernels::dispatch_floating(out.dtype(), "mm_sum", [&](auto tag) {
    using T = decltype(tag);
    std::vector<GemmPiece<T>> pieces;
    for (size_t i = 0; i < as.size(); ++i) {
      const MatView av = view_of(as[i].unsqueeze(0)), bv = view_of(bs[i].unsqueeze(0));
      for (int64_t k0 = 0; k0 < av.cols; k0 += kk) {
        const int64_t len = std::min(kk, av.cols - k0);
        pieces.push_back({as[i].data_ptr<T>() + k0 * av.cs,
                          {m, len, av.rs, av.cs},
                          bs[i].data_ptr<T>() + k0 * bv.rs,
                          {len, n, bv.rs, bv.cs}});
      }
    }
    gemm_pieces<T>(pieces, m, n, out.data_ptr<T>(), accumulate);
  });
  return true;
}

}  // namespace

void register_linalg(kernels::Backend& b) {
  b.bmm = bmm_kernel;
  if (detail::switched_on<detail::OffSwitch::kCpuFusedBackward>()) b.mm_sum = mm_sum_kernel;
}

}  // namespace tg::cpu

// ---- the CPU LinalgKernels: Eigen's decompositions on column-major maps,
// batches in parallel (TBB).
namespace tg::cpu {
namespace {

template <class T> using ColMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
template <class T> using MapMat = Eigen::Map<ColMat<T>>;
template <class T> using MapVec = Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, 1>>;

// Matrix b of a batched column-major [B, r, c] tensor.
template <class T> MapMat<T> mat(const Tensor& t, int64_t b) {
  return MapMat<T>(static_cast<T*>(t.data_ptr()) + b * t.strides()[0], t.sizes()[1], t.sizes()[2]);
}
int64_t* i64(const Tensor& t) { return static_cast<int64_t*>(t.data_ptr()); }

// Calls f(T{}, b) for every batch element, in parallel.
template <class F> void each_matrix(const Tensor& t, const char* op, int64_t work, F&& f) {
  const int64_t B = t.sizes()[0];
  const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 18) / std::max<int64_t>(work, 1));
  auto run = [&](auto tag) {
    using T = decltype(tag);
    parallel_for(B, grain, [&](int64_t b0, int64_t e) {
      for (int64_t b = b0; b < e; ++b)
        f(T{}, b);
    });
  };
  kernels::dispatch_floating(t.dtype(), op, run);
}

void cholesky_kernel(const Tensor& a, const Tensor& info, bool upper) {
  const int64_t n = a.sizes()[1];
  each_matrix(a, "linalg.cholesky", n * n * n, [&](auto tag, int64_t b) {
    using T = decltype(tag);
    MapMat<T> m = mat<T>(a, b);
    Eigen::Index k;
    if (upper) {
      k = Eigen::internal::llt_inplace<T, Eigen::Upper>::blocked(m);
      m.template triangularView<Eigen::StrictlyLower>().setZero();
    } else {
      k = Eigen::internal::llt_inplace<T, Eigen::Lower>::blocked(m);
      m.template triangularView<Eigen::StrictlyUpper>().setZero();
    }
    // Eigen tests x <= 0, which NaN passes; LAPACK's potrf counts NaN as
    // not positive definite: the first NaN on the factor's diagonal.
    if (k < 0)
      for (Eigen::Index i = 0; i < m.rows() && k < 0; ++i)
        if (std::isnan(m(i, i))) k = i;
    i64(info)[b] = k < 0 ? 0 : int64_t(k) + 1;
  });
}

void triangular_solve_kernel(const Tensor& a, const Tensor& rhs, bool upper, bool unit, bool transpose) {
  const int64_t n = a.sizes()[1];
  each_matrix(a, "linalg.solve_triangular", n * n * rhs.sizes()[2], [&](auto tag, int64_t b) {
    using T = decltype(tag);
    MapMat<T> m = mat<T>(a, b), x = mat<T>(rhs, b);
    // A^T's triangle is the other one.
    auto solve = [&](const auto& tri) { tri.solveInPlace(x); };
    if (!transpose) {
      if (upper)
        unit ? solve(m.template triangularView<Eigen::UnitUpper>()) : solve(m.template triangularView<Eigen::Upper>());
      else
        unit ? solve(m.template triangularView<Eigen::UnitLower>()) : solve(m.template triangularView<Eigen::Lower>());
    } else {
      auto mt = m.transpose();
      if (upper)
        unit ? solve(mt.template triangularView<Eigen::UnitLower>())
             : solve(mt.template triangularView<Eigen::Lower>());
      else
        unit ? solve(mt.template triangularView<Eigen::UnitUpper>())
             : solve(mt.template triangularView<Eigen::Upper>());
    }
  });
}

// Eigen's P A = L U as LAPACK's sequential interchanges (1-based).
void lu_factor_kernel(const Tensor& a, const Tensor& pivots, const Tensor& info) {
  const int64_t n = a.sizes()[1];
  each_matrix(a, "linalg.lu_factor", n * n * n, [&](auto tag, int64_t b) {
    using T = decltype(tag);
    MapMat<T> m = mat<T>(a, b);
    Eigen::PartialPivLU<Eigen::Ref<ColMat<T>>> lu(m);  // in place
    // perm: (P A)[i] = A[perm[i]]; replay it as swaps of a current order.
    const auto& p = lu.permutationP().indices();  // P maps row j of A to row p[j]
    std::vector<int64_t> row_at(static_cast<size_t>(n)), pos(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j)
      row_at[size_t(p[j])] = j;  // (P A)[i] = A[row_at[i]]
    std::vector<int64_t> cur(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      cur[size_t(i)] = pos[size_t(i)] = i;
    int64_t* piv = i64(pivots) + b * n;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t want = row_at[size_t(i)], j = pos[size_t(want)];
      piv[i] = j + 1;
      std::swap(cur[size_t(i)], cur[size_t(j)]);
      pos[size_t(cur[size_t(i)])] = i;
      pos[size_t(cur[size_t(j)])] = j;
    }
    int64_t bad = 0;
    for (int64_t i = 0; i < n && !bad; ++i)
      if (m(i, i) == T(0)) bad = i + 1;
    i64(info)[b] = bad;
  });
}

void pivots_to_permutation_kernel(const Tensor& pivots, const Tensor& perm) {
  const int64_t B = pivots.sizes()[0], n = pivots.sizes()[1];
  parallel_for(B, std::max<int64_t>(1, 4096 / std::max<int64_t>(n, 1)), [&](int64_t b0, int64_t e) {
    for (int64_t b = b0; b < e; ++b) {
      const int64_t* piv = i64(pivots) + b * n;
      int64_t* p = i64(perm) + b * n;
      for (int64_t i = 0; i < n; ++i)
        p[i] = i;
      for (int64_t i = 0; i < n; ++i)
        std::swap(p[i], p[piv[i] - 1]);
    }
  });
}

void lu_solve_kernel(const Tensor& lu, const Tensor& pivots, const Tensor& rhs, bool transpose) {
  const int64_t n = lu.sizes()[1];
  each_matrix(lu, "linalg.lu_solve", n * n * rhs.sizes()[2], [&](auto tag, int64_t b) {
    using T = decltype(tag);
    MapMat<T> m = mat<T>(lu, b), x = mat<T>(rhs, b);
    const int64_t* piv = i64(pivots) + b * n;
    if (!transpose) {  // x := U^-1 L^-1 (interchanges applied to x)
      for (int64_t i = 0; i < n; ++i)
        if (piv[i] - 1 != i) x.row(i).swap(x.row(piv[i] - 1));
      m.template triangularView<Eigen::UnitLower>().solveInPlace(x);
      m.template triangularView<Eigen::Upper>().solveInPlace(x);
    } else {  // A^T = U^T L^T P^T: x := P L^-T U^-T x
      m.transpose().template triangularView<Eigen::Lower>().solveInPlace(x);
      m.transpose().template triangularView<Eigen::UnitUpper>().solveInPlace(x);
      for (int64_t i = n; i-- > 0;)
        if (piv[i] - 1 != i) x.row(i).swap(x.row(piv[i] - 1));
    }
  });
}

void eigh_kernel(const Tensor& a, const Tensor& w, const Tensor& v, const Tensor& info) {
  const int64_t n = a.sizes()[1];
  each_matrix(a, "linalg.eigh", 9 * n * n * n, [&](auto tag, int64_t b) {
    using T = decltype(tag);
    MapMat<T> m = mat<T>(a, b);
    Eigen::SelfAdjointEigenSolver<ColMat<T>> es(m, Eigen::ComputeEigenvectors);  // reads the lower triangle
    i64(info)[b] = es.info() == Eigen::Success ? 0 : 1;
    MapVec<T>(static_cast<T*>(w.data_ptr()) + b * n, n) = es.eigenvalues();
    mat<T>(v, b) = es.eigenvectors();
  });
}

void qr_kernel(const Tensor& a, const Tensor& q, const Tensor& r) {
  const int64_t m = a.sizes()[1], n = a.sizes()[2], kr = r.sizes()[1];
  each_matrix(a, "linalg.qr", 4 * m * n * std::min(m, n), [&](auto tag, int64_t b) {
    using T = decltype(tag);
    MapMat<T> am = mat<T>(a, b);
    Eigen::HouseholderQR<Eigen::Ref<ColMat<T>>> h(am);  // in place
    MapMat<T> rm = mat<T>(r, b);
    rm.setZero();
    const int64_t rows = std::min(kr, m);
    rm.topRows(rows) = am.topRows(rows).template triangularView<Eigen::Upper>();
    if (q.defined()) {
      MapMat<T> qm = mat<T>(q, b);
      qm.setIdentity();
      qm.applyOnTheLeft(h.householderQ());
    }
  });
}

void svd_kernel(const Tensor& a, const Tensor& u, const Tensor& s, const Tensor& vh, const Tensor& info) {
  const int64_t m = a.sizes()[1], n = a.sizes()[2], k = std::min(m, n);
  const bool vectors = u.defined();
  const bool full = vectors && (u.sizes()[2] == m && vh.sizes()[1] == n) && m != n;
  each_matrix(a, "linalg.svd", 12 * m * n * k, [&](auto tag, int64_t b) {
    using T = decltype(tag);
    MapMat<T> am = mat<T>(a, b);
    const unsigned opts = !vectors ? 0u
                          : full   ? unsigned(Eigen::ComputeFullU | Eigen::ComputeFullV)
                                   : unsigned(Eigen::ComputeThinU | Eigen::ComputeThinV);
    Eigen::BDCSVD<ColMat<T>> d(am, opts);
    i64(info)[b] = d.info() == Eigen::Success ? 0 : 1;
    MapVec<T>(static_cast<T*>(s.data_ptr()) + b * k, k) = d.singularValues();
    if (vectors) {
      mat<T>(u, b) = d.matrixU();
      mat<T>(vh, b) = d.matrixV().transpose();
    }
  });
}

template <class U> void zero_triangle_typed(U* p, int64_t B, int64_t r, int64_t c, int64_t k, bool keep_lower) {
  parallel_for(B * r, std::max<int64_t>(1, 32768 / std::max<int64_t>(c, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t row = r0; row < r1; ++row) {
      const int64_t i = row % r;
      U* x = p + row * c;
      // keep_lower zeros j > i + k; else j < i + k.
      const int64_t lo = keep_lower ? std::clamp<int64_t>(i + k + 1, 0, c) : 0;
      const int64_t hi = keep_lower ? c : std::clamp<int64_t>(i + k, 0, c);
      std::fill(x + lo, x + hi, U(0));
    }
  });
}
void zero_triangle_kernel(const Tensor& m, int64_t k, bool keep_lower) {
  const int64_t B = m.size(0), r = m.size(1), c = m.size(2);
  switch (element_size(m.dtype())) {
    case 1: return zero_triangle_typed(static_cast<uint8_t*>(m.data_ptr()), B, r, c, k, keep_lower);
    case 2: return zero_triangle_typed(static_cast<uint16_t*>(m.data_ptr()), B, r, c, k, keep_lower);
    case 4: return zero_triangle_typed(static_cast<uint32_t*>(m.data_ptr()), B, r, c, k, keep_lower);
    case 8: return zero_triangle_typed(static_cast<uint64_t*>(m.data_ptr()), B, r, c, k, keep_lower);
    default: TG_INTERNAL_ASSERT(false, "zero_triangle: element size ", element_size(m.dtype()));
  }
}

}  // namespace
}  // namespace tg::cpu

namespace tg::kernels {
const LinalgKernels& cpu_linalg_kernels() {
  static const LinalgKernels table = [] {
    LinalgKernels t{};
    t.batched_max_n = 0;
    t.solve_any_layout_max_n = 0;
    t.solve_any_layout_max_k = 0;
    t.cholesky = cpu::cholesky_kernel;
    t.triangular_solve = cpu::triangular_solve_kernel;
    t.lu_factor = cpu::lu_factor_kernel;
    t.lu_solve = cpu::lu_solve_kernel;
    t.pivots_to_permutation = cpu::pivots_to_permutation_kernel;
    t.eigh = cpu::eigh_kernel;
    t.qr = cpu::qr_kernel;
    t.svd = cpu::svd_kernel;
    t.zero_triangle = cpu::zero_triangle_kernel;
    t.report_info = nullptr;
    return t;
  }();
  return table;
}

const LinalgKernels& linalg_kernels(Device d, const char* op) {
  if (d.type() == kCPU) return cpu_linalg_kernels();
  const LinalgKernels* t = cuda_linalg_kernels();
  TG_CHECK(t, op, ": no CUDA kernels in this build (tapegrad was built without CUDA)");
  return *t;
}
}  // namespace tg::kernels

namespace tg::detail {
Tensor triangle_copy(const Tensor& x, int64_t k, bool lower) {
  Tensor out = raw::clone(x);  // new, contiguous storage
  if (out.numel() == 0) return out;
  const int64_t r = x.size(-2), c = x.size(-1);
  // k beyond the matrix: every element kept, or every one zeroed (clamped so
  // that j - i stays in range of the kernel's int64 compare).
  k = std::clamp<int64_t>(k, -r - 1, c + 1);
  kernels::linalg_kernels(x.device(), lower ? "tril" : "triu")
      .zero_triangle(raw::reshape(out, {out.numel() / (r * c), r, c}), k, lower);
  return out;
}
}  // namespace tg::detail
