#pragma once
// The online max / exponential-sum of a row (softmax, log-softmax, cross-entropy): values are
// folded into (m, s) with s = sum exp(x - m) over the values seen and m their max, so a row is
// read once. -inf and nan follow the CPU kernels.
#include <cmath>
#include <limits>

#include "backend/cuda/warp.cuh"

namespace tessera::cuda {

template <class A>
__device__ A neg_inf() {
  return -std::numeric_limits<A>::infinity();
}

// exp(x - m), with -inf giving 0 even when m is -inf: an all -inf slice then sums to exactly 0
// (the safe softmax's marker), while a nan still makes the sum nan.
template <class A>
__device__ A exp_from(A x, A m) {
  return x == neg_inf<A>() ? A(0) : std::exp(x - m);
}

// Folds W values into (m, s) (nan skipped by the max, as the CPU's max does; it reaches s
// through exp instead, and so does the nan of exp(inf - inf) when m is +inf, as on the CPU).
template <int W, class A>
__device__ void online_add(A& m, A& s, const A* v) {
  A vm = m;
#pragma unroll
  for (int k = 0; k < W; ++k) vm = v[k] > vm ? v[k] : vm;
  if (vm > m) {
    s *= std::exp(m - vm);  // 0 while m is -inf, so s keeps only a nan
    m = vm;
  }
#pragma unroll
  for (int k = 0; k < W; ++k) s += exp_from(v[k], m);
}

template <class A>
__device__ void online_merge(A& m, A& s, A m2, A s2) {
  const A mx = m2 > m ? m2 : m;
  // A part whose max is -inf holds 0 (or nan): it adds as is rather than through exp(nan).
  s = (m == neg_inf<A>() ? s : s * std::exp(m - mx)) +
      (m2 == neg_inf<A>() ? s2 : s2 * std::exp(m2 - mx));
  m = mx;
}

// Block-wide online max/sum (blockDim.x a multiple of 32); every thread gets the result.
template <class A>
__device__ void block_max_sum(A& m, A& s) {
  __shared__ A pm[kWarp], ps[kWarp];
  for (int o = kWarp / 2; o > 0; o /= 2)
    online_merge(m, s, __shfl_xor_sync(kFullMask, m, o), __shfl_xor_sync(kFullMask, s, o));
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  __syncthreads();  // a previous call's readers are done with the slots
  if (lane == 0) {
    pm[warp] = m;
    ps[warp] = s;
  }
  __syncthreads();
  // Every warp folds the per-warp parts itself, so no broadcast round is needed.
  m = neg_inf<A>();
  s = 0;
  for (int w = 0; w < static_cast<int>(blockDim.x / kWarp); ++w) online_merge(m, s, pm[w], ps[w]);
}

}  // namespace tessera::cuda
