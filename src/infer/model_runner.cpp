#include "tessera/infer/model_runner.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "backend/common/inference_kernels.h"
#include "backend/common/paged_attention_kernels.h"
#include "infer/device_runner.h"
#include "infer/device_sampler.h"
#include "tessera/ops/creation.h"
#include "tessera/infer/sampler.h"

namespace tessera::infer {

// Per layer: pre-attention and pre-MLP norms; q|k|v in one projection; the MLP's first
// projection is gate|up (SwiGLU) or c_fc (GELU). A mixture of experts has a router and each
// expert's gate|up and down projections instead of fc1 and fc2.
struct ModelRunner::Layer {
  Norm norm1, norm2;
  Tensor q_norm, k_norm;  // Qwen3's, or undefined
  PackedLinearWeights qkv, o, fc1, fc2;
  PackedLinearWeights router;
  std::vector<PackedLinearWeights> expert_fc1, expert_fc2;
};

namespace {

constexpr int64_t kSplitMacs = 1 << 18;  // ~10 us: below, a fork costs more than it saves

// Bytes of one core's L2 cache (1 MiB when the system does not say).
int64_t l2_cache_bytes() {
  const long bytes = sysconf(_SC_LEVEL2_CACHE_SIZE);
  return bytes > 0 ? bytes : int64_t{1} << 20;
}

Tensor f32(const Tensor& t, const char* what) {
  TESSERA_CHECK(
      t.defined() && t.dtype() == kFloat32 && t.device().type == DeviceType::CPU, TypeError,
      "[ModelRunner] expected float32 CPU weights, got ", what, " ",
      t.defined() ? tessera::detail::str(t.dtype(), " on ", t.device().str()) : "undefined");
  return t.detach().contiguous();
}

const float* ptr(const Tensor& t) { return t.defined() ? t.data_ptr<float>() : nullptr; }

// y (+)= x W^T + b over rows of x and y (ldx and ldy floats apart).
void linear_rows(Device device, const PackedLinearWeights& w, const float* x, int64_t ldx, float* y,
                 int64_t ldy, int64_t rows, bool accumulate = false) {
  call_kernel<packed_linear_kernel>(device, w, LinearRowsArgs{x, ldx, y, ldy, rows, accumulate});
}

template <class T>
void grow(std::vector<T>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(n);
}

}  // namespace

void StepBatch::clear() {
  tokens.clear();
  positions.clear();
  slots.clear();
  query_start.assign(1, 0);
  seq_lens.clear();
  block_tables.clear();
  max_blocks = 0;
  logit_rows.clear();
  lora_ids.clear();
}

void StepBatch::add_sequence(std::span<const int32_t> new_tokens, int64_t start,
                             const BlockTable& table, int64_t block_size, bool want_logits,
                             int32_t lora_id) {
  if (query_start.empty()) query_start.push_back(0);
  const int64_t n = static_cast<int64_t>(new_tokens.size());
  TESSERA_CHECK(n > 0 && start >= 0 && start + n <= static_cast<int64_t>(table.size()) * block_size,
                ValueError, "[StepBatch.add_sequence] expected tokens within the block table's ",
                table.size() * block_size, " positions, got ", n, " tokens from position ", start);
  const int64_t S = num_seqs(), width = static_cast<int64_t>(table.size());
  if (width > max_blocks) {  // widen the existing rows (rare: a table grows one block at a time)
    std::vector<int32_t> wide(S * width, 0);
    for (int64_t s = 0; s < S; ++s)
      std::copy_n(block_tables.begin() + s * max_blocks, max_blocks, wide.begin() + s * width);
    block_tables.swap(wide);
    max_blocks = width;
  }
  block_tables.resize((S + 1) * max_blocks, 0);
  std::copy(table.begin(), table.end(), block_tables.begin() + S * max_blocks);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t pos = start + i;
    tokens.push_back(new_tokens[i]);
    positions.push_back(static_cast<int32_t>(pos));
    slots.push_back(table[pos / block_size] * block_size + pos % block_size);
  }
  query_start.push_back(static_cast<int32_t>(tokens.size()));
  seq_lens.push_back(static_cast<int32_t>(start + n));
  lora_ids.push_back(lora_id);
  if (want_logits) logit_rows.push_back(static_cast<int32_t>(tokens.size() - 1));
}

