#pragma once
// Dynamic loss scaling for float16 mixed precision (torch.amp.GradScaler): the loss is multiplied
// by a scale so small float16 gradients do not flush to zero; before the optimizer step the
// gradients are divided by it again and checked; a step whose gradients hold inf or nan is
// skipped and the scale halves; after growth_interval good steps in a row it doubles.
//
//   optim::GradScaler scaler;
//   scaler.scale(loss).backward();
//   scaler.unscale_(optimizer);            // optional: clip the true gradients here
//   scaler.step(optimizer);                // skipped when a gradient is not finite
//   scaler.update();
//
// With several optimizers each is unscaled, checked and stepped on its own; update() backs the
// scale off when any of them found an inf or nan (torch's per-optimizer states).
#include <cstdint>
#include <map>

#include "tessera/core/tensor.h"
#include "tessera/optim/optimizer.h"

namespace tessera::optim {

struct GradScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool enabled = true;  // disabled: scale() and unscale_() do nothing, step() always steps
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});
  // loss * scale (loss itself when disabled); a 16-bit loss is scaled in float32, as torch's
  // float32 scale promotes it (65536 overflows float16).
  Tensor scale(const Tensor& loss) const;
  // Divides the gradients of optimizer's parameters by the scale in place and records whether
  // any is inf or nan. Once per optimizer and step, before its step() (RuntimeError otherwise).
  void unscale_(Optimizer& optimizer);
  // unscale_ (if not done yet), then optimizer.step() unless one of its gradients was not
  // finite. Once per optimizer and step. Returns whether the optimizer stepped.
  bool step(Optimizer& optimizer);
  // Backs the scale off after a step where any optimizer found an inf or nan, grows it after
  // growth_interval good ones. RuntimeError when no unscale_ or step() came since the last.
  void update();
  // Forgets this step's unscale_ and step() records, the scale unchanged: for a loop whose step
  // was abandoned by an exception (otherwise the next unscale_ is refused as a second one).
  void discard_step() { optimizers_.clear(); }

  double get_scale() const { return scale_; }
  bool is_enabled() const { return options_.enabled; }
  // Whether an unscale_ since the last update() found an inf or nan.
  bool found_inf() const;
  int64_t growth_tracker() const { return growth_tracker_; }
  // For checkpoints: the scale and the count of good steps since it last changed.
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);

 private:
  GradScalerOptions options_;
  double scale_;
  int64_t growth_tracker_ = 0;
  // This step's optimizers, by address: unscaled (and whether a gradient was not finite), stepped.
  struct OptimizerState {
    bool unscaled = false, found_inf = false, stepped = false;
  };
  std::map<const Optimizer*, OptimizerState> optimizers_;
};

}  // namespace tessera::optim
