// The engine entry points: grad() and backward() (docs/AUTOGRAD.md "GraphTask and the engine").
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include <tapegrad/autograd/node.h>

namespace tg::autograd {

/// Gradients of `outputs` w.r.t. `inputs`, weighted by `grad_outputs` (may be
/// omitted for outputs with one element). Runs only the part of the graph
/// between them; with create_graph the result is differentiable again.
/// retain_graph defaults to create_graph.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, std::optional<bool> retain_graph = std::nullopt,
                         bool create_graph = false, bool allow_unused = false);

/// Accumulates d(tensors)/d(leaf) into every leaf's .grad, or only into
/// `inputs` when given (a non-leaf input's gradient is collected into its
/// .grad without running its own node). With create_graph, .grad gets a
/// history that refers back to the leaf (a reference cycle, as in PyTorch):
/// reset it (x.mutable_grad() = Tensor()) when done, or prefer grad().
void backward(const std::vector<Tensor>& tensors, const std::vector<Tensor>& grad_tensors = {},
              std::optional<bool> retain_graph = std::nullopt, bool create_graph = false,
              const std::vector<Tensor>& inputs = {});

/// Runs `callback` on the thread that called backward() or grad() once
/// every node of that backward has run, before it returns (and not when it
/// fails); callable from hooks and nodes during backward (as PyTorch's
/// queue_callback). Throws when no backward is running on this thread.
void queue_callback(std::function<void()> callback);

namespace detail {
/// Runs a graph task: the core of grad() and backward().
/// `needed`: sinks that must run (backward with inputs); `collects`: edges
/// whose incoming gradient is returned (grad, non-leaf backward inputs). Both
/// empty: run everything reachable.
variable_list execute(const edge_list& roots, variable_list root_grads, bool keep_graph, bool create_graph,
                      const edge_list& needed, const edge_list& collects);
}  // namespace detail

}  // namespace tg::autograd
