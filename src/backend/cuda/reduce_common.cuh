#pragma once
// What the reductions (reduce.cu) and cumsum (cumsum.cu) share: the split limit and workspace of
// the multi-block passes, and the CPU's conversions from elements to accumulators and back.
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backend/common/reduce_kernels.h"
#include "backend/cuda/context.h"
#include "tessera/ops/creation.h"

namespace tessera::cuda {

inline constexpr int64_t kMaxSplits = 1024;  // blocks along one reduce axis (grid y)

constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Blocks of kBlockSize threads that fill every SM once.
inline int64_t wave_blocks() {
  return int64_t{device_properties().multiProcessorCount} * (2048 / kBlockSize);
}

template <class A>
A* workspace(Tensor& holder, int64_t count, Device device) {
  holder = empty({count * static_cast<int64_t>(sizeof(A))}, TensorOptions(kUInt8).with_device(device));
  return static_cast<A*>(holder.data_ptr());
}

// Input element to accumulator as the CPU converts it. Half goes through the hardware conversion
// (exact) except for inf/NaN, whose sign and payload the CPU's software conversion keeps.
template <class A, class T>
__device__ A to_acc(T v) {
  if constexpr (std::is_same_v<T, Half>) {
    if ((v.x & 0x7c00) != 0x7c00) return static_cast<A>(__half2float(__ushort_as_half(v.x)));
  }
  return static_cast<A>(static_cast<opmath_t<T>>(v));
}

// Accumulator to output element; Half rounds in hardware (the same round-to-nearest-even as
// Half::from_float) except NaN, which the CPU's conversion canonicalises keeping the sign.
template <class O, class A>
__device__ O cast_out(A a) {
  if constexpr (std::is_same_v<O, Half>) {
    const float f = static_cast<float>(a);
    if (!std::isnan(f)) return Half::from_bits(__half_as_ushort(__float2half_rn(f)));
  }
  return static_cast<O>(a);
}

}  // namespace tessera::cuda
