// InfiniCore's KV-cache attention ops. Arguments are validated by the inference engine's checks
// (infer/attention.h) under each op's own name; float32 and bfloat16 without ALiBi then run the
// engine's kernel (bfloat16 queries widened to float32, its caches read as they are),
// everything else the composite below, which is also what the kernel is tested against.
#include "tessera/ops/paged_attention.h"

#include <cmath>

#include "tessera/autograd/grad_mode.h"
#include "tessera/core/dtype_dispatch.h"
#include "tessera/infer/attention.h"
#include "tessera/ops/creation.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/index.h"
#include "tessera/ops/infinicore.h"
#include "tessera/ops/linalg.h"
#include "tessera/ops/reduce.h"
#include "tessera/ops/op_info.h"
#include "tessera/ops/shape.h"
#include "tessera/runtime/op_scope.h"

namespace tessera {

namespace {

// An index argument as the checks and the kernel take it: contiguous int32.
Tensor as_int32(const Tensor& t, const char* what, const char* op) {
  TESSERA_CHECK(t.defined() && (t.dtype() == kInt32 || t.dtype() == kInt64), TypeError, "[", op,
                "] expected ", what, " to be an int32 or int64 tensor, got ",
                t.defined() ? detail::str(t.dtype()) : "undefined");
  return t.to(kInt32).contiguous();
}

double default_scale(const Tensor& q, std::optional<double> scale) {
  return scale.value_or(1.0 / std::sqrt(static_cast<double>(q.size(-1))));
}

void check_alibi(const std::optional<Tensor>& slopes, const Tensor& q, const char* op) {
  if (!slopes) return;
  TESSERA_CHECK(is_floating(slopes->dtype()) && slopes->dim() == 1 &&
                    slopes->size(0) == q.size(1) && slopes->device() == q.device(),
                ValueError, "[", op, "] expected alibi_slopes [", q.size(1), "] floating on ",
                q.device().str(), ", got ", slopes->shape_str(), " ", slopes->dtype(), " on ",
                slopes->device().str());
}

// softmax(scale q k^T + alibi, causal aligned bottom-right) v for q [Hq, T, D] over k, v
// [Hkv, L, D] (L >= T: the T queries are the last positions), query head h reading KV head
// h / G. The G query heads of a KV head share its keys by broadcasting. Returns [Hq, T, D].
Tensor causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                        const std::optional<Tensor>& alibi_slopes) {
  const int64_t Hq = q.size(0), T = q.size(1), D = q.size(2), Hkv = k.size(0), L = k.size(1);
  const DType ct = q.dtype() == kFloat64 ? kFloat64 : kFloat32;
  Tensor qg = reshape(q.to(ct), {Hkv, Hq / Hkv, T, D}) * scale;
  Tensor s = matmul(qg, unsqueeze(k.to(ct), 1).mT());  // [Hkv, G, T, L]
  if (alibi_slopes) {
    // slope_h * (j - p): key j against the query at position p = L - T + i.
    Tensor dist = unsqueeze(arange(L), 0) - unsqueeze(arange(T) + (L - T), 1);
    s = s + reshape(alibi_slopes->to(ct), {Hkv, Hq / Hkv, 1, 1}) * dist.to(ct).to(q.device());
  }
  Tensor o = matmul(causal_softmax(s), unsqueeze(v.to(ct), 1));
  return reshape(o, {Hq, T, D}).to(q.dtype());
}

// Positions 0..L - 1 of a sequence from a paged cache [num_blocks, Hkv, D, bs] through its
// blocks (int64) as [Hkv, L, D].
Tensor gather_positions(const Tensor& cache, const Tensor& blocks, int64_t L) {
  const int64_t Hkv = cache.size(1), D = cache.size(2), bs = cache.size(3);
  Tensor b = index_select(cache, 0, blocks);  // [nblk, Hkv, D, bs]
  return narrow(reshape(permute(b, {1, 0, 3, 2}), {Hkv, blocks.size(0) * bs, D}), 1, 0, L);
}

// The paged attention of validated arguments (int32 tables, lengths and query starts).
Tensor paged_attend(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                    const Tensor& tables, const Tensor& lens, const Tensor& query_start,
                    double scale, const std::optional<Tensor>& alibi_slopes) {
  if ((q.dtype() == kFloat32 || q.dtype() == kBFloat16) && !alibi_slopes)
    return infer::paged_attention(q.to(kFloat32), k_cache, v_cache, tables, lens, query_start,
                                  scale)
        .to(q.dtype());
  const Tensor host_tables = tables.to(kCPU).to(kInt64), host_lens = lens.to(kCPU),
               host_starts = query_start.to(kCPU);
  const int32_t* len = host_lens.data_ptr<int32_t>();
  const int32_t* start = host_starts.data_ptr<int32_t>();
  const int64_t bs = k_cache.size(3);
  TensorList outs;
  for (int64_t s = 0; s < lens.size(0); ++s) {
    const int64_t nq = start[s + 1] - start[s], L = len[s];
    if (nq == 0) continue;
    Tensor blocks = narrow(host_tables.select(0, s), 0, 0, (L + bs - 1) / bs).to(q.device());
    Tensor qs = transpose(narrow(q, 0, start[s], nq), 0, 1);  // [Hq, nq, D]
    Tensor o = causal_attention(qs, gather_positions(k_cache, blocks, L),
                                gather_positions(v_cache, blocks, L), scale, alibi_slopes);
    outs.push_back(transpose(o, 0, 1));
  }
  return outs.empty() ? empty_like(q) : cat(outs, 0).contiguous();
}

}  // namespace

