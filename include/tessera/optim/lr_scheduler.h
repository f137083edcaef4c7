#pragma once
// Learning-rate schedules. A scheduler takes each group's base lr from the optimizer's initial
// lrs (the lrs before any scheduler, torch's group["initial_lr"], so that schedulers built one
// after another on an optimizer share a base), sets the lr for step 0 right away (as torch), and
// step() — called after optimizer.step() — advances one step and writes lr = schedule(step,
// base_lr) into every group. A chainable schedule (StepLR, as torch's) instead multiplies each
// group's current lr by its ratio for the step, so it composes with whatever else set the lr;
// step(epoch) and load_state_dict use its closed form. Resuming only needs (last_step, base_lrs).
#include <cstdint>
#include <functional>
#include <vector>

#include "tessera/optim/optimizer.h"

namespace tessera::optim {

class LRScheduler {
 public:
  // The lr of group `group` at `step`, given its base lr.
  using Schedule = std::function<double(int64_t step, double base_lr, size_t group)>;
  // lr(step) / lr(step - 1) of a chainable schedule (torch's recursive get_lr); 1 at step 0.
  using Ratio = std::function<double(int64_t step)>;

  LRScheduler(Optimizer& optimizer, Schedule schedule, Ratio chain = nullptr);
  virtual ~LRScheduler() = default;

  void step();
  // Jumps to `step` and applies its closed-form lr (torch's step(epoch), as SequentialLR
  // restarts one).
  void step(int64_t step);
  // Steps taken since construction (torch's last_epoch).
  int64_t last_step() const { return last_step_; }
  // Sets it without applying (torch's scheduler.last_epoch = ...).
  void set_last_step(int64_t step) { last_step_ = step; }
  Optimizer& optimizer() const { return optimizer_; }
  // The lrs written by the last step (one per group).
  const std::vector<double>& last_lr() const { return last_lr_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  // Replaces the base lrs (torch's scheduler.base_lrs = ...) and applies the current step's lr.
  void set_base_lrs(std::vector<double> base_lrs);
  // Scalars "last_step" and "base_lrs.<g>".
  StateDict state_dict() const;
  // Restores them and rewrites the groups' lrs for last_step.
  void load_state_dict(const StateDict& state);

 private:
  // Writes the lrs of last_step_: by the chain ratio from the current lrs, or the closed form.
  void apply(bool chained);

  Optimizer& optimizer_;
  Schedule schedule_;
  Ratio chain_;
  std::vector<double> base_lrs_;
  std::vector<double> last_lr_;
  int64_t last_step_ = 0;
};

// lr = base_lr * factor(step) (torch's LambdaLR with one lambda for every group).
class LambdaLR : public LRScheduler {
 public:
  LambdaLR(Optimizer& optimizer, std::function<double(int64_t step)> factor);
};

// lr = base_lr * gamma^(step / step_size) (integer division), as torch's StepLR: chainable, so
// step() multiplies the current lr by gamma every step_size steps.
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);
};

// Linear warmup from 0 to base_lr over warmup_steps, then cosine decay to min_lr at max_steps,
// then min_lr:
//   step < warmup:         base_lr * step / warmup
//   warmup <= step <= max: min_lr + (base_lr - min_lr) * (1 + cos(pi * r)) / 2,
//                          r = (step - warmup) / (max - warmup)
//   step > max:            min_lr
class WarmupCosineLR : public LRScheduler {
 public:
  WarmupCosineLR(Optimizer& optimizer, int64_t warmup_steps, int64_t max_steps,
                 double min_lr = 0.0);
};

}  // namespace tessera::optim
