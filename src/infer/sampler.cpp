#include "tessera/infer/sampler.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>

#include "backend/cpu/vec16.h"
#include "tessera/core/error.h"
#include "tessera/core/generator.h"
#include "tessera/ops/creation.h"

namespace tessera::infer {

void SamplingParams::validate() const {
  models::check_sampling_options(*this);
  auto bad = [](const char* field, const char* want, double got) {
    return ValueError(detail::str("[SamplingParams] expected ", field, " ", want, ", got ", got));
  };
  if (!(min_p >= 0.0 && min_p <= 1.0)) throw bad("min_p", "in [0, 1]", min_p);
  // Applied in float: a larger one is inf there, and 0 * inf a NaN logit.
  if (!(repetition_penalty > 0.0 && repetition_penalty <= std::numeric_limits<float>::max()))
    throw bad("repetition_penalty", "in (0, 3.4e38]", repetition_penalty);
  if (!(presence_penalty >= -2.0 && presence_penalty <= 2.0))
    throw bad("presence_penalty", "in [-2, 2]", presence_penalty);
  if (!(frequency_penalty >= -2.0 && frequency_penalty <= 2.0))
    throw bad("frequency_penalty", "in [-2, 2]", frequency_penalty);
  for (const auto& [token, bias] : logit_bias) {
    if (token < 0) throw bad("logit_bias token ids", ">= 0", token);
    if (!(bias >= -100.0f && bias <= 100.0f))
      throw bad("logit_bias values", "in [-100, 100]", bias);
  }
}

RowSampling RowSampling::of(const SamplingParams& params, uint64_t seed, uint64_t step) {
  const std::array<uint32_t, 4> r = philox(seed, step);
  return {.temperature = params.greedy() ? 0.0 : params.temperature,
          .top_k = params.top_k,
          .top_p = params.top_p,
          .min_p = params.min_p,
          .u = uint_to_unit_double(r[0], r[1])};
}

int32_t argmax(std::span<const float> logits) {
  // The max first (16 lanes at a time), then its first index. NaN logits are skipped, as
  // torch's argmax would not (they do not occur in a finite model).
  using namespace tessera::detail;
  const size_t n = logits.size();
  float best = -std::numeric_limits<float>::infinity();
  size_t i = 0;
  if (n >= 16) {
    V16 m = vset1(best);  // vmax(x, m) is m where x is NaN
    for (; i + 16 <= n; i += 16) m = vmax(vload(logits.data() + i), m);
    best = vreduce_max(m);
  }
  for (; i < n; ++i) best = logits[i] > best ? logits[i] : best;
  for (i = 0; i < n; ++i)
    if (logits[i] == best) return static_cast<int32_t>(i);
  return 0;
}

Sampler::Sampler(int64_t vocab_size) : vocab_(vocab_size) {
  TESSERA_CHECK(vocab_size > 0, ValueError, "[Sampler] expected a positive vocabulary size, got ",
                vocab_size);
  counts_.assign(vocab_size, 0);
}

void Sampler::apply_penalties(std::span<float> logits, const SamplingParams& p,
                              std::span<const int32_t> prompt, std::span<const int32_t> output) {
  // counts_ marks tokens: output occurrences counted, prompt-only tokens as -1; reset after.
  auto mark = [&](int32_t t) {
    if (t >= 0 && t < vocab_ && counts_[t] == 0) counts_[t] = -1;
  };
  for (int32_t t : output)
    if (t >= 0 && t < vocab_) counts_[t] = std::max(counts_[t], 0) + 1;
  if (p.repetition_penalty != 1.0)
    for (int32_t t : prompt) mark(t);
  const float rep = static_cast<float>(p.repetition_penalty);
  const float presence = static_cast<float>(p.presence_penalty);
  const float frequency = static_cast<float>(p.frequency_penalty);
  auto apply = [&](int32_t t) {
    if (counts_[t] == 0) return;  // seen twice in the lists: already applied and reset
    float& z = logits[t];
    if (rep != 1.0f) z = z > 0.0f ? z / rep : z * rep;
    if (counts_[t] > 0) z -= presence + frequency * static_cast<float>(counts_[t]);
    counts_[t] = 0;
  };
  for (int32_t t : output)
    if (t >= 0 && t < vocab_) apply(t);
  for (int32_t t : prompt)
    if (t >= 0 && t < vocab_) apply(t);
}

int32_t Sampler::sample(std::span<float> logits, const SamplingParams& p, uint64_t seed,
                        uint64_t step, std::span<const int32_t> prompt,
                        std::span<const int32_t> output) {
  TESSERA_CHECK(static_cast<int64_t>(logits.size()) == vocab_, ValueError,
                "[Sampler.sample] expected ", vocab_, " logits, got ", logits.size());
  for (const auto& [token, bias] : p.logit_bias) {
    TESSERA_CHECK(token >= 0 && token < vocab_, IndexError,
                  "[Sampler.sample] expected logit_bias "
                  "token ids in [0, ",
                  vocab_, "), got ", token);
    logits[static_cast<size_t>(token)] += bias;
  }
  if (p.penalized()) apply_penalties(logits, p, prompt, output);
  if (p.greedy()) return argmax(logits);

  std::vector<double> probs =
      models::sampling_probs(tensor(std::vector<float>(logits.begin(), logits.end())), p);
  if (p.min_p > 0.0) {  // relative to the most likely token; renormalised by the draw below
    const double floor = p.min_p * *std::max_element(probs.begin(), probs.end());
    for (double& q : probs)
      if (q < floor) q = 0.0;
  }
  const double total = std::accumulate(probs.begin(), probs.end(), 0.0);
  const std::array<uint32_t, 4> r = philox(seed, step);
  return models::draw_from_probs(probs, uint_to_unit_double(r[0], r[1]) * total);
}

}  // namespace tessera::infer
