// CPU class-index losses: cross entropy fused with log-softmax (the [M, C] log-probabilities are
// never materialised) and nll_loss on log-probabilities, forward and backward, one row per
// iteration.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "backend/common/nn_kernels.h"
#include "tessera/core/dtype_dispatch.h"

namespace tessera::cpu {
namespace {

using detail::vexp;

constexpr int64_t kParallelGrain = 32768;

// log(sum(exp(x))) of one row, shifted by its max.
template <class T, class A>
A row_lse(const T* x, int64_t C) {
  const A m = detail::simd_max<A>(x, C);
  A s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t c = 0; c < C; ++c) s += vexp(static_cast<A>(x[c]) - m);
  return m + std::log(s);
}

// Per-class weights: the given tensor, or ones when none was given.
template <class T>
class ClassWeights {
 public:
  ClassWeights(const Tensor& weight, int64_t C) {
    if (weight.defined())
      data_ = weight.data_ptr<T>();
    else {
      ones_.assign(C, static_cast<T>(1));
      data_ = ones_.data();
    }
  }
  const T* data() const { return data_; }

 private:
  std::vector<T> ones_;
  const T* data_ = nullptr;
};

void class_loss(const Tensor& loss, const Tensor& lse, const Tensor& row_weight,
                const Tensor& input, const Tensor& target, const Tensor& weight,
                const ClassLossParams& p) {
  dispatch<kFloatingTypes>(input.dtype(), "cross_entropy", [&]<class T>() {
    using A = opmath_t<T>;
    const int64_t M = input.size(0), C = input.size(1);
    const T* x = input.data_ptr<T>();
    const int64_t* tg = target.data_ptr<int64_t>();
    const ClassWeights<T> weights(weight, C);
    const T* w = weights.data();
    A* lp = loss.data_ptr<A>();
    A* lsep = lse.data_ptr<A>();
    A* rwp = row_weight.data_ptr<A>();
    const A eps = static_cast<A>(p.label_smoothing);
    const A smooth = eps / static_cast<A>(C);
    A w_sum = 0;
    for (int64_t c = 0; c < C; ++c) w_sum += static_cast<A>(w[c]);
#pragma omp parallel for schedule(static) if (M * C > kParallelGrain && M > 1)
    for (int64_t i = 0; i < M; ++i) {
      const int64_t t = tg[i];
      if (t == p.ignore_index) {
        lp[i] = lsep[i] = rwp[i] = 0;
        continue;
      }
      const T* xr = x + i * C;
      const A l = p.from_logits ? row_lse<T, A>(xr, C) : A(0);
      const A wt = static_cast<A>(w[t]);
      A out = (A(1) - eps) * wt * (l - static_cast<A>(xr[t]));
      if (eps != A(0)) {
        // sum_c w[c] (l - x[c]) = l sum(w) - sum_c w[c] x[c]
        A wx = 0;
#pragma omp simd reduction(+ : wx)
        for (int64_t c = 0; c < C; ++c) wx += static_cast<A>(w[c]) * static_cast<A>(xr[c]);
        out += smooth * (l * w_sum - wx);
      }
      lp[i] = out;
      lsep[i] = l;
      rwp[i] = wt;
    }
  });
}

void class_loss_backward(const Tensor& dinput, const Tensor& grad_rows, const Tensor& input,
                         const Tensor& lse, const Tensor& target, const Tensor& weight,
                         const ClassLossParams& p) {
  dispatch<kFloatingTypes>(input.dtype(), "cross_entropy_backward", [&]<class T>() {
    using A = opmath_t<T>;
    const int64_t M = input.size(0), C = input.size(1);
    const T* x = input.data_ptr<T>();
    const int64_t* tg = target.data_ptr<int64_t>();
    const ClassWeights<T> weights(weight, C);
    const T* w = weights.data();
    const A* gr = grad_rows.data_ptr<A>();
    const A* lsep = lse.data_ptr<A>();
    T* dx = dinput.data_ptr<T>();
    const A eps = static_cast<A>(p.label_smoothing);
    const A smooth = eps / static_cast<A>(C);
    A w_sum = 0;
    for (int64_t c = 0; c < C; ++c) w_sum += static_cast<A>(w[c]);
#pragma omp parallel for schedule(static) if (M * C > kParallelGrain && M > 1)
    for (int64_t i = 0; i < M; ++i) {
      const int64_t t = tg[i];
      T* dr = dx + i * C;
      if (t == p.ignore_index) {
        std::fill(dr, dr + C, static_cast<T>(0));
        continue;
      }
      const T* xr = x + i * C;
      const A g = gr[i], wt = static_cast<A>(w[t]);
      const A hard = (A(1) - eps) * wt;
      if (p.from_logits) {
        // g ((hard + smooth sum(w)) p[c] - smooth w[c]), minus g hard at the target.
        const A l = lsep[i], cp = g * (hard + smooth * w_sum), cw = g * smooth;
        auto grad = [&](int64_t c) {
          return cp * vexp(static_cast<A>(xr[c]) - l) - cw * static_cast<A>(w[c]);
        };
        if constexpr (std::is_same_v<T, A>) {
#pragma omp simd
          for (int64_t c = 0; c < C; ++c) dr[c] = grad(c);
        } else {
          // 16-bit rows: computed in A, then rounded in a loop of its own. Fused with the
          // rounding conversion the exp loop does not vectorise (10x slower on [1024, 50257]).
          static thread_local std::vector<A> row;
          row.resize(C);
#pragma omp simd
          for (int64_t c = 0; c < C; ++c) row[c] = grad(c);
          for (int64_t c = 0; c < C; ++c) dr[c] = static_cast<T>(row[c]);
        }
      } else {
        const A cw = g * smooth;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) dr[c] = static_cast<T>(-cw * static_cast<A>(w[c]));
      }
      // Recompute the target entry in A so 16-bit outputs round once.
      A at_t = -g * hard - g * smooth * static_cast<A>(w[t]);
      if (p.from_logits)
        at_t += g * (hard + smooth * w_sum) * vexp(static_cast<A>(xr[t]) - lsep[i]);
      dr[t] = static_cast<T>(at_t);
    }
  });
}

TESSERA_REGISTER_KERNEL(class_loss_kernel, DeviceType::CPU, &class_loss);
TESSERA_REGISTER_KERNEL(class_loss_backward_kernel, DeviceType::CPU, &class_loss_backward);

}  // namespace
}  // namespace tessera::cpu
