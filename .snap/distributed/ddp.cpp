// DistributedDataParallel's reducer (docs/DISTRIBUTED.md "Data parallel"):
// gradient buckets filled from the parameters' post-accumulate-grad hooks
// and all-reduced, in bucket order on every rank, as soon as each is
// complete; events order every stream, nothing waits on the host.
#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include <tapegrad/autograd/autograd_meta.h>
#include <tapegrad/autograd/engine.h>
#include <tapegrad/autograd/grad_mode.h>
#include <tapegrad/autograd/node.h>
#include <tapegrad/cuda/allocator.h>
#include <tapegrad/cuda/capture.h>
#include <tapegrad/distributed/distributed.h>
#include <tapegrad/nn/module.h>
#include <tapegrad/tensor/error.h>
#include <tapegrad/tensor/ops.h>

namespace tg::distributed {

class DistributedDataParallel::Reducer {
 public:
  Reducer(std::vector<Tensor> params, std::shared_ptr<ProcessGroup> group, DDPOptions o)
      : params_(std::move(params)),
        group_(std::move(group)),
        options_(o),
        ready_(params_.size(), 0),
        grad_ready_(params_.size()) {
    std::vector<size_t> order(params_.size());
    for (size_t i = 0; i < order.size(); ++i)
      order[i] = order.size() - 1 - i;  // reverse of registration
    build_buckets(order);
    for (size_t i = 0; i < params_.size(); ++i)
      hooks_.push_back(params_[i].register_post_accumulate_grad_hook([this, i](const Tensor&) { on_ready(i); }));
  }
  ~Reducer() {
    for (HookHandle& h : hooks_)
      h.remove();
  }

  // forward(): arms the reducer for the backward of `output`.
  void arm(const Tensor& output) {
    std::lock_guard<std::mutex> l(m_);
    if (armed_) {
      std::string missing;
      bool any = false;
      for (size_t i = 0; i < params_.size(); ++i) {
        any |= ready_[i] != 0;
        if (!ready_[i] && missing.size() < 400)
          missing += " " + std::to_string(i) + " " + shape_str(params_[i].sizes());
      }
      TG_CHECK(!any, "DistributedDataParallel: the previous iteration's backward did not finish (it failed ",
               "part way): parameters", missing, " got no gradient and their buckets were never reduced; the ",
               "other ranks' all-reduce cannot complete either (they report a timeout)");
    }
    if (options_.rebuild_buckets && !rebuilt_ && iterations_ > 0 && !cuda::is_current_stream_capturing()) {
      rebuild_from_rank0_order();
      rebuilt_ = true;
    }
    std::fill(ready_.begin(), ready_.end(), 0);
    for (Bucket& b : buckets_)
      b.pending = b.params.size();
    next_bucket_ = 0;
    caller_ = cuda::current_stream(group_->device());
    armed_event_ = std::make_unique<cuda::Event>(true);
    armed_event_->record(caller_);
    armed_ = true;
    if (options_.find_unused_parameters) mark_unused(output);
  }

  void set_no_sync(bool on) { no_sync_ = on; }
  bool no_sync() const { return no_sync_; }

  void synchronize() {
    std::shared_ptr<Work> w;
    {
      std::lock_guard<std::mutex> l(m_);
      w = last_work_;
    }
    if (w) w->synchronize();
  }

  std::vector<std::vector<size_t>> buckets() const {
    std::vector<std::vector<size_t>> out;
    for (const Bucket& b : buckets_)
      out.push_back(b.params);
    return out;
  }

  Timeline timeline() {
    synchronize();
    std::lock_guard<std::mutex> l(m_);
    Timeline t;
    if (!timeline_armed_) return t;
    if (last_grad_) t.last_gradient = timeline_armed_->elapsed_time(*last_grad_);
    for (Bucket& b : buckets_) {
      t.bucket_start.push_back(timeline_armed_->elapsed_time(*b.start));
      t.bucket_end.push_back(timeline_armed_->elapsed_time(*b.end));
    }
    return t;
  }

