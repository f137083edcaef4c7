#pragma once
// Building blocks the decoder-only models share: head reshapes, the causal attention core, RoPE
// tables with Llama-3 scaling, and the CausalLM base (logits, last-position logits, loss).
//
// Each model's attention module projects x to q, k, v, then calls causal_attention; a KV cache
// (a later inference issue) slots in between, appending k, v before the call.
#include <cstdint>
#include <functional>
#include <optional>
#include <tuple>
#include <vector>

#include "tessera/core/tensor.h"
#include "tessera/models/config.h"
#include "tessera/models/inference_layout.h"
#include "tessera/nn/module.h"

namespace tessera::models {

// [B, T, H * D] -> [B, H, T, D] (a view permuted, not copied).
Tensor split_heads(const Tensor& x, int64_t n_heads);
// [B, H, T, D] -> [B, T, H * D].
Tensor merge_heads(const Tensor& x);

// softmax(q k^T / sqrt(D) + causal mask) v for q [B, Hq, T, D], k and v [B, Hkv, T, D] with
// Hq % Hkv == 0 (grouped-query attention). With dropout_p > 0 in training, the probabilities
// are dropped out (as torch's scaled_dot_product_attention(dropout_p)) on an explicit composite
// path; otherwise the fused scaled_dot_product_attention runs.
Tensor causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, double dropout_p = 0.0,
                        bool training = false);

// RoPE inverse frequencies theta^(-2i / head_dim), i < head_dim / 2, rescaled by Llama 3.1's
// rule when scaling is given (see RopeScaling), in double.
std::vector<double> rope_inv_freq(int64_t head_dim, double theta,
                                  const std::optional<RopeScaling>& scaling = std::nullopt);

// Rotary position tables for a LLaMA model: cos and sin of t * inv_freq[i], [max_seq_len,
// head_dim / 2] float32, held as non-persistent buffers (they follow to() but stay out of the
// state dict).
class RotaryEmbedding : public nn::Module {
 public:
  RotaryEmbedding(int64_t head_dim, int64_t max_seq_len, double theta,
                  const std::optional<RopeScaling>& scaling = std::nullopt);
  // Rows [start, start + length) of (cos, sin); IndexError beyond max_seq_len.
  std::tuple<Tensor, Tensor> tables(int64_t start, int64_t length) const;
  std::string extra_repr() const override;

  int64_t head_dim, max_seq_len;
  Tensor cos, sin;
};

// A decoder-only language model mapping token ids to next-token logits.
class CausalLM : public nn::Module {
 public:
  // idx [B, T] int64 with T <= max_seq_len() -> logits [B, T, V]; with last_only, only the
  // last position's logits [B, 1, V] (what sampling needs, without the [B, T, V] matmul).
  virtual Tensor forward(const Tensor& idx, bool last_only = false) = 0;
  Tensor operator()(const Tensor& idx, bool last_only = false) { return forward(idx, last_only); }
  // Mean next-token cross entropy of forward(idx) against targets [B, T] int64; targets of -1
  // are ignored (nanoGPT's convention).
  Tensor loss(const Tensor& idx, const Tensor& targets);
  virtual int64_t vocab_size() const = 0;
  virtual int64_t max_seq_len() const = 0;
  // The block structure and weights an inference runner executes (tensors alias the model's).
  virtual InferenceLayout inference_layout() const = 0;
  // With activation checkpointing on, training forwards keep only each block's input and
  // recompute the block in backward (less memory, one more forward of compute).
  void set_activation_checkpointing(bool on) { activation_checkpointing_ = on; }
  bool activation_checkpointing() const { return activation_checkpointing_; }

 protected:
  // block(x), checkpointed when activation checkpointing is on and the model is training.
  Tensor run_block(const std::function<Tensor(const Tensor&)>& block, const Tensor& x) const;
  // ValueError naming op unless idx is a [B, T] int64 tensor with 1 <= T <= max_seq_len().
  void check_input(const Tensor& idx, std::string_view op) const;

 private:
  bool activation_checkpointing_ = false;
};

}  // namespace tessera::models
