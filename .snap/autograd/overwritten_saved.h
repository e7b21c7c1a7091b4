// Internal (graphed callables, autograd/cuda_graphed.cpp): while a guard is
// alive on this thread, a saved tensor whose version moved since it was
// saved is unpacked without the in-place error. A graphed callable's
// captured history saves its static inputs, which every call overwrites by
// design; capturing a further instance differentiates that history again.
#pragma once

namespace tg::autograd::detail {

class AcceptOverwrittenSaved {
 public:
  AcceptOverwrittenSaved();
  ~AcceptOverwrittenSaved();
  AcceptOverwrittenSaved(const AcceptOverwrittenSaved&) = delete;
  AcceptOverwrittenSaved& operator=(const AcceptOverwrittenSaved&) = delete;
};

}  // namespace tg::autograd::detail
