#pragma once
// Attention over a paged KV cache (float32 queries, keys and values; float32 or bfloat16 caches,
// which the kernels widen to float32 on reading; on the CPU or a CUDA device: every tensor of a
// call on one device), for batches that mix prefill and decode: the query tokens of all sequences
// are flattened into rows, and each sequence reads its cached keys and values through its block
// table. Cache layouts are those of infer::KVCache (keys and values [num_blocks, Hkv, D, bs]).
//
//   infer::paged_caching(k, v, cache.key_cache(l), cache.value_cache(l), slots);
//   Tensor y = infer::paged_attention(q, cache.key_cache(l), cache.value_cache(l), tables,
//                                     seq_lens, query_start);
#include <optional>

#include "tessera/core/tensor.h"

namespace tessera::infer {

// Writes k and v [N, Hkv, D] into the caches at slot_mapping [N] int64 (slot = block *
// block_size + offset; -1 skips the token). The caches are written in place (a bfloat16 cache
// gets k and v rounded to nearest even).
void paged_caching(const Tensor& k, const Tensor& v, const Tensor& k_cache, const Tensor& v_cache,
                   const Tensor& slot_mapping);

// Causal attention of q [N, Hq, D] over cached keys: sequence s owns rows
// query_start[s]..query_start[s+1] (int32 [S + 1], non-decreasing from 0 to N), which are its
// last positions up to seq_lens[s] - 1 (int32 [S]); a row at position p attends to positions
// 0..p of its sequence, read through block_tables [S, max_blocks] int32. Query head h reads KV
// head h / (Hq / Hkv) (GQA). scale defaults to 1 / sqrt(D). Returns [N, Hq, D]. Decode is the
// case of one row per sequence, prefill of seq_lens[s] rows.
Tensor paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                       const Tensor& block_tables, const Tensor& seq_lens,
                       const Tensor& query_start, std::optional<double> scale = std::nullopt);

// The argument checks of the two calls above for any floating dtype (caches, q, k and v of one
// dtype), with errors naming op: the InfiniCore-style public ops (tessera/ops/paged_attention.h)
// validate through them before taking the kernel or their composite path.
void check_paged_caching(const char* op, const Tensor& k, const Tensor& v, const Tensor& k_cache,
                         const Tensor& v_cache, const Tensor& slot_mapping);
void check_paged_attention(const char* op, const Tensor& q, const Tensor& k_cache,
                           const Tensor& v_cache, const Tensor& block_tables,
                           const Tensor& seq_lens, const Tensor& query_start);

}  // namespace tessera::infer
