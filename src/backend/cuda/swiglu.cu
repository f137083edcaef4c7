// CUDA swiglu backward (swiglu_backward_kernel): a grid-stride loop reads dout, gate and up once
// and writes both gradients. The forward is the elementwise functor fn::SwigluFn.
#include <cstdint>

#include "backend/common/activation_grad_functors.h"
#include "backend/common/nn_kernels.h"
#include "backend/cuda/context.h"
#include "backend/cuda/cuda_check.h"

namespace tessera::cuda {
namespace {

template <class T>
__global__ void swiglu_backward_elems(int64_t n, T* __restrict__ dgate, T* __restrict__ dup,
                                      const T* __restrict__ dout, const T* __restrict__ gate,
                                      const T* __restrict__ up) {
  using A = opmath_t<T>;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const auto d =
        fn::swiglu_grads(static_cast<A>(dout[i]), static_cast<A>(gate[i]), static_cast<A>(up[i]));
    dgate[i] = static_cast<T>(d.dgate);
    dup[i] = static_cast<T>(d.dup);
  }
}

void swiglu_backward(const Tensor& dgate, const Tensor& dup, const Tensor& dout, const Tensor& gate,
                     const Tensor& up) {
  const int64_t n = gate.numel();
  if (n == 0) return;
  dispatch<kFloatingTypes>(gate.dtype(), "swiglu_backward", [&]<class T>() {
    swiglu_backward_elems<T><<<grid_size(n), kBlockSize, 0, current_stream()>>>(
        n, dgate.data_ptr<T>(), dup.data_ptr<T>(), dout.data_ptr<T>(), gate.data_ptr<T>(),
        up.data_ptr<T>());
    TESSERA_CUDA_CHECK_LAUNCH();
  });
}

TESSERA_REGISTER_KERNEL(swiglu_backward_kernel, DeviceType::CUDA, &swiglu_backward);

}  // namespace
}  // namespace tessera::cuda
