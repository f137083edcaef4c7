// Validation and argument packing for the paged attention ops; the work is in the kernels
// (backend/cpu/paged_attention.cpp, backend/cuda/paged_attention.cu). Index tensors on a device
// are validated on a host copy, and the kernels get their device pointers.
#include "tessera/infer/attention.h"

#include <cmath>
#include <initializer_list>
#include <utility>

#include "backend/common/paged_attention_kernels.h"
#include "tessera/ops/creation.h"

namespace tessera::infer {
namespace {

// Floating values, of dtype when given (the caches', or float32 for the kernels).
void check_values(const Tensor& t, const char* what, std::optional<DType> dtype, const char* op) {
  TESSERA_CHECK(t.defined() && is_floating(t.dtype()) && (!dtype || t.dtype() == *dtype), TypeError,
                "[", op, "] expected ", what, " to be a ",
                dtype ? detail::str(*dtype) : std::string("floating"), " tensor, got ",
                t.defined() ? detail::str(t.dtype(), " on ", t.device().str()) : "undefined");
  TESSERA_CHECK(t.is_contiguous(), ValueError, "[", op, "] expected a contiguous ", what);
}

// The kernels compute in float32 over float32 or bfloat16 caches.
void check_kernel_caches(const Tensor& k_cache, const Tensor& v_cache, const char* op) {
  TESSERA_CHECK(k_cache.defined() && v_cache.defined() && k_cache.dtype() == v_cache.dtype() &&
                    (k_cache.dtype() == kFloat32 || k_cache.dtype() == kBFloat16),
                TypeError, "[", op, "] expected float32 or bfloat16 caches of one dtype, got ",
                k_cache.defined() ? detail::str(k_cache.dtype()) : "undefined", " and ",
                v_cache.defined() ? detail::str(v_cache.dtype()) : "undefined");
}

void check_index(const Tensor& t, DType dtype, int64_t dims, const char* what, const char* op) {
  TESSERA_CHECK(t.defined() && t.dtype() == dtype && t.dim() == dims && t.is_contiguous(),
                TypeError, "[", op, "] expected ", what, " to be a contiguous ", dims, "-d ", dtype,
                " tensor, got ",
                t.defined() ? detail::str(t.shape_str(), " ", t.dtype()) : "undefined");
}

// The kernels take raw pointers of one device, so every tensor must be on the first one's.
void check_one_device(std::initializer_list<std::pair<const char*, const Tensor*>> ts,
                      const char* op) {
  const auto& [first_name, first] = *ts.begin();
  for (const auto& [name, t] : ts)
    TESSERA_CHECK(t->device() == first->device(), ValueError, "[", op, "] expected ", first_name,
                  " and ", name, " on one device, got ", first->device().str(), " and ",
                  t->device().str());
}

// What the host reads of an index tensor (a copy when it lives on a device).
Tensor on_host(const Tensor& t) { return t.device().is_cpu() ? t : t.to(kCPU); }

// Cache views: keys and values [num_blocks, Hkv, D, bs].
void check_caches(const Tensor& k_cache, const Tensor& v_cache, const char* op) {
  check_values(k_cache, "k_cache", std::nullopt, op);
  check_values(v_cache, "v_cache", k_cache.dtype(), op);
  TESSERA_CHECK(k_cache.dim() == 4 && k_cache.sizes() == v_cache.sizes(), ValueError, "[", op,
                "] expected k_cache and v_cache of one shape [num_blocks, Hkv, D, bs], got ",
                k_cache.shape_str(), " and ", v_cache.shape_str());
  // Hkv and the block size divide later: zero would trap.
  TESSERA_CHECK(k_cache.size(1) > 0 && k_cache.size(2) > 0, ValueError, "[", op,
                "] expected caches with KV heads and a head size, got ", k_cache.shape_str());
  TESSERA_CHECK(k_cache.size(3) > 0 && k_cache.size(3) % kAttentionKeyChunk == 0, ValueError, "[",
                op, "] expected a block size that is a positive multiple of ", kAttentionKeyChunk,
                ", got ", k_cache.size(3));
}

// check_paged_caching with k and v of values_dtype.
void check_caching(const char* op, const Tensor& k, const Tensor& v, const Tensor& k_cache,
                   const Tensor& v_cache, const Tensor& slot_mapping, DType values_dtype) {
  check_caches(k_cache, v_cache, op);
  check_values(k, "k", values_dtype, op);
  check_values(v, "v", values_dtype, op);
  const int64_t Hkv = k_cache.size(1), D = k_cache.size(2), bs = k_cache.size(3);
  TESSERA_CHECK(k.dim() == 3 && k.sizes() == v.sizes() && k.size(1) == Hkv && k.size(2) == D,
                ValueError, "[", op, "] expected k and v [N, ", Hkv, ", ", D, "], got ",
                k.shape_str(), " and ", v.shape_str());
  check_index(slot_mapping, kInt64, 1, "slot_mapping", op);
  check_one_device({{"k", &k},
                    {"v", &v},
                    {"k_cache", &k_cache},
                    {"v_cache", &v_cache},
                    {"slot_mapping", &slot_mapping}},
                   op);
  const int64_t N = k.size(0);
  TESSERA_CHECK(slot_mapping.size(0) == N, ValueError, "[", op, "] expected ", N, " slots, got ",
                slot_mapping.size(0));
  const Tensor host_slots = on_host(slot_mapping);
  const int64_t* slots = host_slots.data_ptr<int64_t>();
  const int64_t num_slots = k_cache.size(0) * bs;
  for (int64_t n = 0; n < N; ++n)
    TESSERA_CHECK(slots[n] >= -1 && slots[n] < num_slots, IndexError, "[", op,
                  "] expected slots in [-1, ", num_slots, "), got ", slots[n]);
}

// check_paged_attention with q of q_dtype.
void check_attention(const char* op, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                     const Tensor& block_tables, const Tensor& seq_lens, const Tensor& query_start,
                     DType q_dtype) {
  check_caches(k_cache, v_cache, op);
  check_values(q, "q", q_dtype, op);
  const int64_t num_blocks = k_cache.size(0), Hkv = k_cache.size(1), D = k_cache.size(2),
                bs = k_cache.size(3);
  TESSERA_CHECK(q.dim() == 3 && q.size(2) == D && q.size(1) % Hkv == 0, ValueError, "[", op,
                "] expected q [N, Hq, ", D, "] with Hq a multiple of ", Hkv, ", got ",
                q.shape_str());
  check_index(block_tables, kInt32, 2, "block_tables", op);
  check_index(seq_lens, kInt32, 1, "seq_lens", op);
  check_index(query_start, kInt32, 1, "query_start", op);
  check_one_device({{"q", &q},
                    {"k_cache", &k_cache},
                    {"v_cache", &v_cache},
                    {"block_tables", &block_tables},
                    {"seq_lens", &seq_lens},
                    {"query_start", &query_start}},
                   op);
  const int64_t S = seq_lens.size(0), N = q.size(0), max_blocks = block_tables.size(1);
  TESSERA_CHECK(block_tables.size(0) == S && query_start.size(0) == S + 1, ValueError, "[", op,
                "] expected block_tables [", S, ", max_blocks] and query_start [", S + 1, "], got ",
                block_tables.shape_str(), " and ", query_start.shape_str());
  const Tensor host_qs = on_host(query_start), host_lens = on_host(seq_lens),
               host_tables = on_host(block_tables);
  const int32_t* qs = host_qs.data_ptr<int32_t>();
  const int32_t* lens = host_lens.data_ptr<int32_t>();
  const int32_t* tables = host_tables.data_ptr<int32_t>();
  TESSERA_CHECK(qs[0] == 0 && qs[S] == N, ValueError, "[", op,
                "] expected query_start (cu_seqlens_q) to run from 0 to ", N, ", got ", qs[0],
                " to ", qs[S]);
  for (int64_t s = 0; s < S; ++s) {
    const int64_t nq = qs[s + 1] - qs[s];
    TESSERA_CHECK(nq >= 0 && lens[s] >= nq && lens[s] <= max_blocks * bs, ValueError, "[", op,
                  "] expected sequence ", s, " to have between its ", nq,
                  " query rows and the table's ", max_blocks * bs, " positions, got ", lens[s]);
    for (int64_t i = 0; i < (lens[s] + bs - 1) / bs; ++i)
      TESSERA_CHECK(tables[s * max_blocks + i] >= 0 && tables[s * max_blocks + i] < num_blocks,
                    IndexError, "[", op, "] expected blocks in [0, ", num_blocks, "), got ",
                    tables[s * max_blocks + i]);
  }
}

}  // namespace

void check_paged_caching(const char* op, const Tensor& k, const Tensor& v, const Tensor& k_cache,
                         const Tensor& v_cache, const Tensor& slot_mapping) {
  check_caching(op, k, v, k_cache, v_cache, slot_mapping, k_cache.dtype());
}

void check_paged_attention(const char* op, const Tensor& q, const Tensor& k_cache,
                           const Tensor& v_cache, const Tensor& block_tables,
                           const Tensor& seq_lens, const Tensor& query_start) {
  check_attention(op, q, k_cache, v_cache, block_tables, seq_lens, query_start, k_cache.dtype());
}

void paged_caching(const Tensor& k, const Tensor& v, const Tensor& k_cache, const Tensor& v_cache,
                   const Tensor& slot_mapping) {
  constexpr const char* op = "paged_caching";
  check_kernel_caches(k_cache, v_cache, op);
  check_caching(op, k, v, k_cache, v_cache, slot_mapping, kFloat32);
  const int64_t Hkv = k_cache.size(1), D = k_cache.size(2), bs = k_cache.size(3);
  const int64_t N = k.size(0);
  PagedCachingArgs a;
  a.k = k.data_ptr<float>();
  a.v = v.data_ptr<float>();
  a.k_stride = a.v_stride = Hkv * D;
  a.k_cache = k_cache.data_ptr();
  a.v_cache = v_cache.data_ptr();
  a.cache_dtype = k_cache.dtype();
  a.slots = slot_mapping.data_ptr<int64_t>();
  a.num_tokens = N;
  a.num_kv_heads = Hkv;
  a.head_dim = D;
  a.block_size = bs;
  call_kernel<paged_caching_kernel>(k.device(), a);
}

Tensor paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                       const Tensor& block_tables, const Tensor& seq_lens,
                       const Tensor& query_start, std::optional<double> scale) {
  constexpr const char* op = "paged_attention";
  check_kernel_caches(k_cache, v_cache, op);
  check_attention(op, q, k_cache, v_cache, block_tables, seq_lens, query_start, kFloat32);
  const int64_t S = seq_lens.size(0), Hkv = k_cache.size(1), D = k_cache.size(2),
                bs = k_cache.size(3), max_blocks = block_tables.size(1);
  Tensor out = empty(q.sizes(), TensorOptions(kFloat32).with_device(q.device()));
  PagedAttentionArgs a;
  a.q = q.data_ptr<float>();
  a.out = out.data_ptr<float>();
  a.q_stride = a.out_stride = q.size(1) * D;
  a.k_cache = k_cache.data_ptr();
  a.v_cache = v_cache.data_ptr();
  a.cache_dtype = k_cache.dtype();
  a.block_tables = block_tables.data_ptr<int32_t>();
  a.max_blocks = max_blocks;
  a.query_start = query_start.data_ptr<int32_t>();
  a.seq_lens = seq_lens.data_ptr<int32_t>();
  a.num_seqs = S;
  a.num_heads = q.size(1);
  a.num_kv_heads = Hkv;
  a.head_dim = D;
  a.block_size = bs;
  a.scale = static_cast<float>(scale.value_or(1.0 / std::sqrt(static_cast<double>(D))));
  call_kernel<paged_attention_kernel>(q.device(), a);
  return out;
}

}  // namespace tessera::infer
