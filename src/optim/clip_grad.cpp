#include "tessera/optim/clip_grad.h"

#include <cmath>
#include <vector>

#include "backend/common/optim_kernels.h"
#include "optim/grad_lists.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/ops/creation.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/reduce.h"
#include "tessera/ops/shape.h"

namespace tessera::optim {

using detail::defined_grads;

namespace {

// The grads grouped for the clipping list kernels; empty when they cannot take them.
std::vector<TensorList> fused_groups(const TensorList& grads) {
  return detail::list_kernel_groups<sum_squares_kernel, scale_by_kernel>(grads);
}

// The 2-norm of all grads: one sum-of-squares pass per dtype group, no per-tensor launches.
Tensor fused_two_norm(const std::vector<TensorList>& groups, DType dtype) {
  Tensor total = zeros({}, TensorOptions(dtype).with_device(groups[0][0].device()));
  for (const TensorList& group : groups) {
    const DType acc = group[0].dtype() == kFloat64 ? kFloat64 : kFloat32;
    Tensor sums = empty({static_cast<int64_t>(group.size())},
                        TensorOptions(acc).with_device(group[0].device()));
    call_kernel<sum_squares_kernel>(sums.device(), group, sums);
    total = total + sum(sums).to(dtype);
  }
  return sqrt(total);
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
  if (norm_type == 2.0) {
    if (const std::vector<TensorList> groups = fused_groups(grads); !groups.empty())
      return fused_two_norm(groups, dtype);
  }
  // Gathered on the first gradient's device (torch's), so gradients may live on several.
  TensorList norms;
  for (const Tensor& g : grads) norms.push_back(norm(g, norm_type).to(dtype).to(grads[0].device()));
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
  const TensorList grads = defined_grads(params);
  if (const std::vector<TensorList> groups = fused_groups(grads); !groups.empty()) {
    for (const TensorList& group : groups) {
      const DType acc = group[0].dtype() == kFloat64 ? kFloat64 : kFloat32;
      call_kernel<scale_by_kernel>(coef.device(), group, coef.to(acc));
    }
    return total;
  }
  for (Tensor g : grads) g.mul_(coef.to(g.device()).to(g.dtype()));
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
