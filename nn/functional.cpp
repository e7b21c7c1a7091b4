// The losses and the functional layers (include/tapegrad/nn/functional.h):
// formulas of differentiable ops, so every derivative order follows. Each
// names itself in its errors.
#include <tapegrad/nn/functional.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include <tapegrad/autograd/grad_mode.h>
#include <tapegrad/cuda/capture.h>
#include <tapegrad/tensor/error.h>
#include <tapegrad/tensor/ops.h>

#include "nn/embedding_checks.h"

namespace tg::nn::functional {
namespace {

void check_pair(const Tensor& input, const Tensor& target, const char* op) {
  TG_CHECK(input.defined() && target.defined(), op, ": input and target must be defined tensors");
  TG_CHECK(input.is_floating_point(), op, ": input must be floating point, got ", input.dtype());
  TG_CHECK(input.sizes() == target.sizes(), op, ": input ", shape_str(input.sizes()), " and target ",
           shape_str(target.sizes()),
           " differ in shape; reshape one (PyTorch would broadcast them, with a warning, "
           "to a loss over every pair)");
}

Tensor reduce(const Tensor& l, Reduction r, const char* op) {
  switch (r) {
    case Reduction::kNone: return l;
    case Reduction::kMean: return tg::mean(l);
    case Reduction::kSum: return tg::sum(l);
    case Reduction::kBatchMean: break;
  }
  TG_CHECK(false, op, ": Reduction::kBatchMean is kl_div's only; use kMean, kSum or kNone");
  return l;
}

// log(1 + e^z) exactly (no threshold), without overflow, with derivative
// sigmoid(z) everywhere (0.5 at 0): each branch sees only its half-line.
Tensor softplus_exact(const Tensor& z) {
  Tensor up = tg::clamp_min(z, 0.0), down = tg::clamp_max(z, 0.0);
  return tg::where(tg::gt(z, 0.0), up + tg::log1p(tg::exp(-up)), tg::log1p(tg::exp(down)));
}

// Moves the class dim (1; 0 for a 1-D input) last and flattens the rest:
// [M, C].
Tensor classes_last(const Tensor& input) {
  if (input.dim() == 1) return input.unsqueeze(0);
  const int64_t c = input.size(1);
  if (input.dim() == 2) return input;
  IntList perm = {0};
  for (int64_t d = 2; d < input.dim(); ++d)
    perm.push_back(d);
  perm.push_back(1);
  return input.permute(perm).reshape({-1, c});
}

}  // namespace

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  check_pair(input, target, "mse_loss");
  return reduce(tg::square(input - target), reduction, "mse_loss");
}

Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  check_pair(input, target, "l1_loss");
  return reduce(tg::abs(input - target), reduction, "l1_loss");
}

Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction, double beta) {
  check_pair(input, target, "smooth_l1_loss");
  TG_CHECK(beta >= 0, "smooth_l1_loss: beta must be >= 0, got ", beta);
  Tensor d = input - target, a = tg::abs(d);
  if (beta == 0) return reduce(a, reduction, "smooth_l1_loss");
  return reduce(tg::where(tg::lt(a, beta), tg::square(d) * (0.5 / beta), a - 0.5 * beta), reduction, "smooth_l1_loss");
}

Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction, double delta) {
  check_pair(input, target, "huber_loss");
  TG_CHECK(delta > 0, "huber_loss: delta must be > 0, got ", delta);
  Tensor d = input - target, a = tg::abs(d);
  return reduce(tg::where(tg::le(a, delta), tg::square(d) * 0.5, (a - 0.5 * delta) * delta), reduction, "huber_loss");
}

