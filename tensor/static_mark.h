// Internal: the static-tensor mark of CUDA graphs, kept on the TensorImpl
// (<tapegrad/cuda/graph.h> "static tensors"). The registry (graphs/
// static_tensors.cpp) sets it; AccumulateGrad, Module::to and zero_grad read
// it without a lookup (tg::cuda::static_in_use).
#pragma once

#include <atomic>
#include <mutex>
#include <string>

namespace tg {

struct StaticMark {
  std::atomic<bool> registered{false};
  std::atomic<int> graphs{0};  // live graphs whose snapshot recorded the tensor
  std::mutex mu;               // guards name
  std::string name;
};

}  // namespace tg
