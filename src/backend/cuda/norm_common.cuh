#pragma once
// What the norm forward (norm.cu) and backward (norm_backward.cu) share: the block-size bound,
// optional operands' pointers, the 16-byte vector check and the one-block-per-row launch shape.
#include <algorithm>
#include <cstdint>

#include "backend/cuda/row_launch.cuh"
#include "backend/cuda/vectorized.cuh"
#include "tessera/core/tensor.h"

namespace tessera::cuda {

// The most threads any block of the norm kernels is launched with (one such block per SM lets
// kernels bounded by it keep 64 registers).
inline constexpr int kMaxThreads = 1024;

template <class T>
const T* ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data_ptr<T>() : nullptr;
}

// Whether rows of n elements load as 16-byte vectors: every operand aligned (null ones count as
// aligned) and n a multiple of the vector width.
template <class T, class... P>
bool vectorizable(int64_t n, const P*... p) {
  return n % kVec<T> == 0 && ((reinterpret_cast<uintptr_t>(p) % kVecBytes == 0) && ...);
}

// Calls f.template operator()<VEC>(threads) for a one-block-per-row kernel: 16-byte vectors
// when `vec`, about 8 of them per thread, 128 to 1024 threads.
template <class T, class F>
void with_block_config(int64_t n, bool vec, F&& f) {
  auto threads = [&](int w) { return std::clamp(pow2_ceil((n / w + 7) / 8), 128, kMaxThreads); };
  if (vec)
    f.template operator()<kVec<T>>(threads(kVec<T>));
  else
    f.template operator()<1>(threads(1));
}

// One block per row (rows this long cannot be numerous enough to pass the grid's 2^31 limit).
inline unsigned rows_grid(int64_t rows) { return static_cast<unsigned>(rows); }

}  // namespace tessera::cuda
