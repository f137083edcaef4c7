// CUDA paged attention (the counterpart of cpu/paged_attention.cpp): writes into the block caches
// and the attention over them, with the layouts of backend/common/paged_attention_kernels.h.
// Every pointer of the arguments (the block tables, query_start and seq_lens included) must be
// device memory. The caches hold float or BFloat16 (cache_dtype; widened on load, rounded to
// nearest even on store), the arithmetic is float either way.
//
// Attention gives each (query row, head) pair to one thread block. The block walks the row's keys
// through the block table in tiles of one key per thread: scores (a thread per key, so each
// key dim of the [D, bs] layout is one coalesced row across a warp), the tile's max, then p v
// with a warp's lanes over 8 keys x 4 dims and its warps over dims, in float with an online
// softmax (the running max rescales the sums), so no score row is kept. The number of query rows is
// only known on the device (query_start[num_seqs]), so the grid is sized to the SMs' thread
// capacity and its blocks stride over the (row, head) pairs; consecutive pairs are the heads of
// one row, so the query heads sharing a KV head (GQA) read its keys from L2.
#include <algorithm>
#include <cstdint>
#include <limits>

#include "backend/common/paged_attention_kernels.h"
#include "backend/cuda/context.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/warp.cuh"
#include "tessera/core/error.h"
#include "tessera/core/half.h"

namespace tessera::cuda {
namespace {

// Threads of an attention block: one warp per 32 dims, at least 4 warps.
constexpr int kMinWarps = 4;
constexpr int kMaxThreads = 512;
constexpr int64_t kMaxHeadDim = kMaxThreads;
// In p v a lane takes key sub-lane lane % 8 and dim sub-lane lane / 8: a warp's load is 4 dims'
// runs of 8 consecutive positions, one 32-byte sector each, and a thread holds D / (4 warps) dims
// (at most 8 accumulators, which keeps the kernel within 64 registers).
constexpr int kKeyLanes = 8;
constexpr int kDimLanes = kWarp / kKeyLanes;

template <class C>
__global__ void caching_kernel(PagedCachingArgs a) {
  const int64_t D = a.head_dim, HD = a.num_kv_heads * D, bs = a.block_size;
  const int64_t total = a.num_tokens * HD;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t n = idx / HD, hd = idx - n * HD;
    const int64_t slot = a.slots[n];
    if (slot < 0) continue;
    // Row d, column slot % bs of head h's [D, bs] keys and values in block slot / bs.
    const int64_t h = hd / D, d = hd - h * D;
    const int64_t dst = (((slot / bs) * a.num_kv_heads + h) * D + d) * bs + slot % bs;
    static_cast<C*>(a.k_cache)[dst] = static_cast<C>(a.k[n * a.k_stride + hd]);
    static_cast<C*>(a.v_cache)[dst] = static_cast<C>(a.v[n * a.v_stride + hd]);
  }
}

void paged_caching(const PagedCachingArgs& a) {
  const int64_t total = a.num_tokens * a.num_kv_heads * a.head_dim;
  if (total == 0) return;
  if (a.cache_dtype == kBFloat16)
    caching_kernel<BFloat16><<<grid_size(total), kBlockSize, 0, current_stream()>>>(a);
  else
    caching_kernel<float><<<grid_size(total), kBlockSize, 0, current_stream()>>>(a);
  TESSERA_CUDA_CHECK_LAUNCH();
}

// Shared memory of a block of T threads: two buffers (alternate tiles, so one barrier less per
// tile) of the tile's cache offsets, probabilities and warp maxima, the query row and the warps'
// partial sums.
struct Smem {
  int64_t* offsets;  // [2][T]
  float* p;          // [2][T]
  float* q;          // [D]
  float* maxima;     // [2][warps]
  float* sums;       // [warps]

  __device__ Smem(unsigned char* base, int T, int64_t D, int warps)
      : offsets(reinterpret_cast<int64_t*>(base)),
        p(reinterpret_cast<float*>(offsets + 2 * T)),
        q(p + 2 * T),
        maxima(q + D),
        sums(maxima + 2 * warps) {}

