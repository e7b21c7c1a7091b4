// A program that links tapegrad::tensor alone: tensor ops run (the raw ones),
// autograd entry points say which library to link instead.
#include <tapegrad/tensor/error.h>
#include <tapegrad/tensor/ops.h>

#include <iostream>
#include <string>

int main() {
  tg::Tensor a = tg::ones({2, 3}, tg::kFloat64);
  tg::Tensor s = (a.matmul(a.t()) * 2).sum();
  if (s.item<double>() != 24.0 || a.requires_grad() || a.grad().defined()) return 1;
  try {
    a.requires_grad_();
    return 2;
  } catch (const tg::Error& e) {
    if (std::string(e.what()).find("tapegrad::tapegrad") == std::string::npos) return 3;
  }
  std::cout << "tensor-only consumer: sum = " << s.item<double>() << "\n";
  return 0;
}
