#pragma once
// InfiniCore's attention ops over KV caches (infinicore.ops.paged_caching, paged_attention,
// paged_attention_prefill, attention), forward only. The paged ones use the inference engine's
// cache layout and, for float32 and bfloat16 without ALiBi, the engine's kernel
// (infer/attention.h); other floating dtypes and ALiBi take a composite of public ops (gather
// the blocks, q k^T, bias, causal_softmax, p v) computed in float32 (float64 stays float64).
//
// Paged cache layout (both keys and values, vLLM's value-cache layout):
//   [num_blocks, Hkv, D, block_size], block_size a multiple of 16, contiguous;
//   position p of a sequence lives in block table[p / block_size] at offset p % block_size,
//   its flat slot being table[p / block_size] * block_size + p % block_size.
#include <optional>

#include "tessera/core/tensor.h"

namespace tessera {

// Writes k and v [N, Hkv, D] into the paged caches at slot_mapping [N] (int64 or int32; -1 skips
// a token), in place. k, v and the caches share one floating dtype.
void paged_caching(const Tensor& k, const Tensor& v, const Tensor& k_cache, const Tensor& v_cache,
                   const Tensor& slot_mapping);

// Decode attention: q [S, Hq, D] holds each sequence's newest token, at position seq_lens[s] - 1
// (its key and value already cached); it attends to positions 0..seq_lens[s] - 1 read through
// block_tables [S, max_blocks] (int32 or int64). Query head h reads KV head h / (Hq / Hkv).
// scale defaults to 1 / sqrt(D); alibi_slopes [Hq] adds slope_h * (j - p) to the score of key j
// for the query at position p. Returns [S, Hq, D].
Tensor paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                       const Tensor& block_tables, const Tensor& seq_lens,
                       std::optional<double> scale = std::nullopt,
                       const std::optional<Tensor>& alibi_slopes = std::nullopt);

// Prefill of packed query chunks: q [total_q, Hq, D], sequence s owning rows
// cu_seqlens_q[s]..cu_seqlens_q[s + 1] (cu_seqlens_q [S + 1] from 0 to total_q). Its queries are
// the positions after its history_lens[s] cached ones (their keys and values cached too), each
// attending causally to positions 0..p (the mask aligned bottom-right). Otherwise as
// paged_attention. Returns [total_q, Hq, D].
Tensor paged_attention_prefill(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                               const Tensor& block_tables, const Tensor& history_lens,
                               const Tensor& cu_seqlens_q,
                               std::optional<double> scale = std::nullopt,
                               const std::optional<Tensor>& alibi_slopes = std::nullopt);

// Attention with a contiguous KV cache (InfiniCore's attention): writes k and v [Hkv, T, D] into
// k_cache and v_cache [Hkv, capacity, D] at positions pos..pos + T - 1 (in place), then q
// [Hq, T, D] attends causally over cache positions 0..pos + T - 1 with scale 1 / sqrt(D).
// Returns [T, Hq, D].
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k_cache,
                 const Tensor& v_cache, int64_t pos);

}  // namespace tessera
