// CPU fused optimizer updates: one OpenMP loop per parameter reading p, g and the state once
// and writing p and the state once (instead of the ~10 tensor passes of the op-by-op form).
#include <algorithm>
#include <cmath>

#include "backend/common/optim_kernels.h"
#include "tessera/core/dtype_dispatch.h"

namespace tessera::cpu {
namespace {

constexpr int64_t kParallelGrain = 32768;

template <class S>
S* state_ptr(const Tensor& t) {
  return t.defined() ? t.data_ptr<S>() : nullptr;
}

void sgd_step(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer,
              const SgdStepParams& h) {
  dispatch<kFloatingTypes>(param.dtype(), "sgd_step", [&]<class T>() {
    using S = opmath_t<T>;
    T* p = param.data_ptr<T>();
    const T* g = grad.data_ptr<T>();
    S* buf = state_ptr<S>(momentum_buffer);
    const int64_t n = param.numel();
    const S lr = static_cast<S>(h.lr), wd = static_cast<S>(h.weight_decay);
    const S momentum = static_cast<S>(h.momentum), keep = static_cast<S>(1.0 - h.dampening);
    const bool use_momentum = h.momentum != 0.0, nesterov = h.nesterov;
    const bool first = h.first_step, maximize = h.maximize;
#pragma omp parallel for schedule(static) if (n > kParallelGrain)
    for (int64_t i = 0; i < n; ++i) {
      S pi = static_cast<S>(p[i]);
      S d = static_cast<S>(g[i]);
      if (maximize) d = -d;
      d += wd * pi;
      if (use_momentum) {
        S b = first ? d : buf[i] * momentum + keep * d;
        buf[i] = b;
        d = nesterov ? d + momentum * b : b;
      }
      p[i] = static_cast<T>(pi - lr * d);
    }
  });
}

// The Adam/AdamW loop. AMSGrad is a template flag because its conditional store would keep the
// compiler from vectorising; maximize and the two weight-decay forms are folded into constants
// (sign = -1 negates exactly, decay = 1 and l2 = 0 leave values unchanged).
template <bool Amsgrad, class T, class S>
void adam_loop(T* p, const T* g, S* m, S* v, S* vmax, int64_t n, const AdamStepParams& h) {
  const double t = static_cast<double>(h.step);
  // Scalars as torch computes them (in double, then rounded to the state dtype).
  const S beta1 = static_cast<S>(h.beta1), beta2 = static_cast<S>(h.beta2);
  const S one_minus_beta1 = static_cast<S>(1.0 - h.beta1);
  const S one_minus_beta2 = static_cast<S>(1.0 - h.beta2);
  const S step_size = static_cast<S>(h.lr / (1.0 - std::pow(h.beta1, t)));
  const S bias_correction2_sqrt = static_cast<S>(std::sqrt(1.0 - std::pow(h.beta2, t)));
  const S eps = static_cast<S>(h.eps);
  const S sign = static_cast<S>(h.maximize ? -1.0 : 1.0);
  const bool decoupled = h.decoupled_weight_decay;
  const S decay = static_cast<S>(decoupled ? 1.0 - h.lr * h.weight_decay : 1.0);
  const S l2 = static_cast<S>(decoupled ? 0.0 : h.weight_decay);
#pragma omp parallel for simd schedule(static) if (n > kParallelGrain)
  for (int64_t i = 0; i < n; ++i) {
    S pi = static_cast<S>(p[i]) * decay;           // AdamW: p *= 1 - lr * wd
    S gi = sign * static_cast<S>(g[i]) + l2 * pi;  // Adam: g += wd * p
    S mi = m[i] * beta1 + one_minus_beta1 * gi;
    S vi = v[i] * beta2 + one_minus_beta2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    if constexpr (Amsgrad) vi = vmax[i] = std::max(vmax[i], vi);
    S denom = std::sqrt(vi) / bias_correction2_sqrt + eps;
    p[i] = static_cast<T>(pi - step_size * (mi / denom));
  }
}

void adam_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
               const Tensor& exp_avg_sq, const Tensor& max_exp_avg_sq, const AdamStepParams& h) {
  dispatch<kFloatingTypes>(param.dtype(), "adam_step", [&]<class T>() {
    using S = opmath_t<T>;
    auto run = h.amsgrad ? &adam_loop<true, T, S> : &adam_loop<false, T, S>;
    run(param.data_ptr<T>(), grad.data_ptr<T>(), exp_avg.data_ptr<S>(), exp_avg_sq.data_ptr<S>(),
        state_ptr<S>(max_exp_avg_sq), param.numel(), h);
  });
}

void adam_step_list(const TensorList& params, const TensorList& grads, const TensorList& exp_avgs,
                    const TensorList& exp_avg_sqs, const TensorList& max_exp_avg_sqs,
                    const AdamStepParams& h) {
  for (size_t i = 0; i < params.size(); ++i)
    adam_step(params[i], grads[i], exp_avgs[i], exp_avg_sqs[i],
              h.amsgrad ? max_exp_avg_sqs[i] : Tensor(), h);
}

void sum_squares(const TensorList& tensors, const Tensor& sums) {
  dispatch<kFloatingTypes>(tensors[0].dtype(), "sum_squares", [&]<class T>() {
    using S = opmath_t<T>;
    S* out = sums.data_ptr<S>();
    for (size_t k = 0; k < tensors.size(); ++k) {
      const T* x = tensors[k].data_ptr<T>();
      const int64_t n = tensors[k].numel();
      // A double accumulator: a float one loses digits over a long serial sum (a 38M-element
      // embedding gradient).
      double acc = 0;
#pragma omp parallel for simd reduction(+ : acc) schedule(static) if (n > kParallelGrain)
      for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(x[i]) * static_cast<double>(x[i]);
      out[k] = static_cast<S>(acc);
    }
  });
}

void scale_by(const TensorList& tensors, const Tensor& scale) {
  dispatch<kFloatingTypes>(tensors[0].dtype(), "scale_by", [&]<class T>() {
    using S = opmath_t<T>;
    const S c = *scale.data_ptr<S>();
    for (const Tensor& t : tensors) {
      T* x = t.data_ptr<T>();
      const int64_t n = t.numel();
#pragma omp parallel for simd schedule(static) if (n > kParallelGrain)
      for (int64_t i = 0; i < n; ++i) x[i] = static_cast<T>(static_cast<S>(x[i]) * c);
    }
  });
}

void unscale(const TensorList& tensors, const Tensor& inv_scale, const Tensor& found_inf) {
  dispatch<kFloatingTypes>(tensors[0].dtype(), "unscale", [&]<class T>() {
    using S = opmath_t<T>;
    const S c = *inv_scale.data_ptr<S>();
    bool bad = false;
    for (const Tensor& t : tensors) {
      T* x = t.data_ptr<T>();
      const int64_t n = t.numel();
#pragma omp parallel for simd reduction(|| : bad) schedule(static) if (n > kParallelGrain)
      for (int64_t i = 0; i < n; ++i) {
        const S v = static_cast<S>(x[i]);
        bad = bad || !std::isfinite(v);
        x[i] = static_cast<T>(v * c);
      }
    }
    if (bad) *found_inf.data_ptr<float>() = 1.0f;
  });
}

TESSERA_REGISTER_KERNEL(sgd_step_kernel, DeviceType::CPU, &sgd_step);
TESSERA_REGISTER_KERNEL(sum_squares_kernel, DeviceType::CPU, &sum_squares);
TESSERA_REGISTER_KERNEL(scale_by_kernel, DeviceType::CPU, &scale_by);
TESSERA_REGISTER_KERNEL(unscale_kernel, DeviceType::CPU, &unscale);
TESSERA_REGISTER_KERNEL(adam_step_kernel, DeviceType::CPU, &adam_step);
TESSERA_REGISTER_KERNEL(adam_step_list_kernel, DeviceType::CPU, &adam_step_list);

}  // namespace
}  // namespace tessera::cpu
