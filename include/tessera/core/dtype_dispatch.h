#pragma once
// The one dtype-dispatch helper: maps a runtime DType to a C++ type and calls a templated lambda.
//   dispatch<kFloatingTypes>(x.dtype(), "softmax", [&]<class T>() { kernel<T>(...); });
// A dtype outside the allowed set throws TypeError("[op] expected one of ..., got ...").
#include <cstdint>
#include <string>
#include <string_view>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"

namespace tessera {

constexpr uint32_t dtype_bit(DType t) { return 1u << static_cast<int>(t); }

inline constexpr uint32_t kFloatingTypes =
    dtype_bit(kFloat16) | dtype_bit(kBFloat16) | dtype_bit(kFloat32) | dtype_bit(kFloat64);
inline constexpr uint32_t kIntegralTypes = dtype_bit(kUInt8) | dtype_bit(kInt8) |
                                           dtype_bit(kInt16) | dtype_bit(kInt32) |
                                           dtype_bit(kInt64);
inline constexpr uint32_t kNumericTypes = kFloatingTypes | kIntegralTypes;  // all but bool
inline constexpr uint32_t kAllTypes = kNumericTypes | dtype_bit(kBool);
inline constexpr uint32_t kIndexTypes = dtype_bit(kInt32) | dtype_bit(kInt64);

// Human-readable list of the dtypes in a set, e.g. "float16, bfloat16, float32, float64".
std::string dtype_set_str(uint32_t set);

template <uint32_t Set = kAllTypes, class F>
decltype(auto) dispatch(DType t, std::string_view op, F&& f) {
  auto bad = [&]() {
    return TypeError(detail::str("[", op, "] expected dtype in {", dtype_set_str(Set), "}, got ",
                                 t));
  };
#define TESSERA_DISPATCH_CASE(D, T)                                  \
  case D:                                                            \
    if constexpr ((Set & dtype_bit(D)) != 0) return f.template operator()<T>(); \
    else throw bad();
  switch (t) {
    TESSERA_DISPATCH_CASE(DType::Bool, bool)
    TESSERA_DISPATCH_CASE(DType::UInt8, uint8_t)
    TESSERA_DISPATCH_CASE(DType::Int8, int8_t)
    TESSERA_DISPATCH_CASE(DType::Int16, int16_t)
    TESSERA_DISPATCH_CASE(DType::Int32, int32_t)
    TESSERA_DISPATCH_CASE(DType::Int64, int64_t)
    TESSERA_DISPATCH_CASE(DType::Float16, Half)
    TESSERA_DISPATCH_CASE(DType::BFloat16, BFloat16)
    TESSERA_DISPATCH_CASE(DType::Float32, float)
    TESSERA_DISPATCH_CASE(DType::Float64, double)
  }
#undef TESSERA_DISPATCH_CASE
  throw bad();
}

}  // namespace tessera
