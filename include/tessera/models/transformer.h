#pragma once
// Building blocks the decoder-only models share: head reshapes, the causal attention core, RoPE
// tables with Llama-3 scaling, and the CausalLM base (logits, last-position logits, loss).
//
// Each model's attention module projects x to q, k, v, then calls causal_attention; a KV cache
// (a later inference issue) slots in between, appending k, v before the call.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "tessera/core/tensor.h"
#include "tessera/models/config.h"
#include "tessera/models/inference_layout.h"
#include "tessera/models/rope_frequencies.h"
#include "tessera/nn/module.h"

namespace tessera::dist {
class ProcessGroup;
}

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

// Rotary position tables for a LLaMA model: cos and sin of t * inv_freq[i] (rope_inv_freq), each
// times rope_attention_factor, [max_seq_len, head_dim / 2] float32, held as non-persistent
// buffers (they follow to() but stay out of the state dict).
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
//
// The forward pass comes in pieces so that pipeline stages can run parts of it:
//   forward(idx) = head(layers(embed(idx), 0, n_layers())).
// Under tensor parallelism (shard_tensor_parallel) each rank holds slices of the weights and the
// logits are this rank's slice of the (padded) vocabulary; loss() then uses the vocab-parallel
// cross-entropy. With sequence parallelism the hidden states between the pieces are this rank's
// slice of the sequence.
class CausalLM : public nn::Module {
 public:
  // idx [B, T] int64 with T <= max_seq_len() -> logits [B, T, V]; with last_only, only the
  // last position's logits [B, 1, V] (what sampling needs, without the [B, T, V] matmul).
  Tensor forward(const Tensor& idx, bool last_only = false);
  Tensor operator()(const Tensor& idx, bool last_only = false) { return forward(idx, last_only); }
  // idx [B, T] -> the hidden states entering layer 0.
  virtual Tensor embed(const Tensor& idx) = 0;
  // Layers [begin, end) applied to hidden states x.
  virtual Tensor layers(const Tensor& x, int64_t begin, int64_t end) = 0;
  // The final norm and the output projection: hidden states -> logits.
  virtual Tensor head(const Tensor& x) = 0;
  virtual int64_t n_layers() const = 0;
  // Paths (as in named_modules) of the submodules that run layers [begin, end): the embedding
  // when begin is 0, the final norm and output projection when end is n_layers(). Pipeline
  // stages register exactly these (see pipeline_stage.h).
  virtual std::vector<std::string> stage_module_paths(int64_t begin, int64_t end) const = 0;
  // Mean next-token cross entropy of forward(idx) against targets [B, T] int64; targets of -1
  // are ignored (nanoGPT's convention). Plus auxiliary_loss() when the model has one.
  Tensor loss(const Tensor& idx, const Tensor& targets);
  // A loss term of the last forward that training adds to the cross entropy (a mixture of
  // experts' load balancing), or undefined (dense models, evaluation).
  virtual Tensor auxiliary_loss() const { return {}; }
  // Whether training this model adds an auxiliary loss (parallel schemes that cannot carry one
  // refuse such models).
  virtual bool has_auxiliary_loss() const { return false; }
  // The same from logits (head's output).
  Tensor loss_from_logits(const Tensor& logits, const Tensor& targets) const;
  virtual int64_t vocab_size() const = 0;
  virtual int64_t max_seq_len() const = 0;
  // The block structure and weights an inference runner executes (tensors alias the model's).
  virtual InferenceLayout inference_layout() const = 0;
  // With activation checkpointing on, training forwards keep only each block's input and
  // recompute the block in backward (less memory, one more forward of compute).
  void set_activation_checkpointing(bool on) { activation_checkpointing_ = on; }
  bool activation_checkpointing() const { return activation_checkpointing_; }

  // Tensor parallelism: replaces the model's weights by this rank's slices of them (Megatron's
  // split: attention by heads, MLPs by hidden units, the vocabulary padded to a multiple of the
  // group size), cut from the current (full) weights, so the sharded model computes what the
  // whole one did. With sequence_parallel, activations outside the attention and MLP regions
  // are split along the sequence (T must divide by the group size). ValueError when the heads
  // (or KV heads) do not divide by the group size, or with dropout.
  void shard_tensor_parallel(std::shared_ptr<dist::ProcessGroup> group,
                             bool sequence_parallel = false);
  // Null while the model is whole.
  const std::shared_ptr<dist::ProcessGroup>& tensor_parallel_group() const { return tp_group_; }
  bool sequence_parallel() const { return sequence_parallel_; }

 protected:
  // The model-specific part of shard_tensor_parallel (the group has more than one rank).
  virtual void shard_layers(const std::shared_ptr<dist::ProcessGroup>& group,
                            bool sequence_parallel) = 0;
  // block(x), checkpointed when activation checkpointing is on and the model is training.
  Tensor run_block(const std::function<Tensor(const Tensor&)>& block, const Tensor& x) const;
  // ValueError naming op unless idx is a [B, T] int64 tensor with 1 <= T <= max_seq_len().
  void check_input(const Tensor& idx, std::string_view op) const;
  // The full sequence length of hidden states x [B, T or T / tp, C].
  int64_t sequence_length(const Tensor& x) const;
  // Under sequence parallelism, the first position of this rank's slice of a sequence of
  // length T (0 otherwise).
  int64_t sequence_offset(int64_t T) const;
  // ValueError naming op when the model is sharded (inference runs whole models).
  void check_whole(std::string_view op) const;

 private:
  bool activation_checkpointing_ = false;
  std::shared_ptr<dist::ProcessGroup> tp_group_;
  bool sequence_parallel_ = false;
};

}  // namespace tessera::models