void StepBatch::slice(int64_t s0, int64_t s1, StepBatch& out) const {
  const int64_t t0 = query_start[s0], t1 = query_start[s1];
  out.tokens.assign(tokens.begin() + t0, tokens.begin() + t1);
  out.positions.assign(positions.begin() + t0, positions.begin() + t1);
  out.slots.assign(slots.begin() + t0, slots.begin() + t1);
  out.query_start.clear();
  for (int64_t s = s0; s <= s1; ++s) out.query_start.push_back(query_start[s] - t0);
  out.seq_lens.assign(seq_lens.begin() + s0, seq_lens.begin() + s1);
  out.max_blocks = max_blocks;
  out.block_tables.assign(block_tables.begin() + s0 * max_blocks,
                          block_tables.begin() + s1 * max_blocks);
  out.lora_ids.assign(lora_ids.begin() + s0, lora_ids.begin() + s1);
  out.logit_rows.clear();
  for (const int32_t r : logit_rows)
    if (r >= t0 && r < t1) out.logit_rows.push_back(static_cast<int32_t>(r - t0));
}

ModelRunner::ModelRunner(const models::CausalLM& model, DType weight_dtype) {
  TESSERA_CHECK(weight_dtype == kFloat32 || weight_dtype == kBFloat16 || weight_dtype == kInt8,
                TypeError, "[ModelRunner] expected float32, bfloat16 or int8 weights, got ",
                weight_dtype);
  using Layout = models::InferenceLayout;
  const Layout layout = model.inference_layout();
  d_ = layout.dims();
  num_layers_ = static_cast<int64_t>(layout.layers.size());
  max_seq_ = layout.max_seq_len;
  vocab_ = model.vocab_size();
  device_ = model.device();
  if (!device_.is_cpu()) {
    TESSERA_CHECK(weight_dtype == kFloat32, NotImplementedError,
                  "[ModelRunner] expected float32 weights on ", device_.str(),
                  " (bfloat16 and int8 weights are for the CPU runner), got ", weight_dtype);
    device_runner_ = std::make_unique<detail::DeviceRunner>(layout, device_);
    return;
  }
  auto opt_f32 = [](const Tensor& t, const char* what) { return t.defined() ? f32(t, what) : t; };
  wte_ = f32(layout.token_embedding, "token embedding");
  wpe_ = opt_f32(layout.position_embedding, "position embedding");
  rope_cos_ = opt_f32(layout.rope_cos, "rotary cos");
  rope_sin_ = opt_f32(layout.rope_sin, "rotary sin");
  auto norm = [&](const Layout::NormWeights& n) {
    return Norm{f32(n.weight, "norm weight"), opt_f32(n.bias, "norm bias")};
  };
  auto pack = [&](const std::vector<Tensor>& weights, const std::vector<Tensor>& biases) {
    return call_kernel<pack_linear_kernel>(device_, weights, biases, weight_dtype);
  };
  auto packed = [&](const Layout::Linear& l) { return pack(l.weights, l.biases); };
  for (const Layout::Layer& l : layout.layers) {
    const int64_t index = static_cast<int64_t>(layers_.size());
    for (const auto& [p, linear] : {std::pair{kQkv, &l.qkv}, std::pair{kO, &l.o},
                                    std::pair{kFc1, &l.fc1}, std::pair{kFc2, &l.fc2}}) {
      int64_t offset = 0;
      for (size_t j = 0; j < linear->names.size(); ++j) {
        const Tensor& w = linear->weights[j];
        lora_targets_[linear->names[j]] = {index, p, offset, w.size(0), w.size(1)};
        offset += w.size(0);
      }
    }
    Layer& L = layers_.emplace_back();
    L.norm1 = norm(l.norm1);
    L.norm2 = norm(l.norm2);
    L.q_norm = opt_f32(l.q_norm.weight, "query norm");
    L.k_norm = opt_f32(l.k_norm.weight, "key norm");
    L.qkv = packed(l.qkv);
    L.o = packed(l.o);
    auto size = [](const PackedLinearWeights& p) { return p.in * p.out; };
    int64_t weights = size(L.qkv) + size(L.o);  // elements of the layer's packed linears
    int64_t macs = weights;                     // multiply-adds of a token through them
    if (l.experts.empty()) {
      L.fc1 = packed(l.fc1);
      L.fc2 = packed(l.fc2);
      weights += size(L.fc1) + size(L.fc2);
      macs += size(L.fc1) + size(L.fc2);
    } else {
      L.router = packed(l.router);
      for (const Layout::Expert& e : l.experts) {
        L.expert_fc1.push_back(packed(e.fc1));
        L.expert_fc2.push_back(packed(e.fc2));
      }
      const int64_t expert = size(L.expert_fc1[0]) + size(L.expert_fc2[0]);
      weights += size(L.router) + expert * static_cast<int64_t>(l.experts.size());
      macs += size(L.router) + expert * d_.experts_per_token;
    }
    weight_bytes_ += weights * static_cast<int64_t>(itemsize(weight_dtype));
    weight_macs_ += macs;
  }
  final_norm_ = norm(layout.final_norm);
  lm_head_ = std::make_unique<PackedLinearWeights>(pack({layout.lm_head}, {}));
}

