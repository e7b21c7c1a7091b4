// One table of sample inputs per differentiable op (after PyTorch's OpInfo),
// driving float64 gradcheck and gradgradcheck on every device: the CPU, and
// CUDA where there is a GPU (leaves stay on the CPU, where finite
// differences perturb them; each function moves them to the device first, so
// every forward kernel and backward formula under test runs there).
// Samples are awkward on purpose: transposed (non-contiguous), broadcast,
// zero-size, 0-dim, each op inside its domain. A test fails when an op of the
// op list (ops.def) that autograd records has no entry, so coverage cannot
// drift from the list. Every sample also checks forward mode (gradcheck's
// check_forward_ad and check_batched_forward_ad) and Taylor mode to the
// third order (taylor_mismatch) as the op lists declare it (linalg.def's
// column, ops.def's TG_TAYLOR lines); a test fails when a recorded op's
// declaration is checked on no sample.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <limits>
#include <set>
#include <sstream>
#include <stdexcept>

#include <tapegrad/tensor/fft.h>
#include <tapegrad/tensor/grid.h>

#include "reference.h"
#include "tensor/op_table.h"

namespace {

using tg::Device;
using tg::IntList;
using tg::Tensor;
using tg::autograd::variable_list;
using Fn = std::function<Tensor(const variable_list&)>;

const tg::TensorOptions kF64 = tg::TensorOptions().dtype(tg::kFloat64);

// A leaf's shape, value range and layout.
struct Leaf {
  IntList sizes;
  double lo = -1, hi = 1;
  bool transposed = false;  // rank 2: a transposed (non-contiguous) tensor
  // Complex128: real parts in [lo, hi], imaginary parts in 0.4 [lo, hi]
  // (inside the branch cuts of the inverse functions). The checks see its
  // parts: a Float64 leaf [sizes..., 2] entering the op through
  // view_as_complex, a complex result leaving through view_as_real (as
  // gradcheck does for complex inputs), so every mode, Taylor's included,
  // checks the complex rules and the gradient convention.
  bool complex = false;
};
struct Sample {
  std::string what;
  std::vector<Leaf> leaves;
};

// One op: its id in the op list, the function of the leaves that exercises
// it, its samples, and the finite-difference options.
struct OpEntry {
  std::string id;
  Fn fn;
  std::vector<Sample> samples;
  tg::autograd::GradcheckOptions options = {};
  bool gpu_only = false;  // needs a GPU even for the "CPU" run (pin_memory)
  // For an op that is not a function of its input's values (detach): a check
  // of its gradient on a device, instead of finite differences. It checks
  // every mode, Taylor mode's declaration (ops.def) included.
  std::function<void(const Device&)> check = nullptr;
};

Tensor make_leaf(const Leaf& l, uint64_t seed) {
  tg::manual_seed(seed);
  Tensor t;
  if (l.complex) {
    IntList s = l.sizes;
    if (l.transposed && s.size() == 2) std::swap(s[0], s[1]);
    s.push_back(2);
    t = tg::rand(s, kF64) * (l.hi - l.lo) + l.lo;
    t.select(-1, 1).mul_(0.4);
    if (l.transposed && l.sizes.size() == 2) t = t.transpose(0, 1);
    return t.detach().requires_grad_();
  }
  if (l.transposed && l.sizes.size() == 2) t = (tg::rand({l.sizes[1], l.sizes[0]}, kF64) * (l.hi - l.lo) + l.lo).t();
  else t = tg::rand(l.sizes, kF64) * (l.hi - l.lo) + l.lo;
  return t.detach().requires_grad_();
}

// Samples of the usual kinds for an op of `arity` same-kind tensor operands.
std::vector<Sample> unary_samples(double lo = -1, double hi = 1) {
  return {{"[3, 4]", {{{3, 4}, lo, hi}}},
          {"[3, 4] transposed", {{{3, 4}, lo, hi, true}}},
          {"0-dim", {{{}, lo, hi}}},
          {"zero-size [0, 4]", {{{0, 4}, lo, hi}}}};
}
std::vector<Sample> binary_samples(double lo = -1, double hi = 1) {
  return {{"[3, 4] with [3, 4] transposed", {{{3, 4}, lo, hi}, {{3, 4}, lo, hi, true}}},
          {"broadcast [3, 1] with [4]", {{{3, 1}, lo, hi}, {{4}, lo, hi}}},
          {"broadcast [2, 3, 4] with 0-dim", {{{2, 3, 4}, lo, hi}, {{}, lo, hi}}},
          {"zero-size [0, 4] with [4]", {{{0, 4}, lo, hi}, {{4}, lo, hi}}}};
}
// The same samples with complex leaves (complex_with_real: the second operand
// real, promoted).
std::vector<Sample> as_complex(std::vector<Sample> samples, bool complex_with_real = false) {
  for (Sample& s : samples) {
    for (size_t i = 0; i < s.leaves.size(); ++i)
      s.leaves[i].complex = !(complex_with_real && i == 1);
    s.what += complex_with_real ? " (complex with real)" : " (complex)";
  }
  return samples;
}
std::vector<Sample> complex_unary_samples(double lo, double hi) { return as_complex(unary_samples(lo, hi)); }
std::vector<Sample> complex_binary_samples(double lo, double hi) {
  std::vector<Sample> s = as_complex(binary_samples(lo, hi));
  for (Sample& m : as_complex({binary_samples(lo, hi)[0], binary_samples(lo, hi)[1]}, true))
    s.push_back(m);
  return s;
}
std::vector<Sample> matrix_samples() {
  return {{"[3, 4]", {{{3, 4}}}}, {"[3, 4] transposed", {{{3, 4}, -1, 1, true}}}};
}
Sample one(std::string what, std::vector<Leaf> leaves) { return {std::move(what), std::move(leaves)}; }

Tensor I64(std::vector<double> v, IntList s, const Tensor& like) {
  return tg::tensor(v, s, tg::TensorOptions().dtype(tg::kInt64)).to(like.device());
}
Tensor sparse_of(const Tensor& values) {  // repeated and unsorted coordinates
  Tensor idx = I64({2, 0, 2, 1, 1, 3, 1, 0}, {2, 4}, values);
  return tg::sparse_coo_tensor(idx, values, {3, 4});
}

#define F1(expr)                         \
  [](const variable_list& v) -> Tensor { \
    const Tensor& x = v[0];              \
    return expr;                         \
  }
#define F2(expr)                         \
  [](const variable_list& v) -> Tensor { \
    const Tensor &x = v[0], &y = v[1];   \
    return expr;                         \
  }

namespace grid_samples {
Tensor flat(std::vector<Tensor> ts) {
  for (Tensor& t : ts)
    t = t.reshape({-1});
  return tg::cat(ts, 0);
}
// The same values in channels-last memory order (strides of NHWC / NDHWC).
Tensor cl(const Tensor& x) {
  if (x.dim() == 4) return x.permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2});
  if (x.dim() == 5) return x.permute({0, 2, 3, 4, 1}).contiguous().permute({0, 4, 1, 2, 3});
  return x.transpose(1, 2).contiguous().transpose(1, 2);
}
}  // namespace grid_samples

