// The unfused gemm_bias_gelu that every backend falls back to (linalg_kernels.h).
#include "backend/common/elementwise_kernels.h"
#include "backend/common/linalg_kernels.h"
#include "tessera/ops/creation.h"

namespace tessera {

void gemm_bias_then_gelu(const Tensor& out, const Tensor& pre, const Tensor& a, const Tensor& b,
                         const Tensor& bias, BiasGemm bias_gemm) {
  const Tensor p = pre.defined()
                       ? pre
                       : empty(out.sizes(), TensorOptions(out.dtype()).with_device(out.device()));
  bias_gemm(p, a, b, bias);
  TensorIterator it("linear_gelu");
  it.add_output(out).add_input(p).build();
  call_kernel<ElementwiseKernel<fn::GeluTanhFn>>(out.device(), it);
}

}  // namespace tessera
