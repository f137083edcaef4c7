#pragma once
// 16 floats in registers for the inference kernels (packed GEMM, paged attention): AVX-512, two
// AVX2 halves, or a plain array; loads also widen 16 bfloat16 or int8 (KV caches and weights
// kept small) exactly. Every path rounds each operation once (FMAs fused) and the reductions fold
// halves in a fixed order (8, 4, 2, 1 lanes apart), so results do not depend on which lanes or
// tiles a value went through, only on the build's instruction set.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "backend/common/vec_math.h"
#include "tessera/core/half.h"

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

// GCC 12 flags the intrinsics' internal _mm512_undefined_ps() pass-through operands
// (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace tessera::detail {

#if defined(__AVX512F__)
struct V16 {
  __m512 r;
};
inline V16 vzero() { return {_mm512_setzero_ps()}; }
inline V16 vload(const float* p) { return {_mm512_loadu_ps(p)}; }
inline V16 vset1(float x) { return {_mm512_set1_ps(x)}; }
inline V16 vfma(V16 a, V16 b, V16 c) { return {_mm512_fmadd_ps(a.r, b.r, c.r)}; }
inline V16 vadd(V16 a, V16 b) { return {_mm512_add_ps(a.r, b.r)}; }
inline V16 vmul(V16 a, V16 b) { return {_mm512_mul_ps(a.r, b.r)}; }
// a > b ? a : b per lane, so b where either is NaN (as maxps on every path).
inline V16 vmax(V16 a, V16 b) { return {_mm512_max_ps(a.r, b.r)}; }
inline void vstore(float* p, V16 v) { _mm512_storeu_ps(p, v.r); }
// 16 bfloat16 widened exactly: each one's bits become the high half of a float's.
inline V16 vload(const BFloat16* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return {_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))};
}
// 16 int8 as floats (exact).
inline V16 vload(const int8_t* p) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return {_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b))};
}
inline __mmask16 first_lanes(int64_t n) {
  return static_cast<__mmask16>(n >= 16 ? 0xFFFF : n <= 0 ? 0 : (1u << n) - 1);
}
// Lanes [n, 16) replaced by fill.
inline V16 vkeep_first(V16 v, int64_t n, float fill) {
  return {_mm512_mask_blend_ps(first_lanes(n), _mm512_set1_ps(fill), v.r)};
}
// p[0, n) and zeros after; memory past p + n is not read.
inline V16 vload_first(const float* p, int64_t n) {
  return {_mm512_maskz_loadu_ps(first_lanes(n), p)};
}
// Lanes [0, n) to p[0, n); memory past p + n is not written.
inline void vstore_first(float* p, V16 v, int64_t n) {
  _mm512_mask_storeu_ps(p, first_lanes(n), v.r);
}
#elif defined(__AVX2__) && defined(__FMA__)
struct V16 {
  __m256 lo, hi;
};
inline V16 vzero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
inline V16 vload(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
inline V16 vset1(float x) { return {_mm256_set1_ps(x), _mm256_set1_ps(x)}; }
inline V16 vfma(V16 a, V16 b, V16 c) {
  return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
}
inline V16 vadd(V16 a, V16 b) { return {_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)}; }
inline V16 vmul(V16 a, V16 b) { return {_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)}; }
inline V16 vmax(V16 a, V16 b) { return {_mm256_max_ps(a.lo, b.lo), _mm256_max_ps(a.hi, b.hi)}; }
inline void vstore(float* p, V16 v) {
  _mm256_storeu_ps(p, v.lo);
  _mm256_storeu_ps(p + 8, v.hi);
}
inline V16 vload(const BFloat16* p) {
  auto widen = [](const BFloat16* q) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  };
  return {widen(p), widen(p + 8)};
}
inline V16 vload(const int8_t* p) {
  auto widen = [](const int8_t* q) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q));
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
  };
  return {widen(p), widen(p + 8)};
}
inline V16 vkeep_first(V16 v, int64_t n, float fill) {
  alignas(32) float t[16];
  vstore(t, v);
  for (int64_t j = std::max<int64_t>(n, 0); j < 16; ++j) t[j] = fill;
  return vload(t);
}
#else
struct V16 {
  float v[16];
};
inline V16 vzero() { return V16{}; }
inline V16 vload(const float* p) {
  V16 r;
  std::copy(p, p + 16, r.v);
  return r;
}
inline V16 vset1(float x) {
  V16 r;
  std::fill(r.v, r.v + 16, x);
  return r;
}
inline V16 vfma(V16 a, V16 b, V16 c) {
  for (int j = 0; j < 16; ++j) c.v[j] = std::fma(a.v[j], b.v[j], c.v[j]);
  return c;
}
inline V16 vadd(V16 a, V16 b) {
  for (int j = 0; j < 16; ++j) a.v[j] += b.v[j];
  return a;
}
inline V16 vmul(V16 a, V16 b) {
  for (int j = 0; j < 16; ++j) a.v[j] *= b.v[j];
  return a;
}
inline V16 vmax(V16 a, V16 b) {
  for (int j = 0; j < 16; ++j) a.v[j] = a.v[j] > b.v[j] ? a.v[j] : b.v[j];
  return a;
}
inline void vstore(float* p, V16 v) { std::copy(v.v, v.v + 16, p); }
inline V16 vload(const BFloat16* p) {
  V16 r;
  std::copy(p, p + 16, r.v);
  return r;
}
inline V16 vload(const int8_t* p) {
  V16 r;
  std::copy(p, p + 16, r.v);
  return r;
}
inline V16 vkeep_first(V16 v, int64_t n, float fill) {
  for (int64_t j = std::max<int64_t>(n, 0); j < 16; ++j) v.v[j] = fill;
  return v;
}
#endif

