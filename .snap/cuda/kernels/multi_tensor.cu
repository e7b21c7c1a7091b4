// CUDA backend: multi_tensor_zero, every tensor of a list zeroed in as few
// launches as multi_tensor.cuh allows.
#include "multi_tensor.cuh"
#include "register.h"

namespace tg::cuda {

namespace {

using namespace multi_tensor;

__global__ void zero_kernel(ListArgs a) {
  int64_t begin, end;  // in 4-byte words (sizes are whole words) or bytes
  const int t = find_tensor(a, &begin, &end);
  if (a.arg[t] == 4) {
    uint32_t* w = static_cast<uint32_t*>(a.ptr[0][t]);
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x)
      w[i] = 0;
  } else {
    char* c = static_cast<char*>(a.ptr[0][t]);
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x)
      c[i] = 0;
  }
}

void multi_tensor_zero(const std::vector<Tensor>& ts) {
  if (ts.empty()) return;
  std::vector<std::array<void*, 5>> e;
  std::vector<int64_t> n, word;  // word: 4 when zeroed as 32-bit words, else 1 (bytes)
  for (size_t i = 0; i < ts.size(); ++i) {
    const Tensor& t = ts[i];
    TG_CHECK(t.is_cuda() && t.device() == ts[0].device() && t.is_contiguous(), "zero_grad (multi-tensor): tensor ", i,
             " must be contiguous on ", ts[0].device());
    const int64_t bytes = t.numel() * int64_t(element_size(t.dtype()));
    const bool words = bytes % 4 == 0 && reinterpret_cast<uintptr_t>(t.data_ptr()) % 4 == 0;
    e.push_back({t.data_ptr(), nullptr, nullptr, nullptr, nullptr});
    n.push_back(words ? bytes / 4 : bytes);
    word.push_back(words ? 4 : 1);
  }
  LaunchEncoder access(stream_of(ts[0]));
  for (const Tensor& t : ts)
    access.write(t);
  for_each_launch(
      ts[0].device(), e, n, word, "zero_grad (multi-tensor)",
      [&](const ListArgs& a, unsigned blocks, cudaStream_t s) { zero_kernel<<<blocks, kThreads, 0, s>>>(a); });
}

}  // namespace

void register_multi_tensor(kernels::Backend& b) { b.multi_tensor_zero = multi_tensor_zero; }

}  // namespace tg::cuda
