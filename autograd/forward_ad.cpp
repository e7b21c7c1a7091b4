// Forward-mode AD: the dual level, tangents on AutogradMeta, make_dual and
// unpack_dual (docs/AUTOGRAD.md "Forward mode"). The tangent rules live with
// the ops' backward formulas in autograd/ops/.
#include <tapegrad/autograd/forward_ad.h>

#include <atomic>
#include <mutex>
#include <vector>

#include <tapegrad/autograd/autograd_meta.h>
#include <tapegrad/tensor/error.h>

namespace tg::autograd {

namespace {
thread_local uint64_t t_level = 0;  // the active dual level (0: none)
thread_local int64_t t_batch = 0;   // its tangent batch (0: unbatched)
std::atomic<uint64_t> g_next_level{1};

// Every tangent slot made, weakly, so a level can clear its own when it ends
// (a tangent's history may hold its tensor: a cycle until cleared).
std::mutex g_slots_mutex;
std::vector<std::weak_ptr<ForwardGrad>> g_slots;
size_t g_prune_at = 4096;

std::shared_ptr<ForwardGrad> new_slot(uint64_t level) {
  std::shared_ptr<ForwardGrad> s(new ForwardGrad{Tensor(), level});  // not make_shared: the weak
  std::lock_guard<std::mutex> lock(g_slots_mutex);                    // refs keep only the block
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
    s->tangent = Tensor();
    s->level = 0;
  }
}
}  // namespace

namespace forward_ad {

dual_level::dual_level() : dual_level(0) {}

dual_level::dual_level(int64_t batch) {
  TG_CHECK(t_level == 0, "forward_ad::dual_level: a dual level is already active on this thread; "
           "nested levels are not supported (end the outer one first)");
  TG_CHECK(batch >= 0, "forward_ad::dual_level: the tangent batch must be >= 0 (0: unbatched), got ", batch);
  t_level = g_next_level.fetch_add(1);
  t_batch = batch;
}

dual_level::~dual_level() {
  uint64_t level = t_level;
  t_level = 0;
  t_batch = 0;
  clear_level(level);
}

bool is_active() { return t_level != 0; }
int64_t batch_size() { return t_level != 0 ? t_batch : 0; }

uint64_t detail::current_level() { return t_level; }
int64_t detail::current_batch() { return t_batch; }
detail::Suspend::Suspend() : saved_(t_level), saved_batch_(t_batch) { t_level = 0; }
detail::Suspend::Suspend(uint64_t level, int64_t batch) : saved_(t_level), saved_batch_(t_batch) {
  t_level = level;
  t_batch = batch;
}
detail::Suspend::~Suspend() {
  t_level = saved_;
  t_batch = saved_batch_;
}

Tensor make_dual(const Tensor& primal, const Tensor& tangent) {
  TG_CHECK(t_level != 0, "make_dual: no dual level is active; create a forward_ad::dual_level first");
  TG_CHECK(primal.defined() && tangent.defined(), "make_dual: primal and tangent must be defined");
  TG_CHECK(primal.is_floating_point(), "make_dual: the primal must be floating point, got ", primal.dtype());
  IntList want = primal.sizes();
  if (t_batch > 0) want.insert(want.begin(), t_batch);
  TG_CHECK(tangent.sizes() == want && tangent.dtype() == primal.dtype() && tangent.device() == primal.device(),
           "make_dual: the tangent (", tangent.dtype(), " ", tangent.sizes(), " on ", tangent.device(),
           ") must have the primal's shape", t_batch > 0 ? " after the level's batch dimension" : "",
           ", dtype and device (", primal.dtype(), " ", shape_str(want), " on ", primal.device(), ")");
  TG_CHECK(!(t_batch > 0 && primal.is_sparse()), "make_dual: sparse tensors take no batched tangents");
  Tensor dual = primal.view(primal.sizes());  // a view: keeps primal's reverse-mode history
  impl::set_fw_grad(dual, tangent);
  return dual;
}

UnpackedDual unpack_dual(const Tensor& t) {
  UnpackedDual u;
  u.tangent = impl::fw_grad(t);
  if (!t.defined()) return u;
  detail::Suspend no_tangent;  // the primal gets none
  // A view keeping t's reverse-mode history (sparse: a copy, no views).
  u.primal = t.is_sparse() ? t.clone() : t.view(t.sizes());
  return u;
}

}  // namespace forward_ad

namespace impl {

Tensor fw_grad(const Tensor& t) {
  if (t_level == 0) return Tensor();
  AutogradMeta* m = meta(t);
  return m && m->fw && m->fw->level == t_level ? m->fw->tangent : Tensor();
}

std::shared_ptr<ForwardGrad> fw_slot(const Tensor& t) {
  if (t_level == 0 || !t.defined() || !t.is_floating_point()) return nullptr;
  AutogradMeta& m = materialize_meta(t);
  if (!m.fw || m.fw->level != t_level) m.fw = new_slot(t_level);
  return m.fw;
}

void set_fw_grad(const Tensor& t, const Tensor& tangent) {
  if (t_level == 0 || !t.defined()) return;
  TG_CHECK(t.is_floating_point(), "forward AD: a tangent on a ", t.dtype(), " tensor");
  fw_slot(t)->tangent = tangent;
}

}  // namespace impl

}  // namespace tg::autograd
