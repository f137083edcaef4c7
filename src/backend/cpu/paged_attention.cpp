// CPU paged attention: writes into the block caches and the tiled online-softmax attention over
// them (layouts in backend/common/paged_attention_kernels.h). Every query row does the same
// arithmetic in the same order whatever else is in its tile or batch (scores in one FMA chain
// over D, one softmax update per 16-key chunk), so a request's results do not depend on the batch.
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

// max that vectorises (std::max's reference form stays scalar); -inf < anything else here.
inline float fmax2(float a, float b) { return b > a ? b : a; }

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

// One work item: query tokens [t0, t0 + tq) of sequence s, all heads. The rows of every head
// walk the key chunks together, so a decode step (one token) still has Hq independent softmax
// chains to overlap.
struct WorkItem {
  int32_t s, t0, tq;
};

// The tile's rows against each chunk of keys, with an online softmax per row: running max m,
// normaliser l and unnormalised output acc, rescaled by exp(m_old - m_new) per chunk. kD is the
// head dim when it is one of the specialised sizes (the loops then unroll and stay in registers),
// 0 otherwise. Scores sum even and odd dims separately and p v sums key j into partial j mod 4,
// to shorten FMA dependency chains; the order is fixed per head dim, so a row's arithmetic is
// the same in every batch.
template <int kD>
void attend_tile(const PagedAttentionArgs& a, const WorkItem& w, float* scratch) {
  using namespace tessera::detail;
  constexpr int64_t kMaxLocal = kD > 0 ? kD : 1;
  const int64_t D = kD > 0 ? kD : a.head_dim;
  const int64_t bs = a.block_size, Hq = a.num_heads, Hkv = a.num_kv_heads;
  const int64_t G = Hq / Hkv, rows = w.tq * Hq;
  float* m = scratch;
  float* l = m + rows;
  float* acc = l + rows;
  // Partial sums live on the stack for the specialised sizes (no aliasing with the cache, so
  // they stay in registers), else after acc in scratch; then a row of zeros.
  float* pv_scratch = acc + rows * D;
  float* zero_row = pv_scratch + 4 * D;
  std::fill(m, m + rows, -std::numeric_limits<float>::infinity());
  std::fill(l, l + rows * (D + 1), 0.0f);
  std::fill(zero_row, zero_row + D, 0.0f);

  const int64_t q_begin = a.query_start[w.s];
  const int64_t nq = a.query_start[w.s + 1] - q_begin;
  const int64_t first_pos = a.seq_lens[w.s] - nq;  // position of the sequence's first query row
  const int64_t last_pos = first_pos + w.t0 + w.tq - 1;
  const int32_t* table = a.block_tables + w.s * a.max_blocks;
  const V16 scale = vset1(a.scale);
  alignas(64) float p[kChunk];

  for (int64_t pos0 = 0; pos0 <= last_pos; pos0 += kChunk) {
    const int64_t block = table[pos0 / bs], off = pos0 % bs;
    const float* k_block = a.k_cache + block * Hkv * D * bs + off;
    const float* v_block = a.v_cache + (block * Hkv * bs + off) * D;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t t = w.t0 + r / Hq, h = r % Hq;
      const int64_t nk = std::min<int64_t>(kChunk, first_pos + t - pos0 + 1);
      if (nk <= 0) continue;  // this query's keys ended in an earlier chunk
      const float* q = a.q + (q_begin + t) * a.q_stride + h * D;
      const float* kt = k_block + (h / G) * D * bs;  // [D, bs] rows of this KV head
      const float* vr = v_block + (h / G) * bs * D;  // [bs, D]
      // Scores of all 16 lanes (the block holds them); those past the query's position are
      // masked to -inf before they matter.
      V16 even = vzero(), odd = vzero();
      int64_t d = 0;
      for (; d + 2 <= D; d += 2) {
        even = vfma(vset1(q[d]), vload(kt + d * bs), even);
        odd = vfma(vset1(q[d + 1]), vload(kt + (d + 1) * bs), odd);
      }
      if (d < D) even = vfma(vset1(q[d]), vload(kt + d * bs), even);
      V16 s =
          vkeep_first(vmul(vadd(even, odd), scale), nk, -std::numeric_limits<float>::infinity());
      const float m_new = fmax2(m[r], vreduce_max(s));
      // exp(m - m_new): 0 on the first chunk (m = -inf), exactly 1 while the max holds.
      const float alpha = m_new > m[r] ? vexp(m[r] - m_new) : 1.0f;
      const V16 e = vexp16(vadd(s, vset1(-m_new)));
      m[r] = m_new;
      l[r] = std::fma(l[r], alpha, vreduce_add(e));
      vstore(p, e);
      // p v over all 16 lanes: keys past nk have p = 0 and read a zero row instead of the block
      // (whose unused slots may hold anything), so they add exactly nothing.
      float part[4][kMaxLocal];
      float* pv = kD > 0 ? &part[0][0] : pv_scratch;
      std::fill(pv, pv + 4 * D, 0.0f);
      for (int64_t j = 0; j < kChunk; j += 4) {
        for (int64_t u = 0; u < 4; ++u) {
          const float* v = j + u < nk ? vr + (j + u) * D : zero_row;
          const float pj = p[j + u];
          float* dst = kD > 0 ? part[u] : pv + u * D;
          for (int64_t i = 0; i < D; ++i) dst[i] = std::fma(pj, v[i], dst[i]);
        }
      }
      float* o = acc + r * D;
      for (int64_t i = 0; i < D; ++i)
        o[i] = std::fma(o[i], alpha, (pv[i] + pv[D + i]) + (pv[2 * D + i] + pv[3 * D + i]));
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = w.t0 + r / Hq, h = r % Hq;
    float* out = a.out + (q_begin + t) * a.out_stride + h * D;
    const float* o = acc + r * D;
    for (int64_t i = 0; i < D; ++i) out[i] = o[i] / l[r];
  }
}

