#pragma once
// Kernel key and per-pair math of the rotary embedding, shared by every backend. x and out are
// [..., D] with D = 2 half; each pair (a, b) of a row turns by the row's angles:
//   (a, b) -> (a c - b s, b c + a s)
// with pairs (x[i], x[i + half]) (Hugging Face rotate_half) or (x[2i], x[2i+1]) (interleaved).
// The backward is the same rotation with -s (its transpose).
#include <cstdint>

#include "backend/common/tensor_iterator.h"
#include "tessera/core/dispatcher.h"
#include "tessera/core/half.h"
#include "tessera/core/host_device.h"

namespace tessera {

// `rows` iterates the first element of each row of out, x, cos and sin (operands in that order,
// one dtype; the [..., half] tables broadcast to x's rows); every row is contiguous from there, so
// strided views such as [B, T, H, D] transposed to [B, H, T, D] need no copy. transpose: rotate by
// -s (the backward).
TESSERA_DECLARE_KERNEL(rope_kernel, void(const TensorIterator& rows, int64_t half, bool interleaved,
                                         bool transpose));

namespace fn {

// Pair i of one row in opmath; sign is +1 (forward) or -1 (transpose).
template <bool Interleaved, class T>
TESSERA_HD inline void rope_pair(T* out, const T* x, const T* cos, const T* sin, int64_t i,
                                 int64_t half, opmath_t<T> sign) {
  using A = opmath_t<T>;
  const int64_t ia = Interleaved ? 2 * i : i, ib = Interleaved ? 2 * i + 1 : i + half;
  const A a = static_cast<A>(x[ia]), b = static_cast<A>(x[ib]);
  const A c = static_cast<A>(cos[i]), s = sign * static_cast<A>(sin[i]);
  out[ia] = static_cast<T>(a * c - b * s);
  out[ib] = static_cast<T>(b * c + a * s);
}

}  // namespace fn
}  // namespace tessera
