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
//
// Instances: a captured level holds one call's intermediate values. Several
// calls of level k+1 between two replays of level k (the PINN Laplacian:
// n second-derivative calls of one first-derivative call, each
// differentiated again by the loss's backward) each need their own. So the
// levels form a tree: an instance of level k has child instances of level
// k+1, captured from its history; the j-th call of level k+1 after a replay
// of an instance uses its j-th child, captured on first use (then replayed
// ever after). A call stays differentiable until its instance or one of its
// ancestors replays again; later than that is the stale-call error.
#include <tapegrad/cuda/graphed.h>

#include "autograd/overwritten_saved.h"

#include <any>
#include <map>
#include <mutex>
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
  struct Instance {
    int level = 0;
    Instance* parent = nullptr;
    std::unique_ptr<CUDAGraph> graph;
    std::vector<Tensor> inputs;      // static Sk
    std::vector<bool> diff;          // D: which inputs need gradients
    std::vector<Tensor> outputs;     // static Ok (with the history captured, kept alive)
    std::vector<bool> has_out;       // level >= 1: which entries of D got a gradient (else undefined)
    std::vector<Tensor> cotangents;  // level >= 1: static G(k-1), one per parent output that needs one
    std::vector<size_t> cot_of;      // the parent output each cotangent belongs to
    int64_t replays = 0;
    std::vector<std::unique_ptr<Instance>> children;  // instances of level + 1
    size_t used = 0;                                  // children called since this instance's last replay
  };
  std::string name;
  int max_order = 1;
  int warmup_iters = 1;
  size_t max_calls = 16;
  size_t nargs = 0;
  int device = 0;
  std::vector<Tensor> params;
  std::unique_ptr<Instance> root;
  std::vector<int64_t> level_replays;
  std::mutex mutex;  // a call of a level after the first captures an instance
};

}  // namespace detail

