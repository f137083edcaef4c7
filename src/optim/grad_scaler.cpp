#include "tessera/optim/grad_scaler.h"

#include <cmath>

#include "backend/common/optim_kernels.h"
#include "optim/grad_lists.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/core/error.h"
#include "tessera/ops/creation.h"
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
  if (!options_.enabled) return loss;
  return (is_16bit_float(loss.dtype()) ? loss.to(kFloat32) : loss) * scale_;
}

bool GradScaler::found_inf() const {
  for (const auto& [optimizer, state] : optimizers_)
    if (state.found_inf) return true;
  return false;
}

void GradScaler::unscale_(Optimizer& optimizer) {
  if (!options_.enabled) return;
  TESSERA_CHECK(optimizer.steps_param_grads(), ValueError,
                "[GradScaler.unscale_] expected an optimizer that steps its parameters' .grad, "
                "got ",
                optimizer.name(),
                " (it steps gradients that loss scaling does not reach): use bfloat16 autocast");
  OptimizerState& state = optimizers_[&optimizer];
  TESSERA_CHECK(!state.stepped, RuntimeError,
                "[GradScaler.unscale_] expected a call before step(), got one after it");
  TESSERA_CHECK(!state.unscaled, RuntimeError,
                "[GradScaler.unscale_] expected one call per optimizer and step, got a second "
                "before update()");
  autograd::NoGradGuard no_grad;
  TensorList params;
  for (ParamGroup& group : optimizer.param_groups())
    params.insert(params.end(), group.params.begin(), group.params.end());
  const TensorList grads = detail::defined_grads(params);
  const std::vector<TensorList> groups = detail::list_kernel_groups<unscale_kernel>(grads);
  bool found = false;
  if (!groups.empty()) {
    // One launch per dtype into one flag on the device, read back once.
    const Device device = grads[0].device();
    Tensor flag = zeros({}, TensorOptions(kFloat32).with_device(device));
    for (const TensorList& group : groups) {
      const DType acc = group[0].dtype() == kFloat64 ? kFloat64 : kFloat32;
      Tensor inv = full({}, 1.0 / scale_, TensorOptions(acc).with_device(device));
      call_kernel<unscale_kernel>(device, group, inv, flag);
    }
    found = flag.item<float>() != 0.0f;
  } else {
    // Mixed devices or strided gradients: per tensor, checked before scaling as the kernel does.
    for (Tensor g : grads) {
      found = found || !all(isfinite(g)).item<bool>();
      g.mul_(1.0 / scale_);
    }
  }
  state.found_inf = found;
  state.unscaled = true;
}

bool GradScaler::step(Optimizer& optimizer) {
  if (!options_.enabled) {
    optimizer.step();
    return true;
  }
  OptimizerState& state = optimizers_[&optimizer];  // std::map: unscale_ keeps it valid
  TESSERA_CHECK(!state.stepped, RuntimeError,
                "[GradScaler.step] expected one call per optimizer and step, got a second before "
                "update()");
  if (!state.unscaled) unscale_(optimizer);
  state.stepped = true;
  if (state.found_inf) return false;
  optimizer.step();
  return true;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  TESSERA_CHECK(!optimizers_.empty(), RuntimeError,
                "[GradScaler.update] expected an unscale_ or step() since the last update(), got "
                "none (no inf checks were recorded)");
  if (found_inf()) {
    scale_ *= options_.backoff_factor;
    growth_tracker_ = 0;
  } else if (++growth_tracker_ == options_.growth_interval) {
    scale_ *= options_.growth_factor;
    growth_tracker_ = 0;
  }
  optimizers_.clear();
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
