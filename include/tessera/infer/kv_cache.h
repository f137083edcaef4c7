#pragma once
// Key/value caches for inference. Both keep, per layer, keys and values as float32 or bfloat16
// (KVCacheSpec::dtype; bfloat16 halves the memory and the bytes attention reads per token)
// [num_blocks, Hkv, D, bs] (transposed within a block: one row of positions per dim; see
// backend/common/paged_attention_kernels.h), so one attention kernel reads either:
//
//  - PagedKVCache: a pool of fixed-size blocks shared by all running sequences. A BlockManager
//    hands out blocks from a free list with reference counts; each sequence owns a block table
//    (block of positions [i bs, (i + 1) bs) = table[i]) that grows one block at a time without
//    copying. On the CPU the pool is reserved up front but only blocks that are written are
//    backed by memory (the OS commits pages on first touch, and freed blocks are reused first);
//    on a CUDA device it is allocated whole.
//  - StaticKVCache: one sequence's keys and values in a single block of `capacity` positions,
//    for single-stream generation (no block bookkeeping).
//
//    With prefix caching, a block whose positions are all computed is registered under a hash
//    of its tokens and of every token before it (a chain over the blocks); a new sequence whose
//    tokens start the same way takes those blocks instead of computing them again. A cached
//    block whose last owner released it stays findable until it is needed: free blocks never
//    cached are handed out first, then cached ones, least recently released first (vLLM's
//    automatic prefix caching).
//
//   infer::PagedKVCache cache({n_layers, n_kv_heads, head_dim}, /*num_blocks=*/256, 16);
//   infer::BlockTable table;
//   if (!cache.reserve(table, 40)) { /* out of blocks: preempt someone */ }
//   int64_t slot = cache.slot(table, 39);  // where position 39's K/V go
//   cache.release(table);
#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::infer {

// What one token stores per layer: n_kv_heads * head_dim keys and as many values, of dtype
// (float32 or bfloat16: the model computes in float32, and a bfloat16 cache rounds what it
// stores to nearest even).
struct KVCacheSpec {
  int64_t num_layers = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  DType dtype = kFloat32;

  // What one token's keys and values take in either cache (every layer).
  int64_t bytes_per_token() const {
    return 2 * num_layers * num_kv_heads * head_dim * static_cast<int64_t>(itemsize(dtype));
  }
};

// Blocks of a sequence, in position order.
using BlockTable = std::vector<int32_t>;

// The prefix-cache root of the blocks a LoRA adapter computes (0 for the base model, lora_id 0).
uint64_t prefix_root(int32_t lora_id);

// What a cached block holds: the keys and values of `tokens` after the tokens that chain to
// `parent` (0 for the first block). hash covers both; lookups compare all three.
struct BlockKey {
  uint64_t hash = 0;
  uint64_t parent = 0;
  std::vector<int32_t> tokens;
};

// Free list and reference counts of num_blocks cache blocks, and the prefix cache's index of
// blocks by content. Freed blocks that were never cached are reused first (last in, first out),
// so the memory a server touches stays as small as its peak load; freed cached blocks wait,
// findable, until those run out.
class BlockManager {
 public:
  explicit BlockManager(int64_t num_blocks);
  // A free block with reference count 1 (a never-cached one, else the least recently released
  // cached one, whose entry is dropped), or nullopt when every block is in use.
  std::optional<int32_t> allocate();
  // Another owner of an allocated block (e.g. a forked sequence sharing a prefix).
  void share(int32_t block);
  // Drops one reference; at zero the block is free again (a cached one stays findable).
  void release(int32_t block);
  int32_t ref_count(int32_t block) const;
  int64_t num_blocks() const { return static_cast<int64_t>(refs_.size()); }
  // Blocks allocate() can hand out: never used, released, or cached and released.
  int64_t num_free() const { return static_cast<int64_t>(free_.size() + evictable_.size()); }
  int64_t num_used() const { return num_blocks() - num_free(); }

  // Registers an allocated block as holding key; no-op when another block holds it already.
  void cache(int32_t block, BlockKey key);
  // The block holding key (allocated or free), or nullopt.
  std::optional<int32_t> find(const BlockKey& key) const;
  // A reference to a block find() returned: a free one leaves the free pool.
  void acquire(int32_t block);
  int64_t num_cached() const { return static_cast<int64_t>(by_hash_.size()); }