namespace {

using detail::GraphedState;
using Instance = GraphedState::Instance;
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

// The replay counts of an instance and its ancestors, as a call saw them.
std::vector<int64_t> generations(const Instance& i) {
  std::vector<int64_t> g;
  for (const Instance* p = &i; p; p = p->parent)
    g.push_back(p->replays);
  return g;
}

// Runs instance L on its static inputs (under capture when one is underway)
// and sets its outputs; level k >= 1 differentiates its parent's recorded
// history, which it keeps.
void run_level(const GraphedState& s, Instance& L, const TensorFn& fn) {
  ag::EnableGradGuard grad_on;
  if (L.level == 0) {
    ag::variable_list args(L.inputs.begin(), L.inputs.begin() + long(s.nargs));
    L.outputs = fn(args);
    for (size_t o = 0; o < L.outputs.size(); ++o)
      TG_CHECK(L.outputs[o].defined() && L.outputs[o].is_cuda(), "output ", o, " is ",
               L.outputs[o].defined() ? shape_dtype_device(L.outputs[o]) : "undefined",
               "; graphed callables return CUDA tensors");
    return;
  }
  const Instance& P = *L.parent;
  ag::variable_list outs, wrt;
  for (size_t c = 0; c < L.cot_of.size(); ++c)
    outs.push_back(P.outputs[L.cot_of[c]]);
  for (size_t i = 0; i < P.inputs.size(); ++i)
    if (P.diff[i]) wrt.push_back(P.inputs[i]);
  // No output of the parent depends on anything that needs a gradient: its
  // derivatives are all zero (undefined), and the graph is empty.
  ag::variable_list g = outs.empty() ? ag::variable_list(wrt.size())
                                     : ag::grad(outs, wrt, L.cotangents, /*retain_graph=*/true,
                                                /*create_graph=*/L.level < s.max_order, /*allow_unused=*/true);
  L.outputs = g;
  L.has_out.clear();
  for (const Tensor& t : g)
    L.has_out.push_back(t.defined());
}

// After its parent ran once: instance L's cotangents (zeros; requiring grad
// when level k+1 differentiates them) and static inputs.
void prepare_level(const GraphedState& s, Instance& L) {
  const Instance& P = *L.parent;
  L.cotangents.clear();
  L.cot_of.clear();
  for (size_t o = 0; o < P.outputs.size(); ++o) {
    const Tensor& out = P.outputs[o];
    if (!out.defined() || !out.requires_grad()) continue;
    Tensor c = tg::zeros_like(out.detach());
    if (L.level < s.max_order) c.requires_grad_();
    L.cotangents.push_back(c);
    L.cot_of.push_back(o);
  }
  TG_CHECK(!L.cotangents.empty() || L.level > 1,
           "no output depends on an argument that requires grad or on a "
           "parameter: there is no backward to capture (use max_order = 0)");
  L.inputs.clear();
  L.diff.clear();
  for (size_t i = 0; i < P.inputs.size(); ++i)
    if (P.diff[i]) L.inputs.push_back(P.inputs[i]);
  for (const Tensor& c : L.cotangents)
    L.inputs.push_back(c);
  for (const Tensor& t : L.inputs)
    L.diff.push_back(t.requires_grad());
}

// Captures `top` (level 0 with fn, or a fresh child of a captured instance)
// and one descendant per level below it up to max_order: warm-up runs of
// every level first, then each level's capture, on `side`, into `pool`.
// Graphs of one pool may reuse what an earlier one freed at its end, which
// is safe only when they replay in capture order, each after the one it
// differentiates: true of one chain (a graph that replays again makes its
// descendants stale), not of siblings. So the root chain has the
// callable's pool and every chain captured later a pool of its own.
void capture_chain(GraphedState& s, Instance& top, const TensorFn& fn, const Stream& side, MempoolId pool) {
  std::vector<Instance*> chain = {&top};
  while (chain.back()->level < s.max_order) {
    auto child = std::make_unique<Instance>();
    child->level = chain.back()->level + 1;
    child->parent = chain.back();
    chain.push_back(child.get());
    chain[chain.size() - 2]->children.push_back(std::move(child));
  }
  StreamGuard on_side(side);
  for (int w = 0; w < s.warmup_iters; ++w)
    for (Instance* L : chain) {
      if (L->level > 0) prepare_level(s, *L);
      run_level(s, *L, fn);
    }
  for (Instance* L : chain) {
    if (L->level > 0) prepare_level(s, *L);
    L->graph = std::make_unique<CUDAGraph>();
    {
      Graph capture(*L->graph, pool, side);
      run_level(s, *L, fn);
    }
  }
}

// The instance of level parent.level + 1 for the next call after parent's
// last replay: its next child, captured now on the first such call.
Instance& child_for_call(GraphedState& s, Instance& parent) {
  std::lock_guard<std::mutex> lock(s.mutex);
  if (parent.used < parent.children.size()) return *parent.children[parent.used++];
  TG_CHECK(parent.children.size() < s.max_calls, "graphed callable '", s.name, "': more than ", s.max_calls,
           " calls of derivative order ", parent.level + 1, " of one call of order ", parent.level,
           " (each keeps its own captured values); raise GraphedOptions::max_calls_per_level");
  TG_CHECK(!is_current_stream_capturing(), "graphed callable '", s.name, "': call ", parent.children.size() + 1,
           " of derivative order ", parent.level + 1, " of one call of order ", parent.level,
           " needs graphs of its own, captured on its first call, which cannot happen while a graph is being "
           "captured: run the same calls once before capturing");
  const Stream caller = current_stream(s.device);
  const Stream side = stream_from_pool(caller.device_index());
  side.wait_stream(caller);
  auto fresh = std::make_unique<Instance>();
  fresh->level = parent.level + 1;
  fresh->parent = &parent;
  Instance* made = fresh.get();
  parent.children.push_back(std::move(fresh));
  try {
    // The parent's history saved static inputs (and parameters) that calls
    // and optimizer steps have overwritten since: by design, not an error.
    autograd::detail::AcceptOverwrittenSaved overwritten_by_design;
    capture_chain(s, *made, nullptr, side, graph_pool_handle());
  } catch (...) {
    parent.children.pop_back();
    caller.wait_stream(side);
    throw;
  }
  caller.wait_stream(side);
  ++parent.used;
  return *made;
}

struct GraphedLevel : ag::Function<GraphedLevel> {
  // inputs: level 0: arguments ++ parameters; level k: D(inputs of k-1) ++
  // the cotangents of level k-1's outputs that need them. `parent`: the
  // instance of level k-1 whose call this differentiates (null for level 0).
  static ag::variable_list forward(ag::AutogradContext* ctx, ag::variable_list inputs, std::shared_ptr<GraphedState> s,
                                   Instance* parent) {
    Instance& L = parent ? child_for_call(*s, *parent) : *s->root;
    if (!parent) {
      for (size_t i = 0; i < s->nargs; ++i)
        copy_static(L.inputs[i], inputs[i]);
    } else {
      const size_t first = inputs.size() - L.cotangents.size();
      for (size_t i = 0; i < L.cotangents.size(); ++i)
        copy_static(L.cotangents[i], inputs[first + i]);
    }
    L.graph->replay();
    ++L.replays;
    L.used = 0;  // its children's values are stale from now on
    ++s->level_replays[size_t(L.level)];
    ag::variable_list out;
    for (const Tensor& o : L.outputs)
      if (o.defined()) out.push_back(o.detach().clone());
    ctx->save_for_backward(inputs);
    ctx->saved_data["state"] = s;
    ctx->saved_data["instance"] = &L;
    ctx->saved_data["generations"] = generations(L);
    return out;
  }