ModelRunner::~ModelRunner() = default;

int32_t ModelRunner::add_lora(const nn::LoraAdapter& adapter) {
  TESSERA_CHECK(!device_runner_, NotImplementedError,
                "[ModelRunner.add_lora] expected a CPU model (LoRA adapters run on the CPU "
                "runner), got one on ",
                device_.str());
  LoraWeights weights(num_layers_);
  int64_t max_rank = max_lora_rank_;  // kept only if the whole adapter is accepted
  const double scaling = adapter.config.scaling();
  for (const nn::LoraPair& pair : nn::lora_pairs(adapter)) {
    const auto it = lora_targets_.find(pair.layer);
    TESSERA_CHECK(it != lora_targets_.end(), ValueError, "[ModelRunner.add_lora] expected ",
                  "adapters of the attention and MLP projections, got one for '", pair.layer, "'");
    const LoraTarget& t = it->second;
    TESSERA_CHECK(pair.a.size(1) == t.in && pair.b.size(0) == t.out, ValueError,
                  "[ModelRunner.add_lora] expected '", pair.layer, "' lora_A [r, ", t.in,
                  "] and lora_B [", t.out, ", r], got ", pair.a.shape_str(), " and ",
                  pair.b.shape_str());
    auto pack = [&](const Tensor& w) {
      return std::make_shared<PackedLinearWeights>(
          call_kernel<pack_linear_kernel>(device_, std::vector<Tensor>{w.to(kFloat32).contiguous()},
                                          std::vector<Tensor>{}, kFloat32));
    };
    weights[t.layer][t.projection].push_back(
        {pack(pair.a), pack(pair.b.to(kFloat32) * scaling), t.offset, pair.a.size(0)});
    max_rank = std::max(max_rank, pair.a.size(0));
  }
  loras_.push_back(std::move(weights));
  max_lora_rank_ = max_rank;
  return static_cast<int32_t>(loras_.size());
}

void ModelRunner::add_lora_rows(const StepBatch& batch, int64_t l, Projection p, const float* x,
                                int64_t ldx, float* y, int64_t ldy, Workspace& ws,
                                Device device) const {
  if (loras_.empty()) return;
  const int64_t S = batch.num_seqs();
  ws.lora_runs.clear();
  int64_t macs = 0;
  for (int64_t s = 0, e = 0; s < S; s = e) {
    const int32_t id = batch.lora_ids[s];
    for (e = s + 1; e < S && batch.lora_ids[e] == id;) ++e;  // a run of one adapter
    if (id == 0 || loras_[id - 1][l][p].empty()) continue;
    const int64_t r0 = batch.query_start[s], rows = batch.query_start[e] - r0;
    ws.lora_runs.push_back({r0, rows, id});
    for (const LoraPiece& piece : loras_[id - 1][l][p])
      macs += rows * piece.rank * (piece.a->in + piece.b->out);
  }
  grow(ws.lora, batch.num_tokens() * max_lora_rank_);
  auto branch = [&](const LoraRun& run) {
    float* t = ws.lora.data() + run.first_row * max_lora_rank_;
    for (const LoraPiece& piece : loras_[run.id - 1][l][p]) {
      linear_rows(device, *piece.a, x + run.first_row * ldx, ldx, t, piece.rank, run.rows);
      linear_rows(device, *piece.b, t, piece.rank, y + run.first_row * ldy + piece.offset, ldy,
                  run.rows, /*accumulate=*/true);
    }
  };
  // Each run's rows of y (and of the scratch) are its own: runs go to threads whole. A run
  // alone, or little work, stays on this thread, outside any parallel region, so the GEMMs
  // thread a large run by themselves (inside even an inactive region, libgomp would start new
  // threads for theirs on every call).
  const auto runs = static_cast<int64_t>(ws.lora_runs.size());
  if (runs > 1 && macs >= kSplitMacs && omp_get_max_threads() > 1 && !omp_in_parallel()) {
#pragma omp parallel for num_threads(2) schedule(dynamic)
    for (int64_t k = 0; k < runs; ++k) branch(ws.lora_runs[k]);
  } else {
    for (const LoraRun& run : ws.lora_runs) branch(run);
  }
}