namespace {

// The checks and the per-element pieces nll_loss and cross_entropy share:
// logp [M, C], the targets [M] with ignored ones at 0, their weights (0
// where ignored).
struct ClassTargets {
  Tensor logp, safe, w;
  Tensor valid;   // 1 where the target counts, 0 where ignored (input's dtype)
  IntList shape;  // the targets' shape (kNone's result)
};

ClassTargets class_targets(const Tensor& input, const Tensor& target, const Tensor& weight, int64_t ignore_index,
                           const char* op) {
  TG_CHECK(input.defined() && target.defined(), op, ": input and target must be defined tensors");
  TG_CHECK(input.is_floating_point(), op, ": input must be floating point, got ", input.dtype());
  TG_CHECK(target.dtype() == kInt64, op, ": class-index targets must be Int64, got ", target.dtype());
  TG_CHECK(input.dim() >= 1, op, ": input must have a class dim, got a 0-dim tensor");
  IntList want = input.sizes();
  want.erase(want.begin() + (input.dim() == 1 ? 0 : 1));
  TG_CHECK(target.sizes() == want, op, ": input ", shape_str(input.sizes()), " (classes along dim ",
           input.dim() == 1 ? 0 : 1, ") needs a target of shape ", shape_str(want), ", got ",
           shape_str(target.sizes()));
  const int64_t C = input.size(input.dim() == 1 ? 0 : 1);
  if (weight.defined())
    TG_CHECK(weight.dim() == 1 && weight.size(0) == C, op, ": weight must have one entry per class (", C,
             "), got shape ", shape_str(weight.sizes()));
  ClassTargets ct;
  ct.shape = target.sizes();
  ct.logp = classes_last(input);
  Tensor t = target.reshape({-1});
  Tensor valid = tg::ne(t, ignore_index);
  ct.safe = tg::where(valid, t, 0);
  if (ct.safe.numel() > 0) {  // read on the host, as PyTorch checks
    const int64_t lo = ct.safe.amin().item<int64_t>(), hi = ct.safe.amax().item<int64_t>();
    TG_CHECK(lo >= 0 && hi < C, op, ": target ", lo < 0 ? lo : hi, " is out of range for ", C, " classes");
  }
  Tensor w = weight.defined() ? tg::index_select(weight.to(input.device()), 0, ct.safe)
                              : tg::ones({t.numel()}, TensorOptions().dtype(input.dtype()).device(input.device()));
  ct.valid = valid.to(input.dtype());
  ct.w = w * ct.valid;
  return ct;
}

Tensor reduce_weighted(const Tensor& l, const ClassTargets& ct, Reduction r, const char* op) {
  if (r == Reduction::kNone) return l.reshape(ct.shape);
  if (r == Reduction::kMean) return tg::sum(l) / tg::sum(ct.w);
  return reduce(l, r, op);
}

// -weight[t] logp[t] per target, reduced (nll_loss, and cross_entropy's
// class-index case).
Tensor weighted_nll(const Tensor& logp, const ClassTargets& ct, Reduction r, const char* op) {
  Tensor picked = tg::gather(logp, 1, ct.safe.unsqueeze(1)).squeeze(1);
  return reduce_weighted(-(picked * ct.w), ct, r, op);
}

}  // namespace

Tensor nll_loss(const Tensor& input, const Tensor& target, const Tensor& weight, Reduction reduction,
                int64_t ignore_index) {
  ClassTargets ct = class_targets(input, target, weight, ignore_index, "nll_loss");
  return weighted_nll(ct.logp, ct, reduction, "nll_loss");
}

