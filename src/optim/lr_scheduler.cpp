#include "tessera/optim/lr_scheduler.h"

#include <cmath>
#include <numbers>
#include <string>

namespace tessera::optim {

LRScheduler::LRScheduler(Optimizer& optimizer, Schedule schedule, Ratio chain)
    : optimizer_(optimizer), schedule_(std::move(schedule)), chain_(std::move(chain)) {
  base_lrs_ = optimizer_.initial_lrs();
  apply(/*chained=*/true);
}

void LRScheduler::apply(bool chained) {
  std::vector<ParamGroup>& groups = optimizer_.param_groups();
  TESSERA_CHECK(groups.size() == base_lrs_.size(), ValueError,
                "[LRScheduler] expected the optimizer's ", base_lrs_.size(), " param groups, got ",
                groups.size(), " (groups added after the scheduler?)");
  last_lr_.clear();
  for (size_t g = 0; g < groups.size(); ++g) {
    const double lr = chained && chain_ ? groups[g].options.at("lr") * chain_(last_step_)
                                        : schedule_(last_step_, base_lrs_[g], g);
    groups[g].options.at("lr") = lr;
    last_lr_.push_back(lr);
  }
}

void LRScheduler::step() {
  ++last_step_;
  apply(/*chained=*/true);
}

void LRScheduler::step(int64_t step) {
  last_step_ = step;
  apply(/*chained=*/false);
}

void LRScheduler::set_base_lrs(std::vector<double> base_lrs) {
  TESSERA_CHECK(base_lrs.size() == base_lrs_.size(), ValueError,
                "[LRScheduler.set_base_lrs] expected ", base_lrs_.size(),
                " base lrs (one per param group), got ", base_lrs.size());
  base_lrs_ = std::move(base_lrs);
  apply(/*chained=*/false);
}

StateDict LRScheduler::state_dict() const {
  StateDict out;
  out.scalars.insert("last_step", static_cast<double>(last_step_));
  for (size_t g = 0; g < base_lrs_.size(); ++g)
    out.scalars.insert("base_lrs." + std::to_string(g), base_lrs_[g]);
  return out;
}

void LRScheduler::load_state_dict(const StateDict& state) {
  size_t groups = optimizer_.param_groups().size();
  TESSERA_CHECK(state.scalars.contains("last_step") && state.scalars.size() == groups + 1,
                ValueError, "[LRScheduler.load_state_dict] expected 'last_step' and ", groups,
                " base lrs, got keys ", state.scalars.keys());
  std::vector<double> base_lrs;
  for (size_t g = 0; g < groups; ++g) {
    const double* lr = state.scalars.find("base_lrs." + std::to_string(g));
    TESSERA_CHECK(lr != nullptr, ValueError, "[LRScheduler.load_state_dict] expected 'base_lrs.", g,
                  "', got keys ", state.scalars.keys());
    base_lrs.push_back(*lr);
  }
  base_lrs_ = std::move(base_lrs);
  last_step_ = static_cast<int64_t>(state.scalars.at("last_step"));
  apply(/*chained=*/false);
}

LambdaLR::LambdaLR(Optimizer& optimizer, std::function<double(int64_t)> factor)
    : LRScheduler(optimizer, [factor = std::move(factor)](int64_t step, double base_lr, size_t) {
        return base_lr * factor(step);
      }) {}

namespace {

int64_t checked_step_size(int64_t step_size) {
  TESSERA_CHECK(step_size > 0, ValueError, "[StepLR] expected step_size > 0, got ", step_size);
  return step_size;
}

LRScheduler::Schedule warmup_cosine(int64_t warmup, int64_t max_steps, double min_lr) {
  TESSERA_CHECK(warmup >= 0 && max_steps > warmup, ValueError,
                "[WarmupCosineLR] expected 0 <= warmup_steps < max_steps, got warmup_steps ",
                warmup, " and max_steps ", max_steps);
  return [=](int64_t step, double base_lr, size_t) {
    if (step < warmup) return base_lr * static_cast<double>(step) / static_cast<double>(warmup);
    if (step > max_steps) return min_lr;
    double r = static_cast<double>(step - warmup) / static_cast<double>(max_steps - warmup);
    return min_lr + (base_lr - min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * r));
  };
}

}  // namespace

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(
          optimizer,
          [step_size = checked_step_size(step_size), gamma](int64_t step, double base_lr, size_t) {
            return base_lr * std::pow(gamma, static_cast<double>(step / step_size));
          },
          [step_size, gamma](int64_t step) {
            return step > 0 && step % step_size == 0 ? gamma : 1.0;
          }) {}

WarmupCosineLR::WarmupCosineLR(Optimizer& optimizer, int64_t warmup_steps, int64_t max_steps,
                               double min_lr)
    : LRScheduler(optimizer, warmup_cosine(warmup_steps, max_steps, min_lr)) {}

}  // namespace tessera::optim
