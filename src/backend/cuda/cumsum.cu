// CUDA cumsum over [outer, reduce, inner] layouts, with the CPU's accumulator types (double for
// floating values, int64 for integers); what it shares with reduce.cu is in reduce_common.cuh.
//
// Cumsum keeps the reductions' layouts (reduce.cu): a warp or block scans each row in tiles
// (cub), or one thread walks each column in order; when too few lines fill the GPU, chunk totals
// are summed, scanned, and every chunk is rescanned from its prefix (three passes).
#include <cub/block/block_scan.cuh>
#include <cub/warp/warp_scan.cuh>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backend/common/reduce_kernels.h"
#include "backend/cuda/context.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/reduce_common.cuh"
#include "backend/cuda/warp.cuh"

namespace tessera::cuda {
namespace {

constexpr int64_t kMinScanChunk = 8192;     // elements per block of a split row scan
constexpr int64_t kMinScanLineChunk = 64;   // elements per thread of a split column scan
constexpr int64_t kShortScanRow = 16;       // rows up to this long are scanned by one thread
constexpr int64_t kWarpScanRow = 4096;      // rows up to this long are scanned by one warp

// Inclusive sums along r of the lines (o, i) of x [outer, n, inner], one thread per line walking
// chunk c = blockIdx.y in order. With sums, only the chunk's total goes to
// sums[(o * gridDim.y + c) * inner + i]; otherwise the chunk is scanned into y, starting from the
// inclusive total of the chunks before it (prefix, same layout) when given. x may equal y.
template <class T, class A, class O>
__global__ void __launch_bounds__(kBlockSize)
    scan_lines(const T* x, O* y, A* sums, const A* prefix, int64_t outer, int64_t n, int64_t inner,
               int64_t chunk) {
  const int64_t c = blockIdx.y, begin = c * chunk, end = std::min(n, begin + chunk);
  for (int64_t q = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; q < outer * inner;
       q += int64_t{gridDim.x} * blockDim.x) {
    const int64_t o = q / inner, i = q % inner;
    const int64_t base = o * n * inner + i, part = (o * gridDim.y + c) * inner + i;
    A acc = prefix && c > 0 ? prefix[part - inner] : A(0);
    auto step = [&](T v, int64_t r) {
      acc += to_acc<A>(v);
      if (!sums) y[base + r * inner] = cast_out<O>(acc);
    };
    int64_t r = begin;
    for (; r + 3 < end; r += 4) {  // four loads in flight before the stores
      const T v0 = x[base + r * inner], v1 = x[base + (r + 1) * inner],
              v2 = x[base + (r + 2) * inner], v3 = x[base + (r + 3) * inner];
      step(v0, r);
      step(v1, r + 1);
      step(v2, r + 2);
      step(v3, r + 3);
    }
    for (; r < end; ++r) step(x[base + r * inner], r);
    if (sums) sums[part] = acc;
  }
}

// Inclusive sums of the rows of x [rows, n], a group of kGroup threads (a warp or the block) per
// row scanning tiles of kItems elements per thread and carrying the total between tiles. Chunks,
// sums and prefix as in scan_lines, with layout row * gridDim.y + c.
template <class T, class A, class O, int kGroup>
__global__ void __launch_bounds__(kBlockSize)
    scan_rows(const T* x, O* y, A* sums, const A* prefix, int64_t rows, int64_t n, int64_t chunk) {
  constexpr int kItems = 4, kTile = kGroup * kItems, kRowsPerBlock = kBlockSize / kGroup;
  using WarpScan = cub::WarpScan<A>;
  using BlockScan = cub::BlockScan<A, kBlockSize>;
  using Storage = std::conditional_t<kGroup == kWarp, typename WarpScan::TempStorage[kRowsPerBlock],
                                     typename BlockScan::TempStorage>;
  __shared__ Storage storage;
  const int g = threadIdx.x / kGroup, lane = threadIdx.x % kGroup;
  const int64_t c = blockIdx.y, begin = c * chunk, end = std::min(n, begin + chunk);
  for (int64_t row = int64_t{blockIdx.x} * kRowsPerBlock + g; row < rows;
       row += int64_t{gridDim.x} * kRowsPerBlock) {
    const int64_t part = row * gridDim.y + c;
    A carry = prefix && c > 0 ? prefix[part - 1] : A(0);
    const T* xr = x + row * n;
    for (int64_t t0 = begin; t0 < end; t0 += kTile) {
      const int64_t e0 = t0 + int64_t{lane} * kItems;
      A v[kItems];
#pragma unroll
      for (int k = 0; k < kItems; ++k) v[k] = e0 + k < end ? to_acc<A>(xr[e0 + k]) : A(0);
#pragma unroll
      for (int k = 1; k < kItems; ++k) v[k] += v[k - 1];
      A before, total;
      if constexpr (kGroup == kWarp) {
        WarpScan(storage[g]).ExclusiveSum(v[kItems - 1], before, total);
        __syncwarp();
      } else {
        BlockScan(storage).ExclusiveSum(v[kItems - 1], before, total);
        __syncthreads();  // storage is reused by the next tile
      }
      if (!sums) {
        const A offset = carry + before;
#pragma unroll
        for (int k = 0; k < kItems; ++k)
          if (e0 + k < end) y[row * n + e0 + k] = cast_out<O>(offset + v[k]);
      }
      carry += total;
    }
    if (sums && lane == 0) sums[part] = carry;
  }
}

void cumsum(const Tensor& out, const Tensor& in, int64_t outer, int64_t n, int64_t inner) {
  if (outer * n * inner == 0) return;
  dispatch<kNumericTypes>(in.dtype(), "cumsum", [&]<class T>() {
    using A = fn::sum_acc_t<T>;
    const T* x = in.data_ptr<T>();
    T* y = out.data_ptr<T>();
    const cudaStream_t stream = current_stream();
    const int64_t target = wave_blocks();
    Tensor holder;
    if (inner == 1 && n > kShortScanRow) {
      if (n <= kWarpScanRow) {
        scan_rows<T, A, T, kWarp><<<grid_size(outer * kWarp), kBlockSize, 0, stream>>>(
            x, y, nullptr, nullptr, outer, n, n);
        TESSERA_CUDA_CHECK_LAUNCH();
        return;
      }
      const int64_t chunks =
          outer < target ? std::min({ceil_div(target, outer), n / kMinScanChunk, kMaxSplits}) : 1;
      if (chunks <= 1) {
        scan_rows<T, A, T, kBlockSize><<<grid_size(outer, 1), kBlockSize, 0, stream>>>(
            x, y, nullptr, nullptr, outer, n, n);
        TESSERA_CUDA_CHECK_LAUNCH();
        return;
      }
      const int64_t chunk = ceil_div(n, chunks), used = ceil_div(n, chunk);
      A* ws = workspace<A>(holder, outer * used, in.device());
      const dim3 grid(grid_size(outer, 1), static_cast<unsigned>(used));
      scan_rows<T, A, T, kBlockSize><<<grid, kBlockSize, 0, stream>>>(x, y, ws, nullptr, outer, n,
                                                                     chunk);
      TESSERA_CUDA_CHECK_LAUNCH();
      scan_lines<A, A, A><<<grid_size(outer), kBlockSize, 0, stream>>>(ws, ws, nullptr, nullptr,
                                                                      outer, used, 1, used);
      TESSERA_CUDA_CHECK_LAUNCH();
      scan_rows<T, A, T, kBlockSize><<<grid, kBlockSize, 0, stream>>>(x, y, nullptr, ws, outer, n,
                                                                     chunk);
      TESSERA_CUDA_CHECK_LAUNCH();
      return;
    }
    const int64_t lines = outer * inner, line_blocks = ceil_div(lines, kBlockSize);
    const int64_t chunks =
        line_blocks < target
            ? std::min({ceil_div(target, line_blocks), n / kMinScanLineChunk, kMaxSplits})
            : 1;
    if (chunks <= 1) {
      scan_lines<T, A, T><<<grid_size(lines), kBlockSize, 0, stream>>>(x, y, nullptr, nullptr,
                                                                      outer, n, inner, n);
      TESSERA_CUDA_CHECK_LAUNCH();
      return;
    }
    const int64_t chunk = ceil_div(n, chunks), used = ceil_div(n, chunk);
    A* ws = workspace<A>(holder, lines * used, in.device());
    const dim3 grid(grid_size(lines), static_cast<unsigned>(used));
    scan_lines<T, A, T><<<grid, kBlockSize, 0, stream>>>(x, y, ws, nullptr, outer, n, inner, chunk);
    TESSERA_CUDA_CHECK_LAUNCH();
    scan_lines<A, A, A><<<grid_size(lines), kBlockSize, 0, stream>>>(ws, ws, nullptr, nullptr,
                                                                    outer, used, inner, used);
    TESSERA_CUDA_CHECK_LAUNCH();
    scan_lines<T, A, T><<<grid, kBlockSize, 0, stream>>>(x, y, nullptr, ws, outer, n, inner, chunk);
    TESSERA_CUDA_CHECK_LAUNCH();
  });
}

TESSERA_REGISTER_KERNEL(cumsum_kernel, DeviceType::CUDA, &cumsum);

}  // namespace
}  // namespace tessera::cuda
