// Tensor: a handle to a TensorImpl; copies share the same tensor (as in
// LibTorch). Methods forward to the free functions of <tapegrad/tensor/ops.h>.
#pragma once

#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <tapegrad/tensor/device.h>
#include <tapegrad/tensor/scalar.h>
#include <tapegrad/tensor/tensor_impl.h>

namespace tg {

namespace autograd {
class Node;
}

// A handle returned by register_hook: remove() unregisters the hook (once; a
// second call, or a call after the tensor died, does nothing).
class HookHandle {
 public:
  HookHandle() = default;
  explicit HookHandle(std::function<void()> remover) : remover_(std::move(remover)) {}
  void remove() {
    auto f = std::move(remover_);
    remover_ = nullptr;
    if (f) f();
  }

 private:
  std::function<void()> remover_;
};

namespace detail {
// Throws the tg::Error for a metadata call on an undefined tensor.
[[noreturn]] void throw_undefined(const char* op);
}  // namespace detail

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(IntrusivePtr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return bool(impl_); }
  TensorImpl* impl() const { return impl_.get(); }
  const IntrusivePtr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }
  size_t use_count() const { return impl_.use_count(); }

  // Shape and metadata.
  const IntList& sizes() const { return checked("sizes").sizes(); }
  const IntList& strides() const { return checked("strides").strides(); }
  int64_t size(int64_t d) const;
  int64_t stride(int64_t d) const;
  int64_t dim() const { return checked("dim").dim(); }
  int64_t numel() const { return checked("numel").numel(); }
  int64_t storage_offset() const { return checked("storage_offset").offset(); }
  ScalarType dtype() const { return checked("dtype").dtype(); }
  ScalarType scalar_type() const { return checked("scalar_type").dtype(); }
  Device device() const { return checked("device").device(); }
  Layout layout() const { return checked("layout").layout(); }
  TensorOptions options() const {
    return TensorOptions().dtype(dtype()).device(device());
  }
  bool is_contiguous() const { return checked("is_contiguous").is_contiguous(); }
  bool is_sparse() const { return checked("is_sparse").layout() == Layout::SparseCoo; }
  // Sparse COO tensors only. indices() and values() need a coalesced tensor
  // (as LibTorch); _indices() and _values() return the parts as stored.
  // values() and _values() are differentiable.
  int64_t sparse_dim() const;
  int64_t dense_dim() const;
  int64_t nnz() const;
  bool is_coalesced() const;
  Tensor indices() const;
  Tensor values() const;
  Tensor _indices() const;
  Tensor _values() const;
  Tensor coalesce() const;
  Tensor to_dense() const;
  bool is_cuda() const { return device().is_cuda(); }
  bool is_floating_point() const { return tg::is_floating_point(dtype()); }
  uint32_t version() const { return checked("version").version_counter()->current(); }
  void bump_version() const { checked("bump_version").version_counter()->bump(); }

  // Data access. data_ptr<T>() checks that T matches the dtype.
  void* data_ptr() const { return checked("data_ptr").data(); }
  template <class T>
  T* data_ptr() const;
  template <class T>
  T item() const;
  template <class T>
  std::vector<T> to_vector() const;

  // Conversions and copies.
  Tensor to(Device d, bool non_blocking = false) const;
  Tensor to(ScalarType t) const;
  Tensor to(Device d, ScalarType t) const;
  // A copy in page-locked host memory (CPU tensors; needs the CUDA backend
  // and a GPU). Copies from it to a GPU with non_blocking=true return at
  // once; to(cpu, non_blocking=true) from a GPU returns a pinned tensor that
  // is valid after the stream (or cuda::synchronize) completes.
  Tensor pin_memory() const;
  bool is_pinned() const;
  Tensor contiguous() const;
  Tensor clone() const;
  Tensor detach() const;  // shares storage and version counter

  // Views (share storage and version counter).
  Tensor view(const IntList& sizes) const;
  Tensor reshape(const IntList& sizes) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor t() const;
  Tensor permute(const IntList& dims) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor slice(int64_t dim,
               std::optional<int64_t> start = std::nullopt,
               std::optional<int64_t> end = std::nullopt,
               int64_t step = 1) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor expand(const IntList& sizes) const;
  Tensor expand_as(const Tensor& other) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor as_strided(const IntList& sizes,
                    const IntList& strides,
                    std::optional<int64_t> offset = std::nullopt) const;
  Tensor operator[](int64_t index) const { return select(0, index); }

  // In-place ops: bump the version counter.
  Tensor& add_(const Tensor& o, Scalar alpha = 1);
  Tensor& add_(Scalar s);
  Tensor& sub_(const Tensor& o, Scalar alpha = 1);
  Tensor& sub_(Scalar s);
  Tensor& mul_(const Tensor& o);
  Tensor& mul_(Scalar s);
  Tensor& div_(const Tensor& o);
  Tensor& div_(Scalar s);
  Tensor& zero_();
  Tensor& fill_(Scalar s);
  Tensor& copy_(const Tensor& src, bool non_blocking = false);

  // Ops as methods.
  Tensor add(const Tensor& o, Scalar alpha = 1) const;
  Tensor sub(const Tensor& o, Scalar alpha = 1) const;
  Tensor mul(const Tensor& o) const;
  Tensor div(const Tensor& o) const;
  Tensor neg() const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sin() const;
  Tensor cos() const;
  Tensor tanh() const;
  Tensor sigmoid() const;
  Tensor relu() const;
  Tensor sqrt() const;
  Tensor rsqrt() const;
  Tensor abs() const;
  Tensor sign() const;
  Tensor square() const;
  Tensor reciprocal() const;
  Tensor pow(const Tensor& e) const;
  Tensor pow(Scalar e) const;
  Tensor clamp(std::optional<Scalar> lo, std::optional<Scalar> hi) const;
  Tensor maximum(const Tensor& o) const;
  Tensor minimum(const Tensor& o) const;
  Tensor sum() const;
  Tensor sum(const IntList& dims, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(const IntList& dims, bool keepdim = false) const;
  Tensor amax() const;
  Tensor amax(const IntList& dims, bool keepdim = false) const;
  Tensor amin() const;
  Tensor amin(const IntList& dims, bool keepdim = false) const;
  Tensor matmul(const Tensor& o) const;
  Tensor mm(const Tensor& o) const;
  Tensor bmm(const Tensor& o) const;
  Tensor index_select(int64_t dim, const Tensor& index) const;
  Tensor gather(int64_t dim, const Tensor& index) const;
  Tensor scatter_add(int64_t dim, const Tensor& index, const Tensor& src) const;
  Tensor eq(const Tensor& o) const;
  Tensor ne(const Tensor& o) const;
  Tensor lt(const Tensor& o) const;
  Tensor le(const Tensor& o) const;
  Tensor gt(const Tensor& o) const;
  Tensor ge(const Tensor& o) const;
  bool allclose(const Tensor& o, double rtol = 1e-5, double atol = 1e-8,
                bool equal_nan = false) const;
  bool equal(const Tensor& o) const;

  std::string to_string() const;

  // Autograd (defined in autograd/; reference: docs/AUTOGRAD.md).
  bool requires_grad() const;
  // Only floating-point tensors may require grad; only leaves may change it.
  Tensor& requires_grad_(bool requires_grad = true);
  const Tensor& grad() const;  // undefined when there is none
  Tensor& mutable_grad() const;
  std::shared_ptr<autograd::Node> grad_fn() const;
  bool is_leaf() const;
  uint32_t output_nr() const;
  void retain_grad() const;  // keep .grad() of a non-leaf after backward
  bool retains_grad() const;
  void backward(const Tensor& gradient = {},
                std::optional<bool> retain_graph = std::nullopt,
                bool create_graph = false,
                const std::vector<Tensor>& inputs = {}) const;
  // hook(grad) runs when the gradient w.r.t. this tensor is computed; a
  // defined return value replaces the gradient.
  HookHandle register_hook(std::function<Tensor(const Tensor&)> hook) const;
  // Leaves only: hook(tensor) runs after .grad() has been updated.
  HookHandle register_post_accumulate_grad_hook(
      std::function<void(const Tensor&)> hook) const;

 private:
  // The impl, or a tg::Error naming `op` when the tensor is undefined.
  const TensorImpl& checked(const char* op) const {
    if (!impl_) detail::throw_undefined(op);
    return *impl_;
  }
  IntrusivePtr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);
std::string shape_str(const IntList& shape);

}  // namespace tg
