// CPU paged attention: writes into the block caches and the attention over them (layouts in
// backend/common/paged_attention_kernels.h). Every query row does the same arithmetic in the
// same order whatever else is in its work item or batch (16-key chunks in order, fixed
// accumulator rotations), so a request's results do not depend on the batch, and a token
// recomputed by prefill after preemption gets exactly the keys and values its decode wrote.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/common/paged_attention_kernels.h"
#include "backend/common/vec16.h"

namespace tessera::cpu {
namespace {

constexpr int64_t kChunk = kAttentionKeyChunk;
constexpr int64_t kQueryTile = 16;          // query tokens per work item
constexpr int64_t kParallelWork = 1 << 19;  // multiply-adds below which one thread is faster

void paged_caching(const PagedCachingArgs& a) {
  const int64_t H = a.num_kv_heads, D = a.head_dim, bs = a.block_size;
  // Tiny per step (one token per sequence when decoding): serial.
  for (int64_t n = 0; n < a.num_tokens; ++n) {
    const int64_t slot = a.slots[n];
    if (slot < 0) continue;
    const int64_t block = slot / bs, off = slot % bs;
    for (int64_t h = 0; h < H; ++h) {
      const float* k = a.k + n * a.k_stride + h * D;
      const float* v = a.v + n * a.v_stride + h * D;
      float* kt = a.k_cache + ((block * H + h) * D) * bs + off;  // column `off` of [D, bs]
      float* vr = a.v_cache + ((block * H + h) * bs + off) * D;  // row `off` of [bs, D]
      for (int64_t d = 0; d < D; ++d) kt[d * bs] = k[d];
      std::copy(v, v + D, vr);
    }
  }
}

// One work item: query tokens [t0, t0 + tq) of sequence s, all heads. Decode (one token) gives
// Hq rows; the G query heads of a KV head are adjacent, so its keys are read from L1 after the
// first.
struct WorkItem {
  int32_t s, t0, tq;
};

// Per-thread buffers of one query row: its scores over the keys (T floats, never T x T), and a
// zero-padded copy of a part-filled last chunk of values, and partial sums.
struct RowScratch {
  float* scores;
  float* value_tail;  // [kChunk, D]
  float* partials;    // [4, D], for head dims without a vector path
};

// p v over one chunk of 16 keys (p in one vector, values v [16, D]) into acc: for D a multiple
// of 16 each key adds D / 16 vectors, keys rotating over U accumulator sets so the FMA chains
// overlap; for D = 8 one vector holds a pair of keys (lanes 0-7 key 2i, 8-15 key 2i + 1), pairs
// rotating over four sets. The rotation is fixed, so a row's sum order is too.
template <int kD>
struct ValueAccumulator {
  static constexpr int NV = kD == 8 ? 1 : kD / 16;             // vectors per key (or key pair)
  static constexpr int U = kD == 8 ? 4 : std::max(1, 8 / NV);  // accumulator sets
  tessera::detail::V16 acc[U][NV];

  ValueAccumulator() {
    for (auto& set : acc)
      for (auto& v : set) v = tessera::detail::vzero();
  }
  void add_chunk(tessera::detail::V16 p, const float* v) {
    using namespace tessera::detail;
    if constexpr (kD == 8) {
      for (int i = 0; i < kChunk / 2; ++i)
        acc[i % U][0] = vfma(vpair_broadcast(p, i), vload(v + 16 * i), acc[i % U][0]);
    } else {
      alignas(64) float pj[kChunk];
      vstore(pj, p);
      for (int j = 0; j < kChunk; ++j)
        for (int c = 0; c < NV; ++c)
          acc[j % U][c] = vfma(vset1(pj[j]), vload(v + j * kD + 16 * c), acc[j % U][c]);
    }
  }
  // out[0, D) = the sum of the sets times inv_l.
  void finish(float inv_l, float* out) const {
    using namespace tessera::detail;
    alignas(64) float lanes[kD == 8 ? 16 : kD];
    for (int c = 0; c < NV; ++c) {
      V16 sum = acc[0][c];
      for (int u = 1; u < U; ++u) sum = vadd(sum, acc[u][c]);
      vstore(lanes + 16 * c, sum);
    }
    if constexpr (kD == 8) {
      for (int d = 0; d < 8; ++d) out[d] = (lanes[d] + lanes[8 + d]) * inv_l;
    } else {
      for (int d = 0; d < kD; ++d) out[d] = lanes[d] * inv_l;
    }
  }
};

// Any other head dim: four partial rows, key j into partial j mod 4.
struct ScalarValueAccumulator {
  int64_t D;
  float* part;  // [4, D]

