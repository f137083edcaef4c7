#pragma once
// Kernel keys for the inference attention family: paged_caching writes new keys/values into
// their cache slots, paged_attention attends a flattened batch of query tokens over the cached
// keys through per-sequence block tables. The arguments are raw float32 views (validated by the
// public ops in tessera/infer/attention.h, or built directly by the engine's model runner, which
// calls these once per layer per step and must not allocate). The caches hold float32 or
// bfloat16 (cache_dtype): paged_caching rounds the float32 keys and values into a bfloat16 cache
// (to nearest even), and paged_attention widens them back exactly, computing in float32 either
// way.
//
// Cache layout per layer, block b, KV head h (Hkv heads, block size bs, head dim D):
//   keys   [num_blocks, Hkv, D, bs]  transposed, so the scores of a run of keys are one SIMD
//                                    row per dim: s[j..j+16] += q[d] * K[d][j..j+16]
//   values [num_blocks, Hkv, D, bs]  likewise: o[d] lanes j..j+16 += p[j..j+16] * V[d][j..j+16],
//                                    folded once per row (no per-key broadcast of p)
// A token at position p of a sequence lives in block table[p / bs] at offset p % bs ("slot"
// block * bs + offset).
#include <cstdint>

#include "tessera/core/dispatcher.h"
#include "tessera/core/dtype.h"

namespace tessera {

// Keys are visited in chunks of this many positions (by absolute position), one SIMD row of
// scores each. Block sizes are multiples of it, so a query's arithmetic is the same whatever the
// block size, the cache kind, or the other queries in the batch.
inline constexpr int64_t kAttentionKeyChunk = 16;

struct PagedCachingArgs {
  // Token n's head h: k + n * k_stride + h * D (likewise v); the fused QKV rows of the runner.
  const float* k = nullptr;
  const float* v = nullptr;
  int64_t k_stride = 0, v_stride = 0;
  void* k_cache = nullptr;         // [num_blocks, Hkv, D, bs] of cache_dtype
  void* v_cache = nullptr;         // [num_blocks, Hkv, D, bs] of cache_dtype
  DType cache_dtype = kFloat32;    // float32 or bfloat16
  const int64_t* slots = nullptr;  // [num_tokens]; -1 skips the token
  int64_t num_tokens = 0, num_kv_heads = 0, head_dim = 0, block_size = 0;
};

struct PagedAttentionArgs {
  // Query row n (the tokens of all sequences, flattened), head h: q + n * q_stride + h * D;
  // output likewise at out + n * out_stride + h * D.
  const float* q = nullptr;
  float* out = nullptr;
  int64_t q_stride = 0, out_stride = 0;
  const void* k_cache = nullptr;  // of cache_dtype, as PagedCachingArgs
  const void* v_cache = nullptr;
  DType cache_dtype = kFloat32;
  // Sequence s: block_tables[s * max_blocks + i] is the block of positions [i bs, (i + 1) bs).
  const int32_t* block_tables = nullptr;
  int64_t max_blocks = 0;
  // Sequence s owns query rows [query_start[s], query_start[s + 1]): its last positions up to
  // seq_lens[s] - 1, each attending causally to positions 0..p (already cached).
  const int32_t* query_start = nullptr;  // [num_seqs + 1]
  const int32_t* seq_lens = nullptr;     // [num_seqs]
  int64_t num_seqs = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0, block_size = 0;
  float scale = 1.0f;
};

TESSERA_DECLARE_KERNEL(paged_caching_kernel, void(const PagedCachingArgs& args));
// out = softmax(q k^T * scale, causal) v per query row, query head h reading KV head
// h / (Hq / Hkv) (GQA). Each query row walks its keys twice (scores and their max, then exp,
// sum and p v) holding only its own T scores, so no [T, T] score matrix is formed.
TESSERA_DECLARE_KERNEL(paged_attention_kernel, void(const PagedAttentionArgs& args));

}  // namespace tessera