 private:
  struct Bucket {
    std::vector<size_t> params;
    std::vector<int64_t> offsets;
    Tensor flat;
    size_t pending = 0;
    std::unique_ptr<cuda::Event> start, end;
  };

  void build_buckets(const std::vector<size_t>& order) {
    buckets_.clear();
    bucket_of_.assign(params_.size(), 0);
    size_t bytes = 0;
    for (size_t i : order) {
      const Tensor& p = params_[i];
      const size_t nb = size_t(p.numel()) * element_size(p.dtype());
      // The open bucket's cap: the first one's is smaller (it starts early).
      const size_t cap = buckets_.size() == 1 ? options_.first_bucket_cap_bytes : options_.bucket_cap_bytes;
      const bool fresh =
          buckets_.empty() || params_[buckets_.back().params.back()].dtype() != p.dtype() || bytes + nb > cap;
      if (fresh) {
        buckets_.emplace_back();
        bytes = 0;
      }
      Bucket& b = buckets_.back();
      b.offsets.push_back(b.params.empty() ? 0 : b.offsets.back() + params_[b.params.back()].numel());
      b.params.push_back(i);
      bucket_of_[i] = buckets_.size() - 1;
      bytes += nb;
    }
    cuda::StreamGuard on_comm(group_->stream());
    for (Bucket& b : buckets_) {
      const Tensor& last = params_[b.params.back()];
      b.flat = tg::empty({b.offsets.back() + last.numel()}, TensorOptions().dtype(last.dtype()).device(last.device()));
      // Its slices become the gradients themselves: accumulated in place.
      if (options_.gradient_as_bucket_view) b.flat.impl()->storage()->set_gradient_bucket(true);
      b.start = std::make_unique<cuda::Event>(true);
      b.end = std::make_unique<cuda::Event>(true);
    }
  }

  // The buckets in the order gradients arrived in the first iteration — rank
  // 0's order, so that every rank builds the same buckets.
  // Parameters that got no gradient go last (in reverse registration order):
  // their bucket waits for the end of backward, the others need not.
  void rebuild_from_rank0_order() {
    std::vector<char> in(params_.size(), 0);
    for (size_t i : order_seen_)
      in[i] = 1;
    for (size_t i = params_.size(); i-- > 0;)
      if (!in[i]) order_seen_.push_back(i);
    std::vector<double> seen(order_seen_.begin(), order_seen_.end());
    Tensor t =
        tg::tensor(seen, {int64_t(seen.size())}, TensorOptions().dtype(kInt64)).to(Device(kCUDA, group_->device()));
    group_->broadcast(t, 0)->wait();
    std::vector<int64_t> order = t.to(Device(kCPU)).to_vector<int64_t>();
    std::vector<size_t> o(order.begin(), order.end());
    build_buckets(o);
  }

  // Parameters the output's graph does not reach get no gradient: ready now.
  void mark_unused(const Tensor& output) {
    std::unordered_map<const autograd::Node*, size_t> leaf;
    std::vector<std::shared_ptr<autograd::Node>> hold;
    for (size_t i = 0; i < params_.size(); ++i) {
      hold.push_back(autograd::impl::grad_accumulator(params_[i]));
      if (hold.back()) leaf[hold.back().get()] = i;
    }
    std::vector<char> reached(params_.size(), 0);
    std::unordered_set<const autograd::Node*> seen;
    std::vector<const autograd::Node*> stack;
    const autograd::Edge root = autograd::impl::gradient_edge(output);
    if (root.is_valid()) stack.push_back(root.function.get());
    while (!stack.empty()) {  // iterative: graphs may be deep
      const autograd::Node* n = stack.back();
      stack.pop_back();
      if (!seen.insert(n).second) continue;
      if (auto it = leaf.find(n); it != leaf.end()) reached[it->second] = 1;
      for (const autograd::Edge& e : n->next_edges())
        if (e.is_valid()) stack.push_back(e.function.get());
    }
    for (size_t i = 0; i < params_.size(); ++i)
      if (!reached[i]) ready_locked(i, false);
  }

