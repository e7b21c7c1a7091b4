// LibTorch's tensor indexing and accessors (docs/TENSOR.md "Indexing as
// LibTorch"): x.index({Slice(), 0}), x.index_put_({mask}, 0.0),
// x.accessor<float, 2>(). In the umbrella header.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include <tapegrad/tensor/tensor.h>

namespace tg {
namespace indexing {

/// A new dim of size 1 at that place (LibTorch's None).
constexpr std::nullopt_t None = std::nullopt;
/// Every dim the other indices leave (LibTorch's Ellipsis, or "...").
struct EllipsisIndexType {};
constexpr EllipsisIndexType Ellipsis{};

/// start:stop:step along one dim, each optional (negative start and stop
/// count from the end; step > 0), as LibTorch's Slice.
struct Slice {
  /// The bounds and the step, each optional.
  Slice(std::optional<int64_t> start_ = std::nullopt, std::optional<int64_t> stop_ = std::nullopt,
        std::optional<int64_t> step_ = std::nullopt)
      : start(start_), stop(stop_), step(step_) {}
  std::optional<int64_t> start;  ///< the first index (0 when absent)
  std::optional<int64_t> stop;   ///< one past the last (the size when absent)
  std::optional<int64_t> step;   ///< the step (1 when absent)
};

}  // namespace indexing

/// One entry of x.index({...}): None, Ellipsis (or "..."), an integer (the
/// dim goes away), a Slice, or a tensor (Int64 indices along one dim, or a
/// Bool mask over as many dims as it has).
class TensorIndex {
 public:
  /// Which entry it is.
  enum class Kind { None, Ellipsis, Integer, Slice, Tensor };
  ///@{

  /// An entry from what stands for it in a braced list (implicit, as
  /// LibTorch's; a string must be "...").
  TensorIndex(std::nullopt_t) : kind_(Kind::None) {}                     // NOLINT
  TensorIndex(indexing::EllipsisIndexType) : kind_(Kind::Ellipsis) {}    // NOLINT
  TensorIndex(const char* s);                                            // NOLINT
  TensorIndex(int64_t i) : kind_(Kind::Integer), integer_(i) {}          // NOLINT
  TensorIndex(int i) : kind_(Kind::Integer), integer_(i) {}              // NOLINT
  TensorIndex(indexing::Slice s) : kind_(Kind::Slice), slice_(s) {}      // NOLINT
  TensorIndex(Tensor t) : kind_(Kind::Tensor), tensor_(std::move(t)) {}  // NOLINT
  ///@}

  Kind kind() const { return kind_; }                      ///< which entry
  int64_t integer() const { return integer_; }             ///< Kind::Integer's value
  const indexing::Slice& slice() const { return slice_; }  ///< Kind::Slice's bounds
  const Tensor& tensor() const { return tensor_; }         ///< Kind::Tensor's tensor

 private:
  Kind kind_;
  int64_t integer_ = 0;
  indexing::Slice slice_;
  Tensor tensor_;
};

namespace detail {
[[noreturn]] void throw_accessor_index(int64_t index, int64_t size, size_t dim);
[[noreturn]] void throw_accessor_misuse(const Tensor& t, size_t rank);
}  // namespace detail

/// Element access to a CPU tensor without copies: a[i][j] (each index
/// checked against its size: an out-of-range one throws a tg::Error naming
/// the accessor), size(d), stride(d). The accessor returned by
/// Tensor::accessor keeps the tensor's memory alive; the sub-accessors a[i]
/// give are valid while it lives.
template <class T, size_t N> class TensorAccessor {
 public:
  /// N dims of `data` with the first N of `sizes` and `strides` (copied).
  TensorAccessor(T* data, const int64_t* sizes, const int64_t* strides) : data_(data) {
    for (size_t d = 0; d < N; ++d) {
      sizes_[d] = sizes[d];
      strides_[d] = strides[d];
    }
  }
  /// The sub-accessor (N > 1) or the element (N == 1) at `i` along the first dim.
  decltype(auto) operator[](int64_t i) const {
    if (i < 0 || i >= sizes_[0]) detail::throw_accessor_index(i, sizes_[0], N);
    if constexpr (N == 1) {
      return static_cast<T&>(data_[i * strides_[0]]);
    } else {
      return TensorAccessor<T, N - 1>(data_ + i * strides_[0], sizes_.data() + 1, strides_.data() + 1);
    }
  }
  int64_t size(size_t d) const { return sizes_[d]; }      ///< the size of dim d
  int64_t stride(size_t d) const { return strides_[d]; }  ///< the stride of dim d (elements)
  T* data() const { return data_; }                       ///< the first element

 private:
  friend class Tensor;
  T* data_;
  std::array<int64_t, N> sizes_{}, strides_{};
  Tensor keep_;  // the tensor whose memory this views (top-level accessor only)
};

template <class T, size_t N> TensorAccessor<T, N> Tensor::accessor() const {
  static_assert(N >= 1, "accessor: N must be at least 1 (item<T>() reads a 0-dim tensor)");
  if (!defined() || is_cuda() || is_sparse() || dim() != int64_t(N)) detail::throw_accessor_misuse(*this, N);
  TensorAccessor<T, N> a(data_ptr<T>(), sizes().data(), strides().data());  // data_ptr<T> checks T against the dtype
  a.keep_ = *this;
  return a;
}

}  // namespace tg
