// Unary elementwise ops and their gradients.
#include <cmath>

#include "backend/common/activation_grad_functors.h"
#include "ops/op_utils.h"
#include "tessera/ops/op_info.h"
#include "tessera/runtime/op_scope.h"

namespace tessera {

using namespace detail;

namespace {

// What a unary op's backward reads: keeping only that (as torch) holds less memory for backward
// and lets the other tensor be written in place afterwards.
enum class Saves { Nothing, Input, Output };

// Records out = f(x) as a node whose backward is grad_fn(g, x, out), the one of x and out it
// does not save undefined.
template <class GradFn>
void record_unary(const Tensor& x, const Tensor& out, const char* node, Saves saves,
                  GradFn grad_fn) {
  TensorList saved;
  if (saves != Saves::Nothing) saved.push_back(saves == Saves::Input ? x : out);
  record(node, {x}, {out}, saved,
         [grad_fn, saves, dx = x.dtype()](BackwardContext& ctx, const TensorList& g) {
           const Tensor x = saves == Saves::Input ? ctx.saved(0) : Tensor();
           const Tensor y = saves == Saves::Output ? ctx.saved(0) : Tensor();
           return TensorList{cast(grad_fn(g[0], x, y), dx)};
         });
}

// Computes Fn(x) in x's dtype (float-only functions promote integers to float32) and records
// it (record_unary).
template <class Fn, class GradFn>
Tensor unary_op(const Tensor& x, const char* node, bool float_only, Saves saves, GradFn grad_fn) {
  DType dt = float_only ? float_compute_dtype(x.dtype()) : x.dtype();
  Tensor out = run_elementwise<Fn>(Fn::name, dt, {cast_raw(x, dt)});
  if (needs_grad({x})) record_unary(x, out, node, saves, grad_fn);
  return out;
}

// g f'(x) for an activation f: the fused kernel GradFn, or under create_graph the composite
// formula, which is differentiable again.
template <class GradFn, class Composite>
Tensor activation_grad(const Tensor& g, const Tensor& x, const Composite& composite) {
  if (autograd::GradMode::is_enabled()) return composite();
  return run_elementwise<GradFn>(GradFn::name, g.dtype(), {g, cast_raw(x, g.dtype())});
}

constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;
constexpr double k2OverSqrtPi = 1.12837916709551257390;

Tensor gelu_tanh_grad(const Tensor& g, const Tensor& x, const Tensor&) {
  return activation_grad<fn::GeluTanhGradFn>(g, x, [&] {
    // u = k (x + c x^3), y = x (1 + tanh u) / 2
    Tensor x2 = x * x;
    Tensor t = tanh((x + x2 * x * 0.044715) * kSqrt2OverPi);
    Tensor du = (1.0 + x2 * (3.0 * 0.044715)) * kSqrt2OverPi;
    return g * ((1.0 + t) * 0.5 + x * (1.0 - t * t) * du * 0.5);
  });
}

}  // namespace

void detail::record_gelu_tanh(const Tensor& x, const Tensor& out) {
  record_unary(x, out, "GeluTanhBackward", Saves::Input, gelu_tanh_grad);
}

Tensor neg(const Tensor& x) {
  TESSERA_OP_SCOPE("neg", x);
  TESSERA_CHECK(x.dtype() != kBool, TypeError,
                "[neg] expected a numeric tensor, got bool (use logical_not)");
  return unary_op<fn::NegFn>(x, "NegBackward", false, Saves::Nothing,
                             [](const Tensor& g, const Tensor&, const Tensor&) { return neg(g); });
}
Tensor abs(const Tensor& x) {
  TESSERA_OP_SCOPE("abs", x);
  return unary_op<fn::AbsFn>(
      x, "AbsBackward", false, Saves::Input,
      [](const Tensor& g, const Tensor& x, const Tensor&) { return g * sign(x); });
}
Tensor sign(const Tensor& x) {
  TESSERA_OP_SCOPE("sign", x);
  return unary_op<fn::SignFn>(
      x, "SignBackward", false, Saves::Nothing,
      [](const Tensor& g, const Tensor&, const Tensor&) { return zeros_like(g); });
}
Tensor square(const Tensor& x) {
  TESSERA_OP_SCOPE("square", x);
  return unary_op<fn::SquareFn>(
      x, "SquareBackward", false, Saves::Input,
      [](const Tensor& g, const Tensor& x, const Tensor&) { return g * x * 2.0; });
}
Tensor exp(const Tensor& x) {
  TESSERA_OP_SCOPE("exp", x);
  return unary_op<fn::ExpFn>(x, "ExpBackward", true, Saves::Output,
                             [](const Tensor& g, const Tensor&, const Tensor& y) { return g * y; });
}
Tensor log(const Tensor& x) {
  TESSERA_OP_SCOPE("log", x);
  return unary_op<fn::LogFn>(x, "LogBackward", true, Saves::Input,
                             [](const Tensor& g, const Tensor& x, const Tensor&) { return g / x; });
}
Tensor log1p(const Tensor& x) {
  TESSERA_OP_SCOPE("log1p", x);
  return unary_op<fn::Log1pFn>(
      x, "Log1pBackward", true, Saves::Input,
      [](const Tensor& g, const Tensor& x, const Tensor&) { return g / (x + 1.0); });
}
Tensor sqrt(const Tensor& x) {
  TESSERA_OP_SCOPE("sqrt", x);
  return unary_op<fn::SqrtFn>(
      x, "SqrtBackward", true, Saves::Output,
      [](const Tensor& g, const Tensor&, const Tensor& y) { return g / (y * 2.0); });
}
Tensor rsqrt(const Tensor& x) {
  TESSERA_OP_SCOPE("rsqrt", x);
  return unary_op<fn::RsqrtFn>(
      x, "RsqrtBackward", true, Saves::Output,
      [](const Tensor& g, const Tensor&, const Tensor& y) { return g * y * y * y * -0.5; });
}
Tensor reciprocal(const Tensor& x) {
  TESSERA_OP_SCOPE("reciprocal", x);
  return unary_op<fn::ReciprocalFn>(
      x, "ReciprocalBackward", true, Saves::Output,
      [](const Tensor& g, const Tensor&, const Tensor& y) { return neg(g * y * y); });
}
Tensor sin(const Tensor& x) {
  TESSERA_OP_SCOPE("sin", x);
  return unary_op<fn::SinFn>(
      x, "SinBackward", true, Saves::Input,
      [](const Tensor& g, const Tensor& x, const Tensor&) { return g * cos(x); });
}
Tensor cos(const Tensor& x) {
  TESSERA_OP_SCOPE("cos", x);
  return unary_op<fn::CosFn>(
      x, "CosBackward", true, Saves::Input,
      [](const Tensor& g, const Tensor& x, const Tensor&) { return neg(g * sin(x)); });
}
Tensor tanh(const Tensor& x) {
  TESSERA_OP_SCOPE("tanh", x);
  return unary_op<fn::TanhFn>(
      x, "TanhBackward", true, Saves::Output,
      [](const Tensor& g, const Tensor&, const Tensor& y) { return g * (1.0 - y * y); });
}
Tensor sigmoid(const Tensor& x) {
  TESSERA_OP_SCOPE("sigmoid", x);
  return unary_op<fn::SigmoidFn>(
      x, "SigmoidBackward", true, Saves::Output,
      [](const Tensor& g, const Tensor&, const Tensor& y) { return g * y * (1.0 - y); });
}
Tensor relu(const Tensor& x) {
  TESSERA_OP_SCOPE("relu", x);
  return unary_op<fn::ReluFn>(x, "ReluBackward", false, Saves::Output,
                              [](const Tensor& g, const Tensor&, const Tensor& y) {
                                return where(y > zeros_like(y), g, zeros_like(g));
                              });
}

Tensor gelu(const Tensor& x, std::string_view approximate) {
  TESSERA_OP_SCOPE("gelu", x);
  if (approximate == "none") {
    return unary_op<fn::GeluFn>(x, "GeluBackward", true, Saves::Input,
                                [](const Tensor& g, const Tensor& x, const Tensor&) {
                                  return activation_grad<fn::GeluGradFn>(g, x, [&] {
                                    // d/dx x Phi(x) = Phi(x) + x phi(x)
                                    Tensor cdf = (1.0 + erf(x * 0.70710678118654752440)) * 0.5;
                                    Tensor pdf = exp(x * x * -0.5) * kInvSqrt2Pi;
                                    return g * (cdf + x * pdf);
                                  });
                                });
  }
  TESSERA_CHECK(approximate == "tanh", ValueError,
                "[gelu] expected approximate 'none' or 'tanh', got '", approximate, "'");
  return unary_op<fn::GeluTanhFn>(x, "GeluTanhBackward", true, Saves::Input, gelu_tanh_grad);
}

Tensor silu(const Tensor& x) {
  TESSERA_OP_SCOPE("silu", x);
  return unary_op<fn::SiluFn>(x, "SiluBackward", true, Saves::Input,
                              [](const Tensor& g, const Tensor& x, const Tensor&) {
                                return activation_grad<fn::SiluGradFn>(g, x, [&] {
                                  Tensor s = sigmoid(x);
                                  return g * s * (1.0 + x * (1.0 - s));
                                });
                              });
}

Tensor erf(const Tensor& x) {
  TESSERA_OP_SCOPE("erf", x);
  return unary_op<fn::ErfFn>(x, "ErfBackward", true, Saves::Input,
                             [](const Tensor& g, const Tensor& x, const Tensor&) {
                               return g * exp(x * x * -1.0) * k2OverSqrtPi;
                             });
}

Tensor softplus(const Tensor& x, double beta, double threshold) {
  TESSERA_OP_SCOPE("softplus", x);
  TESSERA_CHECK(beta > 0, ValueError, "[softplus] expected beta > 0, got ", beta);
  Tensor out;
  {
    autograd::NoGradGuard ng;
    // Stable form: (max(bx, 0) + log1p(exp(-|bx|))) / beta, x itself above the threshold.
    Tensor bx = x * beta;
    Tensor soft = (relu(bx) + log1p(exp(neg(abs(bx))))) / beta;
    out = where(bx > wrap_scalar(threshold, bx.device()), x, soft);
  }
  if (needs_grad({x})) {
    record("SoftplusBackward", {x}, {out}, {x},
           [beta, threshold](BackwardContext& ctx, const TensorList& g) {
             Tensor bx = ctx.saved(0) * beta;
             return TensorList{where(bx > wrap_scalar(threshold, bx.device()), g[0], g[0] * sigmoid(bx))};
           });
  }
  return out;
}

Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max) {
  TESSERA_OP_SCOPE("clamp", x);
  TESSERA_CHECK(min || max, ValueError, "[clamp] expected at least one of min and max, got neither");
  // Bounds promote as Python numbers do: a float bound makes an integer tensor's result float.
  DType dt = x.dtype();
  for (const auto& bound : {min, max})
    if (bound) dt = promote_types(dt, result_type(x, *bound));
  if (dt != x.dtype()) return clamp(cast(x, dt), min, max);
  Tensor out;
  Tensor keep;  // where the gradient passes through
  {
    autograd::NoGradGuard ng;
    out = x;
    if (min) out = maximum(out, cast_raw(wrap_scalar(*min, x.device()), x.dtype()));
    if (max) out = minimum(out, cast_raw(wrap_scalar(*max, x.device()), x.dtype()));
    if (out.is_same(x)) out = clone(x);
  }
  if (needs_grad({x})) {
    record("ClampBackward", {x}, {out}, {x}, [min, max](BackwardContext& ctx, const TensorList& g) {
      Tensor x = ctx.saved(0);
      Tensor pass = ones_like(x, kBool);
      if (min) pass = logical_and(pass, x >= wrap_scalar(*min, x.device()));
      if (max) pass = logical_and(pass, x <= wrap_scalar(*max, x.device()));
      return TensorList{where(pass, g[0], zeros_like(g[0]))};
    });
  }
  return out;
}

TESSERA_REGISTER_OPS({"neg", "elementwise", kNumericTypes, true}, {"abs", "elementwise", kNumericTypes, true},
                    {"sign", "elementwise", kNumericTypes, true},
                    {"square", "elementwise", kNumericTypes, true},
                    {"exp", "elementwise", kAllTypes, true}, {"log", "elementwise", kAllTypes, true},
                    {"log1p", "elementwise", kAllTypes, true}, {"sqrt", "elementwise", kAllTypes, true},
                    {"rsqrt", "elementwise", kAllTypes, true},
                    {"reciprocal", "elementwise", kAllTypes, true},
                    {"sin", "elementwise", kAllTypes, true}, {"cos", "elementwise", kAllTypes, true},
                    {"tanh", "elementwise", kAllTypes, true},
                    {"sigmoid", "elementwise", kAllTypes, true},
                    {"relu", "elementwise", kNumericTypes, true},
                    {"gelu", "elementwise", kFloatingTypes, true},
                    {"silu", "elementwise", kFloatingTypes, true},
                    {"erf", "elementwise", kFloatingTypes, true},
                    {"softplus", "elementwise", kFloatingTypes, true},
                    {"clamp", "elementwise", kNumericTypes, true});

}  // namespace tessera