#if defined(__AVX512F__)
// vec_math's vexp on 16 lanes: the same Cody-Waite reduction and Cephes polynomial. With
// kNonPositive the caller promises lanes <= 0 or -inf and no NaN (softmax's s - max): the
// overflow and NaN fix-ups are skipped, and lanes below -87 (-inf included) give 0 all the same.
template <bool kNonPositive = false>
inline V16 vexp16(V16 v) {
  const __m512 x = v.r;
  __m512 xc = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(88.0f));
  const __m512 magic = _mm512_set1_ps(12582912.0f);
  const __m512 n =
      _mm512_sub_ps(_mm512_fmadd_ps(xc, _mm512_set1_ps(1.44269504088896341f), magic), magic);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), xc);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  const __m512 e = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r), _mm512_set1_ps(1.0f));
  const __m512i k =
      _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  __m512 y = _mm512_mul_ps(e, _mm512_castsi512_ps(k));
  y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_LT_OQ), y,
                           _mm512_setzero_ps());
  if constexpr (kNonPositive) return {y};
  y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(88.0f), _CMP_GT_OQ), y,
                           _mm512_set1_ps(std::numeric_limits<float>::infinity()));
  return {_mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), y, x)};
}

// Folds lanes j and j + w for w = 8, 4, 2, 1.
inline float vreduce_max(V16 v) {
  const __m256 h =
      _mm256_max_ps(_mm512_castps512_ps256(v.r),
                    _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v.r), 1)));
  __m128 q = _mm_max_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  q = _mm_max_ps(q, _mm_movehl_ps(q, q));
  return _mm_cvtss_f32(_mm_max_ss(q, _mm_movehdup_ps(q)));
}
inline float vreduce_add(V16 v) {
  const __m256 h =
      _mm256_add_ps(_mm512_castps512_ps256(v.r),
                    _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v.r), 1)));
  __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  q = _mm_add_ps(q, _mm_movehl_ps(q, q));
  return _mm_cvtss_f32(_mm_add_ss(q, _mm_movehdup_ps(q)));
}

// Lane i: a[i]'s lanes folded as vreduce_add folds them (8, 4, 2, 1 apart), 16 sums at once.
inline V16 vreduce_add16(const V16* a) {
  // Each stage folds w lanes apart and packs twice as many sums per vector.
  __m512 c[8], d[4], e[2];
  for (int k = 0; k < 8; ++k)
    c[k] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * k].r, a[2 * k + 1].r, 0x44),
                         _mm512_shuffle_f32x4(a[2 * k].r, a[2 * k + 1].r, 0xEE));
  for (int m = 0; m < 4; ++m)
    d[m] = _mm512_add_ps(_mm512_shuffle_f32x4(c[2 * m], c[2 * m + 1], 0x88),
                         _mm512_shuffle_f32x4(c[2 * m], c[2 * m + 1], 0xDD));
  for (int n = 0; n < 2; ++n)
    e[n] = _mm512_add_ps(_mm512_shuffle_ps(d[2 * n], d[2 * n + 1], 0x44),
                         _mm512_shuffle_ps(d[2 * n], d[2 * n + 1], 0xEE));
  const __m512 f =
      _mm512_add_ps(_mm512_shuffle_ps(e[0], e[1], 0x88), _mm512_shuffle_ps(e[0], e[1], 0xDD));
  // Lane 4q + r of f holds the sum of a[4r + q].
  const __m512i order = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
  return {_mm512_permutexvar_ps(order, f)};
}
#else
inline V16 vload_first(const float* p, int64_t n) {
  alignas(64) float t[16] = {};
  std::copy(p, p + std::clamp<int64_t>(n, 0, 16), t);
  return vload(t);
}
inline void vstore_first(float* p, V16 v, int64_t n) {
  alignas(64) float t[16];
  vstore(t, v);
  std::copy(t, t + std::clamp<int64_t>(n, 0, 16), p);
}

// exp of each lane (vec_math's vexp, which the compiler vectorises over the array).
template <bool kNonPositive = false>
inline V16 vexp16(V16 x) {
  alignas(64) float t[16];
  vstore(t, x);
  for (int j = 0; j < 16; ++j) t[j] = vexp(t[j]);
  return vload(t);
}

// Folds lanes j and j + w for w = 8, 4, 2, 1.
inline float vreduce_max(V16 x) {
  alignas(64) float t[16];
  vstore(t, x);
  for (int w = 8; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j) t[j] = t[j + w] > t[j] ? t[j + w] : t[j];
  return t[0];
}
inline float vreduce_add(V16 x) {
  alignas(64) float t[16];
  vstore(t, x);
  for (int w = 8; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j) t[j] += t[j + w];
  return t[0];
}
inline V16 vreduce_add16(const V16* a) {
  alignas(64) float t[16];
  for (int i = 0; i < 16; ++i) t[i] = vreduce_add(a[i]);
  return vload(t);
}
#endif

// p[0, n) widened and zeros after; memory past p + n is not read.
inline V16 vload_first(const BFloat16* p, int64_t n) {
  BFloat16 t[16];
  std::copy(p, p + std::clamp<int64_t>(n, 0, 16), t);
  return vload(t);
}

}  // namespace tessera::detail

#pragma GCC diagnostic pop
