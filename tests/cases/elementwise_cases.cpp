// Op cases for elementwise arithmetic, unary functions and copies.
#include <cmath>
#include <functional>

#include "testing/op_cases.h"
#include "testing/reference.h"

namespace tessera::testing {
namespace {

OpCase unary_case(std::string op, std::function<Tensor(const Tensor&)> f,
                  std::function<double(double)> ref, InputSpec in, std::string label = "basic") {
  return {op, label, {in}, [f](const TensorList& x) { return TensorList{f(x[0])}; },
          [ref](const TensorList& x) { return TensorList{map1(x[0], ref)}; }};
}

OpCase binary_case(std::string op, std::function<Tensor(const Tensor&, const Tensor&)> f,
                   std::function<double(double, double)> ref, InputSpec a, InputSpec b,
                   std::string label) {
  return {op, label, {a, b}, [f](const TensorList& x) { return TensorList{f(x[0], x[1])}; },
          [ref](const TensorList& x) { return TensorList{map2(x[0], x[1], ref)}; }};
}

double sigmoid_ref(double x) { return 1 / (1 + std::exp(-x)); }

std::vector<OpCase> unary_cases() {
  std::vector<OpCase> v;
  auto both = [&](std::string op, std::function<Tensor(const Tensor&)> f,
                  std::function<double(double)> ref, bool pos) {
    auto spec = [pos](Shape s, bool nc) { return pos ? positive(s, nc) : real(s, nc); };
    v.push_back(unary_case(op, f, ref, spec({3, 4}, false), "contiguous"));
    v.push_back(unary_case(op, f, ref, spec({2, 3, 4}, true), "noncontiguous"));
  };
  both("neg", [](auto& x) { return neg(x); }, [](double x) { return -x; }, false);
  both("abs", [](auto& x) { return abs(x); }, [](double x) { return std::fabs(x); }, false);
  both("square", [](auto& x) { return square(x); }, [](double x) { return x * x; }, false);
  both("exp", [](auto& x) { return exp(x); }, [](double x) { return std::exp(x); }, false);
  both("log", [](auto& x) { return log(x); }, [](double x) { return std::log(x); }, true);
  both("log1p", [](auto& x) { return log1p(x); }, [](double x) { return std::log1p(x); }, true);
  both("sqrt", [](auto& x) { return sqrt(x); }, [](double x) { return std::sqrt(x); }, true);
  both("rsqrt", [](auto& x) { return rsqrt(x); }, [](double x) { return 1 / std::sqrt(x); }, true);
  both("reciprocal", [](auto& x) { return reciprocal(x); }, [](double x) { return 1 / x; }, true);
  both("sin", [](auto& x) { return sin(x); }, [](double x) { return std::sin(x); }, false);
  both("cos", [](auto& x) { return cos(x); }, [](double x) { return std::cos(x); }, false);
  both("tanh", [](auto& x) { return tanh(x); }, [](double x) { return std::tanh(x); }, false);
  both("sigmoid", [](auto& x) { return sigmoid(x); }, sigmoid_ref, false);
  both("relu", [](auto& x) { return relu(x); }, [](double x) { return x > 0 ? x : 0; }, false);
  both("erf", [](auto& x) { return erf(x); }, [](double x) { return std::erf(x); }, false);
  both("silu", [](auto& x) { return silu(x); }, [](double x) { return x * sigmoid_ref(x); }, false);
  both("gelu", [](auto& x) { return gelu(x); },
       [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }, false);
  v.push_back(unary_case(
      "gelu", [](auto& x) { return gelu(x, "tanh"); },
      [](double x) {
        return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
      },
      real({5, 3}), "tanh_approximation"));
  both("softplus", [](auto& x) { return softplus(x); },
       [](double x) { return std::log1p(std::exp(x)); }, false);
  v.push_back(unary_case(
      "softplus", [](auto& x) { return softplus(x * 10.0, 2.0, 5.0); },
      [](double x) { return 2 * x * 10 > 5 ? x * 10 : std::log1p(std::exp(2 * x * 10)) / 2; },
      real({4, 4}), "beta_threshold"));
  v.push_back(unary_case(
      "clamp", [](auto& x) { return clamp(x, -0.5, 1.0); },
      [](double x) { return std::min(std::max(x, -0.5), 1.0); }, real({4, 5}), "both_bounds"));
  v.push_back(unary_case(
      "clamp", [](auto& x) { return clamp(x, std::nullopt, 0.3); },
      [](double x) { return std::min(x, 0.3); }, real({6}, true), "max_only"));
  v.push_back(unary_case("sign", [](auto& x) { return sign(x); },
                         [](double x) { return double((0 < x) - (x < 0)); }, real({3, 3})));
  // A round trip through another dtype (float32 for float64, float64 for the rest: a cast to
  // the input's own dtype is a no-op that runs no cast).
  v.push_back(unary_case(
      "cast",
      [](auto& x) { return cast(cast(x, x.dtype() == kFloat64 ? kFloat32 : kFloat64), x.dtype()); },
      [](double x) { return double(float(x)); }, real({3, 4})));
  // The float32 round trip is flat below float32 resolution: difference over a wider step.
  v.back().tol = {.eps = 1e-3, .atol = 1e-4, .rtol = 1e-3};
  v.push_back(unary_case("clone", [](auto& x) { return clone(x); }, [](double x) { return x; },
                         real({3, 4}, true)));
  v.push_back(unary_case("contiguous", [](auto& x) { return contiguous(x); },
                         [](double x) { return x; }, real({4, 3}, true)));
  for (auto& c : v) c.gradgradcheck = c.op == "tanh" || c.op == "sigmoid" || c.op == "gelu";
  return v;
}

std::vector<OpCase> binary_cases() {
  std::vector<OpCase> v;
  auto all_shapes = [&](std::string op, std::function<Tensor(const Tensor&, const Tensor&)> f,
                        std::function<double(double, double)> ref, bool pos_b) {
    auto b = [pos_b](Shape s, bool nc = false) { return pos_b ? positive(s, nc) : real(s, nc); };
    v.push_back(binary_case(op, f, ref, real({3, 4}), b({3, 4}), "same_shape"));
    v.push_back(binary_case(op, f, ref, real({2, 3, 4}), b({4}), "broadcast_row"));
    v.push_back(binary_case(op, f, ref, real({3, 1}), b({1, 4}), "broadcast_both"));
    v.push_back(binary_case(op, f, ref, real({4, 3}, true), b({4, 3}, true), "noncontiguous"));
  };
  all_shapes("add", [](auto& a, auto& b) { return add(a, b); },
             [](double a, double b) { return a + b; }, false);
  v.push_back(binary_case("add", [](auto& a, auto& b) { return add(a, b, 2.5); },
                          [](double a, double b) { return a + 2.5 * b; }, real({3}), real({2, 3}),
                          "alpha"));
  all_shapes("sub", [](auto& a, auto& b) { return sub(a, b); },
             [](double a, double b) { return a - b; }, false);
  all_shapes("mul", [](auto& a, auto& b) { return mul(a, b); },
             [](double a, double b) { return a * b; }, false);
  all_shapes("div", [](auto& a, auto& b) { return div(a, b); },
             [](double a, double b) { return a / b; }, true);
  // One operand rounded to a 16-bit float first (autocast's float32 residual plus a bfloat16
  // branch): float32 kernels widen it as they load, the reference casts it back first. The
  // result is cast to the other operand's dtype (a no-op but for bfloat16 inputs meeting a
  // float16 one). Rounding is flat, so no gradient check.
  auto widening = [&](std::string op, std::function<Tensor(const Tensor&, const Tensor&)> f,
                      DType half, bool half_first, InputSpec a, InputSpec b, std::string label) {
    auto run = [f, half, half_first](const TensorList& x, bool cast_back) {
      const int r = half_first ? 0 : 1;
      const Tensor rounded = cast_back ? cast(cast(x[r], half), x[r].dtype()) : cast(x[r], half);
      const Tensor y = half_first ? f(rounded, x[1]) : f(x[0], rounded);
      return TensorList{cast(y, x[1 - r].dtype())};
    };
    v.push_back({op,
                 label,
                 {a, b},
                 [run](const TensorList& x) { return run(x, false); },
                 [run](const TensorList& x) { return run(x, true); }});
    v.back().gradcheck = false;
  };
  widening(
      "add", [](auto& a, auto& b) { return add(a, b); }, kBFloat16, false, real({2, 3, 4}),
      real({4}), "bfloat16_row");
  widening(
      "sub", [](auto& a, auto& b) { return sub(a, b); }, kFloat16, true, real({4, 3}, true),
      real({4, 3}, true), "float16_first_noncontiguous");
  widening(
      "mul", [](auto& a, auto& b) { return mul(a, b); }, kBFloat16, true, real({3, 1}),
      real({1, 4}), "bfloat16_first_broadcast");
  widening(
      "div", [](auto& a, auto& b) { return div(a, b); }, kFloat16, false, real({5, 7}),
      positive({5, 7}), "float16_same_shape");
  v.push_back(binary_case("pow", [](auto& a, auto& b) { return pow(a, b); },
                          [](double a, double b) { return std::pow(a, b); }, positive({3, 4}),
                          real({4}), "tensor_exponent"));
  v.push_back(binary_case("pow", [](auto& a, auto&) { return pow(a, 3); },
                          [](double a, double) { return a * a * a; }, real({3, 4}),
                          constant({1}), "scalar_exponent"));
  all_shapes("maximum", [](auto& a, auto& b) { return maximum(a, b); },
             [](double a, double b) { return std::max(a, b); }, false);
  all_shapes("minimum", [](auto& a, auto& b) { return minimum(a, b); },
             [](double a, double b) { return std::min(a, b); }, false);
  v.push_back({"lerp", "tensor_weight", {real({3, 4}), real({3, 4}), unit({4})},
               [](const TensorList& x) { return TensorList{lerp(x[0], x[1], x[2])}; },
               [](const TensorList& x) { return TensorList{x[0] + x[2] * (x[1] - x[0])}; }});
  v.push_back({"lerp", "scalar_weight", {real({5}), real({2, 5})},
               [](const TensorList& x) { return TensorList{lerp(x[0], x[1], 0.3)}; },
               [](const TensorList& x) { return TensorList{x[0] * 0.7 + x[1] * 0.3}; }});
  v.push_back({"where", "broadcast", {mask({3, 4}), real({3, 4}), real({4})},
               [](const TensorList& x) { return TensorList{where(x[0], x[1], x[2])}; },
               [](const TensorList& x) {
                 return TensorList{x[1] * x[0] + x[2] * logical_not(x[0])};
               }});
  v.push_back({"masked_fill", "broadcast_mask", {real({3, 4}), mask({4})},
               [](const TensorList& x) { return TensorList{masked_fill(x[0], x[1], -1.5)}; },
               [](const TensorList& x) {
                 return TensorList{where(x[1], full({}, -1.5, x[0].dtype()), x[0])};
               }});
  for (auto& c : v) c.gradgradcheck = c.op == "mul" || c.op == "div";
  return v;
}

// Comparisons, logic and floating-point class tests: bool results, value checks only.
std::vector<OpCase> logic_cases() {
  std::vector<OpCase> v;
  auto values_case = [&](std::string op, std::vector<InputSpec> in,
                         std::function<Tensor(const TensorList&)> fn,
                         std::function<Tensor(const TensorList&)> ref) {
    v.push_back(one(std::move(op), "values", std::move(in), std::move(fn), std::move(ref)));
    v.back().gradcheck = false;
  };
  values_case(
      "le", {real({3, 4}), real({4})}, [](auto& x) { return le(x[0], x[1]); },
      [](auto& x) { return map2(x[0], x[1], [](double a, double b) { return a <= b; }); });
  values_case(
      "logical_xor", {mask({3, 4}), mask({4})}, [](auto& x) { return logical_xor(x[0], x[1]); },
      [](auto& x) { return map2(x[0], x[1], [](double a, double b) { return a != b; }); });
  values_case(
      "logical_not", {mask({3, 4})}, [](auto& x) { return logical_not(x[0]); },
      [](auto& x) { return map1(x[0], [](double a) { return a == 0; }); });
  // Bitwise ops: integers of both signs (and a broadcast), and bools staying bools.
  auto bits = [](double a, double b, auto f) {
    return static_cast<double>(f(static_cast<int64_t>(a), static_cast<int64_t>(b)));
  };
  values_case(
      "bitwise_and", {index({3, 4}, 64), index({4}, 64)},
      [](auto& x) { return bitwise_and(x[0] - 32, x[1]); },
      [bits](auto& x) {
        return map2(x[0] - 32, x[1],
                    [bits](double a, double b) { return bits(a, b, std::bit_and{}); });
      });
  values_case(
      "bitwise_or", {index({3, 4}, 64), index({3, 4}, 64)},
      [](auto& x) { return bitwise_or(x[0] - 32, x[1]); },
      [bits](auto& x) {
        return map2(x[0] - 32, x[1],
                    [bits](double a, double b) { return bits(a, b, std::bit_or{}); });
      });
  values_case(
      "bitwise_xor", {mask({3, 4}), mask({4})}, [](auto& x) { return bitwise_xor(x[0], x[1]); },
      [](auto& x) { return map2(x[0], x[1], [](double a, double b) { return a != b; }); });
  values_case(
      "bitwise_not", {index({3, 4}, 64)}, [](auto& x) { return bitwise_not(x[0] - 32); },
      [](auto& x) { return map1(x[0] - 32, [](double a) { return -a - 1; }); });
  // sqrt and log of negative inputs give nan.
  values_case(
      "isnan", {constant({3, 4})}, [](auto& x) { return isnan(sqrt(x[0])); },
      [](auto& x) { return map1(x[0], [](double a) { return a < 0; }); });
  values_case(
      "isfinite", {constant({3, 4})}, [](auto& x) { return isfinite(log(x[0])); },
      [](auto& x) { return map1(x[0], [](double a) { return a > 0; }); });
  values_case(
      "allclose", {constant({3, 4})},
      [](auto& x) {
        bool near = allclose(x[0], x[0] + 1e-9), far = allclose(x[0], x[0] + 0.01);
        return full({}, near && !far, TensorOptions(kBool).with_device(x[0].device()));
      },
      [](auto&) { return full({}, true, kBool); });
  return v;
}

// In-place ops are checked on a clone of a leaf (in-place on a leaf that requires grad is an
// error), against their out-of-place twins.
std::vector<OpCase> inplace_cases() {
  auto inplace = [](std::string op, std::function<void(Tensor&, const Tensor&)> f,
                    std::function<Tensor(const Tensor&, const Tensor&)> ref, InputSpec b) {
    return OpCase{op, "inplace", {real({3, 4}), b},
                  [f](const TensorList& x) {
                    Tensor s = x[0] * 1.0;
                    f(s, x[1]);
                    return TensorList{s};
                  },
                  [ref](const TensorList& x) { return TensorList{ref(x[0], x[1])}; }};
  };
  return {
      inplace("add_", [](Tensor& s, const Tensor& o) { s.add_(o, 2.0); },
              [](auto& a, auto& b) { return a + b * 2.0; }, real({4})),
      inplace("sub_", [](Tensor& s, const Tensor& o) { s.sub_(o); },
              [](auto& a, auto& b) { return a - b; }, real({3, 4})),
      inplace("mul_", [](Tensor& s, const Tensor& o) { s.mul_(o); },
              [](auto& a, auto& b) { return a * b; }, real({3, 1})),
      inplace("div_", [](Tensor& s, const Tensor& o) { s.div_(o); },
              [](auto& a, auto& b) { return a / b; }, positive({4})),
      inplace("copy_", [](Tensor& s, const Tensor& o) { s.copy_(o); },
              [](auto& a, auto& b) { return b.expand(a.sizes()) * 1.0; }, real({4})),
      inplace("clamp_", [](Tensor& s, const Tensor&) { s.clamp_(-1.0, 0.5); },
              [](auto& a, auto&) { return clamp(a, -1.0, 0.5); }, constant({1})),
      inplace("masked_fill_", [](Tensor& s, const Tensor& o) { s.masked_fill_(o > 0.0, 3.0); },
              [](auto& a, auto& b) { return masked_fill(a, b > 0.0, 3.0); }, constant({3, 4})),
  };
}

TESSERA_OP_CASES(unary_cases());
TESSERA_OP_CASES(binary_cases());
TESSERA_OP_CASES(logic_cases());
TESSERA_OP_CASES(inplace_cases());

}  // namespace
}  // namespace tessera::testing
