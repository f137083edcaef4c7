#pragma once
// Sampling from a causal language model: the next-token distribution of one row of logits under
// temperature, top-k and top-p (nucleus) filtering, a seeded draw from it, and a plain
// generation loop.
//
// The loop recomputes the forward pass over the whole window for every new token (no KV cache):
// O(T^2) work per sequence, fine for small models and short outputs. The inference engine
// replaces `generate` with a cached version; the sampler stays.
//
//   models::SamplingOptions opt{.temperature = 0.8, .top_k = 40};
//   Generator gen(1337);
//   models::generate(model, prompt_ids, 200, opt, &gen, [&](int32_t id) {
//     std::cout << tokenizer.token_to_string(id) << std::flush;
//     return true;  // false stops early
//   });
#include <cstdint>
#include <functional>
#include <vector>

#include "tessera/core/generator.h"
#include "tessera/core/tensor.h"
#include "tessera/models/transformer.h"

namespace tessera::models {

struct SamplingOptions {
  double temperature = 1.0;  // 0: greedy (the argmax, first on ties)
  int64_t top_k = 0;         // keep only the k most likely tokens; 0: no limit
  double top_p = 1.0;        // keep the smallest most-likely set whose probability reaches top_p
};

// ValueError "[sample] expected ..." unless temperature >= 0 (and finite), top_k >= 0 and
// 0 < top_p <= 1.
void check_sampling_options(const SamplingOptions& options);

// The distribution sample_token draws from, in float64: softmax(logits / temperature) with the
// tokens outside the top-k and the top-p set zeroed and the rest renormalised; one-hot at the
// argmax for temperature 0. logits: a floating tensor of V elements ([V], [1, V] or [1, 1, V]).
// ValueError when logits are empty, not floating, or hold a NaN.
std::vector<double> sampling_probs(const Tensor& logits, const SamplingOptions& options);

// The id whose interval of the inverse CDF (in id order) holds u, 0 <= u < sum(probs); rounding
// may leave the total a hair below u, hence the fallback to the last id with non-zero weight.
int32_t draw_from_probs(const std::vector<double>& probs, double u);

// Draws a token id from sampling_probs(logits, options) by inverse CDF with one uniform number
// from gen (the default generator when null; temperature 0 draws nothing).
int32_t sample_token(const Tensor& logits, const SamplingOptions& options,
                     Generator* gen = nullptr);

// Called with each new token; returning false stops generation after it.
using TokenCallback = std::function<bool(int32_t id)>;

// Appends up to max_new_tokens sampled tokens to prompt (non-empty; ValueError otherwise) and
// returns the whole sequence. Each step runs model(last max_seq_len() tokens, last_only) in
// inference mode and eval mode (the model's training flag is restored afterwards).
std::vector<int32_t> generate(CausalLM& model, std::vector<int32_t> prompt, int64_t max_new_tokens,
                              const SamplingOptions& options, Generator* gen = nullptr,
                              const TokenCallback& on_token = {});

}  // namespace tessera::models
