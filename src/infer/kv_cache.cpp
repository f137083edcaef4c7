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
  keys_.resize(num_blocks);
  evictable_at_.resize(num_blocks);
  // Reversed so blocks come out 0, 1, 2, ...
  free_.reserve(num_blocks);
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

std::optional<int32_t> BlockManager::allocate() {
  int32_t b;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else if (!evictable_.empty()) {
    b = evictable_.front();
    evictable_.pop_front();
    by_hash_.erase(keys_[b]->hash);
    keys_[b].reset();
  } else {
    return std::nullopt;
  }
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
  if (--refs_[block] > 0) return;
  if (keys_[block])
    evictable_at_[block] = evictable_.insert(evictable_.end(), block);
  else
    free_.push_back(block);
}

void BlockManager::cache(int32_t block, BlockKey key) {
  check_block(block, "BlockManager.cache");
  if (keys_[block] || by_hash_.contains(key.hash)) return;
  by_hash_.emplace(key.hash, block);
  keys_[block] = std::move(key);
}

std::optional<int32_t> BlockManager::find(const BlockKey& key) const {
  const auto it = by_hash_.find(key.hash);
  if (it == by_hash_.end()) return std::nullopt;
  const BlockKey& held = *keys_[it->second];
  // The hash is 64 bits: the content decides (the parent's own content was checked before it).
  if (held.parent != key.parent || held.tokens != key.tokens) return std::nullopt;
  return it->second;
}

void BlockManager::acquire(int32_t block) {
  TESSERA_CHECK(block >= 0 && block < num_blocks() && keys_[block], ValueError,
                "[BlockManager.acquire] expected a cached block, got ", block);
  if (refs_[block]++ == 0) evictable_.erase(evictable_at_[block]);
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
  TESSERA_CHECK(spec.dtype == kFloat32 || spec.dtype == kBFloat16, TypeError, "[", op,
                "] expected a float32 or bfloat16 cache, got ", spec.dtype);
  const Shape shape{spec.num_layers, num_blocks, spec.num_kv_heads, spec.head_dim, block_size};
  keys_ = empty(shape, TensorOptions(spec.dtype).with_device(device));
  values_ = empty(shape, TensorOptions(spec.dtype).with_device(device));
}

Tensor KVCache::key_cache(int64_t layer) const { return keys_.select(0, layer); }
Tensor KVCache::value_cache(int64_t layer) const { return values_.select(0, layer); }

void* KVCache::key_data(int64_t layer) const {
  TESSERA_ASSERT(layer >= 0 && layer < spec_.num_layers, "layer ", layer);
  return static_cast<char*>(keys_.data_ptr()) + layer * keys_.stride(0) * itemsize(spec_.dtype);
}

void* KVCache::value_data(int64_t layer) const {
  TESSERA_ASSERT(layer >= 0 && layer < spec_.num_layers, "layer ", layer);
  return static_cast<char*>(values_.data_ptr()) + layer * values_.stride(0) * itemsize(spec_.dtype);
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
  // Last block first: a prefix shared by many sequences is then the last of theirs evicted.
  for (auto b = table.rbegin(); b != table.rend(); ++b) blocks_.release(*b);
  table.clear();
}

int64_t PagedKVCache::slot(const BlockTable& table, int64_t pos) const {
  TESSERA_CHECK(pos >= 0 && pos < static_cast<int64_t>(table.size()) * block_size(), IndexError,
                "[PagedKVCache.slot] expected a position covered by the block table (",
                table.size() * block_size(), " positions), got ", pos);
  return table[pos / block_size()] * block_size() + pos % block_size();
}

namespace {

// A block's chain hash: its tokens mixed into its parent's (splitmix64's finaliser per token).
uint64_t chain_hash(uint64_t parent, std::span<const int32_t> tokens) {
  uint64_t h = parent ^ 0x9e3779b97f4a7c15ull;
  for (int32_t t : tokens) {
    h ^= static_cast<uint32_t>(t) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
    h ^= h >> 31;
  }
  return h;
}

BlockKey block_key(uint64_t parent, std::span<const int32_t> tokens) {
  return {chain_hash(parent, tokens), parent, {tokens.begin(), tokens.end()}};
}

}  // namespace

uint64_t prefix_root(int32_t lora_id) {
  if (lora_id == 0) return 0;
  const int32_t salt[] = {-1, lora_id};  // no token id is negative: no chain starts so
  return chain_hash(0, salt);
}

PrefixMatch PagedKVCache::match_prefix(std::span<const int32_t> tokens, int64_t max_blocks,
                                       uint64_t root) const {
  PrefixMatch m;
  const int64_t bs = block_size();
  const int64_t full = std::min(static_cast<int64_t>(tokens.size()) / bs, max_blocks);
  uint64_t parent = root;
  for (int64_t i = 0; i < full; ++i) {
    const BlockKey key = block_key(parent, tokens.subspan(i * bs, bs));
    const std::optional<int32_t> block = blocks_.find(key);
    if (!block) {
      m.next_hash = key.hash;
      break;
    }
    m.blocks.push_back(*block);
    m.hashes.push_back(key.hash);
    if (blocks_.ref_count(*block) == 0) ++m.num_free;
    parent = key.hash;
  }
  return m;
}

void PagedKVCache::take_prefix(BlockTable& table, const PrefixMatch& match) {
  TESSERA_ASSERT(table.empty(), "take_prefix into a table of ", table.size(), " blocks");
  for (int32_t b : match.blocks) {
    blocks_.acquire(b);
    table.push_back(b);
  }
}

void PagedKVCache::cache_full_blocks(const BlockTable& table, std::span<const int32_t> tokens,
                                     int64_t num_computed, std::vector<uint64_t>& hashes,
                                     uint64_t root) {
  const int64_t bs = block_size();
  const int64_t full = std::min(num_computed / bs, static_cast<int64_t>(table.size()));
  for (auto i = static_cast<int64_t>(hashes.size()); i < full; ++i) {
    BlockKey key = block_key(hashes.empty() ? root : hashes.back(), tokens.subspan(i * bs, bs));
    hashes.push_back(key.hash);
    blocks_.cache(table[i], std::move(key));
  }
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