void paged_caching(const Tensor& k, const Tensor& v, const Tensor& k_cache, const Tensor& v_cache,
                   const Tensor& slot_mapping) {
  TESSERA_OP_SCOPE("paged_caching", k, v, k_cache, v_cache, slot_mapping);
  constexpr const char* op = "paged_caching";
  autograd::NoGradGuard no_grad;
  TESSERA_CHECK(
      slot_mapping.defined() && (slot_mapping.dtype() == kInt64 || slot_mapping.dtype() == kInt32),
      TypeError, "[", op, "] expected slot_mapping to be an int64 or int32 tensor, got ",
      slot_mapping.defined() ? detail::str(slot_mapping.dtype()) : "undefined");
  const Tensor slots = slot_mapping.to(kInt64).contiguous();
  const Tensor kc = k.contiguous(), vc = v.contiguous();
  infer::check_paged_caching(op, kc, vc, k_cache, v_cache, slots);
  // bfloat16 k and v come back exactly from the kernel's rounding of their float32 widening.
  if (k.dtype() == kFloat32 || k.dtype() == kBFloat16)
    return infer::paged_caching(kc.to(kFloat32), vc.to(kFloat32), k_cache, v_cache, slots);
  // Other dtypes: token n's [Hkv, D] goes to column slot % bs of block slot / bs.
  const Tensor host_slots = slots.to(kCPU);
  const int64_t* slot = host_slots.data_ptr<int64_t>();
  const int64_t bs = k_cache.size(3);
  for (int64_t n = 0; n < k.size(0); ++n) {
    if (slot[n] < 0) continue;
    k_cache.select(0, slot[n] / bs).select(2, slot[n] % bs).copy_(kc.select(0, n));
    v_cache.select(0, slot[n] / bs).select(2, slot[n] % bs).copy_(vc.select(0, n));
  }
}

Tensor paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                       const Tensor& block_tables, const Tensor& seq_lens,
                       std::optional<double> scale, const std::optional<Tensor>& alibi_slopes) {
  TESSERA_OP_SCOPE("paged_attention", q, k_cache, v_cache, block_tables, seq_lens, alibi_slopes);
  constexpr const char* op = "paged_attention";
  autograd::NoGradGuard no_grad;
  const Tensor tables = as_int32(block_tables, "block_tables", op);
  const Tensor lens = as_int32(seq_lens, "seq_lens", op);
  const Tensor qc = q.contiguous();
  TESSERA_CHECK(q.dim() == 3 && lens.dim() == 1 && q.size(0) == lens.size(0), ValueError, "[", op,
                "] expected q [S, Hq, D] with one row per sequence of seq_lens [S], got ",
                q.shape_str(), " and ", seq_lens.shape_str());
  // One query row per sequence: rows s..s + 1.
  const Tensor starts = arange(0, lens.size(0) + 1, 1, kInt32).to(q.device());
  infer::check_paged_attention(op, qc, k_cache, v_cache, tables, lens, starts);
  check_alibi(alibi_slopes, q, op);
  return paged_attend(qc, k_cache, v_cache, tables, lens, starts, default_scale(q, scale),
                      alibi_slopes);
}

