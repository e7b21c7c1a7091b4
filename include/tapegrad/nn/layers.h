// More layers (docs/NN.md): containers (ModuleList, ModuleDict), Identity,
// Dropout, LayerNorm, Embedding, FourierFeatures, and the losses as modules.
// Named as LibTorch's; their parameters and buffers are in state_dict() and
// so in nn::save / nn::load.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <tapegrad/nn/functional.h>
#include <tapegrad/nn/module.h>
#include <tapegrad/nn/options.h>

namespace tg::nn {

/// Modules in a list, registered as "0", "1", ... (no forward of its own).
class ModuleListImpl : public Module {
 public:
  ModuleListImpl();
  /// The modules, in order.
  explicit ModuleListImpl(std::vector<std::shared_ptr<Module>> modules);
  /// The modules given one by one, as LibTorch's: `ModuleList(Linear(2, 3), Identity())`.
  template <class M0, class... M, class = detail::IfModules<M0, M...>>
  explicit ModuleListImpl(M0&& m0, M&&... m)
      : ModuleListImpl(detail::modules_of(std::forward<M0>(m0), std::forward<M>(m)...)) {}
  /// Appends a module.
  void push_back(std::shared_ptr<Module> m);
  /// How many modules it holds.
  size_t size() const { return modules_.size(); }
  /// The i-th module (an error past the end).
  const std::shared_ptr<Module>& operator[](size_t i) const;
  /// Iteration over the modules.
  std::vector<std::shared_ptr<Module>>::const_iterator begin() const { return modules_.begin(); }
  /// The end of the iteration.
  std::vector<std::shared_ptr<Module>>::const_iterator end() const { return modules_.end(); }

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};
TG_MODULE(ModuleList);

/// Modules by name, in insertion order (no forward of its own).
class ModuleDictImpl : public Module {
 public:
  ModuleDictImpl();
  /// Adds a module under `key` (an error if the key is taken).
  void insert(const std::string& key, std::shared_ptr<Module> m);
  /// The module under `key` (an error listing the keys otherwise).
  const std::shared_ptr<Module>& operator[](const std::string& key) const;
  /// Whether `key` is present.
  bool contains(const std::string& key) const { return index_.count(key) > 0; }
  /// The keys in insertion order.
  std::vector<std::string> keys() const;
  /// How many modules it holds.
  size_t size() const { return items_.size(); }

 private:
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> items_;
  std::map<std::string, size_t> index_;
};
TG_MODULE(ModuleDict);

/// Returns its input.
class IdentityImpl : public Module {
 public:
  IdentityImpl();
  Tensor forward(const Tensor& x) override;  ///< x
};
TG_MODULE(Identity);

/// functional::dropout with the module's training mode (train()/eval()).
class DropoutImpl : public Module {
 public:
  /// p: the probability of zeroing an element.
  explicit DropoutImpl(double p = 0.5);
  /// From LibTorch's options.
  explicit DropoutImpl(const DropoutOptions& o) : DropoutImpl(double(o.p)) {}
  Tensor forward(const Tensor& x) override;  ///< dropout(x, p, is_training())
  std::string extra_repr() const override;   ///< "Dropout(p=..)"

 private:
  double p_;
};
TG_MODULE(Dropout);

/// Normalizes over the last dims; weight (ones) and bias (zeros) of
/// normalized_shape when elementwise_affine.
class LayerNormImpl : public Module {
 public:
  /// The layer over trailing dims of sizes `normalized_shape`.
  LayerNormImpl(IntList normalized_shape, double eps = 1e-5, bool elementwise_affine = true,
                TensorOptions options = TensorOptions());
  /// From LibTorch's options.
  explicit LayerNormImpl(const LayerNormOptions& o) : LayerNormImpl(o.normalized_shape, o.eps, o.elementwise_affine) {}
  Tensor forward(const Tensor& x) override;  ///< layer_norm(x, normalized_shape, weight, bias, eps)
  std::string extra_repr() const override;   ///< "LayerNorm([..], eps=.., elementwise_affine=..)"
  Tensor weight;                             ///< normalized_shape, undefined without affine
  Tensor bias;                               ///< normalized_shape, undefined without affine

