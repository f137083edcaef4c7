"""InfiniCore's KV-cache attention ops (infinicore.ops names and argument order).

Paged caches hold keys and values as [num_blocks, num_kv_heads, head_dim, block_size] (vLLM's
value-cache layout, the inference engine's own; block_size a multiple of 16): position p of a
sequence is in block block_tables[s, p // block_size] at offset p % block_size, flat slot
block * block_size + offset. The ops are forward only (no autograd) and write caches in place.

- paged_caching(k, v, k_cache, v_cache, slot_mapping) -> (k_cache, v_cache)
- paged_attention(q, k_cache, v_cache, block_tables, seq_lens, alibi_slopes=None, scale=None)
- paged_attention_prefill(q, k_cache, v_cache, block_tables, history_lens, cu_seqlens_q,
  alibi_slopes=None, scale=None)
- attention(q, k, v, k_cache, v_cache, pos): contiguous caches [num_kv_heads, capacity, head_dim]

scale=None means 1 / sqrt(head_dim) (infinicore defaults to 1.0: pass it explicitly to match).
float32 without ALiBi runs the engine's multithreaded kernel; other floating dtypes and ALiBi run a
composite computed in float32 (float64 in float64).
"""
from ._C._ops import (  # noqa: F401
    attention,
    paged_attention,
    paged_attention_prefill,
    paged_caching,
)

__all__ = ["attention", "paged_attention", "paged_attention_prefill", "paged_caching"]