 private:
  void check_block(int32_t block, const char* op) const;
  std::vector<int32_t> free_;     // never-cached free blocks: a stack
  std::list<int32_t> evictable_;  // cached free blocks, least recently released first
  std::vector<std::list<int32_t>::iterator> evictable_at_;  // per block, valid while in it
  std::vector<int32_t> refs_;
  std::vector<std::optional<BlockKey>> keys_;  // per block
  std::unordered_map<uint64_t, int32_t> by_hash_;
};

// Blocks of a prefix already in the cache (PagedKVCache::match_prefix).
struct PrefixMatch {
  std::vector<int32_t> blocks;
  std::vector<uint64_t> hashes;  // each block's chain hash
  int64_t num_free = 0;          // of those blocks, the free ones (taking them uses free blocks)
  uint64_t next_hash = 0;        // chain hash of the first full block not found (0: none looked up)
};

// Storage shared by both caches: per-layer key and value blocks, on one device (the model
// runner's: its forward runs there).
class KVCache {
 public:
  const KVCacheSpec& spec() const { return spec_; }
  Device device() const { return keys_.device(); }
  int64_t block_size() const { return block_size_; }
  int64_t num_blocks() const { return num_blocks_; }
  // Views of one layer's storage: keys and values [num_blocks, Hkv, D, bs].
  Tensor key_cache(int64_t layer) const;
  Tensor value_cache(int64_t layer) const;
  // Raw pointers to the same storage (of spec().dtype; device memory for a cache on a CUDA
  // device).
  void* key_data(int64_t layer) const;
  void* value_data(int64_t layer) const;

 protected:
  // ValueError unless the spec's sizes are positive and block_size is a positive multiple of
  // kAttentionKeyChunk (16); TypeError unless its dtype is float32 or bfloat16.
  KVCache(const KVCacheSpec& spec, int64_t num_blocks, int64_t block_size, Device device,
          const char* op);

 private:
  KVCacheSpec spec_;
  int64_t num_blocks_, block_size_;
  Tensor keys_, values_;  // [L, num_blocks, ...] uninitialised: pages are committed on first write
};

class PagedKVCache : public KVCache {
 public:
  // block_size must be a multiple of 16.
  PagedKVCache(const KVCacheSpec& spec, int64_t num_blocks, int64_t block_size = 16,
               Device device = kCPU);
  BlockManager& blocks() { return blocks_; }
  const BlockManager& blocks() const { return blocks_; }
  // Blocks needed to hold num_tokens positions.
  int64_t blocks_for(int64_t num_tokens) const;
  // Appends blocks to table until it covers num_tokens positions. All or nothing: returns false,
  // leaving table as it was, when the free list runs out.
  bool reserve(BlockTable& table, int64_t num_tokens);
  // Releases every block of table, the last first, and clears it.
  void release(BlockTable& table);
  // The slot (block * block_size + offset) of position pos; IndexError beyond the table.
  int64_t slot(const BlockTable& table, int64_t pos) const;

  // ---- prefix caching ----
  // The cached blocks that hold the first full blocks of tokens, at most max_blocks of them.
  // root is the first block's parent: 0, or what sets apart caches of other weights (a LoRA
  // adapter's prefix_root), whose blocks hold other keys and values for the same tokens.
  PrefixMatch match_prefix(std::span<const int32_t> tokens, int64_t max_blocks,
                           uint64_t root = 0) const;
  // Takes a reference to each matched block and makes them table's first blocks (table empty).
  void take_prefix(BlockTable& table, const PrefixMatch& match);
  // Registers the full blocks of table within the first num_computed tokens that hashes (their
  // chain hashes, in order) does not cover yet, and appends their hashes; root as match_prefix.
  void cache_full_blocks(const BlockTable& table, std::span<const int32_t> tokens,
                         int64_t num_computed, std::vector<uint64_t>& hashes, uint64_t root = 0);

 private:
  BlockManager blocks_;
};

class StaticKVCache : public KVCache {
 public:
  // Room for capacity positions (rounded up to a multiple of 16).
  StaticKVCache(const KVCacheSpec& spec, int64_t capacity, Device device = kCPU);
  int64_t capacity() const { return block_size(); }
  // The single block's table, {0}.
  const BlockTable& table() const { return table_; }

 private:
  BlockTable table_{0};
};

}  // namespace tessera::infer