using TileFn = void (*)(const PagedAttentionArgs&, const WorkItem&, float*);

TileFn tile_fn(int64_t D) {
  switch (D) {
    case 8:
      return &attend_tile<8>;
    case 16:
      return &attend_tile<16>;
    case 32:
      return &attend_tile<32>;
    case 64:
      return &attend_tile<64>;
    case 128:
      return &attend_tile<128>;
    default:
      return &attend_tile<0>;
  }
}

void paged_attention(const PagedAttentionArgs& a) {
  // The work list and scratch only grow (no allocation per step once warm).
  thread_local std::vector<WorkItem> items;
  items.clear();
  int64_t work = 0;
  for (int64_t s = 0; s < a.num_seqs; ++s) {
    const int64_t nq = a.query_start[s + 1] - a.query_start[s];
    work += nq * a.seq_lens[s];
    for (int64_t t0 = 0; t0 < nq; t0 += kQueryTile)
      items.push_back({static_cast<int32_t>(s), static_cast<int32_t>(t0),
                       static_cast<int32_t>(std::min(kQueryTile, nq - t0))});
  }
  work *= a.num_heads * a.head_dim;
  const int64_t n = static_cast<int64_t>(items.size());
  const WorkItem* list = items.data();
  const TileFn fn = tile_fn(a.head_dim);
  // m, l and acc per row, then the partial sums and the zero row.
  const int64_t scratch_size = kQueryTile * a.num_heads * (a.head_dim + 2) + 5 * a.head_dim;
  if (work <= kParallelWork || n == 1) {
    thread_local std::vector<float> scratch;
    if (static_cast<int64_t>(scratch.size()) < scratch_size) scratch.resize(scratch_size);
    for (int64_t i = 0; i < n; ++i) fn(a, list[i], scratch.data());
    return;
  }
#pragma omp parallel
  {
    std::vector<float> scratch(scratch_size);
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < n; ++i) fn(a, list[i], scratch.data());
  }
}

TESSERA_REGISTER_KERNEL(paged_caching_kernel, DeviceType::CPU, &paged_caching);
TESSERA_REGISTER_KERNEL(paged_attention_kernel, DeviceType::CPU, &paged_attention);

}  // namespace
}  // namespace tessera::cpu
