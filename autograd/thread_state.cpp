#include "autograd/thread_state.h"

namespace tg::autograd::detail {

thread_local ThreadState t_thread_state;

namespace {
// Owns a thread's storage; the only thread-local with a destructor. Other
// thread-locals' destructors may run after it (the order is that of their
// construction) and free tensors whose hooks reach autograd: the state then
// points at no storage, and a late use gets a fresh one, left to the
// process (the thread is ending).
struct StorageOwner {
  ThreadStorage* storage = nullptr;
  ~StorageOwner() {
    t_thread_state.storage_gone = true;
    t_thread_state.storage = nullptr;
    delete storage;
  }
};
thread_local StorageOwner t_owner;
}  // namespace

ThreadStorage& thread_storage() {
  ThreadState& s = t_thread_state;
  if (!s.storage) {
    s.storage = new ThreadStorage();
    if (!s.storage_gone) t_owner.storage = s.storage;
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
