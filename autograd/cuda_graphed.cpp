// Graphed callables (docs/GRAPHS.md "Graphed callables").
//
// Level 0 is the callable: inputs S0 = arguments ++ parameters, outputs O0.
// Level k >= 1 is the vector-Jacobian product of level k-1: inputs
// Sk = D(S(k-1)) ++ G(k-1), where D keeps the inputs that need gradients and
// G(k-1) are cotangents for the outputs O(k-1) that need them; outputs Ok
// are the gradients with respect to D(S(k-1)). Each level is captured as its
// own graph on static tensors, level k by grad() over the history recorded
// while capturing level k-1 (kept alive, so its saved tensors stay where
// the graphs read them), all in one pool. At run time level k is a custom
// Function whose forward copies what is new into the static inputs and
// replays, and whose backward calls level k+1 on (its saved inputs,
// the incoming gradients): so derivatives compose to max_order.
#include <tapegrad/cuda/graphed.h>

#include <any>
#include <sstream>

#include <tapegrad/autograd/autograd.h>
#include <tapegrad/autograd/function.h>
#include <tapegrad/autograd/grad_mode.h>
#include <tapegrad/cuda/device.h>
#include <tapegrad/nn/module.h>
#include <tapegrad/tensor/error.h>
#include <tapegrad/tensor/ops.h>

namespace tg::cuda {

namespace detail {

struct GraphedState {
  struct Level {
    std::unique_ptr<CUDAGraph> graph;
    std::vector<Tensor> inputs;   // static Sk
    std::vector<bool> diff;       // D: which inputs need gradients
    std::vector<Tensor> outputs;  // static Ok (with the history captured, kept alive)
    std::vector<bool> has_out;    // level >= 1: which entries of D got a gradient (else undefined)
    std::vector<Tensor> cotangents;  // static G(k): one per output that needs a gradient
    std::vector<size_t> cot_of;      // the output each cotangent belongs to
    int64_t replays = 0;
  };
  std::string name;
  int max_order = 1;
  size_t nargs = 0;
  std::vector<Tensor> params;
  std::vector<Level> levels;
};

}  // namespace detail

namespace {

using detail::GraphedState;
namespace ag = tg::autograd;

std::string shape_dtype_device(const Tensor& t) {
  std::ostringstream o;
  o << t.dtype() << " " << t.sizes() << " on " << t.device();
  return o.str();
}

// Copies `src` into the static `dst` (not recorded).
void copy_static(const Tensor& dst, const Tensor& src) {
  ag::NoGradGuard no_grad;
  dst.copy_(src);
}

// The replay counts of levels 0..k, as a node of level k saw them.
std::vector<int64_t> generations(const GraphedState& s, int k) {
  std::vector<int64_t> g;
  for (int j = 0; j <= k; ++j) g.push_back(s.levels[size_t(j)].replays);
  return g;
}

struct GraphedLevel : ag::Function<GraphedLevel> {
  // inputs: level 0: arguments ++ parameters; level k: D(inputs of k-1) ++
  // the cotangents of level k-1's outputs that need them.
  static ag::variable_list forward(ag::AutogradContext* ctx, ag::variable_list inputs,
                                   std::shared_ptr<GraphedState> s, int level) {
    GraphedState::Level& L = s->levels[size_t(level)];
    if (level == 0) {
      for (size_t i = 0; i < s->nargs; ++i) copy_static(L.inputs[i], inputs[i]);
    } else {
      const GraphedState::Level& prev = s->levels[size_t(level) - 1];
      const size_t first = inputs.size() - prev.cotangents.size();
      for (size_t i = 0; i < prev.cotangents.size(); ++i) copy_static(prev.cotangents[i], inputs[first + i]);
    }
    L.graph->replay();
    ++L.replays;
    ag::variable_list out;
    for (const Tensor& o : L.outputs)
      if (o.defined()) out.push_back(o.detach().clone());
    ctx->save_for_backward(inputs);
    ctx->saved_data["state"] = s;
    ctx->saved_data["level"] = level;
    ctx->saved_data["generations"] = generations(*s, level);
    return out;
  }

