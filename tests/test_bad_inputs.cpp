// A bad-input sweep over the op set (after PyTorch's OpInfo error inputs):
// every op gets generated operands with zero-size dims, broadcasting
// mismatches, non-contiguous and overlapping (expanded) views, mixed dtypes,
// mixed devices (where there is a GPU), NaN/Inf, out-of-range indices and
// empty sparse tensors. Each call either returns what the contiguous CPU
// path returns for the same values, or throws a tg::Error whose message names
// the op; never a crash, a hang or another exception. Runs in CI under
// ASan/UBSan and on the GPU machine under compute-sanitizer memcheck.
#include <cmath>
#include <limits>

#include "reference.h"

namespace {

using tg::Device;
using tg::IntList;
using tg::Tensor;
using Args = std::vector<Tensor>;

const Device kCpu(tg::kCPU);

struct Op {
  const char* name;  // the name the error must carry ("a|b": either)
  int arity;
  std::function<Tensor(const Args&)> fn;
};

Tensor I64(std::vector<double> v, IntList s) { return tg::tensor(v, s, tg::TensorOptions().dtype(tg::kInt64)); }
// Indices on the operand's device (the CPU for an undefined operand).
Tensor I64(std::vector<double> v, IntList s, const Tensor& like) {
  return I64(std::move(v), std::move(s)).to(like.defined() ? like.device() : Device(tg::kCPU));
}

std::vector<Op> ops() {
  using namespace tg;
  return {
      {"add", 2, [](const Args& a) { return add(a[0], a[1]); }},
      {"sub", 2, [](const Args& a) { return sub(a[0], a[1]); }},
      {"mul", 2, [](const Args& a) { return mul(a[0], a[1]); }},
      {"div", 2, [](const Args& a) { return div(a[0], a[1]); }},
      {"pow", 2, [](const Args& a) { return pow(a[0], a[1]); }},
      {"maximum", 2, [](const Args& a) { return maximum(a[0], a[1]); }},
      {"minimum", 2, [](const Args& a) { return minimum(a[0], a[1]); }},
      {"atan2", 2, [](const Args& a) { return atan2(a[0], a[1]); }},
      {"hypot", 2, [](const Args& a) { return hypot(a[0], a[1]); }},
      {"fmod", 2, [](const Args& a) { return fmod(a[0], a[1]); }},
      {"remainder", 2, [](const Args& a) { return remainder(a[0], a[1]); }},
      {"remainder", 1, [](const Args& a) { return remainder(a[0], 0.5); }},
      {"eq", 2, [](const Args& a) { return eq(a[0], a[1]); }},
      {"lt", 2, [](const Args& a) { return lt(a[0], a[1]); }},
      {"logical_and", 2, [](const Args& a) { return logical_and(a[0], a[1]); }},
      {"logical_xor", 2, [](const Args& a) { return logical_xor(a[0], a[1]); }},
      {"logical_not", 1, [](const Args& a) { return logical_not(a[0]); }},
      {"where|gt", 2, [](const Args& a) { return where(gt(a[0], 0.0), a[0], a[1]); }},
      {"neg", 1, [](const Args& a) { return neg(a[0]); }},
      {"exp", 1, [](const Args& a) { return exp(a[0]); }},
      {"log", 1, [](const Args& a) { return log(a[0]); }},
      {"sin", 1, [](const Args& a) { return sin(a[0]); }},
      {"tanh", 1, [](const Args& a) { return tanh(a[0]); }},
      {"sigmoid", 1, [](const Args& a) { return sigmoid(a[0]); }},
      {"relu", 1, [](const Args& a) { return relu(a[0]); }},
      {"silu", 1, [](const Args& a) { return silu(a[0]); }},
      {"gelu", 1, [](const Args& a) { return gelu(a[0]); }},
      {"softplus", 1, [](const Args& a) { return softplus(a[0]); }},
      {"asin", 1, [](const Args& a) { return asin(a[0]); }},
      {"acos", 1, [](const Args& a) { return acos(a[0]); }},
      {"sinh", 1, [](const Args& a) { return sinh(a[0]); }},
      {"asinh", 1, [](const Args& a) { return asinh(a[0]); }},
      {"acosh", 1, [](const Args& a) { return acosh(a[0]); }},
      {"log10", 1, [](const Args& a) { return log10(a[0]); }},
      {"ceil", 1, [](const Args& a) { return ceil(a[0]); }},
      {"trunc", 1, [](const Args& a) { return trunc(a[0]); }},
      {"fmod", 1, [](const Args& a) { return fmod(a[0], -1.5); }},
      {"atan", 1, [](const Args& a) { return atan(a[0]); }},
      {"cosh", 1, [](const Args& a) { return cosh(a[0]); }},
      {"atanh", 1, [](const Args& a) { return atanh(a[0]); }},
      {"log2", 1, [](const Args& a) { return log2(a[0]); }},
      {"exp2", 1, [](const Args& a) { return exp2(a[0]); }},
      {"floor", 1, [](const Args& a) { return floor(a[0]); }},
      {"round", 1, [](const Args& a) { return round(a[0]); }},
      {"frac", 1, [](const Args& a) { return frac(a[0]); }},
      {"sqrt", 1, [](const Args& a) { return sqrt(a[0]); }},
      {"rsqrt", 1, [](const Args& a) { return rsqrt(a[0]); }},
      {"abs", 1, [](const Args& a) { return abs(a[0]); }},
      {"square", 1, [](const Args& a) { return square(a[0]); }},
      {"reciprocal", 1, [](const Args& a) { return reciprocal(a[0]); }},
      {"clamp", 1, [](const Args& a) { return clamp(a[0], -0.5, 0.5); }},
      {"pow", 1, [](const Args& a) { return pow(a[0], 3); }},
      {"sum", 1, [](const Args& a) { return sum(a[0]); }},
      {"sum", 1, [](const Args& a) { return sum(a[0], {-1}, true); }},
      {"mean", 1, [](const Args& a) { return mean(a[0], {0}); }},
      {"amax", 1, [](const Args& a) { return amax(a[0], {-1}); }},
      {"amax", 1, [](const Args& a) { return amax(a[0]); }},
      {"mm", 2, [](const Args& a) { return mm(a[0], a[1]); }},
      {"matmul", 2, [](const Args& a) { return matmul(a[0], a[1]); }},
      {"bmm", 2, [](const Args& a) { return bmm(a[0], a[1]); }},
      {"linear", 2, [](const Args& a) { return linear(a[0], a[1]); }},
      {"cat", 2,
       [](const Args& a) {
         return cat({a[0], a[1]}, 0);
       }},
      {"stack", 2,
       [](const Args& a) {
         return stack({a[0], a[1]}, 0);
       }},
      {"index_select", 1,
       [](const Args& a) {
         return index_select(a[0], 0, I64({0, 1, 7, -1}, {4}, a[0]));
       }},
      {"gather", 1,
       [](const Args& a) {
         return gather(a[0], 0, I64({0, 5, 1, 9}, {2, 2}, a[0]));
       }},
      {"scatter_add", 1,
       [](const Args& a) {
         return scatter_add(a[0], 0, I64({0, 9, 1, 0}, {2, 2}, a[0]), a[0]);
       }},
      {"embedding", 1,
       [](const Args& a) {
         return embedding(a[0], I64({0, 3, 11}, {3}, a[0]));
       }},
      {"view", 1,
       [](const Args& a) {
         return a[0].view({-1, 4});
       }},
      {"reshape", 1,
       [](const Args& a) {
         return a[0].reshape({5, -1});
       }},
      {"transpose", 1, [](const Args& a) { return a[0].transpose(0, 2); }},
      {"select", 1, [](const Args& a) { return a[0].select(0, 3); }},
      {"slice", 1, [](const Args& a) { return a[0].slice(1, 1, 100, 2); }},
      {"narrow", 1, [](const Args& a) { return a[0].narrow(0, 1, 4); }},
      {"expand", 1,
       [](const Args& a) {
         return a[0].expand({2, 3, 3});
       }},
      {"permute", 1,
       [](const Args& a) {
         return a[0].permute({1, 0});
       }},
      {"squeeze", 1, [](const Args& a) { return a[0].squeeze(0); }},
      {"unsqueeze", 1, [](const Args& a) { return a[0].unsqueeze(3); }},
      {"flatten", 1, [](const Args& a) { return a[0].flatten(); }},
      {"add_|clone", 2,
       [](const Args& a) {
         Tensor t = a[0].clone();
         t.add_(a[1]);
         return t;
       }},
      {"mul_|clone", 2,
       [](const Args& a) {
         Tensor t = a[0].clone();
         t.mul_(a[1]);
         return t;
       }},
      {"copy_|clone", 2,
       [](const Args& a) {
         Tensor t = a[0].clone();
         t.copy_(a[1]);
         return t;
       }},
      {"to_dense", 1, [](const Args& a) { return a[0].to_dense(); }},
      {"coalesce", 1, [](const Args& a) { return a[0].coalesce(); }},
      {"activation_grad", 2, [](const Args& a) { return activation_grad(a[0], a[1], Activation::Silu, 2); }},
      // the everyday surface
      {"lerp", 2, [](const Args& a) { return lerp(a[0], a[1], 0.7); }},
      {"lerp", 2, [](const Args& a) { return lerp(a[0], a[1], a[1]); }},
      {"clamp_min", 2, [](const Args& a) { return clamp_min(a[0], a[1]); }},
      {"clamp_max", 1, [](const Args& a) { return clamp_max(a[0], 0.5); }},
      {"clamp_min", 1, [](const Args& a) { return clamp_min(a[0], -0.5); }},
      {"clamp_max", 2, [](const Args& a) { return clamp_max(a[0], a[1]); }},
      {"median|argsort", 1, [](const Args& a) { return median(a[0]); }},
      {"split", 1,
       [](const Args& a) {
         return cat(split(a[0], {1, 2}, 0), 0);
       }},
      {"masked_fill|lt|sum", 2, [](const Args& a) { return masked_fill(a[0], lt(a[0], 0.0), a[1].sum()); }},
      {"prod", 1, [](const Args& a) { return prod(a[0]); }},
      {"prod", 1, [](const Args& a) { return prod(a[0], 1); }},
      {"var", 1, [](const Args& a) { return var(a[0], {-1}); }},
      {"std", 1, [](const Args& a) { return tg::std(a[0]); }},
      {"any", 1, [](const Args& a) { return any(a[0], 0); }},
      {"all", 1, [](const Args& a) { return all(a[0]); }},
      {"argmax", 1, [](const Args& a) { return argmax(a[0]); }},
      {"argmin", 1, [](const Args& a) { return argmin(a[0], 1, true); }},
      {"argsort", 1, [](const Args& a) { return argsort(a[0], 0, true); }},
      {"sort|argsort", 1, [](const Args& a) { return std::get<0>(sort(a[0])); }},
      {"topk|argsort", 1, [](const Args& a) { return std::get<0>(topk(a[0], 2)); }},
      {"kthvalue|argsort", 1, [](const Args& a) { return std::get<0>(kthvalue(a[0], 3, 0)); }},
      {"median|argsort", 1, [](const Args& a) { return std::get<0>(median(a[0], -1)); }},
      {"outer", 2, [](const Args& a) { return outer(a[0], a[1]); }},
      {"cross", 2, [](const Args& a) { return cross(a[0], a[1], 0); }},
      {"einsum", 2,
       [](const Args& a) {
         return einsum("ij,jk->ik", {a[0], a[1]});
       }},
      {"einsum", 2,
       [](const Args& a) {
         return einsum("...i,...i", {a[0], a[1]});
       }},
      {"tril", 1, [](const Args& a) { return tril(a[0], -1); }},
      {"triu", 1, [](const Args& a) { return triu(a[0], 1); }},
      {"diagonal", 1, [](const Args& a) { return diagonal(a[0], 1); }},
      {"diag", 1, [](const Args& a) { return diag(a[0]); }},
      {"diag_embed", 1, [](const Args& a) { return diag_embed(a[0]); }},
      {"trace", 1, [](const Args& a) { return trace(a[0]); }},
      {"masked_fill|gt", 2, [](const Args& a) { return masked_fill(a[0], gt(a[1], 0.0), 1.0); }},
      {"masked_fill", 2, [](const Args& a) { return masked_fill(a[0], a[1], 1.0); }},
      {"masked_select", 2, [](const Args& a) { return masked_select(a[0], a[1]); }},
      {"nonzero", 1, [](const Args& a) { return nonzero(a[0]); }},
      {"split", 1, [](const Args& a) { return cat(split(a[0], 2, 1), 1); }},
      {"chunk", 1, [](const Args& a) { return cat(a[0].chunk(3), 0); }},
      {"repeat", 1,
       [](const Args& a) {
         return a[0].repeat({2, 1});
       }},
      {"tile", 1, [](const Args& a) { return tile(a[0], {2}); }},
      {"repeat_interleave", 1, [](const Args& a) { return repeat_interleave(a[0], 2, 1); }},
      {"repeat_interleave", 2, [](const Args& a) { return repeat_interleave(a[0], a[1], 0); }},
      {"flip", 1,
       [](const Args& a) {
         return flip(a[0], {0, -1});
       }},
      {"roll", 1, [](const Args& a) { return roll(a[0], {3}, {1}); }},
      // dims beyond a 0-dim tensor's {0, -1} are refused, as sum's
      {"sort", 1, [](const Args& a) { return std::get<0>(sort(a[0], 1)); }},
      {"argsort", 1, [](const Args& a) { return argsort(a[0], -2); }},
      {"topk", 1, [](const Args& a) { return std::get<0>(topk(a[0], 1, 1)); }},
      {"kthvalue", 1, [](const Args& a) { return std::get<0>(kthvalue(a[0], 1, 1, true)); }},
      {"median", 1, [](const Args& a) { return std::get<0>(median(a[0], -2)); }},
      {"prod", 1, [](const Args& a) { return prod(a[0], 1, true); }},
      {"cumsum", 1, [](const Args& a) { return cumsum(a[0], 1); }},
      {"repeat_interleave", 1, [](const Args& a) { return repeat_interleave(a[0], 1, -2); }},
      {"chunk", 1, [](const Args& a) { return cat(a[0].chunk(100, -1), -1); }},
      {"meshgrid", 2,
       [](const Args& a) {
         return meshgrid({a[0], a[1]})[1];
       }},
      // the grid family (grid.def): the operands as inputs, weights, columns
      {"conv1d", 2, [](const Args& a) { return conv1d(a[0], a[1]); }},
      {"conv1d", 2, [](const Args& a) { return conv1d(a[0], a[1], {}, {2}, {1}, {1}, 1); }},
      {"conv2d|unsqueeze", 2, [](const Args& a) { return conv2d(a[0].unsqueeze(0), a[1].unsqueeze(0)); }},
      {"conv_transpose1d", 2, [](const Args& a) { return conv_transpose1d(a[0], a[1], {}, {2}); }},
      {"_convolution_backward_weight", 2,
       [](const Args& a) {
         return _convolution_backward_weight(a[0], a[1], {4, 3, 2}, {1}, {0}, {1}, 1);
       }},
      {"max_pool1d", 1, [](const Args& a) { return max_pool1d(a[0], {2}, {}, {1}, {1}, true); }},
      {"avg_pool1d", 1, [](const Args& a) { return avg_pool1d(a[0], {3}, {2}, {1}, true, false); }},
      {"adaptive_avg_pool1d", 1, [](const Args& a) { return adaptive_avg_pool1d(a[0], {3}); }},
      {"interpolate|unsqueeze", 1, [](const Args& a) { return interpolate(a[0].unsqueeze(0), {7}, {}, "linear"); }},
      {"interpolate|unsqueeze", 1, [](const Args& a) { return interpolate(a[0].unsqueeze(0), {}, {1.5}, "nearest"); }},
      {"pad", 1,
       [](const Args& a) {
         return pad(a[0], {2, 1}, "reflect");
       }},
      {"pad", 1,
       [](const Args& a) {
         return pad(a[0], {1, 3}, "circular");
       }},
      {"pad", 1,
       [](const Args& a) {
         return pad(a[0], {-1, 2, 1, -2}, "constant", 0.5);
       }},
      {"unfold", 1, [](const Args& a) { return unfold(a[0], {2}); }},
      {"fold", 1,
       [](const Args& a) {
         return fold(a[0], {3, 3}, {2});
       }},
      {"pixel_shuffle", 1, [](const Args& a) { return pixel_shuffle(a[0], 2); }},
      {"group_norm", 1, [](const Args& a) { return group_norm(a[0], 1); }},
      {"batch_norm", 1, [](const Args& a) { return batch_norm(a[0], {}, {}, {}, {}, true); }},
      {"instance_norm", 1, [](const Args& a) { return instance_norm(a[0]); }},
  };
}

// Operands: awkward but meaningful shapes and values, one set per kind.
struct Input {
  std::string what;
  Args args;  // at least 2; ops take the first `arity`
};

std::vector<Input> inputs() {
  using namespace tg;
  auto f = TensorOptions().dtype(kFloat32);
  auto d = TensorOptions().dtype(kFloat64);
  manual_seed(21);
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  Tensor special = tensor({nan, inf, -inf, 0.0, -0.0, 1e-30, 1e30, -2.0, 3.5, nan, 1.0, -1.0}, {3, 4}, f);
  Tensor empty_sparse = sparse_coo_tensor(zeros({2, 0}, TensorOptions().dtype(kInt64)), zeros({0}, f), {3, 4});
  Tensor dup_sparse = sparse_coo_tensor(I64({0, 0, 2, 1, 1, 3}, {2, 3}), tensor({1, 2, 3}, {3}, f), {3, 4});
  return {
      {"zero-size [0, 4] with [0, 4]", {zeros({0, 4}, f), ones({0, 4}, f)}},
      {"zero-size [3, 0] with [0, 5]", {zeros({3, 0}, f), ones({0, 5}, f)}},
      {"zero-size [2, 0, 3] (rank 3)", {zeros({2, 0, 3}, f), zeros({2, 3, 0}, f)}},
      {"broadcast mismatch [2, 3] with [4]", {randn({2, 3}, f), randn({4}, f)}},
      {"broadcast [3, 1] with [1, 4]", {randn({3, 1}, f), randn({1, 4}, f)}},
      {"rank mismatch [3, 4] with [2, 3, 4]", {randn({3, 4}, f), randn({2, 3, 4}, f)}},
      {"non-contiguous (transposed) [4, 3]", {randn({3, 4}, f).t(), randn({3, 4}, f).t()}},
      {"overlapping (expanded) [3, 4]", {randn({1, 4}, f).expand({3, 4}), randn({3, 1}, f).expand({3, 4})}},
      {"stepped slices [3, 4]", {randn({3, 9}, f).slice(1, 0, 8, 2), randn({6, 4}, f).slice(0, 0, 6, 2)}},
      {"mixed dtypes f32 with f64", {randn({3, 4}, f), randn({3, 4}, d)}},
      {"mixed dtypes f32 with int64", {randn({3, 4}, f), I64({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {3, 4})}},
      {"mixed dtypes bool with f16", {gt(randn({3, 4}, f), 0.0), randn({3, 4}, f).to(kFloat16)}},
      {"NaN/Inf values", {special, special.t().contiguous().t()}},
      {"0-dim with [3, 4]", {scalar_tensor(2.5, f), randn({3, 4}, f)}},
      {"rank 3 [2, 3, 4]", {randn({2, 3, 4}, f), randn({2, 4, 3}, f)}},
      {"empty sparse with dense", {empty_sparse, randn({3, 4}, f)}},
      {"uncoalesced sparse with dense", {dup_sparse, randn({4, 2}, f)}},
      {"undefined tensors", {Tensor(), Tensor()}},
  };
}

Args to_device(const Args& a, const Device& dev) {
  Args out;
  for (const Tensor& t : a)
    out.push_back(t.defined() ? t.to(dev) : t);
  return out;
}

// The reference path: the same values, contiguous, on the CPU.
Args canonical(const Args& a) {
  Args out;
  for (const Tensor& t : a) {
    if (!t.defined()) out.push_back(t);
    else if (t.is_sparse()) out.push_back(t.to(kCpu));
    else out.push_back(t.to(kCpu).contiguous());
  }
  return out;
}

// Calls op on args: OK (result returned) or a tg::Error naming the op; a
// result must equal the reference path's (same dtype and shape, values equal
// up to rounding, NaN where NaN). Returns a description of a violation.
std::string check_call(const Op& op, const Args& args, const std::string& what) {
  Tensor out;
  try {
    out = op.fn(args);
  } catch (const tg::Error& e) {
    std::string msg = e.what(), names = op.name;
    for (size_t p = 0; p <= names.size();) {
      size_t q = names.find('|', p);
      if (q == std::string::npos) q = names.size();
      if (msg.find(names.substr(p, q - p)) != std::string::npos) return "";
      p = q + 1;
    }
    return std::string("error does not name '") + op.name + "': " + msg;
  } catch (const std::exception& e) {
    return std::string("threw a non-tg::Error: ") + e.what();
  }
  if (!out.defined()) return "returned an undefined tensor";
  Tensor ref;
  try {
    ref = op.fn(canonical(args));
  } catch (const tg::Error& e) {
    return std::string("succeeded, but the contiguous CPU path throws: ") + e.what();
  }
  if (out.sizes() != ref.sizes() || out.dtype() != ref.dtype())
    return "shape/dtype " + tg::shape_str(out.sizes()) + " differs from the reference's " + tg::shape_str(ref.sizes());
  Tensor a = tg::to_dense(out).to(kCpu).to(tg::kFloat64), b = tg::to_dense(ref).to(tg::kFloat64);
  std::vector<double> av = tgtest::values(a), bv = tgtest::values(b);
  double tol = out.dtype() == tg::kFloat16 || out.dtype() == tg::kBFloat16 ? 2e-2 : 1e-5;
  for (size_t i = 0; i < av.size(); ++i) {
    if (std::isnan(bv[i]) ? !std::isnan(av[i])
                          : !(av[i] == bv[i] || std::fabs(av[i] - bv[i]) <= tol * (1 + std::fabs(bv[i]))))
      return "value " + std::to_string(av[i]) + " at " + std::to_string(i) + " differs from the reference's " +
             std::to_string(bv[i]) + " (" + what + ")";
  }
  return "";
}

void sweep(const Device& dev) {
  int calls = 0, errors = 0;
  for (const Input& in : inputs()) {
    Args args = to_device(in.args, dev);
    for (const Op& op : ops()) {
      Args a(args.begin(), args.begin() + op.arity);
      std::string bad = check_call(op, a, in.what);
      EXPECT_TRUE(bad.empty()) << op.name << " on " << in.what << " (" << dev << "): " << bad;
      ++calls;
      try {
        (void)op.fn(a);
      } catch (const tg::Error&) {
        ++errors;
      } catch (...) {}
    }
  }
  // The library is usable afterwards, and the sweep did exercise both paths.
  Tensor x = tg::ones({2, 2}).to(dev).requires_grad_();
  tg::sum(x * x).backward();
  EXPECT_EQ(tgtest::values(x.grad()), (std::vector<double>{2, 2, 2, 2}));
  EXPECT_GT(errors, calls / 10) << "few bad inputs were rejected";
  EXPECT_LT(errors, calls) << "nothing was accepted";
}

TEST(BadInputs, EveryOpReturnsTheReferenceOrNamesItselfOnCpu) { sweep(kCpu); }

// A 0-dim tensor takes dim 0 or -1 and no other, as sum and PyTorch: these
// ops took any dim of one before (issue 45), raw and recorded.
TEST(BadInputs, ZeroDimTensorsTakeOnlyDimZeroOrMinusOne) {
  using namespace tg;
  for (bool record : {false, true}) {
    Tensor s = scalar_tensor(2.5, kFloat64);
    if (record) s.requires_grad_();
    const std::vector<std::pair<const char*, std::function<Tensor(int64_t)>>> ops = {
        {"sum", [&](int64_t d) { return sum(s, {d}); }},
        {"sort", [&](int64_t d) { return std::get<0>(sort(s, d)); }},
        {"argsort", [&](int64_t d) { return add(argsort(s, d).to(kFloat64), 2.5); }},
        {"topk", [&](int64_t d) { return std::get<0>(topk(s, 1, d)); }},
        {"kthvalue", [&](int64_t d) { return std::get<0>(kthvalue(s, 1, d)); }},
        {"median", [&](int64_t d) { return std::get<0>(median(s, d, true)); }},
        {"prod", [&](int64_t d) { return prod(s, d); }},
        {"cumsum", [&](int64_t d) { return cumsum(s, d); }},
        {"repeat_interleave", [&](int64_t d) { return repeat_interleave(s, 1, d); }},
        {"repeat_interleave", [&](int64_t d) { return repeat_interleave(s, I64({1}, {1}), d); }},
    };
    for (const auto& [name, fn] : ops) {
      SCOPED_TRACE(std::string(name) + (record ? " (recorded)" : " (raw)"));
      for (int64_t d : {0, -1})
        EXPECT_EQ(tgtest::values(fn(d)), (std::vector<double>{2.5})) << "dim " << d;
      for (int64_t d : {1, -2, 5})
        EXPECT_ERROR_CONTAINS(fn(d),
                              std::string(name) + ": dimension " + std::to_string(d) +
                                  " is out of range for a tensor of rank 0 (shape []); expected a dim in [-1, 0]");
    }
    EXPECT_EQ(s.item<double>(), 2.5);  // usable afterwards
  }
}

// Elementwise ops on NaN/Inf/0/-0/tiny/huge values: the vectorized CPU path
// (12 elements) agrees with the scalar path (each element alone), in float32
// and float64 (the GPU sweep compares the GPU with the CPU). It found
// sqrt(+inf) = NaN and silu(-inf) = -inf on the vector path.
TEST(BadInputs, SpecialValuesGiveTheSameResultOnVectorAndScalarPaths) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  // -104 and -1e4: where exp and the sigmoid underflow to 0 in float32 (a
  // vectorized form that clamps its argument gives a denormal instead).
  const std::vector<double> v = {nan, inf, -inf, 0.0, -0.0, 1e-30, 1e30, -2.0, 3.5, nan, 1.0, -1.0, -104.0, -1e4};
  const int64_t nv = int64_t(v.size());
  for (auto dt : {tg::kFloat32, tg::kFloat64}) {
    Tensor x = tg::tensor(v, {nv}, tg::TensorOptions().dtype(dt));
    for (const Op& op : ops()) {
      const std::string name = op.name;
      if (op.arity != 1 || name == "sort|argsort" || name == "flip" || name == "roll") continue;  // reorders
      Tensor whole;
      try {
        whole = op.fn({x});
      } catch (const tg::Error&) {
        continue;  // ops that need another shape
      }
      if (whole.sizes() != x.sizes() || !whole.is_floating_point()) continue;  // elementwise only
      std::vector<double> w = tgtest::values(whole.to(tg::kFloat64));
      for (int64_t i = 0; i < nv; ++i) {
        double e = op.fn({x.narrow(0, i, 1).clone()}).to(tg::kFloat64).item<double>();
        // NaN where NaN, the same infinity, 0 where 0 (a result's value must
        // not depend on the layout), else equal up to rounding (the paths use
        // different approximations) or both denormal-small.
        double g = w[size_t(i)], tol = dt == tg::kFloat32 ? 1e-6 : 1e-14;
        bool same = std::isnan(e)   ? std::isnan(g)
                    : std::isinf(e) ? g == e
                    : e == 0        ? g == 0
                                    : std::isfinite(g) && std::fabs(g - e) <= tol * std::fabs(e) + 1e-30;
        EXPECT_TRUE(same) << op.name << " " << dt << " of " << v[size_t(i)] << ": " << w[size_t(i)]
                          << " (vector path) vs " << e << " (scalar path)";
      }
    }
  }
}

TEST(BadInputsGpu, EveryOpReturnsTheReferenceOrNamesItselfOnCuda) {
  REQUIRE_GPU();
  sweep(Device(tg::kCUDA, 0));
}

// Mixed devices: each op with one operand on the GPU and one on the CPU
// names itself and the devices (0-dim CPU operands are moved, as PyTorch).
TEST(BadInputsGpu, MixedDevicesNameTheOp) {
  REQUIRE_GPU();
  const Device gpu(tg::kCUDA, 0);
  for (const Op& op : ops()) {
    if (op.arity != 2) continue;
    Args a = {tg::randn({3, 4}).to(gpu), tg::randn({3, 4})};
    std::string bad = check_call(op, a, "cuda with cpu");
    EXPECT_TRUE(bad.empty()) << op.name << " on mixed devices: " << bad;
  }
}

}  // namespace
