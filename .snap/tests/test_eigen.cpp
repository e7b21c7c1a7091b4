// Eigen without copies (include/tapegrad/tensor/eigen.h): from_eigen views
// every layout with its strides, moves rvalues in, and eigen_map maps
// tensors back with theirs, keeping their memory alive.
#include <gtest/gtest.h>

#include <complex>

#include <tapegrad/tapegrad.h>

#include "reference.h"  // tgtest::error_message
#include <tapegrad/tensor/eigen.h>

namespace {

using tg::Tensor;

// t[i][j] == m(i, j) for every element (2-D), read through the tensor's
// own strides (as a copy to contiguous double).
template <class M> void expect_same_2d(const Tensor& t, const M& m) {
  ASSERT_EQ(t.dim(), 2);
  ASSERT_EQ(t.size(0), m.rows());
  ASSERT_EQ(t.size(1), m.cols());
  Tensor c = t.to(tg::kFloat64).contiguous();
  const double* p = c.data_ptr<double>();
  for (Eigen::Index i = 0; i < m.rows(); ++i)
    for (Eigen::Index j = 0; j < m.cols(); ++j)
      EXPECT_EQ(p[i * m.cols() + j], double(m(i, j))) << i << "," << j;
}

Eigen::MatrixXd counting(Eigen::Index r, Eigen::Index c) {
  Eigen::MatrixXd m(r, c);
  for (Eigen::Index i = 0; i < r; ++i)
    for (Eigen::Index j = 0; j < c; ++j)
      m(i, j) = double(10 * i + j);
  return m;
}

TEST(Eigen, ColumnAndRowMajorMatricesAreViewedWithTheirStrides) {
  Eigen::MatrixXd m = counting(3, 4);  // column-major
  Tensor t = tg::from_eigen(m);
  EXPECT_EQ(t.sizes(), tg::IntList({3, 4}));
  EXPECT_EQ(t.strides(), tg::IntList({1, 3}));
  EXPECT_EQ(t.data_ptr(), static_cast<void*>(m.data()));
  EXPECT_EQ(t.dtype(), tg::kFloat64);
  EXPECT_FALSE(t.requires_grad());
  expect_same_2d(t, m);
  // Writes go both ways.
  t.select(0, 2).select(0, 1).fill_(-5.0);
  EXPECT_EQ(m(2, 1), -5.0);
  m(0, 3) = 42;
  EXPECT_EQ(t.select(0, 0).select(0, 3).item<double>(), 42.0);

  Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> r = counting(2, 5).cast<float>();
  Tensor tr = tg::from_eigen(r);
  EXPECT_EQ(tr.strides(), tg::IntList({5, 1}));
  EXPECT_EQ(tr.dtype(), tg::kFloat32);
  expect_same_2d(tr, r);

  Eigen::Matrix3d fixed = counting(3, 3);
  Tensor tf = tg::from_eigen(fixed);
  EXPECT_EQ(tf.data_ptr(), static_cast<void*>(fixed.data()));
  expect_same_2d(tf, fixed);
}

TEST(Eigen, VectorsAreOneDimensional) {
  Eigen::VectorXd v = Eigen::VectorXd::LinSpaced(5, 0, 4);
  Tensor tv = tg::from_eigen(v);
  EXPECT_EQ(tv.sizes(), tg::IntList({5}));
  EXPECT_EQ(tv.strides(), tg::IntList({1}));
  EXPECT_DOUBLE_EQ(tg::sum(tv).item<double>(), 10.0);
  Eigen::RowVectorXf rv = Eigen::RowVectorXf::Constant(3, 2.0f);
  EXPECT_EQ(tg::from_eigen(rv).sizes(), tg::IntList({3}));
  // A matrix of one column at run time stays 2-D.
  Eigen::MatrixXd col = counting(4, 1);
  EXPECT_EQ(tg::from_eigen(col).dim(), 2);
  // Arrays too.
  Eigen::ArrayXXd a = counting(2, 3).array();
  expect_same_2d(tg::from_eigen(a), a);
}

TEST(Eigen, BlocksRowsColumnsTransposesAndMapsKeepTheirStrides) {
  Eigen::MatrixXd m = counting(5, 6);
  Tensor b = tg::from_eigen(m.block(1, 2, 3, 2));
  EXPECT_EQ(b.sizes(), tg::IntList({3, 2}));
  EXPECT_EQ(b.strides(), tg::IntList({1, 5}));
  EXPECT_EQ(b.data_ptr(), static_cast<void*>(&m(1, 2)));
  expect_same_2d(b, m.block(1, 2, 3, 2));
  // A row of a column-major matrix: 1-D with the outer stride.
  Tensor row = tg::from_eigen(m.row(3));
  EXPECT_EQ(row.strides(), tg::IntList({5}));
  EXPECT_DOUBLE_EQ(row.select(0, 4).item<double>(), 34.0);
  Tensor colv = tg::from_eigen(m.col(2));
  EXPECT_EQ(colv.strides(), tg::IntList({1}));
  EXPECT_DOUBLE_EQ(colv.select(0, 4).item<double>(), 42.0);
  // A transpose swaps the strides.
  Tensor tt = tg::from_eigen(m.transpose());
  EXPECT_EQ(tt.sizes(), tg::IntList({6, 5}));
  EXPECT_EQ(tt.strides(), tg::IntList({5, 1}));
  expect_same_2d(tt, m.transpose());
  // A row-major block's strides.
  Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> r = m;
  Tensor rb = tg::from_eigen(r.block(2, 1, 2, 4));
  EXPECT_EQ(rb.strides(), tg::IntList({6, 1}));
  expect_same_2d(rb, r.block(2, 1, 2, 4));
  // A Map with outer and inner strides over a buffer.
  std::vector<double> buf(40);
  for (size_t i = 0; i < buf.size(); ++i)
    buf[i] = double(i);
  Eigen::Map<Eigen::MatrixXd, 0, Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>> mp(
      buf.data(), 3, 4, Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>(9, 2));
  Tensor tm = tg::from_eigen(mp);
  EXPECT_EQ(tm.strides(), tg::IntList({2, 9}));
  expect_same_2d(tm, mp);
  // A Ref parameter, as library functions take them.
  auto through_ref = [](Eigen::Ref<Eigen::MatrixXd> ref) { return tg::from_eigen(ref); };
  Tensor tref = through_ref(m.block(0, 0, 2, 2));
  EXPECT_EQ(tref.data_ptr(), static_cast<void*>(m.data()));
  expect_same_2d(tref, m.block(0, 0, 2, 2));
}

TEST(Eigen, RvaluesAreMovedInAndOwnedByTheTensor) {
  Tensor t;
  const double* data = nullptr;
  {
    Eigen::MatrixXd m = counting(300, 200);
    data = m.data();
    t = tg::from_eigen(std::move(m));
  }                                                         // m's scope ends: the tensor owns the coefficients
  EXPECT_EQ(t.data_ptr(), static_cast<const void*>(data));  // moved, not copied
  Tensor v = t.select(1, 7);                                // a view keeps them alive too
  t = Tensor();
  EXPECT_DOUBLE_EQ(v.select(0, 299).item<double>(), 2997.0);
  // A temporary fixed-size matrix: its coefficients moved into the holder.
  Tensor f = tg::from_eigen(Eigen::Matrix2f::Identity().eval());
  EXPECT_FLOAT_EQ(tg::sum(f).item<float>(), 2.0f);
}

TEST(Eigen, OtherScalarsAndEmptyObjects) {
  Eigen::Matrix<int64_t, Eigen::Dynamic, 1> iv(3);
  iv << 4, -1, 9;
  Tensor ti = tg::from_eigen(iv);
  EXPECT_EQ(ti.dtype(), tg::kInt64);
  EXPECT_EQ(tg::sum(ti).item<int64_t>(), 12);
  Eigen::VectorXcd z(2);
  z << std::complex<double>(1, 2), std::complex<double>(-3, 0.5);
  Tensor tz = tg::from_eigen(z);
  EXPECT_EQ(tz.dtype(), tg::kComplex128);
  EXPECT_DOUBLE_EQ(tg::imag(tz).select(0, 0).item<double>(), 2.0);
  Eigen::Matrix<Eigen::bfloat16, 2, 1> h;
  h << Eigen::bfloat16(1.5f), Eigen::bfloat16(-2.0f);
  Tensor th = tg::from_eigen(h);
  EXPECT_EQ(th.dtype(), tg::kBFloat16);
  EXPECT_FLOAT_EQ(th.to(tg::kFloat32).select(0, 0).item<float>(), 1.5f);
  Eigen::MatrixXd e(0, 3);
  Tensor te = tg::from_eigen(e);
  EXPECT_EQ(te.sizes(), tg::IntList({0, 3}));
  EXPECT_EQ(tg::from_eigen(Eigen::MatrixXd()).numel(), 0);
}

TEST(Eigen, ViewsTakePartInAutograd) {
  Eigen::MatrixXd w = counting(2, 3) / 10.0;
  Tensor x = tg::from_eigen(w).requires_grad_();
  Tensor y = tg::sum(x * x);
  Tensor g = tg::autograd::grad({y}, {x})[0];
  // Read the gradient back as an Eigen matrix: 2 w.
  tg::EigenMap<const double> gm = tg::eigen_map<const double>(g);
  EXPECT_TRUE(gm.isApprox(2 * w));
}

TEST(Eigen, MapsOfTensorsKeepTheirStridesAndMemory) {
  Tensor t = tg::arange(12, tg::TensorOptions().dtype(tg::kFloat64)).reshape({3, 4});
  tg::EigenMap<double> m = tg::eigen_map<double>(t);
  EXPECT_EQ(m.rows(), 3);
  EXPECT_EQ(m.cols(), 4);
  EXPECT_EQ(m(2, 1), 9.0);
  EXPECT_EQ(static_cast<void*>(m.data()), t.data_ptr());
  const uint32_t before = t.version();
  tg::EigenMap<double> m2 = tg::eigen_map<double>(t);
  EXPECT_GT(t.version(), before);  // a writable map counts as a write
  m2(0, 0) = -1;
  EXPECT_EQ(t.select(0, 0).select(0, 0).item<double>(), -1.0);
  // A transposed and a sliced view: their strides, no copy.
  tg::EigenMap<const double> mt = tg::eigen_map<const double>(t.t());
  EXPECT_EQ(mt.rows(), 4);
  EXPECT_EQ(mt(3, 2), 11.0);
  EXPECT_EQ(mt.outerStride(), 1);
  tg::EigenMap<const double> ms = tg::eigen_map<const double>(t.narrow(1, 1, 2));
  EXPECT_EQ(ms(2, 1), 10.0);
  tg::EigenMap<const double> mc = tg::eigen_map<const double>(t.select(1, 3));  // 1-D: a column
  EXPECT_EQ(mc.cols(), 1);
  EXPECT_EQ(mc(1, 0), 7.0);
  EXPECT_EQ(tg::eigen_map<const double>(tg::tensor({2.5}).to(tg::kFloat64).reshape({})).value(), 2.5);  // 0-D: 1 x 1
  // An expanded view reads as a const map.
  tg::EigenMap<const double> me = tg::eigen_map<const double>(tg::tensor({1.0, 2.0}).to(tg::kFloat64).expand({3, 2}));
  EXPECT_EQ(me(2, 1), 2.0);
  // Eigen algorithms on the map.
  Eigen::MatrixXd prod = m * m.transpose();
  EXPECT_DOUBLE_EQ(prod(1, 1), 4.0 * 4 + 5 * 5 + 6 * 6 + 7 * 7);
  // Round trip: Eigen -> tensor -> Eigen, one memory.
  Eigen::MatrixXf f = Eigen::MatrixXf::Random(3, 2);
  EXPECT_EQ(tg::eigen_map<float>(tg::from_eigen(f)).data(), f.data());
}

TEST(Eigen, AssigningMapsCopiesCoefficientsAndKeepsEachMapsMemory) {
  const auto D = tg::TensorOptions().dtype(tg::kFloat64);
  tg::EigenMap<double> m1 = tg::eigen_map<double>(tg::zeros({2, 2}, D));
  tg::EigenMap<double> m2 = tg::eigen_map<double>(tg::full({2, 2}, 3.0, D));
  m1 = m2;
  EXPECT_EQ(static_cast<void*>(m1.data()), m1.tensor().data_ptr());  // still its own memory
  EXPECT_DOUBLE_EQ(tg::sum(m1.tensor()).item<double>(), 12.0);
  Tensor fresh = tg::zeros({2, 2}, D);
  m1.setConstant(42);
  EXPECT_DOUBLE_EQ(tg::sum(fresh).item<double>(), 0.0);
  EXPECT_DOUBLE_EQ(tg::sum(m2.tensor()).item<double>(), 12.0);
  m1 = std::move(m2);
  EXPECT_EQ(static_cast<void*>(m1.data()), m1.tensor().data_ptr());
  // swap exchanges coefficients.
  tg::EigenMap<double> a = tg::eigen_map<double>(tg::zeros({1, 2}, D)), b = tg::eigen_map<double>(tg::ones({1, 2}, D));
  swap(a, b);
  EXPECT_DOUBLE_EQ(tg::sum(a.tensor()).item<double>(), 2.0);
  EXPECT_DOUBLE_EQ(tg::sum(b.tensor()).item<double>(), 0.0);
}

TEST(Eigen, SegmentsAndConstViewsOfWritableStorage) {
  Eigen::VectorXd v = Eigen::VectorXd::LinSpaced(8, 0, 7);
  Tensor s = tg::from_eigen(v.segment(2, 4));
  EXPECT_EQ(s.sizes(), tg::IntList({4}));
  EXPECT_DOUBLE_EQ(s.select(0, 0).item<double>(), 2.0);
  EXPECT_DOUBLE_EQ(tg::from_eigen(v.head(3)).select(0, 2).item<double>(), 2.0);
  EXPECT_DOUBLE_EQ(tg::from_eigen(v.tail(2)).select(0, 0).item<double>(), 6.0);
  Eigen::MatrixXd m = counting(3, 3);
  auto through_const_ref = [](const Eigen::Ref<Eigen::MatrixXd>& r) { return tg::from_eigen(r); };
  Tensor t = through_const_ref(m);
  EXPECT_EQ(t.data_ptr(), static_cast<void*>(m.data()));
  EXPECT_DOUBLE_EQ(tg::from_eigen(m.row(2).head(2)).select(0, 1).item<double>(), 21.0);
}

TEST(Eigen, AWritableMapMadeAfterTheForwardPassMakesSavedTensorsStale) {
  const auto D = tg::TensorOptions().dtype(tg::kFloat64);
  Tensor x = tg::ones({3}, D).requires_grad_();
  Tensor w = tg::full({3}, 2.0, D);
  Tensor y = tg::sum(x * w);  // saves w
  tg::EigenMap<double> m = tg::eigen_map<double>(w);
  m(0, 0) = 5;
  EXPECT_THROW(tg::autograd::grad({y}, {x}), tg::Error);
  // A read-only map changes nothing.
  Tensor y2 = tg::sum(x * w);
  tg::EigenMap<const double> r = tg::eigen_map<const double>(w);
  EXPECT_DOUBLE_EQ(r(0, 0), 5.0);
  EXPECT_DOUBLE_EQ(tg::autograd::grad({y2}, {x})[0].select(0, 0).item<double>(), 5.0);
}

TEST(Eigen, AMapKeepsATemporaryTensorsMemoryAlive) {
  tg::EigenMap<const double> m =
      tg::eigen_map<const double>(tg::arange(6, tg::TensorOptions().dtype(tg::kFloat64)).reshape({2, 3}) * 2.0);
  // The temporary tensor is gone; the map holds its memory (ASan in CI
  // would see a read of freed memory otherwise).
  EXPECT_EQ(m(1, 2), 10.0);
  EXPECT_EQ(m.tensor().numel(), 6);
  tg::EigenMap<const double> copy = m;  // copies share the memory
  EXPECT_EQ(copy(0, 1), 2.0);
}

TEST(Eigen, BadMapsAreRefusedWithTheirReasons) {
  auto message = [](auto&& fn) { return tgtest::error_message(fn); };
  Tensor f32 = tg::ones({2, 2});
  EXPECT_NE(message([&] { tg::eigen_map<double>(f32); }).find("Float32"), std::string::npos);
  EXPECT_NE(message([&] { tg::eigen_map<float>(tg::ones({2, 2, 2})); }).find("at most 2 dims"), std::string::npos);
  Tensor p = tg::ones({2}).requires_grad_();
  EXPECT_NE(message([&] { tg::eigen_map<float>(p); }).find("requires grad"), std::string::npos);
  EXPECT_EQ(message([&] { tg::eigen_map<const float>(p); }), "no error");
  EXPECT_NE(message([&] { tg::eigen_map<float>(tg::ones({1}).expand({4})); }).find("expanded"), std::string::npos);
  EXPECT_NE(message([&] { tg::eigen_map<float>(Tensor()); }).find("undefined"), std::string::npos);
  if (tg::cuda::is_available()) {
    EXPECT_NE(message([&] { tg::eigen_map<float>(f32.to(tg::Device(tg::kCUDA, 0))); }).find("host memory"),
              std::string::npos);
  }
  // Negative strides from a Map are refused by from_blob, naming them.
  std::vector<double> buf(8, 1.0);
  Eigen::Map<Eigen::VectorXd, 0, Eigen::InnerStride<Eigen::Dynamic>> rev(buf.data() + 7, 4,
                                                                         Eigen::InnerStride<Eigen::Dynamic>(-2));
  const std::string neg = message([&] { tg::from_eigen(rev); });
  EXPECT_NE(neg.find("from_eigen"), std::string::npos) << neg;
  EXPECT_NE(neg.find("negative"), std::string::npos) << neg;
  // The library is usable afterwards.
  EXPECT_DOUBLE_EQ(tg::sum(tg::from_eigen(Eigen::VectorXd::Ones(3).eval())).item<double>(), 3.0);
}

}  // namespace