  // The post-accumulate-grad hook of parameter i.
  void on_ready(size_t i) {
    // Inner derivative passes (create_graph) and no_sync accumulate only.
    if (no_sync_ || autograd::is_grad_enabled()) return;
    std::lock_guard<std::mutex> l(m_);
    if (!armed_) return;  // a backward not preceded by forward(): as PyTorch, no reduction
    TG_CHECK(!ready_[i], "DistributedDataParallel: parameter ", i, " ", shape_str(params_[i].sizes()),
             " got a second gradient in one iteration (two backward passes through one forward()); call "
             "forward() again for each backward, or use no_sync() for all but the last");
    if (!rebuilt_ && order_seen_.size() < params_.size()) order_seen_.push_back(i);
    if (!finalize_queued_) {
      // Parameters the loss does not reach get no gradient and no hook: at
      // the end of this backward, their buckets go out with zeros for them.
      autograd::queue_callback([this] { finalize(); });
      finalize_queued_ = true;
    }
    ready_locked(i, true);
  }

  // The end of the backward: every bucket not yet launched goes out, in
  // order, with zeros for the parameters that got no gradient.
  void finalize() {
    std::lock_guard<std::mutex> l(m_);
    finalize_queued_ = false;
    if (!armed_) return;
    for (size_t i = 0; i < params_.size(); ++i)
      if (!ready_[i]) ready_locked(i, false);
  }

  void ready_locked(size_t i, bool has_grad) {
    ready_[i] = 1;
    if (has_grad) {
      if (!grad_ready_[i]) grad_ready_[i] = std::make_unique<cuda::Event>();
      grad_ready_[i]->record(cuda::current_stream(group_->device()));
      if (!last_grad_) last_grad_ = std::make_unique<cuda::Event>(true);
      last_grad_->record(cuda::current_stream(group_->device()));
    }
    if (--buckets_[bucket_of_[i]].pending > 0) return;
    while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0)
      launch(next_bucket_++);
    if (next_bucket_ == buckets_.size()) finish();
  }

  // Bucket b: gather its gradients, average across ranks, scatter back; all
  // on the communication stream after the producers' events.
  void launch(size_t bi) {
    Bucket& b = buckets_[bi];
    const cuda::Stream comm = group_->stream();
    NoGradGuard no_grad;
    for (size_t i : b.params)
      if (ready_[i] && grad_ready_[i] && params_[i].grad().defined()) grad_ready_[i]->block(comm);
    cuda::StreamGuard on_comm(comm);
    b.start->record(comm);
    for (size_t k = 0; k < b.params.size(); ++k) {
      const Tensor& p = params_[b.params[k]];
      Tensor slice = b.flat.narrow(0, b.offsets[k], p.numel());
      const Tensor& g = p.grad();
      if (g.defined()) {
        TG_CHECK(!g.is_sparse(), "DistributedDataParallel: parameter ", b.params[k],
                 " has a sparse gradient; only dense gradients are reduced");
        if (!views(g, slice)) slice.copy_(g.reshape({p.numel()}));  // a view: accumulated in place already
      } else {
        slice.zero_();
      }
    }
    last_work_ = group_->all_reduce(b.flat, ReduceOp::Avg);
    for (size_t k = 0; k < b.params.size(); ++k) {
      Tensor p = params_[b.params[k]];
      Tensor flat_slice = b.flat.narrow(0, b.offsets[k], p.numel());
      Tensor slice = flat_slice.view(p.sizes());
      Tensor& g = p.mutable_grad();
      if (g.defined() && views(g, flat_slice)) continue;  // reduced in place
      if (options_.gradient_as_bucket_view) {
        // The old gradient was read on this stream (copied in): its memory
        // waits for that before it is reused.
        if (g.defined() && g.impl()->storage()->allocator()) cuda::record_stream(g.impl()->storage()->data(), comm);
        g = slice;
        continue;
      }
      if (!g.defined()) {
        cuda::StreamGuard on_caller(caller_);
        g = tg::empty(p.sizes(), p.options());
      }
      g.copy_(slice);
      if (g.impl()->storage()->allocator()) cuda::record_stream(g.impl()->storage()->data(), comm);
    }
    b.end->record(comm);
  }