  static size_t bytes(int T, int64_t D, int warps) {
    return 2 * T * sizeof(int64_t) + (2 * T + D + 3 * warps) * sizeof(float);
  }
};

// Acc: accumulators per thread, a power of 2 >= D / (4 warps). Accumulator i of warp w, dim
// sub-lane dl is dim (i warps + w) 4 + dl. C: the caches' element type.
template <int Acc, class C>
__global__ void __launch_bounds__(kMaxThreads) attention_kernel(PagedAttentionArgs a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int T = blockDim.x, warps = T / kWarp, tid = threadIdx.x;
  const int warp = tid / kWarp, lane = tid % kWarp;
  const int kl = lane % kKeyLanes, dl = lane / kKeyLanes;
  const int64_t Hq = a.num_heads, Hkv = a.num_kv_heads, G = Hq / Hkv, S = a.num_seqs;
  // Positions (int32 seq_lens) and offsets inside one block's [D, bs] rows fit in int.
  const int D = static_cast<int>(a.head_dim), bs = static_cast<int>(a.block_size);
  const int dim0 = warp * kDimLanes + dl, dim_step = warps * kDimLanes;  // accumulator i's dim
  Smem sm(smem_raw, T, D, warps);
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();

  const int64_t items = int64_t{a.query_start[S]} * Hq;
  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const int64_t row = item / Hq, h = item - row * Hq;
    // The row's sequence: the last s with query_start[s] <= row (empty sequences share it).
    int64_t s = 0;
    for (int64_t hi = S - 1; s < hi;) {
      const int64_t mid = (s + hi + 1) / 2;
      if (a.query_start[mid] <= row)
        s = mid;
      else
        hi = mid - 1;
    }
    const int64_t q_begin = a.query_start[s], nq = a.query_start[s + 1] - q_begin;
    // Query row t of the sequence sits at position seq_len - nq + t and sees keys 0..that.
    const int n_keys = static_cast<int>(a.seq_lens[s] - nq + (row - q_begin) + 1);
    const int32_t* table = a.block_tables + s * a.max_blocks;
    const int64_t kv_head = h / G;
    const float* q = a.q + row * a.q_stride + h * D;

    __syncthreads();  // the previous item is done with the shared buffers
    for (int d = tid; d < D; d += T) sm.q[d] = q[d];
    __syncthreads();

    float m = kNegInf;  // running max of the scores so far
    float l = 0.0f;     // this thread's share of sum exp(s - m)
    float acc[Acc];     // this lane's share of sum p v for its dims, scaled like l
#pragma unroll
    for (int i = 0; i < Acc; ++i) acc[i] = 0.0f;

    int buf = 0;
    for (int tile0 = 0; tile0 < n_keys; tile0 += T, buf ^= 1) {
      int64_t* offsets = sm.offsets + buf * T;
      float* p = sm.p + buf * T;
      float* wmax = sm.maxima + buf * warps;
      // Scores, one key per thread; even and odd dims summed apart as on the CPU.
      const int pos = tile0 + tid;
      float score = kNegInf;
      if (pos < n_keys) {
        const int64_t off = (int64_t{table[pos / bs]} * Hkv + kv_head) * D * bs + pos % bs;
        const C* k = static_cast<const C*>(a.k_cache) + off;
        float even = 0.0f, odd = 0.0f;
        int d = 0;
#pragma unroll 4
        for (; d + 2 <= D; d += 2, k += 2 * bs) {
          even = fmaf(sm.q[d], static_cast<float>(k[0]), even);
          odd = fmaf(sm.q[d + 1], static_cast<float>(k[bs]), odd);
        }
        if (d < D) even = fmaf(sm.q[d], static_cast<float>(k[0]), even);
        score = (even + odd) * a.scale;
        offsets[tid] = off;
      }
      const float tile_warp_max = warp_max(score);
      if (lane == 0) wmax[warp] = tile_warp_max;
      __syncthreads();
      float m_new = m;
      for (int w = 0; w < warps; ++w) m_new = fmaxf(m_new, wmax[w]);
      const float alpha = expf(m - m_new);  // 0 on the first tile, where m is -inf
      const float pk = pos < n_keys ? expf(score - m_new) : 0.0f;
      p[tid] = pk;
      l = l * alpha + pk;
#pragma unroll
      for (int i = 0; i < Acc; ++i) acc[i] *= alpha;
      m = m_new;
      __syncthreads();
      // p v over the tile's keys kl, kl + 8, ...
      const int n_tile = min(T, n_keys - tile0);
      for (int j = kl; j < n_tile; j += kKeyLanes) {
        const float pj = p[j];
        const C* v = static_cast<const C*>(a.v_cache) + offsets[j] + dim0 * bs;
#pragma unroll
        for (int i = 0; i < Acc; ++i)
          if (dim0 + i * dim_step < D)
            acc[i] = fmaf(pj, static_cast<float>(v[i * dim_step * bs]), acc[i]);
      }
    }

    // The row's sum, then each dim's sum over the lanes, scaled by its reciprocal as on the CPU.
    const float l_warp = warp_sum(l);
    if (lane == 0) sm.sums[warp] = l_warp;
    __syncthreads();
    float l_total = 0.0f;
    for (int w = 0; w < warps; ++w) l_total += sm.sums[w];
    const float inv_l = 1.0f / l_total;
    float mine = 0.0f;  // key sub-lane i keeps the sum of accumulator i
#pragma unroll
    for (int i = 0; i < Acc; ++i) {
      float total = acc[i];
      for (int o = kKeyLanes / 2; o > 0; o /= 2) total += __shfl_xor_sync(kFullMask, total, o);
      if (kl == i) mine = total;
    }
    const int d = dim0 + kl * dim_step;
    if (kl < Acc && d < D) a.out[row * a.out_stride + h * D + d] = mine * inv_l;
  }
}

