// Eigen without copies (docs/INTEROP.md "Eigen"): tg::from_eigen gives a
// tensor viewing an Eigen matrix, vector, array, block, transpose or Map
// with its strides; tg::eigen_map gives an Eigen::Map of a CPU tensor with
// the tensor's strides. Not in the umbrella header: include it where Eigen
// is on the include path (it includes <Eigen/Core>).
#pragma once

#include <complex>
#include <cstdint>
#include <type_traits>
#include <utility>

#include <Eigen/Core>

#include <tapegrad/tensor/dlpack.h>
#include <tapegrad/tensor/error.h>
#include <tapegrad/tensor/ops.h>
#include <tapegrad/tensor/tensor.h>

namespace tg {

namespace eigen_detail {

/// The dtype of an Eigen scalar (an undefined specialization: no tapegrad
/// dtype).
template <class S> struct dtype_of;
/// float: Float32.
template <> struct dtype_of<float> {
  static constexpr ScalarType value = kFloat32;  ///< the dtype
};
/// double: Float64.
template <> struct dtype_of<double> {
  static constexpr ScalarType value = kFloat64;  ///< the dtype
};
/// 64-bit integers: Int64.
template <> struct dtype_of<int64_t> {
  static constexpr ScalarType value = kInt64;  ///< the dtype
};
/// bool: Bool.
template <> struct dtype_of<bool> {
  static constexpr ScalarType value = kBool;  ///< the dtype
};
/// std::complex<float> (laid out as tg::complex<float>): Complex64.
template <> struct dtype_of<std::complex<float>> {
  static constexpr ScalarType value = kComplex64;  ///< the dtype
};
/// std::complex<double>: Complex128.
template <> struct dtype_of<std::complex<double>> {
  static constexpr ScalarType value = kComplex128;  ///< the dtype
};
/// Eigen::bfloat16 (the same 16 bits as tg::BFloat16): BFloat16.
template <> struct dtype_of<Eigen::bfloat16> {
  static constexpr ScalarType value = kBFloat16;  ///< the dtype
};
/// Eigen::half (IEEE binary16, as tg::Half): Float16.
template <> struct dtype_of<Eigen::half> {
  static constexpr ScalarType value = kFloat16;  ///< the dtype
};

/// Whether S has a tapegrad dtype.
template <class S, class = void> struct has_dtype : std::false_type {};
/// Yes where dtype_of has a specialization for S.
template <class S> struct has_dtype<S, std::void_t<decltype(dtype_of<S>::value)>> : std::true_type {};

/// A tensor viewing e's coefficients (e has direct access); `release` and
/// `context` as from_blob's.
template <class E> Tensor view(E& e, void (*release)(void*), void* context) {
  using S = typename E::Scalar;
  const ScalarType dt = dtype_of<S>::value;
  IntList sizes, strides;
  if constexpr (E::IsVectorAtCompileTime) {
    sizes = {int64_t(e.size())};
    strides = {int64_t(e.innerStride())};
  } else {
    sizes = {int64_t(e.rows()), int64_t(e.cols())};
    strides = {int64_t(e.rowStride()), int64_t(e.colStride())};
  }
  if (e.size() == 0) {  // no memory to share (Eigen's data() may be null)
    if (release) release(context);
    return empty(sizes, TensorOptions().dtype(dt));
  }
  return from_blob(const_cast<void*>(static_cast<const void*>(e.data())), sizes, strides, dt, Device(kCPU), release,
                   context);
}

}  // namespace eigen_detail

/// A tensor (CPU, no grad) viewing an Eigen object's coefficients without a
/// copy, with its strides (in elements): a compile-time vector
/// (VectorXd, RowVectorXf, a column or row of a matrix) gives a 1-D tensor
/// of its size, anything else a 2-D [rows, cols] tensor (row- or
/// column-major as the object is; a block or Map keeps its outer and inner
/// strides, a transpose swaps them). Writes through either are seen by the
/// other.
///
/// The lifetime rule: an lvalue (a matrix, an array, or a view of one: a
/// block, Map, Ref or transpose) must stay alive, and must not be resized,
/// while any tensor or view of its memory is used; tapegrad cannot see it
/// go. An rvalue matrix or array (`tg::from_eigen(std::move(m))`, or a
/// temporary) is moved into the tensor, which then owns it: no copy for
/// dynamic sizes, the coefficients moved once for fixed ones (a const
/// temporary, as `.eval()` returns, is copied once). Refused at
/// compile time: a const object or a read-only view (a writable tensor
/// would write it: copy it into a matrix and move that in), and
/// expressions without direct access to stored coefficients (`a + b`,
/// `m.reverse()`: evaluate them into a matrix first, `.eval()`). Scalars:
/// float, double, int64_t, bool, std::complex<float/double>,
/// Eigen::bfloat16, Eigen::half. Negative strides (a Map given them) are
/// refused at run time, as by from_blob.
template <class E> Tensor from_eigen(E&& e) {
  using D = std::remove_cv_t<std::remove_reference_t<E>>;
  static_assert(std::is_base_of_v<Eigen::EigenBase<D>, D>, "tg::from_eigen: not an Eigen object");
  static_assert(eigen_detail::has_dtype<typename D::Scalar>::value,
                "tg::from_eigen: tapegrad has no dtype for this scalar (float, double, int64_t, bool, "
                "std::complex<float/double>, Eigen::bfloat16, Eigen::half)");
  constexpr bool plain = std::is_base_of_v<Eigen::PlainObjectBase<D>, D>;
  constexpr bool rvalue = !std::is_lvalue_reference_v<E>;
  static_assert(!std::is_const_v<std::remove_reference_t<E>> || (plain && rvalue),
                "tg::from_eigen: a const Eigen object cannot back a writable tensor: pass a non-const one, or "
                "move a copy in (tg::from_eigen(Eigen::MatrixXd(m)))");
  static_assert((D::Flags & Eigen::DirectAccessBit) != 0,
                "tg::from_eigen: this expression has no stored coefficients to view: evaluate it into a matrix "
                "first (.eval()) and move that in");
  static_assert((D::Flags & Eigen::LvalueBit) != 0,
                "tg::from_eigen: a read-only Eigen view (Map<const ...>, a block of a const matrix) cannot back "
                "a writable tensor: copy it into a matrix and move that in");
  if constexpr (plain && rvalue) {
    // An rvalue matrix or array: moved into a holder the tensor owns (a
    // const one, as .eval() returns, copied).
    auto* owner = new D(std::forward<E>(e));
    try {
      return eigen_detail::view(
          *owner, [](void* p) { delete static_cast<D*>(p); }, owner);
    } catch (...) {
      delete owner;
      throw;
    }
  } else {
    return eigen_detail::view(e, nullptr, nullptr);
  }
}

/// The Eigen type eigen_map<T> gives a Map of: a dynamic row-major matrix
/// of T (const T: a const matrix).
template <class T>
using EigenRowMatrix =
    std::conditional_t<std::is_const_v<T>,
                       const Eigen::Matrix<std::remove_const_t<T>, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>,
                       Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;

/// An Eigen::Map of a tensor's memory that also holds the tensor, so the
/// memory lives as long as the map (see eigen_map). Use it as the Map it
/// is: in expressions, assigned to, passed to functions taking
/// Eigen::Ref or MatrixBase.
template <class T>
class EigenMap : public Eigen::Map<EigenRowMatrix<T>, Eigen::Unaligned, Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>> {
 public:
  /// The Eigen::Map this is.
  using Base = Eigen::Map<EigenRowMatrix<T>, Eigen::Unaligned, Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>>;
  /// Maps `data` as rows x cols with the given row and column strides (in
  /// elements), keeping `owner` (the tensor) alive.
  EigenMap(Tensor owner, T* data, Eigen::Index rows, Eigen::Index cols, Eigen::Index row_stride,
           Eigen::Index col_stride)
      : Base(data, rows, cols, Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>(row_stride, col_stride)),
        owner_(std::move(owner)) {}
  using Base::operator=;
  /// The tensor whose memory this maps.
  const Tensor& tensor() const { return owner_; }

