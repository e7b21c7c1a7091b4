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
  std::cout << "CUDA built: " << (cuda::is_built() ? "yes" : "no")
            << ", devices: " << cuda::device_count() << "\n";
  if (cuda::is_available()) {
    auto p = cuda::get_device_properties(0);
    std::cout << "GPU 0: " << p.name << " (sm_" << p.major << p.minor << ", "
              << p.total_memory / (1 << 20) << " MiB)\n";
    cuda::self_test(0);
    std::cout << "GPU self-test passed\n";
  }

  Tensor a = arange(6, kFloat64).view({2, 3});
  std::cout << "a = " << a << "\n";
  std::cout << "a.t() = " << a.t() << "\n";
  Tensor b = tensor({10, 20, 30}, {3}, kFloat64);
  std::cout << "a + b (broadcast) = " << a + b << "\n";
  expect(equal(sum(a + b, {0}), tensor({23, 45, 67}, {3}, kFloat64)),
         "column sums of a + b");
  expect(equal(matmul(a, a.t()), tensor({5, 14, 14, 50}, {2, 2}, kFloat64)),
         "a @ a^T");

  manual_seed(0);
  Tensor x = randn({1000, 256});
  Tensor w = randn({256, 256}) / 16.0;
  auto t0 = std::chrono::steady_clock::now();
  Tensor y = tanh(matmul(x, w)).sum({1});
  double ms = std::chrono::duration<double, std::milli>(
                  std::chrono::steady_clock::now() - t0).count();
  std::printf("tanh(x @ w).sum(1) over [1000, 256]: %.2f ms\n", ms);
  expect(y.sizes() == IntList{1000}, "result shape [1000]");
  Tensor m = mean(x), s = sqrt(mean(square(x - m)));
  std::printf("randn mean %.4f std %.4f\n", m.item<double>(), s.item<double>());
  expect(std::abs(m.item<double>()) < 0.01 && std::abs(s.item<double>() - 1) < 0.01,
         "randn has mean 0 and std 1");
  manual_seed(0);
  expect(equal(randn({1000, 256}), x), "same seed, same numbers");

  Tensor h = x.to(kBFloat16);
  expect(allclose(h.to(kFloat32), x, 1e-2, 1e-2), "bf16 round trip within 1e-2");

  std::cout << (failures ? "FAILED\n" : "all checks passed\n");
  return failures ? 1 : 0;
}
