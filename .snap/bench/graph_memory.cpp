// Bytes of heap each recorded op costs (node, edges, input metadata, saved
// variables, and the tensor objects a graph keeps alive), measured with
// glibc's mallinfo2 around chains of N ops on 0-dim float32 tensors:
//   add:  y = y + 0.5   (nothing saved; intermediate tensors are freed)
//   mul:  y = y * a     (both inputs saved: each step keeps its input alive)
// bench/peers/graph_memory_libtorch.cpp is the same program for LibTorch.
// Usage: graph_memory [N]   (default 1000000)
#include <malloc.h>

#include <cstdio>
#include <cstdlib>

#include <tapegrad/tapegrad.h>

namespace {

size_t heap_in_use() { return mallinfo2().uordblks; }

template <class Step> double bytes_per_op(int64_t n, Step step) {
  tg::Tensor x = tg::scalar_tensor(1.0).requires_grad_();
  tg::Tensor a = tg::scalar_tensor(1.0).requires_grad_();
  tg::Tensor y = step(x, a);  // warm up lazily created state (sinks, pools)
  y = tg::Tensor();
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
  const double add = bytes_per_op(n, [](const tg::Tensor& y, const tg::Tensor&) { return y + 0.5; });
  const double mul = bytes_per_op(n, [](const tg::Tensor& y, const tg::Tensor& a) { return y * a; });
  std::printf("tapegrad graph memory, N = %lld ops per chain (heap bytes per recorded op)\n",
              static_cast<long long>(n));
  std::printf("  add chain (y + 0.5, nothing saved):    %.1f\n", add);
  std::printf("  mul chain (y * a, both inputs saved):  %.1f\n", mul);
  return 0;
}
