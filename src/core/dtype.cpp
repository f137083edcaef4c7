#include "tessera/core/dtype.h"

#include <string>

#include "tessera/core/dtype_dispatch.h"
#include "tessera/core/error.h"

namespace tessera {

namespace {
int int_rank(DType t) {  // width order of the signed integer types
  switch (t) {
    case DType::Int8: return 1;
    case DType::Int16: return 2;
    case DType::Int32: return 3;
    case DType::Int64: return 4;
    default: return 0;
  }
}
int float_rank(DType t) {
  switch (t) {
    case DType::Float16:
    case DType::BFloat16: return 1;
    case DType::Float32: return 2;
    case DType::Float64: return 3;
    default: return 0;
  }
}
}  // namespace

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  if (a == DType::Bool) return b;
  if (b == DType::Bool) return a;
  bool fa = is_floating(a), fb = is_floating(b);
  if (fa && fb) {
    if (float_rank(a) == 1 && float_rank(b) == 1) return DType::Float32;  // f16 with bf16
    return float_rank(a) >= float_rank(b) ? a : b;
  }
  if (fa) return a;
  if (fb) return b;
  if (a == DType::UInt8 || b == DType::UInt8) {
    DType other = a == DType::UInt8 ? b : a;
    return other == DType::Int8 ? DType::Int16 : other;
  }
  return int_rank(a) >= int_rank(b) ? a : b;
}

DType dtype_from_string(std::string_view s) {
  struct Alias {
    std::string_view name;
    DType dtype;
  };
  static constexpr Alias aliases[] = {
      {"bool", kBool},       {"uint8", kUInt8},       {"int8", kInt8},       {"int16", kInt16},
      {"int32", kInt32},     {"int", kInt32},         {"int64", kInt64},     {"long", kInt64},
      {"float16", kFloat16}, {"f16", kFloat16},       {"half", kFloat16},    {"bfloat16", kBFloat16},
      {"bf16", kBFloat16},   {"float32", kFloat32},   {"f32", kFloat32},     {"float", kFloat32},
      {"float64", kFloat64}, {"f64", kFloat64},       {"double", kFloat64}};
  for (const auto& a : aliases)
    if (a.name == s) return a.dtype;
  throw ValueError(detail::str("[dtype] expected a dtype name such as float32 or bfloat16, got '",
                               s, "'"));
}

std::string dtype_set_str(uint32_t set) {
  std::string out;
  for (int i = 0; i < kNumDTypes; ++i) {
    if (!(set & (1u << i))) continue;
    if (!out.empty()) out += ", ";
    out += dtype_name(static_cast<DType>(i));
  }
  return out;
}

}  // namespace tessera
