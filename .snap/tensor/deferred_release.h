// Releasing shared objects without recursion in proportion to graph depth
// (users record graphs of 10^7 nodes). TensorImpl and Storage go through
// detail::destroy_intrusive (intrusive_ptr.h); autograd nodes hand their
// edges to release_deferred from their destructor. Both share one
// per-thread queue, so a chain node -> saved tensor -> node -> ... of any
// length is freed in a loop, also on threads with small stacks.
#pragma once

#include <memory>

#include <tapegrad/tensor/intrusive_ptr.h>

namespace tg::detail {

// Drops `p`. If this thread is already destroying something, the drop (and
// whatever it frees) happens after that, in the outermost release's loop.
void release_deferred(std::shared_ptr<void> p) noexcept;

}  // namespace tg::detail
