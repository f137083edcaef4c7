// Bitwise ops on integer and bool tensors (Python's & | ^ ~ on tensors), as torch: operands
// promote as in arithmetic, floating tensors are refused, and bools stay bools.
#include "ops/op_utils.h"
#include "tessera/ops/op_info.h"
#include "tessera/runtime/op_scope.h"

namespace tessera {

using namespace detail;

namespace {

constexpr uint32_t kBitwiseTypes = kIntegralTypes | dtype_bit(kBool);

void check_bitwise(DType dtype, std::string_view op) {
  TESSERA_CHECK(dtype_bit(dtype) & kBitwiseTypes, TypeError, "[", op,
                "] expected integer or bool tensors, got ", dtype);
}

template <class Fn>
Tensor bitwise(const Tensor& a, const Tensor& b) {
  TESSERA_CHECK(a.device() == b.device(), ValueError, "[", Fn::name, "] expected both tensors on ",
                a.device().str(), ", got one on ", b.device().str());
  check_bitwise(a.dtype(), Fn::name);
  check_bitwise(b.dtype(), Fn::name);
  const DType dt = result_type(a, b);
  return run_elementwise<Fn>(Fn::name, dt, {cast_raw(a, dt), cast_raw(b, dt)});
}

}  // namespace

Tensor bitwise_and(const Tensor& a, const Tensor& b) {
  TESSERA_OP_SCOPE("bitwise_and", a, b);
  return bitwise<fn::BitwiseAndFn>(a, b);
}
Tensor bitwise_or(const Tensor& a, const Tensor& b) {
  TESSERA_OP_SCOPE("bitwise_or", a, b);
  return bitwise<fn::BitwiseOrFn>(a, b);
}
Tensor bitwise_xor(const Tensor& a, const Tensor& b) {
  TESSERA_OP_SCOPE("bitwise_xor", a, b);
  return bitwise<fn::BitwiseXorFn>(a, b);
}
Tensor bitwise_not(const Tensor& x) {
  TESSERA_OP_SCOPE("bitwise_not", x);
  check_bitwise(x.dtype(), "bitwise_not");
  return run_elementwise<fn::BitwiseNotFn>("bitwise_not", x.dtype(), {x});
}

TESSERA_REGISTER_OPS({"bitwise_and", "elementwise", kBitwiseTypes, false},
                     {"bitwise_or", "elementwise", kBitwiseTypes, false},
                     {"bitwise_xor", "elementwise", kBitwiseTypes, false},
                     {"bitwise_not", "elementwise", kBitwiseTypes, false});

}  // namespace tessera
