// A user's program: tensors and autograd through <tapegrad/tapegrad.h>.
#include <tapegrad/tapegrad.h>

#include <iostream>

int main() {
  tg::Tensor a = tg::ones({2, 3}, tg::kFloat64).requires_grad_();
  tg::Tensor s = tg::matmul(a, a.t()).sum();
  s.backward();
  // d/da sum(a a^T) = 2 * (row sums broadcast) = 2 * 2 = 4 for a = ones(2, 3).
  double g = a.grad().sum().item<double>();
  std::cout << "consumer: sum = " << s.item<double>() << ", sum of grad = " << g << "\n";
  return s.item<double>() == 12.0 && g == 24.0 ? 0 : 1;
}
