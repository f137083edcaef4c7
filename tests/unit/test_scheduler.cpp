// Continuous batching: the scheduler's admission (batch size, token budget, blocks), chunked
// prefill, preemption of the newest sequences when blocks run out and their resumption in
// arrival order; and the Engine on a small LLaMA: greedy and seeded outputs identical alone and
// batched, with or without preemption, stop tokens, stop strings, max tokens, aborts freeing
// blocks, request validation, and prefix caching (shared blocks, evictions, same-step sharing).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "tessera/infer/engine.h"
#include "tessera/infer/scheduler.h"
#include "tessera/models/llama.h"
#include "tessera/tessera.h"
#include "tessera/tokenizers/char_tokenizer.h"
#include "testing/expect_error.h"
#include "testing/failing_tokenizer.h"

namespace tessera {
namespace {

using infer::GenerationParams;
using infer::PagedKVCache;
using infer::Scheduler;
using infer::Sequence;

Sequence make_seq(int64_t id, int64_t prompt_len) {
  Sequence s;
  s.id = s.arrival = id;
  s.tokens.assign(prompt_len, 1);
  s.prompt_len = prompt_len;
  return s;
}

// What the engine does after a forward: count the computed tokens, sample (here: token 0).
void advance(const infer::SchedulerOutput& out) {
  for (const auto& s : out.scheduled) {
    s.seq->num_computed += s.num_new_tokens;
    if (s.seq->num_computed == s.seq->num_tokens()) s.seq->tokens.push_back(0);
  }
}

std::map<int64_t, int64_t> tokens_by_id(const infer::SchedulerOutput& out) {
  std::map<int64_t, int64_t> m;
  for (const auto& s : out.scheduled) m[s.seq->id] = s.num_new_tokens;
  return m;
}

TEST(Scheduler, AdmitsInArrivalOrderWithinBatchAndBudget) {
  PagedKVCache cache({1, 1, 8}, 64, 16);
  Scheduler sched({/*max_num_seqs=*/2, /*max_num_batched_tokens=*/64}, cache);
  Sequence a = make_seq(0, 10), b = make_seq(1, 20), c = make_seq(2, 5);
  sched.add(&c);
  sched.add(&a);
  sched.add(&b);
  auto out = sched.schedule();
  EXPECT_EQ(tokens_by_id(out), (std::map<int64_t, int64_t>{{0, 10}, {1, 20}}))
      << "the two earliest arrivals; the batch is full";
  advance(out);
  out = sched.schedule();
  EXPECT_EQ(tokens_by_id(out), (std::map<int64_t, int64_t>{{0, 1}, {1, 1}})) << "decode steps";
  sched.remove(&a);
  advance(out);
  out = sched.schedule();
  EXPECT_EQ(tokens_by_id(out), (std::map<int64_t, int64_t>{{1, 1}, {2, 5}}));
  EXPECT_EQ(sched.num_waiting(), 0);
}

TEST(Scheduler, ChunksLongPromptsToTheTokenBudget) {
  PagedKVCache cache({1, 1, 8}, 64, 16);
  Scheduler sched({4, 16}, cache);
  Sequence a = make_seq(0, 40), b = make_seq(1, 3);
  sched.add(&a);
  sched.add(&b);
  std::vector<std::map<int64_t, int64_t>> steps;
  for (int i = 0; i < 4; ++i) {
    const auto& out = sched.schedule();
    steps.push_back(tokens_by_id(out));
    advance(out);
  }
  EXPECT_EQ(steps[0], (std::map<int64_t, int64_t>{{0, 16}}));
  EXPECT_EQ(steps[1], (std::map<int64_t, int64_t>{{0, 16}}));
  EXPECT_EQ(steps[2], (std::map<int64_t, int64_t>{{0, 8}, {1, 3}}));
  EXPECT_EQ(steps[3], (std::map<int64_t, int64_t>{{0, 1}, {1, 1}}));
  EXPECT_EQ(a.blocks.size(), 3u) << "41 tokens' blocks, reserved chunk by chunk";
}

TEST(Scheduler, PreemptsTheNewestWhenBlocksRunOutAndResumesInOrder) {
  PagedKVCache cache({1, 1, 8}, 4, 16);  // 64 positions in all
  Scheduler sched({4, 256}, cache);
  Sequence a = make_seq(0, 16), b = make_seq(1, 15), c = make_seq(2, 8);
  sched.add(&a);
  sched.add(&b);
  auto out = sched.schedule();
  EXPECT_EQ(tokens_by_id(out).size(), 2u);
  advance(out);
  sched.add(&c);  // needs 1 block + a spare for each running sequence; 1 is free -> waits
  out = sched.schedule();
  EXPECT_EQ(tokens_by_id(out), (std::map<int64_t, int64_t>{{0, 1}, {1, 1}}));
  EXPECT_EQ(sched.num_waiting(), 1);
  advance(out);
  // a and b grow into their second blocks and fill the pool.
  for (int i = 0; i < 15; ++i) advance(sched.schedule());
  EXPECT_EQ(cache.blocks().num_free(), 0);
  EXPECT_EQ(a.num_tokens(), 33);
  // a needs a third block: b, the newest, is preempted and its blocks go to a.
  out = sched.schedule();
  EXPECT_EQ(tokens_by_id(out), (std::map<int64_t, int64_t>{{0, 1}}));
  ASSERT_EQ(out.preempted.size(), 1u);
  EXPECT_EQ(out.preempted[0], &b);
  EXPECT_EQ(b.num_computed, 0);
  EXPECT_TRUE(b.blocks.empty());
  EXPECT_EQ(sched.num_preemptions(), 1);
  advance(out);
  sched.remove(&a);  // a finishes: b (arrived before c) resumes with its whole sequence
  out = sched.schedule();
  EXPECT_EQ(tokens_by_id(out).begin()->first, 1);
  EXPECT_EQ(tokens_by_id(out).at(1), b.num_tokens()) << "recompute: prompt and output prefilled";
}

// With prefix caching, a sequence whose next uncached block another admission computes this
// step waits one step and then takes it from the cache (the n choices of one prompt).
TEST(Scheduler, ASequenceSharingABlockComputedThisStepWaitsAStepToTakeIt) {
  PagedKVCache cache({1, 1, 8}, 64, 16);
  infer::SchedulerConfig config{/*max_num_seqs=*/4, /*max_num_batched_tokens=*/256};
  config.enable_prefix_caching = true;
  Scheduler sched(config, cache);
  Sequence a = make_seq(0, 40), b = make_seq(1, 40), c = make_seq(2, 10);
  c.tokens.assign(10, 2);  // nothing in common with a and b
  sched.add(&a);
  sched.add(&b);
  sched.add(&c);
  auto out = sched.schedule();
  EXPECT_EQ(tokens_by_id(out), (std::map<int64_t, int64_t>{{0, 40}}))
      << "b waits for a's blocks (and c, arriving after b, with it)";
  for (const auto& s : out.scheduled) {  // what the engine does after the forward
    s.seq->num_computed += s.num_new_tokens;
    cache.cache_full_blocks(s.seq->blocks, s.seq->tokens, s.seq->num_computed, s.seq->block_hashes);
    s.seq->tokens.push_back(0);
  }
  out = sched.schedule();
  EXPECT_EQ(tokens_by_id(out), (std::map<int64_t, int64_t>{{0, 1}, {1, 8}, {2, 10}}));
  EXPECT_EQ(b.num_cached_tokens, 32);
  EXPECT_EQ(std::vector<int32_t>(b.blocks.begin(), b.blocks.begin() + 2),
            std::vector<int32_t>(a.blocks.begin(), a.blocks.begin() + 2));
  EXPECT_EQ(sched.prefix_hit_tokens(), 32);
}

TEST(Scheduler, DropsWhatCanNeverFit) {
  PagedKVCache cache({1, 1, 8}, 2, 16);
  Scheduler sched({4, 256}, cache);
  Sequence big = make_seq(0, 40), lone = make_seq(1, 31);
  sched.add(&big);
  auto out = sched.schedule();
  ASSERT_EQ(out.dropped.size(), 1u);
  EXPECT_EQ(out.dropped[0], &big);
  sched.add(&lone);
  advance(sched.schedule());  // 32 tokens: both blocks
  advance(sched.schedule());  // the 33rd position needs a third block that does not exist
  out = sched.schedule();
  ASSERT_EQ(out.dropped.size(), 1u);
  EXPECT_EQ(out.dropped[0], &lone);
  EXPECT_EQ(cache.blocks().num_free(), 2);
  EXPECT_TESSERA_ERROR(Scheduler({4, 2}, cache), ValueError, "max_num_batched_tokens");
}

// ---- the Engine ----

std::shared_ptr<models::Llama> engine_model() {
  models::LlamaConfig c;
  c.vocab_size = 40;
  c.dim = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.hidden_dim = 64;
  c.max_seq_len = 96;
  manual_seed(3);
  auto m = std::make_shared<models::Llama>(c);
  Generator gen(4);
  for (auto& [name, p] : m->named_parameters())
    if (p.dim() == 2) {
      Tensor t = p.detach();
      normal_(t, 0.0, 0.2, &gen);
    }
  return m;
}

std::vector<int32_t> prompt_of(int64_t n, uint64_t seed) {
  manual_seed(seed);
  Tensor t = randint(0, 40, {n});
  return {t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + n};
}

GenerationParams params(int64_t max_tokens, double temperature = 0.0,
                        std::optional<uint64_t> seed = std::nullopt) {
  GenerationParams p;
  p.sampling.temperature = temperature;
  p.sampling.top_k = temperature > 0 ? 10 : 0;
  p.sampling.seed = seed;
  p.stopping.max_tokens = max_tokens;
  return p;
}

// Runs every request to the end; returns their tokens and the engine's preemption count.
std::map<int64_t, std::vector<int32_t>> run_all(infer::Engine& engine) {
  std::map<int64_t, std::vector<int32_t>> got;
  while (engine.has_unfinished())
    for (const auto& out : engine.step())
      got[out.request_id].insert(got[out.request_id].end(), out.new_tokens.begin(),
                                 out.new_tokens.end());
  return got;
}

struct Req {
  int64_t prompt_len, max_tokens;
  double temperature;
};

// Each request alone, then all together under config; the tokens must agree.
void check_batched_equals_alone(const infer::EngineConfig& config, const std::vector<Req>& reqs,
                                bool expect_preemption) {
  auto model = engine_model();
  std::vector<std::vector<int32_t>> alone;
  infer::EngineConfig solo_config;
  solo_config.kv_cache_dtype = config.kv_cache_dtype;
  solo_config.weight_dtype = config.weight_dtype;
  for (size_t i = 0; i < reqs.size(); ++i) {
    infer::Engine solo(*model, solo_config);
    solo.add_request(prompt_of(reqs[i].prompt_len, i),
                     params(reqs[i].max_tokens, reqs[i].temperature, 100 + i));
    alone.push_back(run_all(solo).begin()->second);
    EXPECT_EQ(static_cast<int64_t>(alone.back().size()), reqs[i].max_tokens);
  }
  infer::Engine engine(*model, config);
  std::vector<int64_t> ids;
  for (size_t i = 0; i < reqs.size(); ++i)
    ids.push_back(engine.add_request(prompt_of(reqs[i].prompt_len, i),
                                     params(reqs[i].max_tokens, reqs[i].temperature, 100 + i)));
  auto got = run_all(engine);
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(got[ids[i]], alone[i]) << "request " << i;
  const infer::EngineStats s = engine.stats();
  EXPECT_EQ(s.blocks_used, 0) << "finished requests free their blocks";
  if (expect_preemption)
    EXPECT_GT(s.num_preemptions, 0);
  else
    EXPECT_EQ(s.num_preemptions, 0);
}

TEST(Engine, BatchedOutputsEqualSingleRequestOutputs) {
  infer::EngineConfig config;
  config.max_num_seqs = 5;
  config.max_num_batched_tokens = 48;
  check_batched_equals_alone(config,
                             {{3, 20, 0.0},
                              {40, 12, 0.0},
                              {1, 30, 0.8},
                              {17, 25, 0.0},
                              {60, 8, 1.0},
                              {5, 33, 0.0},
                              {9, 1, 0.0}},
                             false);
}

TEST(Engine, PreemptionKeepsEveryRequestRight) {
  infer::EngineConfig config;
  config.num_blocks = 7;  // 112 positions for requests that need up to 60 each
  config.max_num_seqs = 6;
  check_batched_equals_alone(
      config,
      {{10, 40, 0.0}, {20, 40, 0.7}, {5, 50, 0.0}, {30, 25, 0.0}, {12, 45, 0.0}, {8, 30, 0.9}},
      true);
}

// A bfloat16 cache rounds keys and values as they are written, the same way whether a token is
// decoded or recomputed by prefill after preemption, and bfloat16 or int8 weights are stored
// once, so batching and preemption still leave every request's tokens as they are alone.
TEST(Engine, LowPrecisionCacheAndWeightsKeepBatchedAndPreemptedOutputsEqualToSingleRequests) {
  for (const DType weights : {kFloat32, kBFloat16, kInt8}) {
    infer::EngineConfig config;
    config.num_blocks = 7;
    config.max_num_seqs = 6;
    config.kv_cache_dtype = kBFloat16;
    config.weight_dtype = weights;
    check_batched_equals_alone(
        config,
        {{10, 40, 0.0}, {20, 40, 0.7}, {5, 50, 0.0}, {30, 25, 0.0}, {12, 45, 0.0}, {8, 30, 0.9}},
        true);
  }
}

// Requests sharing a 40-token system prompt (two full blocks of 16): with prefix caching a later
// one takes those blocks and computes only the rest, and every request's tokens equal those of
// an engine without the cache. A prompt of whole blocks still computes its last token (its
// logits are sampled). With 9 blocks, the many requests evict cached blocks and reuse them.
TEST(Engine, PrefixCachingReusesFullBlocksAndKeepsEveryOutput) {
  auto model = engine_model();
  const std::vector<int32_t> system = prompt_of(40, 7);
  auto chat = [&](uint64_t seed, int64_t n) {
    std::vector<int32_t> p = system;
    const std::vector<int32_t> user = prompt_of(n, seed);
    p.insert(p.end(), user.begin(), user.end());
    return p;
  };
  std::vector<std::vector<int32_t>> prompts = {
      chat(1, 5), chat(2, 9), chat(1, 5),
      std::vector<int32_t>(system.begin(), system.begin() + 32)};
  for (uint64_t i = 3; i < 9; ++i) prompts.push_back(chat(i, 3 + 2 * static_cast<int64_t>(i)));
  std::map<bool, std::vector<std::vector<int32_t>>> tokens;
  std::map<bool, std::vector<int64_t>> cached;
  for (bool caching : {false, true}) {
    infer::EngineConfig config;
    config.enable_prefix_caching = caching;
    config.num_blocks = 9;
    infer::Engine engine(*model, config);
    for (size_t i = 0; i < prompts.size(); ++i) {
      // One at a time: each finds what the ones before it left in the cache.
      const int64_t id = engine.add_request(prompts[i], params(6, i % 2 ? 0.8 : 0.0, 50 + i));
      std::vector<int32_t> got;
      int64_t cached_tokens = -1;
      while (engine.has_unfinished())
        for (const auto& out : engine.step()) {
          EXPECT_EQ(out.request_id, id);
          got.insert(got.end(), out.new_tokens.begin(), out.new_tokens.end());
          cached_tokens = out.cached_tokens;
        }
      tokens[caching].push_back(got);
      cached[caching].push_back(cached_tokens);
    }
    const infer::EngineStats s = engine.stats();
    EXPECT_EQ(s.blocks_used, 0);
    EXPECT_EQ(s.prefix_cache_hits, caching ? 32 + 32 + 16 + 6 * 32 : 0);
    if (caching)
      EXPECT_GT(s.prefix_cache_queries, s.prefix_cache_hits);
    else
      EXPECT_EQ(s.prefix_cache_queries, 0) << "nothing is looked up";
  }
  EXPECT_EQ(tokens[true], tokens[false]);
  EXPECT_EQ(cached[false], std::vector<int64_t>(prompts.size(), 0));
  // The first computes everything; the rest take the system prompt's two full blocks, the
  // 32-token prompt all but its last block (its last token runs again).
  std::vector<int64_t> want = {0, 32, 32, 16};
  want.resize(prompts.size(), 32);
  EXPECT_EQ(cached[true], want);
}

// Three requests for one prompt submitted together (a request's n choices): the second and
// third wait a step and take the first's blocks; each one's tokens are what it gets alone.
TEST(Engine, RequestsForOnePromptSubmittedTogetherShareItsBlocks) {
  auto model = engine_model();
  const std::vector<int32_t> prompt = prompt_of(40, 9);
  std::vector<std::vector<int32_t>> alone;
  for (uint64_t i = 0; i < 3; ++i) {
    infer::Engine solo(*model);
    solo.add_request(prompt, params(8, 0.9, 70 + i));
    alone.push_back(run_all(solo).begin()->second);
  }
  infer::Engine engine(*model);
  std::vector<int64_t> ids;
  for (uint64_t i = 0; i < 3; ++i)
    ids.push_back(engine.add_request(prompt, params(8, 0.9, 70 + i)));
  auto got = run_all(engine);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(got[ids[i]], alone[i]) << "request " << i;
  EXPECT_EQ(engine.stats().prefix_cache_hits, 2 * 32);
}

// Waves of requests over three shared prompts in a cache too small for them, with aborts:
// preemption, eviction and shared blocks at once. Every request that finishes has the tokens it
// gets alone, and no block stays in use.
TEST(Engine, PrefixCachingUnderPreemptionEvictionAndAbortsKeepsEveryOutput) {
  auto model = engine_model();
  std::mt19937 rng(11);
  const std::vector<std::vector<int32_t>> systems = {prompt_of(20, 21), prompt_of(35, 22),
                                                     prompt_of(48, 23)};
  std::vector<std::pair<std::vector<int32_t>, GenerationParams>> plan;
  for (uint64_t i = 0; i < 24; ++i) {
    std::vector<int32_t> prompt = systems[rng() % 3];
    const std::vector<int32_t> own = prompt_of(1 + rng() % 11, 100 + i);
    prompt.insert(prompt.end(), own.begin(), own.end());
    plan.emplace_back(prompt, params(10 + rng() % 30, i % 3 == 0 ? 0.9 : 0.0, 300 + i));
  }
  std::vector<std::vector<int32_t>> alone;
  for (const auto& [prompt, p] : plan) {
    infer::Engine solo(*model);
    solo.add_request(prompt, p);
    alone.push_back(run_all(solo).begin()->second);
  }
  infer::EngineConfig config;
  config.num_blocks = 7;  // 112 positions for up to 5 sequences of up to 96 tokens
  config.max_num_seqs = 5;
  infer::Engine engine(*model, config);
  std::map<int64_t, size_t> plan_of;
  std::map<int64_t, std::vector<int32_t>> got;
  std::set<int64_t> unfinished, aborted;
  size_t next = 0;
  for (int step = 0; next < plan.size() || engine.has_unfinished(); ++step) {
    for (int k = 0; step % 2 == 0 && k < 3 && next < plan.size(); ++k, ++next) {
      const int64_t id = engine.add_request(plan[next].first, plan[next].second);
      plan_of[id] = next;
      unfinished.insert(id);
    }
    if (step % 7 == 3 && !unfinished.empty()) {  // the newest unfinished request
      const int64_t id = *unfinished.rbegin();
      engine.abort_request(id);
      unfinished.erase(id);
      aborted.insert(id);
    }
    for (const auto& out : engine.step()) {
      got[out.request_id].insert(got[out.request_id].end(), out.new_tokens.begin(),
                                 out.new_tokens.end());
      if (out.finished()) unfinished.erase(out.request_id);
    }
  }
  EXPECT_GE(aborted.size(), 3u);
  for (const auto& [id, i] : plan_of)
    if (!aborted.contains(id)) EXPECT_EQ(got[id], alone[i]) << "request " << i;
  const infer::EngineStats s = engine.stats();
  EXPECT_GT(s.num_preemptions, 0);
  EXPECT_GT(s.prefix_cache_hits, 0);
  EXPECT_EQ(s.blocks_used, 0);
}

// prompt_logprobs: each prompt token after the first gets log_softmax of the model's logits at
// the position before it (the model's own forward is the oracle), whether the prompt runs in one
// step or in chunks, and even when its blocks are in the prefix cache (it computes them all).
TEST(Engine, PromptLogprobsAreTheModelsLogSoftmaxOverEveryPromptPosition) {
  auto model = engine_model();
  const std::vector<int32_t> prompt = prompt_of(37, 5);
  const int64_t P = static_cast<int64_t>(prompt.size());
  const Tensor ids = tensor(std::vector<int64_t>(prompt.begin(), prompt.end())).unsqueeze(0);
  const Tensor want =  // [P, V]
      log_softmax(model->forward(ids).squeeze(0), -1).to(kFloat64).detach().contiguous();
  const int64_t V = model->vocab_size();
  auto want_at = [&](int64_t i, int64_t token) { return want.data_ptr<double>()[i * V + token]; };
  auto want_best = [&](int64_t i) {
    const double* row = want.data_ptr<double>() + i * V;
    return *std::max_element(row, row + V);
  };
  for (int64_t budget : {2048, 8}) {  // one step, then chunks of 8
    infer::EngineConfig config;
    config.max_num_batched_tokens = budget;
    config.max_num_seqs = 2;
    infer::Engine engine(*model, config);
    engine.add_request(prompt, params(3));  // fills the prefix cache with the prompt's blocks
    run_all(engine);
    GenerationParams p = params(3);
    p.prompt_logprobs = 2;
    engine.add_request(prompt, p);
    std::vector<infer::TokenLogprob> got;
    int outputs = 0;
    while (engine.has_unfinished())
      for (const auto& out : engine.step()) {
        if (outputs++ > 0) EXPECT_TRUE(out.prompt_logprobs.empty()) << "the first output only";
        if (!out.prompt_logprobs.empty()) got = out.prompt_logprobs;
      }
    ASSERT_EQ(static_cast<int64_t>(got.size()), P - 1) << "budget " << budget;
    for (int64_t i = 0; i + 1 < P; ++i) {
      EXPECT_EQ(got[i].token, prompt[i + 1]);
      EXPECT_NEAR(got[i].logprob, want_at(i, prompt[i + 1]), 1e-4) << i;
      ASSERT_EQ(got[i].top.size(), 2u);
      EXPECT_NEAR(got[i].top[0].second, want_best(i), 1e-4) << i;
      EXPECT_GE(got[i].top[0].second, got[i].top[1].second);
    }
    EXPECT_EQ(engine.stats().prefix_cache_hits, 0) << "nothing taken from the cache";
  }
  infer::Engine engine(*model);
  GenerationParams bad = params(3);
  bad.prompt_logprobs = -2;
  EXPECT_TESSERA_ERROR(engine.add_request(prompt, bad), ValueError, "prompt_logprobs in [-1");
}

// With a bfloat16 cache the prompt's logprobs stay within bfloat16's rounding of the model's
// own forward, and differ from the float32 cache's (the keys and values really are rounded).
TEST(Engine, BFloat16KVCachePromptLogprobsStayCloseToTheModels) {
  auto model = engine_model();
  const std::vector<int32_t> prompt = prompt_of(60, 9);
  const int64_t P = static_cast<int64_t>(prompt.size());
  const Tensor ids = tensor(std::vector<int64_t>(prompt.begin(), prompt.end())).unsqueeze(0);
  const Tensor want =
      log_softmax(model->forward(ids).squeeze(0), -1).to(kFloat64).detach().contiguous();
  auto logprobs = [&](DType dtype) {
    infer::EngineConfig config;
    config.kv_cache_dtype = dtype;
    infer::Engine engine(*model, config);
    GenerationParams p = params(1);
    p.prompt_logprobs = 0;
    engine.add_request(prompt, p);
    std::vector<double> got;
    while (engine.has_unfinished())
      for (const auto& out : engine.step())
        for (const auto& e : out.prompt_logprobs) got.push_back(e.logprob);
    return got;
  };
  const std::vector<double> f32 = logprobs(kFloat32), bf16 = logprobs(kBFloat16);
  ASSERT_EQ(static_cast<int64_t>(bf16.size()), P - 1);
  double max_diff = 0;
  for (int64_t i = 0; i + 1 < P; ++i) {
    const double w = want.data_ptr<double>()[i * model->vocab_size() + prompt[i + 1]];
    EXPECT_NEAR(f32[i], w, 1e-4) << i;
    EXPECT_NEAR(bf16[i], w, 2e-2) << i;
    max_diff = std::max(max_diff, std::abs(bf16[i] - f32[i]));
  }
  EXPECT_GT(max_diff, 0.0) << "the bfloat16 cache gave float32's logprobs exactly";
  infer::EngineConfig bad;
  bad.kv_cache_dtype = kFloat16;
  EXPECT_TESSERA_ERROR(infer::Engine(*model, bad), TypeError, "float32 or bfloat16 cache");
  EXPECT_EQ(infer::inference_dtype_from_name("auto", "t", "a KV cache dtype"), kFloat32);
  EXPECT_EQ(infer::inference_dtype_from_name("bfloat16", "t", "a KV cache dtype"), kBFloat16);
  EXPECT_EQ(infer::weight_dtype_from_names("auto", "int8", "t"), kInt8);
  EXPECT_EQ(infer::weight_dtype_from_names("bfloat16", "none", "t"), kBFloat16);
  EXPECT_TESSERA_ERROR(infer::weight_dtype_from_names("bfloat16", "int8", "serve"), ValueError,
                       "[serve] expected dtype auto or float32 with int8 quantization");
  EXPECT_TESSERA_ERROR(infer::weight_dtype_from_names("auto", "awq", "serve"), ValueError,
                       "[serve] expected a quantization of none or int8, got 'awq'");
  EXPECT_TESSERA_ERROR(infer::inference_dtype_from_name("fp8", "serve", "a KV cache dtype"),
                       ValueError,
                       "[serve] expected a KV cache dtype of auto, float32 or bfloat16, got 'fp8'");
}

// Sized in bytes (vLLM's --kv-cache-memory), a bfloat16 cache holds twice the blocks of a
// float32 one; bytes and blocks together, or less than a block, are refused.
TEST(Engine, KVCacheSizedInBytesHoldsTwiceTheBlocksInBFloat16) {
  auto model = engine_model();
  const int64_t block_bytes = 16 * infer::ModelRunner(*model).kv_spec().bytes_per_token();
  for (const auto& [dtype, blocks] : {std::pair{kFloat32, 10}, std::pair{kBFloat16, 20}}) {
    infer::EngineConfig sized;
    sized.kv_cache_dtype = dtype;
    sized.kv_cache_memory_bytes = 10 * block_bytes + block_bytes / 4;  // and a bit
    EXPECT_EQ(infer::Engine(*model, sized).stats().blocks_total, blocks) << dtype;
  }
  infer::EngineConfig both;
  both.num_blocks = 4;
  both.kv_cache_memory_bytes = 10 * block_bytes;
  EXPECT_TESSERA_ERROR(infer::Engine(*model, both), ValueError, "not with num_blocks");
  infer::EngineConfig tiny;
  tiny.kv_cache_memory_bytes = block_bytes - 1;
  EXPECT_TESSERA_ERROR(infer::Engine(*model, tiny), ValueError, "to hold at least one block");
}

TEST(Engine, StopsOnTokensStringsAndLength) {
  auto model = engine_model();
  auto tok =
      std::make_shared<tokenizers::CharTokenizer>("abcdefghijklmnopqrstuvwxyz0123456789.,;!");
  infer::Engine engine(*model, {}, tok);
  const std::vector<int32_t> prompt = prompt_of(6, 1);
  // The free-running greedy continuation, to pick stops from.
  const int64_t ref = engine.add_request(prompt, params(30));
  std::string text;
  std::vector<int32_t> tokens;
  for (const auto& out : run_all(engine)) tokens = out.second;
  for (int32_t t : tokens) text += tok->token_to_string(t);
  ASSERT_EQ(text.size(), 30u);
  (void)ref;

  GenerationParams by_token = params(30);
  by_token.stopping.stop_token_ids = {tokens[7]};
  const int64_t a = engine.add_request(prompt, by_token);
  GenerationParams by_string = params(30);
  by_string.stopping.stop = {text.substr(10, 3), "never"};
  const int64_t b = engine.add_request(prompt, by_string);
  std::map<int64_t, std::string> texts;
  std::map<int64_t, infer::FinishReason> reasons;
  std::map<int64_t, int64_t> counts;
  while (engine.has_unfinished())
    for (const auto& out : engine.step()) {
      texts[out.request_id] += out.text;
      counts[out.request_id] = out.completion_tokens;
      if (out.finished()) reasons[out.request_id] = out.finish_reason;
    }
  const size_t first = std::find(tokens.begin(), tokens.end(), tokens[7]) - tokens.begin();
  EXPECT_EQ(counts[a], static_cast<int64_t>(first + 1)) << "the stop token is the last token";
  EXPECT_EQ(reasons[a], infer::FinishReason::Stop);
  EXPECT_EQ(texts[a], text.substr(0, first)) << "the stop token's own text is left out";
  const size_t at = text.find(text.substr(10, 3));
  EXPECT_EQ(texts[b], text.substr(0, at)) << "text before the stop string, never the string";
  EXPECT_EQ(reasons[b], infer::FinishReason::Stop);
}

// vLLM's min_tokens: the stop token cannot be drawn (nor a stop string end the text) before
// the min_tokens-th token; include_stop_str_in_output keeps the stop string in the text.
TEST(Engine, MinTokensAndIncludedStopStrings) {
  auto model = engine_model();
  auto tok =
      std::make_shared<tokenizers::CharTokenizer>("abcdefghijklmnopqrstuvwxyz0123456789.,;!");
  infer::Engine engine(*model, {}, tok);
  const std::vector<int32_t> prompt = prompt_of(6, 1);
  engine.add_request(prompt, params(30));
  const std::vector<int32_t> free = run_all(engine).begin()->second;
  std::string text;
  for (int32_t t : free) text += tok->token_to_string(t);

  GenerationParams early = params(30);
  early.stopping.stop_token_ids = {free[0]};  // ends at once without min_tokens
  early.stopping.min_tokens = 4;
  const int64_t a = engine.add_request(prompt, early);
  GenerationParams included = params(30);
  included.stopping.stop = {text.substr(10, 3)};
  included.stopping.include_stop_str_in_output = true;
  const int64_t b = engine.add_request(prompt, included);
  std::map<int64_t, std::string> texts;
  std::map<int64_t, std::vector<int32_t>> tokens;
  while (engine.has_unfinished())
    for (const auto& out : engine.step()) {
      texts[out.request_id] += out.text;
      tokens[out.request_id].insert(tokens[out.request_id].end(), out.new_tokens.begin(),
                                    out.new_tokens.end());
    }
  ASSERT_GE(tokens[a].size(), 5u);
  for (size_t i = 0; i < 4; ++i) EXPECT_NE(tokens[a][i], free[0]) << "token " << i;
  const size_t at = text.find(text.substr(10, 3));
  EXPECT_EQ(texts[b], text.substr(0, at + 3)) << "the text ends with the stop string";
}

// A request whose step throws (here its tokenizer) ends alone, with an Abort naming the error;
// the batch goes on (the engine stayed stuck: the sequence had no new token to compute).
TEST(Engine, ARequestThatFailsEndsAloneWithItsError) {
  auto model = engine_model();
  auto chars =
      std::make_shared<tokenizers::CharTokenizer>("abcdefghijklmnopqrstuvwxyz0123456789.,;!");
  const std::vector<int32_t> healthy = prompt_of(9, 2);
  infer::Engine solo(*model, {}, chars);
  solo.add_request(healthy, params(20));
  const std::vector<int32_t> want = run_all(solo).begin()->second;
  // The tokenizer fails after a token the healthy request never has before one of its own.
  int32_t poison = 0;
  while (poison == healthy.back() || std::count(want.begin(), want.end(), poison) > 0) ++poison;
  std::vector<int32_t> poisoned = prompt_of(6, 1);
  poisoned.back() = poison;
  auto tok = std::make_shared<testing::FailingTokenizer>(chars, poison);
  tok->armed = true;
  infer::Engine engine(*model, {}, tok);
  const int64_t bad = engine.add_request(poisoned, params(20));
  const int64_t good = engine.add_request(healthy, params(20));
  std::map<int64_t, std::vector<int32_t>> tokens;
  std::map<int64_t, infer::RequestOutput> last;
  while (engine.has_unfinished())
    for (const infer::RequestOutput& out : engine.step()) {
      tokens[out.request_id].insert(tokens[out.request_id].end(), out.new_tokens.begin(),
                                    out.new_tokens.end());
      last[out.request_id] = out;
    }
  EXPECT_EQ(last[bad].finish_reason, infer::FinishReason::Abort);
  EXPECT_NE(last[bad].error.find("armed to fail"), std::string::npos) << last[bad].error;
  EXPECT_EQ(tokens[good], want);
  EXPECT_EQ(last[good].finish_reason, infer::FinishReason::Length);
  EXPECT_TRUE(last[good].error.empty());
  EXPECT_EQ(engine.stats().blocks_used, 0);
}

TEST(Engine, AbortFreesBlocksAndRequestsAreValidated) {
  auto model = engine_model();
  infer::EngineConfig config;
  config.num_blocks = 20;
  infer::Engine engine(*model, config);
  const int64_t a = engine.add_request(prompt_of(30, 1), params(40));
  engine.add_request(prompt_of(5, 2), params(3));
  engine.step();
  engine.step();
  EXPECT_GT(engine.stats().blocks_used, 0);
  engine.abort_request(a);
  engine.abort_request(12345);  // unknown: ignored
  run_all(engine);
  EXPECT_EQ(engine.stats().blocks_used, 0);
  EXPECT_FALSE(engine.has_unfinished());

  EXPECT_TESSERA_ERROR(engine.add_request({}, params(4)), ValueError, "[Engine.add_request]");
  EXPECT_TESSERA_ERROR(engine.add_request(prompt_of(96, 1), params(4)), ValueError,
                       "expected a prompt of 1 to 95 tokens");
  EXPECT_TESSERA_ERROR(engine.add_request({1, 40}, params(4)), ValueError, "token ids in [0, 40)");
  EXPECT_TESSERA_ERROR(engine.add_request({1}, params(0)), ValueError, "max_tokens >= 1");
  GenerationParams bad = params(4);
  bad.sampling.top_p = 0.0;
  EXPECT_TESSERA_ERROR(engine.add_request({1}, bad), ValueError, "top_p");
  // max_tokens beyond the context is capped: the request ends with the context (Length).
  const int64_t id = engine.add_request(prompt_of(90, 3), params(1000));
  auto got = run_all(engine);
  EXPECT_EQ(got[id].size(), 6u);
}

// vLLM's --max-model-len: prompts and outputs end within it, and the default cache is sized for
// it rather than for the model's whole context.
TEST(Engine, MaxModelLenCapsPromptsOutputsAndTheDefaultCache) {
  auto model = engine_model();  // a context of 96
  EXPECT_EQ(infer::Engine(*model, infer::EngineConfig{}).config().max_model_len, 96);
  infer::EngineConfig config;
  config.max_model_len = 40;
  config.max_num_seqs = 2;
  infer::Engine engine(*model, config);
  EXPECT_EQ(engine.config().max_model_len, 40);
  EXPECT_EQ(engine.config().num_blocks, 2 * 3);  // 40 positions in blocks of 16, per sequence
  EXPECT_TESSERA_ERROR(engine.add_request(prompt_of(40, 1), params(4)), ValueError,
                       "expected a prompt of 1 to 39 tokens");
  const int64_t id = engine.add_request(prompt_of(30, 3), params(1000));
  EXPECT_EQ(run_all(engine)[id].size(), 10u);
  config.max_model_len = 97;
  EXPECT_TESSERA_ERROR(infer::Engine(*model, config), ValueError,
                       "expected max_model_len in [0, 96]");
}

}  // namespace
}  // namespace tessera
