// Internal (nn::Sequential): a small MLP's recorded forward as one node.
#pragma once

#include <cstdint>
#include <vector>

#include <tapegrad/tensor/ops.h>
#include <tapegrad/tensor/tensor.h>

namespace tg::autograd {

// out [n, w_L] = the MLP of `weights`/`biases` (Linear layers, `act` after
// each but the last, and after the last too when last_act) at x [n, w_0],
// in one launch of the backend's mlp_forward, recorded (grad mode on, some
// operand requiring grad) as one node whose backward is mlp_backward's
// launch, the weights' gradients handed to the engine as products (summed
// with their other uses' by one GEMM) and the biases' as row sums. Under
// create_graph the backward is the layers' formulas in public ops on the
// forward recomputed from the saved inputs, so it is differentiable to any
// order. Undefined where the kernels do not take the operands (the caller
// then runs the layers one by one).
Tensor fused_mlp(Activation act, bool last_act, const Tensor& x, const std::vector<Tensor>& weights,
                 const std::vector<Tensor>& biases);

// How many MlpBackward backwards without create_graph fell back to the
// public-op formulas because the backend's kernel declined the operands
// (for tests: the kernel path ran when this does not move).
int64_t fused_mlp_fallbacks();

}  // namespace tg::autograd
