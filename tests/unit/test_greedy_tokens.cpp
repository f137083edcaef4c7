// Greedy tokens taken where the logits are (ModelRunner::greedy_tokens; on a device only the ids
// come back) against the host Sampler's argmax of the same logits: the CPU runner and the device
// runner's code run on the CPU (detail::DeviceRunner, with the library's argmax op) over a mixed
// prefill + decode schedule, ties broken by the lowest id, and the Engine and infer::generate,
// whose steps take that path only when every sampled row is greedy without penalties or
// logprobs.
#include <gtest/gtest.h>

#include <limits>
#include <map>
#include <memory>
#include <vector>

#include "infer/device_runner.h"
#include "tessera/infer/engine.h"
#include "tessera/infer/generate.h"
#include "tessera/infer/model_runner.h"
#include "tessera/infer/sampler.h"
#include "tessera/tessera.h"
#include "testing/small_models.h"
#include "testing/step_schedule.h"

namespace tessera {
namespace {

using infer::GenerationParams;
using testing::small_gpt2;
using testing::small_llama;

// The host sampler's greedy token for each row of logits [rows, V].
std::vector<int32_t> sampled_greedy(std::span<const float> logits, int64_t V) {
  infer::Sampler sampler(V);
  infer::SamplingParams greedy;
  greedy.temperature = 0;
  std::vector<int32_t> out;
  for (size_t r = 0; r * V < logits.size(); ++r) {
    std::vector<float> row(logits.begin() + r * V, logits.begin() + (r + 1) * V);
    out.push_back(sampler.sample(row, greedy, 0, 0, {}, {}));
  }
  return out;
}

std::vector<int32_t> to_vector(std::span<const int32_t> v) { return {v.begin(), v.end()}; }

TEST(GreedyTokens, DeviceRunnerOnTheCpuMatchesTheHostSampler) {
  for (auto model : {small_gpt2(), small_llama(), testing::small_qwen3()}) {
    SCOPED_TRACE(model->type_name());
    testing::RunnerPair runners(*model);
    auto& [cpu, device, cpu_cache, device_cache, schedule, batch] = runners;
    const int64_t V = cpu.vocab_size();
    for (int step = 0; step < 8; ++step) {
      SCOPED_TRACE(::testing::Message() << "step " << step);
      schedule.next(batch);
      const std::span<const float> cpu_out = cpu.forward(batch, cpu_cache);
      const std::vector<float> want(cpu_out.begin(), cpu_out.end());
      const std::span<const float> device_out = device.forward(batch, device_cache);
      const std::vector<float> got(device_out.begin(), device_out.end());
      ASSERT_EQ(got.size(), want.size());
      EXPECT_TRUE(allclose(tensor(got), tensor(want), 1e-4, 1e-5)) << "the step's logits";
      // The same step again (it rewrites the same keys and values), for its ids only.
      EXPECT_EQ(to_vector(cpu.greedy_tokens(batch, cpu_cache)), sampled_greedy(want, V));
      EXPECT_EQ(to_vector(device.greedy_tokens(batch, device_cache)), sampled_greedy(got, V));
    }
  }
}

// GPT-2 whose final norm outputs e_0 for every token, so the logits of every row are exactly
// lm_head's first column: `top` at ids 4 and 9, 0.5 elsewhere.
std::shared_ptr<models::CausalLM> tied_gpt2() {
  auto model = small_gpt2();
  autograd::NoGradGuard no_grad;
  auto params = model->named_parameters();
  Tensor w = params.at("transformer.ln_f.weight"), b = params.at("transformer.ln_f.bias");
  w.zero_();
  b.zero_();
  b.data_ptr<float>()[0] = 1.0f;
  Tensor head = params.at("transformer.wte.weight");  // [V, C], lm_head's too
  const int64_t C = head.size(1);
  for (int64_t v = 0; v < head.size(0); ++v)
    head.data_ptr<float>()[v * C] = v == 4 || v == 9 ? 1.0f : 0.5f;
  return model;
}

TEST(GreedyTokens, TiesGoToTheLowestId) {
  auto model = tied_gpt2();
  testing::RunnerPair runners(*model);
  auto& [cpu, device, cpu_cache, device_cache, schedule, batch] = runners;
  // The prompts first: until written, a cache holds garbage (NaN too, which 0 x NaN spreads).
  schedule.next(batch);
  cpu.forward(batch, cpu_cache);
  device.forward(batch, device_cache);
  schedule.next(batch);  // two decode rows
  const std::span<const float> logits = cpu.forward(batch, cpu_cache);
  ASSERT_EQ(logits[4], logits[9]) << "the test needs an exact tie";
  ASSERT_GT(logits[4], logits[0]);
  const std::vector<int32_t> want = {4, 4};
  EXPECT_EQ(sampled_greedy(logits, cpu.vocab_size()), want);
  EXPECT_EQ(to_vector(cpu.greedy_tokens(batch, cpu_cache)), want);
  EXPECT_EQ(to_vector(device.greedy_tokens(batch, device_cache)), want);
}

std::vector<int32_t> prompt_of(int64_t n, int64_t vocab, uint64_t seed) {
  manual_seed(seed);
  Tensor t = randint(0, vocab, {n});
  return {t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + n};
}

GenerationParams params(int64_t max_tokens, double temperature = 0.0) {
  GenerationParams p;
  p.sampling.temperature = temperature;
  p.sampling.top_k = temperature > 0 ? 10 : 0;
  p.sampling.seed = 7;
  p.stopping.max_tokens = max_tokens;
  return p;
}

// The request alone through infer::generate with a logits observer: every token from the host
// Sampler.
std::vector<int32_t> host_sampled(infer::ModelRunner& runner, const std::vector<int32_t>& prompt,
                                  const GenerationParams& p) {
  infer::GenerateOptions opts;
  opts.on_logits = [](std::span<const float>) {};
  return infer::generate(runner, prompt, p, opts).tokens;
}

// Steps mixing greedy rows with a sampled one, one asking for logprobs and a penalised greedy
// one (all through the logits), then, once those finish, steps of two plain greedy rows only
// (through greedy_tokens): every request gets the host sampler's tokens.
TEST(GreedyTokens, EngineMixedAndGreedyStepsMatchTheHostSampler) {
  auto model = small_llama();
  infer::ModelRunner runner(*model);
  const int64_t V = runner.vocab_size();
  GenerationParams with_logprobs = params(8);
  with_logprobs.logprobs = 1;
  GenerationParams penalized = params(12);
  penalized.sampling.repetition_penalty = 3.0;
  penalized.sampling.presence_penalty = 1.0;
  const std::vector<std::pair<std::vector<int32_t>, GenerationParams>> requests = {
      {prompt_of(9, V, 1), params(30)},     {prompt_of(5, V, 2), params(30)},
      {prompt_of(3, V, 3), params(5, 0.8)}, {prompt_of(7, V, 4), with_logprobs},
      {prompt_of(11, V, 5), penalized},
  };
  infer::Engine engine(*model, {.max_num_seqs = 8});
  std::map<int64_t, std::vector<int32_t>> got;
  std::map<int64_t, std::vector<infer::TokenLogprob>> logprobs;
  for (const auto& [prompt, p] : requests) engine.add_request(prompt, p);
  while (engine.has_unfinished())
    for (const infer::RequestOutput& out : engine.step()) {
      got[out.request_id].insert(got[out.request_id].end(), out.new_tokens.begin(),
                                 out.new_tokens.end());
      logprobs[out.request_id].insert(logprobs[out.request_id].end(), out.logprobs.begin(),
                                      out.logprobs.end());
    }
  for (size_t i = 0; i < requests.size(); ++i)
    EXPECT_EQ(got[static_cast<int64_t>(i)],
              host_sampled(runner, requests[i].first, requests[i].second))
        << "request " << i;
  // The penalty changes the greedy tokens, so a step that skipped it would be caught.
  EXPECT_NE(got[4], host_sampled(runner, requests[4].first, params(12)));
  ASSERT_EQ(logprobs[3].size(), 8u);
  for (size_t t = 0; t < 8; ++t) {
    EXPECT_EQ(logprobs[3][t].token, got[3][t]);
    ASSERT_EQ(logprobs[3][t].top.size(), 1u);
    EXPECT_EQ(logprobs[3][t].top[0].first, got[3][t]) << "greedy takes the most likely token";
  }
}

TEST(GreedyTokens, GenerateMatchesTheHostSampler) {
  for (auto model : {small_gpt2(), small_llama(), testing::small_mixtral()}) {
    infer::ModelRunner runner(*model);
    const std::vector<int32_t> prompt = prompt_of(6, runner.vocab_size(), 8);
    const infer::GenerationResult r = infer::generate(runner, prompt, params(40));
    ASSERT_EQ(r.tokens.size(), 40u);
    EXPECT_EQ(r.tokens, host_sampled(runner, prompt, params(40))) << model->type_name();
  }
}

// A seeded generate leaves the default generator alone (value_or drew from it regardless), so
// unseeded randomness after it does not depend on seeded calls before it.
TEST(GreedyTokens, SeededGenerateDrawsNothingFromTheDefaultGenerator) {
  auto model = small_llama();
  infer::ModelRunner runner(*model);
  const std::vector<int32_t> prompt = prompt_of(6, runner.vocab_size(), 8);
  manual_seed(11);
  const uint64_t offset = default_generator().get_state()[1];
  infer::generate(runner, prompt, params(4, 0.8));
  EXPECT_EQ(default_generator().get_state()[1], offset);
}

TEST(GreedyTokens, GenerateWithAHugeMaxTokensFillsTheContext) {
  // Neither P + max_tokens overflowing nor reserving max_tokens ids: the context bounds both.
  auto model = small_gpt2();
  infer::ModelRunner runner(*model);
  const std::vector<int32_t> prompt = prompt_of(6, runner.vocab_size(), 8);
  const infer::GenerationResult r =
      infer::generate(runner, prompt, params(std::numeric_limits<int64_t>::max()));
  EXPECT_EQ(static_cast<int64_t>(r.tokens.size()), runner.max_seq_len() - 6);
  EXPECT_EQ(r.finish_reason, infer::FinishReason::Length);
}

}  // namespace
}  // namespace tessera
