#pragma once
// Per-token log probabilities for the engine's outputs (OpenAI's logprobs / top_logprobs). They
// are the model's raw distribution, log_softmax(logits) before temperature, penalties, top-k/p
// or min-p, as vLLM reports by default: what the model thinks of each token, comparable across
// sampling settings. Computed only for requests that ask (GenerationParams::logprobs >= 0).
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace tessera::infer {

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;                        // of token
  std::vector<std::pair<int32_t, float>> top;  // the k most likely (id, logprob), best first
};

// log_softmax(logits)[token] and the top k entries (ties: lower id first), in double
// internally. ValueError "[token_logprobs] expected ..." for an
// empty span, a token out of range or k < 0.
TokenLogprob token_logprobs(std::span<const float> logits, int32_t token, int64_t k);

}  // namespace tessera::infer