 private:
  Tensor owner_;
};

/// An Eigen::Map (tg::EigenMap<T>) of a CPU tensor's elements without a
/// copy, with its strides: a 2-D tensor as rows x cols, a 1-D one as a
/// column, a 0-D one as 1 x 1. The map holds the tensor, so its memory
/// outlives the map even when the tensor was a temporary. T is the
/// tensor's element type (float, double, int64_t, bool,
/// std::complex<float/double>, Eigen::bfloat16, Eigen::half), const T for a
/// read-only map.
///
/// A writable map (T not const) writes the tensor behind autograd's back:
/// it is refused for a tensor that requires grad (read it through
/// eigen_map<const T>, or map t.detach() and accept that backward sees the
/// writes) and for expanded views (stride 0 over more than one element:
/// every write would hit the shared element; contiguous() first); it bumps
/// the tensor's version counter, so a saved tensor it may overwrite is
/// reported stale in backward rather than read changed. Refused with a
/// tg::Error naming them: an undefined or sparse tensor, a device other
/// than the CPU (.cpu() first: a copy), another dtype, more than 2 dims.
template <class T> EigenMap<T> eigen_map(const Tensor& t) {
  using S = std::remove_const_t<T>;
  static_assert(eigen_detail::has_dtype<S>::value,
                "tg::eigen_map: tapegrad has no dtype for this scalar (float, double, int64_t, bool, "
                "std::complex<float/double>, Eigen::bfloat16, Eigen::half)");
  constexpr bool writable = !std::is_const_v<T>;
  const ScalarType dt = eigen_detail::dtype_of<S>::value;
  TG_CHECK(t.defined(), "eigen_map: the tensor is undefined");
  TG_CHECK(!t.is_sparse(), "eigen_map: the tensor is sparse (COO); map t.to_dense()");
  TG_CHECK(t.device().is_cpu(), "eigen_map: the tensor is on ", t.device(),
           "; an Eigen map reads host memory: map t.cpu() (a copy)");
  TG_CHECK(t.dtype() == dt, "eigen_map: the tensor is ", t.dtype(), " but the map's scalar is ", ScalarType(dt),
           ": map the matching type, or t.to(", ScalarType(dt), ") (a copy)");
  TG_CHECK(t.dim() <= 2, "eigen_map: the tensor has shape ", shape_str(t.sizes()),
           "; an Eigen matrix has at most 2 dims: view or reshape it first");
  const Eigen::Index rows = t.dim() >= 1 ? Eigen::Index(t.size(0)) : 1;
  const Eigen::Index cols = t.dim() == 2 ? Eigen::Index(t.size(1)) : 1;
  const Eigen::Index rs = t.dim() >= 1 ? Eigen::Index(t.stride(0)) : 1;
  const Eigen::Index cs = t.dim() == 2 ? Eigen::Index(t.stride(1)) : 1;
  if constexpr (writable) {
    TG_CHECK(!t.requires_grad(), "eigen_map: the tensor (shape ", shape_str(t.sizes()),
             ") requires grad and a writable map would change it behind autograd: read it through eigen_map<const "
             "T>, or map t.detach()");
    TG_CHECK((rows <= 1 || rs != 0) && (cols <= 1 || cs != 0), "eigen_map: the tensor (shape ", shape_str(t.sizes()),
             ", strides ", shape_str(t.strides()),
             ") is an expanded view whose elements share memory; a writable map would write the shared ones: map "
             "t.contiguous() or use eigen_map<const T>");
    t.bump_version();
  }
  T* data = rows * cols == 0 ? nullptr : static_cast<T*>(t.data_ptr());
  return EigenMap<T>(t, data, rows, cols, rs, cs);
}

}  // namespace tg
