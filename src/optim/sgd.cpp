#include "tessera/optim/sgd.h"

#include "backend/common/optim_kernels.h"

namespace tessera::optim {

namespace {

Options sgd_defaults(const SGDOptions& o) {
  return {{"lr", o.lr},
          {"momentum", o.momentum},
          {"dampening", o.dampening},
          {"weight_decay", o.weight_decay},
          {"nesterov", o.nesterov ? 1.0 : 0.0},
          {"maximize", o.maximize ? 1.0 : 0.0}};
}

}  // namespace

SGD::SGD(TensorList params, SGDOptions defaults)
    : SGD(std::vector<ParamGroup>{ParamGroup{std::move(params), {}}}, defaults) {}

SGD::SGD(std::vector<ParamGroup> groups, SGDOptions defaults)
    : Optimizer("SGD", sgd_defaults(defaults)) {
  add_initial_groups(std::move(groups));
}

void SGD::check_options(const Options& o) const {
  check_option(o.at("lr") >= 0.0, "lr >= 0", o.at("lr"));
  check_option(o.at("momentum") >= 0.0, "momentum >= 0", o.at("momentum"));
  check_option(o.at("weight_decay") >= 0.0, "weight_decay >= 0", o.at("weight_decay"));
  if (o.at("nesterov") != 0.0) {
    TESSERA_CHECK(o.at("momentum") > 0.0 && o.at("dampening") == 0.0, ValueError, "[", name(),
                  "] expected momentum > 0 and dampening == 0 with nesterov, got momentum ",
                  o.at("momentum"), " and dampening ", o.at("dampening"));
  }
}

void SGD::update(const Tensor& param, const Tensor& grad, const Options& o, ParamState& state) {
  SgdStepParams h;
  h.lr = o.at("lr");
  h.momentum = o.at("momentum");
  h.dampening = o.at("dampening");
  h.weight_decay = o.at("weight_decay");
  h.nesterov = o.at("nesterov") != 0.0;
  h.maximize = o.at("maximize") != 0.0;
  Tensor buf;
  if (h.momentum != 0.0) {
    h.first_step = !has_buffer(state, "momentum_buffer");
    buf = state_buffer(state, "momentum_buffer", param);
  }
  ++state.step;
  call_kernel<sgd_step_kernel>(param.device(), param, grad, buf, h);
}

}  // namespace tessera::optim