Tensor paged_attention_prefill(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                               const Tensor& block_tables, const Tensor& history_lens,
                               const Tensor& cu_seqlens_q, std::optional<double> scale,
                               const std::optional<Tensor>& alibi_slopes) {
  TESSERA_OP_SCOPE("paged_attention_prefill", q, k_cache, v_cache, block_tables, history_lens,
                   cu_seqlens_q, alibi_slopes);
  constexpr const char* op = "paged_attention_prefill";
  autograd::NoGradGuard no_grad;
  const Tensor tables = as_int32(block_tables, "block_tables", op);
  const Tensor history = as_int32(history_lens, "history_lens", op);
  const Tensor starts = as_int32(cu_seqlens_q, "cu_seqlens_q", op);
  const int64_t S = history.dim() == 1 ? history.size(0) : -1;
  TESSERA_CHECK(S >= 0 && starts.dim() == 1 && starts.size(0) == S + 1, ValueError, "[", op,
                "] expected history_lens [S] and cu_seqlens_q [S + 1], got ",
                history_lens.shape_str(), " and ", cu_seqlens_q.shape_str());
  TESSERA_CHECK(S == 0 || min(history).item<int32_t>() >= 0, ValueError, "[", op,
                "] expected history_lens >= 0, got ", history_lens);
  // A sequence's length is its history plus its query rows.
  const Tensor lens = history + (narrow(starts, 0, 1, S) - narrow(starts, 0, 0, S));
  const Tensor qc = q.contiguous();
  infer::check_paged_attention(op, qc, k_cache, v_cache, tables, lens, starts);
  check_alibi(alibi_slopes, q, op);
  return paged_attend(qc, k_cache, v_cache, tables, lens, starts, default_scale(q, scale),
                      alibi_slopes);
}

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k_cache,
                 const Tensor& v_cache, int64_t pos) {
  TESSERA_OP_SCOPE("attention", q, k, v, k_cache, v_cache);
  constexpr const char* op = "attention";
  autograd::NoGradGuard no_grad;
  TESSERA_CHECK(is_floating(q.dtype()), TypeError, "[", op, "] expected floating-point q, got ",
                q.dtype());
  for (const Tensor* t : {&k, &v, &k_cache, &v_cache})
    TESSERA_CHECK(t->dtype() == q.dtype(), TypeError, "[", op,
                  "] expected q, k, v, k_cache and v_cache of one dtype, got ", q.dtype(), " and ",
                  t->dtype());
  TESSERA_CHECK(q.dim() == 3 && k.dim() == 3 && k.sizes() == v.sizes() && k.size(1) == q.size(1) &&
                    k.size(2) == q.size(2) && q.size(0) % k.size(0) == 0,
                ValueError, "[", op,
                "] expected q [Hq, T, D] and k, v [Hkv, T, D] with Hq a multiple of Hkv, got ",
                q.shape_str(), ", ", k.shape_str(), " and ", v.shape_str());
  const int64_t T = q.size(1);
  TESSERA_CHECK(k_cache.dim() == 3 && k_cache.sizes() == v_cache.sizes() &&
                    k_cache.size(0) == k.size(0) && k_cache.size(2) == k.size(2),
                ValueError, "[", op, "] expected k_cache and v_cache [", k.size(0), ", capacity, ",
                k.size(2), "], got ", k_cache.shape_str(), " and ", v_cache.shape_str());
  TESSERA_CHECK(pos >= 0 && pos + T <= k_cache.size(1), IndexError, "[", op,
                "] expected 0 <= pos and pos + ", T, " <= the cache's ", k_cache.size(1),
                " positions, got pos ", pos);
  narrow(k_cache, 1, pos, T).copy_(k);
  narrow(v_cache, 1, pos, T).copy_(v);
  Tensor o = causal_attention(q, narrow(k_cache, 1, 0, pos + T), narrow(v_cache, 1, 0, pos + T),
                              1.0 / std::sqrt(static_cast<double>(q.size(2))), std::nullopt);
  return transpose(o, 0, 1).contiguous();
}

// Inference-time ops: they write caches in place and record no gradient.
TESSERA_REGISTER_OPS({"paged_caching", "inference", kFloatingTypes, false},
                     {"paged_attention", "inference", kFloatingTypes, false},
                     {"paged_attention_prefill", "inference", kFloatingTypes, false},
                     {"attention", "inference", kFloatingTypes, false});

}  // namespace tessera
