#pragma once
#include "tessera/core/dispatcher.h"
#include "tessera/core/tensor.h"

namespace tessera {

// out [B, M, N] (contiguous) = a [B, M, K] @ b [Bb, K, N] with Bb in {1, B}; a and b may be
// arbitrarily strided (transposed operands are passed to the GEMM as strides).
TESSERA_DECLARE_KERNEL(gemm_kernel, void(const Tensor& out, const Tensor& a, const Tensor& b));

}  // namespace tessera
