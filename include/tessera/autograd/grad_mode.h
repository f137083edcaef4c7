#pragma once
// Thread-local switches: whether ops record graphs (grad mode), whether they run in inference
// mode (no graph, no version tracking needed, outputs flagged as inference tensors), and whether
// the engine checks every backward output for NaN/Inf (anomaly mode).
namespace tessera::autograd {

struct GradMode {
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

// Disables graph recording in its scope (torch.no_grad()).
class NoGradGuard {
 public:
  NoGradGuard() : prev_(GradMode::is_enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// Sets grad mode to `enabled` in its scope (torch.set_grad_enabled()).
class GradModeGuard {
 public:
  explicit GradModeGuard(bool enabled) : prev_(GradMode::is_enabled()) {
    GradMode::set_enabled(enabled);
  }
  ~GradModeGuard() { GradMode::set_enabled(prev_); }
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool prev_;
};

// No graph recording, and tensors created inside are inference tensors that autograd refuses to
// save (torch.inference_mode()).
class InferenceMode {
 public:
  InferenceMode();
  ~InferenceMode();
  InferenceMode(const InferenceMode&) = delete;
  InferenceMode& operator=(const InferenceMode&) = delete;
  static bool is_enabled();

 private:
  bool prev_grad_, prev_inference_;
};

struct AnomalyMode {
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

// Turns anomaly detection on in its scope (torch.autograd.detect_anomaly()).
class DetectAnomalyGuard {
 public:
  DetectAnomalyGuard() : prev_(AnomalyMode::is_enabled()) { AnomalyMode::set_enabled(true); }
  ~DetectAnomalyGuard() { AnomalyMode::set_enabled(prev_); }
  DetectAnomalyGuard(const DetectAnomalyGuard&) = delete;
  DetectAnomalyGuard& operator=(const DetectAnomalyGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace tessera::autograd
