#pragma once
// What index.cu and gather_scatter.cu share: the index-dtype and copy-width dispatch, and atomic
// adds, 8/16-bit ones by compare-and-swap of their containing 32-bit word.
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "tessera/core/dtype_dispatch.h"
#include "tessera/core/tensor.h"

namespace tessera::cuda {

template <class F>
decltype(auto) dispatch_index(const Tensor& index, F&& f) {
  return dispatch<kIndexTypes>(index.dtype(), "index", std::forward<F>(f));
}

// Calls f.template operator()<U>() with U a plain type of the given width in bytes (1 to
// kMaxWidth, a power of two up to 16).
template <size_t kMaxWidth = 8, class F>
void dispatch_width(size_t width, F&& f) {
  if constexpr (kMaxWidth >= 16) {
    if (width == 16) return f.template operator()<uint4>();
  }
  switch (width) {
    case 1: return f.template operator()<uint8_t>();
    case 2: return f.template operator()<uint16_t>();
    case 4: return f.template operator()<uint32_t>();
    default: return f.template operator()<uint64_t>();
  }
}

// ---- atomics ----

// Replaces *word with f(*word) atomically.
template <class F>
__device__ void atomic_update_word(unsigned* word, const F& f) {
  unsigned old = *word, assumed;
  do {
    assumed = old;
    old = atomicCAS(word, assumed, f(assumed));
  } while (old != assumed);
}

// Lane `lane` of a 32-bit word holding 4 / sizeof(T) elements (little-endian: lane 0 lowest).
template <class T>
using LaneBits = std::conditional_t<sizeof(T) == 1, uint8_t, uint16_t>;
template <class T>
__device__ T get_lane(unsigned word, int lane) {
  const auto bits = static_cast<LaneBits<T>>(word >> (lane * 8 * sizeof(T)));
  T v;
  std::memcpy(&v, &bits, sizeof(T));
  return v;
}
template <class T>
__device__ unsigned set_lane(unsigned word, int lane, T v) {
  LaneBits<T> bits;
  std::memcpy(&bits, &v, sizeof(T));
  const int shift = lane * 8 * static_cast<int>(sizeof(T));
  const unsigned mask = ((1u << (8 * sizeof(T))) - 1) << shift;
  return (word & ~mask) | (static_cast<unsigned>(bits) << shift);
}

// *p += v for 32/64-bit types: native float/double adds; integers as unsigned, whose
// wrap-around is the CPU's.
template <class T>
__device__ void atomic_add(T* p, T v) {
  if constexpr (std::is_floating_point_v<T>) {
    atomicAdd(p, v);
  } else if constexpr (sizeof(T) == 4) {
    atomicAdd(reinterpret_cast<unsigned*>(p), static_cast<unsigned>(v));
  } else {
    atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
  }
}

}  // namespace tessera::cuda