Tensor cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight, Reduction reduction,
                     int64_t ignore_index, double label_smoothing) {
  TG_CHECK(label_smoothing >= 0 && label_smoothing <= 1, "cross_entropy: label_smoothing must be in [0, 1], got ",
           label_smoothing);
  TG_CHECK(input.defined() && target.defined(), "cross_entropy: input and target must be defined tensors");
  TG_CHECK(input.dim() >= 1, "cross_entropy: input must have a class dim, got a 0-dim tensor");
  const int64_t cdim = input.dim() == 1 ? 0 : 1, C = input.size(cdim);
  if (!target.is_floating_point()) {
    ClassTargets ct = class_targets(input, target, weight, ignore_index, "cross_entropy");
    Tensor logp = tg::log_softmax(ct.logp, 1);
    Tensor nll = weighted_nll(logp, ct, reduction, "cross_entropy");
    if (label_smoothing == 0) return nll;
    // PyTorch's: the uniform part weighs every class (by its weight), ignored
    // targets count nothing, kMean divides by the counted targets' weights
    // (their count without weights), as nll's.
    Tensor per_class = weight.defined() ? logp * weight.to(input.device()).unsqueeze(0) : logp;
    Tensor s = reduce_weighted(-per_class.sum({1}) * ct.valid, ct, reduction, "cross_entropy");
    return nll * (1 - label_smoothing) + s * (label_smoothing / double(C));
  }
  // Class probabilities.
  IntList index_shape = input.sizes();
  index_shape.erase(index_shape.begin() + cdim);
  TG_CHECK(target.sizes() != index_shape, "cross_entropy: target ", shape_str(target.sizes()), " is ", target.dtype(),
           " of the class-index shape (input ", shape_str(input.sizes()),
           " without its class dim); pass the class indices as Int64 (target.to(kInt64)), or class probabilities of "
           "input's shape");
  TG_CHECK(target.sizes() == input.sizes(), "cross_entropy: probability targets must have input's shape ",
           shape_str(input.sizes()), ", got ", shape_str(target.sizes()));
  Tensor logp = tg::log_softmax(input, cdim);
  Tensor t = label_smoothing > 0 ? target * (1 - label_smoothing) + label_smoothing / double(C) : target;
  Tensor prod = logp * t;
  if (weight.defined()) {
    TG_CHECK(weight.dim() == 1 && weight.size(0) == C, "cross_entropy: weight must have one entry per class (", C,
             "), got shape ", shape_str(weight.sizes()));
    IntList ws(size_t(input.dim()), 1);
    ws[size_t(cdim)] = C;
    prod = prod * weight.to(input.device()).reshape(ws);
  }
  return reduce(-prod.sum({cdim}), reduction, "cross_entropy");
}

