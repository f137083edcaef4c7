#pragma once
// Binary arithmetic on one float32 and one 16-bit float operand, the 16-bit one widened as it is
// loaded and the float32 result rounded once on store (torch's dynamic casting): under autocast
// the float32 residual stream meets bfloat16 branch outputs at every block, and a separate cast
// pass would read and write the whole activation once more. Widening is exact, so a float32
// result is the same as casting first; a 16-bit target written in place with a float32 operand
// (param.add_(update)) rounds only the result, as torch does, not the operand too.
#include <string_view>
#include <type_traits>

#include "backend/common/elementwise_functors.h"
#include "tessera/core/dtype_dispatch.h"

namespace tessera::fn {

// The functors whose kernels take such mixed operands.
template <class Fn>
inline constexpr bool kWidensOnLoad = std::is_same_v<Fn, AddFn> || std::is_same_v<Fn, SubFn> ||
                                      std::is_same_v<Fn, MulFn> || std::is_same_v<Fn, DivFn>;

// Whether a kernel computing in float32 takes operands of dtypes a and b as they are: one is
// float32 and the other 16-bit, and out is float32 or, for a 16-bit target written in place
// (a), that target's dtype.
constexpr bool widens_on_load(DType out, DType a, DType b) {
  if (a == kFloat32 && is_16bit_float(b)) return out == kFloat32;
  if (is_16bit_float(a) && b == kFloat32) return out == kFloat32 || out == a;
  return false;
}

// Calls f.template operator()<O, A, B>() with the C++ types of a widening triple of dtypes.
template <class F>
void dispatch_widening(DType out, DType a, DType b, std::string_view op, F&& f) {
  TESSERA_CHECK(widens_on_load(out, a, b), TypeError, "[", op,
                "] expected float32 with a 16-bit float operand, got ", a, " and ", b, " into ",
                out);
  const bool a_wide = a == kFloat32;
  dispatch<dtype_bit(kBFloat16) | dtype_bit(kFloat16)>(a_wide ? b : a, op, [&]<class H>() {
    if (a_wide)
      f.template operator()<float, float, H>();
    else if (out == kFloat32)
      f.template operator()<float, H, float>();
    else
      f.template operator()<H, H, float>();
  });
}

}  // namespace tessera::fn
