// A tour of the tensor library (the main job until the Hessian benchmark
// exists): factories, views, broadcasting, reductions, GEMM, random numbers.
// Exits non-zero if any printed identity fails.
#include <chrono>
#include <cstdio>
#include <iostream>

#include <tapegrad/tapegrad.h>

int main() {
  using namespace tg;
  int failures = 0;
  auto expect = [&](bool ok, const char* what) {
    std::printf("  %-52s %s\n", what, ok ? "ok" : "FAILED");
    failures += !ok;
  };

  std::cout << "tapegrad tensor tour\n";
  std::cout << "CUDA built: " << (cuda::is_built() ? "yes" : "no") << ", devices: " << cuda::device_count() << "\n";
  if (cuda::is_available()) {
    auto p = cuda::get_device_properties(0);
    std::cout << "GPU 0: " << p.name << " (sm_" << p.major << p.minor << ", " << p.total_memory / (1 << 20)
              << " MiB)\n";
    cuda::self_test(0);
    std::cout << "GPU self-test passed\n";
  }

  Tensor a = arange(6, kFloat64).view({2, 3});
  std::cout << "a = " << a << "\n";
  std::cout << "a.t() = " << a.t() << "\n";
  Tensor b = tensor({10, 20, 30}, {3}, kFloat64);
  std::cout << "a + b (broadcast) = " << a + b << "\n";
  expect(equal(sum(a + b, {0}), tensor({23, 45, 67}, {3}, kFloat64)), "column sums of a + b");
  expect(equal(matmul(a, a.t()), tensor({5, 14, 14, 50}, {2, 2}, kFloat64)), "a @ a^T");

  manual_seed(0);
  Tensor x = randn({1000, 256});
  Tensor w = randn({256, 256}) / 16.0;
  auto t0 = std::chrono::steady_clock::now();
  Tensor y = tanh(matmul(x, w)).sum({1});
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("tanh(x @ w).sum(1) over [1000, 256]: %.2f ms\n", ms);
  expect(y.sizes() == IntList{1000}, "result shape [1000]");
  Tensor m = mean(x), s = sqrt(mean(square(x - m)));
  std::printf("randn mean %.4f std %.4f\n", m.item<double>(), s.item<double>());
  expect(std::abs(m.item<double>()) < 0.01 && std::abs(s.item<double>() - 1) < 0.01, "randn has mean 0 and std 1");
  manual_seed(0);
  expect(equal(randn({1000, 256}), x), "same seed, same numbers");

  Tensor h = x.to(kBFloat16);
  expect(allclose(h.to(kFloat32), x, 1e-2, 1e-2), "bf16 round trip within 1e-2");

  // Autograd: the per-sample input Hessian of a small PINN-style MLP
  // (2 -> 64 -> 64 -> 1, tanh) by grad rows with create_graph, checked
  // against the functional hessian() of one sample.
  manual_seed(1);
  Tensor w1 = (randn({64, 2}, kFloat64) / 1.4).requires_grad_();
  Tensor w2 = (randn({64, 64}, kFloat64) / 8.0).requires_grad_();
  Tensor w3 = (randn({1, 64}, kFloat64) / 8.0).requires_grad_();
  auto mlp = [&](const Tensor& in) { return linear(tanh(linear(tanh(linear(in, w1)), w2)), w3); };
  Tensor pts = rand({256, 2}, kFloat64).requires_grad_();
  t0 = std::chrono::steady_clock::now();
  Tensor u = mlp(pts);  // [256, 1]
  Tensor ones = tg::ones({256, 1}, kFloat64);
  Tensor du = autograd::grad({u}, {pts}, {ones}, true, true)[0];  // [256, 2]
  std::vector<Tensor> rows;
  for (int64_t j = 0; j < 2; ++j)
    rows.push_back(autograd::grad({du.select(1, j)}, {pts}, {tg::ones({256}, kFloat64)}, true)[0]);
  Tensor hess = stack(rows, 1);  // [256, 2, 2]
  ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("per-sample input Hessian [256, 2, 2] of a 2-64-64-1 MLP: %.2f ms\n", ms);
  Tensor h0 = autograd::hessian([&](const Tensor& p) { return mlp(p.view({1, 2})).sum(); }, pts.select(0, 0).detach());
  std::cout << "Hessian of sample 0 = " << hess.select(0, 0) << "\n";
  expect(allclose(hess.select(0, 0), h0, 1e-10, 1e-12), "grad rows match hessian()");
  expect(allclose(hess, hess.transpose(1, 2), 1e-10, 1e-12), "Hessians are symmetric");

  std::cout << (failures ? "FAILED\n" : "all checks passed\n");
  return failures ? 1 : 0;
}
