#include <tapegrad/autograd/grad_mode.h>

#include <atomic>

namespace tg::autograd {

namespace {
thread_local bool t_grad_enabled = true;
thread_local bool t_anomaly_enabled = false;
std::atomic<bool> g_edge_trimming{true};
}  // namespace

bool is_grad_enabled() { return t_grad_enabled; }
void set_grad_enabled(bool enabled) { t_grad_enabled = enabled; }
bool is_anomaly_enabled() { return t_anomaly_enabled; }
void set_anomaly_enabled(bool enabled) { t_anomaly_enabled = enabled; }
void set_edge_trimming(bool enabled) { g_edge_trimming.store(enabled); }
bool edge_trimming_enabled() { return g_edge_trimming.load(std::memory_order_relaxed); }

}  // namespace tg::autograd
