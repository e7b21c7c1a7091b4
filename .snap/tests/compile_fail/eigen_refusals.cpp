// None of these compiles: tests/compile_fail/check.cmake compiles the file
// once and looks for each static_assert's message (every failed
// instantiation is reported).
#include <tapegrad/tensor/eigen.h>

void const_object() {  // a const matrix cannot back a writable tensor
  const Eigen::MatrixXd m = Eigen::MatrixXd::Zero(2, 2);
  tg::from_eigen(m);
}
void expression() {  // an expression has no stored coefficients
  Eigen::MatrixXd a = Eigen::MatrixXd::Zero(2, 2);
  tg::from_eigen(a + a);
}
void read_only_view() {  // Map<const M>
  double buf[4] = {};
  Eigen::Map<const Eigen::Matrix2d> view(buf);
  tg::from_eigen(view);
}
void other_scalar() {  // a scalar tapegrad has no dtype for
  Eigen::Matrix<short, 2, 2> s;
  tg::from_eigen(s);
}
