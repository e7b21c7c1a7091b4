// LibTorch C++ eager peer of the Hessian benchmark (the reference rows
// algorithm, as bench/peers/hessian_peers.py's PyTorch eager):
//   hessian_libtorch ACT PRECISION MODE BATCH RUNS  -> one JSON line
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: hessian_libtorch silu|tanh|relu fp32|tf32 hess|hess+bwd BATCH RUNS\n");
    return 2;
  }
  const std::string act = argv[1], precision = argv[2], mode = argv[3];
  const int64_t batch = std::atoll(argv[4]);
  const int runs = std::atoi(argv[5]);
  const bool bwd = mode == "hess+bwd";
  at::globalContext().setAllowTF32CuBLAS(precision == "tf32");
  torch::manual_seed(1234);
  std::vector<int64_t> sizes{2, 512, 512, 512, 512, 512, 512, 3};
  std::vector<std::pair<torch::Tensor, torch::Tensor>> params;
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    auto w = torch::randn({sizes[i + 1], sizes[i]}) * std::sqrt(1.0 / double(sizes[i]));
    auto b = torch::randn({sizes[i + 1]}) * 0.1;
    params.emplace_back(w.cuda().requires_grad_(), b.cuda().requires_grad_());
  }
  auto x0 = (torch::rand({batch, 2}) * 2 - 1).cuda();
  auto activation = [&](const torch::Tensor& h) {
    if (act == "silu") return torch::silu(h);
    if (act == "tanh") return torch::tanh(h);
    return torch::relu(h);
  };
  auto step = [&] {
    auto x = x0.detach().requires_grad_();
    auto h = x;
    for (size_t l = 0; l < params.size(); ++l) {
      h = torch::nn::functional::linear(h, params[l].first, params[l].second);
      if (l + 1 < params.size()) h = activation(h);
    }
    auto ones = torch::ones({batch}, x.options());
    std::vector<torch::Tensor> jac, rows;
    for (int i = 0; i < 3; ++i)
      jac.push_back(torch::autograd::grad({h.select(1, i)}, {x}, {ones}, true, true)[0]);
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 2; ++j)
        rows.push_back(torch::autograd::grad({jac[i].select(1, j)}, {x}, {ones}, true, bwd)[0]);
    auto hess = torch::stack(rows, 1).view({batch, 3, 2, 2});
    if (bwd) {
      hess.sum().backward();
      for (auto& [w, b] : params) {
        w.mutable_grad() = torch::Tensor();
        b.mutable_grad() = torch::Tensor();
      }
    }
  };
  for (int i = 0; i < 3; ++i)
    step();
  torch::cuda::synchronize();
  std::vector<double> ms;
  for (int i = 0; i < runs; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    step();
    torch::cuda::synchronize();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  c10::cuda::CUDACachingAllocator::resetPeakStats(0);
  auto base = c10::cuda::CUDACachingAllocator::getDeviceStats(0).allocated_bytes[0].current;
  step();
  torch::cuda::synchronize();
  auto peak = c10::cuda::CUDACachingAllocator::getDeviceStats(0).allocated_bytes[0].peak;
  std::printf("{\"median_ms\": %.4f, \"peak_mib\": %.2f}\n", ms[ms.size() / 2], double(peak - base) / (1 << 20));
}
