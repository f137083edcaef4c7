#pragma once
// Vectorised memory access shared by the CUDA kernels: W consecutive elements moved by one load
// or store (16 bytes at most per instruction), and a fast 32-bit division by a divisor fixed at
// launch, for turning linear indices into coordinates.
#include <cstdint>

namespace tessera::cuda {

template <class T, int W>
struct alignas(sizeof(T) * W) Pack {
  T v[W];
};

template <int W, class T>
__device__ Pack<T, W> load(const T* p) {
  return *reinterpret_cast<const Pack<T, W>*>(p);
}

template <int W, class T>
__device__ void store(T* p, const Pack<T, W>& v) {
  *reinterpret_cast<Pack<T, W>*>(p) = v;
}

// Whether p (null counts as aligned: an absent operand) allows loads of W elements.
template <int W, class T>
bool aligned(const T* p) {
  return p == nullptr || reinterpret_cast<uintptr_t>(p) % (sizeof(T) * W) == 0;
}

// n / d for n < 2^31 by a multiply and a shift (Granlund and Montgomery): with s = ceil(log2 d)
// and m = floor(2^32 (2^s - d) / d) + 1 (which fits 32 bits since 2^(s-1) < d),
// n / d = (umulhi(n, m) + n) >> s; the sum cannot overflow as umulhi(n, m) <= n < 2^31.
// A 64-bit division is a long software routine on the GPU; this is three instructions.
struct IntDivider {
  uint32_t divisor = 1, magic = 1, shift = 0;

  IntDivider() = default;
  explicit IntDivider(uint32_t d) : divisor(d) {
    while (shift < 32 && (uint64_t{1} << shift) < d) ++shift;
    magic = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << shift) - d)) / d + 1);
  }
  __device__ uint32_t div(uint32_t n) const { return (__umulhi(n, magic) + n) >> shift; }
};

}  // namespace tessera::cuda
