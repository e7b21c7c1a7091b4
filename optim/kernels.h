// Internal: the optimizers' multi-tensor updates (docs/OPTIM.md "Fused and
// capturable"), the seam between optim/ and a device. One list entry per
// parameter; every tensor of an update is contiguous, on one device, of one
// dtype (Float32 or Float64). `steps` is a Float64 tensor of per-parameter
// step counts (already incremented for this step) and step_index[i] the
// entry of parameter i; `lr` a 0-dim Float64 tensor: both read when the
// kernel runs, so a captured update stays right on replay.
#pragma once

#include <cstdint>
#include <vector>

#include <tapegrad/tensor/tensor.h>

namespace tg::optim::detail {

struct AdamUpdate {
  double beta1, beta2, eps, weight_decay;
  bool amsgrad, decoupled;  // decoupled: AdamW's weight decay
};
struct SGDUpdate {
  double momentum, dampening, weight_decay;
  bool nesterov;
};
struct TensorLists {
  std::vector<Tensor> param, grad, state1, state2, state3;  // state: Adam m, v, vmax; SGD buf
  std::vector<int64_t> step_index;
};

// Adam/AdamW: state1 = m, state2 = v, state3 = max v (amsgrad). SGD: state1
// = the momentum buffer (a step count of 1 initialises it with the
// gradient).
struct MultiTensorUpdates {
  void (*adam)(const TensorLists& l, const Tensor& steps, const Tensor& lr, const AdamUpdate& u);
  void (*sgd)(const TensorLists& l, const Tensor& steps, const Tensor& lr, const SGDUpdate& u);
};

// The GPU's updates: defined by optim/multi_tensor.cu, null from
// optim/no_cuda.cpp (chosen at link time). The CPU has none: the optimizers
// run their per-tensor ops there.
const MultiTensorUpdates* cuda_multi_tensor_updates();

}  // namespace tg::optim::detail