  ScalarValueAccumulator(int64_t head_dim, float* partials) : D(head_dim), part(partials) {
    std::fill(part, part + 4 * D, 0.0f);
  }
  void add_chunk(tessera::detail::V16 p, const float* v) {
    alignas(64) float pj[kChunk];
    tessera::detail::vstore(pj, p);
    for (int64_t j = 0; j < kChunk; ++j)
      for (int64_t i = 0; i < D; ++i)
        part[(j % 4) * D + i] = std::fma(pj[j], v[j * D + i], part[(j % 4) * D + i]);
  }
  void finish(float inv_l, float* out) const {
    for (int64_t i = 0; i < D; ++i)
      out[i] = ((part[i] + part[D + i]) + (part[2 * D + i] + part[3 * D + i])) * inv_l;
  }
};

// softmax(q K^T scale) V for one query row over keys [0, n_keys) of KV head kv_head, read
// through the sequence's block table, in two passes: scores (masked past n_keys) and their max,
// then p = exp(s - max), its sum and p v. Each pass walks the keys in 16-key chunks in order, so
// the row's arithmetic depends only on its own query and keys, never on the batch or the tile.
template <int kD>
void attend_row(const PagedAttentionArgs& a, const float* q, float* out, const int32_t* table,
                int64_t n_keys, int64_t kv_head, const RowScratch& scratch) {
  using namespace tessera::detail;
  const int64_t D = kD > 0 ? kD : a.head_dim;
  const int64_t bs = a.block_size, Hkv = a.num_kv_heads;
  float* scores = scratch.scores;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();

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
    const int64_t block = table[pos0 / bs];
    const float* kt = a.k_cache + ((block * Hkv + kv_head) * D) * bs + pos0 % bs;  // [D, bs]
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
  // p = exp(s - max) per chunk, summed and applied to the values in the same walk.
  const V16 neg_max = vset1(-vreduce_max(vmax_s));
  auto accumulate_values = [&](auto& acc) {
    V16 sum = vzero();
    for (int64_t pos0 = 0; pos0 < n_keys; pos0 += kChunk) {
      const V16 p = vexp16<true>(vadd(vload(scores + pos0), neg_max));
      sum = vadd(sum, p);
      const int64_t block = table[pos0 / bs];
      const float* v = a.v_cache + ((block * Hkv + kv_head) * bs + pos0 % bs) * D;  // [bs, D]
      const int64_t nk = std::min(kChunk, n_keys - pos0);
      if (nk < kChunk) {  // unwritten slots may hold anything: their p is 0, so read zeros there
        std::copy(v, v + nk * D, scratch.value_tail);
        std::fill(scratch.value_tail + nk * D, scratch.value_tail + kChunk * D, 0.0f);
        v = scratch.value_tail;
      }
      acc.add_chunk(p, v);
    }
    acc.finish(1.0f / vreduce_add(sum), out);
  };
  if constexpr (kD > 0) {
    ValueAccumulator<kD> acc;
    accumulate_values(acc);
  } else {
    ScalarValueAccumulator acc(D, scratch.partials);
    accumulate_values(acc);
  }
}

template <int kD>
void attend_item(const PagedAttentionArgs& a, const WorkItem& w, const RowScratch& scratch) {
  const int64_t Hq = a.num_heads, G = Hq / a.num_kv_heads, D = a.head_dim;
  const int64_t q_begin = a.query_start[w.s];
  const int64_t nq = a.query_start[w.s + 1] - q_begin;
  const int64_t first_pos = a.seq_lens[w.s] - nq;  // position of the sequence's first query row
  const int32_t* table = a.block_tables + w.s * a.max_blocks;
  for (int64_t t = w.t0; t < w.t0 + w.tq; ++t)
    for (int64_t h = 0; h < Hq; ++h)
      attend_row<kD>(a, a.q + (q_begin + t) * a.q_stride + h * D,
                     a.out + (q_begin + t) * a.out_stride + h * D, table, first_pos + t + 1, h / G,
                     scratch);
}

using ItemFn = void (*)(const PagedAttentionArgs&, const WorkItem&, const RowScratch&);

ItemFn item_fn(int64_t D) {
  switch (D) {
    case 8:
      return &attend_item<8>;
    case 16:
      return &attend_item<16>;
    case 32:
      return &attend_item<32>;
    case 64:
      return &attend_item<64>;
    case 128:
      return &attend_item<128>;
    default:
      return &attend_item<0>;
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
  const ItemFn fn = item_fn(a.head_dim);
  const int64_t scores_size = (max_len + kChunk - 1) / kChunk * kChunk;
  // This thread's buffers (they only grow), carved into a RowScratch.
  auto scratch = [&] {
    thread_local std::vector<float> buffer;
    const int64_t size = scores_size + (kChunk + 4) * a.head_dim;
    if (static_cast<int64_t>(buffer.size()) < size) buffer.resize(size);
    float* b = buffer.data();
    return RowScratch{b, b + scores_size, b + scores_size + kChunk * a.head_dim};
  };
  if (work <= kParallelWork || n == 1 || omp_in_parallel()) {
    const RowScratch rs = scratch();
    for (int64_t i = 0; i < n; ++i) fn(a, list[i], rs);
    return;
  }
#pragma omp parallel
  {
    const RowScratch rs = scratch();
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < n; ++i) fn(a, list[i], rs);
  }
}

TESSERA_REGISTER_KERNEL(paged_caching_kernel, DeviceType::CPU, &paged_caching);
TESSERA_REGISTER_KERNEL(paged_attention_kernel, DeviceType::CPU, &paged_attention);

}  // namespace
}  // namespace tessera::cpu
