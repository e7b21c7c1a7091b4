// Every user-facing error path: the message starts with the op name and
// shows the shapes/dtypes; the library stays usable afterwards.
#include "reference.h"
#include "tensor/op_util.h"

#include <exception>

#include <tapegrad/cuda/static_tensor.h>
#include <tapegrad/tensor/raw.h>

namespace tgtest {
namespace {

#define EXPECT_ERROR(expr, text)                                                                                       \
  do {                                                                                                                 \
    try {                                                                                                              \
      (void)(expr);                                                                                                    \
      ADD_FAILURE() << #expr << " did not throw";                                                                      \
    } catch (const tg::Error& e) {                                                                                     \
      EXPECT_EQ(std::string(e.what()).rfind(text, 0), 0u) << "message: " << e.what() << "\nexpected prefix: " << text; \
    }                                                                                                                  \
  } while (0)

TEST(Errors, Shapes) {
  Tensor a = tg::ones({3, 4}), b = tg::ones({5, 6});
  EXPECT_ERROR(tg::matmul(a, b), "matmul: cannot multiply [3, 4] by [5, 6] (4 != 5)");
  EXPECT_ERROR(tg::mm(a, b), "mm: cannot multiply [3, 4] by [5, 6] (4 != 5)");
  EXPECT_ERROR(tg::mm(a, tg::ones({4})), "mm: expected 2-D tensors, got [3, 4] and [4]");
  EXPECT_ERROR(tg::bmm(tg::ones({2, 3, 4}), tg::ones({3, 4, 5})), "bmm: batch sizes differ: [2, 3, 4] and [3, 4, 5]");
  EXPECT_ERROR(tg::bmm(a, a), "bmm: expected 3-D tensors, got [3, 4] and [3, 4]");
  EXPECT_ERROR(tg::matmul(tg::scalar_tensor(1), a),
               "matmul: both arguments need at least 1 dimension, got [] and [3, 4]");
  EXPECT_ERROR(tg::linear(a, tg::ones({2, 5})),
               "linear: input shape [3, 4] doesn't match weight [2, 5] (in_features 5)");
  EXPECT_ERROR(tg::linear(a, tg::ones({2, 4}), tg::ones({3})),
               "linear: bias shape [3] doesn't match weight [2, 4] (out_features 2)");
  EXPECT_ERROR(tg::linear(a, tg::ones({4})), "linear: weight must be 2-D [out_features, in_features], got [4]");
  EXPECT_ERROR(a + b, "add: shapes [3, 4] and [5, 6] cannot be broadcast together (dim 0: 3 vs 5)");
  EXPECT_ERROR(tg::where(tg::gt(a, 0), a, tg::ones({2})),
               "where: shapes [3, 4] and [2] cannot be broadcast together (dim 1: 4 vs 2)");
  EXPECT_ERROR(a.view({5, -1}), "view: shape [5, -1] is invalid for input of size 12");
  EXPECT_ERROR(a.view({5, 3}), "view: shape [5, 3] is invalid for input of size 12");
  EXPECT_ERROR(a.view({-1, -1}), "view: only one dimension can be inferred (-1) in [-1, -1]");
  EXPECT_ERROR(a.reshape({-2, 6}), "reshape: invalid shape dimension -2 in [-2, 6]");
  EXPECT_ERROR(a.t().view({12}), "view: size [12] is not compatible with the input's sizes [4, 3]");
  EXPECT_ERROR(a.expand({3, 5}), "expand: cannot expand shape [3, 4] to [3, 5] (dim 1: 4 != 5 and is not 1)");
  EXPECT_ERROR(a.expand({4}), "expand: the number of sizes provided (1) must be greater or equal");
  EXPECT_ERROR(a.permute({0, 0}), "permute: dims [0, 0] is not a permutation (dim 0 repeats)");
  EXPECT_ERROR(a.permute({0}), "permute: got 1 dims [0] for a tensor of shape [3, 4]");
  EXPECT_ERROR(tg::ones({2, 2, 2}).t(), "t: expects a tensor with <= 2 dimensions, but got shape [2, 2, 2]");
  EXPECT_ERROR(tg::cat({a, tg::ones({3, 5}, tg::kFloat32)}, 0),
               "cat: sizes of tensors must match except in dim 0; tensor 1 has shape [3, 5] but "
               "tensor 0 has [3, 4] (dim 1)");
  EXPECT_ERROR(tg::cat({a, tg::ones({12})}), "cat: tensor 1 has shape [12] but tensor 0 has [3, 4]");
  EXPECT_ERROR(tg::cat({}), "cat: expected a non-empty list of tensors");
  EXPECT_ERROR(tg::cat({tg::scalar_tensor(1)}), "cat: zero-dimensional tensor 0 cannot be concatenated");
  EXPECT_ERROR(tg::stack({a, tg::ones({4, 3})}),
               "stack: expected each tensor to be equal size, but got [3, 4] at entry 0 and [4, 3] "
               "at entry 1");
  EXPECT_ERROR(tg::empty({2, -1}), "empty: negative dimension -1 in shape [2, -1]");
  EXPECT_ERROR(tg::tensor({1, 2, 3}, {2, 2}), "tensor: 3 values do not fill shape [2, 2] (4 elements)");
  Tensor mutable_a = a;
  EXPECT_ERROR(mutable_a.add_(tg::ones({2, 3, 4})),
               "add_: output with shape [3, 4] doesn't match the broadcast shape [2, 3, 4]");
  EXPECT_ERROR(mutable_a.copy_(tg::ones({5})),
               "copy_: shapes [3, 4] and [5] cannot be broadcast together (dim 1: 4 vs 5)");
  Tensor expanded = tg::ones({1, 4}).expand({3, 4});
  EXPECT_ERROR(expanded.add_(1),
               "add_: unsupported operation: more than one element of the "
               "written-to tensor (shape [3, 4], strides [0, 1])");
  EXPECT_ERROR(expanded.fill_(1), "fill_: unsupported operation: more than one element");
}

TEST(Errors, IndicesAndDims) {
  Tensor a = tg::ones({3, 4});
  EXPECT_ERROR(a.select(1, 4), "select: index 4 is out of range for dim 1 with size 4 (shape [3, 4])");
  EXPECT_ERROR(a.select(0, -4), "select: index -4 is out of range for dim 0 with size 3 (shape [3, 4])");
  EXPECT_ERROR(a.select(2, 0),
               "select: dimension 2 is out of range for a tensor of rank 2 (shape [3, 4]); "
               "expected a dim in [-2, 1]");
  EXPECT_ERROR(tg::scalar_tensor(1).select(0, 0), "select: cannot select on a 0-dim tensor");
  EXPECT_ERROR(a.narrow(1, 3, 2), "narrow: start 3 and length 2 are out of range for dim 1 with size 4");
  EXPECT_ERROR(a.slice(0, 0, 2, 0), "slice: step must be positive, got 0");
  EXPECT_ERROR(a.transpose(0, 2), "transpose: dimension 2 is out of range for a tensor of rank 2");
  EXPECT_ERROR(a.unsqueeze(3),
               "unsqueeze: dimension 3 is out of range for inserting a dim into a "
               "tensor of rank 2 (shape [3, 4]); expected a dim in [-3, 2]");
  EXPECT_ERROR(tg::stack({a}, -4), "stack: dimension -4 is out of range for inserting a dim");
  EXPECT_ERROR(a.size(5), "size: dimension 5 is out of range for a tensor of rank 2");
  EXPECT_ERROR(tg::sum(a, {0, -2}), "sum: dim 0 appears multiple times in the list of dims [0, -2]");
  EXPECT_ERROR(tg::sum(a, {2}), "sum: dimension 2 is out of range for a tensor of rank 2");
  EXPECT_ERROR(tg::amax(tg::empty({0, 3}), {0}),
               "amax: cannot reduce over dim 0 of size 0 (shape [0, 3]): the operation has no identity");
  Tensor idx = tg::tensor({0, 7}, {}, tg::kInt64);
  EXPECT_ERROR(tg::index_select(a, 1, idx), "index_select: index 7 is out of range for dim 1 with size 4");
  EXPECT_ERROR(tg::index_select(a, 0, tg::tensor({-1}, {}, tg::kInt64)),
               "index_select: index -1 is out of range for dim 0 with size 3");
  EXPECT_ERROR(tg::index_select(a, 0, tg::ones({2})), "index_select: index must be an Int64 tensor, got Float32");
  EXPECT_ERROR(tg::index_select(a, 0, tg::zeros({1, 1}, tg::kInt64)),
               "index_select: index must be 0-D or 1-D, got shape [1, 1]");
  EXPECT_ERROR(tg::gather(a, 1, tg::tensor({5}, {1, 1}, tg::kInt64)),
               "gather: index 5 is out of range for dim 1 with size 4");
  EXPECT_ERROR(tg::gather(a, 1, tg::zeros({3}, tg::kInt64)),
               "gather: index must have the same number of dims as the input (2), got index shape [3]");
  EXPECT_ERROR(tg::gather(a, 1, tg::zeros({4, 1}, tg::kInt64)),
               "gather: index shape [4, 1] is larger than input shape [3, 4] at dim 0");
  EXPECT_ERROR(tg::scatter_add(a, 0, tg::tensor({3}, {1, 1}, tg::kInt64), tg::ones({1, 1})),
               "scatter_add: index 3 is out of range for dim 0 with size 3");
  EXPECT_ERROR(tg::scatter_add(a, 0, tg::zeros({1, 1}, tg::kInt64), tg::ones({1, 1}, tg::kFloat64)),
               "scatter_add: src dtype Float64 doesn't match self dtype Float32");
  EXPECT_ERROR(tg::scatter_add(a, 0, tg::zeros({2, 2}, tg::kInt64), tg::ones({1, 2})),
               "scatter_add: index shape [2, 2] is larger than src shape [1, 2] at dim 0");
  EXPECT_ERROR(tg::ones({6}).item<float>(),
               "item: a tensor with 6 elements (shape [6]) cannot be converted to a scalar");
}

// An index tensor whose range the library recorded is trusted (its views
// too, not copies) only while its version is the recorded one: changed in
// place, even through a view, it is read again.
TEST(Errors, KnownIndexRangesFollowTheVersion) {
  Tensor a = tg::ones({3, 4});
  Tensor idx = tg::detail::index_tensor({0, 2, 1}, tg::Device(tg::kCPU));
  EXPECT_EQ(tg::index_select(a, 0, idx).sizes(), (tg::IntList{3, 4}));
  auto known = [](const Tensor& t) {
    int64_t lo = 0, hi = 0;
    return t.impl()->storage()->known_index_range(t.impl()->version_counter().get(), t.version(), &lo, &hi) &&
           lo == 0 && hi == 2;
  };
  EXPECT_TRUE(known(idx));
  EXPECT_TRUE(known(idx.narrow(0, 1, 2).view({2, 1}).expand({2, 3})));  // views share it
  EXPECT_FALSE(known(tg::detail::index_tensor({0, 1}, tg::Device(tg::kCPU)).contiguous().clone()));
  idx.narrow(0, 0, 1).fill_(5);  // through a view: the shared version moves
  EXPECT_FALSE(known(idx));
  EXPECT_ERROR(tg::index_select(a, 0, idx), "index_select: index 5 is out of range for dim 0 with size 3");
}

TEST(Errors, Dtypes) {
  Tensor f = tg::ones({2}), i = tg::ones({2}, tg::kInt64), b = tg::ones({2}, tg::kBool);
  EXPECT_ERROR(tg::mm(f.view({1, 2}), tg::ones({2, 1}, tg::kFloat64)),
               "mm: expected both operands to have the same dtype, got Float32 and Float64");
  EXPECT_ERROR(tg::mm(b.view({1, 2}), b.view({2, 1})), "mm: Bool tensors are not supported");
  EXPECT_ERROR(i.add_(f), "add_: result type Float32 can't be cast to the desired output type Int64");
  EXPECT_ERROR(i.div_(2), "div_: result type Float32 can't be cast to the desired output type Int64");
  EXPECT_ERROR(b.add_(i), "add_: result type Int64 can't be cast to the desired output type Bool");
  EXPECT_ERROR(b - b, "sub: subtracting Bool tensors is not supported (operands Bool and Bool)");
  EXPECT_ERROR(tg::neg(b), "neg: Bool tensors are not supported; convert with .to(kInt64) first");
  EXPECT_ERROR(tg::mean(i), "mean: expected a floating-point tensor, got Int64");
  EXPECT_ERROR(tg::rand({2}, tg::kInt64), "rand: expected a floating-point or complex dtype, got Int64");
  EXPECT_ERROR(tg::randn({2}, tg::kBool), "randn: expected a floating-point or complex dtype, got Bool");
  EXPECT_ERROR(tg::pow(i, -1), "pow: integers to negative integer powers are not allowed (Int64 tensor, exponent -1)");
  EXPECT_ERROR(tg::where(f, f, f), "where: condition must be a Bool tensor, got Float32");
  EXPECT_ERROR(f.data_ptr<double>(), "data_ptr: expected dtype Float64 but the tensor is Float32");
  EXPECT_ERROR(tg::gelu(f, "fast"), "gelu: approximate must be \"none\" or \"tanh\", got \"fast\"");
  EXPECT_ERROR(tg::clamp(f, std::nullopt, std::nullopt), "clamp: at least one of min and max must be given");
  EXPECT_ERROR(tg::softplus(f, 0.0), "softplus: beta must be nonzero");
  EXPECT_ERROR(tg::arange(0, 5, 0), "arange: step must be nonzero");
  EXPECT_ERROR(tg::arange(5, 0, 1), "arange: upper bound 0 and lower bound 5 are inconsistent with step sign 1");
  EXPECT_ERROR(tg::linspace(0, 1, -1), "linspace: number of steps must be non-negative, got -1");
  EXPECT_ERROR(tg::eye(-1), "eye: n and m must be non-negative, got -1 and -1");
  EXPECT_ERROR(tg::ones({2}, tg::TensorOptions().dtype(tg::kInt64).requires_grad(true)),
               "requires_grad_: only floating-point tensors can require gradients, "
               "got a tensor of Int64");
}

TEST(Errors, UndefinedAndDevices) {
  Tensor u, a = tg::ones({2});
  EXPECT_ERROR(a + u, "add: second operand is an undefined tensor");
  EXPECT_ERROR(tg::exp(u), "exp: input is an undefined tensor");
  EXPECT_ERROR(tg::sum(u), "sum: input is an undefined tensor");
  EXPECT_ERROR(u.clone(), "clone: input is an undefined tensor");
  if (!tg::cuda::is_available()) {
    EXPECT_ERROR(a.to(tg::Device(tg::kCUDA)),
                 (tg::cuda::is_built() ? "allocate: no CUDA device is available" : "to: no kernels for device cuda:0"));
  }
}

// softmax and log_softmax name themselves for a bad dim (they said "amax",
// the first of their parts to look at it).
TEST(Errors, SoftmaxNamesItselfForABadDim) {
  Tensor x = tg::ones({2, 3});
  EXPECT_ERROR(tg::softmax(x, 2), "softmax: dimension 2 is out of range for a tensor of rank 2");
  EXPECT_ERROR(tg::log_softmax(x, -3), "log_softmax: dimension -3 is out of range");
  expect_values(tg::softmax(tg::scalar_tensor(2.0), 0), {1.0}, 0, "softmax of a 0-dim tensor over dim 0");
}

// Composites check their dims under their own names and with the input's
// own rank (a 0-dim tensor takes 0 and -1, as sum does): logsumexp said
// "amax", norm "sum", max/argmax of a 0-dim tensor "rank 1 (shape [1])",
// and squeeze/transpose of a 0-dim tensor took any dim.
TEST(Errors, CompositesNameThemselvesAndTheRealRankForABadDim) {
  Tensor s = tg::scalar_tensor(2.0, tg::kFloat64);
  EXPECT_ERROR(tg::logsumexp(s, {1}), "logsumexp: dimension 1 is out of range for a tensor of rank 0 (shape [])");
  EXPECT_ERROR(tg::norm(s, 2, {1}), "norm: dimension 1 is out of range for a tensor of rank 0");
  EXPECT_ERROR(tg::norm(tg::ones({2, 3}), 2, {2}), "norm: dimension 2 is out of range for a tensor of rank 2");
  EXPECT_ERROR(tg::max(s, 1), "max: dimension 1 is out of range for a tensor of rank 0 (shape [])");
  EXPECT_ERROR(tg::argmax(s, 1), "argmax: dimension 1 is out of range for a tensor of rank 0 (shape [])");
  EXPECT_ERROR(tg::any(s, 1), "any: dimension 1 is out of range for a tensor of rank 0 (shape [])");
  EXPECT_ERROR(s.squeeze(1), "squeeze: dimension 1 is out of range for a tensor of rank 0");
  EXPECT_ERROR(s.squeeze(INT64_MAX), "squeeze: dimension");
  EXPECT_ERROR(s.transpose(0, 1), "transpose: dimension 1 is out of range for a tensor of rank 0");
  expect_values(s.squeeze(-1), {2}, 0, "squeeze(-1) of a 0-dim tensor");
  expect_values(s.transpose(0, -1), {2}, 0, "transpose(0, -1) of a 0-dim tensor");
  expect_values(tg::logsumexp(s, {0}), {2}, 1e-15, "logsumexp over dim 0 of a 0-dim tensor");
  EXPECT_EQ(std::get<1>(tg::max(s, 0)).item<int64_t>(), 0);
  // All the digits of a limit: "3.40282e+38 ... largest finite value is 3.40282e+38" read as a contradiction.
  EXPECT_ERROR(tg::full({1}, 3.4028235e38, tg::kFloat32),
               "full: the value 3.4028234999999999e+38 cannot be converted to Float32 without overflow (its largest "
               "finite value is 3.4028234663852886e+38)");
}

// .grad() of a non-leaf says why it has none (it read as undefined, and the
// first use failed far away: "sum: input is an undefined tensor"); a leaf
// and a retained non-leaf read as before.
TEST(Errors, GradOfANonLeafSaysSo) {
  Tensor x = tg::ones({3}, tg::kFloat64).requires_grad_();
  Tensor y = x * 2.0;
  Tensor z = y.sum();
  z.backward({}, true);
  EXPECT_ERROR(y.grad(), "grad: this tensor (shape [3], computed by mul) is not a leaf");
  try {
    (void)y.grad();
  } catch (const tg::Error& e) {
    EXPECT_NE(std::string(e.what()).find("call retain_grad()"), std::string::npos) << e.what();
  }
  expect_values(x.grad(), {2, 2, 2}, 0, "leaf");
  Tensor r = x * 3.0;
  r.retain_grad();
  EXPECT_FALSE(r.grad().defined()) << "retained, before backward";
  r.sum().backward();
  expect_values(r.grad(), {1, 1, 1}, 0, "retained non-leaf");
  EXPECT_FALSE(tg::ones({2}).grad().defined()) << "a tensor without autograd has no gradient";
}

TEST(Errors, LimitsAndOutOfMemory) {
  Tensor a = tg::ones({3, 4});
  EXPECT_ERROR(a.as_strided({3}, {1, 1}), "as_strided: sizes [3] and strides [1, 1] have different lengths");
  EXPECT_ERROR(a.flatten(1, 0), "flatten: start_dim 1 must not come after end_dim 0");
  EXPECT_ERROR(tg::ones(IntList(26, 1)) + 1, "elementwise: tensors of rank 26 are not supported (at most 25)");
  tg::AllocatorStats before = tg::cpu_allocator_stats();
  EXPECT_ERROR(tg::empty({int64_t(1) << 50}), "CPU allocator: out of memory allocating 4503599627370496 bytes");
  EXPECT_ERROR(tg::empty({int64_t(1) << 40, int64_t(1) << 40}),
               "empty: shape [1099511627776, 1099511627776] has more elements than fit in 64 bits");
  EXPECT_ERROR(tg::empty({int64_t(1) << 62}, tg::kFloat64),
               "empty: shape [4611686018427387904] of Float64 needs more bytes than fit in 64 bits");
  EXPECT_EQ(tg::cpu_allocator_stats().live_bytes, before.live_bytes);
  EXPECT_EQ(tg::ones({4}).sum().item<float>(), 4.0f);  // still usable
}

TEST(Errors, LibraryStaysUsableAfterErrors) {
  for (int k = 0; k < 100; ++k) {
    try {
      tg::matmul(tg::ones({3, 4}), tg::ones({5, 6}));
    } catch (const tg::Error&) {}
  }
  tg::AllocatorStats s = tg::cpu_allocator_stats();
  try {
    tg::index_select(tg::ones({1000}), 0, tg::tensor({5000}, {}, tg::kInt64));
  } catch (const tg::Error&) {}
  EXPECT_EQ(tg::cpu_allocator_stats().live_bytes, s.live_bytes);  // nothing leaked
  EXPECT_EQ(tg::matmul(tg::ones({3, 4}), tg::ones({4, 2})).sum().item<float>(), 24.0f);
}

}  // namespace
}  // namespace tgtest

// The libraries and the program share one C++ runtime: an exception thrown
// by a tensor op (in libtapegrad_tensor) is counted by
// std::uncaught_exceptions() here as well as there. A private copy of
// libstdc++ in each (a toolchain without libstdc++.so links the static one;
// CMakeLists.txt then links the shared one by its soname) counts apart, and
// a guard such as tg::cuda::Graph would miss the exception and throw while
// unwinding.
TEST(Errors, OneCxxRuntimeCountsExceptionsThrownByOps) {
  struct Seen {
    int here = -1, tensor_layer = -1;
  } seen;
  struct Probe {
    Seen* seen;
    ~Probe() {
      seen->here = std::uncaught_exceptions();
      seen->tensor_layer = tg::cuda::detail::tensor_layer_uncaught_exceptions();
    }
  };
  EXPECT_THROW(
      {
        Probe probe{&seen};
        tg::raw::add(tg::ones({2, 3}), tg::ones({4}));
      },
      tg::Error);
  EXPECT_EQ(seen.here, 1);
  EXPECT_EQ(seen.tensor_layer, 1);
}