void ModelRunner::mixture_rows(const Layer& L, const float* h, float* x, int64_t N, Workspace& ws,
                               Device device) const {
  const int64_t C = d_.dim, H = d_.hidden, K = d_.experts_per_token;
  const auto E = static_cast<int64_t>(L.expert_fc1.size());
  grow(ws.router, N * E);
  linear_rows(device, L.router, h, C, ws.router.data(), E, N);
  // Each row's K most probable experts (the lowest index first among equals, as topk) and their
  // probabilities exp(s_e - max) / sum over all experts, or renormalised over the K: / sum over
  // the chosen, since the softmax's own denominator cancels.
  ws.expert_of.resize(N * K);
  ws.expert_weight.resize(N * K);
  ws.expert_count.assign(E + 1, 0);
  for (int64_t n = 0; n < N; ++n) {
    float* s = ws.router.data() + n * E;
    const float top = *std::max_element(s, s + E);
    float all = 0.0f;
    for (int64_t e = 0; e < E; ++e) all += s[e] = std::exp(s[e] - top);
    float chosen = 0.0f;
    for (int64_t k = 0; k < K; ++k) {
      int64_t best = -1;
      for (int64_t e = 0; e < E; ++e)  // a NaN score is still taken once
        if (!(s[e] < 0.0f) && (best < 0 || s[e] > s[best])) best = e;
      ws.expert_of[n * K + k] = static_cast<int32_t>(best);
      ws.expert_weight[n * K + k] = s[best];
      chosen += s[best];
      s[best] = -1.0f;  // taken
      ++ws.expert_count[best + 1];
    }
    const float denominator = d_.renormalize_experts ? chosen : all;
    for (int64_t k = 0; k < K; ++k) ws.expert_weight[n * K + k] /= denominator;
  }
  // The picks grouped by expert, rows in order within each (a counting sort).
  for (int64_t e = 0; e < E; ++e) ws.expert_count[e + 1] += ws.expert_count[e];
  ws.expert_picks.resize(N * K);
  ws.expert_next.assign(ws.expert_count.begin(), ws.expert_count.end() - 1);
  for (int64_t i = 0; i < N * K; ++i) ws.expert_picks[ws.expert_next[ws.expert_of[i]]++] = i;

  // An expert takes a row at most once: N rows at most.
  grow(ws.expert_x, N * C);
  grow(ws.expert_y, N * C);
  grow(ws.ff, N * 2 * H);
  for (int64_t e = 0; e < E; ++e) {
    const int64_t first = ws.expert_count[e], rows = ws.expert_count[e + 1] - first;
    if (rows == 0) continue;
    for (int64_t r = 0; r < rows; ++r) {
      const float* src = h + ws.expert_picks[first + r] / K * C;
      std::copy(src, src + C, ws.expert_x.data() + r * C);
    }
    linear_rows(device, L.expert_fc1[e], ws.expert_x.data(), C, ws.ff.data(), 2 * H, rows);
    call_kernel<mlp_activation_kernel>(device,
                                       MlpActivationArgs{ws.ff.data(), 2 * H, rows, H, true});
    linear_rows(device, L.expert_fc2[e], ws.ff.data(), 2 * H, ws.expert_y.data(), C, rows);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t pick = ws.expert_picks[first + r];
      const float w = ws.expert_weight[pick];
      const float* y = ws.expert_y.data() + r * C;
      float* xr = x + pick / K * C;
      for (int64_t c = 0; c < C; ++c) xr[c] += w * y[c];
    }
  }
}