std::vector<OpEntry> op_entries() {
  using namespace tg;
  const auto pos = unary_samples(0.5, 2), any = unary_samples(-2, 2), unit = unary_samples();
  tg::autograd::GradcheckOptions coarse;  // through float32: a step rounding does not swamp
  coarse.eps = 1e-3;
  coarse.atol = 1e-3;
  std::vector<OpEntry> e = {
  // the plain unary ops: their line of unary.def gives the range
#define TG_UNARY_CX_C(name, lo, hi) {#name, F1(tg::name(x)), complex_unary_samples(lo, hi)},
#define TG_UNARY_CX_A(name, lo, hi)
#define TG_UNARY_CX_R(name, lo, hi)
#define TG_UNARY(name, Kernel, float_only, forward, backward, saves, taylor, lo, hi, cx) \
  {#name, F1(tg::name(x)), unary_samples(lo, hi)}, TG_UNARY_CX_##cx(name, lo, hi)
#include <tapegrad/tensor/unary.def>
#undef TG_UNARY
#undef TG_UNARY_CX_C
#undef TG_UNARY_CX_A
#undef TG_UNARY_CX_R
  // elementwise, binary
  // the binary ops: their line of binary.def gives the sample and its range
#define TG_BINARY_CX_C(name, sample, lo, hi) {#name, F2(sample), complex_binary_samples(lo, hi)},
#define TG_BINARY_CX_R(name, sample, lo, hi)
#define TG_BINARY(name, Kernel, arg, form, float_only, forward, grad_a, grad_b, saves_a, saves_b, taylor, composite, \
                  sample, lo, hi, cx)                                                                                \
  {#name, F2(sample), binary_samples(lo, hi)}, TG_BINARY_CX_##cx(name, sample, lo, hi)
#include <tapegrad/tensor/binary.def>
#undef TG_BINARY
#undef TG_BINARY_CX_C
#undef TG_BINARY_CX_R
      {"fmod_scalar", F1(fmod(x * 3.0, 0.7) + x.fmod(-0.7)), unit},
      {"remainder_scalar", F1(remainder(x * 3.0, 0.7) + x.remainder(-0.7)), unit},
      {"add_scalar", F1(add(x, 2.0)), unit},
      {"sub_scalar", F1(sub(x, 2.0)), unit},
      {"mul_scalar", F1(mul(x, 3.0)), unit},
      {"div_scalar", F1(div(x, 4.0)), unit},
      {"pow_scalar", F1(pow(x, 3.0) + pow(x * x + 0.5, 0.5)), unit},
      {"pow_scalar_base", F1(pow(2.5, x)), unit},
      // elementwise, unary
      {"abs", F1(abs(x) + abs(x - 2.0)), unary_samples(0.1, 1)},  // both sides of 0
      {"abs", F1(abs(x)), complex_unary_samples(-1, 1)},
      // complex: the parts, views and constructors
      {"angle", F1(angle(x)), complex_unary_samples(-1, 1)},
      {"angle", F1(angle(x) * x), unit},  // real: piecewise constant
      {"real", F1(real(x) * imag(x)), complex_unary_samples(-1, 1)},
      {"imag", F1(imag(x) + real(x) * 2.0), complex_unary_samples(-1, 1)},
      {"conj", F1(conj(x) * x + conj(x)), complex_unary_samples(-1, 1)},
      {"view_as_real", F1(view_as_real(x) * 1.5), complex_unary_samples(-1, 1)},
      {"view_as_complex", F1(view_as_complex(stack({x, x * x}, -1))), unit},
      {"complex_from", F2(complex_from(x, y)), binary_samples()},
      {"polar", F2(polar(x, y)), binary_samples(0.5, 2)},
      // FFTs: the primitives through tg::fft (odd and even sizes, padding
      // and cropping, every norm, dims in any order)
      {"_fft_c2c",
       F1(cat({fft::fft(x, std::nullopt, 1).reshape({-1}), fft::ifft2(x, IntList{5, 2}, {-2, -1}, "ortho").reshape({-1}),
               fft::fftn(x, std::nullopt, IntList{1, 0}, "forward").reshape({-1})})),
       as_complex({one("[3, 4]", {{{3, 4}}}), one("[3, 4] transposed", {{{3, 4}, -1, 1, true}})})},
      {"_fft_c2c", F1(fft::fft(x, std::nullopt, 1)), as_complex({one("zero-size [0, 4]", {{{0, 4}}})})},
      {"_fft_c2c", F1(fft::fft(x, 6, 0) * 2.0 + fft::fft(x.to(kComplex128), 6, 0, "ortho")),
       {one("[3, 4]", {{{3, 4}}}), one("[5]", {{{5}}})}},
      {"_fft_r2c",
       F1(cat({fft::rfft(x).reshape({-1}), fft::rfft2(x, IntList{4, 6}, {-2, -1}, "ortho").reshape({-1}),
               _fft_r2c(x, {1}, 0, true, 2).reshape({-1}), _fft_r2c(x, {0, 1}, 1, true, 2).reshape({-1}),
               fft::ihfft(x, 5, 0).reshape({-1}), fft::rfftn(x, std::nullopt, IntList{1, 0}).reshape({-1})})),
       {one("[3, 4]", {{{3, 4}}}), one("[3, 4] transposed", {{{3, 4}, -1, 1, true}})}},
      {"_fft_c2r",
       F1(cat({fft::irfft(x).reshape({-1}), fft::irfft(x, 5, 0, "ortho").reshape({-1}),
               fft::irfft(x, 8).reshape({-1}), fft::irfft2(x, IntList{3, 8}, {-2, -1}).reshape({-1}),
               fft::hfft(x, 7).reshape({-1}), fft::irfft2(x, IntList{4, 5}, {-2, -1}, "forward").reshape({-1}),
               fft::irfftn(x, IntList{3, 4}, IntList{1, 0}).reshape({-1})})),
       as_complex({one("[3, 4]", {{{3, 4}}}), one("[3, 4] transposed", {{{3, 4}, -1, 1, true}})})},
      // The spectral convolution's mode mixing: batch-major, channel-major
      // (a transposed view), no batch, an empty batch, modes filling the
      // spectrum (h = 2 m1, wf = m2).
      {"spectral_mix2d", [](const variable_list& v) { return tg::spectral_mix2d(v[0], v[1], v[2]); },
       as_complex({one("[2, 2, 3, 3] by [2, 3, 1, 2]", {{{2, 2, 3, 3}}, {{2, 3, 1, 2}}, {{2, 3, 1, 2}}}),
                   one("[2, 3, 2] by [2, 1, 1, 2]", {{{2, 3, 2}}, {{2, 1, 1, 2}}, {{2, 1, 1, 2}}}),
                   one("[0, 2, 4, 3] by [2, 3, 1, 2]", {{{0, 2, 4, 3}}, {{2, 3, 1, 2}}, {{2, 3, 1, 2}}}),
                   one("[1, 2, 2, 2] by [2, 1, 1, 2]", {{{1, 2, 2, 2}}, {{2, 1, 1, 2}}, {{2, 1, 1, 2}}})})},
      {"spectral_mix2d",
       [](const variable_list& v) { return tg::spectral_mix2d(v[0].transpose(0, 1), v[1], v[2]); },
       as_complex({one("channel-major [2, 2, 3, 3] by [2, 3, 1, 2]", {{{2, 2, 3, 3}}, {{2, 3, 1, 2}}, {{2, 3, 1, 2}}})})},
      {"sign", F1(sign(x) * x), unary_samples(0.1, 1)},
      {"gelu", F1(gelu(x) + gelu(x * 0.5, "tanh")), any},
      {"softplus", F1(softplus(x, 2.0, 1.0)), unit},
      {"clamp", F1(clamp(x, -0.31, 0.27) + clamp(x, -0.5) + clamp(x, std::nullopt, 0.4)), unit},
      {"activation_grad",
       F2(activation_grad(x, y, Activation::Silu, 2) + activation_grad(x, y, Activation::Tanh, 1)),
       {one("[3] with [2, 3] transposed", {{{3}}, {{2, 3}, -1, 1, true}}),
        one("[2, 3] with [2, 3]", {{{2, 3}}, {{2, 3}}})}},
      {"where", F2(where(gt(x, 0.0), x, y)), binary_samples()},
      {"where_scalar_other", F1(where(gt(x, 0.0), x, 2.0)), unit},
      {"where_scalar_self", F1(where(gt(x, 0.0), 2.0, x)), unit},
      // in place (on a copy: leaves cannot be written)
      {"add_", F2([&] { Tensor h = x + zeros_like(y); h.add_(y, 2.0); return h; }()), binary_samples()},
      {"add_scalar_", F1([&] { Tensor h = x * 1.0; h.add_(2.0); return h; }()), unit},
      {"sub_", F2([&] { Tensor h = x + zeros_like(y); h.sub_(y, 0.5); return h; }()), binary_samples()},
      {"sub_scalar_", F1([&] { Tensor h = x * 1.0; h.sub_(2.0); return h; }()), unit},
      {"mul_", F2([&] { Tensor h = x + zeros_like(y); h.mul_(y); return h; }()), binary_samples()},
      {"mul_scalar_", F1([&] { Tensor h = x * 1.0; h.mul_(3.0); return h; }()), unit},
      {"div_", F2([&] { Tensor h = x + zeros_like(y); h.div_(y); return h; }()), binary_samples(0.5, 2)},
      {"div_scalar_", F1([&] { Tensor h = x * 1.0; h.div_(4.0); return h; }()), unit},
      {"zero_", F1([&] { Tensor h = x * 1.0; h.zero_(); return h + x; }()), unit},
      {"fill_", F1([&] { Tensor h = x * 1.0; h.fill_(2.0); return h * x; }()), unit},
      {"copy_", F2([&] { Tensor h = zeros_like(x * y); h.copy_(x * y); return h; }()), binary_samples()},
      // reductions
      {"sum", F1(sum(x)), unit},
      {"sum", F1(sum(x)), complex_unary_samples(-1, 1)},
      {"sum_dim", F1(sum(x, {-1}).unsqueeze(1) * sum(x, {0}, true)), as_complex(matrix_samples())},
      {"mean", F1(mean(x)), complex_unary_samples(-1, 1)},
      {"mean_dim", F1(mean(x, {0})), as_complex(matrix_samples())},
      {"sum_to", F1(sum_to(x, {1, 4})), as_complex(matrix_samples())},
      {"mul_scalar", F1(mul(x, 3.0) + div(x, 2.0) + add(x, 1.5) - sub(x, 0.5) + pow(x, 2.0) + pow(x, 0.5)),
       complex_unary_samples(0.5, 2)},
      {"where", F2(where(gt(real(x), 0.0), x, y)), as_complex(binary_samples())},
      {"where", F2(where(eq(x, x * 1.0), x * y, y) + where(ne(x, 0.0), x, y)), as_complex(binary_samples())},
      {"sum_dim", F1(sum(x, {-1}) + sum(x, {0, 1}, true).sum()), matrix_samples()},
      {"mean", F1(mean(x)), unit},
      {"mean_dim", F1(mean(x, {0})), matrix_samples()},
      {"amax", F1(amax(x)), matrix_samples()},
      {"amax_dim", F1(amax(x, {1}, true)), matrix_samples()},
      {"amin", F1(amin(x)), matrix_samples()},
      {"amin_dim", F1(amin(x, {0})), matrix_samples()},
      {"sum_to", F1(sum_to(x, {1, 4})), matrix_samples()},
      {"max", F1(max(x) + x.max()), matrix_samples()},
      {"min", F1(min(x) + x.min()), matrix_samples()},
      {"max_dim", F1(std::get<0>(max(x, 1)) + std::get<0>(x.max(0, true)).sum()), matrix_samples()},
      {"min_dim", F1(std::get<0>(min(x, -1, true)) * 2.0), matrix_samples()},
      {"logsumexp", F1(logsumexp(x, {1}) + x.logsumexp({0, 1}, true).sum()), matrix_samples()},
      {"softmax", F1(softmax(x, 1) * x.softmax(0)), matrix_samples()},
      {"log_softmax", F1(log_softmax(x, -1) + x.log_softmax(0)), matrix_samples()},
      {"norm", F1(norm(x) + x.norm(3.0, {1}).sum() + norm(x, INFINITY, {0}, true).sum() +
                  norm(x * 0.0 + 1e-3, 2.0, {0}).sum()),
       matrix_samples()},
      {"dot", F2(dot(x, y) + x.dot(y)), {one("[5] . [5]", {{{5}}, {{5}}}), one("[0] . [0]", {{{0}}, {{0}}})}},
      {"cumsum", F1(cumsum(x, 1) + x.cumsum(0)), matrix_samples()},
      // the everyday surface (composites of recorded ops, and sort's gather)
      {"lerp", [](const variable_list& v) { return lerp(v[0], v[1], v[2]); },
       {one("[3, 4] with [4], weight [3, 1]", {{{3, 4}}, {{4}}, {{3, 1}, -0.2, 1.2}}),
        one("[2, 3] transposed", {{{2, 3}}, {{2, 3}, -1, 1, true}, {{2, 3}, 0.1, 0.9}})}},
      {"lerp_scalar", F2(lerp(x, y, 0.3) + x.lerp(y, 0.8)), binary_samples()},
      {"clamp_min", F1(clamp_min(x, -0.2) + x.clamp_min(0.3)), unit},
      {"clamp_max", F1(clamp_max(x, 0.2) * 2.0 + x.clamp_max(-0.4)), unit},
      {"clamp_min_tensor", F2(clamp_min(x, y)), binary_samples()},
      {"clamp_max_tensor", F2(x.clamp_max(y)), binary_samples()},
      {"prod", F1(prod(x) + x.prod()), unit},
      {"prod_dim", F1(prod(x, 1) + x.prod(0, true).sum() + prod(where(eq(x, x.amax()), 0.0, x), 0).sum()),
       {one("[3, 4]", {{{3, 4}}}), one("[3, 5] transposed", {{{3, 5}, -1, 1, true}}), one("[5, 3]", {{{5, 3}}})}},
      {"var", F1(var(x) + x.var({1}, 0.0, true).sum() + var(x, {0}).sum()), matrix_samples()},
      {"std", F1(tg::std(x) + x.std({1}).sum() + tg::std(x, {0, 1}, 2.0)), matrix_samples()},
      {"sort", F1(std::get<0>(sort(x)) * 2.0 + std::get<0>(x.sort(0, true))), unit},
      {"topk", F1(std::get<0>(topk(x, 2)) + std::get<0>(x.topk(2, -1, false)) * 3.0), matrix_samples()},
      {"kthvalue", F1(std::get<0>(kthvalue(x, 2, 1)) + std::get<0>(x.kthvalue(1, 0, true)).sum()), matrix_samples()},
      {"median", F1(median(x) + x.median() * 2.0), matrix_samples()},
      {"median_dim", F1(std::get<0>(median(x, 1)) + std::get<0>(x.median(0, true)).sum()), matrix_samples()},
      {"outer", F2(outer(x, y) + x.outer(y)), {one("[3] x [4]", {{{3}}, {{4}}}), one("[0] x [2]", {{{0}}, {{2}}})}},
      {"cross", F2(cross(x, y, x.size(-1) == 3 ? -1 : 0)),
       {one("[4, 3] x [3]", {{{4, 3}}, {{3}}}), one("[3, 2] x [3, 2] transposed, dim 0", {{{3, 2}}, {{3, 2}, -1, 1, true}})}},
      {"einsum",
       F2(einsum("ij,jk->ik", {x, y}) * 2.0 + einsum("ij,jk", {sin(x), y}) + einsum("...j,jk->...k", {x, y}) +
          einsum("ij,jk,ij->ik", {x, y, x}) + einsum("ij->i", {x}).unsqueeze(1) + einsum("ij,jk->", {x, y})),
       {one("[3, 4], [4, 2] transposed", {{{3, 4}}, {{4, 2}, -1, 1, true}}), one("[2, 3], [3, 2]", {{{2, 3}}, {{3, 2}}})}},
      {"einsum", F2(einsum("ii->i", {x}) * einsum("i,i->i", {y, y}) + einsum("bij,bjk->bik", {x.unsqueeze(0), x.unsqueeze(0)}).diagonal(0, 1, 2).squeeze(0) + einsum("ij->", {x})),
       {one("[3, 3], [3]", {{{3, 3}}, {{3}}})}},
      {"tril", F1(tril(x) + x.tril(1) * 2.0 + tril(x, -1) * 3.0), matrix_samples()},
      {"triu", F1(triu(x) + x.triu(-1) * 2.0 + triu(x, 2) * 3.0),
       {one("[3, 4]", {{{3, 4}}}), one("batched [2, 3, 4]", {{{2, 3, 4}}})}},
      {"diagonal", F1(cat({diagonal(x), x.diagonal(1, 1, 0), diagonal(x, -2)})), matrix_samples()},
      {"diagonal", F1(diagonal(x, 1, 0, 2) * 2.0), {one("[3, 2, 4]", {{{3, 2, 4}}})}},
      {"diag", F1(x.dim() == 1 ? diag(x, 1) + x.diag(-1) : diag(x) * 2.0 + x.diag(1).sum()),
       {one("[3]", {{{3}}}), one("[3, 4] transposed", {{{3, 4}, -1, 1, true}})}},
      {"diag_embed", F1(cat({diag_embed(x).reshape({-1}), diag_embed(x, -1, 0, 2).reshape({-1}), x.diag_embed(2).reshape({-1})})),
       {one("[2, 3]", {{{2, 3}}}), one("[3, 2] transposed", {{{3, 2}, -1, 1, true}})}},
      {"trace", F1(trace(x) + x.trace()), matrix_samples()},
      {"masked_fill", F1(masked_fill(x, gt(x, 0.0), 2.0) + x.masked_fill(lt(x, 0.5), -1.0) * x), unit},
      {"masked_fill_tensor", F2(masked_fill(x, gt(x, 0.0), y) + x.masked_fill(tensor({1, 0, 0, 1}, {4}, TensorOptions().dtype(kBool)).to(x.device()), y * 2.0)),
       {one("[3, 4] with 0-dim", {{{3, 4}}, {{}}}), one("[3, 4] transposed with 0-dim", {{{3, 4}, -1, 1, true}, {{}}})}},
      {"masked_select", F1(cat({masked_select(x, gt(x, 0.0)), x.masked_select(gt(x.sum({0}, true), 0.0)) * 2.0})),
       matrix_samples()},
      {"split", F1([&] { auto p = split(x, 3, 1); return cat({p[0] * 2.0, p[1]}, 1); }()), matrix_samples()},
      {"split_sizes", F1([&] { auto p = x.split({1, 0, 3}, 1); return cat({p[2], p[1], p[0] * 3.0}, 1); }()),
       matrix_samples()},
      {"chunk", F1([&] { auto p = x.chunk(2, 0); return cat({p[1] * 2.0, p[0]}, 0); }()), matrix_samples()},
      {"repeat", F1(x.repeat({2, 1, 3})), unit},
      {"tile", F1(tile(x, {2}) + x.tile({1, 2}).sum()), unit},
      {"repeat_interleave", F1(cat({repeat_interleave(x, 2), x.repeat_interleave(3, 0).reshape({-1})})), unit},
      {"repeat_interleave_tensor",
       F1(repeat_interleave(x, I64({2, 0, 1}, {3}, x), 0) + x.repeat_interleave(I64({2}, {1}, x), 0).narrow(0, 0, 3)),
       matrix_samples()},
      {"flip", F1(flip(x, {0, 1}) + x.flip({-1}) * 2.0), matrix_samples()},
      {"roll", F1(roll(x, {1, -5}, {0, 1}) + x.roll({7}) * 2.0), matrix_samples()},
      {"meshgrid", F2([&] {
         auto g = meshgrid({x, y});
         auto h = meshgrid({x, y}, "xy");
         return cat({g[0] * g[1], h[0].t() + h[1].t() * 2.0}, 0);
       }()),
       {one("[3] and [4]", {{{3}}, {{4}}})}},
      // linear algebra
      {"mm", F2(mm(x, y)), {one("[3, 4] @ [4, 2] transposed", {{{3, 4}}, {{4, 2}, -1, 1, true}}),
                            one("[0, 4] @ [4, 2]", {{{0, 4}}, {{4, 2}}})}},
      {"bmm", F2(bmm(x, y)), {one("[2, 3, 4] @ [2, 4, 2]", {{{2, 3, 4}}, {{2, 4, 2}}})}},
      {"mm", F2(mm(x, y)), as_complex({one("[3, 4] @ [4, 2] transposed", {{{3, 4}}, {{4, 2}, -1, 1, true}})})},
      {"bmm", F2(bmm(x, y)), as_complex({one("[2, 3, 4] @ [2, 4, 2]", {{{2, 3, 4}}, {{2, 4, 2}}})})},
      {"matmul", F2(matmul(x, y)),
       as_complex({one("[2, 3, 4] @ [4]", {{{2, 3, 4}}, {{4}}}), one("[3, 4] @ [2, 4, 2]", {{{3, 4}}, {{2, 4, 2}}})})},
      {"einsum", F2(einsum("bij,jk->bik", {x, y}) + einsum("bij->b", {x}).unsqueeze(1).unsqueeze(2)),
       as_complex({one("[2, 3, 4] with [4, 2]", {{{2, 3, 4}}, {{4, 2}}})})},
      {"cat", F2(cat({x, y}, 0)), as_complex({one("[2, 3] with [1, 3]", {{{2, 3}}, {{1, 3}}})})},
      {"stack", F2(stack({x, y}, 1)), as_complex({one("[2, 3] with [2, 3] transposed", {{{2, 3}}, {{2, 3}, -1, 1, true}})})},
      {"matmul", F2(matmul(x, y)),
       {one("[4] @ [4]", {{{4}}, {{4}}}), one("[3, 4] @ [4]", {{{3, 4}}, {{4}}}),
        one("[4] @ [4, 3]", {{{4}}, {{4, 3}, -1, 1, true}}),
        one("[2, 1, 3, 4] @ [3, 4, 2]", {{{2, 1, 3, 4}}, {{3, 4, 2}}}),
        // a matrix times a batch: its own node (a's gradient one folded GEMM)
        one("[3, 4] transposed @ [2, 2, 4, 2]", {{{3, 4}, -1, 1, true}, {{2, 2, 4, 2}}}),
        one("[3, 4] @ zero-size [0, 4, 2]", {{{3, 4}}, {{0, 4, 2}}})}},
      {"linear", [](const variable_list& v) { return linear(v[0], v[1], v[2]) + linear(v[0], v[1]); },
       {one("[2, 5, 3], [2, 3] transposed, [2]", {{{2, 5, 3}}, {{2, 3}, -1, 1, true}, {{2}}}),
        one("[3], [2, 3], [2]", {{{3}}, {{2, 3}}, {{2}}})}},
      // joining and indexing
      {"cat", F2(cat({x, y}, -1)), {one("[2, 3] transposed with [2, 1]", {{{2, 3}, -1, 1, true}, {{2, 1}}}),
                                    one("zero-size [2, 0] with [2, 3]", {{{2, 0}}, {{2, 3}}})}},
      {"stack", F2(stack({x, y}, 1)), {one("[2, 3] with [2, 3] transposed", {{{2, 3}}, {{2, 3}, -1, 1, true}})}},
      {"index_select", F1(index_select(x, 1, I64({2, 0, 2, 1}, {4}, x))), matrix_samples()},
      {"index_select_sparse_grad", F1(index_select(x, 0, I64({2, 0, 2}, {3}, x), true)), matrix_samples()},
      {"gather", F1(gather(x, 1, I64({0, 2, 1, 1, 0, 0}, {2, 3}, x))),
       {one("[2, 3]", {{{2, 3}}}), one("[2, 3] transposed", {{{2, 3}, -1, 1, true}})}},
      {"scatter_add", F2(scatter_add(x, 1, I64({0, 2, 1, 1, 0, 0}, {2, 3}, x), y)),
       {one("[2, 3] with [2, 3] transposed", {{{2, 3}}, {{2, 3}, -1, 1, true}})}},
      {"embedding", F1(embedding(x, I64({1, 0, 1, 2}, {2, 2}, x)) + embedding(x, I64({2}, {1}, x), true).sum()),
       matrix_samples()},
      // views
      {"view", F1(x.contiguous().view({4, 3}) * 2.0), matrix_samples()},
      {"reshape", F1(x.reshape({2, 6})), matrix_samples()},
      {"transpose", F1(x.transpose(0, 1)), matrix_samples()},
      {"t", F1(x.t()), matrix_samples()},
      {"permute", F1(x.unsqueeze(0).permute({2, 0, 1})), matrix_samples()},
      {"select", F1(x.select(1, -1).sum() + x[0]), matrix_samples()},
      {"slice", F1(x.slice(1, 1, std::nullopt, 2)), matrix_samples()},
      {"narrow", F1(x.narrow(0, 1, 2)), matrix_samples()},
      {"unsqueeze", F1(x.unsqueeze(-1)), matrix_samples()},
      {"squeeze", F1(x.unsqueeze(1).squeeze()), matrix_samples()},
      {"squeeze_dim", F1(x.unsqueeze(1).squeeze(1)), matrix_samples()},
      {"expand", F1(x.unsqueeze(0).expand({2, 3, 4})), matrix_samples()},
      {"expand_as", F2(x.expand_as(y) * y), {one("[4] to [3, 4]", {{{4}}, {{3, 4}, -1, 1, true}})}},
      {"flatten", F1(x.flatten()), matrix_samples()},
      // as_strided is not differentiable: an error while recording, a view
      // otherwise.
      {"as_strided", nullptr, {}, {}, false, [](const Device& d) {
         Tensor x = tg::arange(6, kF64).to(d);
         EXPECT_TRUE(tg::equal(x.as_strided({2, 2}, {1, 2}, 1).to(Device(kCPU)),
                               tg::tensor({1, 3, 2, 4}, {2, 2}, kF64)));
         EXPECT_ERROR_CONTAINS(x.requires_grad_().as_strided({2}, {1}), "as_strided: not differentiable");
         // Declared without a Taylor rule (ops.def): refused at itself.
         namespace fwd = tg::autograd::forward_ad;
         fwd::taylor_level level(3, 1);
         Tensor c = tg::ones({1, 6}, kF64).to(d);
         EXPECT_ERROR_CONTAINS(fwd::make_jet(x.detach(), {c, c, c}).as_strided({2}, {1}),
                               "as_strided: no Taylor-mode rule");
       }},
      // conversions
      {"to_device", F1(x.to(x.device()) * 2.0), unit},
      {"to_dtype", F1(x.to(kFloat32).to(kFloat64) * 2.0), unit, coarse},
      {"to_device_dtype", F1(x.to(x.device(), kFloat32).to(kFloat64) * 2.0), unit, coarse},
      {"pin_memory", F1(x.to(Device(kCPU)).pin_memory().to(x.device()) * 2.0), unit, {}, true},
      {"contiguous", F1(x.contiguous()), matrix_samples()},
      {"clone", F1(x.clone()), matrix_samples()},
      // detach blocks the gradient: d/dx sum(x * detach(x)) = x, not 2x.
      {"detach", nullptr, {}, {}, false, [](const Device& d) {
         Tensor x = tg::rand({3, 4}, kF64).to(d).requires_grad_();
         Tensor g = tg::autograd::grad({(x * x.detach()).sum()}, {x})[0];
         EXPECT_TRUE(tg::allclose(g.to(Device(kCPU)), x.detach().to(Device(kCPU)), 1e-15, 0));
         EXPECT_FALSE(x.detach().requires_grad());
         // Taylor mode: detach drops the coefficients, so x * detach(x)
         // has x's coefficients times x.
         namespace fwd = tg::autograd::forward_ad;
         fwd::taylor_level level(3, 1);
         const Tensor x0 = x.detach();
         std::vector<Tensor> cs = {tg::rand({1, 3, 4}, kF64).to(d), tg::rand({1, 3, 4}, kF64).to(d),
                                   tg::rand({1, 3, 4}, kF64).to(d)};
         const Tensor j = fwd::make_jet(x0, cs);
         const std::vector<Tensor> got = fwd::jet_coefficients(j * j.detach());
         EXPECT_FALSE(fwd::jet_coefficients(j.detach())[0].defined());
         ASSERT_EQ(got.size(), 3u);
         for (size_t k = 0; k < 3; ++k)
           EXPECT_TRUE(tg::allclose(got[k].to(Device(kCPU)), (cs[k] * x0).to(Device(kCPU)), 1e-15, 0))
               << "c_" << k + 1;
       }},
      // sparse COO (repeated, unsorted coordinates; test_sparse.cpp covers
      // every index set)
      {"sparse_coo_tensor", F1(to_dense(sparse_of(x))), {one("[4]", {{{4}}})}},
      {"coalesce", F1(coalesce(sparse_of(x))._values()), {one("[4]", {{{4}}})}},
      {"to_dense", F1(sparse_of(x).to_dense() * 2.0), {one("[4]", {{{4}}})}},
      {"values", F1(sparse_of(x).coalesce().values()), {one("[4]", {{{4}}})}},
      {"_values", F1(sparse_of(x)._values() * 3.0), {one("[4]", {{{4}}})}},
      // composite: an MLP
      {"mlp", [](const variable_list& v) {
         return tg::sum(tg::tanh(tg::linear(tg::silu(tg::linear(v[0], v[1], v[2])), v[3])));
       },
       {one("x [4, 2], w1 [3, 2], b1 [3], w2 [2, 3]", {{{4, 2}}, {{3, 2}}, {{3}}, {{2, 3}}})}},
  };
  // ---- linear algebra (tg::linalg, linalg.def): well-conditioned inputs
  // built from the leaves (x + 3 I, x x^T + 3 I, symmetric x + x^T),
  // batched, transposed, 1 x 1, 0 x 0 and zero batches; functions of
  // eigenvectors and singular vectors are sign-invariant (squares).
  {
    namespace la = tg::linalg;
    auto eye_like = [](const Tensor& x) {
      return tg::eye(x.size(-1), tg::TensorOptions().dtype(x.dtype()).device(x.device()));
    };
    auto shift = [eye_like](const Tensor& x, double s) { return x + eye_like(x) * s; };
    auto spd = [eye_like](const Tensor& x) { return tg::matmul(x, x.transpose(-2, -1)) + eye_like(x) * 3.0; };
    auto sq = [](const Tensor& t) { return t * t; };
    auto flat = [](std::vector<Tensor> ts) {
      for (Tensor& t : ts)
        t = t.reshape({-1});
      return tg::cat(ts, 0);
    };
    // Rows rotated (a fixed permutation), so partial pivoting swaps rows.
    auto rotated = [shift](const Tensor& x) {
      const int64_t n = x.size(-1);
      std::vector<double> idx;
      for (int64_t i = 0; i < n; ++i)
        idx.push_back(double((i + 1) % n));
      return tg::index_select(shift(x, 3.0), -2, I64(idx, {n}, x));
    };
    const std::vector<Sample> square = {one("[3, 3]", {{{3, 3}}}),
                                        one("[3, 3] transposed", {{{3, 3}, -1, 1, true}}),
                                        one("batched [2, 3, 3]", {{{2, 3, 3}}}),
                                        one("1 x 1", {{{1, 1}}}),
                                        one("0 x 0", {{{0, 0}}}),
                                        one("zero batch [0, 2, 2]", {{{0, 2, 2}}})};
    const std::vector<Sample> square_rhs = {
        one("A [3, 3], B [3, 2]", {{{3, 3}}, {{3, 2}}}),
        one("A [3, 3] transposed, B [3, 2] transposed", {{{3, 3}, -1, 1, true}, {{3, 2}, -1, 1, true}}),
        one("A [2, 3, 3], B [3, 2] (B broadcast)", {{{2, 3, 3}}, {{3, 2}}}),
        one("A [3, 3], B [2, 3, 2] (A broadcast)", {{{3, 3}}, {{2, 3, 2}}}),
        one("A [1, 1], B [1, 3]", {{{1, 1}}, {{1, 3}}}),
        one("A [0, 0], B [0, 2]", {{{0, 0}}, {{0, 2}}})};
    const std::vector<Sample> rect = {one("[4, 3]", {{{4, 3}}}), one("[3, 4]", {{{3, 4}}}),
                                      one("[3, 3] transposed", {{{3, 3}, -1, 1, true}}),
                                      one("batched [2, 4, 3]", {{{2, 4, 3}}}), one("[1, 1]", {{{1, 1}}})};
    const std::vector<Sample> tall = {one("[4, 3]", {{{4, 3}}}), one("[3, 3] transposed", {{{3, 3}, -1, 1, true}}),
                                      one("batched [2, 4, 3]", {{{2, 4, 3}}}), one("[1, 1]", {{{1, 1}}})};
    std::vector<OpEntry> la_entries = {
        {"linalg.cholesky_ex",
         [=](const variable_list& v) {
           return std::get<0>(la::cholesky_ex(spd(v[0]))) + std::get<0>(la::cholesky_ex(spd(v[0]), true)) * 0.5;
         },
         square},
        {"linalg.cholesky", [=](const variable_list& v) { return la::cholesky(spd(v[0])); }, square},
        {"linalg.cholesky_solve",
         [=](const variable_list& v) {
           Tensor L = la::cholesky(spd(v[0]));
           return la::cholesky_solve(v[1], L) + la::cholesky_solve(v[1], L.transpose(-2, -1), true) * 0.5;
         },
         square_rhs},
        {"linalg.solve_triangular",
         [=](const variable_list& v) {
           const Tensor A = shift(v[0], 3.0);
           return la::solve_triangular(A, v[1], false) +
                  la::solve_triangular(A, v[1].transpose(-2, -1), true, false).transpose(-2, -1) +
                  la::solve_triangular(v[0], v[1], true, true, true);
         },
         square_rhs},
        {"linalg.solve_ex",
         [=](const variable_list& v) {
           return std::get<0>(la::solve_ex(shift(v[0], 3.0), v[1])) +
                  // B^T with a leading 1: never read as a batch of vectors
                  std::get<0>(la::solve_ex(shift(v[0], 3.0), v[1].transpose(-2, -1).unsqueeze(0), false))
                      .transpose(-2, -1);
         },
         square_rhs},
        {"linalg.solve",
         [=](const variable_list& v) {
           const Tensor A = shift(v[0], 3.0);
           // B as a vector [..., n] too (torch.linalg.solve's rule)
           return la::solve(A, v[1]) + la::solve(A, v[1].select(-1, 0)).unsqueeze(-1);
         },
         {square_rhs[0], square_rhs[1], square_rhs[2], square_rhs[4]}},
        {"linalg.inv_ex", [=](const variable_list& v) { return std::get<0>(la::inv_ex(shift(v[0], 3.0))); }, square},
        {"linalg.inv", [=](const variable_list& v) { return la::inv(shift(v[0], 3.0)); }, square},
        {"linalg.slogdet",
         [=](const variable_list& v) {
           auto [s1, l1] = la::slogdet(shift(v[0], 3.0));
           auto [s2, l2] = la::slogdet(shift(v[0], -3.0));  // negative determinants in odd sizes
           return l1 + l2 * s2 + s1;
         },
         square},
        {"linalg.det", [=](const variable_list& v) { return la::det(shift(v[0], 2.0)) + la::det(rotated(v[0])); },
         square},
        {"linalg.logdet", [=](const variable_list& v) { return la::logdet(spd(v[0])); }, square},
        {"linalg.lu_factor_ex", [=](const variable_list& v) { return std::get<0>(la::lu_factor_ex(rotated(v[0]))); },
         square},
        {"linalg.lu_factor", [=](const variable_list& v) { return std::get<0>(la::lu_factor(rotated(v[0]))); }, square},
        {"linalg.lu_solve",
         [=](const variable_list& v) {
           // Any matrix with a nonzero diagonal is a packed LU; the pivots
           // (constant) from a rotated matrix's factorization.
           const Tensor LU = shift(v[0], 3.0);
           const Tensor piv = std::get<1>(la::lu_factor(rotated(tg::zeros(v[0].sizes(), v[0].options()))));
           const Tensor Bt = v[1].transpose(-2, -1);
           return la::lu_solve(LU, piv, v[1]) + la::lu_solve(LU, piv, v[1], true, true) +
                  la::lu_solve(LU, piv, Bt, false).transpose(-2, -1) +
                  la::lu_solve(LU, piv, Bt, false, true).transpose(-2, -1);
         },
         {square_rhs[0], square_rhs[1], square_rhs[2], square_rhs[4], square_rhs[5]}},
        {"linalg.eigh",
         [=](const variable_list& v) {
           const Tensor s = v[0] + v[0].transpose(-2, -1);
           auto [w, V] = la::eigh(s);
           auto [wu, Vu] = la::eigh(s, "U");
           return w.unsqueeze(-1) + sq(V) + sq(Vu) * 0.5 + wu.unsqueeze(-2);
         },
         square},
        {"linalg.eigvalsh", [=](const variable_list& v) { return la::eigvalsh(v[0] + v[0].transpose(-2, -1)); },
         square},
        {"linalg.qr",
         [=](const variable_list& v) {
           auto [Q, R] = la::qr(v[0]);
           return flat({Q, R, std::get<1>(la::qr(v[0], v[0].size(-1) == v[0].size(-2) ? "complete" : "reduced"))});
         },
         tall},
        {"linalg.svd",
         [=](const variable_list& v) {
           auto [U, S, Vh] = la::svd(v[0], false);
           std::vector<Tensor> parts = {sq(U), S, sq(Vh)};
           if (v[0].size(-1) == v[0].size(-2)) {  // full_matrices: U, Vh of a square A are the reduced ones
             auto [Uf, Sf, Vhf] = la::svd(v[0]);
             parts.push_back(sq(Uf) + sq(Vhf));
           }
           return flat(parts);
         },
         rect},
        {"linalg.svdvals", [=](const variable_list& v) { return la::svdvals(v[0]); }, rect},
        {"linalg.lstsq",
         [=](const variable_list& v) {
           auto [X, res, rank, sv] = la::lstsq(v[0], v[1]);
           return flat({X, res});
         },
         {one("A [4, 3], B [4, 2]", {{{4, 3}}, {{4, 2}}}), one("A [3, 4], B [3, 2]", {{{3, 4}}, {{3, 2}}}),
          one("A [2, 4, 3] batched, B [4, 2]", {{{2, 4, 3}}, {{4, 2}}})}},
        {"linalg.matrix_exp",
         [=](const variable_list& v) { return la::matrix_exp(v[0]) + la::matrix_exp(v[0] * 4.0) * 0.01; }, square},
        {"linalg.pinv",
         [=](const variable_list& v) {
           Tensor p = la::pinv(v[0]);
           if (v[0].size(-1) != v[0].size(-2)) return p;
           return flat({p, la::pinv(v[0] + v[0].transpose(-2, -1), std::nullopt, std::nullopt, true)});
         },
         rect},
        {"linalg.matrix_norm",
         [=](const variable_list& v) { return la::matrix_norm(v[0]) + la::matrix_norm(v[0], "fro", true).squeeze(-1); },
         {rect[0], rect[1], rect[2], rect[3]}},
        {"linalg.matrix_norm_ord",
         [=](const variable_list& v) {
           const double inf = std::numeric_limits<double>::infinity();
           // with "nuc" (the string overload's SVD path): Taylor mode refused at matrix_norm
           return la::matrix_norm(v[0], 1.0) + la::matrix_norm(v[0], -1.0) + la::matrix_norm(v[0], inf) +
                  la::matrix_norm(v[0], -inf) + la::matrix_norm(v[0], 2.0) + la::matrix_norm(v[0], -2.0) +
                  la::matrix_norm(v[0], "nuc");
         },
         {rect[0], rect[1], rect[2], rect[3]}},
        {"linalg.vector_norm",
         [=](const variable_list& v) {
           const double inf = std::numeric_limits<double>::infinity();
           return la::vector_norm(v[0]) + la::vector_norm(v[0], 3.0, {-1}).sum() + la::vector_norm(v[0], inf) +
                  la::vector_norm(v[0], 1.0, {0}, true).sum() + la::vector_norm(v[0], -inf, {-1}).sum();
         },
         {one("[3, 4]", {{{3, 4}}}), one("[3, 4] transposed", {{{3, 4}, -1, 1, true}})}},
    };
    for (OpEntry& le : la_entries)
      e.push_back(std::move(le));
  }
  // ---- the grid family (grid.def): strides above the kernel, dilation,
  // groups up to one per channel, 1 x 1 kernels, every padding mode,
  // channels-last and transposed (non-contiguous) inputs, zero batches.
  {
    using grid_samples::cl;
    using grid_samples::flat;
    const Sample x2w = one("x [1, 2, 3, 4], w [2, 2, 2, 2]", {{{1, 2, 3, 4}}, {{2, 2, 2, 2}}});
    std::vector<OpEntry> grid_entries = {
        {"_convolution",
         [=](const variable_list& v) {
           const Tensor &x = v[0], &w = v[1];
           return flat({tg::conv2d(x, w, {}, {2, 1}, {1, 0}, {1, 2}),
                        tg::conv2d(cl(x), w.transpose(2, 3), {}, {3}, {1})});  // stride above the kernel, channels-last
         },
         {x2w}},
        {"_convolution",
         [=](const variable_list& v) {
           return flat({tg::conv2d(v[0], v[1], {}, {1}, {1}, {1}, 3),  // depthwise: groups = channels
                        tg::conv2d(v[0], v[2], {}, {1}, {0}, {1}, 1)});  // 1 x 1
         },
         {one("x [1, 3, 3, 3], w [3, 1, 2, 2], w1 [1, 3, 1, 1]", {{{1, 3, 3, 3}}, {{3, 1, 2, 2}}, {{1, 3, 1, 1}}})}},
        {"_convolution",
         [=](const variable_list& v) {
           return flat({tg::conv1d(v[0], v[1], {}, {2}, {1}, {1}, 2), tg::conv1d(v[0].narrow(0, 0, 0), v[1], {}, {1},
                                                                                  {0}, {1}, 2),
                        tg::conv1d(v[0].select(0, 1), v[1], {}, {1}, {2}, {2}, 2)});  // unbatched
         },
         {one("x [2, 2, 5], w [2, 1, 3] (groups 2, zero batch)", {{{2, 2, 5}}, {{2, 1, 3}}})}},
        {"_convolution", F2(tg::conv3d(x, y, {}, {1, 2, 1}, {1, 0, 1})),
         {one("x [1, 1, 2, 4, 3], w [1, 1, 2, 2, 2]", {{{1, 1, 2, 4, 3}}, {{1, 1, 2, 2, 2}}})}},
        {"_convolution_backward_input",
         [=](const variable_list& v) {
           return flat({tg::conv_transpose2d(v[0], v[1], {}, {2}, {1}, {1}),
                        tg::conv_transpose2d(cl(v[0]), v[1], {}, {1, 2}, {0, 1}, {0, 1}, 1, {2, 1})});
         },
         {one("x [1, 2, 2, 3], w [2, 2, 2, 3]", {{{1, 2, 2, 3}}, {{2, 2, 2, 3}}})}},
        {"_convolution_backward_input",
         [=](const variable_list& v) { return tg::conv_transpose1d(v[0], v[1], {}, {3}, {1}, {2}, 2, {1}); },
         {one("x [1, 2, 3], w [2, 1, 2] (groups 2, stride above the kernel)", {{{1, 2, 3}}, {{2, 1, 2}}})}},
        {"_convolution_backward_input", F2(tg::conv_transpose3d(x, y, {}, {2, 1, 1}, {0, 1, 0})),
         {one("x [1, 1, 2, 3, 2], w [1, 1, 2, 2, 2]", {{{1, 1, 2, 3, 2}}, {{1, 1, 2, 2, 2}}})}},
        {"_convolution_backward_weight",
         [=](const variable_list& v) {
           return flat({tg::_convolution_backward_weight(v[0], v[1], {2, 1, 2, 3}, {1}, {1}, {1}, 2),
                        tg::_convolution_backward_weight(v[0].narrow(0, 0, 0), v[1].narrow(0, 0, 0), {2, 1, 2, 3},
                                                         {1}, {1}, {1}, 2)});  // zero batch: zeros
         },
         {one("x [1, 2, 3, 4], y [1, 2, 4, 4] (groups 2)", {{{1, 2, 3, 4}}, {{1, 2, 4, 4}}})}},
        {"_convolution_backward_weight",
         [=](const variable_list& v) { return tg::_convolution_backward_weight(v[0], v[1], {1, 1, 3}, {2}, {0}, {2}, 1); },
         {one("x [2, 1, 7], y [2, 1, 2]", {{{2, 1, 7}}, {{2, 1, 2}}})}},
        {"_im2col", F1(grid_samples::flat({tg::unfold(x, {2, 3}, {1}, {1}, {2, 1}), tg::unfold(grid_samples::cl(x), {2}, {2}, {0}, {1})})),
         {one("x [1, 1, 4, 5]", {{{1, 1, 4, 5}}})}},
        {"_im2col", F1(tg::_im2col(x, {2}, {1}, {1}, {2})), {one("x [1, 2, 5] (1-D)", {{{1, 2, 5}}})}},
        {"_col2im", F1(tg::fold(x, {4, 5}, {2, 3}, {1}, {1}, {2, 1})), {one("cols [1, 6, 15]", {{{1, 6, 15}}})}},
        {"convolution",
         [=](const variable_list& v) {
           return flat({tg::convolution(v[0], v[1], v[2], {1}, {1}, {1}, false, {0}, 1),
                        tg::convolution(v[0], v[3], v[2].narrow(0, 0, 2), {2}, {1}, {1}, true, {1}, 1)});
         },
         {one("x [1, 2, 3, 3], w [3, 2, 2, 2], b [3], wt [2, 2, 2, 2]",
              {{{1, 2, 3, 3}}, {{3, 2, 2, 2}}, {{3}}, {{2, 2, 2, 2}}})}},
        {"conv1d", [](const variable_list& v) { return tg::conv1d(v[0], v[1], v[2], {1}, {1}); },
         {one("x [2, 2, 5], w [3, 2, 3], b [3]", {{{2, 2, 5}}, {{3, 2, 3}}, {{3}}})}},
        {"conv2d", [](const variable_list& v) { return tg::conv2d(v[0], v[1], v[2], {2}, {1}, {1}, 1); },
         {one("x [1, 2, 4, 4], w [2, 2, 3, 3], b [2]", {{{1, 2, 4, 4}}, {{2, 2, 3, 3}}, {{2}}})}},
        {"conv3d", [](const variable_list& v) { return tg::conv3d(v[0], v[1], v[2]); },
         {one("x [1, 2, 3, 3, 2], w [2, 2, 2, 2, 1], b [2]", {{{1, 2, 3, 3, 2}}, {{2, 2, 2, 2, 1}}, {{2}}})}},
        {"conv_transpose1d", [](const variable_list& v) { return tg::conv_transpose1d(v[0], v[1], v[2], {2}); },
         {one("x [2, 2, 3], w [2, 3, 3], b [3]", {{{2, 2, 3}}, {{2, 3, 3}}, {{3}}})}},
        {"conv_transpose2d",
         [](const variable_list& v) { return tg::conv_transpose2d(v[0], v[1], v[2], {2}, {1}, {1}, 2); },
         {one("x [1, 4, 2, 3], w [4, 1, 3, 3], b [2] (groups 2)", {{{1, 4, 2, 3}}, {{4, 1, 3, 3}}, {{2}}})}},
        {"conv_transpose3d", [](const variable_list& v) { return tg::conv_transpose3d(v[0], v[1], v[2]); },
         {one("x [1, 2, 2, 2, 2], w [2, 2, 2, 1, 2], b [2]", {{{1, 2, 2, 2, 2}}, {{2, 2, 2, 1, 2}}, {{2}}})}},
        {"pad",
         F1(grid_samples::flat({tg::pad(x, {2, -1, 1, 0}, "constant", 0.5), tg::pad(x, {2, 1, 1, 2}, "reflect"),
                                tg::pad(x, {1, 3, 2, 0}, "replicate"), tg::pad(grid_samples::cl(x), {3, 1, 2, 3}, "circular")})),
         {one("x [1, 1, 3, 4]", {{{1, 1, 3, 4}}})}},
        {"pad", F1(grid_samples::flat({tg::pad(x, {1, 1, 0, 1, 1, 0}, "circular"), tg::pad(x, {2, 1}, "reflect")})),
         {one("x [1, 1, 2, 3, 3] (3-D)", {{{1, 1, 2, 3, 3}}})}},
        {"unfold", F1(tg::unfold(x, {2, 2}, {1}, {1}, {2})), {one("x [1, 2, 3, 4]", {{{1, 2, 3, 4}}})}},
        {"fold", F1(tg::fold(x, {3, 3}, {2}, {1}, {0}, {1})), {one("cols [1, 8, 4]", {{{1, 8, 4}}})}},
        {"pixel_shuffle", F1(tg::pixel_shuffle(x, 2)), {one("x [1, 4, 2, 3]", {{{1, 4, 2, 3}}})}},
        {"pixel_unshuffle", F1(tg::pixel_unshuffle(grid_samples::cl(x), 2)), {one("x [1, 2, 4, 6]", {{{1, 2, 4, 6}}})}},
        {"avg_pool1d", F1(grid_samples::flat({tg::avg_pool1d(x, {2}), tg::avg_pool1d(x, {3}, {2}, {1}, true, false)})),
         {one("x [1, 2, 7]", {{{1, 2, 7}}})}},
        {"avg_pool2d",
         F1(grid_samples::flat({tg::avg_pool2d(x, {2}), tg::avg_pool2d(x, {3, 2}, {2, 1}, {1, 0}, true, true),
                  tg::avg_pool2d(x, {3}, {2}, {1}, false, false),
                  tg::avg_pool2d(cl(x), {2}, {1}, {0}, false, true, 3)})),
         {one("x [1, 1, 4, 6]", {{{1, 1, 4, 6}}}), one("zero batch [0, 2, 4, 6]", {{{0, 2, 4, 6}}})}},
        {"avg_pool3d", F1(grid_samples::flat({tg::avg_pool3d(x, {2}), tg::avg_pool3d(x, {2, 3, 2}, {1}, {1}, false, false)})),
         {one("x [1, 1, 2, 4, 4]", {{{1, 1, 2, 4, 4}}})}},
        {"max_pool1d_with_indices", F1(std::get<0>(tg::max_pool1d_with_indices(x, {3}, {2}, {1}, {1}, true))),
         {one("x [1, 2, 8]", {{{1, 2, 8}}})}},
        {"max_pool2d_with_indices", F1(std::get<0>(tg::max_pool2d_with_indices(x, {2, 3}, {2}, {1}, {1, 2}))),
         {one("x [1, 2, 4, 6]", {{{1, 2, 4, 6}}})}},
        {"max_pool3d_with_indices", F1(std::get<0>(tg::max_pool3d_with_indices(x, {2}, {1, 2, 2}))),
         {one("x [1, 1, 3, 4, 4]", {{{1, 1, 3, 4, 4}}})}},
        {"max_pool1d", F1(tg::max_pool1d(x, {2})), {one("x [1, 3, 6]", {{{1, 3, 6}}})}},
        // (Leaves without near ties inside a window: the finite differences
        // of the Taylor check would straddle the kink.)
        {"max_pool2d",
         F1(grid_samples::flat({tg::max_pool2d(grid_samples::cl(x), {2}), tg::max_pool2d(x, {3}, {2}, {1}, {1}, true)})),
         {one("x [1, 2, 5, 7]", {{{1, 2, 5, 7}}})}},
        {"max_pool3d", F1(tg::max_pool3d(x, {2}, {1})), {one("x [1, 1, 3, 3, 3]", {{{1, 1, 3, 3, 3}}})}},
        {"adaptive_avg_pool1d", F1(grid_samples::flat({tg::adaptive_avg_pool1d(x, {3}), tg::adaptive_avg_pool1d(x, {5})})),
         {one("x [1, 2, 7]", {{{1, 2, 7}}})}},
        {"adaptive_avg_pool2d", F1(grid_samples::flat({tg::adaptive_avg_pool2d(x, {3, 2}), tg::adaptive_avg_pool2d(grid_samples::cl(x), {1})})),
         {one("x [1, 2, 5, 4]", {{{1, 2, 5, 4}}})}},
        {"adaptive_avg_pool3d", F1(tg::adaptive_avg_pool3d(x, {2, 3, 1})), {one("x [1, 1, 3, 4, 2]", {{{1, 1, 3, 4, 2}}})}},
        {"interpolate",
         F1(grid_samples::flat({tg::interpolate(x, {6, 7}, {}, "bilinear"), tg::interpolate(x, {5, 3}, {}, "bilinear", true),
                  tg::interpolate(x, {5, 2}, {}, "nearest"),
                  tg::interpolate(cl(x), {}, {1.5, 2.0}, "bilinear", false)})),
         {one("x [1, 1, 3, 4]", {{{1, 1, 3, 4}}})}},
        {"interpolate", F1(grid_samples::flat({tg::interpolate(x, {7}, {}, "linear", true), tg::interpolate(x, {3}, {}, "linear")})),
         {one("x [1, 2, 5] (1-D)", {{{1, 2, 5}}})}},
        {"interpolate", F1(tg::interpolate(x, {3, 4, 2}, {}, "trilinear")), {one("x [1, 1, 2, 3, 3] (3-D)", {{{1, 1, 2, 3, 3}}})}},
        // The resampling primitives: up and down, align_corners, a scale
        // given, the last dim, channels-last and a zero batch.
        {"_resample_linear",
         F1(grid_samples::flat({tg::_resample_linear(x, 2, 5, 0.6, false), tg::_resample_linear(x, 3, 2, 0, true),
                                tg::_resample_linear(cl(x), 3, 7, 0.5, false), tg::_resample_linear(x, 2, 1, 0, true),
                                tg::_resample_linear(x.narrow(0, 0, 0), 3, 6, 0.5, false)})),
         {one("x [2, 2, 3, 4]", {{{2, 2, 3, 4}}})}},
        {"_resample_linear_backward",
         F1(grid_samples::flat({tg::_resample_linear_backward(x, 2, 2, 1.5, false),
                                tg::_resample_linear_backward(x, 3, 6, 0, true),
                                tg::_resample_linear_backward(cl(x), 3, 2, 2.0, false),
                                tg::_resample_linear_backward(x.narrow(0, 0, 0), 2, 4, 0.75, false)})),
         {one("g [2, 2, 3, 4]", {{{2, 2, 3, 4}}})}},
        // The group primitives: each with itself as both operands (the
        // same-tensor rule of _group_sum), a shared coefficient row, an
        // undefined operand, a channels-last (non-contiguous) input and a
        // zero batch.
        {"_group_sum",
         [](const variable_list& v) {
           const Tensor &a = v[0], &b = v[1];
           const Tensor strided = a.dim() > 2 ? grid_samples::cl(a) : a.t().contiguous().t();
           return grid_samples::flat({tg::_group_sum(a, b, 2), tg::_group_sum(a, a, 4), tg::_group_sum(b, {}, 1),
                                      tg::_group_sum(strided, b, 2),
                                      tg::_group_sum(a.narrow(0, 0, 0), b.narrow(0, 0, 0), 2)});
         },
         {one("a, b [2, 4, 3, 2]", {{{2, 4, 3, 2}}, {{2, 4, 3, 2}}}), one("a, b [3, 4] (no spatial dims)", {{{3, 4}}, {{3, 4}}})}},
        {"_group_center",
         [](const variable_list& v) {
           return grid_samples::flat({tg::_group_center(v[0], 2), tg::_group_center(grid_samples::cl(v[0]), 4),
                                      tg::_group_center(v[0], 1), tg::_group_center(v[0].narrow(0, 0, 0), 2)});
         },
         {one("x [2, 4, 3, 2]", {{{2, 4, 3, 2}}})}},
        {"_group_affine",
         [](const variable_list& v) {
           const Tensor &t = v[0], &s = v[1], &b = v[2];
           return grid_samples::flat({tg::_group_affine(t, s, b), tg::_group_affine(grid_samples::cl(t), b, {}),
                                      tg::_group_affine(t, {}, s), tg::_group_affine(t, s.narrow(0, 0, 1), b.narrow(0, 1, 1)),
                                      tg::_group_affine(t.narrow(0, 0, 0), {}, b.narrow(0, 0, 1))});
         },
         {one("t [2, 4, 3, 2], scale [2, 2], bias [2, 4]", {{{2, 4, 3, 2}}, {{2, 2}}, {{2, 4}}})}},
        {"group_norm",
         [](const variable_list& v) {
           return tg::cat({tg::group_norm(v[0], 2, v[1], v[2]).reshape({-1}), tg::group_norm(v[0], 4).reshape({-1})});
         },
         {one("x [2, 4, 2, 2], w [4], b [4]", {{{2, 4, 2, 2}}, {{4}}, {{4}}})}},
        {"batch_norm",
         [](const variable_list& v) {
           const tg::TensorOptions o = v[0].options();
           Tensor rm = tg::zeros({2}, o), rv = tg::ones({2}, o);
           Tensor train = tg::batch_norm(v[0], rm, rv, v[1], v[2], true);
           Tensor eval = tg::batch_norm(v[0], tg::full({2}, 0.2, o), tg::full({2}, 1.5, o), v[1], v[2], false);
           return tg::cat({train.reshape({-1}), eval.reshape({-1}), tg::batch_norm(v[0], {}, {}, {}, {}, true).reshape({-1})});
         },
         {one("x [2, 2, 2, 2], w [2], b [2]", {{{2, 2, 2, 2}}, {{2}}, {{2}}})}},
        {"instance_norm",
         [](const variable_list& v) {
           return tg::cat({tg::instance_norm(v[0], {}, {}, v[1], v[2]).reshape({-1}),
                           tg::instance_norm(v[0]).reshape({-1})});
         },
         {one("x [2, 2, 3], w [2], b [2]", {{{2, 2, 3}}, {{2}}, {{2}}})}},
    };
    for (OpEntry& ge : grid_entries)
      e.push_back(std::move(ge));
  }
  return e;
}

#undef F1
#undef F2

// Taylor coverage as the op lists declare it: linalg.def's column, ops.def's
// TG_TAYLOR lines (an op without one: `T`). An op declared `X` has no Taylor
// rule and must throw at itself in a Taylor level (never a wrong
// coefficient); `S` (sparse) refuses through sparse_coo_tensor, whose values'
// coefficients a sparse tensor cannot carry; `A` (by argument): refused at
// the op, or right; every other op is checked against finite differences.
const std::map<std::string, char>& declared_taylor_columns() {
  static const std::map<std::string, char> cols = [] {
    std::map<std::string, char> s;
#define TG_D(...)
#define TG_LINALG(ret, name, id, params, args, kind, taylor) s["linalg." #id] = #taylor[0];
#include <tapegrad/tensor/linalg.def>
#undef TG_LINALG
#define TG_GRID(ret, name, id, params, args, kind, taylor) s[#id] = #taylor[0];
#include <tapegrad/tensor/grid.def>
#undef TG_GRID
#define TG_OP0(...)
#define TG_OP(...)
#define TG_FN(...)
#define TG_TAYLOR(id, coverage) s[#id] = #coverage[0];
#include <tapegrad/tensor/ops.def>
#undef TG_TAYLOR
#undef TG_FN
#undef TG_OP
#undef TG_OP0
#undef TG_D
    return s;
  }();
  return cols;
}
char declared_taylor(const std::string& id) {
  auto it = declared_taylor_columns().find(id);
  return it == declared_taylor_columns().end() ? 'T' : it->second;
}

// Sparse tensors take no batched tangents (embedding and
// index_select_sparse_grad: their sparse gradients, in forward over reverse).
bool is_sparse_entry(const std::string& id) {
  for (const char* s :
       {"sparse_coo_tensor", "coalesce", "to_dense", "values", "_values", "index_select_sparse_grad", "embedding"})
    if (id == s) return true;
  return false;
}

// Taylor mode against forward mode: every input moves along a random
// cubic x(t) = x + v t + w t^2 + u t^3 (so the higher input coefficients
// are exercised too); y(t) = fn(x(t)) has y'(t) = g(t), the forward-mode
// J(x(t)) x'(t) (itself checked by gradcheck's check_forward_ad), and an
// order-3 Taylor pass must give c_2 = g'(0) / 2 and c_3 = g''(0) / 6, here
// by central differences of g with step h. Returns an empty string when they
// agree.
std::string taylor_mismatch(const Fn& fn, const variable_list& in, double h = 1e-4) {
  namespace fwd = tg::autograd::forward_ad;
  tg::manual_seed(77);
  variable_list v, w, u;
  for (const Tensor& t : in) {
    v.push_back(tg::randn_like(t.detach()));
    w.push_back(tg::randn_like(t.detach()));
    u.push_back(tg::randn_like(t.detach()));
  }
  auto g = [&](double t) {
    fwd::dual_level level;
    variable_list d;
    for (size_t i = 0; i < in.size(); ++i)
      d.push_back(fwd::make_dual(in[i].detach() + v[i] * t + w[i] * (t * t) + u[i] * (t * t * t),
                                 v[i] + w[i] * (2 * t) + u[i] * (3 * t * t)));
    Tensor out = fn(d);
    Tensor tan = fwd::unpack_dual(out).tangent;
    return tan.defined() ? tan.detach() : tg::zeros_like(out.detach());
  };
  std::vector<Tensor> c;
  {
    fwd::taylor_level level(3, 1);
    variable_list d;
    for (size_t i = 0; i < in.size(); ++i)
      d.push_back(fwd::make_jet(in[i].detach(), {v[i].unsqueeze(0), w[i].unsqueeze(0), u[i].unsqueeze(0)}));
    Tensor out = fn(d);
    c = fwd::jet_coefficients(out);
    for (Tensor& t : c)
      t = t.defined() ? t.select(0, 0).detach() : tg::zeros_like(out.detach());
  }
  Tensor plus = g(h), zero = g(0), minus = g(-h);
  Tensor want2 = (plus - minus) / (4 * h), want3 = (plus - zero * 2.0 + minus) / (6 * h * h);
  std::ostringstream msg;
  auto compare = [&](Tensor got, Tensor want, const char* name) {
    if (got.numel() == 0) return;
    // NaN where the value is NaN (mean over nothing) on both sides: equal.
    Tensor nan_got = tg::ne(got, got), nan_want = tg::ne(want, want);
    if (!tg::equal(nan_got, nan_want)) {
      msg << name << ": NaN in one of Taylor mode and forward mode only; ";
      return;
    }
    got = tg::where(nan_got, 0.0, got);
    want = tg::where(nan_want, 0.0, want);
    const double err = tg::abs(got - want).amax().item<double>();
    const double tol = 1e-5 * (1 + tg::abs(want).amax().item<double>());
    if (!(err <= tol)) msg << name << ": max |Taylor - finite differences of g| = " << err << " > " << tol << "; ";
  };
  compare(c[1], want2, "c_2");
  compare(c[2], want3, "c_3");
  return msg.str();
}

class OpTable : public ::testing::TestWithParam<tg::DeviceType> {};

// The op list in two halves by a hash of the op's id (every entry of an op
// in one half), each half a test of its own: ctest runs them side by side
// (under TSan, where kernels run on the calling thread, the whole table was
// one test of 400 s at the end of CI's run).
uint64_t id_hash(const std::string& id) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : id)
    h = (h ^ c) * 1099511628211ull;
  return h;
}
bool in_half(const std::string& id, int half) { return int(id_hash(id) % 2) == half; }

