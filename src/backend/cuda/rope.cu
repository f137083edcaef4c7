// CUDA rotary embedding (rope_kernel): one thread per pair in a grid-stride loop, the rows' starts
// in out, x and the tables from the row iterator's offsets (32-bit when they fit).
#include <cstdint>

#include "backend/common/rope_kernels.h"
#include "backend/cuda/loops.cuh"
#include "tessera/core/dtype_dispatch.h"

namespace tessera::cuda {
namespace {

template <bool Interleaved, class T, class Index>
__global__ void rope_pairs(Index n, Index half, opmath_t<T> sign, Pointers<4> ptrs,
                           OffsetCalculator<4, Index> rows) {
  Index off[4];
  for (Index p = blockIdx.x * Index{blockDim.x} + threadIdx.x; p < n;
       p += Index{gridDim.x} * blockDim.x) {
    const Index r = p / half, i = p - r * half;
    rows.get(r, off);
    fn::rope_pair<Interleaved>(
        reinterpret_cast<T*>(ptrs.p[0] + off[0]), reinterpret_cast<const T*>(ptrs.p[1] + off[1]),
        reinterpret_cast<const T*>(ptrs.p[2] + off[2]),
        reinterpret_cast<const T*>(ptrs.p[3] + off[3]), int64_t{i}, int64_t{half}, sign);
  }
}

template <bool Interleaved, class T, class Index>
void launch(const TensorIterator& rows, int64_t half, opmath_t<T> sign) {
  const int64_t n = rows.numel() * half;
  Pointers<4> ptrs;
  for (int k = 0; k < 4; ++k) ptrs.p[k] = rows.data(k);
  rope_pairs<Interleaved, T, Index><<<grid_size(n), kBlockSize, 0, current_stream()>>>(
      static_cast<Index>(n), static_cast<Index>(half), sign, ptrs,
      OffsetCalculator<4, Index>(rows));
  TESSERA_CUDA_CHECK_LAUNCH();
}

void rope(const TensorIterator& rows, int64_t half, bool interleaved, bool transpose) {
  if (rows.numel() == 0) return;
  const bool narrow = fits_32_bit(rows) && rows.numel() * half < (int64_t{1} << 31);
  dispatch<kFloatingTypes>(rows.dtype(0), "rope", [&]<class T>() {
    const opmath_t<T> sign = transpose ? -1 : 1;
    if (interleaved && narrow)
      launch<true, T, uint32_t>(rows, half, sign);
    else if (interleaved)
      launch<true, T, int64_t>(rows, half, sign);
    else if (narrow)
      launch<false, T, uint32_t>(rows, half, sign);
    else
      launch<false, T, int64_t>(rows, half, sign);
  });
}

TESSERA_REGISTER_KERNEL(rope_kernel, DeviceType::CUDA, &rope);

}  // namespace
}  // namespace tessera::cuda