 private:
  IntList shape_;
  double eps_;
};
/// The holder of LayerNormImpl, with its constructor's braced lists.
class LayerNorm : public ModuleHolder<LayerNormImpl> {
 public:
  using ModuleHolder<LayerNormImpl>::ModuleHolder;
  /// LayerNormImpl's constructor.
  LayerNorm(IntList normalized_shape, double eps = 1e-5, bool elementwise_affine = true,
            TensorOptions options = TensorOptions())
      : ModuleHolder<LayerNormImpl>(
            std::make_shared<LayerNormImpl>(normalized_shape, eps, elementwise_affine, options)) {}
  /// LayerNormImpl's options constructor.
  explicit LayerNorm(const LayerNormOptions& o) : ModuleHolder<LayerNormImpl>(std::make_shared<LayerNormImpl>(o)) {}
};

/// A lookup table: rows of weight [num_embeddings, embedding_dim] (N(0, 1),
/// as LibTorch's) at Int64 indices of any shape; the options are PyTorch's
/// (functional::embedding).
class EmbeddingImpl : public Module {
 public:
  /// The table; sparse: weight's gradient is a sparse COO tensor.
  /// padding_idx (negative wraps): that row starts at zero and gets no
  /// gradient. max_norm: looked-up rows longer than it (in the norm_type
  /// norm) are scaled down to it in place before each lookup.
  EmbeddingImpl(int64_t num_embeddings, int64_t embedding_dim, bool sparse = false,
                TensorOptions options = TensorOptions(), std::optional<int64_t> padding_idx = std::nullopt,
                std::optional<double> max_norm = std::nullopt, double norm_type = 2.0);
  /// From LibTorch's options.
  explicit EmbeddingImpl(const EmbeddingOptions& o)
      : EmbeddingImpl(o.num_embeddings, o.embedding_dim, o.sparse, TensorOptions(), o.padding_idx, o.max_norm,
                      o.norm_type) {}
  Tensor forward(const Tensor& indices) override;  ///< functional::embedding(indices, weight, ...)
  std::string extra_repr() const override;         ///< "Embedding(num, dim[, padding_idx=..][, max_norm=..])"
  /// The padding row (wrapped into [0, num_embeddings)), if any.
  std::optional<int64_t> padding_idx() const { return padding_idx_; }
  Tensor weight;  ///< [num_embeddings, embedding_dim]

 private:
  bool sparse_;
  std::optional<int64_t> padding_idx_;
  std::optional<double> max_norm_;
  double norm_type_;
};
TG_MODULE(Embedding);

/// Random Fourier features (Tancik et al.): x [..., in] maps to
/// [sin(2 pi x B), cos(2 pi x B)] [..., 2 m] with B [in, m] drawn from
/// N(0, sigma^2) (the global generator); B is a parameter when trainable,
/// else a buffer. The usual first layer of a PINN for high frequencies.
class FourierFeaturesImpl : public Module {
 public:
  /// in_features inputs, num_features frequencies (2 num_features outputs).
  FourierFeaturesImpl(int64_t in_features, int64_t num_features, double sigma = 1.0, bool trainable = false,
                      TensorOptions options = TensorOptions());
  Tensor forward(const Tensor& x) override;  ///< cat(sin(2 pi x B), cos(2 pi x B))
  std::string extra_repr() const override;   ///< "FourierFeatures(in_features=.., num_features=.., ...)"
  Tensor B;                                  ///< [in_features, num_features]

 private:
  double sigma_;
  bool trainable_;
};
TG_MODULE(FourierFeatures);

/// The base of the losses as modules: forward(input, target).
class LossImpl : public Module {
 public:
  /// `name` is its type name.
  LossImpl(std::string name, Reduction reduction);
  /// The loss of input against target.
  virtual Tensor forward(const Tensor& input, const Tensor& target) = 0;
  /// forward(input, target).
  Tensor operator()(const Tensor& input, const Tensor& target) { return forward(input, target); }
  using Module::forward;

