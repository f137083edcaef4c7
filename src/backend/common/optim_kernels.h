#pragma once
// Kernel keys for the fused optimizer updates: one pass over a parameter, its gradient and its
// state, in place. Every tensor is contiguous with the same numel; param and grad share a dtype
// and state tensors have state_dtype(param dtype) (float32 for 16-bit params). Arithmetic is in
// the state dtype. The formulas are torch.optim's (see tessera/optim/sgd.h and adam.h).
#include <cstdint>

#include "tessera/core/dispatcher.h"
#include "tessera/core/tensor.h"

namespace tessera {

struct SgdStepParams {
  double lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false, maximize = false;
  bool first_step = false;  // the momentum buffer is uninitialised: it becomes the gradient
};
// momentum_buffer is undefined when momentum == 0.
TESSERA_DECLARE_KERNEL(sgd_step_kernel,
                       void(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer,
                            const SgdStepParams& params));

struct AdamStepParams {
  double lr = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;
  int64_t step = 1;                     // this update's count (bias corrections use it)
  bool decoupled_weight_decay = false;  // AdamW
  bool amsgrad = false, maximize = false;
};
// max_exp_avg_sq is undefined unless amsgrad.
TESSERA_DECLARE_KERNEL(adam_step_kernel,
                       void(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                            const Tensor& exp_avg_sq, const Tensor& max_exp_avg_sq,
                            const AdamStepParams& params));

// adam_step_kernel over lists of parameters alike in device, dtype and step: one call (one
// launch on CUDA) for many parameters, each list entry as that kernel's argument; the last list
// is empty unless amsgrad.
TESSERA_DECLARE_KERNEL(adam_step_list_kernel,
                       void(const TensorList& params, const TensorList& grads,
                            const TensorList& exp_avgs, const TensorList& exp_avg_sqs,
                            const TensorList& max_exp_avg_sqs, const AdamStepParams& h));

// Gradient clipping over a list of tensors (contiguous, one floating dtype T, one device), one
// pass each and, on CUDA, one launch for the whole list:
//   sums[i] = sum of tensors[i]^2, accumulated in opmath_t<T>; sums is [n] of opmath_t<T>
//   tensors[i] *= scale, with scale a 0-d opmath_t<T> tensor on the device (read there, so the
//   clip coefficient never comes back to the host).
TESSERA_DECLARE_KERNEL(sum_squares_kernel, void(const TensorList& tensors, const Tensor& sums));
TESSERA_DECLARE_KERNEL(scale_by_kernel, void(const TensorList& tensors, const Tensor& scale));

// Loss-scaler unscaling over a list of the same kind (torch's
// _amp_foreach_non_finite_check_and_unscale_): found_inf, a 0-d float32 tensor on the device,
// becomes 1 if any element is inf or nan before scaling (it is never reset to 0 here, so one flag
// gathers several calls); then tensors[i] *= inv_scale, a 0-d opmath_t<T> tensor.
TESSERA_DECLARE_KERNEL(unscale_kernel, void(const TensorList& tensors, const Tensor& inv_scale,
                                            const Tensor& found_inf));

}  // namespace tessera
