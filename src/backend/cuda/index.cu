// CUDA index_range, index_select, index_add, mask_positions and triangle (index_kernels.h), with
// cpu/index.cpp's semantics; gather and scatter are in gather_scatter.cu.
//
// Kernels over contiguous rows give each row a power-of-two group of threads sized to it, so a
// warp covers several short rows or part of a long one and accesses stay coalesced. Selecting
// copies elements as raw units of their width (16 bytes where the rows allow), since it never
// looks at values.
#include <cub/device/device_select.cuh>
#include <thrust/iterator/counting_iterator.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "backend/common/index_kernels.h"
#include "backend/cuda/context.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/index_common.cuh"
#include "tessera/core/dtype_dispatch.h"
#include "tessera/ops/creation.h"

namespace tessera::cuda {
namespace {

constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The widest of 16, 8, 4, 2 and 1 bytes dividing a row's bytes and both base addresses.
size_t copy_unit(size_t row_bytes, const void* a, const void* b) {
  const uintptr_t bits = row_bytes | reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b);
  size_t unit = 16;
  while (bits % unit) unit /= 2;
  return unit;
}

// Threads per row (a power of two up to the block) and blocks for rows of `units` items each.
struct RowLayout {
  int tpr;
  unsigned blocks;
};
RowLayout row_layout(int64_t rows, int64_t units) {
  int tpr = 1;
  while (tpr < kBlockSize && tpr < units) tpr *= 2;
  return {tpr, grid_size(ceil_div(rows, kBlockSize / tpr), 1)};
}

// ---- index_range ----

// Block-wide min and max, valid in thread 0; every thread calls it.
__device__ void block_min_max(int64_t& lo, int64_t& hi) {
  __shared__ int64_t warp_lo[kBlockSize / 32], warp_hi[kBlockSize / 32];
  for (int offset = 16; offset > 0; offset /= 2) {
    lo = std::min(lo, static_cast<int64_t>(__shfl_down_sync(0xffffffffu, lo, offset)));
    hi = std::max(hi, static_cast<int64_t>(__shfl_down_sync(0xffffffffu, hi, offset)));
  }
  if (threadIdx.x % 32 == 0) {
    warp_lo[threadIdx.x / 32] = lo;
    warp_hi[threadIdx.x / 32] = hi;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kBlockSize / 32; ++w) {
      lo = std::min(lo, warp_lo[w]);
      hi = std::max(hi, warp_hi[w]);
    }
  }
}

