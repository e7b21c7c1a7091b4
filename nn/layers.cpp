#include <tapegrad/nn/layers.h>

#include <cmath>
#include <sstream>

#include <tapegrad/autograd/grad_mode.h>
#include <tapegrad/tensor/error.h>
#include <tapegrad/tensor/ops.h>

#include "nn/embedding_checks.h"

namespace tg::nn {

ModuleListImpl::ModuleListImpl() : Module("ModuleList") {}
ModuleListImpl::ModuleListImpl(std::vector<std::shared_ptr<Module>> modules) : ModuleListImpl() {
  for (auto& m : modules)
    push_back(std::move(m));
}
void ModuleListImpl::push_back(std::shared_ptr<Module> m) {
  TG_CHECK(m != nullptr, "ModuleList: cannot add a null module");
  register_module(std::to_string(modules_.size()), m);
  modules_.push_back(std::move(m));
}
const std::shared_ptr<Module>& ModuleListImpl::operator[](size_t i) const {
  TG_CHECK(i < modules_.size(), "ModuleList: index ", i, " is out of range for ", modules_.size(), " modules");
  return modules_[i];
}

ModuleDictImpl::ModuleDictImpl() : Module("ModuleDict") {}
void ModuleDictImpl::insert(const std::string& key, std::shared_ptr<Module> m) {
  TG_CHECK(m != nullptr, "ModuleDict: cannot add a null module under '", key, "'");
  TG_CHECK(!contains(key), "ModuleDict: key '", key, "' is already present");
  register_module(key, m);
  index_[key] = items_.size();
  items_.emplace_back(key, std::move(m));
}
const std::shared_ptr<Module>& ModuleDictImpl::operator[](const std::string& key) const {
  auto it = index_.find(key);
  if (it == index_.end()) {
    std::ostringstream have;
    for (const auto& [k, m] : items_)
      have << (have.tellp() > 0 ? ", " : "") << "'" << k << "'";
    TG_ERROR("ModuleDict: no module under '", key, "'; the keys are ", items_.empty() ? "none" : have.str());
  }
  return items_[it->second].second;
}
std::vector<std::string> ModuleDictImpl::keys() const {
  std::vector<std::string> k;
  for (const auto& item : items_)
    k.push_back(item.first);
  return k;
}

IdentityImpl::IdentityImpl() : Module("Identity") {}
Tensor IdentityImpl::forward(const Tensor& x) { return x; }

DropoutImpl::DropoutImpl(double p) : Module("Dropout"), p_(p) {
  TG_CHECK(p >= 0 && p <= 1, "Dropout: p must be in [0, 1], got ", p);
}
Tensor DropoutImpl::forward(const Tensor& x) { return functional::dropout(x, p_, is_training()); }
std::string DropoutImpl::extra_repr() const { return "Dropout(p=" + std::to_string(p_) + ")"; }

LayerNormImpl::LayerNormImpl(IntList normalized_shape, double eps, bool affine, TensorOptions options)
    : Module("LayerNorm"), shape_(std::move(normalized_shape)), eps_(eps) {
  TG_CHECK(!shape_.empty(), "LayerNorm: normalized_shape must name at least one dim");
  if (affine) {
    weight = register_parameter("weight", tg::ones(shape_, options));
    bias = register_parameter("bias", tg::zeros(shape_, options));
  }
}
Tensor LayerNormImpl::forward(const Tensor& x) { return functional::layer_norm(x, shape_, weight, bias, eps_); }
std::string LayerNormImpl::extra_repr() const {
  std::ostringstream s;
  s << "LayerNorm(" << shape_str(shape_) << ", eps=" << eps_
    << ", elementwise_affine=" << (weight.defined() ? "true" : "false") << ")";
  return s.str();
}

EmbeddingImpl::EmbeddingImpl(int64_t num, int64_t dim, bool sparse, TensorOptions options,
                             std::optional<int64_t> padding_idx, std::optional<double> max_norm, double norm_type)
    : Module("Embedding"), sparse_(sparse), max_norm_(max_norm), norm_type_(norm_type) {
  TG_CHECK(num > 0 && dim > 0, "Embedding: num_embeddings and embedding_dim must be positive, got ", num, " and ", dim);
  if (padding_idx) padding_idx_ = detail::embedding_padding_idx(*padding_idx, num, "Embedding");
  detail::check_embedding_norm(max_norm, norm_type, "Embedding");
  autograd::NoGradGuard no_grad;
  Tensor w = tg::randn({num, dim}, options);
  if (padding_idx_) w.select(0, *padding_idx_).zero_();  // as PyTorch's reset_parameters
  weight = register_parameter("weight", w);
}
Tensor EmbeddingImpl::forward(const Tensor& indices) {
  return functional::embedding(indices, weight, padding_idx_, max_norm_, norm_type_, sparse_);
}
std::string EmbeddingImpl::extra_repr() const {
  std::ostringstream s;
  s << "Embedding(" << weight.size(0) << ", " << weight.size(1);
  if (padding_idx_) s << ", padding_idx=" << *padding_idx_;
  if (max_norm_) s << ", max_norm=" << *max_norm_;
  if (max_norm_ && norm_type_ != 2.0) s << ", norm_type=" << norm_type_;
  if (sparse_) s << ", sparse=true";
  return s.str() + ")";
}

FourierFeaturesImpl::FourierFeaturesImpl(int64_t in, int64_t m, double sigma, bool trainable, TensorOptions options)
    : Module("FourierFeatures"), sigma_(sigma), trainable_(trainable) {
  TG_CHECK(in > 0 && m > 0, "FourierFeatures: in_features and num_features must be positive, got ", in, " and ", m);
  TG_CHECK(sigma > 0, "FourierFeatures: sigma must be > 0, got ", sigma);
  Tensor b;
  {
    autograd::NoGradGuard no_grad;
    b = tg::randn({in, m}, options) * sigma;
  }
  B = trainable ? register_parameter("B", b) : register_buffer("B", b);
}
Tensor FourierFeaturesImpl::forward(const Tensor& x) {
  TG_CHECK(x.defined() && x.dim() >= 1 && x.size(-1) == B.size(0), "FourierFeatures: expected inputs [..., ", B.size(0),
           "], got ", x.defined() ? shape_str(x.sizes()) : std::string("an undefined tensor"));
  Tensor z = tg::matmul(x, B) * (2 * M_PI);
  return tg::cat({tg::sin(z), tg::cos(z)}, -1);
}
std::string FourierFeaturesImpl::extra_repr() const {
  std::ostringstream s;
  s << "FourierFeatures(in_features=" << B.size(0) << ", num_features=" << B.size(1) << ", sigma=" << sigma_
    << ", trainable=" << (trainable_ ? "true" : "false") << ")";
  return s.str();
}

LossImpl::LossImpl(std::string name, Reduction reduction) : Module(std::move(name)), reduction_(reduction) {}

namespace F = functional;

MSELossImpl::MSELossImpl(Reduction r) : LossImpl("MSELoss", r) {}
Tensor MSELossImpl::forward(const Tensor& input, const Tensor& target) {
  return F::mse_loss(input, target, reduction_);
}
L1LossImpl::L1LossImpl(Reduction r) : LossImpl("L1Loss", r) {}
Tensor L1LossImpl::forward(const Tensor& input, const Tensor& target) { return F::l1_loss(input, target, reduction_); }
SmoothL1LossImpl::SmoothL1LossImpl(Reduction r, double b) : LossImpl("SmoothL1Loss", r), beta(b) {}
Tensor SmoothL1LossImpl::forward(const Tensor& input, const Tensor& target) {
  return F::smooth_l1_loss(input, target, reduction_, beta);
}
HuberLossImpl::HuberLossImpl(Reduction r, double d) : LossImpl("HuberLoss", r), delta(d) {}
Tensor HuberLossImpl::forward(const Tensor& input, const Tensor& target) {
  return F::huber_loss(input, target, reduction_, delta);
}
CrossEntropyLossImpl::CrossEntropyLossImpl(Tensor w, Reduction r, int64_t ignore, double smoothing)
    : LossImpl("CrossEntropyLoss", r), ignore_index(ignore), label_smoothing(smoothing) {
  if (w.defined()) weight = register_buffer("weight", w);
}
Tensor CrossEntropyLossImpl::forward(const Tensor& input, const Tensor& target) {
  return F::cross_entropy(input, target, weight, reduction_, ignore_index, label_smoothing);
}
NLLLossImpl::NLLLossImpl(Tensor w, Reduction r, int64_t ignore) : LossImpl("NLLLoss", r), ignore_index(ignore) {
  if (w.defined()) weight = register_buffer("weight", w);
}
Tensor NLLLossImpl::forward(const Tensor& input, const Tensor& target) {
  return F::nll_loss(input, target, weight, reduction_, ignore_index);
}
BCELossImpl::BCELossImpl(Tensor w, Reduction r) : LossImpl("BCELoss", r) {
  if (w.defined()) weight = register_buffer("weight", w);
}
Tensor BCELossImpl::forward(const Tensor& input, const Tensor& target) {
  return F::binary_cross_entropy(input, target, weight, reduction_);
}
BCEWithLogitsLossImpl::BCEWithLogitsLossImpl(Tensor w, Reduction r, Tensor pw) : LossImpl("BCEWithLogitsLoss", r) {
  if (w.defined()) weight = register_buffer("weight", w);
  if (pw.defined()) pos_weight = register_buffer("pos_weight", pw);
}
Tensor BCEWithLogitsLossImpl::forward(const Tensor& input, const Tensor& target) {
  return F::binary_cross_entropy_with_logits(input, target, weight, reduction_, pos_weight);
}
KLDivLossImpl::KLDivLossImpl(Reduction r, bool log_t) : LossImpl("KLDivLoss", r), log_target(log_t) {}
Tensor KLDivLossImpl::forward(const Tensor& input, const Tensor& target) {
  return F::kl_div(input, target, reduction_, log_target);
}

}  // namespace tg::nn
