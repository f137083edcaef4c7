// The next-token sampler (temperature, top-k, top-p, seeded draws) and the plain generation loop.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tessera/models/gpt2.h"
#include "tessera/models/sampling.h"
#include "tessera/tessera.h"
#include "testing/expect_error.h"

namespace tessera {
namespace {

using models::SamplingOptions;

// Logits whose softmax is probs (up to the shift softmax ignores).
Tensor logits_of(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(p > 0 ? static_cast<float>(std::log(p)) : -INFINITY);
  return tensor(l);
}

void expect_probs(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << "token " << i;
}

TEST(Sampling, GreedyIsTheFirstArgmax) {
  SamplingOptions greedy{.temperature = 0.0};
  EXPECT_EQ(models::sample_token(tensor({0.1f, 2.0f, -1.0f, 2.0f}), greedy), 1);
  expect_probs(models::sampling_probs(tensor({0.1f, 2.0f, -1.0f, 2.0f}), greedy), {0, 1, 0, 0});
  // [1, 1, V] logits (what forward(idx, last_only) returns for one sequence) are accepted.
  EXPECT_EQ(models::sample_token(tensor({0.f, 1.f, 5.f}).view({1, 1, 3}), greedy), 2);
  // Greedy draws no random numbers.
  Generator gen(7);
  models::sample_token(tensor({0.f, 1.f}), greedy, &gen);
  EXPECT_EQ(gen.offset(), 0u);
}

TEST(Sampling, TemperatureScalesTheSoftmax) {
  const std::vector<double> x = {1.0, 2.0, 0.5};
  auto softmax_ref = [&](double t) {
    std::vector<double> p;
    double z = 0;
    for (double v : x) z += std::exp(v / t);
    for (double v : x) p.push_back(std::exp(v / t) / z);
    return p;
  };
  Tensor logits = tensor({1.0f, 2.0f, 0.5f});
  expect_probs(models::sampling_probs(logits, {.temperature = 1.0}), softmax_ref(1.0));
  expect_probs(models::sampling_probs(logits, {.temperature = 0.5}), softmax_ref(0.5));
  expect_probs(models::sampling_probs(logits.to(kBFloat16), {.temperature = 2.0}),
               softmax_ref(2.0));
}

TEST(Sampling, TopKAndTopPKeepTheMostLikelyTokens) {
  Tensor logits = logits_of({0.05, 0.5, 0.15, 0.3});
  expect_probs(models::sampling_probs(logits, {.top_k = 2}), {0, 0.625, 0, 0.375});
  expect_probs(models::sampling_probs(logits, {.top_k = 10}), {0.05, 0.5, 0.15, 0.3});
  // Nucleus: 0.5 + 0.3 reaches 0.79; 0.85 needs the third token (the crossing one is kept).
  expect_probs(models::sampling_probs(logits, {.top_p = 0.79}), {0, 0.625, 0, 0.375});
  expect_probs(models::sampling_probs(logits, {.top_p = 0.85}),
               {0, 0.5 / 0.95, 0.15 / 0.95, 0.3 / 0.95});
  expect_probs(models::sampling_probs(logits, {.top_p = 0.1}), {0, 1, 0, 0});
  // Both: top-k first, then the nucleus of what is left (0.5 + 0.3 + 0.15 limited to 2).
  expect_probs(models::sampling_probs(logits, {.top_k = 2, .top_p = 0.95}), {0, 0.625, 0, 0.375});
  // top-p is a share of the top-k mass: 0.625 of the two kept reaches 0.6 alone (HF, vLLM).
  expect_probs(models::sampling_probs(logits, {.top_k = 2, .top_p = 0.6}), {0, 1, 0, 0});
  // Ties at the top-k boundary keep the lower id.
  expect_probs(models::sampling_probs(tensor({1.f, 3.f, 3.f, 3.f}), {.top_k = 2}),
               {0, 0.5, 0.5, 0});
  // top-p applies after temperature: at T = 0.5 the top token alone holds 0.25 / 0.365 >= 0.6.
  expect_probs(models::sampling_probs(logits, {.top_p = 0.6}), {0, 0.625, 0, 0.375});
  expect_probs(models::sampling_probs(logits, {.temperature = 0.5, .top_p = 0.6}), {0, 1, 0, 0});
}

TEST(Sampling, DrawsAreSeededAndFollowTheDistribution) {
  Tensor logits = logits_of({0.1, 0.2, 0.3, 0.4});
  auto draw = [&](uint64_t seed, int n, SamplingOptions opt) {
    Generator gen(seed);
    std::vector<int32_t> ids;
    for (int i = 0; i < n; ++i) ids.push_back(models::sample_token(logits, opt, &gen));
    return ids;
  };
  EXPECT_EQ(draw(3, 50, {}), draw(3, 50, {}));
  EXPECT_NE(draw(3, 50, {}), draw(4, 50, {}));

  const int n = 20000;
  std::vector<int> counts(4, 0);
  for (int32_t id : draw(11, n, {})) ++counts.at(id);
  for (int i = 0; i < 4; ++i)  // 4 standard deviations of a binomial count
    EXPECT_NEAR(counts[i] / double(n), 0.1 * (i + 1), 4 * std::sqrt(0.25 / n)) << "token " << i;
  for (int32_t id : draw(12, 2000, {.top_k = 2})) EXPECT_GE(id, 2);
}

TEST(Sampling, RejectsBadOptionsAndLogits) {
  Tensor logits = tensor({0.f, 1.f});
  EXPECT_TESSERA_ERROR(models::sample_token(logits, {.temperature = -1}), ValueError,
                       "[sample] expected temperature >= 0, got -1");
  EXPECT_TESSERA_ERROR(models::sample_token(logits, {.top_k = -2}), ValueError,
                       "expected top_k >= 0, got -2");
  EXPECT_TESSERA_ERROR(models::sample_token(logits, {.top_p = 0}), ValueError,
                       "expected top_p in (0, 1], got 0");
  EXPECT_TESSERA_ERROR(models::sample_token(logits, {.top_p = 1.5}), ValueError, "top_p");
  EXPECT_TESSERA_ERROR(models::sample_token(tensor({0.f, NAN}), {}), ValueError, "NaN");
  EXPECT_TESSERA_ERROR(models::sample_token(tensor({-INFINITY, -INFINITY}), {}), ValueError,
                       "all -inf");
  EXPECT_TESSERA_ERROR(models::sample_token(zeros({2, 3}), {}), ValueError,
                       "expected the logits of one position");
  EXPECT_TESSERA_ERROR(models::sample_token(tensor(std::vector<int64_t>{1, 2}), {}), ValueError,
                       "floating logits");
}

models::GPT2Config tiny_gpt2() {
  models::GPT2Config c;
  c.vocab_size = 20;
  c.block_size = 6;
  c.n_layer = 1;
  c.n_head = 2;
  c.n_embd = 8;
  return c;
}

TEST(Generate, GreedyFollowsTheArgmaxOfTheFullForward) {
  Generator init(1);
  models::GPT2 model(tiny_gpt2(), &init);
  // Longer than block_size: later steps see only the last 6 tokens.
  const std::vector<int32_t> out = models::generate(model, {3, 4}, 10, {.temperature = 0});
  ASSERT_EQ(out.size(), 12u);
  EXPECT_EQ(out[0], 3);
  EXPECT_EQ(out[1], 4);
  autograd::NoGradGuard no_grad;
  for (size_t n = 2; n < out.size(); ++n) {
    const int64_t T = std::min<int64_t>(n, 6);
    std::vector<int64_t> window(out.begin() + (n - T), out.begin() + n);
    Tensor logits = model(tensor(window, Shape{1, T}));
    EXPECT_EQ(logits.select(1, T - 1).argmax().item<int64_t>(), out[n]) << "position " << n;
  }
}

TEST(Generate, SeededCallbackStopsAndModeIsRestored) {
  Generator init(2);
  models::GPT2 model(tiny_gpt2(), &init);
  model.train();
  auto run = [&](uint64_t seed) {
    Generator gen(seed);
    return models::generate(model, {1}, 8, {.temperature = 1.0, .top_k = 5}, &gen);
  };
  EXPECT_EQ(run(9), run(9));
  EXPECT_TRUE(model.is_training());

  std::vector<int32_t> seen;
  const std::vector<int32_t> out =
      models::generate(model, {1}, 8, {.temperature = 0}, nullptr, [&](int32_t id) {
        seen.push_back(id);
        return seen.size() < 3;
      });
  EXPECT_EQ(seen.size(), 3u);
  EXPECT_EQ(out.size(), 4u);
  EXPECT_EQ(models::generate(model, {1}, 0, {}).size(), 1u);
  EXPECT_TESSERA_ERROR(models::generate(model, {}, 3, {}), ValueError,
                       "[generate] expected a prompt of at least one token");
}

}  // namespace
}  // namespace tessera
