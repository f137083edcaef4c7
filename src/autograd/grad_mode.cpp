#include "tessera/autograd/grad_mode.h"

#include <atomic>

namespace tessera::autograd {

namespace {
thread_local bool grad_enabled = true;
thread_local bool inference_enabled = false;
std::atomic<bool> anomaly_enabled{false};
}  // namespace

bool GradMode::is_enabled() { return grad_enabled; }
void GradMode::set_enabled(bool enabled) { grad_enabled = enabled; }

InferenceMode::InferenceMode() : prev_grad_(grad_enabled), prev_inference_(inference_enabled) {
  grad_enabled = false;
  inference_enabled = true;
}
InferenceMode::~InferenceMode() {
  grad_enabled = prev_grad_;
  inference_enabled = prev_inference_;
}
bool InferenceMode::is_enabled() { return inference_enabled; }

bool AnomalyMode::is_enabled() { return anomaly_enabled.load(std::memory_order_relaxed); }
void AnomalyMode::set_enabled(bool enabled) { anomaly_enabled.store(enabled); }

}  // namespace tessera::autograd