  static ag::variable_list backward(ag::AutogradContext* ctx, ag::variable_list grads) {
    auto s = std::any_cast<std::shared_ptr<GraphedState>>(ctx->saved_data["state"]);
    Instance* I = std::any_cast<Instance*>(ctx->saved_data["instance"]);
    const Instance& L = *I;
    TG_CHECK(L.level < s->max_order, "graphed callable '", s->name, "': a derivative of order ", L.level + 1,
             " was asked for, but only orders up to ", s->max_order, " were captured; raise GraphedOptions::max_order");
    const auto seen = std::any_cast<std::vector<int64_t>>(ctx->saved_data["generations"]);
    TG_CHECK(seen == generations(L), "graphed callable '", s->name,
             "': this call's intermediate "
             "values were overwritten by a later call (its graphs keep one call's values); differentiate "
             "a call before calling the graphed callable again");
    ag::variable_list inputs = ctx->get_saved_variables();
    // The next level's inputs: the inputs that need gradients, then the
    // gradients of the outputs that have cotangents (undefined ones arrive
    // as zeros). Every child of an instance has the same cotangent layout.
    const std::vector<size_t>& cot_of = L.children.front()->cot_of;
    ag::variable_list next;
    for (size_t i = 0; i < inputs.size(); ++i)
      if (L.diff[i]) next.push_back(inputs[i]);
    {
      size_t out_pos = 0, c = 0;
      for (size_t o = 0; o < L.outputs.size(); ++o) {
        if (!L.outputs[o].defined()) continue;
        if (c < cot_of.size() && cot_of[c] == o) {
          next.push_back(grads[out_pos]);
          ++c;
        }
        ++out_pos;
      }
    }
    ag::variable_list g = GraphedLevel::apply(next, s, I);
    // One gradient per input: those in D that got one, in order.
    const Instance& N = *L.children.front();
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

std::shared_ptr<GraphedState> capture_callable(const Callable& c, const std::vector<Tensor>& sample,
                                               const GraphedOptions& o, MempoolId pool, const Stream& side) {
  auto s = std::make_shared<GraphedState>();
  s->name = c.name;
  s->max_order = o.max_order;
  s->warmup_iters = o.warmup_iters;
  s->max_calls = size_t(std::max(1, o.max_calls_per_level));
  s->nargs = sample.size();
  s->params = c.parameters;
  s->device = side.device_index();
  s->level_replays.assign(size_t(o.max_order) + 1, 0);
  s->root = std::make_unique<Instance>();
  Instance& L0 = *s->root;
  for (size_t i = 0; i < sample.size(); ++i) {
    const Tensor& a = sample[i];
    TG_CHECK(a.defined() && a.is_cuda(), "argument ", i, " is ", a.defined() ? shape_dtype_device(a) : "undefined",
             "; graphed callables take CUDA tensors");
    Tensor st = a.detach().clone();
    if (a.requires_grad()) st.requires_grad_();
    L0.inputs.push_back(st);
  }
  for (size_t i = 0; i < c.parameters.size(); ++i) {
    const Tensor& p = c.parameters[i];
    TG_CHECK(p.defined() && p.is_cuda() && p.is_leaf(), "parameter ", i, " must be a CUDA leaf tensor");
    L0.inputs.push_back(p);
  }
  for (const Tensor& t : L0.inputs)
    L0.diff.push_back(t.requires_grad());
  capture_chain(*s, L0, c.fn, side, pool);
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
  const Instance& L0 = *s.root;
  TG_CHECK(args.size() == s.nargs, "graphed callable '", s.name, "': expected ", s.nargs, " arguments, got ",
           args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    const Tensor& a = args[i];
    const Tensor& st = L0.inputs[i];
    TG_CHECK(a.defined() && a.sizes() == st.sizes() && a.dtype() == st.dtype() && a.device() == st.device(),
             "graphed callable '", s.name, "': argument ", i, " is ", a.defined() ? shape_dtype_device(a) : "undefined",
             ", but the graphs were captured for ", shape_dtype_device(st),
             " (a graph has fixed shapes: capture another callable for other shapes)");
    TG_CHECK(!autograd::is_grad_enabled() || a.requires_grad() == st.requires_grad(), "graphed callable '", s.name,
             "': argument ", i, (a.requires_grad() ? " requires" : " does not require"),
             " grad, but the sample argument ", (st.requires_grad() ? "did" : "did not"),
             "; the captured backward computes gradients for the sample's choice");
  }
  std::vector<Tensor> inputs = args;
  inputs.insert(inputs.end(), s.params.begin(), s.params.end());
  return GraphedLevel::apply(inputs, state_, static_cast<Instance*>(nullptr));
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
  return state_->level_replays[size_t(level)];
}

std::vector<GraphedCallable> make_graphed_callables(std::vector<Callable> callables,
                                                    std::vector<std::vector<Tensor>> sample_args,
                                                    GraphedOptions options) {
  TG_CHECK(callables.size() == sample_args.size(), "make_graphed_callables: ", callables.size(), " callables but ",
           sample_args.size(), " sample argument lists");
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

// ---- The graphed-function cache ------------------------------------------------------

namespace {

// Storage addresses of the live outputs of every cache's graphs, by pool:
// an argument found here is "an output of a graph of the same pool".
std::mutex g_outputs_mu;
std::map<const void*, uint64_t> g_pool_outputs;

const void* storage_of(const Tensor& t) { return t.impl()->storage()->data(); }

void forget_outputs(const std::vector<Tensor>& outs) {
  std::lock_guard<std::mutex> lock(g_outputs_mu);
  for (const Tensor& o : outs)
    if (o.defined()) g_pool_outputs.erase(storage_of(o));
}

enum class ArgKind { Ordinary, Static, PoolOutput };

std::string signature(const std::vector<Tensor>& args) {
  std::ostringstream o;
  for (const Tensor& a : args) {
    if (!a.defined()) {
      o << "undefined;";
      continue;
    }
    o << a.dtype() << a.sizes() << a.strides() << a.device() << (a.requires_grad() ? "g" : "") << ";";
  }
  return o.str();
}

uint32_t version_of(const Tensor& t) { return t.impl()->version_counter()->current(); }

}  // namespace

struct GraphedFunction::Impl {
  struct Entry {
    enum class State { Fresh, Record, Graphed, Eager } state = State::Fresh;
    std::vector<ArgKind> kind;
    std::vector<bool> written;
    std::vector<Tensor> written_statics;  // registered static tensors it writes
    std::vector<Tensor> inputs;           // per argument: the graph's copy (ordinary) or the tensor
    std::vector<const void*> address;     // static and pool arguments at recording
    std::unique_ptr<CUDAGraph> graph;
    std::vector<Tensor> outputs;  // the graph's
    std::vector<Tensor> handed;   // aliases of `outputs` handed out by the last call
    int re_records = 0;
    ~Entry() { forget_outputs(outputs); }
  };
  TensorFn fn;
  GraphedFunctionOptions o;
  MempoolId pool;
  GraphedFunctionCounters counters;
  std::map<std::string, Entry> entries;

  std::vector<Tensor> eager(Entry& e, const std::vector<Tensor>& args, std::string reason) {
    if (e.state != Entry::State::Eager) {
      e.state = Entry::State::Eager;
      counters.eager_reasons.push_back(o.name + ": " + std::move(reason));
    }
    ++counters.eager_calls;
    return fn(args);
  }

  // The first call: eagerly, finding what it writes by version counters.
  std::vector<Tensor> warm_up(Entry& e, const std::vector<Tensor>& args) {
    std::vector<Tensor> statics = detail::static_tensors();
    std::vector<uint32_t> before, before_static;
    for (const Tensor& a : args)
      before.push_back(version_of(a));
    for (const Tensor& t : statics)
      before_static.push_back(version_of(t));
    ++counters.warmups;
    std::vector<Tensor> out = fn(args);
    for (Tensor& t : out)
      if (t.defined()) t = t.detach();
    e.kind.clear();
    e.written.clear();
    e.written_statics.clear();
    for (size_t i = 0; i < args.size(); ++i) {
      const Tensor& a = args[i];
      ArgKind k = ArgKind::Ordinary;
      if (!static_name(a).empty()) {
        k = ArgKind::Static;
      } else {
        std::lock_guard<std::mutex> lock(g_outputs_mu);
        auto it = g_pool_outputs.find(storage_of(a));
        if (it != g_pool_outputs.end() && it->second == pool.first) k = ArgKind::PoolOutput;
      }
      e.kind.push_back(k);
      e.written.push_back(version_of(a) != before[i]);
      if (e.written[i] && k == ArgKind::Ordinary) {
        std::ostringstream r;
        r << "writes argument " << i << " (" << shape_dtype_device(a)
          << "), an ordinary tensor (not static, not an output of a graph of this pool): in a graph the "
             "write would land in the graph's copy, so this signature runs eagerly";
        e.state = Entry::State::Eager;
        counters.eager_reasons.push_back(o.name + ": " + r.str());
        return out;
      }
    }
    for (size_t j = 0; j < statics.size(); ++j)
      if (version_of(statics[j]) != before_static[j]) e.written_statics.push_back(statics[j]);
    e.state = Entry::State::Record;
    return out;
  }

  void record(Entry& e, const std::vector<Tensor>& args) {
    forget_outputs(e.outputs);
    e.outputs.clear();
    e.handed.clear();
    e.inputs.clear();
    e.address.clear();
    for (size_t i = 0; i < args.size(); ++i) {
      const bool copy = e.kind[i] == ArgKind::Ordinary;
      e.inputs.push_back(copy ? args[i].detach().clone() : args[i]);
      e.address.push_back(copy ? nullptr : storage_of(args[i]));
    }
    Stream caller = current_stream(args.empty() ? -1 : args[0].device().index());
    Stream side = stream_from_pool(caller.device_index());
    side.wait_stream(caller);
    e.graph = std::make_unique<CUDAGraph>();
    {
      Graph capture(*e.graph, pool, side);
      e.outputs = fn(e.inputs);
    }
    for (Tensor& t : e.outputs)
      if (t.defined()) t = t.detach();
    caller.wait_stream(side);
    std::lock_guard<std::mutex> lock(g_outputs_mu);
    for (size_t i = 0; i < e.outputs.size(); ++i) {
      const Tensor& out = e.outputs[i];
      TG_CHECK(out.defined() && out.is_cuda(), "graphed '", o.name, "': output ", i, " is ",
               out.defined() ? shape_dtype_device(out) : "undefined", "; a graphed function returns CUDA tensors");
      g_pool_outputs[storage_of(out)] = pool.first;
    }
    ++counters.recordings;
    e.state = Entry::State::Graphed;
  }

  std::vector<Tensor> replay(Entry& e, const std::vector<Tensor>& args) {
    {
      autograd::NoGradGuard no_grad;
      for (size_t i = 0; i < args.size(); ++i)
        if (e.kind[i] == ArgKind::Ordinary) e.inputs[i].copy_(args[i]);
      // Outputs of the last call still held by the caller keep their
      // values: they get a copy before the graph overwrites its own.
      for (Tensor& h : e.handed)
        if (h.defined() && h.impl()->use_count() > 1) h.impl()->set_data(*h.clone().impl());
    }
    e.graph->replay();
    ++counters.replays;
    for (size_t i = 0; i < args.size(); ++i)
      if (e.written[i]) args[i].impl()->version_counter()->bump();
    for (const Tensor& t : e.written_statics)
      t.impl()->version_counter()->bump();
    e.handed.clear();
    for (const Tensor& out : e.outputs)
      e.handed.push_back(out.detach());
    return e.handed;
  }

  std::vector<Tensor> call(const std::vector<Tensor>& args) {
    Entry& e = entries[signature(args)];
    if (e.state == Entry::State::Eager) return eager(e, args, "");
    for (size_t i = 0; i < args.size(); ++i)
      if (!args[i].defined() || !args[i].is_cuda())
        return eager(e, args,
                     "argument " + std::to_string(i) + " is " +
                         (args[i].defined() ? shape_dtype_device(args[i]) : "undefined") + ", not a CUDA tensor");
    if (e.state == Entry::State::Fresh) return warm_up(e, args);
    if (e.state == Entry::State::Graphed) {
      // Static and pool arguments are read in place: they must be where
      // they were when the graph was recorded.
      for (size_t i = 0; i < args.size(); ++i) {
        if (e.kind[i] == ArgKind::Ordinary || storage_of(args[i]) == e.address[i]) continue;
        if (e.re_records >= o.max_re_records)
          return eager(e, args,
                       "argument " + std::to_string(i) + " (static or an output of a graph) moved after " +
                           std::to_string(e.re_records) + " re-recordings");
        ++e.re_records;
        ++counters.re_records;
        e.state = Entry::State::Record;
        break;
      }
    }
    if (e.state == Entry::State::Record) {
      try {
        record(e, args);
      } catch (const Error& err) {
        e.graph.reset();
        return eager(e, args, std::string("cannot be captured: ") + err.what());
      }
    }
    return replay(e, args);
  }
};

GraphedFunction::GraphedFunction(TensorFn fn, GraphedFunctionOptions options) : impl_(std::make_shared<Impl>()) {
  impl_->fn = std::move(fn);
  impl_->o = std::move(options);
  impl_->pool = impl_->o.pool.first || impl_->o.pool.second ? impl_->o.pool
                : is_available()                            ? graph_pool_handle()
                                                            : MempoolId{0, 0};
}

std::vector<Tensor> GraphedFunction::operator()(const std::vector<Tensor>& args) { return impl_->call(args); }

const GraphedFunctionCounters& GraphedFunction::counters() const { return impl_->counters; }

MempoolId GraphedFunction::pool() const { return impl_->pool; }

GraphedFunction graphed(TensorFn fn, GraphedFunctionOptions options) {
  return GraphedFunction(std::move(fn), std::move(options));
}

}  // namespace tg::cuda