// TG_OP_TABLE_SHARD=k/n: only the ops of shard k of n within the half
// (compute-sanitizer's memcheck runs the shards side by side: one half takes
// over 9 minutes under it). Malformed values are an error, not the whole table.
bool in_shard(const std::string& id, const char* shard) {
  if (!shard) return true;
  unsigned k = 0, n = 0;
  char tail = 0;
  if (std::sscanf(shard, "%u/%u%c", &k, &n, &tail) != 2 || n == 0 || k >= n)
    throw std::runtime_error(std::string("TG_OP_TABLE_SHARD='") + shard + "': expected k/n with k < n");
  return (id_hash(id) / 2) % n == k;
}

void check_every_op(tg::DeviceType type, int half) {
  const bool gpu = type == tg::kCUDA;
  if (gpu) {
    REQUIRE_GPU();
  }
  const Device dev = gpu ? Device(tg::kCUDA, 0) : Device(tg::kCPU);
  int checked = 0;
  // The ops whose Taylor declaration a sample checked (on nonempty inputs),
  // and those not run here at all (pin_memory without a GPU).
  std::set<std::string> taylor_checked, not_run;
  // TG_OP_TABLE_FILTER=text: only the entries whose id contains text (a
  // developer's aid; the coverage checks below are skipped then).
  const char* filter = std::getenv("TG_OP_TABLE_FILTER");
  const char* shard = std::getenv("TG_OP_TABLE_SHARD");
  for (const OpEntry& op : op_entries()) {
    if (!in_half(op.id, half) || !in_shard(op.id, shard)) continue;
    if (filter && op.id.find(filter) == std::string::npos) continue;
    if (op.gpu_only && !tg::cuda::is_available()) {
      not_run.insert(op.id);
      continue;
    }
    if (op.check) {
      SCOPED_TRACE(op.id);
      op.check(dev);
      taylor_checked.insert(op.id);
      continue;
    }
    uint64_t seed = 1;
    for (const Sample& s : op.samples) {
      SCOPED_TRACE(op.id + " on " + s.what);
      // A complex leaf enters as its parts (Leaf::complex).
      Fn fn = [&](const variable_list& in) {
        variable_list moved;
        for (size_t i = 0; i < in.size(); ++i) {
          Tensor t = in[i].to(dev);
          moved.push_back(s.leaves[i].complex ? tg::view_as_complex(t) : t);
        }
        Tensor out = op.fn(moved);
        EXPECT_EQ(out.device(), dev) << op.id;
        if (tg::is_complex(out.dtype())) out = tg::view_as_real(out);
        return out.to(Device(tg::kCPU));
      };
      variable_list in;
      for (const Leaf& l : s.leaves)
        in.push_back(make_leaf(l, seed++));
      tg::autograd::GradcheckOptions options = op.options;
      options.check_forward_ad = true;  // forward mode, and forward over reverse
      options.check_batched_forward_ad = !op.id.empty() && !is_sparse_entry(op.id);  // all columns in one pass
      try {
        auto r1 = tg::autograd::gradcheck(fn, in, options);
        EXPECT_TRUE(r1.ok) << "gradcheck: " << r1.message;
        auto r2 = tg::autograd::gradgradcheck(fn, in, options);
        EXPECT_TRUE(r2.ok) << "gradgradcheck: " << r2.message;
        // Taylor mode rides in batched tangents. An empty input carries no
        // coefficients worth checking.
        bool empty = false;
        for (const Tensor& t : in)
          empty = empty || t.numel() == 0;
        const char taylor = declared_taylor(op.id);
        if (taylor == 'X') {
          bool threw = false;
          try {
            taylor_mismatch(fn, in);
          } catch (const tg::Error& err) {
            threw = std::string(err.what()).find("no Taylor-mode rule") != std::string::npos;
            EXPECT_TRUE(threw) << "Taylor mode threw another error: " << err.what();
          }
          EXPECT_TRUE(threw || empty)
              << "declared without a Taylor rule (`X` in its op list) but did not refuse Taylor mode";
        } else if (taylor == 'S') {
          std::string what;
          try {
            taylor_mismatch(fn, in);
          } catch (const tg::Error& err) {
            what = err.what();
          }
          EXPECT_NE(what.find("sparse tensors take no batched tangents"), std::string::npos)
              << "declared sparse (`S` in ops.def): Taylor mode should be refused at sparse_coo_tensor, got "
              << (what.empty() ? std::string("no error") : what);
        } else if (taylor == 'A') {
          try {
            const std::string bad = taylor_mismatch(fn, in);
            EXPECT_TRUE(bad.empty()) << "Taylor mode: " << bad;
          } catch (const tg::Error& err) {
            EXPECT_NE(std::string(err.what()).find("no Taylor-mode rule"), std::string::npos) << err.what();
          }
        } else {
          // The entries through float32 (a coarse step) are linear, so g is
          // a quadratic in t whose central differences are exact at any
          // step: a long one keeps float32's rounding out of them (a
          // nonlinear op would fail, not pass, by it).
          const bool coarse = options.eps != tg::autograd::GradcheckOptions().eps;
          const std::string bad = taylor_mismatch(fn, in, coarse ? 0.25 : 1e-4);
          EXPECT_TRUE(bad.empty()) << "Taylor mode: " << bad;
        }
        if (!empty) taylor_checked.insert(op.id);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "threw: " << e.what();
      }
      ++checked;
    }
  }
  if (filter || shard) return;
  EXPECT_GT(checked, 60);
  // Every recorded op's Taylor declaration is checked on some sample: an op
  // declared covered that nothing checks would be an unchecked claim.
  for (const tg::detail::OpInfo& info : tg::detail::op_list()) {
    if (!info.recorded || not_run.count(info.id) || !in_half(info.id, half)) continue;
    EXPECT_TRUE(taylor_checked.count(info.id))
        << "op '" << info.id << "' declares Taylor coverage `" << declared_taylor(info.id)
        << "` (ops.def: no TG_TAYLOR line means `T`) but no nonempty sample of its test-table entry checks it; "
           "add a sample, or declare it honestly (TG_TAYLOR(id, X) and a guard)";
  }
  EXPECT_GE(taylor_checked.size(), 80u) << "half " << half << ": " << taylor_checked.size()
                                        << " ops checked";  // of 191 on the CPU, 192 with pin_memory on a GPU
}

