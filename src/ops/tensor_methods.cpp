// Tensor's op methods: thin forwards to the free functions.
#include "tessera/ops/elementwise.h"
#include "tessera/ops/index.h"

namespace tessera {

Tensor Tensor::add(const Tensor& o, const Scalar& a) const { return tessera::add(*this, o, a); }
Tensor Tensor::sub(const Tensor& o, const Scalar& a) const { return tessera::sub(*this, o, a); }
Tensor Tensor::mul(const Tensor& o) const { return tessera::mul(*this, o); }
Tensor Tensor::div(const Tensor& o) const { return tessera::div(*this, o); }
Tensor Tensor::pow(const Tensor& e) const { return tessera::pow(*this, e); }
Tensor Tensor::pow(const Scalar& e) const { return tessera::pow(*this, e); }
Tensor Tensor::neg() const { return tessera::neg(*this); }
Tensor Tensor::abs() const { return tessera::abs(*this); }
Tensor Tensor::exp() const { return tessera::exp(*this); }
Tensor Tensor::log() const { return tessera::log(*this); }
Tensor Tensor::sqrt() const { return tessera::sqrt(*this); }
Tensor Tensor::rsqrt() const { return tessera::rsqrt(*this); }
Tensor Tensor::tanh() const { return tessera::tanh(*this); }
Tensor Tensor::sigmoid() const { return tessera::sigmoid(*this); }
Tensor Tensor::relu() const { return tessera::relu(*this); }
Tensor Tensor::square() const { return tessera::square(*this); }
Tensor Tensor::clamp(std::optional<Scalar> lo, std::optional<Scalar> hi) const {
  return tessera::clamp(*this, lo, hi);
}
Tensor Tensor::eq(const Tensor& o) const { return tessera::eq(*this, o); }
Tensor Tensor::ne(const Tensor& o) const { return tessera::ne(*this, o); }
Tensor Tensor::lt(const Tensor& o) const { return tessera::lt(*this, o); }
Tensor Tensor::le(const Tensor& o) const { return tessera::le(*this, o); }
Tensor Tensor::gt(const Tensor& o) const { return tessera::gt(*this, o); }
Tensor Tensor::ge(const Tensor& o) const { return tessera::ge(*this, o); }
Tensor Tensor::masked_fill(const Tensor& m, const Scalar& v) const {
  return tessera::masked_fill(*this, m, v);
}

Tensor& Tensor::add_(const Tensor& o, const Scalar& a) { return tessera::add_(*this, o, a); }
Tensor& Tensor::sub_(const Tensor& o, const Scalar& a) { return tessera::sub_(*this, o, a); }
Tensor& Tensor::mul_(const Tensor& o) { return tessera::mul_(*this, o); }
Tensor& Tensor::div_(const Tensor& o) { return tessera::div_(*this, o); }
Tensor& Tensor::add_(const Scalar& o) { return tessera::add_(*this, wrap_scalar(o, device())); }
Tensor& Tensor::mul_(const Scalar& o) { return tessera::mul_(*this, wrap_scalar(o, device())); }
Tensor& Tensor::zero_() { return tessera::zero_(*this); }
Tensor& Tensor::fill_(const Scalar& v) { return tessera::fill_(*this, v); }
Tensor& Tensor::copy_(const Tensor& src, bool non_blocking) {
  return tessera::copy_(*this, src, non_blocking);
}
Tensor& Tensor::clamp_(std::optional<Scalar> lo, std::optional<Scalar> hi) {
  return tessera::clamp_(*this, lo, hi);
}
Tensor& Tensor::masked_fill_(const Tensor& m, const Scalar& v) {
  return tessera::masked_fill_(*this, m, v);
}

}  // namespace tessera
