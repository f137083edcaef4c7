#pragma once
// 16-bit floating-point storage types. Arithmetic happens in float (opmath), the stored value is
// rounded to nearest even on conversion back.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "tessera/core/host_device.h"

namespace tessera {

namespace detail {
TESSERA_HD inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
TESSERA_HD inline float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace detail

struct BFloat16 {
  uint16_t x = 0;
  BFloat16() = default;
  TESSERA_HD BFloat16(float f) : x(round(f)) {}
  TESSERA_HD BFloat16(double d) : BFloat16(static_cast<float>(d)) {}
  TESSERA_HD BFloat16(int v) : BFloat16(static_cast<float>(v)) {}
  TESSERA_HD BFloat16(int64_t v) : BFloat16(static_cast<float>(v)) {}
  TESSERA_HD operator float() const { return detail::f32_from_bits(static_cast<uint32_t>(x) << 16); }
  TESSERA_HD static BFloat16 from_bits(uint16_t b) {
    BFloat16 r;
    r.x = b;
    return r;
  }
  TESSERA_HD static uint16_t round(float f) {
    uint32_t u = detail::f32_bits(f);
    if (std::isnan(f)) return 0x7fc0;
    u += 0x7fff + ((u >> 16) & 1);  // round to nearest even
    return static_cast<uint16_t>(u >> 16);
  }
};

struct Half {
  uint16_t x = 0;
  Half() = default;
  TESSERA_HD Half(float f) : x(from_float(f)) {}
  TESSERA_HD Half(double d) : Half(static_cast<float>(d)) {}
  TESSERA_HD Half(int v) : Half(static_cast<float>(v)) {}
  TESSERA_HD Half(int64_t v) : Half(static_cast<float>(v)) {}
  TESSERA_HD operator float() const { return to_float(x); }
  TESSERA_HD static Half from_bits(uint16_t b) {
    Half r;
    r.x = b;
    return r;
  }
  // IEEE binary16 <-> binary32, exact for normals, subnormals, inf and nan.
  TESSERA_HD static float to_float(uint16_t h) {
    uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0x1f) return detail::f32_from_bits(sign | 0x7f800000 | (man << 13));
    if (exp == 0) {
      float v = std::ldexp(static_cast<float>(man), -24);
      return sign ? -v : v;
    }
    return detail::f32_from_bits(sign | ((exp + 112) << 23) | (man << 13));
  }
  TESSERA_HD static uint16_t from_float(float f) {
    uint32_t u = detail::f32_bits(f);
    uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
    uint32_t a = u & 0x7fffffff;
    if (a > 0x7f800000) return sign | 0x7e00;             // nan
    if (a >= 0x477ff000) return sign | 0x7c00;            // overflow (>= 65520) -> inf
    if (a < 0x38800000) {                                  // subnormal half or zero
      float v = std::fabs(f) * 16777216.0f;                // scale by 2^24, round to int
      return sign | static_cast<uint16_t>(std::nearbyint(v));
    }
    uint32_t mant_odd = (a >> 13) & 1;
    a += 0xc8000fff + mant_odd;  // rebias exponent (-112 << 23) and round to nearest even
    return sign | static_cast<uint16_t>(a >> 13);
  }
};

#define TESSERA_LOWP_OPS(T)                                                        \
  TESSERA_HD inline T operator+(T a, T b) { return T(float(a) + float(b)); }                 \
  TESSERA_HD inline T operator-(T a, T b) { return T(float(a) - float(b)); }                 \
  TESSERA_HD inline T operator*(T a, T b) { return T(float(a) * float(b)); }                 \
  TESSERA_HD inline T operator/(T a, T b) { return T(float(a) / float(b)); }                 \
  TESSERA_HD inline T operator-(T a) { return T(-float(a)); }                                 \
  TESSERA_HD inline bool operator<(T a, T b) { return float(a) < float(b); }                 \
  TESSERA_HD inline bool operator>(T a, T b) { return float(a) > float(b); }                 \
  TESSERA_HD inline bool operator<=(T a, T b) { return float(a) <= float(b); }               \
  TESSERA_HD inline bool operator>=(T a, T b) { return float(a) >= float(b); }               \
  TESSERA_HD inline bool operator==(T a, T b) { return float(a) == float(b); }               \
  TESSERA_HD inline bool operator!=(T a, T b) { return float(a) != float(b); }               \
  TESSERA_HD inline T& operator+=(T& a, T b) { return a = a + b; }
TESSERA_LOWP_OPS(BFloat16)
TESSERA_LOWP_OPS(Half)
#undef TESSERA_LOWP_OPS

// The type arithmetic is carried out in: float for the 16-bit types, the type itself otherwise.
template <class T>
struct OpMath {
  using type = T;
};
template <>
struct OpMath<Half> {
  using type = float;
};
template <>
struct OpMath<BFloat16> {
  using type = float;
};
template <class T>
using opmath_t = typename OpMath<T>::type;

}  // namespace tessera

namespace std {
template <>
class numeric_limits<tessera::BFloat16> {
 public:
  static constexpr bool is_specialized = true;
  static constexpr bool has_infinity = true;
  TESSERA_HD static tessera::BFloat16 infinity() { return tessera::BFloat16::from_bits(0x7f80); }
  TESSERA_HD static tessera::BFloat16 lowest() { return tessera::BFloat16::from_bits(0xff7f); }
  TESSERA_HD static tessera::BFloat16 max() { return tessera::BFloat16::from_bits(0x7f7f); }
  TESSERA_HD static tessera::BFloat16 epsilon() { return tessera::BFloat16::from_bits(0x3c00); }
  TESSERA_HD static tessera::BFloat16 quiet_NaN() { return tessera::BFloat16::from_bits(0x7fc0); }
};
template <>
class numeric_limits<tessera::Half> {
 public:
  static constexpr bool is_specialized = true;
  static constexpr bool has_infinity = true;
  TESSERA_HD static tessera::Half infinity() { return tessera::Half::from_bits(0x7c00); }
  TESSERA_HD static tessera::Half lowest() { return tessera::Half::from_bits(0xfbff); }
  TESSERA_HD static tessera::Half max() { return tessera::Half::from_bits(0x7bff); }
  TESSERA_HD static tessera::Half epsilon() { return tessera::Half::from_bits(0x1400); }
  TESSERA_HD static tessera::Half quiet_NaN() { return tessera::Half::from_bits(0x7e00); }
};
}  // namespace std
