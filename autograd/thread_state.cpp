#include "autograd/thread_state.h"

namespace tg::autograd::detail {

thread_local ThreadState t_thread_state;

namespace {
// Owns a thread's storage: a thread_local destroyed with the thread's other
// C++ thread_locals (in the reverse order of their construction). A later
// destructor that reaches autograd (a backward, a hook push) finds no
// storage: a fresh one is made and owned by the next owner, made then (its
// destructor runs in the same round); past two, a storage is left to the
// process.
struct StorageOwner {
  ThreadStorage* storage = nullptr;
  ~StorageOwner() {
    ++t_thread_state.storage_owners_gone;
    t_thread_state.storage = nullptr;
    delete storage;
  }
};
thread_local StorageOwner t_owner;
StorageOwner* owner_for_late_use() {
  static thread_local StorageOwner late;
  return &late;
}
}  // namespace

ThreadStorage& thread_storage() {
  ThreadState& s = t_thread_state;
  if (!s.storage) {
    s.storage = new ThreadStorage();
    if (s.storage_owners_gone == 0) t_owner.storage = s.storage;
    else if (s.storage_owners_gone == 1) owner_for_late_use()->storage = s.storage;
  }
  return *s.storage;
}

Inherited inherit(bool grad_enabled, bool with_hooks) {
  const ThreadState& s = t_thread_state;
  Inherited in;
  in.grad_enabled = grad_enabled;
  in.anomaly_enabled = s.anomaly_enabled;
  in.forward = s.forward;
  if (with_hooks && s.storage && !s.storage->hooks.empty()) in.hooks = s.storage->hooks.back();
  return in;
}

InheritScope::InheritScope(const Inherited& from) {
  ThreadState& s = t_thread_state;
  grad_enabled_ = s.grad_enabled;
  anomaly_enabled_ = s.anomaly_enabled;
  forward_ = s.forward;
  s.grad_enabled = from.grad_enabled;
  s.anomaly_enabled = from.anomaly_enabled;
  s.forward = from.forward;
  pushed_ = from.hooks != nullptr;
  if (pushed_) thread_storage().hooks.push_back(from.hooks);
}

InheritScope::~InheritScope() {
  ThreadState& s = t_thread_state;
  if (pushed_) s.storage->hooks.pop_back();
  s.grad_enabled = grad_enabled_;
  s.anomaly_enabled = anomaly_enabled_;
  s.forward = forward_;
}

}  // namespace tg::autograd::detail
