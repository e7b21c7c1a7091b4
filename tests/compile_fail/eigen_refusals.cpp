// Each case must not compile (tests/compile_fail/check.cmake runs the
// compiler with -DCASE=n and looks for the static_assert's message).
#include <tapegrad/tensor/eigen.h>

void refused() {
#if CASE == 1  // a const object cannot back a writable tensor
  const Eigen::MatrixXd m = Eigen::MatrixXd::Zero(2, 2);
  tg::from_eigen(m);
#elif CASE == 2  // an expression has no stored coefficients
  Eigen::MatrixXd a = Eigen::MatrixXd::Zero(2, 2);
  tg::from_eigen(a + a);
#elif CASE == 3  // a read-only view
  double buf[4] = {};
  Eigen::Map<const Eigen::Matrix2d> view(buf);
  tg::from_eigen(view);
#elif CASE == 4  // a scalar tapegrad has no dtype for
  Eigen::Matrix<short, 2, 2> s;
  tg::from_eigen(s);
#endif
}
