#pragma once
// Transcendental functions written so the compiler vectorises loops that call them (glibc's
// vector math is only declared under -ffast-math, which would also break NaN handling).
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace tessera::detail {

// exp for the CPU row loops, written so the compiler vectorises it (std::exp only vectorises
// under -ffast-math): Cody-Waite reduction x = n ln2 + r and the Cephes expf polynomial, within
// 2 ulp of exp on [-87, 88]. Below -87 (and for -inf) it returns 0, above 88 inf; nan propagates.
inline float vexp(float x) {
  // Clamp with selects: std::fmin/fmax are library calls that block vectorisation.
  float xc = x < -87.0f ? -87.0f : x;
  xc = xc > 88.0f ? 88.0f : xc;
  // nan would reach the float -> int cast below, which is undefined; its result is not used.
  xc = x != x ? 0.0f : xc;
  // Round xc / ln2 to nearest with the 1.5 * 2^23 trick (floor/nearbyint do not vectorise).
  const float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e = p * r * r + r + 1.0f;
  const float scale = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  float y = e * scale;
  y = x < -87.0f ? 0.0f : y;
  y = x > 88.0f ? std::numeric_limits<float>::infinity() : y;
  return x != x ? x : y;
}
inline double vexp(double x) { return std::exp(x); }

// tanh within a few ulp (Cephes tanhf): an odd polynomial for |x| < 0.625, else
// 1 - 2 / (exp(2|x|) + 1) with the sign restored. Both branches are computed and selected.
inline float vtanh(float x) {
  const float ax = x < 0.0f ? -x : x;
  const float z = x * x;
  const float small = ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z +
                        1.33314422036e-1f) *
                           z -
                       3.33332819422e-1f) *
                          z * x +
                      x;
  const float big_abs = 1.0f - 2.0f / (vexp(2.0f * ax) + 1.0f);
  const float big = x < 0.0f ? -big_abs : big_abs;
  return ax < 0.625f ? small : big;
}
inline double vtanh(double x) { return std::tanh(x); }

}  // namespace tessera::detail
