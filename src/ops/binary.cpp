// Binary and ternary arithmetic: promotion, broadcasting, autograd.
#include "ops/op_utils.h"
#include "tessera/ops/op_info.h"
#include "tessera/runtime/op_scope.h"

namespace tessera {

using namespace detail;

namespace {
// 0: Python number, 1: 0-d tensor, 2: dimensioned tensor.
int priority(const Tensor& t) { return t.impl()->is_wrapped_number ? 0 : t.dim() == 0 ? 1 : 2; }
int category(DType t) { return t == kBool ? 0 : is_floating(t) ? 2 : 1; }
}  // namespace

DType result_type(const Tensor& a, const Tensor& b) {
  int pa = priority(a), pb = priority(b);
  if (pa == pb) {
    DType r = promote_types(a.dtype(), b.dtype());
    // Two Python numbers: ints stay int64, floats use the default float32.
    return r;
  }
  const Tensor& hi = pa > pb ? a : b;
  const Tensor& lo = pa > pb ? b : a;
  if (category(lo.dtype()) <= category(hi.dtype())) return hi.dtype();
  // The lower-priority operand is of a higher category: use its category's default.
  if (category(lo.dtype()) == 2) return lo.impl()->is_wrapped_number ? kFloat32 : lo.dtype();
  return lo.impl()->is_wrapped_number ? kInt64 : lo.dtype();
}

DType result_type(const Tensor& a, const Scalar& b) { return result_type(a, wrap_scalar(b)); }

Tensor wrap_scalar(const Scalar& s, Device device) {
  DType d = s.is_floating() ? kFloat64 : s.is_bool() ? kBool : kInt64;
  Tensor t = full({}, s, TensorOptions(d).with_device(device));
  t.impl()->is_wrapped_number = true;
  return t;
}

namespace {

template <class Fn>
Tensor binary_raw(const Tensor& a, const Tensor& b, DType compute) {
  if constexpr (fn::kWidensOnLoad<Fn>) {
    if (compute == kFloat32 && fn::widens_on_load(compute, a.dtype(), b.dtype()))
      return run_elementwise<Fn>(Fn::name, compute, {a, b});
  }
  return run_elementwise<Fn>(Fn::name, compute, {cast_raw(a, compute), cast_raw(b, compute)});
}

DType arith_dtype(const Tensor& a, const Tensor& b, std::string_view op) {
  TESSERA_CHECK(a.device() == b.device(), ValueError, "[", op, "] expected both tensors on ",
                a.device().str(), ", got one on ", b.device().str());
  return result_type(a, b);
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b, const Scalar& alpha) {
  TESSERA_OP_SCOPE("add", a, b);
  DType dt = arith_dtype(a, b, "add");
  bool unit = alpha.to_double() == 1.0;
  Tensor out;
  {
    autograd::NoGradGuard ng;
    out = binary_raw<fn::AddFn>(a, unit ? b : mul(b, wrap_scalar(alpha, b.device())), dt);
  }
  if (needs_grad({a, b})) {
    record("AddBackward", {a, b}, {out}, {},
           [sa = a.sizes(), sb = b.sizes(), da = a.dtype(), db = b.dtype(), alpha, unit](
               BackwardContext& ctx, const TensorList& g) {
             TensorList r(2);
             if (ctx.needs_input_grad(0)) r[0] = reduce_grad(g[0], sa, da);
             if (ctx.needs_input_grad(1)) r[1] = reduce_grad(unit ? g[0] : g[0] * alpha, sb, db);
             return r;
           });
  }
  return out;
}

Tensor sub(const Tensor& a, const Tensor& b, const Scalar& alpha) {
  TESSERA_OP_SCOPE("sub", a, b);
  TESSERA_CHECK(a.dtype() != kBool || b.dtype() != kBool, TypeError,
                "[sub] expected numeric tensors, got bool (use logical_xor)");
  if (alpha.to_double() != 1.0) return add(a, b, Scalar(-alpha.to_double()));
  DType dt = arith_dtype(a, b, "sub");
  Tensor out = binary_raw<fn::SubFn>(a, b, dt);
  if (needs_grad({a, b})) {
    record("SubBackward", {a, b}, {out}, {},
           [sa = a.sizes(), sb = b.sizes(), da = a.dtype(), db = b.dtype()](BackwardContext& ctx,
                                                                            const TensorList& g) {
             TensorList r(2);
             if (ctx.needs_input_grad(0)) r[0] = reduce_grad(g[0], sa, da);
             if (ctx.needs_input_grad(1)) r[1] = reduce_grad(neg(g[0]), sb, db);
             return r;
           });
  }
  return out;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  TESSERA_OP_SCOPE("mul", a, b);
  DType dt = arith_dtype(a, b, "mul");
  Tensor out = binary_raw<fn::MulFn>(a, b, dt);
  if (needs_grad({a, b})) {
    record("MulBackward", {a, b}, {out}, {a, b},
           [sa = a.sizes(), sb = b.sizes(), da = a.dtype(), db = b.dtype()](BackwardContext& ctx,
                                                                            const TensorList& g) {
             TensorList r(2);
             if (ctx.needs_input_grad(0)) r[0] = reduce_grad(g[0] * ctx.saved(1), sa, da);
             if (ctx.needs_input_grad(1)) r[1] = reduce_grad(g[0] * ctx.saved(0), sb, db);
             return r;
           });
  }
  return out;
}

Tensor div(const Tensor& a, const Tensor& b) {
  TESSERA_OP_SCOPE("div", a, b);
  DType dt = float_compute_dtype(arith_dtype(a, b, "div"));
  Tensor out = binary_raw<fn::DivFn>(a, b, dt);
  if (needs_grad({a, b})) {
    record("DivBackward", {a, b}, {out}, {a, b},
           [sa = a.sizes(), sb = b.sizes(), da = a.dtype(), db = b.dtype()](BackwardContext& ctx,
                                                                            const TensorList& g) {
             TensorList r(2);
             Tensor bb = ctx.saved(1);
             if (ctx.needs_input_grad(0)) r[0] = reduce_grad(g[0] / bb, sa, da);
             if (ctx.needs_input_grad(1))
               r[1] = reduce_grad(neg(g[0]) * ctx.saved(0) / (bb * bb), sb, db);
             return r;
           });
  }
  return out;
}

Tensor pow(const Tensor& a, const Tensor& exponent) {
  TESSERA_OP_SCOPE("pow", a, exponent);
  DType dt = arith_dtype(a, exponent, "pow");
  Tensor out = binary_raw<fn::PowFn>(a, exponent, dt);
  if (needs_grad({a, exponent})) {
    record("PowBackward", {a, exponent}, {out}, {a, exponent, out},
           [sa = a.sizes(), sb = exponent.sizes(), da = a.dtype(), db = exponent.dtype()](
               BackwardContext& ctx, const TensorList& g) {
             TensorList r(2);
             Tensor x = ctx.saved(0), p = ctx.saved(1);
             if (ctx.needs_input_grad(0))
               r[0] = reduce_grad(
                   where(p == zeros_like(p), zeros_like(g[0]), g[0] * p * pow(x, p - 1.0)), sa, da);
             if (ctx.needs_input_grad(1)) {
               // d/dp x^p = x^p log x, taken as 0 where x == 0 (the limit for p > 0).
               Tensor lx = log(where(x == zeros_like(x), ones_like(x), x));
               r[1] = reduce_grad(g[0] * ctx.saved(2) * lx, sb, db);
             }
             return r;
           });
  }
  return out;
}

Tensor pow(const Tensor& a, const Scalar& exponent) {
  TESSERA_CHECK(is_floating(a.dtype()) || exponent.is_floating() || exponent.to_double() >= 0,
                ValueError, "[pow] expected a non-negative exponent for an integer tensor of ",
                a.dtype(), ", got ", exponent, " (integers to negative integer powers)");
  return pow(a, wrap_scalar(exponent, a.device()));
}

namespace {
// maximum/minimum: the gradient goes to the selected input, split evenly on ties, and, as in
// torch, to both inputs where a NaN makes them incomparable (the NaN propagated from either).
template <class Fn>
Tensor extremum(const Tensor& a, const Tensor& b, const char* backward_name, bool is_max) {
  DType dt = arith_dtype(a, b, Fn::name);
  Tensor out = binary_raw<Fn>(a, b, dt);
  if (needs_grad({a, b})) {
    record(backward_name, {a, b}, {out}, {a, b},
           [sa = a.sizes(), sb = b.sizes(), da = a.dtype(), db = b.dtype(), is_max](
               BackwardContext& ctx, const TensorList& g) {
             Tensor x = ctx.saved(0), y = ctx.saved(1);
             Tensor share = where(x == y, g[0] * 0.5, g[0]);
             Tensor none = zeros_like(g[0]);
             TensorList r(2);
             if (ctx.needs_input_grad(0))
               r[0] = reduce_grad(where(is_max ? x < y : x > y, none, share), sa, da);
             if (ctx.needs_input_grad(1))
               r[1] = reduce_grad(where(is_max ? y < x : y > x, none, share), sb, db);
             return r;
           });
  }
  return out;
}
}  // namespace

Tensor maximum(const Tensor& a, const Tensor& b) {
  TESSERA_OP_SCOPE("maximum", a, b);
  return extremum<fn::MaximumFn>(a, b, "MaximumBackward", /*is_max=*/true);
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  TESSERA_OP_SCOPE("minimum", a, b);
  return extremum<fn::MinimumFn>(a, b, "MinimumBackward", /*is_max=*/false);
}

Tensor lerp(const Tensor& a_, const Tensor& b_, const Tensor& weight_) {
  TESSERA_OP_SCOPE("lerp", a_, b_, weight_);
  const Tensor& a = op_scope.arg(0);
  const Tensor& b = op_scope.arg(1);
  const Tensor& weight = op_scope.arg(2);
  TESSERA_CHECK(is_floating(a.dtype()) && a.dtype() == b.dtype(), TypeError,
                "[lerp] expected start and end of the same floating dtype, got ", a.dtype(),
                " and ", b.dtype());
  DType dt = a.dtype();
  Tensor w = cast_raw(weight, dt);
  Tensor out = run_elementwise<fn::LerpFn>("lerp", dt, {a, b, w});
  if (needs_grad({a, b, weight})) {
    record("LerpBackward", {a, b, weight}, {out}, {a, b, weight},
           [sa = a.sizes(), sb = b.sizes(), sw = weight.sizes(), dw = weight.dtype(), dt](
               BackwardContext& ctx, const TensorList& g) {
             Tensor w = ctx.saved(2);
             TensorList r(3);
             if (ctx.needs_input_grad(0)) r[0] = reduce_grad(g[0] * (1.0 - w), sa, dt);
             if (ctx.needs_input_grad(1)) r[1] = reduce_grad(g[0] * w, sb, dt);
             if (ctx.needs_input_grad(2))
               r[2] = reduce_grad(g[0] * (ctx.saved(1) - ctx.saved(0)), sw, dw);
             return r;
           });
  }
  return out;
}

Tensor lerp(const Tensor& a, const Tensor& b, const Scalar& weight) {
  return lerp(a, b, full({}, weight, TensorOptions(a.dtype()).with_device(a.device())));
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  TESSERA_OP_SCOPE("where", cond, a, b);
  TESSERA_CHECK(cond.dtype() == kBool, TypeError, "[where] expected a bool condition, got ",
                cond.dtype());
  DType dt = arith_dtype(a, b, "where");
  Tensor out = run_elementwise<fn::WhereFn>("where", dt, {cond, cast_raw(a, dt), cast_raw(b, dt)});
  if (needs_grad({a, b})) {
    record("WhereBackward", {cond, a, b}, {out}, {cond},
           [sa = a.sizes(), sb = b.sizes(), da = a.dtype(), db = b.dtype()](BackwardContext& ctx,
                                                                            const TensorList& g) {
             Tensor c = ctx.saved(0);
             Tensor z = zeros_like(g[0]);
             TensorList r(3);
             if (ctx.needs_input_grad(1)) r[1] = reduce_grad(where(c, g[0], z), sa, da);
             if (ctx.needs_input_grad(2)) r[2] = reduce_grad(where(c, z, g[0]), sb, db);
             return r;
           });
  }
  return out;
}

// ---- in place ----

namespace {
// other, or a differentiable copy when it shares self's memory: the backward must see other's
// value from before the write (a.mul_(a) saves the a it multiplied by).
Tensor unaliased(const Tensor& self, const Tensor& other) {
  return shares_storage(self, other) ? clone(other) : other;
}

// Records an in-place binary op on self whose backward is given in terms of (g, saved...).
template <class Fn>
Tensor& inplace_binary(Tensor& self, const Tensor& other, const char* op, const char* node,
                       TensorList saved, autograd::BackwardFn backward) {
  const bool grad = needs_grad({self, other});
  autograd::check_inplace(self, op, grad);
  run_elementwise_inplace<Fn>(op, self, other);
  if (grad) record(node, {self, other}, {self}, saved, std::move(backward), {.inplace = true});
  return self;
}
}  // namespace

Tensor& add_(Tensor& self, const Tensor& other, const Scalar& alpha) {
  TESSERA_OP_SCOPE("add_", self, other);
  Tensor o = alpha.to_double() == 1.0 ? other : mul(other, wrap_scalar(alpha, other.device()));
  return inplace_binary<fn::AddFn>(
      self, o, "add_", "AddBackward", {},
      [ss = self.sizes(), so = o.sizes(), ds = self.dtype(), dd = o.dtype()](BackwardContext& ctx,
                                                                             const TensorList& g) {
        return TensorList{g[0], ctx.needs_input_grad(1) ? reduce_grad(g[0], so, dd) : Tensor()};
      });
}

Tensor& sub_(Tensor& self, const Tensor& other, const Scalar& alpha) {
  TESSERA_OP_SCOPE("sub_", self, other);
  return add_(self, other, Scalar(-alpha.to_double()));
}

Tensor& mul_(Tensor& self, const Tensor& other_) {
  TESSERA_OP_SCOPE("mul_", self, other_);
  const Tensor other = unaliased(self, other_);
  // The gradient for other needs self's value before the write (with its history, for double
  // backward).
  Tensor before = needs_grad({other}) ? clone(self) : Tensor();
  return inplace_binary<fn::MulFn>(self, other, "mul_", "MulBackward", {other, before},
                                   [so = other.sizes(), dd = other.dtype(), ds = self.dtype()](
                                       BackwardContext& ctx, const TensorList& g) {
                                     TensorList r(2);
                                     if (ctx.needs_input_grad(0))
                                       r[0] = reduce_grad(g[0] * ctx.saved(0), g[0].sizes(), ds);
                                     if (ctx.needs_input_grad(1))
                                       r[1] = reduce_grad(g[0] * ctx.saved(1), so, dd);
                                     return r;
                                   });
}

Tensor& div_(Tensor& self, const Tensor& other_) {
  TESSERA_OP_SCOPE("div_", self, other_);
  TESSERA_CHECK(is_floating(self.dtype()), TypeError,
                "[div_] expected a floating-point tensor to divide in place, got ", self.dtype());
  const Tensor other = unaliased(self, other_);
  Tensor before = needs_grad({other}) ? clone(self) : Tensor();
  return inplace_binary<fn::DivFn>(self, other, "div_", "DivBackward", {other, before},
                                   [so = other.sizes(), dd = other.dtype(), ds = self.dtype()](
                                       BackwardContext& ctx, const TensorList& g) {
                                     TensorList r(2);
                                     Tensor b = ctx.saved(0);
                                     if (ctx.needs_input_grad(0))
                                       r[0] = reduce_grad(g[0] / b, g[0].sizes(), ds);
                                     if (ctx.needs_input_grad(1))
                                       r[1] =
                                           reduce_grad(neg(g[0]) * ctx.saved(1) / (b * b), so, dd);
                                     return r;
                                   });
}

// ---- operators ----
Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, const Scalar& b) { return add(a, wrap_scalar(b, a.device())); }
Tensor operator-(const Tensor& a, const Scalar& b) { return sub(a, wrap_scalar(b, a.device())); }
Tensor operator*(const Tensor& a, const Scalar& b) { return mul(a, wrap_scalar(b, a.device())); }
Tensor operator/(const Tensor& a, const Scalar& b) { return div(a, wrap_scalar(b, a.device())); }
Tensor operator+(const Scalar& a, const Tensor& b) { return add(wrap_scalar(a, b.device()), b); }
Tensor operator-(const Scalar& a, const Tensor& b) { return sub(wrap_scalar(a, b.device()), b); }
Tensor operator*(const Scalar& a, const Tensor& b) { return mul(wrap_scalar(a, b.device()), b); }
Tensor operator/(const Scalar& a, const Tensor& b) { return div(wrap_scalar(a, b.device()), b); }
Tensor operator-(const Tensor& a) { return neg(a); }
Tensor& operator+=(Tensor& a, const Tensor& b) { return add_(a, b); }
Tensor& operator-=(Tensor& a, const Tensor& b) { return sub_(a, b); }
Tensor& operator*=(Tensor& a, const Tensor& b) { return mul_(a, b); }
Tensor& operator/=(Tensor& a, const Tensor& b) { return div_(a, b); }

TESSERA_REGISTER_OPS(
    {"add", "elementwise", kAllTypes, true}, {"sub", "elementwise", kNumericTypes, true},
    {"mul", "elementwise", kAllTypes, true}, {"div", "elementwise", kAllTypes, true},
    {"pow", "elementwise", kNumericTypes, true}, {"maximum", "elementwise", kAllTypes, true},
    {"minimum", "elementwise", kAllTypes, true},
    {"lerp", "elementwise", kFloatingTypes, true, CastPolicy::kPromote},
    {"where", "elementwise", kAllTypes, true}, {"add_", "inplace", kAllTypes, true},
    {"sub_", "inplace", kNumericTypes, true}, {"mul_", "inplace", kAllTypes, true},
    {"div_", "inplace", kFloatingTypes, true});

}  // namespace tessera
