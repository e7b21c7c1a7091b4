// Thread-local autograd switches: grad mode (recording on/off), anomaly
// detection, and the process-wide edge-trimming switch.
#pragma once

namespace tg::autograd {

///@{

/// Grad mode is per thread (as in PyTorch); on by default.
bool is_grad_enabled();
void set_grad_enabled(bool enabled);
///@}

/// RAII: sets grad mode for a scope and restores the previous value.
class AutoGradMode {
 public:
  /// Sets grad mode to `enabled` until the guard ends.
  explicit AutoGradMode(bool enabled) : prev_(is_grad_enabled()) { set_grad_enabled(enabled); }
  ~AutoGradMode() { set_grad_enabled(prev_); }
  AutoGradMode(const AutoGradMode&) = delete;
  AutoGradMode& operator=(const AutoGradMode&) = delete;

 private:
  bool prev_;
};

/// Grad mode off for a scope (nothing records).
struct NoGradGuard : AutoGradMode {
  NoGradGuard() : AutoGradMode(false) {}
};
/// Grad mode on for a scope.
struct EnableGradGuard : AutoGradMode {
  EnableGradGuard() : AutoGradMode(true) {}
};

///@{

/// Anomaly mode (per thread): every node's outputs are checked for NaN after it
/// runs, and an error names the node and the forward op that created it.
bool is_anomaly_enabled();
void set_anomaly_enabled(bool enabled);
///@}
/// Anomaly mode on for a scope.
class DetectAnomalyGuard {
 public:
  DetectAnomalyGuard() : prev_(is_anomaly_enabled()) { set_anomaly_enabled(true); }
  ~DetectAnomalyGuard() { set_anomaly_enabled(prev_); }
  DetectAnomalyGuard(const DetectAnomalyGuard&) = delete;
  DetectAnomalyGuard& operator=(const DetectAnomalyGuard&) = delete;

 private:
  bool prev_;
};

///@{

/// Edge trimming (docs/AUTOGRAD.md): backward formulas compute only the
/// gradients the running GraphTask needs. Default on; turning it off (process
/// wide) exists only to measure what trimming saves.
void set_edge_trimming(bool enabled);
bool edge_trimming_enabled();
///@}

}  // namespace tg::autograd

namespace tg {
using autograd::EnableGradGuard;
using autograd::NoGradGuard;
}  // namespace tg
