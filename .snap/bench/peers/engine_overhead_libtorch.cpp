// LibTorch peer of bench_autograd's engine-overhead chain: N scalar
// x = x * w + b pairs, forward + backward into w and b, minus the no-grad
// forward, per pair. `engine_overhead_libtorch cuda` runs the chain on the
// GPU with one-element tensors, timing up to a device synchronize (as
// bench_cuda's BM_CudaChain*). Built only on the GPU machine (which has LibTorch):
//   cmake -S bench/peers -B build-peers -DCMAKE_PREFIX_PATH=$(python3 -c \
//     "import torch; print(torch.utils.cmake_prefix_path)") && cmake --build build-peers
//   build-peers/engine_overhead_libtorch
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

namespace {

double median_us(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <class F> double time_us(F&& f, int reps) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    auto s = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - s).count());
  }
  return median_us(t);
}

}  // namespace

int main(int argc, char** argv) {
  torch::set_num_threads(1);
  const bool cuda = argc > 1 && std::string(argv[1]) == "cuda";
  const int n = 1000;
  auto opts = torch::TensorOptions().device(cuda ? torch::kCUDA : torch::kCPU);
  // CPU: 0-dim tensors as bench_autograd; GPU: [1] tensors as bench_cuda.
  auto make = [&](float v) { return cuda ? torch::full({1}, v, opts) : torch::tensor(v); };
  auto sync = [&] {
    if (cuda) torch::cuda::synchronize();
  };
  auto x = make(1.0f);
  auto w = make(0.999f).requires_grad_();
  auto b = make(0.001f).requires_grad_();
  auto chain = [&] {
    auto h = x;
    for (int i = 0; i < n; ++i)
      h = h * w + b;
    return h;
  };
  auto nograd = [&] {
    torch::NoGradGuard g;
    auto h = chain();
    (void)h;
    sync();
  };
  auto fwdbwd = [&] {
    chain().sum().backward();
    sync();
  };
  for (int i = 0; i < 20; ++i) {
    nograd();
    fwdbwd();
  }
  double t0 = time_us(nograd, 200), t1 = time_us(fwdbwd, 200);
  std::printf(
      "libtorch %s on %s: no-grad forward %.1f us, forward+backward %.1f us, "
      "engine overhead %.2f us per pair (N = %d)\n",
      TORCH_VERSION, cuda ? "cuda" : "cpu", t0, t1, (t1 - t0) / n, n);
}
