#include "tessera/infer/kv_cache.h"

#include <algorithm>
#include <climits>

#include "backend/common/paged_attention_kernels.h"
#include "tessera/ops/creation.h"

namespace tessera::infer {

BlockManager::BlockManager(int64_t num_blocks) {
  TESSERA_CHECK(num_blocks > 0 && num_blocks <= INT32_MAX, ValueError,
                "[BlockManager] expected a positive number of blocks, got ", num_blocks);
  refs_.assign(num_blocks, 0);
  // Reversed so blocks come out 0, 1, 2, ...
  free_.reserve(num_blocks);
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

std::optional<int32_t> BlockManager::allocate() {
  if (free_.empty()) return std::nullopt;
  const int32_t b = free_.back();
  free_.pop_back();
  refs_[b] = 1;
  return b;
}

void BlockManager::check_block(int32_t block, const char* op) const {
  TESSERA_CHECK(block >= 0 && block < num_blocks() && refs_[block] > 0, ValueError, "[", op,
                "] expected an allocated block in [0, ", num_blocks(), "), got ", block);
}

void BlockManager::share(int32_t block) {
  check_block(block, "BlockManager.share");
  ++refs_[block];
}

void BlockManager::release(int32_t block) {
  check_block(block, "BlockManager.release");
  if (--refs_[block] == 0) free_.push_back(block);
}

int32_t BlockManager::ref_count(int32_t block) const {
  TESSERA_CHECK(block >= 0 && block < num_blocks(), IndexError,
                "[BlockManager.ref_count] expected a block in [0, ", num_blocks(), "), got ",
                block);
  return refs_[block];
}

KVCache::KVCache(const KVCacheSpec& spec, int64_t num_blocks, int64_t block_size, Device device,
                 const char* op)
    : spec_(spec), num_blocks_(num_blocks), block_size_(block_size) {
  TESSERA_CHECK(spec.num_layers > 0 && spec.num_kv_heads > 0 && spec.head_dim > 0, ValueError, "[",
                op, "] expected positive layers, KV heads and head dim, got ", spec.num_layers,
                ", ", spec.num_kv_heads, ", ", spec.head_dim);
  TESSERA_CHECK(block_size > 0 && block_size % kAttentionKeyChunk == 0, ValueError, "[", op,
                "] expected a block size that is a positive multiple of ", kAttentionKeyChunk,
                ", got ", block_size);
  TESSERA_CHECK(num_blocks > 0, ValueError, "[", op, "] expected at least one block, got ",
                num_blocks);
  const Shape shape{spec.num_layers, num_blocks, spec.num_kv_heads, spec.head_dim, block_size};
  keys_ = empty(shape, TensorOptions(kFloat32).with_device(device));
  values_ = empty(shape, TensorOptions(kFloat32).with_device(device));
}

Tensor KVCache::key_cache(int64_t layer) const { return keys_.select(0, layer); }
Tensor KVCache::value_cache(int64_t layer) const { return values_.select(0, layer); }

float* KVCache::key_data(int64_t layer) const {
  TESSERA_ASSERT(layer >= 0 && layer < spec_.num_layers, "layer ", layer);
  return keys_.data_ptr<float>() + layer * keys_.stride(0);
}

float* KVCache::value_data(int64_t layer) const {
  TESSERA_ASSERT(layer >= 0 && layer < spec_.num_layers, "layer ", layer);
  return values_.data_ptr<float>() + layer * values_.stride(0);
}

PagedKVCache::PagedKVCache(const KVCacheSpec& spec, int64_t num_blocks, int64_t block_size,
                           Device device)
    : KVCache(spec, num_blocks, block_size, device, "PagedKVCache"), blocks_(num_blocks) {}

int64_t PagedKVCache::blocks_for(int64_t num_tokens) const {
  return (num_tokens + block_size() - 1) / block_size();
}

bool PagedKVCache::reserve(BlockTable& table, int64_t num_tokens) {
  const int64_t need = blocks_for(num_tokens) - static_cast<int64_t>(table.size());
  if (need <= 0) return true;
  if (need > blocks_.num_free()) return false;
  for (int64_t i = 0; i < need; ++i) table.push_back(*blocks_.allocate());
  return true;
}

void PagedKVCache::release(BlockTable& table) {
  for (int32_t b : table) blocks_.release(b);
  table.clear();
}

int64_t PagedKVCache::slot(const BlockTable& table, int64_t pos) const {
  TESSERA_CHECK(pos >= 0 && pos < static_cast<int64_t>(table.size()) * block_size(), IndexError,
                "[PagedKVCache.slot] expected a position covered by the block table (",
                table.size() * block_size(), " positions), got ", pos);
  return table[pos / block_size()] * block_size() + pos % block_size();
}

namespace {

int64_t static_block_size(int64_t capacity) {
  TESSERA_CHECK(capacity > 0, ValueError, "[StaticKVCache] expected a positive capacity, got ",
                capacity);
  return (capacity + kAttentionKeyChunk - 1) / kAttentionKeyChunk * kAttentionKeyChunk;
}

}  // namespace

StaticKVCache::StaticKVCache(const KVCacheSpec& spec, int64_t capacity, Device device)
    : KVCache(spec, 1, static_block_size(capacity), device, "StaticKVCache") {}

}  // namespace tessera::infer