  static ag::variable_list backward(ag::AutogradContext* ctx, ag::variable_list grads) {
    auto s = std::any_cast<std::shared_ptr<GraphedState>>(ctx->saved_data["state"]);
    const int level = std::any_cast<int>(ctx->saved_data["level"]);
    TG_CHECK(level < s->max_order, "graphed callable '", s->name, "': a derivative of order ", level + 1,
             " was asked for, but only orders up to ", s->max_order,
             " were captured; raise GraphedOptions::max_order");
    const auto seen = std::any_cast<std::vector<int64_t>>(ctx->saved_data["generations"]);
    TG_CHECK(seen == generations(*s, level), "graphed callable '", s->name, "': this call's intermediate "
             "values were overwritten by a later call (its graphs keep one call's values); differentiate "
             "a call before calling the graphed callable again");
    const GraphedState::Level& L = s->levels[size_t(level)];
    ag::variable_list inputs = ctx->get_saved_variables();
    // The next level's inputs: the inputs that need gradients, then the
    // gradients of the outputs that have cotangents (undefined ones arrive
    // as zeros).
    ag::variable_list next;
    for (size_t i = 0; i < inputs.size(); ++i)
      if (L.diff[i]) next.push_back(inputs[i]);
    {
      size_t out_pos = 0, c = 0;
      for (size_t o = 0; o < L.outputs.size(); ++o) {
        if (!L.outputs[o].defined()) continue;
        if (c < L.cot_of.size() && L.cot_of[c] == o) {
          next.push_back(grads[out_pos]);
          ++c;
        }
        ++out_pos;
      }
    }
    ag::variable_list g = GraphedLevel::apply(next, s, level + 1);
    // One gradient per input: those in D that got one, in order.
    const GraphedState::Level& N = s->levels[size_t(level) + 1];
    ag::variable_list res(inputs.size());
    size_t d = 0, k = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!L.diff[i]) continue;
      if (N.has_out[d]) res[i] = g[k++];
      ++d;
    }
    return res;
  }
};

// Runs level `k` of `s` on its static inputs (under capture when one is
// underway) and sets its outputs; level k >= 1 differentiates level k-1's
// recorded history, which it keeps.
void run_level(GraphedState& s, int k, const TensorFn& fn) {
  GraphedState::Level& L = s.levels[size_t(k)];
  ag::EnableGradGuard grad_on;
  if (k == 0) {
    ag::variable_list args(L.inputs.begin(), L.inputs.begin() + long(s.nargs));
    L.outputs = fn(args);
    for (size_t o = 0; o < L.outputs.size(); ++o)
      TG_CHECK(L.outputs[o].defined() && L.outputs[o].is_cuda(), "output ", o, " is ",
               L.outputs[o].defined() ? shape_dtype_device(L.outputs[o]) : "undefined",
               "; graphed callables return CUDA tensors");
    return;
  }
  const GraphedState::Level& P = s.levels[size_t(k) - 1];
  ag::variable_list outs, wrt;
  for (size_t c = 0; c < P.cot_of.size(); ++c) outs.push_back(P.outputs[P.cot_of[c]]);
  for (size_t i = 0; i < P.inputs.size(); ++i)
    if (P.diff[i]) wrt.push_back(P.inputs[i]);
  // No output of level k-1 depends on anything that needs a gradient: its
  // derivatives are all zero (undefined), and the graph is empty.
  ag::variable_list g = outs.empty() ? ag::variable_list(wrt.size())
                                     : ag::grad(outs, wrt, P.cotangents, /*retain_graph=*/true,
                                                /*create_graph=*/k < s.max_order, /*allow_unused=*/true);
  L.outputs = g;
  L.has_out.clear();
  for (const Tensor& t : g) L.has_out.push_back(t.defined());
}

// After level k-1 ran once: level k's static inputs and level k-1's
// cotangents (zeros; requiring grad when level k+1 differentiates them).
void prepare_level(GraphedState& s, int k) {
  GraphedState::Level& P = s.levels[size_t(k) - 1];
  P.cotangents.clear();
  P.cot_of.clear();
  for (size_t o = 0; o < P.outputs.size(); ++o) {
    const Tensor& out = P.outputs[o];
    if (!out.defined() || !out.requires_grad()) continue;
    Tensor c = tg::zeros_like(out.detach());
    if (k < s.max_order) c.requires_grad_();
    P.cotangents.push_back(c);
    P.cot_of.push_back(o);
  }
  TG_CHECK(!P.cotangents.empty() || k > 1, "no output depends on an argument that requires grad or on a "
           "parameter: there is no backward to capture (use max_order = 0)");
  GraphedState::Level& L = s.levels[size_t(k)];
  L.inputs.clear();
  L.diff.clear();
  for (size_t i = 0; i < P.inputs.size(); ++i)
    if (P.diff[i]) L.inputs.push_back(P.inputs[i]);
  for (const Tensor& c : P.cotangents) L.inputs.push_back(c);
  for (const Tensor& t : L.inputs) L.diff.push_back(t.requires_grad());
}

