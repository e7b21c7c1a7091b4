#include <tapegrad/tapegrad.h>

#include <iostream>

int main() {
  tg::Tensor a = tg::ones({2, 3}, tg::kFloat64);
  tg::Tensor s = tg::matmul(a, a.t()).sum();
  std::cout << "consumer: sum = " << s.item<double>() << "\n";
  return s.item<double>() == 12.0 ? 0 : 1;
}
