#pragma once
// Element types and PyTorch's type-promotion lattice.
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string_view>

#include "tessera/core/half.h"

namespace tessera {

enum class DType : uint8_t { Bool, UInt8, Int8, Int16, Int32, Int64, Float16, BFloat16, Float32, Float64 };
inline constexpr int kNumDTypes = 10;

inline constexpr DType kBool = DType::Bool, kUInt8 = DType::UInt8, kInt8 = DType::Int8,
                       kInt16 = DType::Int16, kInt32 = DType::Int32, kInt64 = DType::Int64,
                       kFloat16 = DType::Float16, kBFloat16 = DType::BFloat16,
                       kFloat32 = DType::Float32, kFloat64 = DType::Float64;

constexpr size_t itemsize(DType t) {
  switch (t) {
    case DType::Bool:
    case DType::UInt8:
    case DType::Int8: return 1;
    case DType::Int16:
    case DType::Float16:
    case DType::BFloat16: return 2;
    case DType::Int32:
    case DType::Float32: return 4;
    case DType::Int64:
    case DType::Float64: return 8;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  constexpr std::string_view names[] = {"bool",    "uint8",    "int8",    "int16",   "int32",
                                        "int64",   "float16",  "bfloat16", "float32", "float64"};
  return names[static_cast<int>(t)];
}
inline std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

constexpr bool is_floating(DType t) {
  return t == DType::Float16 || t == DType::BFloat16 || t == DType::Float32 || t == DType::Float64;
}
// bfloat16 or float16: the dtypes autocast computes in and that reductions widen.
constexpr bool is_16bit_float(DType t) { return t == DType::Float16 || t == DType::BFloat16; }
constexpr bool is_integral(DType t, bool include_bool = false) {
  return (t == DType::Bool && include_bool) ||
         (t != DType::Bool && !is_floating(t));
}

// Whether an op computing in `from` may write its result into a tensor of `to` (torch.can_cast):
// never floating into integral, nor anything but bool into bool.
constexpr bool can_cast(DType from, DType to) {
  if (is_floating(from) && !is_floating(to)) return false;
  return from == DType::Bool || to != DType::Bool;
}

// Promotion of two tensor dtypes as in torch.promote_types.
DType promote_types(DType a, DType b);
// Parses "float32", "f32", "bf16", ...; throws ValueError on an unknown name.
DType dtype_from_string(std::string_view s);

template <class T>
struct DTypeOf;
#define TESSERA_DTYPE_MAP(T, D) \
  template <>                   \
  struct DTypeOf<T> {           \
    static constexpr DType value = D; \
  };
TESSERA_DTYPE_MAP(bool, DType::Bool)
TESSERA_DTYPE_MAP(uint8_t, DType::UInt8)
TESSERA_DTYPE_MAP(int8_t, DType::Int8)
TESSERA_DTYPE_MAP(int16_t, DType::Int16)
TESSERA_DTYPE_MAP(int32_t, DType::Int32)
TESSERA_DTYPE_MAP(int64_t, DType::Int64)
TESSERA_DTYPE_MAP(Half, DType::Float16)
TESSERA_DTYPE_MAP(BFloat16, DType::BFloat16)
TESSERA_DTYPE_MAP(float, DType::Float32)
TESSERA_DTYPE_MAP(double, DType::Float64)
#undef TESSERA_DTYPE_MAP
template <class T>
inline constexpr DType dtype_of = DTypeOf<T>::value;

}  // namespace tessera
