// Forward-mode AD: the dual level, tangents on AutogradMeta, make_dual and
// unpack_dual (docs/AUTOGRAD.md "Forward mode"). The tangent rules live with
// the ops' backward formulas in autograd/ops/.
#include <tapegrad/autograd/forward_ad.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <tapegrad/autograd/autograd_meta.h>
#include <tapegrad/autograd/grad_mode.h>
#include <tapegrad/tensor/error.h>
#include <tapegrad/tensor/ops.h>

#include "autograd/thread_state.h"
#include "tensor/env.h"

namespace tg::autograd {

// A tangent left pending by forward_ad::detail::defer_tangent.
struct PendingTangent {
  Tensor source;
  std::function<Tensor(const Tensor&)> map;
  std::vector<std::pair<Tensor, uint32_t>> versions;  // what map reads, at deferral
  bool grad_mode = false;
  const char* op = "";
  std::mutex mu;
};

namespace {
// The thread's level, its tangent batch (0: unbatched) and Taylor layout,
// whether a DeferTangents lives, and the pending tangents computed in full.
forward_ad::detail::LevelState& level_state() { return autograd::detail::thread_state().forward; }
std::atomic<uint64_t> g_next_level{1};
std::atomic<uint64_t> g_next_gen{1};  // ForwardGrad::gen: unique per tangent set
uint64_t next_gen() { return g_next_gen.fetch_add(1); }

// Every tangent slot made, weakly, so a level can clear its own when it ends
// (a tangent's history may hold its tensor: a cycle until cleared).
std::mutex g_slots_mutex;
std::vector<std::weak_ptr<ForwardGrad>> g_slots;
size_t g_prune_at = 4096;

std::shared_ptr<ForwardGrad> new_slot(uint64_t level) {
  std::shared_ptr<ForwardGrad> s(new ForwardGrad{Tensor(), level, nullptr});  // not make_shared: the weak
  std::lock_guard<std::mutex> lock(g_slots_mutex);                            // refs keep only the block
  if (g_slots.size() >= g_prune_at) {
    size_t kept = 0;
    for (auto& w : g_slots)
      if (!w.expired()) g_slots[kept++] = std::move(w);
    g_slots.resize(kept);
    g_prune_at = std::max<size_t>(4096, 2 * kept);
  }
  g_slots.push_back(s);
  return s;
}

void clear_level(uint64_t level) {
  std::vector<std::shared_ptr<ForwardGrad>> mine;
  {
    std::lock_guard<std::mutex> lock(g_slots_mutex);
    size_t kept = 0;
    for (auto& w : g_slots) {
      std::shared_ptr<ForwardGrad> s = w.lock();
      if (!s) continue;
      if (s->level == level) mine.push_back(std::move(s));
      else g_slots[kept++] = std::move(w);
    }
    g_slots.resize(kept);
  }
  // Outside the lock: dropping a tangent may free tensors whose slots go.
  for (auto& s : mine) {
    Tensor drop = std::move(s->tangent);
    std::shared_ptr<PendingTangent> pending = std::atomic_exchange(&s->pending, std::shared_ptr<PendingTangent>());
    s->tangent = Tensor();
    s->level = 0;
  }
}
}  // namespace

namespace forward_ad {

dual_level::dual_level() : dual_level(0) {}

dual_level::dual_level(int64_t batch) {
  TG_CHECK(level_state().level == 0,
           "forward_ad::dual_level: a dual level is already active on this thread; "
           "nested levels are not supported (end the outer one first)");
  TG_CHECK(batch >= 0, "forward_ad::dual_level: the tangent batch must be >= 0 (0: unbatched), got ", batch);
  level_state().level = g_next_level.fetch_add(1);
  level_state().batch = batch;
}

dual_level::~dual_level() {
  const uint64_t level = level_state().level;
  level_state() = {};  // no level, batch or Taylor layout
  clear_level(level);
}

bool is_active() { return level_state().level != 0; }
int64_t batch_size() { return level_state().level != 0 ? level_state().batch : 0; }

uint64_t detail::current_level() { return level_state().level; }
int64_t detail::current_batch() { return level_state().batch; }
detail::LevelState detail::current_state() { return level_state(); }
detail::Suspend::Suspend() : saved_(current_state()) { level_state().level = 0; }
detail::Suspend::Suspend(const LevelState& state) : saved_(current_state()) { level_state() = state; }
detail::Suspend::~Suspend() { level_state() = saved_; }

detail::DeferTangents::DeferTangents() : prev_(autograd::detail::thread_state().defer_tangents) {
  autograd::detail::thread_state().defer_tangents = true;
}
detail::DeferTangents::~DeferTangents() { autograd::detail::thread_state().defer_tangents = prev_; }
bool detail::deferring_tangents() {
  return tg::detail::switched_on<tg::detail::OffSwitch::kDeferTangents>() &&
         autograd::detail::thread_state().defer_tangents && level_state().level != 0;
}

void detail::defer_tangent(const Tensor& out, const Tensor& source, std::function<Tensor(const Tensor&)> map,
                           std::vector<Tensor> reads, const char* op) {
  auto p = std::make_shared<PendingTangent>();
  p->source = source;
  p->map = std::move(map);
  reads.push_back(source);
  for (Tensor& r : reads)
    if (r.defined()) p->versions.emplace_back(std::move(r), 0u);
  for (auto& [t, v] : p->versions)
    v = t.version();
  p->grad_mode = is_grad_enabled();
  p->op = op;
  std::shared_ptr<ForwardGrad> slot = impl::fw_slot(out);
  TG_CHECK(slot, op, ": no tangent slot for its output");
  slot->tangent = Tensor();
  slot->gen = next_gen();
  std::atomic_store(&slot->pending, std::shared_ptr<PendingTangent>(std::move(p)));
}

namespace {
// The pending map applied to `t` (its source or a block of it), as the op's
// rule would have run: forward mode paused, under the op's grad mode.
Tensor apply_pending(PendingTangent& p, const Tensor& t) {
  for (const auto& [r, v] : p.versions)
    TG_CHECK(r.version() == v, p.op, ": a tensor its Taylor-mode tangent reads (", r.dtype(), " ", shape_str(r.sizes()),
             ") was modified in place (version ", v, " -> ", r.version(),
             ") before the tangent was read; modify a copy, or read the coefficients first");
  detail::Suspend pause;
  AutoGradMode mode(p.grad_mode);
  return p.map(t);
}

// The slot's tangent, computing a pending one (once). The pending pointer is
// read and cleared atomically (engine workers may read a tangent together);
// the tangent is written before the pointer is cleared.
Tensor resolve(ForwardGrad& slot) {
  std::shared_ptr<PendingTangent> p = std::atomic_load(&slot.pending);
  if (!p) return slot.tangent;
  std::lock_guard<std::mutex> lock(p->mu);
  if (std::atomic_load(&slot.pending)) {
    slot.tangent = apply_pending(*p, p->source);
    ++autograd::detail::thread_state().resolved_tangents;
    std::atomic_store(&slot.pending, std::shared_ptr<PendingTangent>());
  }
  return slot.tangent;
}
}  // namespace

int64_t detail::pending_tangents_resolved() { return autograd::detail::thread_state().resolved_tangents; }

Tensor detail::jet_block(const Tensor& t, int j) {
  const TaylorLayout* l = taylor_layout();
  TG_CHECK(l, "jet_block: no Taylor level is active");
  AutogradMeta* m = impl::meta(t);
  if (m && m->view_of && m->view_of->base.defined()) {  // a view: its part of the base's tangent
    const Tensor tan = impl::fw_grad(t);
    if (!tan.defined()) return Tensor();
    Suspend pause;
    return l->block(tan, j);
  }
  if (!m || !m->fw || m->fw->level != level_state().level) return Tensor();
  std::shared_ptr<PendingTangent> p = std::atomic_load(&m->fw->pending);
  if (p) {
    std::lock_guard<std::mutex> lock(p->mu);
    if (std::atomic_load(&m->fw->pending)) {
      Tensor src;
      {
        Suspend pause;
        src = l->block(p->source, j);
      }
      return apply_pending(*p, src);
    }
  }
  const Tensor tan = m->fw->tangent;
  if (!tan.defined()) return Tensor();
  Suspend pause;
  return l->block(tan, j);
}

// ---- Taylor mode ----

namespace {
std::shared_ptr<TaylorLayout> make_layout(int order, int64_t directions,
                                          const std::vector<std::vector<SecondOrderPair>>& groups) {
  TG_CHECK(order >= 1, "taylor_level: the order must be >= 1, got ", order);
  TG_CHECK(directions >= 1, "taylor_level: the number of directions must be >= 1, got ", directions);
  static std::atomic<uint64_t> next_id{1};
  auto l = std::make_shared<TaylorLayout>();
  l->id = next_id.fetch_add(1);
  l->order = order;
  l->directions = directions;
  l->second_rows = order >= 2 ? int64_t(groups.size()) : 0;
  if (order >= 2) {
    TG_CHECK(!groups.empty(), "taylor_level: give at least one second-order group");
    for (size_t q = 0; q < groups.size(); ++q) {
      TG_CHECK(!groups[q].empty(), "taylor_level: second-order group ", q, " has no pairs");
      for (const SecondOrderPair& p : groups[q]) {
        TG_CHECK(p.a >= 0 && p.a < directions && p.b >= 0 && p.b < directions, "taylor_level: pair (", p.a, ", ", p.b,
                 ") of group ", q, " names a direction outside [0, ", directions, ")");
        l->pair_a.push_back(p.a);
        l->pair_b.push_back(p.b);
        l->pair_group.push_back(int64_t(q));
        l->pair_weight.push_back(p.weight);
        l->diagonal = l->diagonal && p.a == p.b;
      }
      l->univariate = l->univariate && groups[q].size() == 1 && groups[q][0].a == int64_t(q) &&
                      groups[q][0].b == int64_t(q) && groups[q][0].weight == 1.0;
    }
    l->univariate = l->univariate && int64_t(groups.size()) == directions;
    TG_CHECK(order == 2 || l->univariate,
             "taylor_level: second-order groups other than the directions "
             "themselves are for order 2 only (order ",
             order, " asked)");
  }
  return l;
}
std::vector<std::vector<SecondOrderPair>> univariate_groups(int64_t k) {
  std::vector<std::vector<SecondOrderPair>> g(static_cast<size_t>(k));
  for (int64_t a = 0; a < k; ++a)
    g[size_t(a)] = {SecondOrderPair{a, a, 1.0}};
  return g;
}
}  // namespace

taylor_level::taylor_level(int order, int64_t directions)
    : layout_(make_layout(order, directions,
                          order >= 2 ? univariate_groups(directions) : std::vector<std::vector<SecondOrderPair>>{})),
      level_(std::make_unique<dual_level>(layout_->batch())) {
  level_state().taylor = layout_.get();
}

taylor_level::taylor_level(int64_t directions, const std::vector<std::vector<SecondOrderPair>>& groups)
    : layout_(make_layout(2, directions, groups)), level_(std::make_unique<dual_level>(layout_->batch())) {
  level_state().taylor = layout_.get();
}

taylor_level::~taylor_level() { level_.reset(); }

const TaylorLayout* taylor_layout() { return level_state().level != 0 ? level_state().taylor : nullptr; }

Tensor make_jet(const Tensor& primal, const std::vector<Tensor>& coefficients) {
  const TaylorLayout* l = taylor_layout();
  TG_CHECK(l, "make_jet: no Taylor level is active; create a forward_ad::taylor_level first");
  TG_CHECK(primal.defined(), "make_jet: the primal must be defined");
  TG_CHECK(int(coefficients.size()) == l->order, "make_jet: the level has order ", l->order, ", got ",
           coefficients.size(), " coefficients");
  std::vector<Tensor> rows;
  for (int j = 1; j <= l->order; ++j) {
    const Tensor& c = coefficients[size_t(j - 1)];
    IntList want = primal.sizes();
    want.insert(want.begin(), l->rows(j));
    if (!c.defined()) {
      rows.push_back(zeros(want, primal.options()));
      continue;
    }
    TG_CHECK(c.sizes() == want && c.dtype() == primal.dtype() && c.device() == primal.device(),
             "make_jet: coefficient ", j, " (", c.dtype(), " ", shape_str(c.sizes()), " on ", c.device(), ") must be ",
             primal.dtype(), " ", shape_str(want), " on ", primal.device(),
             " (the coefficient's rows, then the primal's shape)");
    rows.push_back(c);
  }
  Tensor tangent;
  {
    detail::Suspend pause;
    tangent = rows.size() == 1 ? rows[0] : cat(rows, 0);
  }
  return make_dual(primal, tangent);
}

std::vector<Tensor> jet_coefficients(const Tensor& t) {
  const TaylorLayout* l = taylor_layout();
  TG_CHECK(l, "jet_coefficients: no Taylor level is active");
  std::vector<Tensor> out(size_t(l->order));
  Tensor tan = impl::fw_grad(t);
  if (!tan.defined()) return out;
  detail::Suspend pause;
  for (int j = 1; j <= l->order; ++j)
    out[size_t(j - 1)] = l->block(tan, j);
  return out;
}

Tensor make_dual(const Tensor& primal, const Tensor& tangent) {
  TG_CHECK(level_state().level != 0, "make_dual: no dual level is active; create a forward_ad::dual_level first");
  TG_CHECK(primal.defined() && tangent.defined(), "make_dual: primal and tangent must be defined");
  TG_CHECK(is_differentiable(primal.dtype()), "make_dual: the primal must be floating point, got ", primal.dtype());
  IntList want = primal.sizes();
  if (level_state().batch > 0) want.insert(want.begin(), level_state().batch);
  TG_CHECK(tangent.sizes() == want && tangent.dtype() == primal.dtype() && tangent.device() == primal.device(),
           "make_dual: the tangent (", tangent.dtype(), " ", tangent.sizes(), " on ", tangent.device(),
           ") must have the primal's shape", level_state().batch > 0 ? " after the level's batch dimension" : "",
           ", dtype and device (", primal.dtype(), " ", shape_str(want), " on ", primal.device(), ")");
  TG_CHECK(!(level_state().batch > 0 && primal.is_sparse()), "make_dual: sparse tensors take no batched tangents");
  Tensor dual;
  {
    detail::Suspend pause;               // not a view sharing primal's tangent (PyTorch's
    dual = primal.view(primal.sizes());  // make_dual): an alias keeping its reverse-mode history
  }
  impl::fw_track_alias(dual, primal, /*shares_tangent=*/false);
  impl::set_fw_grad(dual, tangent);
  return dual;
}

UnpackedDual unpack_dual(const Tensor& t) {
  UnpackedDual u;
  u.tangent = impl::fw_grad(t);
  if (!t.defined()) return u;
  {
    detail::Suspend no_tangent;  // the primal gets none
    // A view keeping t's reverse-mode history (sparse: a copy, no views).
    u.primal = t.is_sparse() ? t.clone() : t.view(t.sizes());
  }
  impl::fw_track_alias(u.primal, t, /*shares_tangent=*/false);
  return u;
}

}  // namespace forward_ad

namespace impl {

// ---- views (docs/AUTOGRAD.md "Forward mode") ----
// A view taken inside a dual level records its base (ViewOf). Its tangent is
// that part of the base's: it is read from the base's current tangent
// (again whenever the base's changed: ForwardGrad::gen), and an in-place op
// on the view writes its new tangent into a copy of the base's (a zero one
// when the base has none), which becomes the base's. The part is found from
// the memory layout (which base element each view element is), so every
// view op, and chains of them, map the same way, batched or not.
namespace {

// The view's ViewOf when it shares its base's tangent.
ViewOf* tangent_view(const AutogradMeta* m) {
  return m && m->view_of && m->view_of->base.defined() ? m->view_of.get() : nullptr;
}

// t's slot at the current level when it holds a tangent (or a pending one).
ForwardGrad* live_slot(const Tensor& t) {
  AutogradMeta* m = meta(t);
  if (!(m && m->fw && m->fw->level == level_state().level)) return nullptr;
  if (!(m->fw->tangent.defined() || std::atomic_load(&m->fw->pending))) return nullptr;
  return m->fw.get();
}

// The storage positions of t's elements, row-major.
std::vector<int64_t> positions(const Tensor& t) {
  const IntList& sz = t.sizes();
  const IntList& st = t.strides();
  std::vector<int64_t> out(size_t(t.numel()));
  if (out.empty()) return out;
  std::vector<int64_t> idx(sz.size(), 0);
  int64_t pos = t.storage_offset();
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = pos;
    for (size_t k = sz.size(); k-- > 0;) {
      if (++idx[k] < sz[k]) {
        pos += st[k];
        break;
      }
      pos -= st[k] * (sz[k] - 1);
      idx[k] = 0;
    }
  }
  return out;
}

Tensor index_tensor(const std::vector<int64_t>& v, Device device) {
  Tensor t = empty({int64_t(v.size())}, TensorOptions().dtype(kInt64));
  if (!v.empty()) std::memcpy(t.data_ptr(), v.data(), v.size() * sizeof(int64_t));
  return device == t.device() ? t : t.to(device);
}

// v's read index (and write index): which base element each element of
// `view` is. Under v.mu, forward mode paused.
void build_indices(ViewOf& v, const Tensor& view, const char* op, bool write) {
  if (v.read_index.defined() && (!write || v.write_index.defined())) return;
  const Tensor& base = v.base;
  const std::vector<int64_t> bp = positions(base), vp = positions(view);
  const int64_t n = int64_t(bp.size());
  // storage position -> base element (a table over the base's span when it
  // is dense enough, else a hash map)
  int64_t lo = 0, hi = -1;
  if (n > 0) {
    auto [a, b] = std::minmax_element(bp.begin(), bp.end());
    lo = *a, hi = *b;
  }
  const bool dense = hi - lo + 1 <= 4 * n + 64;
  std::vector<int64_t> table(dense && n > 0 ? size_t(hi - lo + 1) : 0, -1);
  std::unordered_map<int64_t, int64_t> map;
  auto overlap = [&] {
    TG_CHECK(false, op, ": in-place operation in a forward-mode level on a view of a tensor (", base.dtype(), " ",
             shape_str(base.sizes()),
             ") whose elements overlap in memory (an expanded tensor): its tangent has no single place per "
             "element. Use out-of-place ops, or clone() the base first");
  };
  for (int64_t i = 0; i < n; ++i) {
    if (dense) {
      int64_t& e = table[size_t(bp[size_t(i)] - lo)];
      if (e >= 0) overlap();
      e = i;
    } else if (!map.emplace(bp[size_t(i)], i).second) {
      overlap();
    }
  }
  std::vector<int64_t> ri(vp.size());
  for (size_t e = 0; e < vp.size(); ++e) {
    const int64_t p = vp[e];
    int64_t b = -1;
    if (dense) {
      if (p >= lo && p <= hi) b = table[size_t(p - lo)];
    } else if (auto it = map.find(p); it != map.end()) {
      b = it->second;
    }
    TG_CHECK(b >= 0, op, ": forward mode: a view (", shape_str(view.sizes()), ") reaches memory outside its base (",
             shape_str(base.sizes()), "); its tangent cannot be placed");
    ri[e] = b;
  }
  if (!v.read_index.defined()) v.read_index = index_tensor(ri, view.device());
  if (!write) return;
  std::vector<int64_t> wi(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    wi[size_t(i)] = i;
  for (size_t e = 0; e < ri.size(); ++e) {
    int64_t& w = wi[size_t(ri[e])];
    TG_CHECK(w == ri[e], op, ": in-place operation in a forward-mode level on a view (", shape_str(view.sizes()),
             ", strides ", shape_str(view.strides()),
             ") that reaches an element of its base twice (an expanded view): use out-of-place ops");
    w = n + int64_t(e);
  }
  v.write_index = index_tensor(wi, view.device());
}

// The view's part of base tangent bt ([batch] + base's shape). Paused.
Tensor read_part(const ViewOf& v, const Tensor& view, const Tensor& bt, int64_t batch) {
  const int64_t n = v.base.numel();
  Tensor flat = batch > 0 ? bt.reshape({batch, n}) : bt.reshape({n});
  IntList s = view.sizes();
  if (batch > 0) s.insert(s.begin(), batch);
  return flat.index_select(batch > 0 ? 1 : 0, v.read_index).reshape(s);
}

// Base tangent bt (undefined: zero) with the view's part replaced by t. Paused.
Tensor write_part(const ViewOf& v, const Tensor& view, const Tensor& bt, const Tensor& t, int64_t batch) {
  const int64_t n = v.base.numel(), m = view.numel();
  const Tensor& b = v.base;
  IntList flat_n = batch > 0 ? IntList{batch, n} : IntList{n};
  IntList flat_m = batch > 0 ? IntList{batch, m} : IntList{m};
  Tensor flat = bt.defined() ? bt.reshape(flat_n) : zeros(flat_n, b.options());
  Tensor both = cat({flat, t.to(b.dtype()).reshape(flat_m)}, batch > 0 ? 1 : 0);
  IntList s = b.sizes();
  if (batch > 0) s.insert(s.begin(), batch);
  return both.index_select(batch > 0 ? 1 : 0, v.write_index).reshape(s);
}

// A view's tangent: its own while it was taken from the base's current one,
// else read again from the base's.
Tensor view_fw_grad(const Tensor& t, AutogradMeta& m, ViewOf& v) {
  ForwardGrad* bs = live_slot(v.base);
  if (!bs) return m.fw && m.fw->level == level_state().level ? forward_ad::resolve(*m.fw) : Tensor();
  std::lock_guard<std::mutex> lock(v.mu);
  if (m.fw && m.fw->level == level_state().level && m.fw->from_gen == bs->gen &&
      (m.fw->tangent.defined() || std::atomic_load(&m.fw->pending)))
    return forward_ad::resolve(*m.fw);
  const uint64_t gen = bs->gen;
  const Tensor bt = forward_ad::resolve(*bs);
  Tensor tan;
  {
    forward_ad::detail::Suspend pause;
    build_indices(v, t, "forward AD", false);
    tan = read_part(v, t, bt, level_state().batch);
  }
  std::shared_ptr<ForwardGrad> slot = fw_slot(t);
  slot->tangent = tan;
  std::atomic_store(&slot->pending, std::shared_ptr<PendingTangent>());
  slot->gen = next_gen();
  slot->from_gen = gen;
  return tan;
}

}  // namespace

Tensor fw_grad(const Tensor& t) {
  if (level_state().level == 0) return Tensor();
  AutogradMeta* m = meta(t);
  if (!m) return Tensor();
  if (ViewOf* v = tangent_view(m)) return view_fw_grad(t, *m, *v);
  if (!(m->fw && m->fw->level == level_state().level)) return Tensor();
  return forward_ad::resolve(*m->fw);
}

bool has_fw_grad(const Tensor& t) {
  if (level_state().level == 0) return false;
  AutogradMeta* m = meta(t);
  if (!m) return false;
  if (m->fw && m->fw->level == level_state().level && (std::atomic_load(&m->fw->pending) || m->fw->tangent.defined()))
    return true;
  ViewOf* v = tangent_view(m);
  return v && live_slot(v->base);
}

std::shared_ptr<ForwardGrad> fw_slot(const Tensor& t) {
  if (level_state().level == 0 || !t.defined() || !is_differentiable(t.dtype())) return nullptr;
  AutogradMeta& m = materialize_meta(t);
  if (!m.fw || m.fw->level != level_state().level) m.fw = new_slot(level_state().level);
  return m.fw;
}

void set_fw_grad(const Tensor& t, const Tensor& tangent) {
  if (level_state().level == 0 || !t.defined()) return;
  TG_CHECK(is_differentiable(t.dtype()), "forward AD: a tangent on a ", t.dtype(), " tensor");
  std::shared_ptr<ForwardGrad> slot = fw_slot(t);
  slot->tangent = tangent;
  std::atomic_store(&slot->pending, std::shared_ptr<PendingTangent>());
  slot->gen = next_gen();
  // A view's tangent set by its op is its base's part (taken from the base's
  // current tangent, the view op's rule): valid until the base's changes.
  if (ViewOf* v = tangent_view(meta(t))) {
    ForwardGrad* bs = live_slot(v->base);
    slot->from_gen = bs ? bs->gen : 0;
  }
}

void fw_track_alias(const Tensor& out, const Tensor& self, bool shares_tangent) {
  if (level_state().level == 0 || !out.defined() || !self.defined() || out.is_same(self)) return;
  if (out.is_sparse() || self.is_sparse() || !is_differentiable(out.dtype())) return;  // never a tangent
  if (out.impl()->storage().get() != self.impl()->storage().get()) return;             // a copy
  AutogradMeta& sm = materialize_meta(self);
  std::shared_ptr<std::atomic<int64_t>> count;
  Tensor base;
  {
    std::lock_guard<std::mutex> lock(sm.mutex);
    if (sm.view_of) {
      count = sm.view_of->count;
    } else {
      if (!sm.sharers) sm.sharers = std::make_shared<std::atomic<int64_t>>(0);
      count = sm.sharers;
    }
    if (shares_tangent) base = sm.view_of && sm.view_of->base.defined() ? sm.view_of->base : self;
  }
  auto v = std::make_shared<ViewOf>();
  v->base = std::move(base);
  count->fetch_add(1);
  v->count = std::move(count);
  materialize_meta(out).view_of = std::move(v);
}

void fw_check_inplace(const Tensor& self, const char* op) {
  if (level_state().level == 0 || !self.defined() || self.is_sparse() || !is_differentiable(self.dtype())) return;
  const auto& storage = self.impl()->storage();
  TG_CHECK(!storage || !storage->viewed_across_dtypes(), op, ": in-place operation in a forward-mode level on a ",
           self.dtype(), " tensor (shape ", shape_str(self.sizes()),
           ") whose memory a complex view shares (view_as_real / view_as_complex / real / imag): forward mode "
           "cannot carry its tangent across dtypes. clone() it "
           "first, or use out-of-place ops");
  AutogradMeta* m = meta(self);
  ViewOf* v = tangent_view(m);
  const Tensor& root = v ? v->base : self;
  AutogradMeta* rm = meta(root);
  // A root made inside a level (make_dual, detach) shares memory only with
  // tensors made from it there (tracked) or with tensors that do not share
  // its tangent. Any other root: every tensor sharing its memory must be
  // one tracked from it, else it may be a view the tangent cannot reach.
  // A tensor that is its whole storage (no view: a leaf, a result), written
  // in place, keeps its own tangent right; tensors sharing that memory
  // untracked (views taken outside the level, or those a rule saved while
  // paused: linear's w.t() for the backward of a loss still alive) do not see
  // it, as documented. A partial view that is not tracked would leave its
  // base's tangent stale: refused below.
  const bool whole_storage = !v && self.storage_offset() == 0 && self.is_contiguous() &&
                             size_t(self.numel()) * element_size(self.dtype()) == self.impl()->storage()->nbytes();
  if (!(rm && rm->view_of) && !whole_storage) {
    const int64_t known = rm && rm->sharers ? rm->sharers->load() : 0;
    const int64_t users = int64_t(root.impl()->storage().use_count());
    TG_CHECK(users - 1 - known <= 0, op, ": in-place operation in a forward-mode level on a tensor (", self.dtype(),
             " ", shape_str(self.sizes()), v ? ", a view" : "",
             ") that shares memory with a tensor forward mode does not track (a view, detach() or as_strided() "
             "alias taken outside the dual level, or the tensor such a view was taken from): in-place ops on "
             "views are supported only for views taken inside the dual level, whose tangent is their part of "
             "their base's. Take the view inside the level, or use out-of-place ops (y = x * 2, cat) or "
             "clone() first");
  }
  if (v) {
    std::lock_guard<std::mutex> lock(v->mu);
    forward_ad::detail::Suspend pause;
    build_indices(*v, self, op, true);
  }
}

void set_fw_grad_inplace(const Tensor& self, const Tensor& tangent) {
  if (level_state().level == 0 || !self.defined() || !tangent.defined()) return;
  ViewOf* v = tangent_view(meta(self));
  if (!v || self.is_sparse()) {
    set_fw_grad(self, tangent);
    return;
  }
  const Tensor base = v->base;
  const Tensor bt = fw_grad(base);
  Tensor nb;
  {
    std::lock_guard<std::mutex> lock(v->mu);
    forward_ad::detail::Suspend pause;
    build_indices(*v, self, "forward AD", true);
    nb = write_part(*v, self, bt, tangent, level_state().batch);
  }
  set_fw_grad(base, nb);
  set_fw_grad(self, tangent);  // its part of the base's new tangent
}

}  // namespace impl

}  // namespace tg::autograd
