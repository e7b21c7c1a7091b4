// The autograd state of one thread, in one place (docs/AUTOGRAD.md "Thread
// state"): grad and anomaly mode, the forward-mode / Taylor level and its
// deferral, the structure probe, the saved-tensor hooks, the engine's task
// and reentrant depth. A device worker
// takes over the part its caller's nodes must see (Inherited) as a unit
// and gives its own back when the node is done (InheritScope).
//
// ThreadState is plain data, constant-initialized, so reading it costs no
// initialization check; what owns memory (the hooks stack, the engine's task
// pool, Taylor mode's pair tensors) is in ThreadStorage, made on a thread's
// first use of it and freed when the thread ends (also when a later
// thread_local's destructor uses autograd again).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <tapegrad/autograd/forward_ad.h>
#include <tapegrad/autograd/saved_hooks.h>

namespace tg::autograd {

namespace detail {

struct GraphTask;
struct ThreadStorage;

struct ThreadState {
  // grad_mode.h
  bool grad_enabled = true;
  bool anomaly_enabled = false;
  // forward_ad.h: the active dual / Taylor level (level 0: none), whether a
  // DeferTangents lives, and how many pending tangents were computed in full
  forward_ad::detail::LevelState forward{};
  bool defer_tangents = false;
  int64_t resolved_tangents = 0;
  // the op table: > 0 inside an op (its composites are checked through it)
  int op_depth = 0;
  // Taylor mode's structure probe (StructureProbe)
  bool probe_armed = false;
  bool probe_found = false;
  // saved_variable.h: AcceptOverwrittenSaved guards alive
  int accept_overwritten = 0;
  // the engine: the task running on this thread, the reentrant depth, and
  // whether this thread's tasks run every node inline (device workers, and
  // threads that continue a deep reentrant backward)
  GraphTask* task = nullptr;
  int reentrant_depth = 0;
  bool run_inline = false;
  ThreadStorage* storage = nullptr;  // thread_storage() makes it
  int storage_owners_gone = 0;       // the thread is ending: owners of its storage destroyed
};

struct ThreadStorage {
  std::vector<std::shared_ptr<const SavedTensorHooks>> hooks;  // the saved-tensor hooks stack
  std::shared_ptr<void> engine;                                // the engine's tasks by reentrant depth (engine.cpp)
  std::shared_ptr<void> taylor;                                // Taylor mode's pair tensors (ops/taylor.cpp)
};

extern thread_local ThreadState t_thread_state;
inline ThreadState& thread_state() { return t_thread_state; }
ThreadStorage& thread_storage();
// The T in one of ThreadStorage's slots (engine, taylor), made on first use.
template <class T> T& storage_slot(std::shared_ptr<void>& slot) {
  if (!slot) slot = std::make_shared<T>();
  return *static_cast<T*>(slot.get());
}

// What a device worker running a task's node takes over from the thread that
// started the task: grad mode (the task's create_graph), anomaly mode, the
// forward-mode level and the saved-tensor hooks.
struct Inherited {
  bool grad_enabled = false;
  bool anomaly_enabled = false;
  forward_ad::detail::LevelState forward{};
  std::shared_ptr<const SavedTensorHooks> hooks;
};
// The calling thread's, with grad mode `grad_enabled`; the hooks only when
// `with_hooks` (a task whose nodes all run on the caller needs none).
Inherited inherit(bool grad_enabled, bool with_hooks);

// Sets the thread's inherited part to `from` (the hooks pushed on its
// stack) and restores the thread's own when it ends.
class InheritScope {
 public:
  explicit InheritScope(const Inherited& from);
  ~InheritScope();
  InheritScope(const InheritScope&) = delete;
  InheritScope& operator=(const InheritScope&) = delete;

 private:
  bool grad_enabled_, anomaly_enabled_;
  forward_ad::detail::LevelState forward_;
  bool pushed_;
};

}  // namespace detail
}  // namespace tg::autograd
