#pragma once
// Small randomly initialised models for tests of the inference runner (CPU and CUDA): a GQA
// LLaMA with RoPE scaling and a GPT-2, each from a fixed seed, so two calls build equal weights.
#include <cstdint>
#include <memory>

#include "tessera/models/gpt2.h"
#include "tessera/models/llama.h"

namespace tessera::testing {

inline std::shared_ptr<models::CausalLM> small_llama(int64_t max_seq_len = 80) {
  models::LlamaConfig c;
  c.vocab_size = 61;
  c.dim = 48;
  c.n_layers = 2;
  c.n_heads = 6;
  c.n_kv_heads = 2;
  c.hidden_dim = 72;
  c.max_seq_len = max_seq_len;
  c.rope_scaling = models::RopeScaling{8.0, 1.0, 4.0, 32};
  manual_seed(11);
  return std::make_shared<models::Llama>(c);
}

inline std::shared_ptr<models::CausalLM> small_gpt2(int64_t block_size = 80, int64_t n_embd = 40) {
  models::GPT2Config c;
  c.vocab_size = 70;
  c.block_size = block_size;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = n_embd;
  manual_seed(12);
  return std::make_shared<models::GPT2>(c);
}

}  // namespace tessera::testing
