// AccumulateGrad: the sink node of a leaf that requires grad; it adds the
// incoming gradient into the leaf's .grad (docs/AUTOGRAD.md "Accumulation").
#pragma once

#include <tapegrad/autograd/node.h>

namespace tg::autograd {

class InputBuffer;

class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(Tensor variable);
  variable_list apply(variable_list&& grads) override;
  std::string name() const override { return "AccumulateGrad"; }
  void call_tensor_pre_hooks(variable_list& grads) override;
  const Tensor& variable() const { return variable_; }
  // The engine, before the node's inputs are released on `stream` (grad
  // mode and forward mode off, the node neither collected by grad() nor skipped): when
  // the buffer holds only products and the leaf's .grad would be added to
  // in place (dense, contiguous, not shared, no history) and no pre-hook
  // must see the gradient, forms them into .grad by one GEMM (beta 1),
  // runs the post-accumulate-grad hooks and returns true (the node is then
  // done); else changes nothing.
  bool accumulate_products_in_place(InputBuffer& buffer, const cuda::Stream& stream);

 private:
  Tensor variable_;
};

// .grad = .grad + incoming, with every layout pair listed (docs/AUTOGRAD.md "Accumulation"):
// - no .grad yet: steal `incoming` (no copy) when grad mode is off and it is
//   uniquely owned (at most `expected_refs` handles, storage not shared;
//   sparse: its indices and values too), dense ones contiguous or with the
//   leaf's strides; otherwise clone it;
// - .grad exists, grad mode off: sparse + sparse in place on the .grad handle;
//   sparse .grad + dense -> dense (into `incoming` when it is uniquely owned
//   and contiguous); dense .grad + either: in place when .grad's storage is
//   not shared and .grad is contiguous (it keeps its identity), otherwise
//   out of place;
// - grad mode on (create_graph): always out of place, .grad gets history.
void accumulate_grad(const Tensor& variable, Tensor& variable_grad, Tensor&& incoming, size_t expected_refs);

}  // namespace tg::autograd