template <int Acc>
void launch_attention(const PagedAttentionArgs& a, int threads, size_t smem) {
  const auto kernel =
      a.cache_dtype == kBFloat16 ? &attention_kernel<Acc, BFloat16> : &attention_kernel<Acc, float>;
  const cudaDeviceProp& prop = device_properties();
  // As many threads as the SMs hold (the blocks stride over the (row, head) pairs).
  const unsigned blocks = static_cast<unsigned>(prop.multiProcessorCount *
                                                (prop.maxThreadsPerMultiProcessor / threads));
  kernel<<<blocks, threads, smem, current_stream()>>>(a);
  TESSERA_CUDA_CHECK_LAUNCH();
}

void paged_attention(const PagedAttentionArgs& a) {
  if (a.num_seqs == 0 || a.num_heads == 0) return;
  const int64_t D = a.head_dim;
  TESSERA_CHECK(D >= 1 && D <= kMaxHeadDim, NotImplementedError,
                "[paged_attention] expected a head dim in [1, ", kMaxHeadDim, "] on CUDA, got ", D);
  TESSERA_CHECK(D * a.block_size <= std::numeric_limits<int>::max(), NotImplementedError,
                "[paged_attention] expected head dim x block size to fit in int on CUDA, got ", D,
                " x ", a.block_size);
  const int warps = std::max<int>(kMinWarps, static_cast<int>((D + kWarp - 1) / kWarp));
  const int64_t per_thread = (D + kDimLanes * warps - 1) / (kDimLanes * warps);
  int acc = 1;
  while (acc < per_thread) acc *= 2;
  const int threads = warps * kWarp;
  const size_t smem = Smem::bytes(threads, D, warps);
  switch (acc) {  // at most 8: warps >= D / 32
    case 1:
      return launch_attention<1>(a, threads, smem);
    case 2:
      return launch_attention<2>(a, threads, smem);
    case 4:
      return launch_attention<4>(a, threads, smem);
    default:
      return launch_attention<8>(a, threads, smem);
  }
}

TESSERA_REGISTER_KERNEL(paged_caching_kernel, DeviceType::CUDA, &paged_caching);
TESSERA_REGISTER_KERNEL(paged_attention_kernel, DeviceType::CUDA, &paged_attention);

}  // namespace
}  // namespace tessera::cuda
