#pragma once
#include "tessera/core/dispatcher.h"
#include "tessera/core/tensor.h"

namespace tessera {

// out [B, M, N] (contiguous) = a [B, M, K] @ b [Bb, K, N] with Bb in {1, B}; a and b may be
// arbitrarily strided (transposed operands are passed to the GEMM as strides).
TESSERA_DECLARE_KERNEL(gemm_kernel, void(const Tensor& out, const Tensor& a, const Tensor& b));
// The same with bias [N] (contiguous, out's dtype) added to every row in the GEMM's epilogue;
// floating dtypes other than float64. Only backends with such an epilogue register it (linear
// checks), the others run linear as a GEMM and a broadcast add.
TESSERA_DECLARE_KERNEL(gemm_bias_kernel, void(const Tensor& out, const Tensor& a, const Tensor& b,
                                              const Tensor& bias));
// out [1, M, N] = gelu_tanh(a [1, M, K] @ b [1, K, N] + bias [N]) and, when defined, pre (out's
// shape and dtype) = a @ b + bias, the GELU's input for the backward; floating dtypes. CUDA
// computes both in one cuBLASLt call (GELU_AUX_BIAS, as torch's _addmm_activation) where it has
// an algorithm; the CPU runs its bias GEMM and a GELU pass. linear_gelu checks for the kernel.
TESSERA_DECLARE_KERNEL(gemm_bias_gelu_kernel,
                       void(const Tensor& out, const Tensor& pre, const Tensor& a, const Tensor& b,
                            const Tensor& bias));
// gemm_bias_gelu unfused: bias_gemm(p, a, b, bias) into pre (or a scratch when undefined), then
// the device's GELU kernel from p into out (no intermediate tensor).
using BiasGemm = void (*)(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias);
void gemm_bias_then_gelu(const Tensor& out, const Tensor& pre, const Tensor& a, const Tensor& b,
                         const Tensor& bias, BiasGemm bias_gemm);
// out [1, M, N] = a [1, M, K] @ b [1, K, N] with a_sums [M] (contiguous, out's dtype) = the
// sums of a's rows, taken in the GEMM's epilogue: a linear's weight gradient g^T x together with
// its bias gradient. Only backends with such an epilogue register it (CUDA: cuBLASLt's BGRADB).
TESSERA_DECLARE_KERNEL(gemm_row_sums_kernel, void(const Tensor& out, const Tensor& a,
                                                  const Tensor& b, const Tensor& a_sums));

}  // namespace tessera
