#pragma once
// The inference forward pass of a decoder-only model (GPT-2, LLaMA or Mixtral, float32) over a
// flattened batch of tokens from many sequences, some in prefill and some in decode, in one
// pass: every linear layer runs once over all N tokens (the batching win), attention runs per
// sequence over its cached keys (infer::paged_attention's kernel), and logits are computed only
// for the rows that sample.
//
// The models' own forward (models::GPT2 / models::Llama) is the composite oracle; this is the
// fused path: weights repacked once for a register-tiled GEMM, fused QKV and gate/up
// projections, residual adds fused into the output projections, and preallocated buffers, so a
// decode step allocates nothing. Its GEMM, norm, rotary and activation steps are registered
// kernels (backend/common/inference_kernels.h) called with the cache's device. Each token's
// arithmetic is independent of the other tokens in the batch, so results are bit-identical whatever
// the batch. When the weights fit in a core's L2 cache (small models, whose steps are too short for
// per-op threading), a batch of several sequences is split in two halves that run the whole forward
// on two threads, one fork per step.
//
// A model on a CUDA device runs on that device instead (detail::DeviceRunner,
// src/infer/device_runner.cpp): library ops on device tensors plus the paged kernels, with the
// cache on the same device and only the step's index arrays and the sampled rows' logits (or,
// from greedy_tokens(), just their argmax ids) crossing to and from the host.
//
//   infer::ModelRunner runner(model);
//   infer::StaticKVCache cache(runner.kv_spec(), 256);
//   infer::StepBatch batch;
//   batch.add_sequence(prompt, /*start=*/0, cache.table(), cache.block_size(), true);
//   std::span<const float> logits = runner.forward(batch, cache);  // [1, V]
#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "tessera/infer/kv_cache.h"
#include "tessera/infer/sampler.h"
#include "tessera/models/transformer.h"
#include "tessera/nn/lora.h"

namespace tessera {
struct PackedLinearWeights;
}  // namespace tessera

namespace tessera::infer {

namespace detail {
class DeviceRunner;
}  // namespace detail

// The tokens of one step. Build with clear() + add_sequence() per sequence; vectors keep their
// capacity between steps.
struct StepBatch {
  std::vector<int32_t> tokens;        // [N]
  std::vector<int32_t> positions;     // [N]
  std::vector<int64_t> slots;         // [N] cache slot of each token's K/V
  std::vector<int32_t> query_start;   // [S + 1] rows of sequence s
  std::vector<int32_t> seq_lens;      // [S] positions cached after this step
  std::vector<int32_t> block_tables;  // [S, max_blocks], padded with 0
  int64_t max_blocks = 0;
  std::vector<int32_t> logit_rows;  // rows whose next-token logits forward() returns, in order
  std::vector<int32_t> lora_ids;    // [S] each sequence's adapter (ModelRunner::add_lora), 0: none

  void clear();
  // Appends a sequence's tokens at positions start, start + 1, ...; table must already cover
  // them. With want_logits, the last token's row is added to logit_rows. lora_id: the adapter
  // its tokens run through (0: the base model).
  void add_sequence(std::span<const int32_t> new_tokens, int64_t start, const BlockTable& table,
                    int64_t block_size, bool want_logits, int32_t lora_id = 0);
  // Sequences [s0, s1) of this batch as a batch of their own, into out (its capacity reused).
  void slice(int64_t s0, int64_t s1, StepBatch& out) const;
  int64_t num_tokens() const { return static_cast<int64_t>(tokens.size()); }
  int64_t num_seqs() const { return static_cast<int64_t>(seq_lens.size()); }
};

class ModelRunner {
 public:
  // Takes the weights the model's inference_layout() lists (float32), on the model's device: on
  // the CPU the linear layers are repacked and embeddings and norms held by reference; on a CUDA
  // device the fused projections are concatenated there. Later changes to the model's
  // parameters are not seen. TypeError for other dtypes or weights on mixed devices.
  // weight_dtype bfloat16 keeps the CPU's packed linear weights (lm_head included) in bfloat16,
  // rounded to nearest even: half the bytes a decode step streams (vLLM's --dtype, for the
  // weights only); int8 quantizes them per output channel, symmetric (scale = max |W[o, :]| /
  // 127): a quarter of the bytes. The arithmetic stays float32 either way. TypeError for other
  // dtypes, NotImplementedError on a CUDA device.
  explicit ModelRunner(const models::CausalLM& model, DType weight_dtype = kFloat32);
  ~ModelRunner();
  ModelRunner(const ModelRunner&) = delete;
  ModelRunner& operator=(const ModelRunner&) = delete;

