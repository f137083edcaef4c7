// CPU rotary embedding (rope_kernel): the rows are split across threads and each row is one
// vectorised pass over its pairs.
#include <algorithm>

#include "backend/common/rope_kernels.h"
#include "backend/cpu/loops.h"
#include "tessera/core/dtype_dispatch.h"

namespace tessera::cpu {
namespace {

constexpr int64_t kParallelGrain = 32768;  // elements per thread below which a team costs more

template <bool Interleaved, class T>
void rope_rows(char** data, const int64_t* strides, int64_t rows, int64_t half, opmath_t<T> sign) {
  for (int64_t r = 0; r < rows; ++r) {
    T* out = reinterpret_cast<T*>(data[0] + r * strides[0]);
    const T* x = reinterpret_cast<const T*>(data[1] + r * strides[1]);
    const T* c = reinterpret_cast<const T*>(data[2] + r * strides[2]);
    const T* s = reinterpret_cast<const T*>(data[3] + r * strides[3]);
#pragma omp simd
    for (int64_t i = 0; i < half; ++i) fn::rope_pair<Interleaved>(out, x, c, s, i, half, sign);
  }
}

void rope(const TensorIterator& rows, int64_t half, bool interleaved, bool transpose) {
  dispatch<kFloatingTypes>(rows.dtype(0), "rope", [&]<class T>() {
    const opmath_t<T> sign = transpose ? -1 : 1;
    const int64_t grain = std::max<int64_t>(1, kParallelGrain / (2 * half));
    parallel_for_each(
        rows,
        [&](char** data, const int64_t* strides, int64_t n) {
          if (interleaved)
            rope_rows<true, T>(data, strides, n, half, sign);
          else
            rope_rows<false, T>(data, strides, n, half, sign);
        },
        grain);
  });
}

TESSERA_REGISTER_KERNEL(rope_kernel, DeviceType::CPU, &rope);

}  // namespace
}  // namespace tessera::cpu
