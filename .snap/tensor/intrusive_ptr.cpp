// Deferred destruction: see detail::destroy_intrusive (intrusive_ptr.h) and
// detail::release_deferred (deferred_release.h).
#include "tensor/deferred_release.h"

#include <vector>

namespace tg::detail {

namespace {

// What this thread has still to destroy. While `draining`, releases that
// reach zero are queued here instead of destroyed inside the destructor that
// caused them; the outermost release empties the queue in a loop, so the
// stack depth stays that of one object's destructor.
struct Deferred {
  std::vector<IntrusiveTarget*> objects;
  std::vector<std::shared_ptr<void>> shared;
  ~Deferred();
};

thread_local bool t_draining = false;
// Set once the thread's queue is destroyed (thread exit): later releases on
// this thread destroy at once.
thread_local bool t_dead = false;
thread_local Deferred t_deferred;

Deferred::~Deferred() { t_dead = true; }

template <class F> void drain(F&& first) noexcept {
  t_draining = true;
  first();
  Deferred& q = t_deferred;
  for (;;) {
    if (!q.shared.empty()) {
      std::shared_ptr<void> p = std::move(q.shared.back());
      q.shared.pop_back();
      p.reset();
    } else if (!q.objects.empty()) {
      IntrusiveTarget* p = q.objects.back();
      q.objects.pop_back();
      delete p;
    } else {
      break;
    }
  }
  t_draining = false;
}

}  // namespace

void destroy_intrusive(IntrusiveTarget* p) noexcept {
  if (t_dead) {
    delete p;
  } else if (t_draining) {
    try {
      t_deferred.objects.push_back(p);
    } catch (...) {  // no memory for the queue: destroy now (recursing)
      delete p;
    }
  } else {
    drain([p] { delete p; });
  }
}

void release_deferred(std::shared_ptr<void> p) noexcept {
  if (!p) return;
  if (t_dead) {
    p.reset();
  } else if (t_draining) {
    try {
      t_deferred.shared.push_back(std::move(p));
    } catch (...) {
      p.reset();
    }
  } else {
    drain([&p] { p.reset(); });
  }
}

}  // namespace tg::detail
