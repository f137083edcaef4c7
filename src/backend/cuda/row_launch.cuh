#pragma once
// Launch shapes of the row kernels (softmax, norms, losses): short rows spread over a group of
// lanes of one warp ("warp-per-row" kernels, several rows per block), longer ones over a block.
#include <algorithm>
#include <cstdint>
#include <utility>

#include "backend/cuda/vectorized.cuh"
#include "backend/cuda/warp.cuh"

namespace tessera::cuda {

// Longest row a warp keeps in registers: 32 values per lane, 16 for double (whose 32 spill).
template <class T>
inline constexpr int64_t kMaxWarpRow = sizeof(T) == 8 ? 512 : 1024;
inline constexpr int kRowsBlock = 128;  // threads per block of the warp-per-row kernels

// Grid-stride loop over rows in the warp-per-row kernels, `width` lanes per row.
__device__ inline int64_t first_row(int width) {
  return int64_t{blockIdx.x} * (blockDim.x / width) + threadIdx.x / width;
}
__device__ inline int64_t row_stride(int width) {
  return int64_t{gridDim.x} * (blockDim.x / width);
}

// The least power of two >= v, saturated at 2^30 (every caller clamps it to a block size; an
// int doubling past 2^30 would overflow and loop forever on a column of 2^30 + 1).
inline int pow2_ceil(int64_t v) {
  int64_t p = 1;
  while (p < v && p < (int64_t{1} << 30)) p *= 2;
  return static_cast<int>(p);
}

// Calls f.template operator()<ELEMS, VEC>(width) for a row of n <= kMaxWarpRow<T> spread over
// `width` lanes holding ELEMS values each, loaded VEC at a time when `aligned` (16-byte aligned
// operands). Lanes get a full 16-byte vector before the group widens past one lane, and whole
// vectors before it widens past 32 (so n = 128 bf16 takes 16 lanes of 8, not 32 of 4).
template <class T, class F>
void with_warp_config(int64_t n, bool aligned, F&& f) {
  const int p = pow2_ceil(n), width = std::clamp(p / kVec<T>, 1, kWarp);
  auto go = [&]<int ELEMS>() {
    constexpr int V = std::min(ELEMS, kVec<T>);
    if constexpr (ELEMS * kWarp <= kMaxWarpRow<T>) {
      if (V > 1 && aligned && n % V == 0)
        f.template operator()<ELEMS, V>(width);
      else
        f.template operator()<ELEMS, 1>(width);
    }
  };
  const int elems = p / width;
  [&]<int... E>(std::integer_sequence<int, E...>) {
    ((elems == E && (go.template operator()<E>(), true)) || ...);
  }
  (std::integer_sequence<int, 1, 2, 4, 8, 16, 32>{});
}

}  // namespace tessera::cuda
