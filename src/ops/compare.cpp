// Comparisons, logical ops and floating-point class tests (bool results, no gradients).
#include "ops/op_utils.h"
#include "tessera/ops/op_info.h"
#include "tessera/runtime/op_scope.h"

namespace tessera {

using namespace detail;

namespace {
template <class Fn>
Tensor compare(const Tensor& a, const Tensor& b) {
  TESSERA_CHECK(a.device() == b.device(), ValueError, "[", Fn::name, "] expected both tensors on ",
                a.device().str(), ", got one on ", b.device().str());
  DType dt = result_type(a, b);
  return run_elementwise<Fn>(Fn::name, kBool, {cast_raw(a, dt), cast_raw(b, dt)});
}
template <class Fn>
Tensor predicate(const Tensor& x) {
  return run_elementwise<Fn>(Fn::name, kBool, {x});
}
}  // namespace

Tensor eq(const Tensor& a, const Tensor& b) {
  TESSERA_OP_SCOPE("eq", a, b);
  return compare<fn::EqFn>(a, b);
}
Tensor ne(const Tensor& a, const Tensor& b) {
  TESSERA_OP_SCOPE("ne", a, b);
  return compare<fn::NeFn>(a, b);
}
Tensor lt(const Tensor& a, const Tensor& b) {
  TESSERA_OP_SCOPE("lt", a, b);
  return compare<fn::LtFn>(a, b);
}
Tensor le(const Tensor& a, const Tensor& b) {
  TESSERA_OP_SCOPE("le", a, b);
  return compare<fn::LeFn>(a, b);
}
Tensor gt(const Tensor& a, const Tensor& b) {
  TESSERA_OP_SCOPE("gt", a, b);
  return compare<fn::GtFn>(a, b);
}
Tensor ge(const Tensor& a, const Tensor& b) {
  TESSERA_OP_SCOPE("ge", a, b);
  return compare<fn::GeFn>(a, b);
}
Tensor logical_and(const Tensor& a, const Tensor& b) {
  TESSERA_OP_SCOPE("logical_and", a, b);
  return compare<fn::LogicalAndFn>(a, b);
}
Tensor logical_or(const Tensor& a, const Tensor& b) {
  TESSERA_OP_SCOPE("logical_or", a, b);
  return compare<fn::LogicalOrFn>(a, b);
}
Tensor logical_xor(const Tensor& a, const Tensor& b) {
  TESSERA_OP_SCOPE("logical_xor", a, b);
  return compare<fn::LogicalXorFn>(a, b);
}
Tensor logical_not(const Tensor& x) {
  TESSERA_OP_SCOPE("logical_not", x);
  return predicate<fn::LogicalNotFn>(x);
}
Tensor isnan(const Tensor& x) {
  TESSERA_OP_SCOPE("isnan", x);
  return predicate<fn::IsnanFn>(x);
}
Tensor isinf(const Tensor& x) {
  TESSERA_OP_SCOPE("isinf", x);
  return predicate<fn::IsinfFn>(x);
}
Tensor isfinite(const Tensor& x) {
  TESSERA_OP_SCOPE("isfinite", x);
  return predicate<fn::IsfiniteFn>(x);
}

Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }

Tensor operator==(const Tensor& a, const Scalar& b) { return eq(a, wrap_scalar(b, a.device())); }
Tensor operator!=(const Tensor& a, const Scalar& b) { return ne(a, wrap_scalar(b, a.device())); }
Tensor operator<(const Tensor& a, const Scalar& b) { return lt(a, wrap_scalar(b, a.device())); }
Tensor operator<=(const Tensor& a, const Scalar& b) { return le(a, wrap_scalar(b, a.device())); }
Tensor operator>(const Tensor& a, const Scalar& b) { return gt(a, wrap_scalar(b, a.device())); }
Tensor operator>=(const Tensor& a, const Scalar& b) { return ge(a, wrap_scalar(b, a.device())); }

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  TESSERA_OP_SCOPE("allclose", a, b);
  autograd::NoGradGuard ng;
  Tensor x = cast_raw(a, kFloat64), y = cast_raw(b, kFloat64);
  Tensor close = le(abs(x - y), abs(y) * rtol + atol);
  // Matching infinities and nans in the same places are not close (as torch.allclose).
  return all(logical_or(close, eq(x, y))).item<bool>();
}

TESSERA_REGISTER_OPS({"eq", "comparison", kAllTypes, false}, {"ne", "comparison", kAllTypes, false},
                    {"lt", "comparison", kAllTypes, false}, {"le", "comparison", kAllTypes, false},
                    {"gt", "comparison", kAllTypes, false}, {"ge", "comparison", kAllTypes, false},
                    {"logical_and", "comparison", kAllTypes, false},
                    {"logical_or", "comparison", kAllTypes, false},
                    {"logical_xor", "comparison", kAllTypes, false},
                    {"logical_not", "comparison", kAllTypes, false},
                    {"isnan", "comparison", kAllTypes, false},
                    {"isinf", "comparison", kAllTypes, false},
                    {"isfinite", "comparison", kAllTypes, false},
                    {"allclose", "comparison", kAllTypes, false});

}  // namespace tessera