void ModelRunner::norm_rows(const Norm& n, const float* x, float* y, int64_t rows, int64_t ldx,
                            Device device) const {
  call_kernel<norm_rows_kernel>(device,
                                NormRowsArgs{x, ldx, y, rows, d_.dim, ptr(n.weight), ptr(n.bias),
                                             static_cast<float>(d_.eps), d_.rms_norm});
}

void ModelRunner::check(const StepBatch& batch, const KVCache& cache, const char* op) const {
  const KVCacheSpec cs = cache.spec();
  TESSERA_CHECK(cs.num_layers == num_layers_ && cs.num_kv_heads == d_.n_kv_heads &&
                    cs.head_dim == d_.head_dim,
                ValueError, "[", op, "] expected a cache of ", num_layers_, " layers, ",
                d_.n_kv_heads, " KV heads of dim ", d_.head_dim, ", got ", cs.num_layers, ", ",
                cs.num_kv_heads, ", ", cs.head_dim);
  TESSERA_CHECK(cache.device() == device_, ValueError, "[", op, "] expected a cache on ",
                device_.str(), " (the model's device), got one on ", cache.device().str());
  TESSERA_CHECK(batch.lora_ids.size() == batch.seq_lens.size(), ValueError, "[", op,
                "] expected one lora id per sequence (", batch.seq_lens.size(), "), got ",
                batch.lora_ids.size());
  for (const int32_t id : batch.lora_ids)
    TESSERA_CHECK(id >= 0 && id <= num_loras(), ValueError, "[", op, "] expected lora ids in [0, ",
                  num_loras(), "] (0: none), got ", id);
  for (int64_t n = 0; n < batch.num_tokens(); ++n) {
    TESSERA_CHECK(batch.positions[n] >= 0 && batch.positions[n] < max_seq_, IndexError, "[", op,
                  "] expected positions in [0, ", max_seq_, "), got ", batch.positions[n]);
    TESSERA_CHECK(batch.tokens[n] >= 0 && batch.tokens[n] < vocab_, IndexError, "[", op,
                  "] expected token ids in [0, ", vocab_, "), got ", batch.tokens[n]);
  }
}

std::span<const float> ModelRunner::hidden_states(const StepBatch& batch, const KVCache& cache) {
  check(batch, cache, "ModelRunner.hidden_states");
  TESSERA_CHECK(!device_runner_, ValueError,
                "[ModelRunner.hidden_states] expected a CPU model, got one on ", device_.str());
  const int64_t N = batch.num_tokens();
  grow(hidden_states_, N * d_.dim);
  run(batch, cache, workspaces_[0], nullptr, hidden_states_.data());
  return {hidden_states_.data(), static_cast<size_t>(N * d_.dim)};
}

std::span<const float> ModelRunner::forward(const StepBatch& batch, const KVCache& cache) {
  check(batch, cache, "ModelRunner.forward");
  if (device_runner_) return device_runner_->forward(batch, cache);
  return cpu_logits(batch, cache);
}

std::span<const int32_t> ModelRunner::greedy_tokens(const StepBatch& batch, const KVCache& cache) {
  check(batch, cache, "ModelRunner.greedy_tokens");
  if (device_runner_) return device_runner_->greedy_tokens(batch, cache);
  // The logits are host memory here already: the argmax reads them in place.
  const std::span<const float> logits = cpu_logits(batch, cache);
  tokens_.resize(batch.logit_rows.size());
  for (size_t r = 0; r < tokens_.size(); ++r)
    tokens_[r] = argmax(logits.subspan(r * vocab_, vocab_));
  return tokens_;
}

