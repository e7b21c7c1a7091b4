#include <tapegrad/autograd/grad_mode.h>

#include <atomic>

#include "autograd/thread_state.h"

namespace tg::autograd {

namespace {
std::atomic<bool> g_edge_trimming{true};
}  // namespace

bool is_grad_enabled() { return detail::thread_state().grad_enabled; }
void set_grad_enabled(bool enabled) { detail::thread_state().grad_enabled = enabled; }
bool is_anomaly_enabled() { return detail::thread_state().anomaly_enabled; }
void set_anomaly_enabled(bool enabled) { detail::thread_state().anomaly_enabled = enabled; }
void set_edge_trimming(bool enabled) { g_edge_trimming.store(enabled); }
bool edge_trimming_enabled() { return g_edge_trimming.load(std::memory_order_relaxed); }

}  // namespace tg::autograd
