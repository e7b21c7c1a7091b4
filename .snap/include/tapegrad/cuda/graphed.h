// Graphed callables (docs/GRAPHS.md "Graphed callables"): a function or
// module whose forward and backward — and, unlike PyTorch's
// make_graphed_callables, its higher derivatives up to a chosen order — are
// each captured once as a CUDA graph and replayed on every call, usable as
// an ordinary differentiable function.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <tapegrad/cuda/graph.h>
#include <tapegrad/tensor/tensor.h>

namespace tg::nn {
class Module;
}

namespace tg::cuda {

/// A function of tensors to tensors.
using TensorFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

/// What make_graphed_callables graphs: a function with the parameters it
/// uses (tensors it reads that are not arguments and need gradients), or a
/// module (its forward of the first argument, its parameters).
struct Callable {
  /// A function; `parameters` get gradients as module parameters do.
  Callable(TensorFn fn, std::vector<Tensor> parameters = {}, std::string name = "callable");
  /// A module: forward(args[0]), its parameters; named after its type.
  Callable(std::shared_ptr<nn::Module> module);
  TensorFn fn;                     ///< the function
  std::vector<Tensor> parameters;  ///< tensors it reads that get gradients
  std::string name;                ///< for errors
};

/// How make_graphed_callables captures.
struct GraphedOptions {
  /// Orders of derivative captured: 1 captures the backward (as PyTorch), 2
  /// also the backward of the backward (a loss built from grad(...,
  /// create_graph = true) of the callable's outputs can be differentiated),
  /// and so on. A derivative beyond it is an error naming the callable.
  int max_order = 1;
  /// Eager runs of every captured level before capturing, on the capture
  /// stream (handles, workspaces, cached blocks).
  int warmup_iters = 3;
  /// The memory pool of every graph ({0, 0}: a new one, shared by all).
  MempoolId pool{0, 0};
  /// Calls of derivative order k + 1 that one call of order k may have,
  /// each keeping its own values (the PINN Laplacian: n second-derivative
  /// calls of one first-derivative call, differentiated again by the loss).
  /// The graphs of the second and later such calls are captured on their
  /// first use (never while a graph is being captured).
  int max_calls_per_level = 16;
};

namespace detail {
struct GraphedState;
}

/// A graphed callable: call it as the function. Each call copies the
/// arguments into the captured inputs and replays the forward graph; its
/// backward (and derivatives up to max_order) replay their graphs. Outputs
/// are fresh tensors. The forward graph keeps one call's intermediate
/// values: differentiate a call before calling again (a stale backward is an
/// error, not a wrong result). Derivative calls of one call each keep their
/// own (GraphedOptions::max_calls_per_level).
class GraphedCallable {
 public:
  /// Calls it: arguments of the captured shapes, dtypes and devices.
  std::vector<Tensor> operator()(const std::vector<Tensor>& args) const;
  /// One argument, one output.
  Tensor operator()(const Tensor& x) const;
  /// The callable's name.
  const std::string& name() const;
  /// How many times the graphs of derivative order `level` (0: forward) replayed.
  int64_t replays(int level) const;

 private:
  friend std::vector<GraphedCallable> make_graphed_callables(std::vector<Callable>, std::vector<std::vector<Tensor>>,
                                                             GraphedOptions);
  std::shared_ptr<detail::GraphedState> state_;
};

/// Captures each callable with its sample arguments (warm-up on a side
/// stream, then the forward and each derivative order as its own graph, all
/// in one pool) and returns the graphed callables, in order. Arguments that
/// require grad get gradients, as do the parameters. Throws, naming the
/// callable, for what cannot be graphed: outputs or arguments off the GPU,
/// and ops that cannot run under capture (host syncs, data-dependent shapes).
std::vector<GraphedCallable> make_graphed_callables(std::vector<Callable> callables,
                                                    std::vector<std::vector<Tensor>> sample_args,
                                                    GraphedOptions options = {});

/// How graphed() caches.
struct GraphedFunctionOptions {
  /// Re-recordings per signature (a static or pool input moved) before the
  /// signature runs eagerly for good.
  int max_re_records = 8;
  /// The pool of its graphs ({0, 0}: a new one). Caches given one pool form
  /// a tree: outputs of one may be inputs, also written ones, of another.
  MempoolId pool{0, 0};
  /// For errors and eager reasons.
  std::string name = "function";
};

/// What a graphed function did (GraphedFunction::counters()).
struct GraphedFunctionCounters {
  int64_t warmups = 0;                     ///< eager first calls of a signature (they find what it writes)
  int64_t recordings = 0;                  ///< graphs captured (re-records included)
  int64_t replays = 0;                     ///< calls answered by a replay
  int64_t re_records = 0;                  ///< recordings after a static or pool input moved
  int64_t eager_calls = 0;                 ///< calls run eagerly because their signature cannot be graphed
  std::vector<std::string> eager_reasons;  ///< why, one per signature that went eager
};

/// A function of CUDA tensors whose calls are recorded as CUDA graphs, one
/// per input signature (shapes, dtypes, devices, requires_grad), and
/// replayed (docs/GRAPHS.md "The graphed-function cache"). The first call of
/// a signature runs eagerly and finds, by version counters, which arguments
/// and static tensors the function writes; the second records; later calls
/// replay. Arguments are classified once: static (registered with
/// register_static: read and written in place), outputs of a graph of the
/// same pool (read and written in place), or ordinary (copied into the
/// graph's input). A function that writes an ordinary argument runs eagerly
/// from then on (in a graph its write would land in the copy). Each replay
/// checks the addresses of static and pool arguments and re-records when one
/// moved; it bumps the version counter of every tensor it writes, so saved
/// tensors see graph writes. Outputs are the graph's, handed out as aliases:
/// an output still held when its graph replays again is first copied out,
/// so results stay valid. Outputs carry no autograd history (for
/// differentiable pieces use make_graphed_callables).
class GraphedFunction {
 public:
  /// Caches `fn`.
  explicit GraphedFunction(TensorFn fn, GraphedFunctionOptions options = {});
  /// Calls it (eagerly, by recording, or by a replay).
  std::vector<Tensor> operator()(const std::vector<Tensor>& args);
  /// The counters so far.
  const GraphedFunctionCounters& counters() const;
  /// The pool of its graphs.
  MempoolId pool() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

/// GraphedFunction(fn, options), as a function.
GraphedFunction graphed(TensorFn fn, GraphedFunctionOptions options = {});

}  // namespace tg::cuda
