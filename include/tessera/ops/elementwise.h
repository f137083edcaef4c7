#pragma once
// Elementwise ops with numpy broadcasting and PyTorch type promotion. Floating ops are
// differentiable; integer inputs to floating-only functions (exp, sqrt, ...) promote to float32.
#include <optional>
#include <string_view>

#include "tessera/core/broadcast.h"
#include "tessera/core/tensor.h"

namespace tessera {

// dtype PyTorch would compute a op b in (dimensioned tensors > 0-d tensors > Python numbers).
DType result_type(const Tensor& a, const Tensor& b);
DType result_type(const Tensor& a, const Scalar& b);
// A 0-d tensor marked as a wrapped number, so it promotes like a Python scalar.
Tensor wrap_scalar(const Scalar& s, Device device = kCPU);

// ---- binary arithmetic ----
Tensor add(const Tensor& a, const Tensor& b, const Scalar& alpha = 1);  // a + alpha * b
Tensor sub(const Tensor& a, const Tensor& b, const Scalar& alpha = 1);  // a - alpha * b
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);  // true division (ints promote to float)
Tensor pow(const Tensor& a, const Tensor& exponent);
Tensor pow(const Tensor& a, const Scalar& exponent);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
// a + weight * (b - a)
Tensor lerp(const Tensor& a, const Tensor& b, const Tensor& weight);
Tensor lerp(const Tensor& a, const Tensor& b, const Scalar& weight);
// cond ? a : b (cond is bool).
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

// ---- unary ----
Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor sign(const Tensor& x);
Tensor square(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor log1p(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor reciprocal(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
// approximate: "none" (erf) or "tanh".
Tensor gelu(const Tensor& x, std::string_view approximate = "none");
Tensor silu(const Tensor& x);
Tensor erf(const Tensor& x);
// log(1 + exp(beta x)) / beta, linear above threshold.
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0);
Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max);

// ---- comparison and logic (bool results, not differentiable) ----
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor logical_xor(const Tensor& a, const Tensor& b);
Tensor logical_not(const Tensor& x);
// Integer and bool tensors only (TypeError otherwise); bools give bools, as torch.
Tensor bitwise_and(const Tensor& a, const Tensor& b);
Tensor bitwise_or(const Tensor& a, const Tensor& b);
Tensor bitwise_xor(const Tensor& a, const Tensor& b);
Tensor bitwise_not(const Tensor& x);
Tensor isnan(const Tensor& x);
Tensor isinf(const Tensor& x);
Tensor isfinite(const Tensor& x);
// True when all elements are within atol + rtol * |b|.
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);

// ---- casts and copies ----
Tensor cast(const Tensor& x, DType dtype);  // differentiable between floating dtypes
Tensor clone(const Tensor& x);
Tensor contiguous(const Tensor& x);

// ---- in place: write into self (shape fixed; others broadcast to it) ----
Tensor& add_(Tensor& self, const Tensor& other, const Scalar& alpha = 1);
Tensor& sub_(Tensor& self, const Tensor& other, const Scalar& alpha = 1);
Tensor& mul_(Tensor& self, const Tensor& other);
Tensor& div_(Tensor& self, const Tensor& other);
Tensor& zero_(Tensor& self);
Tensor& fill_(Tensor& self, const Scalar& value);
// Broadcasts and casts src; non_blocking as Tensor::to.
Tensor& copy_(Tensor& self, const Tensor& src, bool non_blocking = false);
Tensor& clamp_(Tensor& self, std::optional<Scalar> min, std::optional<Scalar> max);

}  // namespace tessera