  // The cache shape this model needs, with elements of dtype (float32 or bfloat16).
  KVCacheSpec kv_spec(DType dtype = kFloat32) const {
    return {num_layers_, d_.n_kv_heads, d_.head_dim, dtype};
  }
  int64_t vocab_size() const { return vocab_; }
  int64_t max_seq_len() const { return max_seq_; }
  // Where the forward runs (the model's device); caches passed to forward() must be there.
  Device device() const { return device_; }

  // Runs the batch: writes each token's keys and values into cache at its slot, and returns the
  // logits of batch.logit_rows as [rows, vocab] on the host (valid until the next call).
  // IndexError for positions at or beyond max_seq_len() or out-of-vocabulary tokens; ValueError
  // for a cache of another shape or device.
  std::span<const float> forward(const StepBatch& batch, const KVCache& cache);
  // The same forward, returning the argmax of each of those rows (lowest id on ties, as
  // infer::argmax), [rows] on the host: the tokens of a step whose rows all sample by
  // SamplingParams::raw_argmax(). On a device the argmax runs there and only the ids come back.
  std::span<const int32_t> greedy_tokens(const StepBatch& batch, const KVCache& cache);
  // The same forward, returning each row's token drawn as rows[r] says, with Sampler::sample's
  // distribution and pick (no penalties): [rows] on the host. On a device the draw runs there
  // (float64 softmax, sort, cumsum) and only the ids come back.
  std::span<const int32_t> sample_tokens(const StepBatch& batch, const KVCache& cache,
                                         std::span<const RowSampling> rows);
  // The same forward, returning every token's last hidden state after the final norm,
  // [num_tokens, hidden_size()] (what embeddings pool), instead of logits. CPU models only
  // (ValueError on a device); logit_rows is ignored.
  std::span<const float> hidden_states(const StepBatch& batch, const KVCache& cache);
  int64_t hidden_size() const { return d_.dim; }

  // Registers a LoRA adapter (nn::LoraAdapter: weights named by module path, as the model's
  // state dict) for batches to name in StepBatch::lora_ids; returns its id (1, 2, ...). Each
  // step computes the base layers once for all rows and adds scaling * (x A^T) B^T to the rows
  // of the sequences that name an adapter, batched over consecutive sequences naming the same
  // one: rows still do not depend on the rest of the batch. ValueError naming the entry for a
  // layer the runner has no projection for (embeddings, lm_head) or of other shapes;
  // NotImplementedError on a CUDA device.
  int32_t add_lora(const nn::LoraAdapter& adapter);
  int32_t num_loras() const { return static_cast<int32_t>(loras_.size()); }