  // Whether gradient g is the bucket's slice itself (gradient_as_bucket_view).
  static bool views(const Tensor& g, const Tensor& slice) {
    return g.impl()->storage().get() == slice.impl()->storage().get() && g.data_ptr() == slice.data_ptr() &&
           g.numel() == slice.numel() && g.is_contiguous();
  }

  void finish() {
    ++iterations_;
    finished_.record(group_->stream());
    finished_.block(caller_);
    timeline_armed_ = std::move(armed_event_);
    armed_ = false;
  }

  std::vector<Tensor> params_;
  std::shared_ptr<ProcessGroup> group_;
  DDPOptions options_;
  std::vector<HookHandle> hooks_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;
  std::vector<char> ready_;
  std::vector<std::unique_ptr<cuda::Event>> grad_ready_;
  std::vector<size_t> order_seen_;
  size_t next_bucket_ = 0, iterations_ = 0;
  bool armed_ = false, rebuilt_ = false, no_sync_ = false, finalize_queued_ = false;
  cuda::Stream caller_;
  cuda::Event finished_;
  std::unique_ptr<cuda::Event> armed_event_, timeline_armed_, last_grad_;
  std::shared_ptr<Work> last_work_;
  std::mutex m_;
};

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module,
                                                 std::shared_ptr<ProcessGroup> group, DDPOptions options)
    : module_(std::move(module)), group_(std::move(group)) {
  TG_CHECK(module_ && group_, "DistributedDataParallel: a module and a process group are needed");
  std::vector<Tensor> params;
  const nn::NamedTensors named = module_->named_parameters();
  for (const auto& [name, p] : named) {
    TG_CHECK(p.is_cuda() && p.device().index() == group_->device(), "DistributedDataParallel: parameter '", name,
             "' is on ", p.device(), ", not on the group's device cuda:", group_->device(),
             " (move the module there first: module->to(device))");
    if (p.requires_grad()) params.push_back(p);
  }
  // Every rank starts from rank 0's parameters and buffers.
  {
    NoGradGuard no_grad;
    std::shared_ptr<Work> w;
    for (const Tensor& p : module_->parameters())
      w = group_->broadcast(p, 0);
    for (const Tensor& b : module_->buffers())
      w = group_->broadcast(b, 0);
    if (w) w->wait();
  }
  reducer_ = std::make_unique<Reducer>(std::move(params), group_, options);
}

DistributedDataParallel::~DistributedDataParallel() = default;

Tensor DistributedDataParallel::forward(const Tensor& x) {
  Tensor out = module_->forward(x);
  if (autograd::is_grad_enabled()) reducer_->arm(out);
  return out;
}

DistributedDataParallel::NoSync::NoSync(DistributedDataParallel& ddp) : ddp_(ddp), previous_(ddp.reducer_->no_sync()) {
  ddp_.reducer_->set_no_sync(true);
}
DistributedDataParallel::NoSync::~NoSync() { ddp_.reducer_->set_no_sync(previous_); }

void DistributedDataParallel::synchronize() { reducer_->synchronize(); }

std::vector<std::vector<size_t>> DistributedDataParallel::buckets() const { return reducer_->buckets(); }

DistributedDataParallel::Timeline DistributedDataParallel::timeline() { return reducer_->timeline(); }

}  // namespace tg::distributed