TEST_P(OpTable, GradcheckAndGradgradcheckEveryOpFirstHalf) { check_every_op(GetParam(), 0); }
TEST_P(OpTable, GradcheckAndGradgradcheckEveryOpSecondHalf) { check_every_op(GetParam(), 1); }

// The everyday surface against values worked out by hand (PyTorch's
// semantics: ties, NaN, stability, correction, halves), on every device.
TEST_P(OpTable, EverydayOpsMatchHandWorkedValues) {
  const bool gpu = GetParam() == tg::kCUDA;
  if (gpu) {
    REQUIRE_GPU();
  }
  const Device dev = gpu ? Device(tg::kCUDA, 0) : Device(tg::kCPU);
  auto T = [&](std::vector<double> v, IntList s) { return tg::tensor(v, s, kF64).to(dev); };
  auto I = [&](std::vector<double> v, IntList s) {
    return tg::tensor(v, s, tg::TensorOptions().dtype(tg::kInt64)).to(dev);
  };
  auto host = [](const Tensor& t) { return tgtest::values(t); };
  using V = std::vector<double>;
  auto near = [](const V& got, const V& want, const char* what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < got.size(); ++i) {
      if (!(std::isnan(want[i]) && std::isnan(got[i])) && got[i] != want[i]) {
        EXPECT_NEAR(got[i], want[i], 1e-12 * (1 + std::fabs(want[i]))) << what << " at " << i;
      }
    }
  };
  const double nan = std::nan("");
  Tensor m = T({3, 1, 2, 1, 5, -4}, {2, 3});
  // reductions
  near(host(m.prod()), {-120}, "prod");
  near(host(tg::prod(m, 1)), {6, -20}, "prod dim");
  near(host(tg::prod(T({2, 0, 3}, {3}))), {0}, "prod with a zero");
  EXPECT_EQ(tg::prod(I({2, 3}, {2})).dtype(), tg::kInt64);
  near(host(tg::prod(T({}, {0}))), {1}, "prod of nothing");
  {
    V v = {3, 1, 2, 1, 5, -4};
    double mean = 8.0 / 6, ss = 0;
    for (double e : v)
      ss += (e - mean) * (e - mean);
    near(host(m.var()), {ss / 5}, "var, correction 1");
    near(host(tg::var(m, {}, 0.0)), {ss / 6}, "var, correction 0");
    near(host(m.std()), {std::sqrt(ss / 5)}, "std");
  }
  near(host(tg::var(m, {1})), {1, 61.0 / 3}, "var dim");
  near(host(tg::std(m, {0}, 1, true)), {std::sqrt(2.0), std::sqrt(8.0), std::sqrt(18.0)}, "std dim keepdim");
  EXPECT_TRUE(std::isnan(host(tg::var(T({1}, {1})))[0]));  // N - correction = 0
  // any, all, argmax, argmin
  Tensor z = T({0, nan, 0, 0}, {2, 2});
  EXPECT_EQ(host(z.any()), V{1});
  EXPECT_EQ(host(z.all()), V{0});
  EXPECT_EQ(host(tg::any(z, 1)), (V{1, 0}));
  EXPECT_EQ(host(tg::all(T({}, {0}))), V{1});
  EXPECT_EQ(host(tg::any(T({}, {0}))), V{0});
  EXPECT_EQ(tg::any(z).dtype(), tg::kBool);
  Tensor ties = T({1, 5, 5, -2, 5, -2}, {2, 3});
  EXPECT_EQ(host(ties.argmax()), V{1});  // the first of the ties, flattened
  EXPECT_EQ(host(tg::argmin(ties)), V{3});
  EXPECT_EQ(host(tg::argmax(ties, 1)), (V{1, 1}));
  EXPECT_EQ(host(tg::argmin(ties, 0, true)), (V{1, 0, 1}));
  EXPECT_EQ(tg::argmax(ties, std::nullopt, true).sizes(), (IntList{1, 1}));
  EXPECT_EQ(host(tg::argmax(T({1, nan, 3}, {3}))), V{1});  // NaN is the largest
  // sort: stable, NaN last ascending and first descending, -0 equal to 0
  Tensor u = T({2, nan, -1, 2, 0, -0.0, 2}, {7});
  auto [sv, si] = u.sort();
  near(host(sv), {-1, 0, -0.0, 2, 2, 2, nan}, "sort values");
  EXPECT_EQ(host(si), (V{2, 4, 5, 0, 3, 6, 1}));
  auto [dv, di] = tg::sort(u, 0, true);
  near(host(dv), {nan, 2, 2, 2, 0, -0.0, -1}, "sort descending");
  EXPECT_EQ(host(di), (V{1, 0, 3, 6, 4, 5, 2}));
  EXPECT_EQ(host(tg::argsort(I({3, 1, 3, 1}, {4}))), (V{1, 3, 0, 2}));
  EXPECT_EQ(host(std::get<1>(tg::sort(m, 0))), (V{1, 0, 1, 0, 1, 0}));
  auto [tv, ti] = tg::topk(m, 2);
  near(host(tv), {3, 2, 5, 1}, "topk");
  EXPECT_EQ(host(ti), (V{0, 2, 1, 0}));
  near(host(std::get<0>(m.topk(1, 0, false))), {1, 1, -4}, "topk smallest");
  auto [kv, ki] = tg::kthvalue(m, 2, 1);
  near(host(kv), {2, 1}, "kthvalue");
  EXPECT_EQ(host(ki), (V{2, 0}));
  near(host(T({4, 1, 3, 2}, {4}).median()), {2}, "median, lower");
  auto [mv, mi] = tg::median(T({4, 1, 3, nan, 2, 6}, {2, 3}), 1);
  near(host(mv), {3, nan}, "median with NaN");
  EXPECT_EQ(host(mi), (V{2, 0}));
  // products, triangles, diagonals
  near(host(tg::outer(T({1, 2}, {2}), T({3, 4, 5}, {3}))), {3, 4, 5, 6, 8, 10}, "outer");
  near(host(tg::cross(T({1, 0, 0, 0, 1, 0}, {2, 3}), T({0, 1, 0}, {3}))), {0, 0, 1, 0, 0, 0}, "cross");
  Tensor sq = T({1, 2, 3, 4, 5, 6, 7, 8, 9}, {3, 3});
  near(host(sq.tril()), {1, 0, 0, 4, 5, 0, 7, 8, 9}, "tril");
  near(host(tg::triu(sq, 1)), {0, 2, 3, 0, 0, 6, 0, 0, 0}, "triu 1");
  near(host(tg::tril(sq, -1)), {0, 0, 0, 4, 0, 0, 7, 8, 0}, "tril -1");
  near(host(sq.diagonal()), {1, 5, 9}, "diagonal");
  near(host(tg::diagonal(sq, 1)), {2, 6}, "diagonal 1");
  near(host(tg::diagonal(sq, -2)), {7}, "diagonal -2");
  near(host(tg::diagonal(sq, 0, 1, 0)), {1, 5, 9}, "diagonal dims swapped");
  EXPECT_EQ(tg::diagonal(sq, 5).numel(), 0);
  near(host(tg::diag(T({1, 2}, {2}), 1)), {0, 1, 0, 0, 0, 2, 0, 0, 0}, "diag of a vector");
  near(host(tg::diag_embed(T({1, 2, 3, 4}, {2, 2}), -1)), {0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 0, 3, 0, 0, 0, 4, 0},
       "diag_embed -1");
  near(host(sq.trace()), {15}, "trace");
  // masks
  Tensor mask = tg::tensor({1, 0, 1}, {3}, tg::TensorOptions().dtype(tg::kBool)).to(dev);
  near(host(m.masked_fill(mask, -7.0)), {-7, 1, -7, -7, 5, -7}, "masked_fill");
  EXPECT_EQ(host(I({1, 2, 3}, {3}).masked_fill(mask, 9)), (V{9, 2, 9}));
  near(host(m.masked_select(mask)), {3, 2, 1, -4}, "masked_select");
  EXPECT_EQ(host(tg::nonzero(T({0, 2, 0, 3}, {2, 2}))), (V{0, 1, 1, 1}));
  EXPECT_EQ(tg::nonzero(T({0, 0}, {2})).sizes(), (IntList{0, 1}));
  // pieces and copies
  auto parts = tg::split(T({0, 1, 2, 3, 4}, {5}), 2);
  ASSERT_EQ(parts.size(), 3u);
  near(host(parts[2]), {4}, "split last piece");
  auto chunks = T({0, 1, 2, 3, 4, 5}, {6}).chunk(4);  // ceil(6 / 4) = 2 each: 3 chunks, as PyTorch
  EXPECT_EQ(chunks.size(), 3u);
  near(host(T({1, 2}, {2}).repeat({2, 2})), {1, 2, 1, 2, 1, 2, 1, 2}, "repeat");
  EXPECT_EQ(T({1, 2}, {2}).repeat({3, 1, 2}).sizes(), (IntList{3, 1, 4}));
  EXPECT_EQ(tg::tile(T({1, 2, 3, 4}, {2, 2}), {2}).sizes(), (IntList{2, 4}));
  near(host(tg::repeat_interleave(T({1, 2}, {2}), 2)), {1, 1, 2, 2}, "repeat_interleave");
  near(host(tg::repeat_interleave(T({1, 2, 3, 4}, {2, 2}), I({1, 2}, {2}), 0)), {1, 2, 3, 4, 3, 4},
       "repeat_interleave counts");
  near(host(tg::flip(m, {1})), {2, 1, 3, -4, 5, 1}, "flip");
  near(host(tg::roll(T({1, 2, 3, 4}, {4}), {1})), {4, 1, 2, 3}, "roll");
  near(host(tg::roll(m, {-1}, {1})), {1, 2, 3, 5, -4, 1}, "roll dim");
  auto grid = tg::meshgrid({T({1, 2}, {2}), T({3, 4, 5}, {3})}, "xy");
  EXPECT_EQ(grid[0].sizes(), (IntList{3, 2}));
  near(host(grid[0]), {1, 2, 1, 2, 1, 2}, "meshgrid xy");
  // einsum against the ops it stands for
  Tensor a = T({1, 2, 3, 4, 5, 6}, {2, 3}), b = T({1, 0, 2, 1, 0, 3}, {3, 2});
  near(host(tg::einsum("ij,jk->ik", {a, b})), host(tg::mm(a, b)), "einsum mm");
  near(host(tg::einsum("ij,jk", {a, b})), host(tg::mm(a, b)), "einsum implicit");
  near(host(tg::einsum("ij->ji", {a})), host(a.t()), "einsum transpose");
  near(host(tg::einsum("ii", {sq})), {15}, "einsum trace");
  near(host(tg::einsum("i,j->ij", {T({1, 2}, {2}), T({3, 4, 5}, {3})})), {3, 4, 5, 6, 8, 10}, "einsum outer");
  near(host(tg::einsum("b...j,jk->b...k", {a.unsqueeze(0), b})), host(tg::mm(a, b)), "einsum ellipsis");
  near(host(tg::einsum("ij,jk,kl->il", {a, b, T({1, 2, 3, 4}, {2, 2})})),
       host(tg::mm(tg::mm(a, b), T({1, 2, 3, 4}, {2, 2}))), "einsum chain");
  // elementwise
  near(host(tg::lerp(T({1, 2}, {2}), T({3, 10}, {2}), 1.0)), {3, 10}, "lerp at 1");
  near(host(tg::lerp(T({1, 2}, {2}), T({3, 10}, {2}), T({0.25, 0.75}, {2}))), {1.5, 8}, "lerp");
  near(host(tg::clamp_min(T({nan, 1, -1}, {3}), 0.0)), {nan, 1, 0}, "clamp_min");
  near(host(tg::clamp_max(T({1, -1}, {2}), T({0, nan}, {2}))), {0, nan}, "clamp_max NaN bound");
}

