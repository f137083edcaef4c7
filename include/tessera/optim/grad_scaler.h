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
#include <cstdint>

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
  // loss * scale (loss itself when disabled).
  Tensor scale(const Tensor& loss) const;
  // Divides the gradients of optimizer's parameters by the scale in place and records whether
  // any is inf or nan. Once per step (RuntimeError on a second call before update()).
  void unscale_(Optimizer& optimizer);
  // unscale_ (if not done yet), then optimizer.step() unless a gradient was not finite.
  // Returns whether the optimizer stepped.
  bool step(Optimizer& optimizer);
  // Backs the scale off after a skipped step, grows it after growth_interval good ones.
  void update();

  double get_scale() const { return scale_; }
  bool is_enabled() const { return options_.enabled; }
  // Whether the last unscale_ found an inf or nan.
  bool found_inf() const { return found_inf_; }
  int64_t growth_tracker() const { return growth_tracker_; }
  // For checkpoints: the scale and the count of good steps since it last changed.
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);

 private:
  GradScalerOptions options_;
  double scale_;
  int64_t growth_tracker_ = 0;
  bool unscaled_ = false;
  bool found_inf_ = false;
};

}  // namespace tessera::optim
