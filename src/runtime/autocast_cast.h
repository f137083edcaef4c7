#pragma once
// Autocast's half of OpScope (internal).
#include <span>

#include "tessera/core/tensor.h"
#include "tessera/ops/op_info.h"

namespace tessera::detail {

// Fills cast[i] with the dtype op's cast policy gives inputs[i] under the current autocast
// state (left undefined where the input stays as it is). True when the op is to widen its
// 16-bit input itself and return float32 (CastPolicy::kFloat32Widening).
bool autocast_inputs(const OpInfo& op, std::span<const Tensor* const> inputs,
                     std::span<Tensor> cast);

// The autocast switches of this thread, saved and restored by activation checkpointing so that
// the recomputed forward runs in the forward's precision.
struct AutocastState {
  bool enabled[kNumDeviceTypes] = {};
  DType dtype[kNumDeviceTypes] = {kBFloat16, kBFloat16};
};
AutocastState autocast_state();
void set_autocast_state(const AutocastState& state);

// Runs its scope under a saved autocast state even inside a backward pass (checkpointing's
// recomputed forward), restoring the thread's state after.
class AutocastStateScope {
 public:
  explicit AutocastStateScope(const AutocastState& state);
  ~AutocastStateScope();
  AutocastStateScope(const AutocastStateScope&) = delete;
  AutocastStateScope& operator=(const AutocastStateScope&) = delete;

 private:
  AutocastState prev_;
  bool prev_no_autocast_;
};

// Switches autocast off in its scope whatever the guards say (the engine's backward pass).
class NoAutocastScope {
 public:
  NoAutocastScope();
  ~NoAutocastScope();
  NoAutocastScope(const NoAutocastScope&) = delete;
  NoAutocastScope& operator=(const NoAutocastScope&) = delete;

 private:
  bool prev_;
};

}  // namespace tessera::detail