INSTANTIATE_TEST_SUITE_P(Devices, OpTable, ::testing::Values(tg::kCPU, tg::kCUDA),
                         [](const auto& info) { return info.param == tg::kCPU ? "Cpu" : "Cuda"; });

// The ops added for what users reached for first, against closed forms
// computed on the host, on every device.
TEST_P(OpTable, NewOpsMatchClosedForms) {
  const bool gpu = GetParam() == tg::kCUDA;
  if (gpu) {
    REQUIRE_GPU();
  }
  const Device dev = gpu ? Device(tg::kCUDA, 0) : Device(tg::kCPU);
  const std::vector<double> v = {0.5, -1.0, 2.0, 3.0, 1e-9, -2.0};
  Tensor x = tg::tensor(v, {2, 3}, kF64).to(dev);
  auto host = [](const Tensor& t) { return tgtest::values(t); };
  auto near = [](const std::vector<double>& got, const std::vector<double>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      if (got[i] != want[i]) {
        EXPECT_NEAR(got[i], want[i], 1e-12 * (1 + std::fabs(want[i]))) << i;
      }
    }
  };
  near(host(tg::log1p(x.narrow(1, 0, 1).abs())), {std::log1p(0.5), std::log1p(3.0)});
  near(host(tg::expm1(tg::tensor({1e-9}, {1}, kF64).to(dev))), {std::expm1(1e-9)});
  near(host(x.narrow(1, 0, 1).tan()), {std::tan(0.5), std::tan(3.0)});
  // Rounding: halves to even, toward minus infinity, toward zero; frac keeps the sign.
  Tensor h = tg::tensor({0.5, 1.5, -2.5, -1.75, 2.25, -0.0}, {6}, kF64).to(dev);
  near(host(h.round()), {0, 2, -2, -2, 2, 0});
  near(host(h.floor()), {0, 1, -3, -2, 2, 0});
  near(host(h.ceil()), {1, 2, -2, -1, 3, 0});
  near(host(h.trunc()), {0, 1, -2, -1, 2, 0});
  near(host(h.frac()), {0.5, 0.5, -0.5, -0.75, 0.25, 0});
  Tensor hi = tg::tensor({-3, 7}, {2}, tg::TensorOptions().dtype(tg::kInt64)).to(dev);
  EXPECT_EQ(hi.floor().dtype(), tg::kInt64);
  EXPECT_EQ(host(hi.round()), (std::vector<double>{-3, 7}));
  EXPECT_EQ(hi.frac().dtype(), tg::kFloat32);
  near(host(tg::atan(x.narrow(1, 2, 1))), {std::atan(2.0), std::atan(-2.0)});
  near(host(tg::log2(x.abs()).narrow(1, 0, 1)), {-1.0, std::log2(3.0)});
  near(host(tg::log10(x.abs()).narrow(1, 1, 1)), {0.0, -9.0});
  near(host(tg::exp2(x).narrow(1, 2, 1)), {4.0, 0.25});
  near(host(tg::asinh(x).narrow(1, 0, 1)), {std::asinh(0.5), std::asinh(3.0)});
  near(host(tg::cosh(x).narrow(1, 1, 1)), {std::cosh(-1.0), std::cosh(1e-9)});
  EXPECT_TRUE(std::isnan(host(tg::asin(x))[2]));  // outside [-1, 1]
  EXPECT_TRUE(std::isinf(host(tg::atanh(tg::tensor({1.0}, {1}, kF64).to(dev)))[0]));
  // atan2's quadrants, hypot without overflow, the signs of fmod and remainder.
  Tensor ya = tg::tensor({1, 1, -1, -1, 0, 0}, {6}, kF64).to(dev),
         xa = tg::tensor({1, -1, 1, -1, -1, 1}, {6}, kF64).to(dev);
  near(host(tg::atan2(ya, xa)), {M_PI / 4, 3 * M_PI / 4, -M_PI / 4, -3 * M_PI / 4, M_PI, 0});
  near(host(tg::hypot(tg::tensor({3e300, 3}, {2}, kF64).to(dev), tg::tensor({4e300, 4}, {2}, kF64).to(dev))),
       {5e300, 5});
  Tensor na = tg::tensor({5.5, -5.5, 5.5, -5.5}, {4}, kF64).to(dev), nb = tg::tensor({2, 2, -2, -2}, {4}, kF64).to(dev);
  near(host(tg::fmod(na, nb)), {1.5, -1.5, 1.5, -1.5});
  near(host(tg::remainder(na, nb)), {1.5, 0.5, -0.5, -1.5});
  near(host(na.remainder(2.0)), {1.5, 0.5, 1.5, 0.5});
  Tensor ia = tg::tensor({7, -7, 7, -7}, {4}, tg::TensorOptions().dtype(tg::kInt64)).to(dev);
  Tensor ib = tg::tensor({3, 3, -3, -3}, {4}, tg::TensorOptions().dtype(tg::kInt64)).to(dev);
  EXPECT_EQ(host(tg::fmod(ia, ib)), (std::vector<double>{1, -1, 1, -1}));
  EXPECT_EQ(host(tg::remainder(ia, ib)), (std::vector<double>{1, 2, -2, -1}));
  EXPECT_EQ(tg::remainder(ia, ib).dtype(), tg::kInt64);
  EXPECT_EQ(tg::atan2(ia, ib).dtype(), tg::kFloat32);
  EXPECT_THROW(tg::fmod(ia, ib * 0), tg::Error);
  EXPECT_THROW(ia.remainder(0), tg::Error);
  EXPECT_TRUE(std::isnan(host(tg::fmod(na, nb * 0.0))[0]));
  auto [mx, imx] = x.max(1);
  near(host(mx), {2.0, 3.0});
  EXPECT_EQ(host(imx), (std::vector<double>{2, 0}));
  EXPECT_EQ(imx.dtype(), tg::kInt64);
  auto [mn, imn] = tg::min(x, 0, true);
  near(host(mn), {0.5, -1.0, -2.0});
  EXPECT_EQ(host(imn), (std::vector<double>{0, 0, 1}));
  EXPECT_EQ(mn.sizes(), (IntList{1, 3}));
  near(host(x.max()), {3.0});
  // First index of ties; a NaN is the max.
  Tensor ties = tg::tensor({1, 4, 4, std::nan(""), 2, 0}, {2, 3}, kF64).to(dev);
  EXPECT_EQ(host(std::get<1>(ties.max(1))), (std::vector<double>{1, 0}));
  double lse0 = std::log(std::exp(0.5) + std::exp(-1.0) + std::exp(2.0));
  near(host(x.logsumexp({1})), {lse0, std::log(std::exp(3.0) + std::exp(1e-9) + std::exp(-2.0))});
  near(host(tg::logsumexp(tg::full({2}, -INFINITY, kF64).to(dev), {0})), {-INFINITY});
  near(host(x.softmax(1).select(0, 0)), {std::exp(0.5 - lse0), std::exp(-1.0 - lse0), std::exp(2.0 - lse0)});
  near(host(x.log_softmax(1).select(0, 0).narrow(0, 2, 1)), {2.0 - lse0});
  double l2 = 0, l3 = 0, linf = 0;
  for (double e : v)
    l2 += e * e, l3 += std::fabs(e) * e * e, linf = std::max(linf, std::fabs(e));
  near(host(x.norm()), {std::sqrt(l2)});
  near(host(tg::norm(x, 3.0)), {std::cbrt(l3)});
  near(host(tg::norm(x, INFINITY)), {linf});
  near(host(tg::norm(x, 2.0, {1})), {std::sqrt(0.25 + 1 + 4), std::sqrt(9 + 1e-18 + 4)});
  near(host(tg::dot(x.select(0, 0), x.select(0, 1))), {0.5 * 3.0 + -1.0 * 1e-9 + 2.0 * -2.0});
  near(host(x.cumsum(1)), {0.5, -0.5, 1.5, 3.0, 3.0 + 1e-9, 1.0 + 1e-9});
  near(host(tg::cumsum(x, 0)), {0.5, -1.0, 2.0, 3.5, -1.0 + 1e-9, 0.0});
  // The gradient of a norm at zero is 0, not NaN (the subgradient).
  Tensor z = tg::zeros({3}, kF64).to(dev).requires_grad_();
  EXPECT_EQ(host(tg::autograd::grad({tg::norm(z)}, {z})[0]), (std::vector<double>{0, 0, 0}));
  // max over a dim sends the gradient to the first extreme only.
  Tensor t = tg::tensor({1, 3, 3}, {3}, kF64).to(dev).requires_grad_();
  EXPECT_EQ(host(tg::autograd::grad({std::get<0>(t.max(0))}, {t})[0]), (std::vector<double>{0, 1, 0}));
  EXPECT_ERROR_CONTAINS(tg::dot(x, x), "dot: expected two 1-D tensors");
  // An integer cumsum is an Int64 scan, as PyTorch's (it used to be refused).
  Tensor xi = tg::cumsum(tg::tensor({3, -1, 4, 1, 5, 9}, {2, 3}).to(tg::kInt64).to(dev), 1);
  EXPECT_EQ(xi.dtype(), tg::kInt64);
  EXPECT_EQ(host(xi), (std::vector<double>{3, 2, 6, 1, 6, 15}));
}

