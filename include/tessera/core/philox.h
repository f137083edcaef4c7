#pragma once
// Philox4x32-10 and the transforms from a Philox block to one sample, shared by host code and
// CUDA kernels (TESSERA_HD) so that every backend draws the same bits: element i of a sampling
// kernel uses block (offset + i) of its seed, on any device and thread count.
//
// The transforms are bit-identical on host and device by construction: they use only operations
// IEEE 754 rounds exactly (+ - * / sqrt, explicit fma, integer arithmetic) and never a product
// feeding a sum outside fma, which a compiler may contract differently on each side (GCC does
// under -march=native, nvcc always). libm's log and cos are not used: glibc's and CUDA's differ
// in the last bits, so the normal transform has its own, accurate to a few ulp.
#include <array>
#include <cmath>
#include <cstdint>

#include "tessera/core/host_device.h"

namespace tessera {

// Philox4x32-10 on counter (block, subsequence 0) with key = seed.
TESSERA_HD inline std::array<uint32_t, 4> philox(uint64_t seed, uint64_t block) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u, kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  uint32_t c0 = static_cast<uint32_t>(block), c1 = static_cast<uint32_t>(block >> 32), c2 = 0,
           c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kM0) * c0, p1 = static_cast<uint64_t>(kM1) * c2;
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += kW0;
    k1 += kW1;
  }
  return {c0, c1, c2, c3};
}

// 53 random bits from two words: the integer k of the unit double k / 2^53.
TESSERA_HD inline uint64_t uint_to_bits53(uint32_t hi, uint32_t lo) {
  return (static_cast<uint64_t>(hi) << 21) ^ (lo >> 11);
}
// Uniform float in [0, 1) from 24 random bits / double from 53 bits.
TESSERA_HD inline float uint_to_unit_float(uint32_t x) { return (x >> 8) * (1.0f / 16777216.0f); }
TESSERA_HD inline double uint_to_unit_double(uint32_t hi, uint32_t lo) {
  return uint_to_bits53(hi, lo) * (1.0 / 9007199254740992.0);
}

namespace detail {

// log x for a positive normal x: x = m 2^e with m in [sqrt(1/2), sqrt(2)), then
// log m = 2 atanh(s), s = (m - 1) / (m + 1), |s| < 0.172, whose odd series is summed to s^21
// (the first term left out is below 2^-60 of the sum).
TESSERA_HD inline double philox_log(double x) {
  int e = 0;
  double m = std::frexp(x, &e);  // m in [1/2, 1)
  if (m < 0.70710678118654752440) {
    m *= 2.0;
    --e;
  }
  const double s = (m - 1.0) / (m + 1.0), s2 = s * s;
  // atanh(s) = s + s^3 p with p = sum over k >= 1 of s^(2k - 2) / (2k + 1).
  double p = 1.0 / 21;
  p = std::fma(p, s2, 1.0 / 19);
  p = std::fma(p, s2, 1.0 / 17);
  p = std::fma(p, s2, 1.0 / 15);
  p = std::fma(p, s2, 1.0 / 13);
  p = std::fma(p, s2, 1.0 / 11);
  p = std::fma(p, s2, 1.0 / 9);
  p = std::fma(p, s2, 1.0 / 7);
  p = std::fma(p, s2, 1.0 / 5);
  p = std::fma(p, s2, 1.0 / 3);
  const double log_m = 2.0 * std::fma(s * s2, p, s);
  return std::fma(static_cast<double>(e), 0.69314718055994530942, log_m);
}

// cos(2 pi k / 2^53) for a 53-bit k: the quarter turn q and the offset into it are taken from
// k's bits exactly, the offset is centred on the nearest quarter (|x| <= pi / 4) and the sin or
// cos series of x summed to x^19 (the first term left out is below 2^-60).
TESSERA_HD inline double philox_cos_turns(uint64_t k) {
  constexpr uint64_t kQuarter = uint64_t{1} << 51;
  uint64_t q = k >> 51;
  int64_t j = static_cast<int64_t>(k & (kQuarter - 1));
  if (j >= static_cast<int64_t>(kQuarter / 2)) {
    j -= static_cast<int64_t>(kQuarter);
    ++q;
  }
  // j / 2^51 of a quarter turn (exact), in radians.
  const double x = static_cast<double>(j) * (1.0 / 2251799813685248.0) * 1.57079632679489661923;
  const double y = -(x * x);
  if (q % 2 == 0) {  // cos x = 1 + y c, c = sum over k >= 1 of y^(k - 1) / (2k)!
    double c = 1.0 / 6402373705728000.0;
    c = std::fma(c, y, 1.0 / 20922789888000.0);
    c = std::fma(c, y, 1.0 / 87178291200.0);
    c = std::fma(c, y, 1.0 / 479001600.0);
    c = std::fma(c, y, 1.0 / 3628800.0);
    c = std::fma(c, y, 1.0 / 40320.0);
    c = std::fma(c, y, 1.0 / 720.0);
    c = std::fma(c, y, 1.0 / 24.0);
    c = std::fma(c, y, 1.0 / 2.0);
    const double cos_x = std::fma(y, c, 1.0);
    return q % 4 == 0 ? cos_x : -cos_x;
  }
  // sin x = x + x y c, c = sum over k >= 1 of y^(k - 1) / (2k + 1)!
  double c = 1.0 / 121645100408832000.0;
  c = std::fma(c, y, 1.0 / 355687428096000.0);
  c = std::fma(c, y, 1.0 / 1307674368000.0);
  c = std::fma(c, y, 1.0 / 6227020800.0);
  c = std::fma(c, y, 1.0 / 39916800.0);
  c = std::fma(c, y, 1.0 / 362880.0);
  c = std::fma(c, y, 1.0 / 5040.0);
  c = std::fma(c, y, 1.0 / 120.0);
  c = std::fma(c, y, 1.0 / 6.0);
  const double sin_x = std::fma(x * y, c, x);
  return q % 4 == 1 ? -sin_x : sin_x;  // cos(pi/2 + x) = -sin x, cos(3 pi/2 + x) = sin x
}

}  // namespace detail

// The samples of one Philox block r, as the sampling kernels of every backend draw them.
using PhiloxBlock = std::array<uint32_t, 4>;

// Uniform in [low, high) from 53 bits.
TESSERA_HD inline double sample_uniform(const PhiloxBlock& r, double low, double high) {
  return std::fma(high - low, uint_to_unit_double(r[0], r[1]), low);
}

// Normal by Box-Muller on two 53-bit uniforms; 1 - u keeps the log argument in (0, 1].
TESSERA_HD inline double sample_normal(const PhiloxBlock& r, double mean, double stddev) {
  const double u1 = 1.0 - uint_to_unit_double(r[0], r[1]);
  const double z = std::sqrt(-2.0 * detail::philox_log(u1)) *
                   detail::philox_cos_turns(uint_to_bits53(r[2], r[3]));
  return std::fma(stddev, z, mean);
}

// Integer in [low, low + range) from 64 bits (range > 0); the sum is taken modulo 2^64, so it is
// exact for any range that fits.
TESSERA_HD inline int64_t sample_randint(const PhiloxBlock& r, int64_t low, uint64_t range) {
  const uint64_t bits = (static_cast<uint64_t>(r[0]) << 32) | r[1];
  return static_cast<int64_t>(static_cast<uint64_t>(low) + bits % range);
}

// True with probability p (a 53-bit uniform below p).
TESSERA_HD inline bool sample_bernoulli(const PhiloxBlock& r, double p) {
  return uint_to_unit_double(r[0], r[1]) < p;
}

}  // namespace tessera
