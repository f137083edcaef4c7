// CUDA embedding_backward (index_kernels.h): the gradient of an embedding lookup summed per
// vocabulary row without atomics. index_add's atomics serialise on repeated rows: a training
// batch repeats frequent tokens hundreds of times (byte-level data has ~65 distinct ids in 8k
// tokens), and every repeat of a row contends for the same addresses. Here the positions are
// sorted by id (cub radix sort on the id's significant bits), the sorted ids run-length encoded,
// and each run summed by one block per 32-column tile: every output row is written by exactly
// one block, in a fixed order, so the result is also deterministic (index_add's is not).
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_run_length_encode.cuh>
#include <cub/device/device_scan.cuh>

#include <algorithm>
#include <bit>
#include <cstdint>

#include "backend/common/index_kernels.h"
#include "backend/cuda/context.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/index_common.cuh"
#include "tessera/core/dtype_dispatch.h"
#include "tessera/ops/creation.h"

namespace tessera::cuda {
namespace {

// keys[i] = index[i] as an unsigned sort key, positions[i] = i.
template <class I>
__global__ void __launch_bounds__(kBlockSize)
    fill_sort_input(const I* __restrict__ index, int64_t m, uint32_t* __restrict__ keys,
                    int32_t* __restrict__ positions) {
  for (int64_t i = blockIdx.x * int64_t{kBlockSize} + threadIdx.x; i < m;
       i += int64_t{gridDim.x} * kBlockSize) {
    keys[i] = static_cast<uint32_t>(index[i]);
    positions[i] = static_cast<int32_t>(i);
  }
}

constexpr int kTileColumns = 32;  // one warp's columns: a row's tile is one coalesced read
constexpr int kRowLanes = 16;     // rows a block sums at once, reduced through shared memory

// out[ids[r], c] += sum of grad[positions[j], c] over j in run r, for runs r < *num_runs,
// skipping the run of id `skip`. Block (x, y): runs x, x + gridDim.x, ... and the columns of
// tile y; thread (tx, ty) sums rows ty, ty + kRowLanes, ... of the run for column tx.
template <class T>
__global__ void __launch_bounds__(kTileColumns* kRowLanes)
    sum_runs(T* __restrict__ out, const T* __restrict__ grad, int64_t C,
             const uint32_t* __restrict__ ids, const int32_t* __restrict__ starts,
             const int32_t* __restrict__ lengths, const int32_t* __restrict__ num_runs,
             const int32_t* __restrict__ positions, int64_t skip) {
  using A = opmath_t<T>;
  __shared__ A partial[kRowLanes][kTileColumns];
  const int tx = threadIdx.x % kTileColumns, ty = threadIdx.x / kTileColumns;
  const int64_t c = int64_t{blockIdx.y} * kTileColumns + tx;
  const int32_t runs = *num_runs;
  for (int32_t r = blockIdx.x; r < runs; r += gridDim.x) {
    const int64_t id = ids[r];
    if (id == skip) continue;  // the same for the whole block: no divergence at the barriers
    A acc = 0;
    if (c < C) {
      const int32_t* run = positions + starts[r];
      const int32_t length = lengths[r];
#pragma unroll 4
      for (int32_t j = ty; j < length; j += kRowLanes)
        acc += static_cast<A>(grad[int64_t{run[j]} * C + c]);
    }
    partial[ty][tx] = acc;
    __syncthreads();
    if (ty == 0 && c < C) {
      A total = partial[0][tx];
#pragma unroll
      for (int k = 1; k < kRowLanes; ++k) total += partial[k][tx];
      T* o = out + id * C + c;
      *o = static_cast<T>(static_cast<A>(*o) + total);
    }
    __syncthreads();  // partial is reused by the next run
  }
}

// Bytes rounded up so each temporary starts 256-byte aligned.
constexpr size_t aligned(size_t bytes) { return (bytes + 255) / 256 * 256; }

void embedding_backward(const Tensor& out, const Tensor& grad, const Tensor& index, int64_t skip) {
  const int64_t m = index.numel(), V = out.size(0), C = out.size(1);
  if (m == 0 || C == 0) return;
  TESSERA_CHECK(m <= INT32_MAX && V <= INT32_MAX && C <= int64_t{65535} * kTileColumns, ValueError,
                "[embedding_backward] expected fewer than 2^31 indices and rows and at most ",
                int64_t{65535} * kTileColumns, " columns, got ", m, " indices and [", V, ", ", C,
                "]");
  const cudaStream_t stream = current_stream();
  const int end_bit = std::max(1, static_cast<int>(std::bit_width(static_cast<uint64_t>(V - 1))));
  const auto n = static_cast<int>(m);

  // Scratch: keys and positions (unsorted and sorted), run ids, lengths, starts, the run count
  // and cub's temporary storage, in one allocation from the caching allocator.
  size_t sort_bytes = 0, encode_bytes = 0, scan_bytes = 0;
  TESSERA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, sort_bytes, static_cast<uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr),
      static_cast<int32_t*>(nullptr), static_cast<int32_t*>(nullptr), n, 0, end_bit, stream));
  TESSERA_CUDA_CHECK(cub::DeviceRunLengthEncode::Encode(
      nullptr, encode_bytes, static_cast<uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr),
      static_cast<int32_t*>(nullptr), static_cast<int32_t*>(nullptr), n, stream));
  TESSERA_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, scan_bytes,
                                                   static_cast<int32_t*>(nullptr),
                                                   static_cast<int32_t*>(nullptr), n, stream));
  const size_t array = aligned(sizeof(int32_t) * static_cast<size_t>(m));
  const size_t cub_bytes = std::max({sort_bytes, encode_bytes, scan_bytes});
  Tensor scratch = empty({static_cast<int64_t>(7 * array + aligned(sizeof(int32_t)) + cub_bytes)},
                         TensorOptions(kUInt8).with_device(out.device()));
  auto* base = static_cast<unsigned char*>(scratch.data_ptr());
  auto take = [&base](size_t bytes) {
    unsigned char* p = base;
    base += bytes;
    return p;
  };
  auto* keys = reinterpret_cast<uint32_t*>(take(array));
  auto* sorted_keys = reinterpret_cast<uint32_t*>(take(array));
  auto* positions = reinterpret_cast<int32_t*>(take(array));
  auto* sorted_positions = reinterpret_cast<int32_t*>(take(array));
  auto* ids = reinterpret_cast<uint32_t*>(take(array));
  auto* lengths = reinterpret_cast<int32_t*>(take(array));
  auto* starts = reinterpret_cast<int32_t*>(take(array));
  auto* num_runs = reinterpret_cast<int32_t*>(take(aligned(sizeof(int32_t))));
  void* cub_temp = take(cub_bytes);

  // Lengths past the run count are never written by the encoder: zero them so the scan reads
  // defined values (the starts of those runs are never used).
  TESSERA_CUDA_CHECK(cudaMemsetAsync(lengths, 0, array, stream));
  dispatch_index(index, [&]<class I>() {
    fill_sort_input<<<grid_size(m), kBlockSize, 0, stream>>>(index.data_ptr<I>(), m, keys,
                                                             positions);
    TESSERA_CUDA_CHECK_LAUNCH();
  });
  size_t bytes = sort_bytes;
  TESSERA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(cub_temp, bytes, keys, sorted_keys, positions,
                                                     sorted_positions, n, 0, end_bit, stream));
  bytes = encode_bytes;
  TESSERA_CUDA_CHECK(cub::DeviceRunLengthEncode::Encode(cub_temp, bytes, sorted_keys, ids, lengths,
                                                        num_runs, n, stream));
  bytes = scan_bytes;
  TESSERA_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(cub_temp, bytes, lengths, starts, n, stream));

  // At most min(m, V) runs; a grid-stride loop covers them without reading the count on the host.
  const int64_t max_runs = std::min(m, V);
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(
                      max_runs, int64_t{device_properties().multiProcessorCount} * 8)),
                  static_cast<unsigned>((C + kTileColumns - 1) / kTileColumns));
  dispatch<kFloatingTypes>(out.dtype(), "embedding_backward", [&]<class T>() {
    sum_runs<T><<<grid, kTileColumns * kRowLanes, 0, stream>>>(
        out.data_ptr<T>(), grad.data_ptr<T>(), C, ids, starts, lengths, num_runs, sorted_positions,
        skip);
    TESSERA_CUDA_CHECK_LAUNCH();
  });
}

TESSERA_REGISTER_KERNEL(embedding_backward_kernel, DeviceType::CUDA, &embedding_backward);

}  // namespace
}  // namespace tessera::cuda