// A repeated label's sizes within one operand must be equal (its diagonal is
// taken); one label's across operands equal or 1 (broadcast), as PyTorch's.
TEST(Einsum, LabelSizesAreChecked) {
  // "ii->i" of a [1, 3] tensor used to return zeros.
  EXPECT_ERROR_CONTAINS(tg::einsum("ii->i", {tg::ones({1, 3}, kF64)}),
                        "einsum: label 'i' is repeated in operand 0 of \"ii->i\" with sizes 1 and 3 (shape [1, 3])");
  EXPECT_ERROR_CONTAINS(tg::einsum("bii->b", {tg::ones({2, 3, 1}, kF64)}), "with sizes 3 and 1");
  EXPECT_ERROR_CONTAINS(tg::einsum("ij,jk->ik", {tg::ones({2, 3}, kF64), tg::ones({4, 5}, kF64)}),
                        "einsum: label 'j' of \"ij,jk->ik\" has size 3 in operand 0 (shape [2, 3]) but 4 in operand 1");
  // A size 0 is no size 1: it does not broadcast (it used to fail in expand).
  EXPECT_ERROR_CONTAINS(tg::einsum("i,i->i", {tg::ones({0}, kF64), tg::ones({5}, kF64)}), "has size 0 in operand 0");
  EXPECT_ERROR_CONTAINS(tg::einsum("...i,...i", {tg::ones({2, 3}, kF64), tg::ones({4, 3}, kF64)}),
                        "the \"...\" dim 0 from the right of \"...i,...i\" has size 2 in operand 0");
  // Sizes 1 broadcast; equal repeated sizes take the diagonal.
  EXPECT_EQ(tgtest::values(tg::einsum("i,i->i", {tg::tensor({2}, {1}, kF64), tg::tensor({1, 2, 3}, {3}, kF64)})),
            (std::vector<double>{2, 4, 6}));
  EXPECT_EQ(tgtest::values(tg::einsum("ii->i", {tg::tensor({1, 2, 3, 4}, {2, 2}, kF64)})), (std::vector<double>{1, 4}));
  EXPECT_EQ(tgtest::values(tg::einsum("ij,j->i", {tg::ones({2, 1}, kF64), tg::tensor({1, 2}, {2}, kF64)})),
            (std::vector<double>{3, 3}));
}