namespace {

// A weight of the binary losses multiplies the per-element loss: its shape
// must broadcast to input's without changing it (a [3, 1] weight against a
// [3] input would make a [3, 3] loss of every pair).
void check_weight_shape(const Tensor& w, const Tensor& input, const char* what, const char* op) {
  if (!w.defined()) return;
  const IntList &ws = w.sizes(), &is = input.sizes();
  bool ok = ws.size() <= is.size();
  for (size_t k = 1; ok && k <= ws.size(); ++k)
    ok = ws[ws.size() - k] == 1 || ws[ws.size() - k] == is[is.size() - k];
  TG_CHECK(ok, op, ": ", what, " ", shape_str(ws), " does not broadcast to input's shape ", shape_str(is),
           " without changing it (aligned from the right, each of its sizes must be 1 or input's); reshape ", what,
           " to fit input");
}

// PyTorch's rule: every element of input is a probability in [0, 1] (NaN is
// not). Read on the host: on the CPU directly, on a GPU after one sync (as
// the class-index range of nll_loss). While a CUDA graph is being captured
// nothing can be read: the result of `loss` is then NaN where input is out
// of range (and so is any reduction of it), never a finite wrong number.
Tensor check_probabilities(const Tensor& input, const std::function<Tensor()>& loss) {
  const char* op = "binary_cross_entropy";
  Tensor ok;
  {
    autograd::NoGradGuard no_grad;
    ok = tg::logical_and(tg::ge(input.detach(), 0.0), tg::le(input.detach(), 1.0));
  }
  if (input.is_cuda() && cuda::is_current_stream_capturing())
    return tg::where(ok, loss(), std::numeric_limits<double>::quiet_NaN());
  if (input.numel() > 0 && !tg::all(ok).item<bool>()) {
    const std::vector<double> v = input.detach().to_vector<double>();
    size_t i = 0;
    while (i + 1 < v.size() && v[i] >= 0 && v[i] <= 1)
      ++i;
    TG_ERROR(op, ": all elements of input should be between 0 and 1, got ", v[i], " at (flattened) index ", i,
             " of input ", shape_str(input.sizes()),
             "; pass probabilities (sigmoid of the logits), or the logits to binary_cross_entropy_with_logits");
  }
  return loss();
}

}  // namespace

Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight, Reduction reduction) {
  check_pair(input, target, "binary_cross_entropy");
  check_weight_shape(weight, input, "weight", "binary_cross_entropy");
  Tensor l = check_probabilities(input, [&] {
    auto logs = [&](const Tensor& x) {  // logs clamped at -100, as PyTorch's
      return -(target * tg::clamp_min(tg::log(x), -100.0) + (1.0 - target) * tg::clamp_min(tg::log(1.0 - x), -100.0));
    };
    // At x = 0 or 1 a log's derivative is infinite and the clamp's 0 times it
    // NaN (sigmoid(20) is 1 in float32: ordinary training reaches it). There
    // the loss is the clamped value and its slope PyTorch's (x - t) / 1e-12
    // (0 where x = t); the logs of the inner branch see 0.5 instead.
    Tensor xd = input.detach();
    Tensor edge = tg::eq(xd * (1.0 - xd), 0.0);
    Tensor at_edge = logs(xd) + (input - xd) * ((xd - target) * 1e12);
    return tg::where(edge, at_edge, logs(tg::where(edge, tg::full_like(input, 0.5), input)));
  });
  if (weight.defined()) l = l * weight;
  return reduce(l, reduction, "binary_cross_entropy");
}

Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, const Tensor& weight,
                                        Reduction reduction, const Tensor& pos_weight) {
  const char* op = "binary_cross_entropy_with_logits";
  check_pair(input, target, op);
  check_weight_shape(weight, input, "weight", op);
  check_weight_shape(pos_weight, input, "pos_weight", op);
  Tensor sp = softplus_exact(-input);  // -log sigmoid(input)
  Tensor l = pos_weight.defined() ? (1.0 - target) * input + ((pos_weight - 1.0) * target + 1.0) * sp
                                  : (1.0 - target) * input + sp;
  if (weight.defined()) l = l * weight;
  return reduce(l, reduction, "binary_cross_entropy_with_logits");
}

Tensor kl_div(const Tensor& input, const Tensor& target, Reduction reduction, bool log_target) {
  check_pair(input, target, "kl_div");
  // target log(target) is 0 at target 0 (its log is taken of 1 there).
  Tensor l = log_target ? tg::exp(target) * (target - input)
                        : target * (tg::log(tg::where(tg::gt(target, 0.0), target, 1.0)) - input);
  if (reduction == Reduction::kBatchMean) return tg::sum(l) / double(input.dim() == 0 ? 1 : input.size(0));
  return reduce(l, reduction, "kl_div");
}

}  // namespace tg::nn::functional

namespace tg::nn::detail {

int64_t embedding_padding_idx(int64_t padding_idx, int64_t num, const char* op) {
  TG_CHECK(padding_idx >= -num && padding_idx < num, op, ": padding_idx ", padding_idx, " is out of range for ", num,
           " embeddings; it must be in [", -num, ", ", num, ") (negative counts from the end)");
  return padding_idx < 0 ? padding_idx + num : padding_idx;
}

void check_embedding_norm(std::optional<double> max_norm, double norm_type, const char* op) {
  TG_CHECK(!max_norm || (*max_norm >= 0 && std::isfinite(*max_norm)), op,
           ": max_norm must be a finite number >= 0, got ", *max_norm);
  TG_CHECK(norm_type > 0, op, ": norm_type must be > 0 (a p-norm; INFINITY for the largest |entry|), got ", norm_type);
}

}  // namespace tg::nn::detail