 private:
  struct Norm {
    Tensor weight, bias;  // bias undefined for RMSNorm (and bias-free LayerNorm)
  };
  struct Layer;
  // The four projections of a layer, indexing an adapter's per-layer pieces.
  enum Projection { kQkv, kO, kFc1, kFc2, kNumProjections };
  // One adapted weight of a (possibly stacked) projection: y[:, offset:offset + B's rows] +=
  // (x A^T) (scaling B)^T.
  struct LoraPiece {
    std::shared_ptr<PackedLinearWeights> a, b;
    int64_t offset = 0, rank = 0;
  };
  // An adapter's pieces, [layer][projection].
  using LoraWeights = std::vector<std::array<std::vector<LoraPiece>, kNumProjections>>;
  // Consecutive sequences of a batch naming one adapter: their rows.
  struct LoraRun {
    int64_t first_row = 0, rows = 0;
    int32_t id = 0;
  };
  // One thread's buffers, grown to the largest batch seen.
  struct Workspace {
    StepBatch part;  // its half of a split batch
    std::vector<float> x, h, qkv, attn, ff;
    std::vector<float> lora;  // x A^T of each run's rows, max_lora_rank_ floats per row
    std::vector<LoraRun> lora_runs;
    // A mixture of experts' step: router scores [N, E], each row's picks (expert and weight,
    // [N, K]), the picks grouped by expert (expert_count: prefix sums), and an expert's rows.
    std::vector<float> router, expert_weight, expert_x, expert_y;
    std::vector<int32_t> expert_of;
    std::vector<int64_t> expert_count, expert_next, expert_picks;
  };
  // The final or a layer's norm of rows of x (ldx apart) into y, on the cache's device.
  void norm_rows(const Norm& n, const float* x, float* y, int64_t rows, int64_t ldx,
                 Device device) const;
  // x += the mixture of experts of layer L over N rows of h (its normed input), on device.
  void mixture_rows(const Layer& L, const float* h, float* x, int64_t N, Workspace& ws,
                    Device device) const;
  // ValueError / IndexError unless batch and cache fit this model (op names the caller).
  void check(const StepBatch& batch, const KVCache& cache, const char* op) const;
  // forward() of a validated batch on the CPU.
  std::span<const float> cpu_logits(const StepBatch& batch, const KVCache& cache);
  // The forward of a validated batch, logits of its logit_rows into logits, or with hidden set,
  // all rows' final-normed hidden states into it instead.
  void run(const StepBatch& batch, const KVCache& cache, Workspace& ws, float* logits,
           float* hidden = nullptr) const;
  // The first sequence of the second half when the batch is worth splitting across two
  // threads, else 0.
  int64_t split_point(const StepBatch& batch) const;
  // Adds the LoRA branches of projection p of layer l (input x, ldx apart) to y (ldy apart) for
  // the batch's sequences that name an adapter.
  void add_lora_rows(const StepBatch& batch, int64_t l, Projection p, const float* x, int64_t ldx,
                     float* y, int64_t ldy, Workspace& ws, Device device) const;

  Device device_ = kCPU;
  std::unique_ptr<detail::DeviceRunner> device_runner_;  // set on CUDA devices
  models::InferenceLayout::Dims d_;
  int64_t num_layers_ = 0;
  int64_t vocab_ = 0, max_seq_ = 0;
  Tensor wte_, wpe_, rope_cos_, rope_sin_;  // wpe for GPT-2, rope tables for LLaMA
  std::vector<Layer> layers_;
  // Where each projection weight of the layout sits: module path -> (layer, projection, offset
  // of its outputs, its [out, in]).
  struct LoraTarget {
    int64_t layer = 0;
    Projection projection = kQkv;
    int64_t offset = 0, out = 0, in = 0;
  };
  std::unordered_map<std::string, LoraTarget> lora_targets_;
  std::vector<LoraWeights> loras_;
  int64_t max_lora_rank_ = 0;
  Norm final_norm_;
  std::unique_ptr<PackedLinearWeights> lm_head_;
  int64_t weight_bytes_ = 0;  // of the layers' packed linears
  int64_t weight_macs_ = 0;   // their multiply-adds per token (the chosen experts only)
  Workspace workspaces_[2];
  std::vector<float> logits_, hidden_states_;
  std::vector<int32_t> tokens_;  // greedy_tokens()'s and sample_tokens()'s result
};

}  // namespace tessera::infer
