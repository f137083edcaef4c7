// CUDA sort_rows_kernel (index_kernels.h), behind sort, argsort and topk: every value becomes an
// unsigned key that orders as the value does (floats by their sign-flipped bits, NaN the
// largest key, -0.0 as 0.0; signed integers with the sign bit flipped), and cub's segmented
// radix sort, which is stable, orders each row's positions by key. Without it the rows would
// cross to the host and back.
#include <cub/device/device_segmented_radix_sort.cuh>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <type_traits>

#include "backend/common/index_kernels.h"
#include "backend/cuda/context.h"
#include "backend/cuda/cuda_check.h"
#include "tessera/core/dtype_dispatch.h"
#include "tessera/core/half.h"
#include "tessera/ops/creation.h"

namespace tessera::cuda {
namespace {

// 64-bit keys for double and int64, 32-bit for the rest.
template <class T>
using key_t = std::conditional_t<sizeof(T) == 8, uint64_t, uint32_t>;

template <class T>
__device__ key_t<T> ordered_key(T v) {
  if constexpr (std::is_same_v<T, double>) {
    if (v != v) return UINT64_MAX;
    const auto bits = static_cast<uint64_t>(__double_as_longlong(v == 0.0 ? 0.0 : v));
    return bits >> 63 ? ~bits : bits | (uint64_t{1} << 63);
  } else if constexpr (std::is_floating_point_v<opmath_t<T>>) {
    const float f = static_cast<float>(v);  // exact for 16-bit floats
    if (f != f) return UINT32_MAX;
    const uint32_t bits = __float_as_uint(f == 0.0f ? 0.0f : f);
    return bits >> 31 ? ~bits : bits | 0x80000000u;
  } else if constexpr (std::is_same_v<T, int64_t>) {
    return static_cast<uint64_t>(v) ^ (uint64_t{1} << 63);
  } else if constexpr (std::is_signed_v<T>) {
    return static_cast<uint32_t>(static_cast<int32_t>(v)) ^ 0x80000000u;
  } else {
    return static_cast<uint32_t>(v);  // bool, uint8
  }
}

template <class T>
__global__ void __launch_bounds__(kBlockSize)
    make_keys(const T* __restrict__ x, int64_t total, int64_t n, key_t<T>* __restrict__ keys,
              int64_t* __restrict__ positions) {
  for (int64_t i = blockIdx.x * int64_t{kBlockSize} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * kBlockSize) {
    keys[i] = ordered_key(x[i]);
    positions[i] = i % n;
  }
}

__global__ void __launch_bounds__(kBlockSize) row_offsets(int32_t* offsets, int64_t rows, int n) {
  for (int64_t i = blockIdx.x * int64_t{kBlockSize} + threadIdx.x; i <= rows;
       i += int64_t{gridDim.x} * kBlockSize)
    offsets[i] = static_cast<int32_t>(i * n);
}

constexpr size_t aligned(size_t bytes) { return (bytes + 255) / 256 * 256; }

void sort_rows(const Tensor& order, const Tensor& rows, bool descending) {
  const int64_t total = rows.numel();
  if (total == 0) return;
  const int64_t n = rows.size(-1), count = total / n;
  TESSERA_CHECK(n <= INT32_MAX, ValueError, "[sort] expected rows of fewer than 2^31 values, got ",
                n);
  // cub counts items in int: the rows go in chunks of fewer than 2^31 values.
  const int64_t chunk = std::min(count, INT32_MAX / n);
  const cudaStream_t stream = current_stream();
  dispatch<kAllTypes>(rows.dtype(), "sort", [&]<class T>() {
    using K = key_t<T>;
    size_t cub_bytes = 0;
    TESSERA_CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortPairs(
        nullptr, cub_bytes, static_cast<const K*>(nullptr), static_cast<K*>(nullptr),
        static_cast<const int64_t*>(nullptr), static_cast<int64_t*>(nullptr),
        static_cast<int>(chunk * n), static_cast<int>(chunk), static_cast<int32_t*>(nullptr),
        static_cast<int32_t*>(nullptr) + 1, 0, int{sizeof(K) * 8}, stream));
    const size_t key_bytes = aligned(sizeof(K) * static_cast<size_t>(total));
    const size_t position_bytes = aligned(sizeof(int64_t) * static_cast<size_t>(total));
    const size_t offset_bytes = aligned(sizeof(int32_t) * static_cast<size_t>(chunk + 1));
    Tensor scratch =
        empty({static_cast<int64_t>(2 * key_bytes + position_bytes + offset_bytes + cub_bytes)},
              TensorOptions(kUInt8).with_device(rows.device()));
    auto* base = static_cast<unsigned char*>(scratch.data_ptr());
    auto* keys = reinterpret_cast<K*>(base);
    auto* sorted_keys = reinterpret_cast<K*>(base + key_bytes);
    auto* positions = reinterpret_cast<int64_t*>(base + 2 * key_bytes);
    auto* offsets = reinterpret_cast<int32_t*>(base + 2 * key_bytes + position_bytes);
    void* cub_temp = base + 2 * key_bytes + position_bytes + offset_bytes;

    make_keys<T><<<grid_size(total), kBlockSize, 0, stream>>>(rows.data_ptr<T>(), total, n, keys,
                                                             positions);
    TESSERA_CUDA_CHECK_LAUNCH();
    row_offsets<<<grid_size(chunk + 1), kBlockSize, 0, stream>>>(offsets, chunk,
                                                                 static_cast<int>(n));
    TESSERA_CUDA_CHECK_LAUNCH();
    int64_t* out = order.data_ptr<int64_t>();
    for (int64_t first = 0; first < count; first += chunk) {
      const int64_t segments = std::min(chunk, count - first);
      const int64_t at = first * n;
      const int items = static_cast<int>(segments * n), segs = static_cast<int>(segments);
      size_t bytes = cub_bytes;
      if (descending)
        TESSERA_CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortPairsDescending(
            cub_temp, bytes, keys + at, sorted_keys + at, positions + at, out + at, items, segs,
            offsets, offsets + 1, 0, int{sizeof(K) * 8}, stream));
      else
        TESSERA_CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortPairs(
            cub_temp, bytes, keys + at, sorted_keys + at, positions + at, out + at, items, segs,
            offsets, offsets + 1, 0, int{sizeof(K) * 8}, stream));
    }
  });
}

TESSERA_REGISTER_KERNEL(sort_rows_kernel, DeviceType::CUDA, &sort_rows);

}  // namespace
}  // namespace tessera::cuda
