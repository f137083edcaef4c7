// CPU paged attention: writes into the block caches and the attention over them (layouts in
// backend/common/paged_attention_kernels.h). Every query row does the same arithmetic in the
// same order whatever else is in its work item or batch (16-key chunks in order, one lane per
// key position, fixed folds), so a request's results do not depend on the batch, and a token
// recomputed by prefill after preemption gets exactly the keys and values its decode wrote.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/common/paged_attention_kernels.h"
#include "backend/cpu/vec16.h"

namespace tessera::cpu {
namespace {

constexpr int64_t kChunk = kAttentionKeyChunk;
constexpr int64_t kQueryTile = 16;          // query tokens per work item
constexpr int64_t kParallelWork = 1 << 19;  // multiply-adds below which one thread is faster

// C: float, or BFloat16 (rounded to nearest even).
template <class C>
void cache_tokens(const PagedCachingArgs& a) {
  const int64_t H = a.num_kv_heads, D = a.head_dim, bs = a.block_size;
  C* k_cache = static_cast<C*>(a.k_cache);
  C* v_cache = static_cast<C*>(a.v_cache);
  // Tiny per step (one token per sequence when decoding): serial.
  for (int64_t n = 0; n < a.num_tokens; ++n) {
    const int64_t slot = a.slots[n];
    if (slot < 0) continue;
    const int64_t block = slot / bs, off = slot % bs;
    for (int64_t h = 0; h < H; ++h) {
      const float* k = a.k + n * a.k_stride + h * D;
      const float* v = a.v + n * a.v_stride + h * D;
      // Column `off` of the block's [D, bs] keys and values.
      const int64_t column = ((block * H + h) * D) * bs + off;
      for (int64_t d = 0; d < D; ++d) {
        k_cache[column + d * bs] = static_cast<C>(k[d]);
        v_cache[column + d * bs] = static_cast<C>(v[d]);
      }
    }
  }
}

void paged_caching(const PagedCachingArgs& a) {
  if (a.cache_dtype == kBFloat16)
    cache_tokens<BFloat16>(a);
  else
    cache_tokens<float>(a);
}

// One work item: query tokens [t0, t0 + tq) of sequence s, all heads. Decode (one token) gives
// Hq rows; the G query heads of a KV head are adjacent, so its keys are read from L1 after the
// first.
struct WorkItem {
  int32_t s, t0, tq;
};

// Dims of p v summed per walk over the keys: one accumulator vector (16 keys' lanes) per dim.
constexpr int64_t kDimGroup = 16;

// Lane d < nd: the sum over keys k of p_k v_k[d]. v_rows(pos0) points at the value rows of the
// chunk of keys [pos0, pos0 + 16) ([nd, bs], one row of positions per dim) and p_c(pos0) gives
// their probabilities. Lane j of dim d's accumulator sums keys pos0 + j in chunk order; the
// lanes are then folded in vreduce_add's fixed order, so the sum's order is the row's own.
template <int kNd, class P, class V>
tessera::detail::V16 sum_values(int64_t nd, int64_t n_keys, int64_t bs, const P& p_c,
                                const V& v_rows) {
  using namespace tessera::detail;
  V16 acc[kDimGroup];
  for (auto& v : acc) v = vzero();
  const int64_t n = kNd > 0 ? kNd : nd;
  int64_t pos0 = 0;
  for (; pos0 + kChunk <= n_keys; pos0 += kChunk) {
    const V16 p = p_c(pos0);
    const auto* vt = v_rows(pos0);
    for (int64_t d = 0; d < n; ++d) acc[d] = vfma(p, vload(vt + d * bs), acc[d]);
  }
  if (pos0 < n_keys) {  // unwritten slots may hold anything (NaN too): read zeros there
    const V16 p = p_c(pos0);
    const auto* vt = v_rows(pos0);
    for (int64_t d = 0; d < n; ++d)
      acc[d] = vfma(p, vload_first(vt + d * bs, n_keys - pos0), acc[d]);
  }
  return vreduce_add16(acc);
}

// softmax(q K^T scale) V for one query row over keys [0, n_keys) of KV head kv_head, read
// through the sequence's block table: scores (masked past n_keys) and their max, then
// p = exp(s - max) and its sum, then p v. Small heads (D <= 16) fuse the last two walks; larger
// ones keep p in `scores` and walk it once per 16 dims. Every walk goes over 16-key chunks in
// order, so the row's arithmetic depends only on its own query and keys, never on the batch.
// C is the caches' element type (float or BFloat16, widened on load).
template <int kD, class C>
void attend_row(const PagedAttentionArgs& a, const float* q, float* out, const int32_t* table,
                int64_t n_keys, int64_t kv_head, float* scores) {
  using namespace tessera::detail;
  const int64_t D = kD > 0 ? kD : a.head_dim;
  const int64_t bs = a.block_size, Hkv = a.num_kv_heads;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  // Rows [D, bs] of a chunk's block (keys and values share the layout).
  auto block_rows = [&](const void* cache, int64_t pos0) {
    return static_cast<const C*>(cache) + ((table[pos0 / bs] * Hkv + kv_head) * D) * bs + pos0 % bs;
  };

  const V16 scale = vset1(a.scale);
  // Small heads keep q broadcast in registers (the score stores could alias it).
  constexpr int kHeld = kD > 0 && kD <= 16 ? kD : 1;
  V16 q_held[kHeld];
  if constexpr (kD > 0 && kD <= 16)
    for (int d = 0; d < kD; ++d) q_held[d] = vset1(q[d]);
  auto q_at = [&](int64_t d) {
    if constexpr (kD > 0 && kD <= 16)
      return q_held[d];
    else
      return vset1(q[d]);
  };
  V16 vmax_s = vset1(kNegInf);
  for (int64_t pos0 = 0; pos0 < n_keys; pos0 += kChunk) {
    const C* kt = block_rows(a.k_cache, pos0);
    V16 even = vzero(), odd = vzero();
    int64_t d = 0;
    for (; d + 2 <= D; d += 2) {
      even = vfma(q_at(d), vload(kt + d * bs), even);
      odd = vfma(q_at(d + 1), vload(kt + (d + 1) * bs), odd);
    }
    if (d < D) even = vfma(q_at(d), vload(kt + d * bs), even);
    // Lanes past the last key (slots of the block not yet written) are masked here.
    const V16 s = vkeep_first(vmul(vadd(even, odd), scale), n_keys - pos0, kNegInf);
    vstore(scores + pos0, s);
    vmax_s = vmax(vmax_s, s);
  }
  const V16 neg_max = vset1(-vreduce_max(vmax_s));
  // p = exp(s - max) of a chunk, added to the row's sum.
  V16 sum = vzero();
  auto exp_chunk = [&](int64_t pos0) {
    const V16 p = vexp16<true>(vadd(vload(scores + pos0), neg_max));
    sum = vadd(sum, p);
    return p;
  };
  auto value_rows = [&](int64_t d0) {
    return [&, d0](int64_t pos0) { return block_rows(a.v_cache, pos0) + d0 * bs; };
  };
  if constexpr (kD > 0 && kD <= kDimGroup) {
    // exp, its sum and p v in one walk; the sum is complete only after it, so scale at the end.
    const V16 pv = sum_values<kD>(kD, n_keys, bs, exp_chunk, value_rows(0));
    vstore_first(out, vmul(pv, vset1(1.0f / vreduce_add(sum))), kD);
  } else {
    for (int64_t pos0 = 0; pos0 < n_keys; pos0 += kChunk) vstore(scores + pos0, exp_chunk(pos0));
    const V16 inv_l = vset1(1.0f / vreduce_add(sum));
    auto p_c = [&](int64_t pos0) { return vload(scores + pos0); };
    for (int64_t d0 = 0; d0 < D; d0 += kDimGroup) {
      const int64_t nd = std::min(kDimGroup, D - d0);
      const V16 pv = nd == kDimGroup ? sum_values<kDimGroup>(nd, n_keys, bs, p_c, value_rows(d0))
                                     : sum_values<0>(nd, n_keys, bs, p_c, value_rows(d0));
      vstore_first(out + d0, vmul(pv, inv_l), nd);
    }
  }
}

template <int kD, class C>
void attend_item(const PagedAttentionArgs& a, const WorkItem& w, float* scores) {
  const int64_t Hq = a.num_heads, G = Hq / a.num_kv_heads, D = a.head_dim;
  const int64_t q_begin = a.query_start[w.s];
  const int64_t nq = a.query_start[w.s + 1] - q_begin;
  const int64_t first_pos = a.seq_lens[w.s] - nq;  // position of the sequence's first query row
  const int32_t* table = a.block_tables + w.s * a.max_blocks;
  for (int64_t t = w.t0; t < w.t0 + w.tq; ++t)
    for (int64_t h = 0; h < Hq; ++h)
      attend_row<kD, C>(a, a.q + (q_begin + t) * a.q_stride + h * D,
                        a.out + (q_begin + t) * a.out_stride + h * D, table, first_pos + t + 1,
                        h / G, scores);
}

using ItemFn = void (*)(const PagedAttentionArgs&, const WorkItem&, float* scores);

template <class C>
ItemFn item_fn(int64_t D) {
  switch (D) {
    case 8:
      return &attend_item<8, C>;
    case 16:
      return &attend_item<16, C>;
    case 32:
      return &attend_item<32, C>;
    case 64:
      return &attend_item<64, C>;
    case 128:
      return &attend_item<128, C>;
    default:
      return &attend_item<0, C>;
  }
}

void paged_attention(const PagedAttentionArgs& a) {
  // The work list and scratch only grow (no allocation per step once warm).
  thread_local std::vector<WorkItem> items;
  items.clear();
  int64_t work = 0, max_len = 0;
  for (int64_t s = 0; s < a.num_seqs; ++s) {
    const int64_t nq = a.query_start[s + 1] - a.query_start[s];
    work += nq * a.seq_lens[s];
    max_len = std::max<int64_t>(max_len, a.seq_lens[s]);
    for (int64_t t0 = 0; t0 < nq; t0 += kQueryTile)
      items.push_back({static_cast<int32_t>(s), static_cast<int32_t>(t0),
                       static_cast<int32_t>(std::min(kQueryTile, nq - t0))});
  }
  work *= a.num_heads * a.head_dim;
  const int64_t n = static_cast<int64_t>(items.size());
  const WorkItem* list = items.data();
  const ItemFn fn =
      a.cache_dtype == kBFloat16 ? item_fn<BFloat16>(a.head_dim) : item_fn<float>(a.head_dim);
  const int64_t scores_size = (max_len + kChunk - 1) / kChunk * kChunk;
  // This thread's score row (it only grows).
  auto scratch = [&] {
    thread_local std::vector<float> buffer;
    if (static_cast<int64_t>(buffer.size()) < scores_size) buffer.resize(scores_size);
    return buffer.data();
  };
  if (work <= kParallelWork || n == 1 || omp_in_parallel()) {
    float* scores = scratch();
    for (int64_t i = 0; i < n; ++i) fn(a, list[i], scores);
    return;
  }
#pragma omp parallel
  {
    float* scores = scratch();
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < n; ++i) fn(a, list[i], scores);
  }
}

TESSERA_REGISTER_KERNEL(paged_caching_kernel, DeviceType::CPU, &paged_caching);
TESSERA_REGISTER_KERNEL(paged_attention_kernel, DeviceType::CPU, &paged_attention);

}  // namespace
}  // namespace tessera::cpu
