#include "tessera/optim/grad_scaler.h"

#include <cmath>

#include "tessera/autograd/grad_mode.h"
#include "tessera/core/error.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/reduce.h"

namespace tessera::optim {

GradScaler::GradScaler(GradScalerOptions options) : options_(options), scale_(options.init_scale) {
  TESSERA_CHECK(options.init_scale > 0 && std::isfinite(options.init_scale), ValueError,
                "[GradScaler] expected a positive finite init_scale, got ", options.init_scale);
  TESSERA_CHECK(options.growth_factor > 1.0, ValueError,
                "[GradScaler] expected growth_factor > 1, got ", options.growth_factor);
  TESSERA_CHECK(options.backoff_factor > 0.0 && options.backoff_factor < 1.0, ValueError,
                "[GradScaler] expected backoff_factor in (0, 1), got ", options.backoff_factor);
  TESSERA_CHECK(options.growth_interval > 0, ValueError,
                "[GradScaler] expected growth_interval > 0, got ", options.growth_interval);
}

Tensor GradScaler::scale(const Tensor& loss) const {
  return options_.enabled ? loss * scale_ : loss;
}

void GradScaler::unscale_(Optimizer& optimizer) {
  if (!options_.enabled) return;
  TESSERA_CHECK(!unscaled_, RuntimeError,
                "[GradScaler.unscale_] expected one call per step, got a second before update()");
  autograd::NoGradGuard no_grad;
  const double inv = 1.0 / scale_;
  bool found = false;
  for (ParamGroup& group : optimizer.param_groups()) {
    for (Tensor& p : group.params) {
      Tensor g = p.grad();
      if (!g.defined()) continue;
      g.mul_(inv);
      found = found || !all(isfinite(g)).item<bool>();
    }
  }
  found_inf_ = found;
  unscaled_ = true;
}

bool GradScaler::step(Optimizer& optimizer) {
  if (!options_.enabled) {
    optimizer.step();
    return true;
  }
  if (!unscaled_) unscale_(optimizer);
  if (found_inf_) return false;
  optimizer.step();
  return true;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  if (found_inf_) {
    scale_ *= options_.backoff_factor;
    growth_tracker_ = 0;
  } else if (++growth_tracker_ == options_.growth_interval) {
    scale_ *= options_.growth_factor;
    growth_tracker_ = 0;
  }
  unscaled_ = false;
  found_inf_ = false;
}

StateDict GradScaler::state_dict() const {
  StateDict state;
  state.scalars.insert("scale", scale_);
  state.scalars.insert("growth_tracker", static_cast<double>(growth_tracker_));
  return state;
}

void GradScaler::load_state_dict(const StateDict& state) {
  TESSERA_CHECK(state.scalars.contains("scale") && state.scalars.contains("growth_tracker"),
                ValueError,
                "[GradScaler.load_state_dict] expected 'scale' and 'growth_tracker', got a state "
                "without them");
  scale_ = state.scalars.at("scale");
  growth_tracker_ = static_cast<int64_t>(state.scalars.at("growth_tracker"));
}

}  // namespace tessera::optim
