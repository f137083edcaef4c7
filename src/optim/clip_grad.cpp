#include "tessera/optim/clip_grad.h"

#include <cmath>

#include "tessera/autograd/grad_mode.h"
#include "tessera/ops/creation.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/reduce.h"
#include "tessera/ops/shape.h"

namespace tessera::optim {

namespace {

TensorList defined_grads(const TensorList& params) {
  TensorList grads;
  for (const Tensor& p : params) {
    if (Tensor g = p.grad(); g.defined()) grads.push_back(g.detach());
  }
  return grads;
}

}  // namespace

Tensor grad_norm(const TensorList& params, double norm_type) {
  TESSERA_CHECK(norm_type > 0.0, ValueError, "[grad_norm] expected norm_type > 0, got ", norm_type);
  autograd::NoGradGuard no_grad;
  TensorList grads = defined_grads(params);
  DType dtype = kFloat32;
  for (const Tensor& g : grads) {
    if (g.dtype() == kFloat64) dtype = kFloat64;
  }
  if (grads.empty()) return zeros({}, dtype);
  TensorList norms;
  for (const Tensor& g : grads) norms.push_back(norm(g, norm_type).to(dtype));
  return norm(stack(norms), norm_type);
}

Tensor clip_grad_norm_(const TensorList& params, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  Tensor total = grad_norm(params, norm_type);
  autograd::NoGradGuard no_grad;
  if (error_if_nonfinite) {
    double t = total.item<double>();
    TESSERA_CHECK(std::isfinite(t), RuntimeError, "[clip_grad_norm_] expected a finite total ",
                  norm_type, "-norm of the gradients, got ", t);
  }
  Tensor coef = clamp(max_norm / (total + 1e-6), std::nullopt, 1.0);
  for (Tensor g : defined_grads(params)) g.mul_(coef.to(g.dtype()));
  return total;
}

GradAccumulator::GradAccumulator(int64_t micro_steps) : micro_steps_(micro_steps) {
  TESSERA_CHECK(micro_steps > 0, ValueError, "[GradAccumulator] expected micro_steps > 0, got ",
                micro_steps);
}

bool GradAccumulator::backward(const Tensor& loss) {
  (micro_steps_ == 1 ? loss : loss * loss_scale()).backward();
  micro_step_ = (micro_step_ + 1) % micro_steps_;
  return micro_step_ == 0;
}

}  // namespace tessera::optim
