#pragma once
// Activation gradients as one fused elementwise pass, dx = g f'(x), shared by every backend. The
// backward of gelu / silu / swiglu without a graph (no create_graph) runs these: one read of g
// and x and one write, where the composite formulas (kept in ops/unary.cpp and ops/nn.cpp for
// double backward) launch ten elementwise ops over the activation.
#include "backend/common/elementwise_functors.h"

namespace tessera::fn {

// y = x (1 + tanh u) / 2 with u = k (x + c x^3): dy/dx = (1 + t) / 2 + x (1 - t^2) k (1 + 3 c x^2) / 2.
template <class A>
TESSERA_HD inline A gelu_tanh_slope(A x) {
  const A k = A(0.79788456080286535588), c = A(0.044715);
  const A t = tanh_(k * (x + c * x * x * x));
  return A(0.5) * (A(1) + t) + A(0.5) * x * (A(1) - t * t) * k * (A(1) + A(3) * c * x * x);
}

// d/dx x s(x) = s (1 + x (1 - s)), s = sigmoid(x).
template <class A>
TESSERA_HD inline A silu_slope(A x) {
  const A s = A(1) / (A(1) + exp_(-x));
  return s * (A(1) + x * (A(1) - s));
}

// swiglu(g, u) = silu(g) u from one sigmoid s = sigmoid(g): d/dg = u s (1 + g (1 - s)),
// d/du = g s; each times dout. The swiglu backward kernels run it once per element.
template <class A>
struct SwigluGrads {
  A dgate, dup;
};
template <class A>
TESSERA_HD inline SwigluGrads<A> swiglu_grads(A dout, A g, A u) {
  const A s = A(1) / (A(1) + exp_(-g));
  return {dout * u * s * (A(1) + g * (A(1) - s)), dout * g * s};
}

#define TESSERA_ACTIVATION_GRAD_FN(Name, op_name, expr)            \
  struct Name {                                                    \
    static constexpr std::string_view name = op_name;              \
    static constexpr uint32_t dtypes = kFloatingTypes;             \
    template <class T>                                             \
    TESSERA_HD T operator()(T g_, T x_) const {                    \
      using A = opmath_t<T>;                                       \
      const A g = static_cast<A>(g_), x = static_cast<A>(x_);      \
      return static_cast<T>(expr);                                 \
    }                                                              \
  };

// d/dx x Phi(x) = Phi(x) + x phi(x).
TESSERA_ACTIVATION_GRAD_FN(GeluGradFn, "gelu_backward",
                           g * (A(0.5) * (A(1) + std::erf(x * A(0.70710678118654752440))) +
                                x * exp_(A(-0.5) * x * x) * A(0.39894228040143267794)))
TESSERA_ACTIVATION_GRAD_FN(GeluTanhGradFn, "gelu_tanh_backward", g* gelu_tanh_slope(x))
TESSERA_ACTIVATION_GRAD_FN(SiluGradFn, "silu_backward", g* silu_slope(x))
#undef TESSERA_ACTIVATION_GRAD_FN

}  // namespace tessera::fn
