// Tensor: a handle to a TensorImpl; copies share the same tensor (as in
// LibTorch). Its op methods are those of the op list (ops.def).
#pragma once

#include <cstddef>
#include <functional>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include <tapegrad/tensor/device.h>
#include <tapegrad/tensor/op_forms.h>
#include <tapegrad/tensor/scalar.h>
#include <tapegrad/tensor/tensor_impl.h>

namespace tg {

namespace autograd {
class Node;
}

/// A handle returned by register_hook: remove() unregisters the hook (once; a
/// second call, or a call after the tensor died, does nothing).
class HookHandle {
 public:
  HookHandle() = default;
  /// A handle whose remove() calls `remover` once.
  explicit HookHandle(std::function<void()> remover) : remover_(std::move(remover)) {}
  /// Unregisters the hook (the first call only).
  void remove() {
    auto f = std::move(remover_);
    remover_ = nullptr;
    if (f) f();
  }

 private:
  std::function<void()> remover_;
};

namespace detail {
/// Throws the tg::Error for a metadata call on an undefined tensor.
[[noreturn]] void throw_undefined(const char* op);
}  // namespace detail

class Tensor;
/// (values, indices) of max/min over a dim, as LibTorch's std::tuple.
using TensorPair = std::tuple<Tensor, Tensor>;

namespace detail {
/// An integer type other than bool: the one-dim overloads' argument.
template <class I> using IfDim = std::enable_if_t<std::is_integral<I>::value && !std::is_same<I, bool>::value, int>;
}  // namespace detail

class TensorIndex;
template <class T, size_t N> class TensorAccessor;

/// A strided or sparse COO tensor on a device: a handle to a TensorImpl, so
/// copies share one tensor (as in LibTorch). A default-constructed Tensor is
/// undefined: every accessor of it throws a tg::Error naming the accessor.
class Tensor {
 public:
  Tensor() = default;
  /// A handle to `impl` (for code that builds TensorImpls itself).
  explicit Tensor(IntrusivePtr<TensorImpl> impl) : impl_(std::move(impl)) {}

  /// @name Identity
  ///@{

  /// Whether the handle refers to a tensor; impl(), impl_ptr() give it,
  /// is_same() compares handles, use_count() counts them.
  bool defined() const { return bool(impl_); }
  TensorImpl* impl() const { return impl_.get(); }
  const IntrusivePtr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }
  size_t use_count() const { return impl_.use_count(); }
  ///@}

  /// @name Shape and metadata
  /// Each throws a tg::Error naming itself on an undefined tensor.
  ///@{

  /// Sizes and strides (in elements; size(d)/stride(d) take negative d), rank,
  /// element count, offset into the storage, dtype, device, layout, the
  /// options to make a like tensor, and the layout tests.
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
  TensorOptions options() const { return TensorOptions().dtype(dtype()).device(device()); }
  bool is_contiguous() const { return checked("is_contiguous").is_contiguous(); }
  bool is_sparse() const { return checked("is_sparse").layout() == Layout::SparseCoo; }
  bool is_cuda() const { return device().is_cuda(); }
  bool is_floating_point() const { return tg::is_floating_point(dtype()); }
  ///@}

  /// @name Sparse COO
  ///@{

  /// Sparse COO tensors only: the number of sparse and dense dims, of stored
  /// entries, and whether the indices are sorted and unique. indices() and
  /// values() need a coalesced tensor (as LibTorch); _indices() and
  /// _values() return the parts as stored; values() and _values() are
  /// differentiable.
  int64_t sparse_dim() const;
  int64_t dense_dim() const;
  int64_t nnz() const;
  bool is_coalesced() const;
  ///@}

  /// @name Versions
  ///@{

  /// The version counter shared by the tensor's views: every in-place op
  /// bumps it, and saved tensors check it in backward.
  uint32_t version() const { return checked("version").version_counter()->current(); }
  void bump_version() const { checked("bump_version").version_counter()->bump(); }
  ///@}

