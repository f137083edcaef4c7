#pragma once
// Warp- and block-level reductions shared by the CUDA kernels. "Groups" are aligned runs of
// `width` lanes (a power of 2 <= 32) of one warp, e.g. the lanes sharing a short row.
#include <cstdint>

namespace tessera::cuda {

inline constexpr int kWarp = 32;
inline constexpr unsigned kFullMask = 0xffffffffu;

// The lanes [base, base + width) of this thread's group.
__device__ inline unsigned group_mask(int width) {
  return width == kWarp ? kFullMask
                        : ((1u << width) - 1) << ((threadIdx.x % kWarp) & ~unsigned(width - 1));
}

// The sum / max of v over the group, in every lane of it.
template <class A>
__device__ A group_sum(A v, unsigned mask, int width) {
  for (int o = width / 2; o > 0; o /= 2) v += __shfl_xor_sync(mask, v, o, width);
  return v;
}

template <class A>
__device__ A group_max(A v, unsigned mask, int width) {  // no operand is nan
  for (int o = width / 2; o > 0; o /= 2) {
    const A u = __shfl_xor_sync(mask, v, o, width);
    v = u > v ? u : v;
  }
  return v;
}

template <class A>
__device__ A warp_sum(A v) {
  return group_sum(v, kFullMask, kWarp);
}

template <class A>
__device__ A warp_max(A v) {
  return group_max(v, kFullMask, kWarp);
}

// Block-wide sums of K values (blockDim.x a multiple of 32); every thread gets the results.
template <int K, class A>
__device__ void block_sum(A (&v)[K]) {
  __shared__ A part[K][kWarp];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
#pragma unroll
  for (int k = 0; k < K; ++k) v[k] = warp_sum(v[k]);
  __syncthreads();  // a previous call's readers are done with the slots
  if (lane == 0)
    for (int k = 0; k < K; ++k) part[k][warp] = v[k];
  __syncthreads();
  // Every warp adds the per-warp parts itself, so no broadcast round is needed.
  const bool has = lane < static_cast<int>(blockDim.x / kWarp);
#pragma unroll
  for (int k = 0; k < K; ++k) v[k] = warp_sum(has ? part[k][lane] : A(0));
}

template <class A>
__device__ A block_sum(A v) {
  A a[1] = {v};
  block_sum(a);
  return a[0];
}

}  // namespace tessera::cuda
