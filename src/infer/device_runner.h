#pragma once
// ModelRunner's forward on an accelerator (CUDA): the same fused step as the CPU path, built
// from library ops on device tensors (linear on cuBLASLt, layer_norm / rms_norm, rope, gelu /
// swiglu) and the paged caching / attention kernels called with device pointers. Per step, the
// batch's small host arrays go to the device in one staged copy, and only the logits of the
// sampled rows (or just their argmax ids) come back; everything else stays on the device. Only
// registered kernels and library ops are called, so it runs on the CPU too (the tests' way to
// check it without a GPU).
#include <cstdint>
#include <span>
#include <vector>

#include "infer/device_sampler.h"
#include "tessera/infer/kv_cache.h"
#include "tessera/infer/model_runner.h"
#include "tessera/models/inference_layout.h"

namespace tessera::infer::detail {

class DeviceRunner {
 public:
  // Holds the layout's weights (float32, all on device; TypeError otherwise), with q|k|v and
  // gate|up concatenated once into single projections.
  DeviceRunner(const models::InferenceLayout& layout, Device device);

  // The forward of a batch ModelRunner validated, over a cache on this device: writes each
  // token's keys and values at its slot and returns the logits of batch.logit_rows, [rows,
  // vocab] in host memory (valid until the next call).
  std::span<const float> forward(const StepBatch& batch, const KVCache& cache);
  // The same forward, returning each logit row's argmax (lowest id on ties), taken on the
  // device: [rows] in host memory (valid until the next call).
  std::span<const int32_t> greedy_tokens(const StepBatch& batch, const KVCache& cache);
  // The same forward, returning each logit row's token drawn on the device as its RowSampling
  // says (sample_rows): [rows] in host memory (valid until the next call).
  std::span<const int32_t> sample_tokens(const StepBatch& batch, const KVCache& cache,
                                         std::span<const RowSampling> rows);

 private:
  struct Norm {
    Tensor weight, bias;  // bias undefined for RMSNorm (and bias-free LayerNorm)
  };
  struct Linear {
    Tensor weight, bias;  // [out, in] and [out] or undefined
  };
  struct Layer {
    Norm norm1, norm2;
    Linear qkv, o, fc1, fc2;
    Tensor q_norm, k_norm;  // Qwen3's query and key head norms, or undefined
  };
  // Word offsets of the step's arrays in staged_ (int32 words; slots are int64 pairs).
  struct StepLayout {
    int64_t slots, tokens, positions, query_start, seq_lens, block_tables, logit_rows, words;
  };

  Tensor weight(const Tensor& t, const char* what) const;
  Linear fused(const models::InferenceLayout::Linear& l) const;
  Tensor norm(const Norm& n, const Tensor& x) const;
  static Tensor linear(const Tensor& x, const Linear& l);
  // table rows at the staged int32 indices [offset, offset + n): [n, table.size(1)].
  Tensor rows(const Tensor& table, int64_t offset, int64_t n) const;
  // Packs the batch's arrays into host_ and copies them to staged_ in one transfer.
  StepLayout stage(const StepBatch& batch);
  // The step: the logits of batch.logit_rows, [rows, vocab] on the device (undefined when no row
  // samples). The caller holds the device current and gradients off.
  Tensor logits(const StepBatch& batch, const KVCache& cache);
  // ids [rows] int64 on the device into tokens_.
  std::span<const int32_t> tokens_to_host(const Tensor& ids);

  Device device_;
  models::InferenceLayout::Dims d_;
  Tensor wte_, wpe_, rope_cos_, rope_sin_, lm_head_;  // wpe for GPT-2, rope tables for LLaMA
  std::vector<Layer> layers_;
  Norm final_norm_;
  Tensor host_;    // int32 host staging buffer (pageable: the copy returns once it is read)
  Tensor staged_;  // its device copy
  // Logits come back to pinned memory (grown geometrically): at [64, 50257] a pageable copy
  // would take milliseconds. On the CPU they are host memory already and held as they are.
  Tensor pinned_logits_;
  Tensor host_logits_;  // forward()'s result
  std::vector<int32_t> tokens_;  // greedy_tokens()'s and sample_tokens()'s result
};

}  // namespace tessera::infer::detail
