// Op cases for InfiniCore's KV-cache attention ops (paged_caching, paged_attention,
// paged_attention_prefill, attention). References are loops in double over the cache layouts:
// float64 checks the composite path, float32 the engine's kernel. Block tables are scattered and
// share a block between sequences.
#include <cmath>
#include <limits>

#include "tessera/ops/paged_attention.h"
#include "testing/op_cases.h"
#include "testing/reference.h"

namespace tessera::testing {
namespace {

using Table = std::vector<std::vector<int32_t>>;

// Index tensors live on the device of the case's inputs (the ops refuse a mix, as vLLM's).
Tensor int32_tensor(const std::vector<int32_t>& v, Device device) {
  return tensor(v).to(kInt32).to(device);
}

Tensor table_tensor(const Table& t, Device device) {
  std::vector<int32_t> flat;
  for (const auto& row : t) flat.insert(flat.end(), row.begin(), row.end());
  return int32_tensor(flat, device).reshape({static_cast<int64_t>(t.size()), -1});
}

// Sequence s owns query rows starts[s]..starts[s + 1], its last positions before lens[s]; row at
// position p attends to keys 0..p read from caches [nb, Hkv, D, bs] through tables[s].
Tensor paged_ref(const Tensor& q, const Tensor& kc, const Tensor& vc, const Table& tables,
                 const std::vector<int32_t>& lens, const std::vector<int32_t>& starts) {
  const std::vector<double> qv = values(q), kv = values(kc), vv = values(vc);
  const int64_t Hq = q.size(1), D = q.size(2), Hkv = kc.size(1), bs = kc.size(3);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  auto at = [&](const std::vector<double>& c, int64_t s, int64_t pos, int64_t h, int64_t d) {
    const int64_t b = tables[s][pos / bs];
    return c[((b * Hkv + h) * D + d) * bs + pos % bs];
  };
  std::vector<double> out(qv.size());
  for (size_t s = 0; s < lens.size(); ++s)
    for (int64_t n = starts[s]; n < starts[s + 1]; ++n)
      for (int64_t h = 0; h < Hq; ++h) {
        const int64_t p = lens[s] - (starts[s + 1] - n), kh = h / (Hq / Hkv);
        std::vector<double> w(p + 1);
        double m = -std::numeric_limits<double>::infinity(), z = 0;
        for (int64_t j = 0; j <= p; ++j) {
          for (int64_t d = 0; d < D; ++d) w[j] += qv[(n * Hq + h) * D + d] * at(kv, s, j, kh, d);
          m = std::max(m, w[j] *= scale);
        }
        for (double& x : w) z += x = std::exp(x - m);
        for (int64_t d = 0; d < D; ++d) {
          double acc = 0;
          for (int64_t j = 0; j <= p; ++j) acc += w[j] * at(vv, s, j, kh, d);
          out[(n * Hq + h) * D + d] = acc / z;
        }
      }
  return from_values(out, q.sizes(), q.dtype());
}

std::vector<OpCase> paged_attention_cases() {
  std::vector<OpCase> v;
  // Decode at lengths 1, 17 (a block boundary crossed) and 32 (two full blocks); sequences 1 and
  // 2 share block 2. q [3, 4, 16] (GQA, 2 query heads per KV head), caches [8, 2, 16, 16].
  const Table dec_tables{{5, 0}, {2, 7}, {2, 6}};
  const std::vector<int32_t> dec_lens{1, 17, 32};
  OpCase decode = one(
      "paged_attention", "decode_gqa_shared_blocks",
      {constant({3, 4, 16}), constant({8, 2, 16, 16}), constant({8, 2, 16, 16})},
      [=](auto& x) {
        const Device dev = x[0].device();
        return paged_attention(x[0], x[1], x[2], table_tensor(dec_tables, dev),
                               int32_tensor(dec_lens, dev));
      },
      [=](auto& x) {
        return paged_ref(x[0], x[1], x[2], dec_tables, dec_lens, {0, 1, 2, 3});
      });
  // Prefill: histories 0, 16 and 5 followed by 3, 1 and 20 query rows (24 in all).
  const Table pre_tables{{4, 0}, {1, 6}, {0, 5}};
  OpCase prefill = one(
      "paged_attention_prefill", "chunks_after_history",
      {constant({24, 4, 16}), constant({8, 2, 16, 16}), constant({8, 2, 16, 16})},
      [=](auto& x) {
        const Device dev = x[0].device();
        return paged_attention_prefill(x[0], x[1], x[2], table_tensor(pre_tables, dev),
                                       int32_tensor({0, 16, 5}, dev),
                                       int32_tensor({0, 3, 4, 24}, dev));
      },
      [=](auto& x) {
        return paged_ref(x[0], x[1], x[2], pre_tables, {3, 17, 25}, {0, 3, 4, 24});
      });
  for (OpCase* c : {&decode, &prefill}) {
    c->gradcheck = false;
    v.push_back(std::move(*c));
  }
  return v;
}

// Slots 17, 3, 63 and 32 of caches [4, 2, 16, 16] get tokens 0, 1, 3 and 4; token 2 (-1) is
// skipped. The case returns both caches, stacked.
std::vector<OpCase> paged_caching_cases() {
  const std::vector<int64_t> slots{17, 3, -1, 63, 32};
  OpCase c = one(
      "paged_caching", "scattered_slots",
      {constant({5, 2, 16}), constant({5, 2, 16}), constant({4, 2, 16, 16}),
       constant({4, 2, 16, 16})},
      [=](auto& x) {
        Tensor kc = x[2].clone(), vc = x[3].clone();
        paged_caching(x[0], x[1], kc, vc, tensor(slots).to(x[0].device()));
        return stack({kc, vc});
      },
      [=](auto& x) {
        auto write = [&](const Tensor& src, const Tensor& cache) {
          std::vector<double> c = values(cache);
          const std::vector<double> t = values(src);
          for (size_t n = 0; n < slots.size(); ++n)
            for (int64_t h = 0; slots[n] >= 0 && h < 2; ++h)
              for (int64_t d = 0; d < 16; ++d)
                c[(((slots[n] / 16) * 2 + h) * 16 + d) * 16 + slots[n] % 16] =
                    t[(n * 2 + h) * 16 + d];
          return from_values(c, cache.sizes(), cache.dtype());
        };
        return stack({write(x[0], x[2]), write(x[1], x[3])});
      });
  c.gradcheck = false;
  return {c};
}

// attention with a contiguous cache [Hkv, 8, D]: 3 new tokens written at pos 2 after 2 cached
// ones; q [4, 3, 8] (GQA 2:1) attends causally to cache positions 0..4. Returns [3, 4, 8].
std::vector<OpCase> attention_cases() {
  OpCase c = one(
      "attention", "cache_at_pos_gqa",
      {constant({4, 3, 8}), constant({2, 3, 8}), constant({2, 3, 8}), constant({2, 8, 8}),
       constant({2, 8, 8})},
      [](auto& x) { return attention(x[0], x[1], x[2], x[3].clone(), x[4].clone(), 2); },
      [](auto& x) {
        // Keys of KV head h at position j: the cache before pos, the new k after.
        const std::vector<double> q = values(x[0]), k = values(x[1]), v = values(x[2]),
                                  kc = values(x[3]), vc = values(x[4]);
        auto key = [&](const std::vector<double>& nw, const std::vector<double>& old, int64_t h,
                       int64_t j, int64_t d) {
          return j < 2 ? old[(h * 8 + j) * 8 + d] : nw[(h * 3 + j - 2) * 8 + d];
        };
        std::vector<double> out(3 * 4 * 8);
        for (int64_t t = 0; t < 3; ++t)
          for (int64_t h = 0; h < 4; ++h) {
            std::vector<double> w(3 + t);
            double z = 0;
            for (int64_t j = 0; j < 3 + t; ++j) {
              for (int64_t d = 0; d < 8; ++d)
                w[j] += q[(h * 3 + t) * 8 + d] * key(k, kc, h / 2, j, d) / std::sqrt(8.0);
            }
            const double m = *std::max_element(w.begin(), w.end());
            for (double& s : w) z += s = std::exp(s - m);
            for (int64_t d = 0; d < 8; ++d) {
              double acc = 0;
              for (int64_t j = 0; j < 3 + t; ++j) acc += w[j] * key(v, vc, h / 2, j, d);
              out[(t * 4 + h) * 8 + d] = acc / z;
            }
          }
        return from_values(out, {3, 4, 8}, x[0].dtype());
      });
  c.gradcheck = false;
  return {c};
}

TESSERA_OP_CASES(paged_attention_cases());
TESSERA_OP_CASES(paged_caching_cases());
TESSERA_OP_CASES(attention_cases());

}  // namespace
}  // namespace tessera::testing