// A result (or a pairwise product) with more elements than 64 bits count is
// refused before anything is allocated.
TEST(Einsum, ResultSizesAreOverflowChecked) {
  Tensor big = tg::ones({1}, kF64).expand({int64_t(1) << 22});  // one element, no memory
  EXPECT_ERROR_CONTAINS(tg::einsum("i,j,k->ijk", {big, big, big}),
                        "einsum: \"i,j,k->ijk\" asks for a result (or a product of two operands) with labels \"ijk\" "
                        "of sizes [4194304, 4194304, 4194304], more elements than fit in 64 bits");
  Tensor huge = tg::ones({1}, kF64).expand({int64_t(1) << 32});
  EXPECT_ERROR_CONTAINS(tg::einsum("i,j->ij", {huge, huge}), "more elements than fit in 64 bits");
  EXPECT_EQ(tg::einsum("i,i->", {big, big}).item<double>(), double(int64_t(1) << 22));  // still usable
}

// The greedy search for the contraction order costs O(parts^3) per step:
// many operands contract left to right instead (1000 operands took minutes).
TEST(Einsum, ManyOperandsContractInBoundedTime) {
  auto timed = [](const std::string& eq, const std::vector<Tensor>& ops) {
    const auto t0 = std::chrono::steady_clock::now();
    Tensor r = tg::einsum(eq, ops);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(s, 30.0) << eq.substr(0, 20) << "... (" << ops.size() << " operands) took " << s << " s";
    return tgtest::values(r);
  };
  std::string eq = "i";
  std::vector<Tensor> ops(1000, tg::tensor({1.001, -1}, {2}, kF64));
  for (size_t k = 1; k < ops.size(); ++k)
    eq += ",i";
  std::vector<double> r = timed(eq + "->i", ops);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_NEAR(r[0], std::pow(1.001, 1000), 1e-10 * r[0]);
  EXPECT_EQ(r[1], 1.0);
  // 600 matrices, alternately M and its transpose: sum over a, b of (M_ab M_ba)^300.
  Tensor m = tg::tensor({1, 1.001, 0.999, 1}, {2, 2}, kF64);
  std::string eq2;
  std::vector<Tensor> ms;
  for (int k = 0; k < 600; ++k) {
    eq2 += k == 0 ? "" : ",";
    eq2 += k % 2 ? "ba" : "ab";
    ms.push_back(m);
  }
  std::vector<double> r2 = timed(eq2 + "->", ms);
  ASSERT_EQ(r2.size(), 1u);
  EXPECT_NEAR(r2[0], 2 + 2 * std::pow(1.001 * 0.999, 300), 1e-12);
  // Their gradient too (each operand's: the product of the others).
  std::vector<Tensor> leaves;
  for (int k = 0; k < 200; ++k)
    leaves.push_back(tg::tensor({1.001, -1}, {2}, kF64).requires_grad_());
  std::string eq3 = "i";
  for (size_t k = 1; k < leaves.size(); ++k)
    eq3 += ",i";
  variable_list g = tg::autograd::grad({tg::einsum(eq3 + "->", leaves)}, {leaves[7]});
  EXPECT_NEAR(tgtest::values(g[0])[0], std::pow(1.001, 199), 1e-12);
  EXPECT_NEAR(tgtest::values(g[0])[1], -1.0, 1e-12);
}