 protected:
  Reduction reduction_;  ///< how the per-element losses are reduced
};
TG_MODULE(Loss);

/// functional::mse_loss.
struct MSELossImpl : LossImpl {
  explicit MSELossImpl(Reduction reduction = Reduction::kMean);                           ///< the module
  explicit MSELossImpl(const MSELossOptions& o) : MSELossImpl(Reduction(o.reduction)) {}  ///< from LibTorch's options
  Tensor forward(const Tensor& input, const Tensor& target) override;
};
TG_MODULE(MSELoss);
/// functional::l1_loss.
struct L1LossImpl : LossImpl {
  explicit L1LossImpl(Reduction reduction = Reduction::kMean);                         ///< the module
  explicit L1LossImpl(const L1LossOptions& o) : L1LossImpl(Reduction(o.reduction)) {}  ///< from LibTorch's options
  Tensor forward(const Tensor& input, const Tensor& target) override;
};
TG_MODULE(L1Loss);
/// functional::smooth_l1_loss.
struct SmoothL1LossImpl : LossImpl {
  explicit SmoothL1LossImpl(Reduction reduction = Reduction::kMean, double beta = 1.0);  ///< the module
  /// From LibTorch's options.
  explicit SmoothL1LossImpl(const SmoothL1LossOptions& o) : SmoothL1LossImpl(o.reduction, o.beta) {}
  Tensor forward(const Tensor& input, const Tensor& target) override;
  double beta;  ///< where the quadratic part ends
};
TG_MODULE(SmoothL1Loss);
/// functional::huber_loss.
struct HuberLossImpl : LossImpl {
  explicit HuberLossImpl(Reduction reduction = Reduction::kMean, double delta = 1.0);  ///< the module
  /// From LibTorch's options.
  explicit HuberLossImpl(const HuberLossOptions& o) : HuberLossImpl(o.reduction, o.delta) {}
  Tensor forward(const Tensor& input, const Tensor& target) override;
  double delta;  ///< where the quadratic part ends
};
TG_MODULE(HuberLoss);
/// functional::cross_entropy; the class weights (if any) are a buffer.
struct CrossEntropyLossImpl : LossImpl {
  explicit CrossEntropyLossImpl(Tensor weight = {}, Reduction reduction = Reduction::kMean, int64_t ignore_index = -100,
                                double label_smoothing = 0.0);  ///< the module
  /// From LibTorch's options.
  explicit CrossEntropyLossImpl(const CrossEntropyLossOptions& o)
      : CrossEntropyLossImpl(o.weight, o.reduction, o.ignore_index, o.label_smoothing) {}
  Tensor forward(const Tensor& input, const Tensor& target) override;
  Tensor weight;           ///< per-class weights, or undefined
  int64_t ignore_index;    ///< targets that count nothing
  double label_smoothing;  ///< mixed-in uniform share
};
TG_MODULE(CrossEntropyLoss);
/// functional::nll_loss.
struct NLLLossImpl : LossImpl {
  explicit NLLLossImpl(Tensor weight = {}, Reduction reduction = Reduction::kMean,
                       int64_t ignore_index = -100);  ///< the module
  /// From LibTorch's options.
  explicit NLLLossImpl(const NLLLossOptions& o) : NLLLossImpl(o.weight, o.reduction, o.ignore_index) {}
  Tensor forward(const Tensor& input, const Tensor& target) override;
  Tensor weight;         ///< per-class weights, or undefined
  int64_t ignore_index;  ///< targets that count nothing
};
TG_MODULE(NLLLoss);
/// functional::binary_cross_entropy.
struct BCELossImpl : LossImpl {
  explicit BCELossImpl(Tensor weight = {}, Reduction reduction = Reduction::kMean);      ///< the module
  explicit BCELossImpl(const BCELossOptions& o) : BCELossImpl(o.weight, o.reduction) {}  ///< from LibTorch's options
  Tensor forward(const Tensor& input, const Tensor& target) override;
  Tensor weight;  ///< per-element weights, or undefined
};
TG_MODULE(BCELoss);
/// functional::binary_cross_entropy_with_logits.
struct BCEWithLogitsLossImpl : LossImpl {
  explicit BCEWithLogitsLossImpl(Tensor weight = {}, Reduction reduction = Reduction::kMean,
                                 Tensor pos_weight = {});  ///< the module
  /// From LibTorch's options.
  explicit BCEWithLogitsLossImpl(const BCEWithLogitsLossOptions& o)
      : BCEWithLogitsLossImpl(o.weight, o.reduction, o.pos_weight) {}
  Tensor forward(const Tensor& input, const Tensor& target) override;
  Tensor weight;      ///< per-element weights, or undefined
  Tensor pos_weight;  ///< weights of the positive term, or undefined
};
TG_MODULE(BCEWithLogitsLoss);
/// functional::kl_div.
struct KLDivLossImpl : LossImpl {
  explicit KLDivLossImpl(Reduction reduction = Reduction::kMean, bool log_target = false);  ///< the module
  /// From LibTorch's options.
  explicit KLDivLossImpl(const KLDivLossOptions& o) : KLDivLossImpl(o.reduction, o.log_target) {}
  Tensor forward(const Tensor& input, const Tensor& target) override;
  bool log_target;  ///< target holds log-probabilities
};
TG_MODULE(KLDivLoss);

}  // namespace tg::nn
