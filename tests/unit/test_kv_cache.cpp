// KV caches and the paged attention ops: the block manager's free list and reference counts,
// all-or-nothing block reservation, slots, and paged_caching + paged_attention against the
// composite oracle (scaled_dot_product_attention over the gathered keys) for mixed
// prefill/decode batches, GQA, scattered blocks and several block sizes. Bit-identical results
// for a sequence alone or in a batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>

#include "tessera/infer/attention.h"
#include "tessera/infer/kv_cache.h"
#include "tessera/tessera.h"
#include "testing/expect_error.h"

namespace tessera {
namespace {

using infer::BlockManager;
using infer::BlockTable;
using infer::KVCacheSpec;
using infer::PagedKVCache;

TEST(BlockManager, FreeListAndReferenceCounts) {
  BlockManager m(4);
  EXPECT_EQ(m.num_free(), 4);
  EXPECT_EQ(*m.allocate(), 0);
  EXPECT_EQ(*m.allocate(), 1);
  EXPECT_EQ(m.num_used(), 2);
  m.share(1);
  EXPECT_EQ(m.ref_count(1), 2);
  m.release(1);
  EXPECT_EQ(m.num_used(), 2) << "a shared block stays allocated until its last owner releases it";
  m.release(1);
  EXPECT_EQ(m.ref_count(1), 0);
  EXPECT_EQ(*m.allocate(), 1) << "the most recently freed block is reused first";
  EXPECT_EQ(*m.allocate(), 2);
  EXPECT_EQ(*m.allocate(), 3);
  EXPECT_FALSE(m.allocate().has_value());
  EXPECT_TESSERA_ERROR(m.release(7), ValueError, "[BlockManager.release]");
  m.release(3);
  EXPECT_TESSERA_ERROR(m.release(3), ValueError, "expected an allocated block");
  EXPECT_TESSERA_ERROR(BlockManager(0), ValueError, "[BlockManager]");
}

TEST(PagedKVCache, ReservesBlockByBlockAllOrNothing) {
  PagedKVCache cache({2, 2, 8}, /*num_blocks=*/5, /*block_size=*/16);
  EXPECT_EQ(cache.key_cache(1).sizes(), (Shape{5, 2, 8, 16}));
  EXPECT_EQ(cache.value_cache(0).sizes(), (Shape{5, 2, 8, 16}));
  // What the spec says a token takes is what the two layers' keys and values hold per position.
  const int64_t positions = 5 * 16;
  const Tensor k = cache.key_cache(0), v = cache.value_cache(0);
  const int64_t held =
      2 * static_cast<int64_t>(k.numel() * k.element_size() + v.numel() * v.element_size());
  EXPECT_EQ(cache.spec().bytes_per_token() * positions, held);
  BlockTable a, b;
  EXPECT_TRUE(cache.reserve(a, 1));
  EXPECT_EQ(a.size(), 1u);
  EXPECT_TRUE(cache.reserve(a, 16));
  EXPECT_EQ(a.size(), 1u) << "16 positions fit one block";
  EXPECT_TRUE(cache.reserve(a, 17));
  EXPECT_EQ(a, (BlockTable{0, 1}));
  EXPECT_EQ(cache.slot(a, 17), 1 * 16 + 1);
  EXPECT_FALSE(cache.reserve(b, 4 * 16)) << "needs 4 blocks, 3 are free";
  EXPECT_TRUE(b.empty()) << "a failed reservation takes nothing";
  EXPECT_TRUE(cache.reserve(b, 3 * 16));
  EXPECT_EQ(cache.blocks().num_free(), 0);
  cache.release(a);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(cache.blocks().num_free(), 2);
  EXPECT_TESSERA_ERROR(cache.slot(b, 48), IndexError, "[PagedKVCache.slot]");
  EXPECT_TESSERA_ERROR(PagedKVCache({2, 2, 8}, 4, 10), ValueError, "multiple of 16");
  EXPECT_TESSERA_ERROR(infer::StaticKVCache({2, 2, 8}, 0), ValueError, "[StaticKVCache]");
  EXPECT_EQ(infer::StaticKVCache({1, 1, 4}, 20).capacity(), 32);
}

// Full computed blocks are found by their tokens and everything before them; released cached
// blocks stay findable, and are handed out only after the never-cached free ones, least
// recently released first (which drops them from the cache).
TEST(PagedKVCache, PrefixCacheFindsFullBlocksAndEvictsTheLeastRecentlyReleased) {
  PagedKVCache cache({1, 1, 4}, /*num_blocks=*/6, /*block_size=*/16);
  std::vector<int32_t> a(40);
  std::iota(a.begin(), a.end(), 0);
  BlockTable ta;
  ASSERT_TRUE(cache.reserve(ta, 40));  // blocks 0, 1, 2
  std::vector<uint64_t> hashes;
  cache.cache_full_blocks(ta, a, /*num_computed=*/20, hashes);
  EXPECT_EQ(hashes.size(), 1u) << "only block 0 is full and computed";
  cache.cache_full_blocks(ta, a, 40, hashes);
  EXPECT_EQ(hashes.size(), 2u);
  EXPECT_EQ(cache.blocks().num_cached(), 2);

  infer::PrefixMatch m = cache.match_prefix(a, 10);
  EXPECT_EQ(m.blocks, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(m.hashes, hashes);
  EXPECT_EQ(m.num_free, 0);
  EXPECT_EQ(cache.match_prefix(a, 1).blocks.size(), 1u);
  std::vector<int32_t> b = a;
  b[20] = 99;  // differs in the second block
  EXPECT_EQ(cache.match_prefix(b, 10).blocks, (std::vector<int32_t>{0}));
  b[0] = 99;  // and in the first: the second block's tokens alone do not match
  b[20] = 20;
  EXPECT_TRUE(cache.match_prefix(b, 10).blocks.empty());
  EXPECT_TRUE(cache.match_prefix(std::span(a).first(15), 10).blocks.empty());

  BlockTable tb;
  cache.take_prefix(tb, m);
  EXPECT_EQ(cache.blocks().ref_count(1), 2);
  cache.release(tb);
  cache.release(ta);  // block 2 (never cached) is free; 1 then 0 wait, still cached
  EXPECT_EQ(cache.blocks().num_free(), 6);
  m = cache.match_prefix(a, 10);
  EXPECT_EQ(m.blocks.size(), 2u);
  EXPECT_EQ(m.num_free, 2) << "taking them uses two free blocks";

  BlockTable tc;
  ASSERT_TRUE(cache.reserve(tc, 4 * 16));
  EXPECT_EQ(tc, (BlockTable{2, 3, 4, 5})) << "never-cached blocks first";
  EXPECT_EQ(cache.match_prefix(a, 10).blocks.size(), 2u);
  ASSERT_TRUE(cache.reserve(tc, 5 * 16));
  EXPECT_EQ(tc.back(), 1) << "then the least recently released cached block";
  EXPECT_EQ(cache.blocks().num_cached(), 1);
  EXPECT_TRUE(cache.match_prefix(a, 10).blocks.size() == 1u) << "block 0 still holds a[0:16]";
  EXPECT_TESSERA_ERROR(cache.blocks().acquire(1), ValueError, "expected a cached block");
}

// One sequence of a test batch: its full keys/values [len, Hkv, D] and how many of its last
// positions are queried this step.
struct SeqCase {
  int64_t len, num_queries;
};

// Runs paged_caching + paged_attention for the sequences (blocks shuffled over the pool) and
// checks every query row against sdpa on that sequence's keys with the causal offset.
void check_paged_attention(const std::vector<SeqCase>& seqs, int64_t Hq, int64_t Hkv, int64_t D,
                           int64_t block_size, uint64_t seed) {
  manual_seed(seed);
  int64_t total_blocks = 0;
  for (const auto& s : seqs) total_blocks += (s.len + block_size - 1) / block_size;
  PagedKVCache cache({1, Hkv, D}, total_blocks + 3, block_size);
  // Slots nobody wrote must not leak into any row, whatever they hold.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  cache.key_cache(0).fill_(nan);
  cache.value_cache(0).fill_(nan);
  // Scatter: take blocks in a shuffled order so tables are not contiguous.
  std::vector<int32_t> pool(total_blocks + 3);
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), std::mt19937(static_cast<uint32_t>(seed)));
  int64_t next = 0, max_blocks = 0;
  std::vector<BlockTable> tables;
  for (const auto& s : seqs) {
    BlockTable t;
    for (int64_t i = 0; i < (s.len + block_size - 1) / block_size; ++i) t.push_back(pool[next++]);
    max_blocks = std::max<int64_t>(max_blocks, t.size());
    tables.push_back(t);
  }
  std::vector<Tensor> ks, vs, qs;
  std::vector<int32_t> table_flat(seqs.size() * max_blocks, 0), lens, starts{0};
  for (size_t s = 0; s < seqs.size(); ++s) {
    Tensor k = randn({seqs[s].len, Hkv, D}), v = randn({seqs[s].len, Hkv, D});
    std::vector<int64_t> slots;
    for (int64_t p = 0; p < seqs[s].len; ++p) slots.push_back(cache.slot(tables[s], p));
    infer::paged_caching(k, v, cache.key_cache(0), cache.value_cache(0), tensor(slots));
    ks.push_back(k);
    vs.push_back(v);
    qs.push_back(randn({seqs[s].num_queries, Hq, D}));
    std::copy(tables[s].begin(), tables[s].end(), table_flat.begin() + s * max_blocks);
    lens.push_back(static_cast<int32_t>(seqs[s].len));
    starts.push_back(starts.back() + static_cast<int32_t>(seqs[s].num_queries));
  }
  Tensor q = cat(qs, 0);
  Tensor out = infer::paged_attention(
      q, cache.key_cache(0), cache.value_cache(0),
      tensor(table_flat).to(kInt32).reshape({static_cast<int64_t>(seqs.size()), max_blocks}),
      tensor(lens).to(kInt32), tensor(starts).to(kInt32));
  ASSERT_EQ(out.sizes(), q.sizes());
  for (size_t s = 0; s < seqs.size(); ++s) {
    const int64_t L = seqs[s].len, nq = seqs[s].num_queries;
    // Oracle: query i (position L - nq + i) sees keys 0..L - nq + i.
    Tensor qi = qs[s].transpose(0, 1).unsqueeze(0);  // [1, Hq, nq, D]
    Tensor ki = ks[s].transpose(0, 1).unsqueeze(0), vi = vs[s].transpose(0, 1).unsqueeze(0);
    Tensor keep = unsqueeze(arange(nq) + (L - nq), 1) >= unsqueeze(arange(L), 0);
    Tensor want = scaled_dot_product_attention(qi, ki, vi, keep).squeeze(0).transpose(0, 1);
    Tensor got = out.narrow(0, starts[s], nq);
    EXPECT_TRUE(allclose(got, want, 1e-5, 1e-5))
        << "sequence " << s << " (len " << L << ", " << nq << " queries): max diff "
        << max(abs(got - want)).item<float>();
  }
}

TEST(PagedAttention, MatchesSdpaForMixedPrefillAndDecode) {
  // Prefill of 1, 16, 37 and 70 positions next to decodes at various lengths.
  check_paged_attention({{37, 37}, {5, 1}, {16, 16}, {70, 70}, {33, 1}, {1, 1}, {64, 1}}, 4, 2, 8,
                        16, 1);
}

TEST(PagedAttention, GqaMhaAndBlockSizes) {
  check_paged_attention({{50, 50}, {20, 1}}, 8, 1, 16, 32, 2);    // multi-query
  check_paged_attention({{50, 7}, {47, 3}}, 3, 3, 64, 16, 3);     // MHA, chunked prefill rows
  check_paged_attention({{130, 130}, {129, 1}}, 6, 2, 4, 64, 4);  // long prompt, tiles of 16
  // The other vector paths (32, 128) and a head dim without one (12).
  check_paged_attention({{40, 40}, {77, 1}}, 4, 4, 32, 16, 5);
  check_paged_attention({{20, 20}, {33, 1}}, 2, 1, 128, 16, 6);
  check_paged_attention({{25, 25}, {18, 1}}, 2, 2, 12, 16, 7);
}

// A bfloat16 cache: paged_caching stores keys and values rounded to nearest even and
// paged_attention widens them back exactly, so its rows equal, bit for bit, those over a float32
// cache holding the rounded values. Every head-dim path (8, 16, 32, 64, 128 and the generic
// one), GQA and MHA, prefill and decode rows, a partly filled last block.
TEST(PagedAttention, BFloat16CacheIsAFloat32CacheOfRoundedValues) {
  struct Heads {
    int64_t Hq, Hkv, D;
  };
  for (const auto& [Hq, Hkv, D] : {Heads{4, 2, 8}, Heads{2, 2, 16}, Heads{6, 2, 32},
                                   Heads{2, 1, 64}, Heads{2, 2, 128}, Heads{3, 1, 24}}) {
    manual_seed(static_cast<uint64_t>(D));
    const int64_t L = 45;  // blocks 2, 0, 3 of 16 positions, the last one partly filled
    const KVCacheSpec f32{1, Hkv, D, kFloat32}, bf16{1, Hkv, D, kBFloat16};
    EXPECT_EQ(bf16.bytes_per_token() * 2, f32.bytes_per_token());
    PagedKVCache cache32(f32, 4, 16), cache16(bf16, 4, 16);
    for (const PagedKVCache* c : {&cache32, &cache16}) {
      c->key_cache(0).zero_();
      c->value_cache(0).zero_();
    }
    EXPECT_EQ(cache16.key_cache(0).dtype(), kBFloat16);
    const std::vector<int32_t> table{2, 0, 3};
    std::vector<int64_t> slots;
    for (int64_t p = 0; p < L; ++p) slots.push_back(table[p / 16] * 16 + p % 16);
    const Tensor k = randn({L, Hkv, D}), v = randn({L, Hkv, D});
    infer::paged_caching(k, v, cache16.key_cache(0), cache16.value_cache(0), tensor(slots));
    auto rounded = [](const Tensor& t) { return t.to(kBFloat16).to(kFloat32); };
    infer::paged_caching(rounded(k), rounded(v), cache32.key_cache(0), cache32.value_cache(0),
                         tensor(slots));
    EXPECT_TRUE(all(cache16.key_cache(0).to(kFloat32) == cache32.key_cache(0)).item<bool>())
        << "D " << D;
    EXPECT_TRUE(all(cache16.value_cache(0).to(kFloat32) == cache32.value_cache(0)).item<bool>())
        << "D " << D;
    // Sequence 0 prefills all 45 rows, sequence 1 decodes its 45th over the same blocks.
    const Tensor q = randn({L + 1, Hq, D});
    const Tensor tables = tensor(std::vector<int32_t>{2, 0, 3, 2, 0, 3}).reshape({2, 3});
    const Tensor lens = tensor(std::vector<int32_t>{45, 45});
    const Tensor starts = tensor(std::vector<int32_t>{0, 45, 46});
    const Tensor got = infer::paged_attention(q, cache16.key_cache(0), cache16.value_cache(0),
                                              tables, lens, starts);
    const Tensor want = infer::paged_attention(q, cache32.key_cache(0), cache32.value_cache(0),
                                               tables, lens, starts);
    ASSERT_EQ(got.dtype(), kFloat32);
    EXPECT_EQ(std::memcmp(got.data_ptr(), want.data_ptr(), want.numel() * sizeof(float)), 0)
        << "D " << D << ": max diff " << max(abs(got - want)).item<float>();
  }
}

TEST(PagedAttention, RowsDoNotDependOnTheBatch) {
  const int64_t Hq = 4, Hkv = 2, D = 8, bs = 16;
  manual_seed(5);
  PagedKVCache cache({1, Hkv, D}, 8, bs);
  BlockTable a, b;
  ASSERT_TRUE(cache.reserve(a, 40));
  ASSERT_TRUE(cache.reserve(b, 20));
  auto fill = [&](const BlockTable& t, int64_t n) {
    std::vector<int64_t> slots;
    for (int64_t p = 0; p < n; ++p) slots.push_back(cache.slot(t, p));
    infer::paged_caching(randn({n, Hkv, D}), randn({n, Hkv, D}), cache.key_cache(0),
                         cache.value_cache(0), tensor(slots));
  };
  fill(a, 40);
  fill(b, 20);
  Tensor qa = randn({40, Hq, D}), qb = randn({1, Hq, D});
  auto run = [&](const std::vector<std::pair<const BlockTable*, Tensor>>& seqs) {
    std::vector<int32_t> tables, lens, starts{0};
    std::vector<Tensor> q;
    for (const auto& [t, qi] : seqs) {
      std::vector<int32_t> row(3, 0);
      std::copy(t->begin(), t->end(), row.begin());
      tables.insert(tables.end(), row.begin(), row.end());
      lens.push_back(t == &a ? 40 : 20);
      starts.push_back(starts.back() + static_cast<int32_t>(qi.size(0)));
      q.push_back(qi);
    }
    return infer::paged_attention(cat(q, 0), cache.key_cache(0), cache.value_cache(0),
                                  tensor(tables).to(kInt32).reshape({-1, 3}),
                                  tensor(lens).to(kInt32), tensor(starts).to(kInt32));
  };
  Tensor alone_a = run({{&a, qa}}), alone_b = run({{&b, qb}});
  Tensor both = run({{&b, qb}, {&a, qa}});
  EXPECT_EQ(std::memcmp(both.narrow(0, 1, 40).contiguous().data_ptr(), alone_a.data_ptr(),
                        40 * Hq * D * sizeof(float)),
            0);
  EXPECT_EQ(std::memcmp(both.data_ptr(), alone_b.data_ptr(), Hq * D * sizeof(float)), 0);
}

TEST(PagedAttention, RejectsBadArguments) {
  PagedKVCache cache({1, 2, 8}, 2, 16);
  Tensor kc = cache.key_cache(0), vc = cache.value_cache(0);
  Tensor tables = zeros({1, 1}, kInt32), lens = full({1}, 4, kInt32);
  Tensor starts = tensor(std::vector<int32_t>{0, 1});
  EXPECT_TESSERA_ERROR(infer::paged_attention(randn({1, 3, 8}), kc, vc, tables, lens, starts),
                       ValueError, "[paged_attention] expected q [N, Hq, 8]");
  EXPECT_TESSERA_ERROR(
      infer::paged_attention(randn({1, 4, 8}), kc, vc, tables, full({1}, 17, kInt32), starts),
      ValueError, "table's 16 positions");
  EXPECT_TESSERA_ERROR(
      infer::paged_attention(randn({1, 4, 8}, kFloat64), kc, vc, tables, lens, starts), TypeError,
      "expected q to be a float32 tensor");
  EXPECT_TESSERA_ERROR(infer::paged_attention(randn({1, 4, 8}), kc.to(kFloat16), vc.to(kFloat16),
                                              tables, lens, starts),
                       TypeError, "expected float32 or bfloat16 caches of one dtype");
  EXPECT_TESSERA_ERROR(infer::paged_caching(randn({1, 2, 8}), randn({1, 2, 8}), kc,
                                            vc.to(kBFloat16), tensor(std::vector<int64_t>{0})),
                       TypeError, "[paged_caching] expected float32 or bfloat16 caches");
  EXPECT_TESSERA_ERROR(PagedKVCache({1, 2, 8, kFloat16}, 2, 16), TypeError,
                       "[PagedKVCache] expected a float32 or bfloat16 cache, got float16");
  EXPECT_TESSERA_ERROR(
      infer::paged_attention(randn({1, 4, 8}), kc, vc, full({1, 1}, 5, kInt32), lens, starts),
      IndexError, "expected blocks in [0, 2)");
  EXPECT_TESSERA_ERROR(infer::paged_caching(randn({1, 2, 8}), randn({1, 2, 8}), kc, vc,
                                            tensor(std::vector<int64_t>{32})),
                       IndexError, "[paged_caching] expected slots in [-1, 32)");
  // Zero KV heads or block size divided by zero (SIGFPE).
  const Tensor no_heads = zeros({1, 0, 8, 16});
  EXPECT_TESSERA_ERROR(
      infer::paged_attention(randn({1, 2, 8}), no_heads, no_heads, tables, lens, starts),
      ValueError, "expected caches with KV heads");
  const Tensor no_block = zeros({1, 2, 8, 0});
  EXPECT_TESSERA_ERROR(
      infer::paged_attention(randn({1, 4, 8}), no_block, no_block, tables, lens, starts),
      ValueError, "positive multiple of 16");
}

}  // namespace
}  // namespace tessera
