#pragma once
// Warp-level reductions shared by the CUDA kernels.

namespace tessera::cuda {

inline constexpr int kWarpSize = 32;

// The sum of v over the 32 lanes of a full warp, in every lane.
template <class T>
__device__ T warp_sum(T v) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

}  // namespace tessera::cuda
