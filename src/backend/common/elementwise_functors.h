#pragma once
// Scalar functions behind the elementwise ops, shared by every backend. Each functor names its
// op and the dtypes it accepts; 16-bit floats compute in float (opmath_t).
#include <cmath>
#include <cstdint>
#include <limits>
#include <string_view>
#include <type_traits>

#include "tessera/core/dtype_dispatch.h"
#if !defined(__CUDACC__)
#include "backend/common/vec_math.h"
#endif
#include "tessera/core/half.h"
#include "tessera/core/host_device.h"


namespace tessera::fn {

template <class T>
TESSERA_HD inline opmath_t<T> up(T x) {
  return static_cast<opmath_t<T>>(x);
}
// exp and tanh in opmath precision; on the CPU the float versions vectorise (vec_math.h).
template <class A>
TESSERA_HD inline A exp_(A x) {
#if !defined(__CUDACC__)
  if constexpr (std::is_same_v<A, float>) return detail::vexp(x);
#endif
  return std::exp(x);
}
template <class A>
TESSERA_HD inline A tanh_(A x) {
#if !defined(__CUDACC__)
  if constexpr (std::is_same_v<A, float>) return detail::vtanh(x);
#endif
  return std::tanh(x);
}

// pow for integers by squaring, wrapping on overflow as torch does (in uint64, where wrapping is
// defined); a negative exponent gives 1/base truncated: 0 unless base is 1 or -1.
template <class A>
TESSERA_HD inline A int_pow(A base, A exponent) {
  if constexpr (std::is_signed_v<A>) {
    if (exponent < 0) return base == 1 ? A(1) : base == -1 ? A(exponent % 2 == 0 ? 1 : -1) : A(0);
  }
  uint64_t result = 1, square = static_cast<uint64_t>(base);
  for (uint64_t e = static_cast<uint64_t>(exponent); e > 0; e >>= 1) {
    if (e & 1) result *= square;
    square *= square;
  }
  return static_cast<A>(result);
}
template <class A>
TESSERA_HD inline A pow_(A base, A exponent) {
  if constexpr (std::is_integral_v<A>)
    return int_pow(base, exponent);
  else
    return std::pow(base, exponent);
}

template <class T>
TESSERA_HD inline bool is_nan(T x) {
  if constexpr (std::is_floating_point_v<opmath_t<T>>) return std::isnan(up(x));
  else return false;
}

#define TESSERA_UNARY_FN(Name, op_name, types, expr)                 \
  struct Name {                                                     \
    static constexpr std::string_view name = op_name;               \
    static constexpr uint32_t dtypes = types;                       \
    template <class T>                                              \
    TESSERA_HD T operator()(T x_) const {                           \
      using A = opmath_t<T>;                                        \
      A x = static_cast<A>(x_);                                     \
      return static_cast<T>(expr);                                  \
    }                                                               \
  };

TESSERA_UNARY_FN(NegFn, "neg", kNumericTypes, -x)
TESSERA_UNARY_FN(AbsFn, "abs", kNumericTypes, x < A(0) ? -x : x)
TESSERA_UNARY_FN(SignFn, "sign", kNumericTypes, A((A(0) < x) - (x < A(0))))
TESSERA_UNARY_FN(SquareFn, "square", kNumericTypes, x* x)
TESSERA_UNARY_FN(ExpFn, "exp", kFloatingTypes, exp_(x))
TESSERA_UNARY_FN(LogFn, "log", kFloatingTypes, std::log(x))
TESSERA_UNARY_FN(Log1pFn, "log1p", kFloatingTypes, std::log1p(x))
TESSERA_UNARY_FN(SqrtFn, "sqrt", kFloatingTypes, std::sqrt(x))
TESSERA_UNARY_FN(RsqrtFn, "rsqrt", kFloatingTypes, A(1) / std::sqrt(x))
TESSERA_UNARY_FN(ReciprocalFn, "reciprocal", kFloatingTypes, A(1) / x)
TESSERA_UNARY_FN(SinFn, "sin", kFloatingTypes, std::sin(x))
TESSERA_UNARY_FN(CosFn, "cos", kFloatingTypes, std::cos(x))
TESSERA_UNARY_FN(TanhFn, "tanh", kFloatingTypes, tanh_(x))
TESSERA_UNARY_FN(SigmoidFn, "sigmoid", kFloatingTypes, A(1) / (A(1) + exp_(-x)))
TESSERA_UNARY_FN(ReluFn, "relu", kNumericTypes, x > A(0) ? x : A(0))
TESSERA_UNARY_FN(GeluFn, "gelu", kFloatingTypes,
                 A(0.5) * x * (A(1) + std::erf(x * A(0.70710678118654752440))))
TESSERA_UNARY_FN(GeluTanhFn, "gelu_tanh", kFloatingTypes,
                 A(0.5) * x *
                     (A(1) + tanh_(A(0.79788456080286535588) * (x + A(0.044715) * x * x * x))))
TESSERA_UNARY_FN(SiluFn, "silu", kFloatingTypes, x / (A(1) + exp_(-x)))
TESSERA_UNARY_FN(ErfFn, "erf", kFloatingTypes, std::erf(x))
// ~x on integers, not x on bools (torch's bitwise_not): x ^ all ones (~ on a bool is not that).
TESSERA_UNARY_FN(BitwiseNotFn, "bitwise_not", kIntegralTypes | dtype_bit(kBool),
                 A(x ^ A(std::is_same_v<T, bool> ? 1 : -1)))
#undef TESSERA_UNARY_FN

#define TESSERA_PREDICATE_FN(Name, op_name, types, expr)            \
  struct Name {                                                     \
    static constexpr std::string_view name = op_name;               \
    static constexpr uint32_t dtypes = types;                       \
    template <class T>                                              \
    TESSERA_HD bool operator()(T x_) const {                        \
      auto x = up(x_);                                              \
      return expr;                                                  \
    }                                                               \
  };
TESSERA_PREDICATE_FN(LogicalNotFn, "logical_not", kAllTypes, !(x != decltype(x)(0)))
TESSERA_PREDICATE_FN(IsnanFn, "isnan", kAllTypes, is_nan(x))
TESSERA_PREDICATE_FN(IsinfFn, "isinf", kAllTypes,
                     std::is_floating_point_v<decltype(x)> && !is_nan(x) &&
                         (x == std::numeric_limits<decltype(x)>::infinity() ||
                          x == -std::numeric_limits<decltype(x)>::infinity()))
TESSERA_PREDICATE_FN(IsfiniteFn, "isfinite", kAllTypes,
                     !std::is_floating_point_v<decltype(x)> ||
                         (!is_nan(x) && x != std::numeric_limits<decltype(x)>::infinity() &&
                          x != -std::numeric_limits<decltype(x)>::infinity()))
#undef TESSERA_PREDICATE_FN

#define TESSERA_BINARY_FN(Name, op_name, types, R, expr)            \
  struct Name {                                                     \
    static constexpr std::string_view name = op_name;               \
    static constexpr uint32_t dtypes = types;                       \
    template <class T>                                              \
    TESSERA_HD R operator()(T a_, T b_) const {                     \
      using A = opmath_t<T>;                                        \
      A a = static_cast<A>(a_), b = static_cast<A>(b_);             \
      return static_cast<R>(expr);                                  \
    }                                                               \
  };
TESSERA_BINARY_FN(AddFn, "add", kAllTypes, T, a + b)
TESSERA_BINARY_FN(SubFn, "sub", kNumericTypes, T, a - b)
TESSERA_BINARY_FN(MulFn, "mul", kAllTypes, T, a* b)
TESSERA_BINARY_FN(DivFn, "div", kFloatingTypes, T, a / b)
TESSERA_BINARY_FN(PowFn, "pow", kNumericTypes, T, pow_(a, b))
TESSERA_BINARY_FN(MaximumFn, "maximum", kAllTypes, T,
                  is_nan(a) ? a : (is_nan(b) ? b : (a > b ? a : b)))
TESSERA_BINARY_FN(MinimumFn, "minimum", kAllTypes, T,
                  is_nan(a) ? a : (is_nan(b) ? b : (a < b ? a : b)))
TESSERA_BINARY_FN(EqFn, "eq", kAllTypes, bool, a == b)
TESSERA_BINARY_FN(NeFn, "ne", kAllTypes, bool, a != b)
TESSERA_BINARY_FN(LtFn, "lt", kAllTypes, bool, a < b)
TESSERA_BINARY_FN(LeFn, "le", kAllTypes, bool, a <= b)
TESSERA_BINARY_FN(GtFn, "gt", kAllTypes, bool, a > b)
TESSERA_BINARY_FN(GeFn, "ge", kAllTypes, bool, a >= b)
TESSERA_BINARY_FN(LogicalAndFn, "logical_and", kAllTypes, bool, (a != A(0)) && (b != A(0)))
TESSERA_BINARY_FN(LogicalOrFn, "logical_or", kAllTypes, bool, (a != A(0)) || (b != A(0)))
TESSERA_BINARY_FN(LogicalXorFn, "logical_xor", kAllTypes, bool, (a != A(0)) != (b != A(0)))
TESSERA_BINARY_FN(BitwiseAndFn, "bitwise_and", kIntegralTypes | dtype_bit(kBool), T, a& b)
TESSERA_BINARY_FN(BitwiseOrFn, "bitwise_or", kIntegralTypes | dtype_bit(kBool), T, a | b)
TESSERA_BINARY_FN(BitwiseXorFn, "bitwise_xor", kIntegralTypes | dtype_bit(kBool), T, a ^ b)
// silu(gate) * up in one pass (the LLaMA MLP): no rounded silu(gate) tensor in between.
TESSERA_BINARY_FN(SwigluFn, "swiglu", kFloatingTypes, T, a / (A(1) + exp_(-a)) * b)
#undef TESSERA_BINARY_FN

// A value of one dtype as another (copy and cast): through opmath, bool as != 0.
template <class Dst, class Src>
TESSERA_HD inline Dst convert(Src x) {
  if constexpr (std::is_same_v<Dst, Src>) return x;
  else if constexpr (std::is_same_v<Dst, bool>)
    return static_cast<opmath_t<Src>>(x) != opmath_t<Src>(0);
  else return static_cast<Dst>(static_cast<opmath_t<Src>>(x));
}

// cond ? a : b
struct WhereFn {
  static constexpr std::string_view name = "where";
  static constexpr uint32_t dtypes = kAllTypes;
  template <class T>
  TESSERA_HD T operator()(bool c, T a, T b) const {
    return c ? a : b;
  }
};
// a + w * (b - a)
struct LerpFn {
  static constexpr std::string_view name = "lerp";
  static constexpr uint32_t dtypes = kFloatingTypes;
  template <class T>
  TESSERA_HD T operator()(T a, T b, T w) const {
    return static_cast<T>(up(a) + up(w) * (up(b) - up(a)));
  }
};

}  // namespace tessera::fn
