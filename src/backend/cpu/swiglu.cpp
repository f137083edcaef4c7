// CPU swiglu backward (swiglu_backward_kernel): one vectorised pass reads dout, gate and up and
// writes both gradients. The forward is the elementwise functor fn::SwigluFn.
#include <algorithm>

#include "backend/common/activation_grad_functors.h"
#include "backend/common/nn_kernels.h"

namespace tessera::cpu {
namespace {

constexpr int64_t kBlock = 16384;  // elements per task

void swiglu_backward(const Tensor& dgate, const Tensor& dup, const Tensor& dout, const Tensor& gate,
                     const Tensor& up) {
  dispatch<kFloatingTypes>(gate.dtype(), "swiglu_backward", [&]<class T>() {
    using A = opmath_t<T>;
    const int64_t n = gate.numel(), blocks = (n + kBlock - 1) / kBlock;
    T* dg = dgate.data_ptr<T>();
    T* du = dup.data_ptr<T>();
    const T* g = dout.data_ptr<T>();
    const T* x = gate.data_ptr<T>();
    const T* u = up.data_ptr<T>();
#pragma omp parallel for schedule(static) if (blocks > 1)
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t end = std::min(n, (b + 1) * kBlock);
      // A plain loop: under `omp simd` GCC 12 vectorises only the float instantiation, -O3 alone
      // float and bfloat16.
      for (int64_t i = b * kBlock; i < end; ++i) {
        const auto d =
            fn::swiglu_grads(static_cast<A>(g[i]), static_cast<A>(x[i]), static_cast<A>(u[i]));
        dg[i] = static_cast<T>(d.dgate);
        du[i] = static_cast<T>(d.dup);
      }
    }
  });
}

TESSERA_REGISTER_KERNEL(swiglu_backward_kernel, DeviceType::CPU, &swiglu_backward);

}  // namespace
}  // namespace tessera::cpu
