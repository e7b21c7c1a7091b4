// Internal: the static-tensor mark of CUDA graphs, kept on the TensorImpl
// (<tapegrad/cuda/graph.h> "static tensors"). The registry (graphs/
// static_tensors.cpp) sets it; AccumulateGrad, Module::to and zero_grad read
// it without a lookup (tg::cuda::static_in_use).
#pragma once

#include <atomic>
#include <mutex>
#include <string>

namespace tg {

class StaticMark {
 public:
  std::atomic<bool> registered{false};
  std::atomic<int> graphs{0};  // live graphs whose snapshot recorded the tensor

  std::string name() const {
    std::lock_guard<std::mutex> lock(mu_);
    return name_;
  }
  void set_name(const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    name_ = name;
  }

 private:
  mutable std::mutex mu_;  // guards name_ (renamed while other threads read it)
  std::string name_;
};

}  // namespace tg
