// CUDA fused optimizer updates: one grid-stride kernel per parameter reading p, g and the state
// once and writing p and the state once, with the CPU's formulas and constants (computed on the
// host in double, rounded to the state dtype) so both backends step identically.
#include <cmath>

#include "backend/common/optim_kernels.h"
#include "backend/cuda/context.h"
#include "backend/cuda/cuda_check.h"
#include "tessera/core/dispatch.h"

namespace tessera::cuda {
namespace {

template <class S>
S* state_ptr(const Tensor& t) {
  return t.defined() ? t.data_ptr<S>() : nullptr;
}

template <class S>
struct SgdConstants {
  S lr, wd, momentum, keep;
  bool use_momentum, nesterov, first, maximize;
};

template <class T, class S>
__global__ void sgd_kernel(T* p, const T* g, S* buf, int64_t n, SgdConstants<S> c) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    S pi = static_cast<S>(p[i]);
    S d = static_cast<S>(g[i]);
    if (c.maximize) d = -d;
    d += c.wd * pi;
    if (c.use_momentum) {
      S b = c.first ? d : buf[i] * c.momentum + c.keep * d;
      buf[i] = b;
      d = c.nesterov ? d + c.momentum * b : b;
    }
    p[i] = static_cast<T>(pi - c.lr * d);
  }
}

void sgd_step(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer,
              const SgdStepParams& h) {
  dispatch<kFloatingTypes>(param.dtype(), "sgd_step", [&]<class T>() {
    using S = opmath_t<T>;
    const int64_t n = param.numel();
    if (n == 0) return;
    SgdConstants<S> c{static_cast<S>(h.lr), static_cast<S>(h.weight_decay),
                      static_cast<S>(h.momentum), static_cast<S>(1.0 - h.dampening),
                      h.momentum != 0.0, h.nesterov, h.first_step, h.maximize};
    sgd_kernel<<<grid_size(n), kBlockSize, 0, current_stream()>>>(
        param.data_ptr<T>(), grad.data_ptr<T>(), state_ptr<S>(momentum_buffer), n, c);
    TESSERA_CUDA_CHECK_LAUNCH();
  });
}

template <class S>
struct AdamConstants {
  S beta1, beta2, one_minus_beta1, one_minus_beta2, step_size, bias_correction2_sqrt, eps, sign,
      decay, l2;
};

template <bool Amsgrad, class T, class S>
__global__ void adam_kernel(T* p, const T* g, S* m, S* v, S* vmax, int64_t n,
                            AdamConstants<S> c) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    S pi = static_cast<S>(p[i]) * c.decay;             // AdamW: p *= 1 - lr * wd
    S gi = c.sign * static_cast<S>(g[i]) + c.l2 * pi;  // Adam: g += wd * p
    S mi = m[i] * c.beta1 + c.one_minus_beta1 * gi;
    S vi = v[i] * c.beta2 + c.one_minus_beta2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    if constexpr (Amsgrad) vi = vmax[i] = vmax[i] > vi ? vmax[i] : vi;
    S denom = sqrt(vi) / c.bias_correction2_sqrt + c.eps;
    p[i] = static_cast<T>(pi - c.step_size * (mi / denom));
  }
}

void adam_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
               const Tensor& exp_avg_sq, const Tensor& max_exp_avg_sq, const AdamStepParams& h) {
  dispatch<kFloatingTypes>(param.dtype(), "adam_step", [&]<class T>() {
    using S = opmath_t<T>;
    const int64_t n = param.numel();
    if (n == 0) return;
    const double t = static_cast<double>(h.step);
    const bool decoupled = h.decoupled_weight_decay;
    AdamConstants<S> c{static_cast<S>(h.beta1),
                       static_cast<S>(h.beta2),
                       static_cast<S>(1.0 - h.beta1),
                       static_cast<S>(1.0 - h.beta2),
                       static_cast<S>(h.lr / (1.0 - std::pow(h.beta1, t))),
                       static_cast<S>(std::sqrt(1.0 - std::pow(h.beta2, t))),
                       static_cast<S>(h.eps),
                       static_cast<S>(h.maximize ? -1.0 : 1.0),
                       static_cast<S>(decoupled ? 1.0 - h.lr * h.weight_decay : 1.0),
                       static_cast<S>(decoupled ? 0.0 : h.weight_decay)};
    auto* kernel = h.amsgrad ? &adam_kernel<true, T, S> : &adam_kernel<false, T, S>;
    kernel<<<grid_size(n), kBlockSize, 0, current_stream()>>>(
        param.data_ptr<T>(), grad.data_ptr<T>(), exp_avg.data_ptr<S>(), exp_avg_sq.data_ptr<S>(),
        state_ptr<S>(max_exp_avg_sq), n, c);
    TESSERA_CUDA_CHECK_LAUNCH();
  });
}

TESSERA_REGISTER_KERNEL(sgd_step_kernel, DeviceType::CUDA, &sgd_step);
TESSERA_REGISTER_KERNEL(adam_step_kernel, DeviceType::CUDA, &adam_step);

}  // namespace
}  // namespace tessera::cuda
