// The engine's sampler (infer::Sampler on models::sampling_probs): greedy ties, top-k / top-p /
// min-p supports, temperature against the softmax it should draw from, repetition / presence /
// frequency penalties, per-request seeds, validation; and TextStream's stop strings.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "tessera/infer/sampler.h"
#include "tessera/infer/stopping.h"
#include "tessera/tokenizers/char_tokenizer.h"
#include "testing/expect_error.h"
#include "testing/sampling_params.h"

namespace tessera {
namespace {

using infer::Sampler;
using infer::SamplingParams;

SamplingParams with(double temperature, int64_t top_k = 0, double top_p = 1.0, double min_p = 0.0) {
  return testing::sampling_params(temperature, top_k, top_p, min_p);
}

// Counts of the tokens drawn with seeds 0..n-1 at step 0.
std::map<int32_t, int> draw(const std::vector<float>& logits, const SamplingParams& p, int n) {
  Sampler s(static_cast<int64_t>(logits.size()));
  std::map<int32_t, int> counts;
  for (int i = 0; i < n; ++i) {
    std::vector<float> l = logits;
    ++counts[s.sample(l, p, static_cast<uint64_t>(i), 0, {}, {})];
  }
  return counts;
}

TEST(InferSampler, GreedyTakesTheFirstMaximum) {
  Sampler s(5);
  std::vector<float> l{0.5f, 2.0f, -1.0f, 2.0f, 1.0f};
  EXPECT_EQ(s.sample(l, with(0.0), 1, 0, {}, {}), 1);
  EXPECT_EQ(s.sample(l, with(1.0, 1), 1, 0, {}, {}), 1) << "top_k = 1 is greedy";
  EXPECT_EQ(infer::argmax(std::vector<float>{-INFINITY, -3.0f}), 1);
}

TEST(InferSampler, TemperatureDrawsFromTheSoftmax) {
  const std::vector<float> logits{1.0f, 2.0f, 0.0f, 1.5f};
  const double T = 0.7;
  const int n = 20000;
  auto counts = draw(logits, with(T), n);
  double z = 0.0;
  for (float v : logits) z += std::exp(v / T);
  for (int i = 0; i < 4; ++i) {
    const double p = std::exp(logits[i] / T) / z;
    // Within 5 standard deviations of a binomial count.
    EXPECT_NEAR(counts[i], n * p, 5 * std::sqrt(n * p * (1 - p))) << "token " << i;
  }
}

TEST(InferSampler, TopKTopPAndMinPRestrictTheSupport) {
  const std::vector<float> logits{3.0f, 0.0f, 2.0f, 1.0f, 2.5f, -1.0f};
  auto keys = [](const std::map<int32_t, int>& m) {
    std::set<int32_t> k;
    for (const auto& [t, c] : m) k.insert(t);
    return k;
  };
  EXPECT_EQ(keys(draw(logits, with(1.0, 2), 2000)), (std::set<int32_t>{0, 4}));
  // Probabilities at T = 1: 0.46, 0.02, 0.17, 0.06, 0.28, 0.008; 0.46 + 0.28 = 0.74 < 0.8.
  EXPECT_EQ(keys(draw(logits, with(1.0, 0, 0.8), 2000)), (std::set<int32_t>{0, 2, 4}));
  // min_p 0.3: keep p >= 0.3 * 0.46 = 0.14.
  EXPECT_EQ(keys(draw(logits, with(1.0, 0, 1.0, 0.3), 2000)), (std::set<int32_t>{0, 2, 4}));
  EXPECT_EQ(keys(draw(logits, with(1.0, 0, 1.0, 0.7), 2000)), (std::set<int32_t>{0}));
}

TEST(InferSampler, SeedsAndStepsMakeDrawsReproducible) {
  const std::vector<float> logits(50, 0.0f);  // uniform
  Sampler s(50);
  auto one = [&](uint64_t seed, uint64_t step) {
    std::vector<float> l = logits;
    return s.sample(l, with(1.0), seed, step, {}, {});
  };
  EXPECT_EQ(one(7, 3), one(7, 3));
  std::set<int32_t> by_step, by_seed;
  for (uint64_t i = 0; i < 20; ++i) {
    by_step.insert(one(7, i));
    by_seed.insert(one(i, 3));
  }
  EXPECT_GT(by_step.size(), 8u);
  EXPECT_GT(by_seed.size(), 8u);
}

TEST(InferSampler, RepetitionPresenceAndFrequencyPenalties) {
  Sampler s(4);
  SamplingParams p = with(0.0);
  p.repetition_penalty = 2.0;
  // Token 0 (in the prompt, positive logit) is divided, token 1 (output, negative) multiplied.
  std::vector<float> l{3.0f, -1.0f, 1.6f, 0.0f};
  EXPECT_EQ(s.sample(l, p, 0, 0, std::vector<int32_t>{0, 0}, std::vector<int32_t>{1}), 2);
  EXPECT_FLOAT_EQ(l[0], 1.5f);
  EXPECT_FLOAT_EQ(l[1], -2.0f);
  EXPECT_FLOAT_EQ(l[2], 1.6f);

  SamplingParams q = with(0.0);
  q.presence_penalty = 0.5;
  q.frequency_penalty = 0.25;
  std::vector<float> m{2.0f, 1.0f, 0.0f, 0.0f};
  // Output holds token 0 three times and token 2 once; the prompt is not penalised.
  s.sample(m, q, 0, 0, std::vector<int32_t>{1}, std::vector<int32_t>{0, 2, 0, 0});
  EXPECT_FLOAT_EQ(m[0], 2.0f - 0.5f - 3 * 0.25f);
  EXPECT_FLOAT_EQ(m[1], 1.0f);
  EXPECT_FLOAT_EQ(m[2], -0.75f);
  // The scratch counts were reset: a second call sees nothing from the first.
  std::vector<float> n{2.0f, 1.0f, 0.0f, 0.0f};
  s.sample(n, q, 0, 0, {}, {});
  EXPECT_FLOAT_EQ(n[0], 2.0f);
}

TEST(InferSampler, RejectsBadParams) {
  auto check = [](SamplingParams p, const char* text) {
    EXPECT_TESSERA_ERROR(p.validate(), ValueError, text);
  };
  SamplingParams p;
  p.temperature = -1;
  check(p, "temperature");
  p = {};
  p.top_p = 1.5;
  check(p, "top_p");
  p = {};
  p.min_p = -0.1;
  check(p, "[SamplingParams] expected min_p in [0, 1]");
  p = {};
  p.repetition_penalty = 0;
  check(p, "repetition_penalty");
  p.repetition_penalty = 1e39;  // inf as a float
  check(p, "repetition_penalty");
  p = {};
  p.presence_penalty = 3;
  check(p, "presence_penalty");
  p = {};
  p.frequency_penalty = -2.5;
  check(p, "frequency_penalty");
  Sampler s(3);
  std::vector<float> l(4);
  EXPECT_TESSERA_ERROR(s.sample(l, {}, 0, 0, {}, {}), ValueError, "expected 3 logits");
}

TEST(TextStream, HoldsBackPossibleStopStringsAndCutsBeforeThem) {
  tokenizers::CharTokenizer tok("abcdefgh XY");
  auto ids = [&](std::string_view s) { return tok.encode(s); };
  infer::StoppingCriteria stop;
  stop.stop = {"XY", "cab"};
  infer::TextStream ts(&tok, &stop);
  std::string out;
  for (int32_t id : ids("abc ca")) out += ts.push(id);
  EXPECT_EQ(out, "abc ") << "'ca' may start 'cab': held back";
  out += ts.push(ids("d")[0]);
  EXPECT_EQ(out, "abc cad");
  out += ts.push(ids("X")[0]);
  EXPECT_EQ(out, "abc cad");
  out += ts.push(ids("Y")[0]);
  EXPECT_TRUE(ts.stopped());
  EXPECT_EQ(out, "abc cad") << "the stop string is never emitted";
  EXPECT_EQ(ts.push(ids("a")[0]), "");
  EXPECT_EQ(ts.flush(), "");

  infer::TextStream tail(&tok, &stop);
  std::string t;
  for (int32_t id : ids("hhX")) t += tail.push(id);
  EXPECT_EQ(t, "hh");
  EXPECT_EQ(tail.flush(), "X") << "a prefix that never completed is released at the end";
  EXPECT_EQ(tail.text(), "hhX");

  infer::TextStream no_tok(nullptr, &stop);
  EXPECT_EQ(no_tok.push(3), "");
}

// vLLM's include_stop_str_in_output keeps the stop string; min_tokens lets stop strings that end
// before the min_tokens-th token pass.
TEST(TextStream, IncludesTheStopStringOrIgnoresItBeforeMinTokens) {
  tokenizers::CharTokenizer tok("abcXY");
  infer::StoppingCriteria stop;
  stop.stop = {"XY"};
  stop.include_stop_str_in_output = true;
  std::string out;
  infer::TextStream kept(&tok, &stop);
  for (int32_t id : tok.encode("abXYc")) out += kept.push(id);
  EXPECT_TRUE(kept.stopped());
  EXPECT_EQ(out, "abXY");
  stop.include_stop_str_in_output = false;
  stop.min_tokens = 5;
  out.clear();
  infer::TextStream late(&tok, &stop);
  for (int32_t id : tok.encode("aXYbXY")) out += late.push(id);
  EXPECT_TRUE(late.stopped()) << "the second XY ends at the 6th token";
  EXPECT_EQ(out, "aXYb");
  std::vector<float> logits{0.0f, 1.0f, 2.0f};
  stop.stop_token_ids = {2, 7};
  stop.mask_early_stops(logits, 4);
  EXPECT_EQ(logits, (std::vector<float>{0.0f, 1.0f, -INFINITY}));
  logits[2] = 2.0f;
  stop.mask_early_stops(logits, 5);
  EXPECT_EQ(logits[2], 2.0f) << "from min_tokens on the stop tokens may be drawn";
  stop.max_tokens = 4;
  EXPECT_TESSERA_ERROR(stop.validate(), ValueError, "expected min_tokens in [0, max_tokens 4]");
}

TEST(TextStream, HoldsBackPartialUtf8Characters) {
  // Token i is byte i, as llama2.c's byte-fallback tokens.
  struct Bytes : tokenizers::Tokenizer {
    std::string token_to_string(int32_t id, int32_t) const override {
      return std::string(1, static_cast<char>(id));
    }
    int64_t vocab_size() const override { return 256; }
    std::string_view name() const override { return "Bytes"; }
    void encode_into(std::string_view, std::vector<int32_t>&) const override {}
  } bytes;
  infer::TextStream ts(&bytes, nullptr);
  const std::string euro = "\xE2\x82\xAC";  // one 3-byte character
  EXPECT_EQ(ts.push('a'), "a");
  EXPECT_EQ(ts.push(static_cast<unsigned char>(euro[0])), "");
  EXPECT_EQ(ts.push(static_cast<unsigned char>(euro[1])), "");
  EXPECT_EQ(ts.push(static_cast<unsigned char>(euro[2])), euro);
  EXPECT_EQ(ts.push(0xC3), "");
  EXPECT_EQ(ts.flush(), "\xC3") << "an unfinished character is released at the end";
  EXPECT_EQ(ts.text(), "a" + euro + "\xC3");
}

}  // namespace
}  // namespace tessera
