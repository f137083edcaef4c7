#pragma once
// Vectorised memory access shared by the CUDA kernels: W consecutive elements moved by one load
// or store (16 bytes at most per instruction), rows walked in such vectors, and a fast 32-bit
// division by a divisor fixed at launch, for turning linear indices into coordinates.
#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace tessera::cuda {

// Bytes of the widest load or store, and the elements of T in it.
inline constexpr int kVecBytes = 16;
template <class T>
inline constexpr int kVec = static_cast<int>(kVecBytes / sizeof(T));

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

// The same, converting: W elements of T to or from W values of A (the kernels' opmath).
template <int W, class T, class A>
__device__ void load(A* out, const T* p) {
  const Pack<T, W> pk = load<W>(p);
#pragma unroll
  for (int k = 0; k < W; ++k) out[k] = static_cast<A>(pk.v[k]);
}

template <int W, class T, class A>
__device__ void store(T* p, const A* in) {
  Pack<T, W> pk;
#pragma unroll
  for (int k = 0; k < W; ++k) pk.v[k] = static_cast<T>(in[k]);
  store<W>(p, pk);
}

// Calls f(i, integral_constant<int, W>) on chunks [i, i + W) that cover a row of n elements,
// spread over the block: W = VEC over the 16-byte aligned body, 1 over the head before it and
// the tail after it. Operands indexed alongside `row` need the same address residue mod 16.
template <int VEC, class T, class F>
__device__ void for_each_chunk(const T* row, int64_t n, F&& f) {
  int64_t head = 0;
  if constexpr (VEC > 1)
    head = std::min<int64_t>(n, (0 - reinterpret_cast<uintptr_t>(row) / sizeof(T)) & (VEC - 1));
  const int64_t body = (n - head) / VEC, tail = head + body * VEC;
  for (int64_t i = threadIdx.x; i < head; i += blockDim.x) f(i, std::integral_constant<int, 1>{});
#pragma unroll 4
  for (int64_t k = threadIdx.x; k < body; k += blockDim.x)
    f(head + k * VEC, std::integral_constant<int, VEC>{});
  for (int64_t i = tail + threadIdx.x; i < n; i += blockDim.x)
    f(i, std::integral_constant<int, 1>{});
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