std::shared_ptr<GraphedState> capture_callable(const Callable& c, const std::vector<Tensor>& sample,
                                               const GraphedOptions& o, MempoolId pool, const Stream& side) {
  auto s = std::make_shared<GraphedState>();
  s->name = c.name;
  s->max_order = o.max_order;
  s->nargs = sample.size();
  s->params = c.parameters;
  s->levels.resize(size_t(o.max_order) + 1);
  GraphedState::Level& L0 = s->levels[0];
  for (size_t i = 0; i < sample.size(); ++i) {
    const Tensor& a = sample[i];
    TG_CHECK(a.defined() && a.is_cuda(), "argument ", i, " is ",
             a.defined() ? shape_dtype_device(a) : "undefined", "; graphed callables take CUDA tensors");
    Tensor st = a.detach().clone();
    if (a.requires_grad()) st.requires_grad_();
    L0.inputs.push_back(st);
  }
  for (size_t i = 0; i < c.parameters.size(); ++i) {
    const Tensor& p = c.parameters[i];
    TG_CHECK(p.defined() && p.is_cuda() && p.is_leaf(), "parameter ", i, " must be a CUDA leaf tensor");
    L0.inputs.push_back(p);
  }
  for (const Tensor& t : L0.inputs) L0.diff.push_back(t.requires_grad());

  StreamGuard on_side(side);
  // Warm-up: every level eagerly (the same calls the captures make).
  for (int w = 0; w < o.warmup_iters; ++w)
    for (int k = 0; k <= o.max_order; ++k) {
      if (k > 0) prepare_level(*s, k);
      run_level(*s, k, c.fn);
    }
  for (int k = 0; k <= o.max_order; ++k) {
    if (k > 0) prepare_level(*s, k);
    GraphedState::Level& L = s->levels[size_t(k)];
    L.graph = std::make_unique<CUDAGraph>();
    {
      Graph capture(*L.graph, pool, side);
      run_level(*s, k, c.fn);
    }
  }
  return s;
}

}  // namespace

Callable::Callable(TensorFn f, std::vector<Tensor> ps, std::string n)
    : fn(std::move(f)), parameters(std::move(ps)), name(std::move(n)) {}

Callable::Callable(std::shared_ptr<nn::Module> module)
    : fn([module](const std::vector<Tensor>& args) {
        TG_CHECK(args.size() == 1, module->type_name(), ": a graphed module takes one argument, got ", args.size());
        return std::vector<Tensor>{module->forward(args[0])};
      }),
      parameters(module->parameters()),
      name(module->type_name()) {}

std::vector<Tensor> GraphedCallable::operator()(const std::vector<Tensor>& args) const {
  const GraphedState& s = *state_;
  const GraphedState::Level& L0 = s.levels[0];
  TG_CHECK(args.size() == s.nargs, "graphed callable '", s.name, "': expected ", s.nargs, " arguments, got ",
           args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    const Tensor& a = args[i];
    const Tensor& st = L0.inputs[i];
    TG_CHECK(a.defined() && a.sizes() == st.sizes() && a.dtype() == st.dtype() && a.device() == st.device(),
             "graphed callable '", s.name, "': argument ", i, " is ",
             a.defined() ? shape_dtype_device(a) : "undefined", ", but the graphs were captured for ",
             shape_dtype_device(st), " (a graph has fixed shapes: capture another callable for other shapes)");
    TG_CHECK(!autograd::is_grad_enabled() || a.requires_grad() == st.requires_grad(), "graphed callable '",
             s.name, "': argument ", i, (a.requires_grad() ? " requires" : " does not require"),
             " grad, but the sample argument ", (st.requires_grad() ? "did" : "did not"),
             "; the captured backward computes gradients for the sample's choice");
  }
  std::vector<Tensor> inputs = args;
  inputs.insert(inputs.end(), s.params.begin(), s.params.end());
  return GraphedLevel::apply(inputs, state_, 0);
}

Tensor GraphedCallable::operator()(const Tensor& x) const {
  std::vector<Tensor> out = (*this)(std::vector<Tensor>{x});
  TG_CHECK(out.size() == 1, "graphed callable '", state_->name, "': returns ", out.size(),
           " outputs; call it with a list");
  return out[0];
}

const std::string& GraphedCallable::name() const { return state_->name; }

int64_t GraphedCallable::replays(int level) const {
  TG_CHECK(level >= 0 && level <= state_->max_order, "graphed callable '", state_->name, "': level ", level,
           " is not in [0, ", state_->max_order, "]");
  return state_->levels[size_t(level)].replays;
}

std::vector<GraphedCallable> make_graphed_callables(std::vector<Callable> callables,
                                                    std::vector<std::vector<Tensor>> sample_args,
                                                    GraphedOptions options) {
  TG_CHECK(callables.size() == sample_args.size(), "make_graphed_callables: ", callables.size(),
           " callables but ", sample_args.size(), " sample argument lists");
  TG_CHECK(options.max_order >= 0, "make_graphed_callables: max_order must be >= 0, got ", options.max_order);
  TG_CHECK(is_available(), "make_graphed_callables: CUDA graphs need a GPU, and none is available");
  const MempoolId pool = options.pool.first || options.pool.second ? options.pool : graph_pool_handle();
  Stream caller = current_stream(-1);
  Stream side = stream_from_pool(caller.device_index());
  side.wait_stream(caller);
  std::vector<GraphedCallable> out;
  for (size_t i = 0; i < callables.size(); ++i) {
    GraphedCallable g;
    try {
      g.state_ = capture_callable(callables[i], sample_args[i], options, pool, side);
    } catch (const Error& e) {
      caller.wait_stream(side);
      TG_ERROR("make_graphed_callables: callable '", callables[i].name, "' cannot be graphed: ", e.what());
    }
    out.push_back(std::move(g));
  }
  caller.wait_stream(side);
  return out;
}

}  // namespace tg::cuda
