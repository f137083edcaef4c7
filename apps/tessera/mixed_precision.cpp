#include "mixed_precision.h"

#include "tessera/autograd/grad_mode.h"
#include "tessera/core/error.h"

namespace tessera::cli {

MixedPrecision::MixedPrecision(models::CausalLM& master, std::shared_ptr<models::CausalLM> compute)
    : master_params_(master.parameters()), compute_(std::move(compute)) {
  compute_->to(kBFloat16);
  compute_params_ = compute_->parameters();
  TESSERA_ASSERT(master_params_.size() == compute_params_.size(),
                 "the bf16 copy has the master's parameters");
}

void MixedPrecision::pull_weights() {
  autograd::NoGradGuard no_grad;
  for (size_t i = 0; i < master_params_.size(); ++i) compute_params_[i].copy_(master_params_[i]);
}

void MixedPrecision::push_grads() {
  autograd::NoGradGuard no_grad;
  for (size_t i = 0; i < master_params_.size(); ++i) {
    const Tensor g = compute_params_[i].grad();
    if (!g.defined()) continue;
    Tensor master_grad = master_params_[i].grad();
    if (master_grad.defined())
      master_grad.add_(g.to(kFloat32));
    else
      master_params_[i].set_grad(g.to(kFloat32));
  }
  compute_->zero_grad(/*set_to_none=*/true);
}

}  // namespace tessera::cli
