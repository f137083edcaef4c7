#pragma once
// Key/value caches for inference. Both keep, per layer, keys and values as float32
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
//   infer::PagedKVCache cache({n_layers, n_kv_heads, head_dim}, /*num_blocks=*/256, 16);
//   infer::BlockTable table;
//   if (!cache.reserve(table, 40)) { /* out of blocks: preempt someone */ }
//   int64_t slot = cache.slot(table, 39);  // where position 39's K/V go
//   cache.release(table);
#include <cstdint>
#include <optional>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::infer {

// What one token stores per layer: n_kv_heads * head_dim keys and as many values.
struct KVCacheSpec {
  int64_t num_layers = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;

  // What one token's keys and values take in either cache (float32, every layer).
  int64_t bytes_per_token() const {
    return 2 * num_layers * num_kv_heads * head_dim * static_cast<int64_t>(sizeof(float));
  }
};

// Blocks of a sequence, in position order.
using BlockTable = std::vector<int32_t>;

// Free list and reference counts of num_blocks cache blocks. Freed blocks are reused first (last
// in, first out), so the memory a server touches stays as small as its peak load.
class BlockManager {
 public:
  explicit BlockManager(int64_t num_blocks);
  // A free block with reference count 1, or nullopt when every block is in use.
  std::optional<int32_t> allocate();
  // Another owner of an allocated block (e.g. a forked sequence sharing a prefix).
  void share(int32_t block);
  // Drops one reference; at zero the block returns to the free list.
  void release(int32_t block);
  int32_t ref_count(int32_t block) const;
  int64_t num_blocks() const { return static_cast<int64_t>(refs_.size()); }
  int64_t num_free() const { return static_cast<int64_t>(free_.size()); }
  int64_t num_used() const { return num_blocks() - num_free(); }

 private:
  void check_block(int32_t block, const char* op) const;
  std::vector<int32_t> free_;  // a stack
  std::vector<int32_t> refs_;
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
  // Raw pointers to the same storage (device memory for a cache on a CUDA device).
  float* key_data(int64_t layer) const;
  float* value_data(int64_t layer) const;

 protected:
  // ValueError unless the spec's sizes are positive and block_size is a positive multiple of
  // kAttentionKeyChunk (16).
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
  // Releases every block of table and clears it.
  void release(BlockTable& table);
  // The slot (block * block_size + offset) of position pos; IndexError beyond the table.
  int64_t slot(const BlockTable& table, int64_t pos) const;

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