  /// @name Data access
  ///@{

  /// The first element's address; data_ptr<T>() checks that T matches the
  /// dtype; item<T>() reads a one-element tensor (from any device);
  /// to_vector<T>() copies all elements in row-major order.
  void* data_ptr() const { return checked("data_ptr").data(); }
  template <class T> T* data_ptr() const;
  template <class T> T item() const;
  template <class T> std::vector<T> to_vector() const;
  ///@}

  /// Whether the memory is page-locked host memory (pin_memory(): CPU
  /// tensors; needs the CUDA backend and a GPU). Copies from it to a GPU with
  /// non_blocking=true return at once; to(cpu, non_blocking=true) from a GPU
  /// returns a pinned tensor valid once the stream (or cuda::synchronize)
  /// completes.
  bool is_pinned() const;
  /// select(0, index), as LibTorch's x[i].
  Tensor operator[](int64_t index) const { return select(0, index); }
  ///@{

  /// LibTorch's indexing (tensor/indexing.h): x.index({Slice(), 0}),
  /// x.index({"...", None, mask}); index_put_ assigns through the same
  /// indices (a number or a tensor broadcast to what they select).
  Tensor index(std::initializer_list<TensorIndex> indices) const;
  Tensor index(const std::vector<TensorIndex>& indices) const;
  const Tensor& index_put_(std::initializer_list<TensorIndex> indices, const Tensor& value) const;
  const Tensor& index_put_(std::initializer_list<TensorIndex> indices, Scalar value) const;
  const Tensor& index_put_(const std::vector<TensorIndex>& indices, const Tensor& value) const;
  const Tensor& index_put_(const std::vector<TensorIndex>& indices, Scalar value) const;
  ///@}
  /// A CPU tensor's elements as x.accessor<float, 2>()[i][j] (LibTorch's
  /// TensorAccessor, tensor/indexing.h): T must be the dtype's, N the rank.
  template <class T, size_t N> TensorAccessor<T, N> accessor() const;

  /// @name LibTorch's conveniences
  ///@{

  /// to(Device(kCPU)); to(Device(kCUDA, index)).
  Tensor cpu() const;
  Tensor cuda(int index = 0) const;
  /// In place, as LibTorch's: each writes op(x) into x's memory (views of x
  /// see it), bumps the version and returns x. Under autograd x's old value
  /// is differentiated through, as PyTorch's in-place ops are; a leaf that
  /// requires grad is refused while grad mode is on.
  const Tensor& abs_() const;
  const Tensor& neg_() const;                 ///< in place, as abs_()
  const Tensor& exp_() const;                 ///< in place, as abs_()
  const Tensor& log_() const;                 ///< in place, as abs_()
  const Tensor& sqrt_() const;                ///< in place, as abs_()
  const Tensor& rsqrt_() const;               ///< in place, as abs_()
  const Tensor& square_() const;              ///< in place, as abs_()
  const Tensor& reciprocal_() const;          ///< in place, as abs_()
  const Tensor& sign_() const;                ///< in place, as abs_()
  const Tensor& sin_() const;                 ///< in place, as abs_()
  const Tensor& cos_() const;                 ///< in place, as abs_()
  const Tensor& tanh_() const;                ///< in place, as abs_()
  const Tensor& sigmoid_() const;             ///< in place, as abs_()
  const Tensor& relu_() const;                ///< in place, as abs_()
  const Tensor& floor_() const;               ///< in place, as abs_()
  const Tensor& ceil_() const;                ///< in place, as abs_()
  const Tensor& round_() const;               ///< in place, as abs_()
  const Tensor& trunc_() const;               ///< in place, as abs_()
  const Tensor& pow_(Scalar exponent) const;  ///< in place, as abs_()
  /// clamp in place (either bound may be absent).
  const Tensor& clamp_(std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt) const;
  const Tensor& clamp_min_(Scalar min) const;  ///< in place, as abs_()
  const Tensor& clamp_max_(Scalar max) const;  ///< in place, as abs_()
  /// masked_fill in place.
  const Tensor& masked_fill_(const Tensor& mask, Scalar value) const;
  /// Refills a floating tensor from the global generator: U[from, to) or
  /// N(mean, std^2) (not recorded, as PyTorch's initializers).
  const Tensor& uniform_(double from = 0, double to = 1) const;
  const Tensor& normal_(double mean = 0, double std = 1) const;  ///< as uniform_
  ///@}
  /// The values and metadata as text (what operator<< prints).
  std::string to_string() const;

