#pragma once
// Matrix products. fp32/bf16 GEMMs run in oneDNN, fp64 in OpenBLAS; transposed (strided) operands
// are passed to the GEMM as strides, not copied.
#include <optional>
#include <string_view>

#include "tessera/core/tensor.h"

namespace tessera {

// numpy matmul: 1-d operands are promoted, batch dims broadcast.
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor mm(const Tensor& a, const Tensor& b);    // [M,K] @ [K,N]
Tensor bmm(const Tensor& a, const Tensor& b);   // [B,M,K] @ [B,K,N]
// beta * input + alpha * (a @ b)
Tensor addmm(const Tensor& input, const Tensor& a, const Tensor& b, const Scalar& beta = 1,
             const Scalar& alpha = 1);
Tensor baddbmm(const Tensor& input, const Tensor& b1, const Tensor& b2, const Scalar& beta = 1,
               const Scalar& alpha = 1);
// x @ weight^T + bias, weight is [out, in].
Tensor linear(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias = std::nullopt);
// gelu(linear(x, weight, bias), approximate) (GPT-2's MLP). With a bias and the tanh
// approximation it is one kernel call: on CUDA the GEMM's GELU epilogue (torch's
// _addmm_activation), which also keeps the GELU's input for the backward.
Tensor linear_gelu(const Tensor& x, const Tensor& weight,
                   const std::optional<Tensor>& bias = std::nullopt,
                   std::string_view approximate = "none");
Tensor outer(const Tensor& a, const Tensor& b);

}  // namespace tessera
