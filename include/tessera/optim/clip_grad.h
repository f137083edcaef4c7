#pragma once
// Gradient utilities: norm clipping (torch.nn.utils.clip_grad_norm_) and accumulation over
// micro-batches.
#include <cstdint>
#include <limits>

#include "tessera/core/tensor.h"

namespace tessera::optim {

inline constexpr double kInfNorm = std::numeric_limits<double>::infinity();

// The norm_type-norm of all the grads of params taken together (the norm of the per-tensor
// norms; kInfNorm gives the largest |g|). A 0-d tensor, float64 if any grad is float64 else
// float32; 0 when no param has a grad.
Tensor grad_norm(const TensorList& params, double norm_type = 2.0);

// Scales every grad in place by min(1, max_norm / (total + 1e-6)), as torch, and returns total,
// the norm before clipping (see grad_norm). error_if_nonfinite: RuntimeError when total is nan
// or inf (otherwise the grads become nan, as torch).
Tensor clip_grad_norm_(const TensorList& params, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);

// Accumulates gradients over micro_steps micro-batches so that they equal the gradient of the
// mean loss over the whole batch: each micro-batch loss is scaled by 1 / micro_steps.
//
//   optim::GradAccumulator accum(4);
//   for (const Batch& micro : loader) {
//     Tensor loss = cross_entropy(model(micro.x), micro.y);
//     if (accum.backward(loss)) {            // true on every 4th micro-batch
//       optim::clip_grad_norm_(params, 1.0);
//       opt.step();
//       opt.zero_grad();
//     }
//   }
class GradAccumulator {
 public:
  explicit GradAccumulator(int64_t micro_steps);
  // Runs (loss / micro_steps).backward(); returns true when it completes a window (time to
  // step the optimizer).
  bool backward(const Tensor& loss);
  // Whether the next backward completes the window (DDP all-reduces only then).
  bool is_last_micro_step() const { return micro_step_ + 1 == micro_steps_; }
  // Position of the next backward in the window, 0..micro_steps-1.
  int64_t micro_step() const { return micro_step_; }
  int64_t micro_steps() const { return micro_steps_; }
  double loss_scale() const { return 1.0 / static_cast<double>(micro_steps_); }

 private:
  int64_t micro_steps_;
  int64_t micro_step_ = 0;
};

}  // namespace tessera::optim