// median() of a whole tensor spreads its gradient evenly over the elements
// equal to it (all NaNs when it is NaN), as PyTorch's; its value is the
// element itself (-0 stays -0, inf stays inf). median(dim) keeps PyTorch's
// gradient to the selected index. All of it went to one element before.
TEST_P(OpTable, MedianOfATensorSpreadsItsGradientOverTies) {
  const bool gpu = GetParam() == tg::kCUDA;
  if (gpu) {
    REQUIRE_GPU();
  }
  const Device dev = gpu ? Device(tg::kCUDA, 0) : Device(tg::kCPU);
  using V = std::vector<double>;
  const double nan = std::nan(""), inf = INFINITY;
  struct Case {
    V x;
    IntList shape;
    double value;
    V grad;
  };
  const std::vector<Case> cases = {
      {{1, 2, 2, 3}, {4}, 2, {0, 0.5, 0.5, 0}},
      {{2, 5, 2, 2, 7, 0}, {2, 3}, 2, {1.0 / 3, 0, 1.0 / 3, 1.0 / 3, 0, 0}},
      {{4, 1, 3, 2}, {2, 2}, 2, {0, 0, 0, 1}},
      {{nan, 1, nan}, {3}, nan, {0.5, 0, 0.5}},
      {{inf, inf, 1}, {3}, inf, {0.5, 0.5, 0}},
      {{-inf, 5, -inf}, {3}, -inf, {0.5, 0, 0.5}},
      {{-0.0, 1, -0.0}, {3}, -0.0, {0.5, 0, 0.5}},
      {{7}, {}, 7, {1}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(tg::shape_str(c.shape) + " median " + std::to_string(c.value));
    Tensor x = tg::tensor(c.x, c.shape, kF64).to(dev).requires_grad_();
    Tensor m = tg::median(x);
    const double got = m.item<double>();
    if (std::isnan(c.value)) EXPECT_TRUE(std::isnan(got));
    else EXPECT_TRUE(got == c.value && std::signbit(got) == std::signbit(c.value)) << got;
    const V g = tgtest::values(tg::autograd::grad({m * 3.0}, {x})[0]);
    ASSERT_EQ(g.size(), c.grad.size());
    for (size_t k = 0; k < g.size(); ++k)
      EXPECT_NEAR(g[k], 3 * c.grad[k], 1e-15) << k;
    const double raw = tg::median(x.detach()).item<double>();  // the raw path: the same value
    EXPECT_TRUE(std::isnan(got) ? std::isnan(raw) : raw == got && std::signbit(raw) == std::signbit(got));
  }
  // median(dim) sends it to the selected index, as PyTorch's.
  Tensor x = tg::tensor({1, 2, 2, 3}, {4}, kF64).to(dev).requires_grad_();
  auto [v, i] = tg::median(x, 0);
  EXPECT_EQ(tgtest::values(tg::autograd::grad({v}, {x})[0]), (V{0, 1, 0, 0}));
  EXPECT_EQ(i.item<int64_t>(), 1);
}

// LibTorch habits that compile: in-place ops on a const handle (the gradient
// accessor returns one), printing sizes.
TEST(OpTableCoverage, LibTorchHabitsCompile) {
  Tensor w = tg::ones({2, 2}, kF64).requires_grad_();
  (w * w).sum().backward();
  w.grad().zero_();
  EXPECT_EQ(tgtest::values(w.grad()), (std::vector<double>{0, 0, 0, 0}));
  std::ostringstream os;
  os << w.sizes() << " " << w.t().strides();
  EXPECT_EQ(os.str(), "[2, 2] [1, 2]");
}

// Every op that autograd records has an entry, and every entry names an op.
TEST(OpTableCoverage, EveryRecordedOpHasAnEntry) {
  std::set<std::string> entries;
  for (const OpEntry& op : op_entries())
    entries.insert(op.id);
  std::set<std::string> recorded;
  for (const tg::detail::OpInfo& info : tg::detail::op_list())
    if (info.recorded) recorded.insert(info.id);
  for (const std::string& id : recorded)
    EXPECT_TRUE(entries.count(id)) << "op '" << id << "' is in the op list but has no test-table entry";
  for (const std::string& id : entries)
    EXPECT_TRUE(recorded.count(id) || id == "mlp") << "entry '" << id << "' names no recorded op";
  // A Taylor declaration (TG_TAYLOR in ops.def) names a recorded op.
  for (const auto& [id, col] : declared_taylor_columns())
    EXPECT_TRUE(recorded.count(id)) << "TG_TAYLOR(" << id << ", " << col << ") names no recorded op";
  EXPECT_GT(recorded.size(), 90u);
}

}  // namespace