// Per block {min, max} of p[0, n) into out[2 * blockIdx.x + {0, 1}].
template <class I>
__global__ void __launch_bounds__(kBlockSize) index_min_max(const I* __restrict__ p, int64_t n,
                                                            int64_t* __restrict__ out) {
  int64_t lo = std::numeric_limits<int64_t>::max(), hi = std::numeric_limits<int64_t>::min();
  for (int64_t i = blockIdx.x * int64_t{kBlockSize} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * kBlockSize) {
    const auto v = static_cast<int64_t>(p[i]);
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  block_min_max(lo, hi);
  if (threadIdx.x == 0) {
    out[2 * blockIdx.x] = lo;
    out[2 * blockIdx.x + 1] = hi;
  }
}

// {min, max} over count per-block pairs, by one block.
__global__ void __launch_bounds__(kBlockSize) merge_min_max(const int64_t* __restrict__ pairs,
                                                            int count, int64_t* __restrict__ out) {
  int64_t lo = std::numeric_limits<int64_t>::max(), hi = std::numeric_limits<int64_t>::min();
  for (int i = threadIdx.x; i < count; i += kBlockSize) {
    lo = std::min(lo, pairs[2 * i]);
    hi = std::max(hi, pairs[2 * i + 1]);
  }
  block_min_max(lo, hi);
  if (threadIdx.x == 0) {
    out[0] = lo;
    out[1] = hi;
  }
}

std::array<int64_t, 2> index_range(const Tensor& index) {
  const int64_t n = index.numel();
  const cudaStream_t stream = current_stream();
  const unsigned blocks = grid_size(n);
  Tensor buffer = empty({2 * int64_t{blocks} + 2}, TensorOptions(kInt64).with_device(index.device()));
  int64_t* pairs = buffer.data_ptr<int64_t>();
  dispatch_index(index, [&]<class I>() {
    index_min_max<<<blocks, kBlockSize, 0, stream>>>(index.data_ptr<I>(), n, pairs);
    TESSERA_CUDA_CHECK_LAUNCH();
  });
  const int64_t* result = pairs;
  if (blocks > 1) {
    merge_min_max<<<1, kBlockSize, 0, stream>>>(pairs, static_cast<int>(blocks), pairs + 2 * blocks);
    TESSERA_CUDA_CHECK_LAUNCH();
    result = pairs + 2 * blocks;
  }
  std::array<int64_t, 2> range;
  TESSERA_CUDA_CHECK(cudaMemcpyAsync(range.data(), result, sizeof(range), cudaMemcpyDeviceToHost,
                                     stream));
  TESSERA_CUDA_CHECK(cudaStreamSynchronize(stream));
  return range;
}

// ---- index_select / index_add ----

// out row (o, i) = x row (o, index[i]) for rows of `units` copy units; x is [outer, n, units].
template <class U, class I>
__global__ void __launch_bounds__(kBlockSize)
    index_select_rows(U* __restrict__ out, const U* __restrict__ x, const I* __restrict__ index,
                      int64_t rows, int64_t m, int64_t n, int64_t units, int tpr) {
  const int rows_per_block = kBlockSize / tpr;
  for (int64_t row = int64_t{blockIdx.x} * rows_per_block + threadIdx.x / tpr; row < rows;
       row += int64_t{gridDim.x} * rows_per_block) {
    const int64_t o = row / m;
    const U* from = x + (o * n + static_cast<int64_t>(index[row - o * m])) * units;
    U* to = out + row * units;
    for (int64_t k = threadIdx.x % tpr; k < units; k += tpr) to[k] = from[k];
  }
}

void index_select(const Tensor& out, const Tensor& x, const Tensor& index, int64_t outer,
                  int64_t inner) {
  const int64_t m = index.numel();
  if (out.numel() == 0) return;
  const int64_t n = x.numel() / (outer * inner);
  const size_t row_bytes = static_cast<size_t>(inner) * itemsize(x.dtype());
  const size_t unit = copy_unit(row_bytes, x.data_ptr(), out.data_ptr());
  const int64_t units = static_cast<int64_t>(row_bytes / unit);
  const RowLayout layout = row_layout(outer * m, units);
  dispatch_width<16>(unit, [&]<class U>() {
    dispatch_index(index, [&]<class I>() {
      index_select_rows<<<layout.blocks, kBlockSize, 0, current_stream()>>>(
          static_cast<U*>(out.data_ptr()), static_cast<const U*>(x.data_ptr()),
          index.data_ptr<I>(), outer * m, m, n, units, layout.tpr);
      TESSERA_CUDA_CHECK_LAUNCH();
    });
  });
}

// out row (o, index[i]) += alpha * src row (o, i), skipping index == skip; out is [outer, n,
// inner]. 32/64-bit elements add natively; narrower ones update whole 32-bit words, one thread
// per word the out row touches, with the CPU's formula on each lane inside the row.
template <class T, class I>
__global__ void __launch_bounds__(kBlockSize)
    index_add_rows(T* out, const T* __restrict__ src, const I* __restrict__ index, int64_t rows,
                   int64_t m, int64_t n, int64_t inner, opmath_t<T> alpha, int64_t skip, int tpr) {
  using A = opmath_t<T>;
  const int rows_per_block = kBlockSize / tpr, tx = threadIdx.x % tpr;
  for (int64_t row = int64_t{blockIdx.x} * rows_per_block + threadIdx.x / tpr; row < rows;
       row += int64_t{gridDim.x} * rows_per_block) {
    const int64_t o = row / m, v = static_cast<int64_t>(index[row - o * m]);
    if (v == skip) continue;
    T* d = out + (o * n + v) * inner;
    const T* s = src + row * inner;
    if constexpr (sizeof(T) >= 4) {
      for (int64_t k = tx; k < inner; k += tpr) {
        if constexpr (std::is_floating_point_v<T>) {
          atomic_add(d + k, alpha * s[k]);
        } else {  // wrap-around product, as the CPU's integer arithmetic
          using Bits = std::make_unsigned_t<T>;
          atomic_add(d + k, static_cast<T>(static_cast<Bits>(alpha) * static_cast<Bits>(s[k])));
        }
      }
    } else {
      constexpr int kLanes = 4 / sizeof(T);
      const auto addr = reinterpret_cast<uintptr_t>(d);
      const int head = static_cast<int>(addr % 4 / sizeof(T));  // lane of d[0] in its word
      auto* words = reinterpret_cast<unsigned*>(addr - addr % 4);
      for (int64_t w = tx; w < (head + inner + kLanes - 1) / kLanes; w += tpr) {
        decltype(alpha * A(s[0])) add[kLanes];
#pragma unroll
        for (int lane = 0; lane < kLanes; ++lane) {
          const int64_t k = w * kLanes + lane - head;
          add[lane] = k >= 0 && k < inner ? alpha * static_cast<A>(s[k]) : 0;
        }
        atomic_update_word(words + w, [&](unsigned word) {
#pragma unroll
          for (int lane = 0; lane < kLanes; ++lane) {
            const int64_t k = w * kLanes + lane - head;
            if (k >= 0 && k < inner)
              word = set_lane(word, lane,
                              static_cast<T>(static_cast<A>(get_lane<T>(word, lane)) + add[lane]));
          }
          return word;
        });
      }
    }
  }
}

void index_add(const Tensor& out, const Tensor& src, const Tensor& index, int64_t outer,
               int64_t inner, const Scalar& alpha, int64_t skip) {
  const int64_t m = index.numel();
  if (src.numel() == 0) return;
  const int64_t n = out.numel() / (outer * inner);
  dispatch<kNumericTypes>(out.dtype(), "index_add", [&]<class T>() {
    const int64_t units = sizeof(T) >= 4 ? inner : inner / (4 / sizeof(T)) + 1;
    const RowLayout layout = row_layout(outer * m, units);
    dispatch_index(index, [&]<class I>() {
      index_add_rows<<<layout.blocks, kBlockSize, 0, current_stream()>>>(
          out.data_ptr<T>(), src.data_ptr<T>(), index.data_ptr<I>(), outer * m, m, n, inner,
          alpha.to<opmath_t<T>>(), skip, layout.tpr);
      TESSERA_CUDA_CHECK_LAUNCH();
    });
  });
}

// ---- masked positions and triangles ----

// cub's stream compaction of the positions 0..n-1 flagged by the mask.
void mask_positions(const Tensor& positions, const Tensor& mask) {
  if (positions.numel() == 0) return;
  const int64_t n = mask.numel();
  const cudaStream_t stream = current_stream();
  const thrust::counting_iterator<int64_t> first(0);
  const bool* flags = mask.data_ptr<bool>();
  int64_t* out = positions.data_ptr<int64_t>();
  size_t temp_bytes = 0;
  TESSERA_CUDA_CHECK(cub::DeviceSelect::Flagged(nullptr, temp_bytes, first, flags, out,
                                                static_cast<int64_t*>(nullptr), n, stream));
  // The selected count (which the op already knows) goes to the first 256 bytes.
  constexpr int64_t kCountBytes = 256;
  Tensor temp = empty({kCountBytes + static_cast<int64_t>(temp_bytes)},
                      TensorOptions(kUInt8).with_device(mask.device()));
  auto* base = static_cast<unsigned char*>(temp.data_ptr());
  TESSERA_CUDA_CHECK(cub::DeviceSelect::Flagged(base + kCountBytes, temp_bytes, first, flags, out,
                                                reinterpret_cast<int64_t*>(base), n, stream));
}

// Rows of C elements of a [.., R, C] tensor; keeps columns [begin, end) of row r and zeroes the
// rest (zero is all-zero bits in every dtype).
template <class U>
__global__ void __launch_bounds__(kBlockSize)
    triangle_rows(U* out, const U* x, int64_t rows, int64_t R, int64_t C, int64_t k, bool lower,
                  int tpr) {
  const int rows_per_block = kBlockSize / tpr;
  for (int64_t row = int64_t{blockIdx.x} * rows_per_block + threadIdx.x / tpr; row < rows;
       row += int64_t{gridDim.x} * rows_per_block) {
    const int64_t cut = std::clamp<int64_t>(row % R + k + (lower ? 1 : 0), 0, C);
    const int64_t begin = lower ? 0 : cut, end = lower ? cut : C;
    for (int64_t c = threadIdx.x % tpr; c < C; c += tpr)
      out[row * C + c] = c >= begin && c < end ? x[row * C + c] : U{};
  }
}

void triangle(const Tensor& out, const Tensor& x, int64_t k, bool lower) {
  const int64_t R = out.sizes()[out.dim() - 2], C = out.sizes()[out.dim() - 1];
  if (out.numel() == 0) return;
  const int64_t rows = out.numel() / C;
  const RowLayout layout = row_layout(rows, C);
  dispatch_width(itemsize(x.dtype()), [&]<class U>() {
    triangle_rows<<<layout.blocks, kBlockSize, 0, current_stream()>>>(
        static_cast<U*>(out.data_ptr()), static_cast<const U*>(x.data_ptr()), rows, R, C, k, lower,
        layout.tpr);
    TESSERA_CUDA_CHECK_LAUNCH();
  });
}

TESSERA_REGISTER_KERNEL(index_range_kernel, DeviceType::CUDA, &index_range);
TESSERA_REGISTER_KERNEL(index_select_kernel, DeviceType::CUDA, &index_select);
TESSERA_REGISTER_KERNEL(index_add_kernel, DeviceType::CUDA, &index_add);
TESSERA_REGISTER_KERNEL(mask_positions_kernel, DeviceType::CUDA, &mask_positions);
TESSERA_REGISTER_KERNEL(triangle_kernel, DeviceType::CUDA, &triangle);

}  // namespace
}  // namespace tessera::cuda
