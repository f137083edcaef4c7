#include "infer/device_runner.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <utility>

#include "backend/common/index_kernels.h"
#include "backend/common/paged_attention_kernels.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/ops/creation.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/linalg.h"
#include "tessera/ops/nn.h"
#include "tessera/ops/reduce.h"
#include "tessera/ops/shape.h"
#include "tessera/runtime/cuda.h"

namespace tessera::infer::detail {

using Layout = models::InferenceLayout;

namespace {

// For a scope: the runner's device current (CUDA; nothing on the CPU) and inference mode
// (no gradients, and no view tracking: a decode step's views cost nothing beyond themselves).
class DeviceScope {
 public:
  explicit DeviceScope(Device device) {
    if (device.is_cuda()) guard_.emplace(device.index);
  }

 private:
  std::optional<cuda::DeviceGuard> guard_;
  autograd::InferenceMode inference_;
};

}  // namespace

DeviceRunner::DeviceRunner(const Layout& layout, Device device) : device_(device) {
  d_ = layout.dims();
  TESSERA_CHECK(d_.experts_per_token == 0, NotImplementedError,
                "[ModelRunner] expected a dense model on ", device_.str(),
                " (mixtures of experts run on the CPU runner), got one with ",
                layout.layers.empty() ? 0 : layout.layers[0].experts.size(), " experts");
  DeviceScope scope(device_);
  auto optional = [&](const Tensor& t, const char* what) {
    return t.defined() ? weight(t, what) : t;
  };
  auto norm = [&](const Layout::NormWeights& n) {
    return Norm{weight(n.weight, "norm weight"), optional(n.bias, "norm bias")};
  };
  wte_ = weight(layout.token_embedding, "token embedding");
  wpe_ = optional(layout.position_embedding, "position embedding");
  rope_cos_ = optional(layout.rope_cos, "rotary cos");
  rope_sin_ = optional(layout.rope_sin, "rotary sin");
  for (const Layout::Layer& l : layout.layers)
    layers_.push_back({norm(l.norm1), norm(l.norm2), fused(l.qkv), fused(l.o), fused(l.fc1),
                       fused(l.fc2), optional(l.q_norm.weight, "query norm"),
                       optional(l.k_norm.weight, "key norm")});
  final_norm_ = norm(layout.final_norm);
  lm_head_ = weight(layout.lm_head, "lm_head");
  host_ = empty({0}, TensorOptions(kInt32));
  staged_ = empty({0}, TensorOptions(kInt32).with_device(device_));
}

Tensor DeviceRunner::weight(const Tensor& t, const char* what) const {
  TESSERA_CHECK(
      t.defined() && t.dtype() == kFloat32 && t.device() == device_, TypeError,
      "[ModelRunner] expected float32 weights on ", device_.str(), ", got ", what, " ",
      t.defined() ? tessera::detail::str(t.dtype(), " on ", t.device().str()) : "undefined");
  return t.detach().contiguous();
}

// Weights stacked along their outputs into one [sum O_i, K] matrix (made once, so a step runs
// one GEMM for q|k|v and one for gate|up); undefined biases of a stack with some are zeros.
DeviceRunner::Linear DeviceRunner::fused(const Layout::Linear& l) const {
  TensorList ws, bs;
  bool any_bias = false;
  for (size_t i = 0; i < l.weights.size(); ++i) {
    ws.push_back(weight(l.weights[i], "linear weight"));
    const bool has_bias = i < l.biases.size() && l.biases[i].defined();
    bs.push_back(has_bias
                     ? weight(l.biases[i], "linear bias")
                     : zeros({ws.back().size(0)}, TensorOptions(kFloat32).with_device(device_)));
    any_bias = any_bias || has_bias;
  }
  Linear out;
  out.weight = ws.size() == 1 ? ws[0] : cat(ws, 0);
  if (any_bias) out.bias = bs.size() == 1 ? bs[0] : cat(bs, 0);
  return out;
}

Tensor DeviceRunner::norm(const Norm& n, const Tensor& x) const {
  if (d_.rms_norm) return rms_norm(x, n.weight, d_.eps);
  return layer_norm(x, {d_.dim}, n.weight, if_defined(n.bias), d_.eps);
}

Tensor DeviceRunner::linear(const Tensor& x, const Linear& l) {
  return tessera::linear(x, l.weight, if_defined(l.bias));
}

// The index kernel itself, not index_select: the op would read the indices back to range-check
// them (a device sync per gather), and ModelRunner has checked them on the host already.
Tensor DeviceRunner::rows(const Tensor& table, int64_t offset, int64_t n) const {
  const int64_t C = table.size(1);
  Tensor out = empty({n, C}, TensorOptions(table.dtype()).with_device(device_));
  call_kernel<index_select_kernel>(device_, out, table, staged_.narrow(0, offset, n), int64_t{1},
                                   C);
  return out;
}

DeviceRunner::StepLayout DeviceRunner::stage(const StepBatch& batch) {
  const int64_t N = batch.num_tokens(), S = batch.num_seqs();
  const int64_t R = static_cast<int64_t>(batch.logit_rows.size());
  StepLayout at{};
  int64_t words = 0;
  auto take = [&](int64_t n) { return std::exchange(words, words + n); };
  at.slots = take(2 * N);  // first, so the int64 slots stay 8-byte aligned
  at.tokens = take(N);
  at.positions = take(N);
  at.query_start = take(S + 1);
  at.seq_lens = take(S);
  at.block_tables = take(S * batch.max_blocks);
  at.logit_rows = take(R);
  at.words = words;
  if (host_.numel() < words) {  // grown with headroom, so steady decode never reallocates
    const int64_t cap = std::max<int64_t>(words, 2 * host_.numel());
    host_ = empty({cap}, TensorOptions(kInt32));
    staged_ = empty({cap}, TensorOptions(kInt32).with_device(device_));
  }
  int32_t* h = host_.data_ptr<int32_t>();
  auto put = [&](int64_t at_word, const auto& v) {
    std::memcpy(h + at_word, v.data(), v.size() * sizeof(v[0]));
  };
  put(at.slots, batch.slots);
  put(at.tokens, batch.tokens);
  put(at.positions, batch.positions);
  put(at.query_start, batch.query_start);
  put(at.seq_lens, batch.seq_lens);
  put(at.block_tables, batch.block_tables);
  put(at.logit_rows, batch.logit_rows);
  // Pageable host memory: the copy returns once the source is staged, so host_ is free again.
  Tensor dst = staged_.narrow(0, 0, words);
  copy_(dst, host_.narrow(0, 0, words));
  return at;
}

std::span<const float> DeviceRunner::forward(const StepBatch& batch, const KVCache& cache) {
  DeviceScope scope(device_);
  const Tensor out = logits(batch, cache);
  if (!out.defined()) return {};
  const int64_t n = out.numel();
  if (device_.is_cpu()) {
    host_logits_ = out;
  } else {
    const int64_t have = pinned_logits_.defined() ? pinned_logits_.numel() : 0;
    if (have < n)
      pinned_logits_ =
          empty({std::max(n, 2 * have)}, TensorOptions(kFloat32).with_pinned_memory());
    host_logits_ = pinned_logits_.narrow(0, 0, n);
    host_logits_.copy_(out.flatten());  // waits for the step
  }
  return {host_logits_.data_ptr<float>(), static_cast<size_t>(n)};
}

std::span<const int32_t> DeviceRunner::greedy_tokens(const StepBatch& batch, const KVCache& cache) {
  DeviceScope scope(device_);
  const Tensor out = logits(batch, cache);
  // [rows] int64 ids cross, where the logits would be rows * vocab floats (12.9 MB at 64 GPT-2
  // rows); the op's argmax takes the lowest id on ties, as infer::argmax.
  return tokens_to_host(out.defined() ? argmax(out, 1) : Tensor());
}

std::span<const int32_t> DeviceRunner::sample_tokens(const StepBatch& batch, const KVCache& cache,
                                                     std::span<const RowSampling> rows) {
  DeviceScope scope(device_);
  const Tensor out = logits(batch, cache);
  return tokens_to_host(out.defined() ? sample_rows(out, rows) : Tensor());
}

std::span<const int32_t> DeviceRunner::tokens_to_host(const Tensor& ids) {
  tokens_.clear();
  if (!ids.defined()) return {};
  const Tensor host = ids.to(kCPU);
  tokens_.assign(host.data_ptr<int64_t>(), host.data_ptr<int64_t>() + host.numel());
  return tokens_;
}

Tensor DeviceRunner::logits(const StepBatch& batch, const KVCache& cache) {
  const int64_t N = batch.num_tokens(), D = d_.head_dim;
  const int64_t R = static_cast<int64_t>(batch.logit_rows.size());
  if (N == 0) return {};
  const StepLayout at = stage(batch);
  const int32_t* words = staged_.data_ptr<int32_t>();
  const int64_t q_width = d_.n_heads * D, kv_width = d_.n_kv_heads * D;
  const int64_t qkv_width = q_width + 2 * kv_width;
  const TensorOptions f32 = TensorOptions(kFloat32).with_device(device_);

  // Embeddings: wte[token] (+ wpe[position] for GPT-2).
  Tensor x = rows(wte_, at.tokens, N);
  if (wpe_.defined()) x.add_(rows(wpe_, at.positions, N));
  // Each token's rotary angles, [N, 1, D/2]: broadcast over the heads of its row.
  Tensor cos, sin;
  if (rope_cos_.defined()) {
    cos = rows(rope_cos_, at.positions, N).unsqueeze(1);
    sin = rows(rope_sin_, at.positions, N).unsqueeze(1);
  }

  PagedCachingArgs cache_args;
  cache_args.slots = reinterpret_cast<const int64_t*>(words + at.slots);
  cache_args.num_tokens = N;
  cache_args.num_kv_heads = d_.n_kv_heads;
  cache_args.head_dim = D;
  cache_args.block_size = cache.block_size();
  cache_args.cache_dtype = cache.spec().dtype;
  PagedAttentionArgs attn_args;
  attn_args.cache_dtype = cache.spec().dtype;
  attn_args.block_tables = words + at.block_tables;
  attn_args.max_blocks = batch.max_blocks;
  attn_args.query_start = words + at.query_start;
  attn_args.seq_lens = words + at.seq_lens;
  attn_args.num_seqs = batch.num_seqs();
  attn_args.num_heads = d_.n_heads;
  attn_args.num_kv_heads = d_.n_kv_heads;
  attn_args.head_dim = D;
  attn_args.block_size = cache.block_size();
  attn_args.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));

  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& L = layers_[l];
    const Tensor qkv = linear(norm(L.norm1, x), L.qkv);  // [N, q | k | v]
    // q and k rows (rotated together for LLaMA; read in place from qkv otherwise).
    Tensor qk = qkv;
    int64_t qk_stride = qkv_width;
    if (cos.defined()) {
      Tensor heads =
          qkv.narrow(1, 0, q_width + kv_width).reshape({N, d_.n_heads + d_.n_kv_heads, D});
      if (L.q_norm.defined())  // each head normed over its D values, then rotated
        heads = cat({rms_norm(heads.narrow(1, 0, d_.n_heads), L.q_norm, d_.eps),
                     rms_norm(heads.narrow(1, d_.n_heads, d_.n_kv_heads), L.k_norm, d_.eps)},
                    1);
      qk = rope(heads, cos, sin).contiguous();
      qk_stride = q_width + kv_width;
    }
    Tensor attn = empty({N, q_width}, f32);
    const float* qk_data = qk.data_ptr<float>();
    cache_args.k = qk_data + q_width;
    cache_args.k_stride = qk_stride;
    cache_args.v = qkv.data_ptr<float>() + q_width + kv_width;
    cache_args.v_stride = qkv_width;
    cache_args.k_cache = cache.key_data(static_cast<int64_t>(l));
    cache_args.v_cache = cache.value_data(static_cast<int64_t>(l));
    attn_args.q = qk_data;
    attn_args.q_stride = qk_stride;
    attn_args.out = attn.data_ptr<float>();
    attn_args.out_stride = q_width;
    attn_args.k_cache = cache_args.k_cache;
    attn_args.v_cache = cache_args.v_cache;
    call_kernel<paged_caching_kernel>(device_, cache_args);
    call_kernel<paged_attention_kernel>(device_, attn_args);
    x.add_(linear(attn, L.o));

    const Tensor h = norm(L.norm2, x);
    Tensor act;
    if (d_.swiglu) {
      const Tensor ff = linear(h, L.fc1);
      act = swiglu(ff.narrow(1, 0, d_.hidden), ff.narrow(1, d_.hidden, d_.hidden));
    } else {  // the GELU in fc1's GEMM epilogue
      act = linear_gelu(h, L.fc1.weight, if_defined(L.fc1.bias), "tanh");
    }
    x.add_(linear(act, L.fc2));
  }
  if (R == 0) return {};

  // Final norm and lm_head only for the rows that sample.
  return matmul(norm(final_norm_, rows(x, at.logit_rows, R)), lm_head_.t()).contiguous();
}

}  // namespace tessera::infer::detail
