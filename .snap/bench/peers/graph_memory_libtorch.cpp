// LibTorch side of bench/graph_memory.cpp: the same chains, the same
// measurement (glibc mallinfo2 around N recorded ops on 0-dim float32).
#include <malloc.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>

namespace {

size_t heap_in_use() { return mallinfo2().uordblks; }

template <class Step> double bytes_per_op(int64_t n, Step step) {
  torch::Tensor x = torch::scalar_tensor(1.0).requires_grad_();
  torch::Tensor a = torch::scalar_tensor(1.0).requires_grad_();
  torch::Tensor y = step(x, a);
  y = torch::Tensor();
  const size_t before = heap_in_use();
  y = x;
  for (int64_t i = 0; i < n; ++i)
    y = step(y, a);
  const size_t after = heap_in_use();
  return double(after - before) / double(n);
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : 1000000;
  const double add = bytes_per_op(n, [](const torch::Tensor& y, const torch::Tensor&) { return y + 0.5; });
  const double mul = bytes_per_op(n, [](const torch::Tensor& y, const torch::Tensor& a) { return y * a; });
  std::printf("LibTorch %s graph memory, N = %lld ops per chain (heap bytes per recorded op)\n", TORCH_VERSION,
              static_cast<long long>(n));
  std::printf("  add chain (y + 0.5, nothing saved):    %.1f\n", add);
  std::printf("  mul chain (y * a, both inputs saved):  %.1f\n", mul);
  return 0;
}
