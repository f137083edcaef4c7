// CUDA sort_rows_kernel (index_kernels.h), behind sort, argsort and topk: every value becomes an
// unsigned key that orders as the value does (floats by their sign-flipped bits, NaN the
// largest key, -0.0 as 0.0; integers offset to start at 0), and cub's radix sort, which is
// stable, orders each row's positions by key: the segmented sort for several rows, the
// device-wide one for a single row (the segmented one gives a segment one thread block). Only
// the key bits that can differ are sorted: 16-bit floats widen exactly to float, leaving the low
// mantissa bits equal in every key, and 8/16-bit integers fill 8/16 bits. Without the kernel
// the rows would cross to the host and back.
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <limits>
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
  } else if constexpr (std::is_same_v<T, int32_t>) {
    return static_cast<uint32_t>(v) ^ 0x80000000u;
  } else if constexpr (std::is_signed_v<T>) {  // int8, int16: 0 .. 2^bits - 1
    return static_cast<uint32_t>(int32_t{v} - int32_t{std::numeric_limits<T>::min()});
  } else {
    return static_cast<uint32_t>(v);  // bool, uint8
  }
}

// The key bits [begin, end) that can differ between two values of T.
template <class T>
constexpr int key_begin_bit() {
  if constexpr (std::is_same_v<T, BFloat16>) return 16;  // 7 mantissa bits of float's 23
  if constexpr (std::is_same_v<T, Half>) return 13;      // 10 mantissa bits, subnormals too
  return 0;
}
template <class T>
constexpr int key_end_bit() {
  if constexpr (std::is_floating_point_v<opmath_t<T>>) return int{sizeof(key_t<T>) * 8};
  return std::min(int{sizeof(T) * 8}, int{sizeof(key_t<T>) * 8});
}

// Stable radix sort of positions by key: over one whole row (whole) or over the segments that
// offsets delimit. The size query (temp null) and the sort take the same path.
template <class K>
cudaError_t sort_pairs(void* temp, size_t& bytes, const K* keys, K* sorted_keys,
                       const int64_t* positions, int64_t* out, int items, int segments,
                       const int32_t* offsets, bool whole, bool descending, int begin_bit,
                       int end_bit, cudaStream_t stream) {
  if (whole)
    return descending ? cub::DeviceRadixSort::SortPairsDescending(temp, bytes, keys, sorted_keys,
                                                                  positions, out, items, begin_bit,
                                                                  end_bit, stream)
                      : cub::DeviceRadixSort::SortPairs(temp, bytes, keys, sorted_keys, positions,
                                                        out, items, begin_bit, end_bit, stream);
  return descending ? cub::DeviceSegmentedRadixSort::SortPairsDescending(
                          temp, bytes, keys, sorted_keys, positions, out, items, segments, offsets,
                          offsets + 1, begin_bit, end_bit, stream)
                    : cub::DeviceSegmentedRadixSort::SortPairs(
                          temp, bytes, keys, sorted_keys, positions, out, items, segments, offsets,
                          offsets + 1, begin_bit, end_bit, stream);
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
  const bool whole = count == 1;
  dispatch<kAllTypes>(rows.dtype(), "sort", [&]<class T>() {
    using K = key_t<T>;
    constexpr int begin_bit = key_begin_bit<T>(), end_bit = key_end_bit<T>();
    size_t cub_bytes = 0;
    TESSERA_CUDA_CHECK(sort_pairs<K>(nullptr, cub_bytes, nullptr, nullptr, nullptr, nullptr,
                                     static_cast<int>(chunk * n), static_cast<int>(chunk), nullptr,
                                     whole, descending, begin_bit, end_bit, stream));
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
    if (!whole) {
      row_offsets<<<grid_size(chunk + 1), kBlockSize, 0, stream>>>(offsets, chunk,
                                                                   static_cast<int>(n));
      TESSERA_CUDA_CHECK_LAUNCH();
    }
    int64_t* out = order.data_ptr<int64_t>();
    for (int64_t first = 0; first < count; first += chunk) {
      const int64_t segments = std::min(chunk, count - first);
      const int64_t at = first * n;
      size_t bytes = cub_bytes;
      TESSERA_CUDA_CHECK(sort_pairs<K>(cub_temp, bytes, keys + at, sorted_keys + at, positions + at,
                                       out + at, static_cast<int>(segments * n),
                                       static_cast<int>(segments), offsets, whole, descending,
                                       begin_bit, end_bit, stream));
    }
  });
}

TESSERA_REGISTER_KERNEL(sort_rows_kernel, DeviceType::CUDA, &sort_rows);

}  // namespace
}  // namespace tessera::cuda
