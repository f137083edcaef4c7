#pragma once
// Next-token sampling for the engine, built on models::sampling_probs (temperature, top-k,
// top-p): logit biases and then repetition / presence / frequency penalties are applied to the
// logits first (vLLM's order) and min-p filtering to the probabilities after. Each request carries
// its own seed and draws its u ~ U[0, 1) for step i from Philox(seed, i), so a request's samples
// never depend on the other requests in a batch or on scheduling. Greedy decoding (temperature 0)
// is an argmax that allocates nothing.
//
//   infer::SamplingParams p;
//   p.temperature = 0.8; p.top_p = 0.95; p.min_p = 0.05; p.seed = 7;
//   infer::Sampler sampler(vocab_size);
//   int32_t next = sampler.sample(logits, p, seed, step, prompt, output);
#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "tessera/models/sampling.h"

namespace tessera::infer {

// temperature (0: greedy, argmax with the lowest id on ties), top_k (0: all) and top_p from
// models::SamplingOptions, plus:
struct SamplingParams : models::SamplingOptions {
  double min_p = 0.0;               // drop tokens less likely than min_p * the top one; [0, 1]
  double repetition_penalty = 1.0;  // > 0: logits of tokens in prompt or output are divided by
                                    // it when positive, multiplied when negative (CTRL / HF)
  double presence_penalty = 0.0;    // [-2, 2]: subtracted once from tokens already generated
  double frequency_penalty = 0.0;   // [-2, 2]: subtracted per occurrence in the output
  std::optional<uint64_t> seed;     // unset: the engine picks one
  // (token, bias in [-100, 100]) added to the token's logit (OpenAI's logit_bias; -100 in
  // effect bans it). A token listed twice gets both.
  std::vector<std::pair<int32_t, float>> logit_bias;

  bool greedy() const { return temperature == 0.0 || top_k == 1; }
  bool penalized() const {
    return repetition_penalty != 1.0 || presence_penalty != 0.0 || frequency_penalty != 0.0;
  }
  // Penalties or biases change the logits before the draw.
  bool edits_logits() const { return penalized() || !logit_bias.empty(); }
  // Whether the sample is argmax(logits) of the model's unedited logits (greedy, no penalty or
  // bias; min_p, top-k and top-p cannot move an argmax), so a runner may take it where they live.
  bool raw_argmax() const { return greedy() && !edits_logits(); }
  // ValueError "[sample] expected ..." / "[SamplingParams] expected ..." naming the first field
  // out of range.
  void validate() const;
};

// What a runner needs to draw one row's token where its logits are (ModelRunner::sample_tokens):
// the row's settings and its uniform draw, as Sampler::sample takes them.
struct RowSampling {
  double temperature = 1.0;  // 0: the argmax (lowest id on ties)
  int64_t top_k = 0;
  double top_p = 1.0;
  double min_p = 0.0;
  double u = 0.0;  // the row's uniform draw in [0, 1): philox(seed, step)

  // For Sampler::sample(logits, params, seed, step, ...) of an unpenalized params.
  static RowSampling of(const SamplingParams& params, uint64_t seed, uint64_t step);
};

// Stateless apart from scratch buffers sized to the vocabulary (one per engine).
class Sampler {
 public:
  explicit Sampler(int64_t vocab_size);
  // The next token from logits [vocab] (modified in place by biases and penalties; IndexError
  // for a biased token outside the vocabulary), for a sequence with
  // the given prompt and output so far; step is the index of the token being drawn
  // (output.size() in a plain generation loop).
  int32_t sample(std::span<float> logits, const SamplingParams& params, uint64_t seed,
                 uint64_t step, std::span<const int32_t> prompt, std::span<const int32_t> output);

 private:
  void apply_penalties(std::span<float> logits, const SamplingParams& params,
                       std::span<const int32_t> prompt, std::span<const int32_t> output);
  int64_t vocab_;
  std::vector<int32_t> counts_;  // per-token counts, zero between calls
};

// First index of the largest value (torch.argmax's tie rule).
int32_t argmax(std::span<const float> logits);

}  // namespace tessera::infer