namespace tg::nn::functional {

Tensor embedding(const Tensor& input, const Tensor& weight, std::optional<int64_t> padding_idx,
                 std::optional<double> max_norm, double norm_type, bool sparse) {
  TG_CHECK(weight.defined() && weight.dim() >= 1, "embedding: weight must be a table [num_embeddings, dim...], got ",
           weight.defined() ? shape_str(weight.sizes()) : std::string("an undefined tensor"));
  const int64_t num = weight.size(0);
  const int64_t pad = padding_idx ? detail::embedding_padding_idx(*padding_idx, num, "embedding") : -1;
  detail::check_embedding_norm(max_norm, norm_type, "embedding");
  if (max_norm) {
    // PyTorch's embedding_renorm_: the looked-up rows whose norm exceeds
    // max_norm, scaled in place (a row looked up twice once).
    autograd::NoGradGuard no_grad;
    Tensor w = weight.detach();
    tg::embedding(w, input);  // checks the indices, naming embedding
    Tensor flat = input.reshape({-1}), table = w.reshape({num, -1});
    Tensor hits = tg::scatter_add(tg::zeros({num}, TensorOptions().dtype(w.dtype()).device(w.device())), 0, flat,
                                  tg::ones({flat.numel()}, TensorOptions().dtype(w.dtype()).device(w.device())));
    Tensor norms = tg::norm(table, norm_type, {1});
    Tensor scale =
        tg::where(tg::logical_and(tg::gt(hits, 0.0), tg::gt(norms, *max_norm)), *max_norm / (norms + 1e-7), 1.0);
    IntList ones(size_t(w.dim()), 1);
    ones[0] = num;
    w.mul_(scale.reshape(ones));
  }
  Tensor out = tg::embedding(weight, input, sparse);
  if (pad >= 0 && out.requires_grad()) {
    // The padding row's lookups read it, but their gradient stops here.
    IntList ks = input.sizes();
    ks.resize(ks.size() + size_t(weight.dim() - 1), 1);
    Tensor keep = tg::ne(input, pad).reshape(ks);
    out = tg::where(keep, out, out.detach());
  }
  return out;
}

Tensor leaky_relu(const Tensor& x, double negative_slope) { return tg::where(tg::gt(x, 0.0), x, x * negative_slope); }

Tensor elu(const Tensor& x, double alpha) {
  return tg::where(tg::gt(x, 0.0), x, tg::expm1(tg::clamp_max(x, 0.0)) * alpha);
}

Tensor tanhshrink(const Tensor& x) { return x - tg::tanh(x); }

Tensor relu(const Tensor& x) { return tg::relu(x); }
Tensor relu6(const Tensor& x) { return tg::clamp(x, Scalar(0.0), Scalar(6.0)); }
Tensor gelu(const Tensor& x, const std::string& approximate) { return tg::gelu(x, approximate); }
Tensor silu(const Tensor& x) { return tg::silu(x); }
Tensor sigmoid(const Tensor& x) { return tg::sigmoid(x); }
Tensor tanh(const Tensor& x) { return tg::tanh(x); }
Tensor softplus(const Tensor& x, double beta, double threshold) { return tg::softplus(x, beta, threshold); }
Tensor softmax(const Tensor& x, int64_t dim) { return tg::softmax(x, dim); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return tg::log_softmax(x, dim); }
Tensor softmin(const Tensor& x, int64_t dim) { return tg::softmax(-x, dim); }
Tensor logsigmoid(const Tensor& x) { return -tg::softplus(-x); }
Tensor selu(const Tensor& x) {
  constexpr double alpha = 1.6732632423543772848170429916717, scale = 1.0507009873554804934193349852946;
  return elu(x, alpha) * scale;
}
Tensor celu(const Tensor& x, double alpha) {
  TG_CHECK(alpha != 0, "celu: alpha must be nonzero");
  return tg::where(tg::gt(x, 0.0), x, tg::expm1(tg::clamp_max(x, 0.0) / alpha) * alpha);
}
Tensor mish(const Tensor& x) { return x * tg::tanh(tg::softplus(x)); }
Tensor hardtanh(const Tensor& x, double min_val, double max_val) {
  TG_CHECK(min_val <= max_val, "hardtanh: min_val ", min_val, " must be <= max_val ", max_val);
  return tg::clamp(x, Scalar(min_val), Scalar(max_val));
}
Tensor hardsigmoid(const Tensor& x) { return tg::clamp(x / 6.0 + 0.5, Scalar(0.0), Scalar(1.0)); }
Tensor hardswish(const Tensor& x) { return x * hardsigmoid(x); }
Tensor softsign(const Tensor& x) { return x / (tg::abs(x) + 1.0); }
Tensor softshrink(const Tensor& x, double lambda) {
  TG_CHECK(lambda >= 0, "softshrink: lambda must be >= 0, got ", lambda);
  return tg::where(tg::gt(x, lambda), x - lambda, tg::where(tg::lt(x, -lambda), x + lambda, tg::zeros_like(x)));
}
Tensor hardshrink(const Tensor& x, double lambda) {
  TG_CHECK(lambda >= 0, "hardshrink: lambda must be >= 0, got ", lambda);
  return tg::where(tg::gt(tg::abs(x), lambda), x, tg::zeros_like(x));
}
Tensor threshold(const Tensor& x, double threshold, double value) {
  return tg::where(tg::gt(x, threshold), x, tg::full_like(x, value));
}
Tensor glu(const Tensor& x, int64_t dim) {
  TG_CHECK(x.defined() && x.dim() >= 1, "glu: x must have at least one dim");
  const int64_t d = dim < 0 ? dim + x.dim() : dim;
  TG_CHECK(d >= 0 && d < x.dim(), "glu: dim ", dim, " is out of range for shape ", shape_str(x.sizes()));
  const int64_t n = x.size(d);
  TG_CHECK(n % 2 == 0, "glu: dim ", dim, " has size ", n, ", which must be even (shape ", shape_str(x.sizes()), ")");
  return x.narrow(d, 0, n / 2) * tg::sigmoid(x.narrow(d, n / 2, n / 2));
}
Tensor normalize(const Tensor& x, double p, int64_t dim, double eps) {
  TG_CHECK(eps >= 0, "normalize: eps must be >= 0, got ", eps);
  return x / tg::clamp_min(tg::norm(x, p, {dim}, true), Scalar(eps));
}

Tensor layer_norm(const Tensor& x, const IntList& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  TG_CHECK(x.defined() && x.is_floating_point(), "layer_norm: x must be a floating-point tensor");
  const int64_t k = int64_t(normalized_shape.size());
  TG_CHECK(k >= 1 && x.dim() >= k && IntList(x.sizes().end() - k, x.sizes().end()) == normalized_shape,
           "layer_norm: normalized_shape ", shape_str(normalized_shape), " must be the last dims of x's shape ",
           shape_str(x.sizes()));
  for (const Tensor* p : {&weight, &bias})
    TG_CHECK(!p->defined() || p->sizes() == normalized_shape, "layer_norm: ", p == &weight ? "weight" : "bias",
             " must have shape ", shape_str(normalized_shape), ", got ", shape_str(p->sizes()));
  IntList dims;
  for (int64_t d = x.dim() - k; d < x.dim(); ++d)
    dims.push_back(d);
  Tensor centered = x - tg::mean(x, dims, true);
  Tensor y = centered * tg::rsqrt(tg::mean(tg::square(centered), dims, true) + eps);
  if (weight.defined()) y = y * weight;
  if (bias.defined()) y = y + bias;
  return y;
}

Tensor dropout(const Tensor& x, double p, bool training) {
  TG_CHECK(p >= 0 && p <= 1, "dropout: p must be in [0, 1], got ", p);
  TG_CHECK(x.defined(), "dropout: x is an undefined tensor");
  if (!training || p == 0) return x;
  if (p == 1) return x * 0.0;
  const ScalarType u = x.dtype() == kFloat64 ? kFloat64 : kFloat32;
  Tensor keep = tg::ge(tg::rand(x.sizes(), TensorOptions().dtype(u).device(x.device())), p);
  return x * keep.to(x.dtype()) * (1.0 / (1.0 - p));
}

}  // namespace tg::nn::functional