std::span<const int32_t> ModelRunner::sample_tokens(const StepBatch& batch, const KVCache& cache,
                                                    std::span<const RowSampling> rows) {
  check(batch, cache, "ModelRunner.sample_tokens");
  TESSERA_CHECK(rows.size() == batch.logit_rows.size(), ValueError,
                "[ModelRunner.sample_tokens] expected one RowSampling per logit row (",
                batch.logit_rows.size(), "), got ", rows.size());
  if (device_runner_) return device_runner_->sample_tokens(batch, cache, rows);
  const std::span<const float> logits = cpu_logits(batch, cache);
  const int64_t R = static_cast<int64_t>(rows.size());
  const Tensor ids = detail::sample_rows(
      tensor(std::vector<float>(logits.begin(), logits.end()), Shape{R, vocab_}), rows);
  tokens_.assign(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + R);
  return tokens_;
}

std::span<const float> ModelRunner::cpu_logits(const StepBatch& batch, const KVCache& cache) {
  const int64_t R = static_cast<int64_t>(batch.logit_rows.size());
  grow(logits_, R * vocab_);
  const int64_t split = split_point(batch);
  if (split == 0) {
    run(batch, cache, workspaces_[0], logits_.data());
  } else {
    batch.slice(0, split, workspaces_[0].part);
    batch.slice(split, batch.num_seqs(), workspaces_[1].part);
    float* logits[2] = {logits_.data(),
                        logits_.data() + workspaces_[0].part.logit_rows.size() * vocab_};
    // Per-op threading stays off inside (parallel_for does not nest).
#pragma omp parallel for num_threads(2) schedule(static, 1)
    for (int t = 0; t < 2; ++t) run(workspaces_[t].part, cache, workspaces_[t], logits[t]);
  }
  return {logits_.data(), static_cast<size_t>(R * vocab_)};
}

int64_t ModelRunner::split_point(const StepBatch& batch) const {
  const int64_t S = batch.num_seqs();
  static const int64_t l2_bytes = l2_cache_bytes();
  if (S < 2 || omp_get_max_threads() < 2 || weight_bytes_ > l2_bytes) return 0;
  // Work of a sequence: its tokens through the linear layers and over their keys.
  const int64_t key_macs = 2 * num_layers_ * d_.n_heads * d_.head_dim;
  auto work = [&](int64_t s) {
    const int64_t n = batch.query_start[s + 1] - batch.query_start[s];
    return n * (weight_macs_ + key_macs * batch.seq_lens[s]);
  };
  int64_t total = 0;
  for (int64_t s = 0; s < S; ++s) total += work(s);
  if (total < kSplitMacs) return 0;
  // The first s whose prefix holds half the work, or the one before when that balances better.
  int64_t prefix = 0, s = 0;
  while (s < S - 1 && 2 * (prefix + work(s)) <= total) prefix += work(s++);
  if (s < S - 1 && 2 * (prefix + work(s)) - total < total - 2 * prefix) prefix += work(s++);
  return std::max<int64_t>(s, 1);
}