  // The ops of <tapegrad/tensor/ops.def> as methods: views, conversions,
  // in-place ops (they bump the version counter and, as in LibTorch, work on
  // a const handle), the math ops LibTorch has as methods, and the autograd
  // accessors (docs/AUTOGRAD.md). Each is documented with its free function
  // or in ops.def.
#define TG_D(...) = __VA_ARGS__
#define TG_OP0(ret, name, id, form) TG_IF_METHOD_##form(ret name() const;)
#define TG_OP(ret, name, id, extras, args, form) TG_IF_METHOD_##form(ret name extras const;)
#define TG_FN(...)
#include <tapegrad/tensor/ops.def>
#undef TG_FN
#undef TG_OP
#undef TG_OP0
#undef TG_D

  ///@{

  /// One dim as an integer, as LibTorch's x.sum(1), x.mean(1, true),
  /// x.norm(2, 1), x.var(0), x.flip(0), x.roll(1, 0): the list forms with
  /// that one dim. (Templates on the integer type, so that a braced list,
  /// {} included, still means a list.)
  template <class I, detail::IfDim<I> = 0> Tensor sum(I dim, bool keepdim = false) const {
    return sum(IntList{int64_t(dim)}, keepdim);
  }
  template <class I, detail::IfDim<I> = 0> Tensor mean(I dim, bool keepdim = false) const {
    return mean(IntList{int64_t(dim)}, keepdim);
  }
  template <class I, detail::IfDim<I> = 0> Tensor amax(I dim, bool keepdim = false) const {
    return amax(IntList{int64_t(dim)}, keepdim);
  }
  template <class I, detail::IfDim<I> = 0> Tensor amin(I dim, bool keepdim = false) const {
    return amin(IntList{int64_t(dim)}, keepdim);
  }
  template <class I, detail::IfDim<I> = 0> Tensor logsumexp(I dim, bool keepdim = false) const {
    return logsumexp(IntList{int64_t(dim)}, keepdim);
  }
  template <class I, detail::IfDim<I> = 0> Tensor norm(double p, I dim, bool keepdim = false) const {
    return norm(p, IntList{int64_t(dim)}, keepdim);
  }
  template <class I, detail::IfDim<I> = 0> Tensor var(I dim, double correction = 1, bool keepdim = false) const {
    return var(IntList{int64_t(dim)}, correction, keepdim);
  }
  template <class I, detail::IfDim<I> = 0> Tensor std(I dim, double correction = 1, bool keepdim = false) const {
    return std(IntList{int64_t(dim)}, correction, keepdim);
  }
  template <class I, detail::IfDim<I> = 0> Tensor flip(I dim) const { return flip(IntList{int64_t(dim)}); }
  template <class I, class J, detail::IfDim<I> = 0, detail::IfDim<J> = 0> Tensor roll(I shift, J dim) const {
    return roll(IntList{int64_t(shift)}, IntList{int64_t(dim)});
  }
  ///@}

 private:
  /// The impl, or a tg::Error naming `op` when the tensor is undefined.
  const TensorImpl& checked(const char* op) const {
    if (!impl_) detail::throw_undefined(op);
    return *impl_;
  }
  IntrusivePtr<TensorImpl> impl_;
};

/// Prints t.to_string().
std::ostream& operator<<(std::ostream& os, const Tensor& t);
/// "[2, 3]" for sizes {2, 3}.
std::string shape_str(const IntList& shape);

}  // namespace tg
