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

/// Whether D derives from some Eigen::EigenBase (a VectorBlock derives
/// from its Block's).
template <class X> std::true_type eigen_base_test(const Eigen::EigenBase<X>*);
/// Not an Eigen object.
std::false_type eigen_base_test(...);
/// Whether D is an Eigen object.
template <class D> constexpr bool is_eigen = decltype(eigen_base_test(static_cast<D*>(nullptr)))::value;

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
    Tensor t = empty(sizes, TensorOptions().dtype(dt));
    if (release) release(context);
    return t;
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
/// block, segment, Map, Ref or transpose) must stay alive, and must not be
/// resized, while any tensor or view of its memory is used; tapegrad cannot
/// see it go. An rvalue matrix or array (`tg::from_eigen(std::move(m))`, or
/// a temporary) is moved into the tensor, which then owns it: no copy for
/// dynamic sizes, the coefficients moved once for fixed ones (a const
/// temporary, as `.eval()` returns, is copied once). A view of a temporary
/// (`from_eigen(make().col(1))`) is not moved in and dangles as soon as the
/// statement ends: evaluate it into a matrix and move that in. Refused at
/// compile time: a const matrix or array and read-only views (`Map<const
/// M>`, a block of a const matrix: a writable tensor would write them; a
/// const view of writable storage, such as `const Ref<MatrixXd>&`, is
/// accepted), expressions without stored coefficients (`a + b`,
/// `m.reverse()`: `.eval()` them and move that in), other scalars than
/// float, double, int64_t, bool, std::complex<float/double>,
/// Eigen::bfloat16 and Eigen::half. Negative strides or a null Map are
/// refused at run time with a tg::Error naming from_eigen; nothing leaks.
/// Two tensors made from the same Eigen memory have their own version
/// counters (as two from_blob tensors): an in-place op on one is not seen
/// by autograd through the other.
template <class E> Tensor from_eigen(E&& e) {
  using D = std::remove_cv_t<std::remove_reference_t<E>>;
  static_assert(eigen_detail::is_eigen<D>, "tg::from_eigen: not an Eigen object");
  static_assert(eigen_detail::has_dtype<typename D::Scalar>::value,
                "tg::from_eigen: tapegrad has no dtype for this scalar (float, double, int64_t, bool, "
                "std::complex<float/double>, Eigen::bfloat16, Eigen::half)");
  static_assert((D::Flags & Eigen::DirectAccessBit) != 0,
                "tg::from_eigen: this expression has no stored coefficients to view: evaluate it into a matrix "
                "first (.eval()) and move that in");
  static_assert((D::Flags & Eigen::LvalueBit) != 0,
                "tg::from_eigen: a read-only Eigen view (Map<const ...>, a block of a const matrix) cannot back "
                "a writable tensor: copy it into a matrix and move that in");
  constexpr bool plain = std::is_base_of_v<Eigen::PlainObjectBase<D>, D>;
  constexpr bool rvalue = !std::is_lvalue_reference_v<E>;
  // A view (Block, Map, Ref) is writable whatever its own constness: its
  // storage is (LvalueBit); a const matrix or array is not.
  static_assert(!std::is_const_v<std::remove_reference_t<E>> || !plain || rvalue,
                "tg::from_eigen: a const Eigen matrix or array cannot back a writable tensor: pass a non-const "
                "one, or move a copy in (tg::from_eigen(Eigen::MatrixXd(m)))");
  // Ownership: an rvalue matrix or array is moved into a holder
  // the tensor owns; anything else is viewed. A refused layout (negative
  // strides, a null Map) is reported as from_eigen's.
  D* owner = nullptr;
  try {
    if constexpr (plain && rvalue) {
      // A const one, as .eval() returns, is copied.
      owner = new D(std::forward<E>(e));
      D* held = owner;
      Tensor t = eigen_detail::view(
          *held, [](void* p) { delete static_cast<D*>(p); }, held);
      owner = nullptr;  // the tensor owns it now
      return t;
    } else {
      return eigen_detail::view(const_cast<D&>(static_cast<const D&>(e)), nullptr, nullptr);
    }
  } catch (const Error& err) {
    delete owner;
    TG_ERROR("from_eigen: ", err.what(), ": copy the coefficients into a matrix and move that in");
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
/// MatrixBase<Derived> or `const Ref<const M>&` (which copies: the map is
/// row-major with run-time strides, so a writable Ref<MatrixXd> does not
/// bind). Assigning one map to another copies coefficients, as assigning
/// Eigen Maps does; each map keeps its own memory, and `swap(a, b)` (found
/// by argument-dependent lookup) swaps coefficients.
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
  /// Copies o's coefficients into this map's memory (the memory stays this
  /// map's: rebinding it would leave the map pointing at memory nothing
  /// holds).
  EigenMap& operator=(const EigenMap& o) {
    Base::operator=(o);
    return *this;
  }
  /// The same as copying: coefficients, not memory, move.
  EigenMap& operator=(EigenMap&& o) {
    Base::operator=(o);
    return *this;
  }
  /// A map of the same memory, holding the same tensor.
  EigenMap(const EigenMap&) = default;
  /// As copying.
  EigenMap(EigenMap&&) = default;
  /// Swaps the coefficients of two maps of the same shape (Eigen's swap).
  friend void swap(EigenMap& a, EigenMap& b) { a.Base::swap(b); }
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
/// A 1-D tensor is an n x 1 column: index it m(i, 0).
///
/// A writable map (T not const) writes the tensor behind autograd's back:
/// it is refused for a tensor that requires grad (read it through
/// eigen_map<const T>) and for expanded views (stride 0 over more than one
/// element: every write would hit the shared element; contiguous() first).
/// Making it bumps the tensor's version counter (shared with its views and
/// detach()), as an in-place op would: a tensor saved for backward before
/// the map was made is then reported stale in backward rather than read
/// changed. Writes through a map made before the tensor was saved are not
/// seen: make writable maps after the forward pass, or map const T.
/// Refused with a tg::Error naming them: an undefined or sparse tensor, a
/// device other than the CPU (map t.to(Device(kCPU)), a copy), another
/// dtype, more than 2 dims.
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
           "; an Eigen map reads host memory: map t.to(tg::Device(tg::kCPU)) (a copy)");
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