void ModelRunner::run(const StepBatch& batch, const KVCache& cache, Workspace& ws, float* logits,
                      float* hidden) const {
  const int64_t N = batch.num_tokens(), C = d_.dim, D = d_.head_dim;
  const int64_t q_width = d_.n_heads * D, kv_width = d_.n_kv_heads * D;
  const int64_t qkv_width = q_width + 2 * kv_width;
  const int64_t ff_width = d_.swiglu ? 2 * d_.hidden : d_.hidden;
  const int64_t R = static_cast<int64_t>(batch.logit_rows.size());
  grow(ws.x, N * C);
  grow(ws.h, std::max(N, R) * C);
  grow(ws.qkv, N * qkv_width);
  grow(ws.attn, N * q_width);
  grow(ws.ff, N * ff_width);
  float *x = ws.x.data(), *h = ws.h.data(), *qkv = ws.qkv.data(), *attn = ws.attn.data(),
        *ff = ws.ff.data();

  // Embeddings: wte[token] (+ wpe[position] for GPT-2).
  const float* wte = wte_.data_ptr<float>();
  const float* wpe = ptr(wpe_);
  for (int64_t n = 0; n < N; ++n) {
    const float* e = wte + static_cast<int64_t>(batch.tokens[n]) * C;
    float* xr = x + n * C;
    if (wpe) {
      const float* p = wpe + static_cast<int64_t>(batch.positions[n]) * C;
      for (int64_t i = 0; i < C; ++i) xr[i] = e[i] + p[i];
    } else {
      std::copy(e, e + C, xr);
    }
  }

  PagedCachingArgs cache_args;
  cache_args.k_stride = cache_args.v_stride = qkv_width;
  cache_args.slots = batch.slots.data();
  cache_args.num_tokens = N;
  cache_args.num_kv_heads = d_.n_kv_heads;
  cache_args.head_dim = D;
  cache_args.block_size = cache.block_size();
  cache_args.cache_dtype = cache.spec().dtype;
  PagedAttentionArgs attn_args;
  attn_args.cache_dtype = cache.spec().dtype;
  attn_args.q = qkv;
  attn_args.q_stride = qkv_width;
  attn_args.out = attn;
  attn_args.out_stride = q_width;
  attn_args.block_tables = batch.block_tables.data();
  attn_args.max_blocks = batch.max_blocks;
  attn_args.query_start = batch.query_start.data();
  attn_args.seq_lens = batch.seq_lens.data();
  attn_args.num_seqs = batch.num_seqs();
  attn_args.num_heads = d_.n_heads;
  attn_args.num_kv_heads = d_.n_kv_heads;
  attn_args.head_dim = D;
  attn_args.block_size = cache.block_size();
  attn_args.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  // q heads then k heads: adjacent in a fused row.
  RopeRowsArgs rope{.x = qkv,
                    .ld = qkv_width,
                    .rows = N,
                    .positions = batch.positions.data(),
                    .heads = d_.n_heads + d_.n_kv_heads,
                    .head_dim = D,
                    .cos = ptr(rope_cos_),
                    .sin = ptr(rope_sin_),
                    .q_heads = d_.n_heads,
                    .norm_eps = static_cast<float>(d_.eps)};
  const MlpActivationArgs activation{ff, ff_width, N, d_.hidden, d_.swiglu};
  const Device dev = cache.device();

  for (int64_t l = 0; l < num_layers_; ++l) {
    const Layer& L = layers_[l];
    norm_rows(L.norm1, x, h, N, C, dev);
    linear_rows(dev, L.qkv, h, C, qkv, qkv_width, N);
    add_lora_rows(batch, l, kQkv, h, C, qkv, qkv_width, ws, dev);
    rope.q_norm = ptr(L.q_norm);
    rope.k_norm = ptr(L.k_norm);
    if (rope_cos_.defined()) call_kernel<rope_rows_kernel>(dev, rope);
    cache_args.k = qkv + q_width;
    cache_args.v = qkv + q_width + kv_width;
    cache_args.k_cache = cache.key_data(l);
    cache_args.v_cache = cache.value_data(l);
    attn_args.k_cache = cache_args.k_cache;
    attn_args.v_cache = cache_args.v_cache;
    call_kernel<paged_caching_kernel>(dev, cache_args);
    call_kernel<paged_attention_kernel>(dev, attn_args);
    linear_rows(dev, L.o, attn, q_width, x, C, N, /*accumulate=*/true);  // x += attn W_o^T + b
    add_lora_rows(batch, l, kO, attn, q_width, x, C, ws, dev);

    norm_rows(L.norm2, x, h, N, C, dev);
    if (!L.expert_fc1.empty()) {
      mixture_rows(L, h, x, N, ws, dev);
      continue;
    }
    linear_rows(dev, L.fc1, h, C, ff, ff_width, N);
    add_lora_rows(batch, l, kFc1, h, C, ff, ff_width, ws, dev);
    call_kernel<mlp_activation_kernel>(dev, activation);
    linear_rows(dev, L.fc2, ff, ff_width, x, C, N, /*accumulate=*/true);  // x += mlp(...)
    add_lora_rows(batch, l, kFc2, ff, ff_width, x, C, ws, dev);
  }

  if (hidden) {
    norm_rows(final_norm_, x, hidden, N, C, dev);
    return;
  }
  // Final norm and lm_head only for the rows that sample.
  for (int64_t r = 0; r < R; ++r)
    norm_rows(final_norm_, x + batch.logit_rows[r] * C, h + r * C, 1, C, dev);
  linear_rows(dev, *lm_head_, h, C, logits, vocab_, R);
}

}  // namespace tessera::infer
