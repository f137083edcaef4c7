#include "tessera/optim/adam.h"

#include <map>
#include <tuple>

#include "backend/common/optim_kernels.h"

namespace tessera::optim {

namespace {

Options adam_defaults(const AdamOptions& o, double default_weight_decay) {
  return {{"lr", o.lr},
          {"beta1", o.beta1},
          {"beta2", o.beta2},
          {"eps", o.eps},
          {"weight_decay", o.weight_decay.value_or(default_weight_decay)},
          {"amsgrad", o.amsgrad ? 1.0 : 0.0},
          {"maximize", o.maximize ? 1.0 : 0.0}};
}

std::vector<ParamGroup> single_group(TensorList params) {
  return {ParamGroup{std::move(params), {}}};
}

}  // namespace

Adam::Adam(std::string name, std::vector<ParamGroup> groups, AdamOptions defaults,
           bool decoupled_weight_decay)
    : Optimizer(std::move(name), adam_defaults(defaults, decoupled_weight_decay ? 1e-2 : 0.0)),
      decoupled_weight_decay_(decoupled_weight_decay) {
  add_initial_groups(std::move(groups));
}

Adam::Adam(TensorList params, AdamOptions defaults)
    : Adam("Adam", single_group(std::move(params)), defaults, false) {}
Adam::Adam(std::vector<ParamGroup> groups, AdamOptions defaults)
    : Adam("Adam", std::move(groups), defaults, false) {}
AdamW::AdamW(TensorList params, AdamOptions defaults)
    : Adam("AdamW", single_group(std::move(params)), defaults, true) {}
AdamW::AdamW(std::vector<ParamGroup> groups, AdamOptions defaults)
    : Adam("AdamW", std::move(groups), defaults, true) {}

void Adam::check_options(const Options& o) const {
  check_option(o.at("lr") >= 0.0, "lr >= 0", o.at("lr"));
  check_option(o.at("eps") >= 0.0, "eps >= 0", o.at("eps"));
  check_option(o.at("beta1") >= 0.0 && o.at("beta1") < 1.0, "beta1 in [0, 1)", o.at("beta1"));
  check_option(o.at("beta2") >= 0.0 && o.at("beta2") < 1.0, "beta2 in [0, 1)", o.at("beta2"));
  check_option(o.at("weight_decay") >= 0.0, "weight_decay >= 0", o.at("weight_decay"));
}

namespace {

// The kernels' hyperparameters for one update at `step`.
AdamStepParams step_params(const Options& o, bool decoupled_weight_decay, int64_t step) {
  AdamStepParams h;
  h.lr = o.at("lr");
  h.beta1 = o.at("beta1");
  h.beta2 = o.at("beta2");
  h.eps = o.at("eps");
  h.weight_decay = o.at("weight_decay");
  h.amsgrad = o.at("amsgrad") != 0.0;
  h.maximize = o.at("maximize") != 0.0;
  h.decoupled_weight_decay = decoupled_weight_decay;
  h.step = step;
  return h;
}

}  // namespace

void Adam::update(const Tensor& param, const Tensor& grad, const Options& o, ParamState& state) {
  const AdamStepParams h = step_params(o, decoupled_weight_decay_, ++state.step);
  Tensor exp_avg = state_buffer(state, "exp_avg", param);
  Tensor exp_avg_sq = state_buffer(state, "exp_avg_sq", param);
  Tensor max_exp_avg_sq = h.amsgrad ? state_buffer(state, "max_exp_avg_sq", param) : Tensor();
  call_kernel<adam_step_kernel>(param.device(), param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq,
                                h);
}

void Adam::update_group(const std::vector<Update>& updates, const Options& o) {
  // The lists of one call: parameters alike in device, dtype and step count.
  struct Batch {
    TensorList params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs;
  };
  std::map<std::tuple<DeviceType, int, DType, int64_t>, Batch> batches;
  const bool amsgrad = o.at("amsgrad") != 0.0;
  for (const Update& u : updates) {
    const Device device = u.param.device();
    if (!has_kernel<adam_step_list_kernel>(device.type)) {
      update(u.param, u.grad, o, *u.state);
      continue;
    }
    ParamState& state = *u.state;
    Batch& b = batches[{device.type, device.index, u.param.dtype(), ++state.step}];
    b.params.push_back(u.param);
    b.grads.push_back(u.grad);
    b.exp_avgs.push_back(state_buffer(state, "exp_avg", u.param));
    b.exp_avg_sqs.push_back(state_buffer(state, "exp_avg_sq", u.param));
    if (amsgrad) b.max_exp_avg_sqs.push_back(state_buffer(state, "max_exp_avg_sq", u.param));
  }
  for (const auto& [key, b] : batches)
    call_kernel<adam_step_list_kernel>(b.params[0].device(), b.params, b.grads, b.exp_avgs,
                                       b.exp_avg_sqs, b.max_exp_avg_sqs,
                                       step_params(o, decoupled_weight_decay_, std::get<3>(key)));
}

}  // namespace tessera::optim
