// Speculative decoding by prompt lookup: the proposer (longest suffix, most recent occurrence,
// bounds), vLLM's JSON config, the scheduler's draft budget, and the Engine's promise: with
// drafts, every request's tokens, logprobs, text and finish reason are exactly those without,
// whatever the sampling (greedy, seeded top-k, penalties), batching, preemption, prefix caching
// or grammar, in fewer steps when the text repeats.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <ostream>

#include "tessera/infer/engine.h"
#include "tessera/infer/speculative.h"
#include "tessera/tokenizers/char_tokenizer.h"
#include "testing/expect_error.h"
#include "testing/small_models.h"

namespace tessera {
namespace {

using infer::SpeculativeConfig;
using Json = nlohmann::json;

std::vector<int32_t> drafts(std::vector<int32_t> tokens, SpeculativeConfig c, int64_t max) {
  std::vector<int32_t> d{99};  // replaced
  infer::propose_ngram_drafts(tokens, c, max, d);
  return d;
}

TEST(PromptLookup, ProposesWhatFollowedTheLongestMatchingSuffix) {
  const SpeculativeConfig c{
      .num_speculative_tokens = 3, .prompt_lookup_min = 1, .prompt_lookup_max = 3};
  // Suffix "2 3": "1 2 3" matches once (len 3) at the start, "2 3" alone later (len 2).
  EXPECT_EQ(drafts({1, 2, 3, 7, 8, 0, 2, 3, 5, 1, 2, 3}, c, 3), (std::vector<int32_t>{7, 8, 0}));
  // Among matches of one length, the most recent; past the end, the copy goes on.
  EXPECT_EQ(drafts({4, 5, 6, 4, 7, 4}, c, 3), (std::vector<int32_t>{7, 4, 7}))
      << "'4' at 3 rather than at 0: then 7 4, and 7 again as the text repeats";
  EXPECT_EQ(drafts({1, 2, 3, 7, 8, 0, 2, 3}, c, 2), (std::vector<int32_t>{7, 8})) << "max_drafts";
  EXPECT_EQ(drafts({1, 2, 3, 7, 8, 0, 2, 3}, c, 0), (std::vector<int32_t>{}));
  // A loop: the occurrence may overlap the suffix, and its next turns are proposed.
  EXPECT_EQ(drafts({5, 6, 5, 6, 5}, c, 3), (std::vector<int32_t>{6, 5, 6}));
  EXPECT_EQ(drafts({1, 9, 9, 9}, c, 3), (std::vector<int32_t>{9, 9, 9}));
  EXPECT_EQ(drafts({1, 2, 3, 4}, c, 3), (std::vector<int32_t>{})) << "nothing recurs";
  std::vector<int32_t> d;
  EXPECT_EQ(infer::propose_ngram_drafts(std::vector<int32_t>{1, 2, 3, 7, 2, 3}, c, 3, d), 2)
      << "the matched suffix's length";
  EXPECT_EQ(infer::propose_ngram_drafts(std::vector<int32_t>{1, 2, 3, 4}, c, 3, d), 0);
  EXPECT_EQ(drafts({1}, c, 3), (std::vector<int32_t>{}));
}

TEST(PromptLookup, ASuffixShorterThanTheMinimumProposesNothing) {
  const SpeculativeConfig c{
      .num_speculative_tokens = 4, .prompt_lookup_min = 2, .prompt_lookup_max = 4};
  EXPECT_EQ(drafts({9, 3, 4, 8, 3}, c, 4), (std::vector<int32_t>{})) << "only '3' recurs";
  EXPECT_EQ(drafts({9, 3, 4, 8, 9, 3}, c, 4), (std::vector<int32_t>{4, 8, 9, 3}));
}

TEST(PromptLookup, ConfigFromVllmJsonAndItsErrors) {
  const auto parse = [](const char* text) {
    return SpeculativeConfig::from_json(Json::parse(text), "serve");
  };
  SpeculativeConfig c = parse(
      R"({"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 3,
          "prompt_lookup_min": 1})");
  EXPECT_EQ(c.num_speculative_tokens, 5);
  EXPECT_EQ(c.prompt_lookup_min, 1);
  EXPECT_EQ(c.prompt_lookup_max, 3);
  c = parse(R"({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 6})");
  EXPECT_EQ(c.prompt_lookup_max, 6) << "a minimum alone raises the maximum to it";
  c = parse(R"({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 1})");
  EXPECT_EQ(c.prompt_lookup_min, 1) << "a maximum alone lowers the minimum to it";
  EXPECT_TESSERA_ERROR(parse(R"({"method": "eagle", "num_speculative_tokens": 2})"), ValueError,
                       "ngram");
  EXPECT_TESSERA_ERROR(parse(R"({"method": "ngram", "num_speculative_tokens": 0})"), ValueError,
                       "num_speculative_tokens >= 1");
  EXPECT_TESSERA_ERROR(parse(R"({"method": "ngram"})"), ValueError, "num_speculative_tokens");
  EXPECT_TESSERA_ERROR(parse(R"({"method": "ngram", "num_speculative_tokens": 2, "model": "x"})"),
                       ValueError, "unknown speculative config key 'model'");
  EXPECT_TESSERA_ERROR(
      parse(R"({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 3,
                "prompt_lookup_max": 2})"),
      ValueError, "prompt_lookup_min <= prompt_lookup_max");
  EXPECT_TESSERA_ERROR(parse(R"({"method": "ngram", "num_speculative_tokens": "2"})"), ValueError,
                       "integer");
  EXPECT_TESSERA_ERROR(parse("[]"), ValueError, "JSON object");
  EXPECT_TRUE(parse(R"({"method": "ngram", "num_speculative_tokens": 2})").adaptive);
  EXPECT_FALSE(
      parse(R"({"method": "ngram", "num_speculative_tokens": 2, "adaptive": false})").adaptive);
  EXPECT_TESSERA_ERROR(parse(R"({"method": "ngram", "num_speculative_tokens": 2, "adaptive": 1})"),
                       ValueError, "boolean");
  EXPECT_FALSE(SpeculativeConfig::parse("", "serve").enabled()) << "an unset option";
  EXPECT_TESSERA_ERROR(SpeculativeConfig::parse("{method", "serve"), ValueError,
                       "[serve] expected the speculative config to be JSON");
  EXPECT_EQ(parse(R"({"method": "ngram", "num_speculative_tokens": 2, "history_tokens": 0})")
                .history_tokens,
            0);
  EXPECT_TESSERA_ERROR(
      parse(R"({"method": "ngram", "num_speculative_tokens": 2, "history_tokens": -1})"),
      ValueError, "history_tokens >= 0");
}

// Decode steps of 8 sequences timed as t = fixed + per_draft x drafts, the drafts varying.
infer::DraftPolicy policy_of(double fixed, double per_draft, double emitted_per_step) {
  infer::DraftPolicy p;
  for (int step = 0; step < 100; ++step) {
    const double drafts = step % 5;
    p.observe_step(8, drafts, emitted_per_step, fixed + per_draft * drafts);
  }
  return p;
}

TEST(DraftPolicy, DraftsRunWhenTheirChanceBeatsWhatTheirTimeBuys) {
  using infer::DraftPolicy;
  EXPECT_EQ(DraftPolicy().threshold(), 0.0) << "no steps seen: every draft runs";
  infer::DraftPolicy flat;
  for (int step = 0; step < 10; ++step) flat.observe_step(8, 0, 8, 0.01);
  EXPECT_EQ(flat.threshold(), 0.0) << "drafts never varied: their cost is unknown";
  // A large model: the weights' stream dominates, a draft adds 0.1 ms to a 10 ms step.
  const infer::DraftPolicy large = policy_of(0.010, 0.0001, 9.0);
  const double big = large.threshold();
  EXPECT_NEAR(big, 0.0001 * 9.0 / (0.010 + 0.0001 * 2), 1e-4);  // 0.088
  EXPECT_EQ(large.worth_running(0.5, big, 4), 4) << "deeper drafts not measured yet: as likely";
  EXPECT_EQ(large.worth_running(0.05, big, 4), 0);
  // A tiny model: a draft costs about what the rest of the step does.
  const infer::DraftPolicy tiny = policy_of(0.00002, 0.00002, 9.0);
  EXPECT_EQ(tiny.threshold(), 1.0) << "9 tokens in 3 drafts' time: no draft pays (clamped from 3)";
  EXPECT_EQ(tiny.worth_running(0.99, 1.0, 4), 0);
  // In between: deep drafts run while those that follow accepted ones are accepted.
  infer::DraftPolicy middle = policy_of(0.00018, 0.00002, 9.0);
  const double mid = middle.threshold();
  EXPECT_NEAR(mid, 0.00002 * 9.0 / (0.00018 + 0.00002 * 2), 0.01);  // 0.82
  EXPECT_EQ(middle.worth_running(0.8, mid, 4), 0);
  EXPECT_EQ(middle.worth_running(0.93, mid, 3), 3) << "at most what was proposed";
  for (int i = 0; i < 200; ++i) middle.after_step(0.9, 3, 2);  // the third draft always fails
  EXPECT_EQ(middle.worth_running(0.93, mid, 4), 2) << "0.93 x ~1 > 0.82 > 0.93 x ~1 x ~0";
  for (int i = 0; i < 200; ++i) middle.after_step(0.9, 2, 1);  // now the second one does
  EXPECT_EQ(middle.worth_running(0.93, mid, 4), 1);
}

// Sequences cost more than drafts (sampling, reading their cache): the fit tells them apart
// when the batch's size varies too, and a draft's threshold follows its own cost.
TEST(DraftPolicy, ASequencesCostIsNotChargedToDrafts) {
  infer::DraftPolicy p;
  for (int step = 0; step < 200; ++step) {
    const double seqs = 4 + (step * 7) % 5, drafts = (step * 3) % 4;
    p.observe_step(seqs, drafts, seqs, 0.001 + 0.0005 * seqs + 0.0001 * drafts);
  }
  const double mean_seqs = 6.0, mean_drafts = 1.5;  // about: the weights decay
  EXPECT_NEAR(p.threshold(),
              0.0001 * mean_seqs / (0.001 + 0.0005 * mean_seqs + 0.0001 * mean_drafts),
              0.02);  // 0.14; charging drafts a sequence's cost would give 0.7
}

TEST(DraftPolicy, ASequencesFirstDraftsMoveItsAcceptanceAndNewRequestsStartFromTheTypical) {
  using infer::DraftPolicy;
  DraftPolicy policy;
  EXPECT_EQ(policy.typical_acceptance(), DraftPolicy::kPriorAcceptance);
  double a = DraftPolicy::kPriorAcceptance;
  a = policy.after_step(a, 4, 4);
  EXPECT_NEAR(a, 0.55, 1e-12) << "its first draft accepted (the others tell their depths)";
  const double high = a;
  a = policy.after_step(a, 3, 2);
  EXPECT_GT(a, high) << "the first accepted again; the third's rejection is its depth's";
  for (int i = 0; i < 30; ++i) a = policy.after_step(a, 1, 0);
  EXPECT_LT(a, 0.1) << "thirty first drafts rejected";
  EXPECT_DOUBLE_EQ(policy.after_step(0.3, 0, 0), 0.3);
  // Every sequence's first drafts move the typical acceptance, slowly.
  EXPECT_LT(policy.typical_acceptance(), DraftPolicy::kPriorAcceptance);
  EXPECT_GT(policy.typical_acceptance(), 0.2);
  for (int i = 0; i < 400; ++i) policy.after_step(0.5, 1, 0);
  EXPECT_LT(policy.typical_acceptance(), 0.01);
}

TEST(NgramHistory, ProposesWhatFollowedTheLastNTokensInARecentOutput) {
  infer::NgramHistory h(/*capacity_tokens=*/12, /*n=*/2);
  std::vector<int32_t> d{99};
  h.propose(std::vector<int32_t>{1, 2}, 4, d);
  EXPECT_TRUE(d.empty()) << "nothing kept yet";
  h.add(std::vector<int32_t>{1, 2, 3, 4, 5});
  EXPECT_EQ(h.propose(std::vector<int32_t>{9, 9, 1, 2}, 2, d), 2);
  EXPECT_EQ(d, (std::vector<int32_t>{3, 4}));
  EXPECT_EQ(h.propose(std::vector<int32_t>{9, 1, 2, 3}, 9, d), 3) << "the match reaches back";
  EXPECT_EQ(d, (std::vector<int32_t>{4, 5}));
  h.propose(std::vector<int32_t>{4, 5}, 3, d);
  EXPECT_TRUE(d.empty()) << "nothing followed '4 5'";
  h.add(std::vector<int32_t>{1, 2, 7});
  h.propose(std::vector<int32_t>{1, 2}, 4, d);
  EXPECT_EQ(d, (std::vector<int32_t>{7})) << "the most recent occurrence, to its output's end";
  h.add(std::vector<int32_t>{8, 9});
  EXPECT_EQ(h.num_tokens(), 8) << "an output of n tokens or fewer proposes nothing: not kept";
  h.add(std::vector<int32_t>{6, 6, 6, 6, 6});  // 13 tokens: the first output goes
  EXPECT_EQ(h.num_tokens(), 8);
  h.propose(std::vector<int32_t>{2, 3}, 2, d);
  EXPECT_TRUE(d.empty()) << "'2 3' was only in the dropped output";
  h.propose(std::vector<int32_t>{1, 2}, 4, d);
  EXPECT_EQ(d, (std::vector<int32_t>{7}));
  h.propose(std::vector<int32_t>{6, 6}, 4, d);
  EXPECT_EQ(d, (std::vector<int32_t>{6})) << "its last occurrence with a token after it";
  h.add(std::vector<int32_t>(13, 5));
  EXPECT_EQ(h.num_tokens(), 8) << "longer than the whole history: not kept";
}

// ---- the scheduler's share of drafts ----

TEST(SchedulerDrafts, DraftsRideDecodeStepsWithinTheBudgetAndTheSpareBlocks) {
  infer::PagedKVCache cache({1, 1, 8}, 4, 16);
  infer::Scheduler sched({/*max_num_seqs=*/2, /*max_num_batched_tokens=*/8}, cache);
  infer::Sequence a, b;
  for (auto* s : {&a, &b}) {
    s->tokens.assign(3, 1);
    s->prompt_len = 3;
  }
  a.id = a.arrival = 0;
  b.id = b.arrival = 1;
  sched.add(&a);
  sched.add(&b);
  a.draft = {5, 5, 5};
  auto out = sched.schedule();  // prefills: drafts never ride them
  ASSERT_EQ(out.scheduled.size(), 2u);
  for (const auto& s : out.scheduled) EXPECT_EQ(s.num_draft_tokens, 0);
  for (auto* s : {&a, &b}) {
    s->num_computed = 3;
    s->tokens.push_back(2);
  }
  // a: 1 + 3 drafts; b: 1 + the 3 tokens left of a budget of 8.
  a.draft = {5, 5, 5};
  b.draft = {6, 6, 6, 6, 6};
  out = sched.schedule();
  ASSERT_EQ(out.scheduled.size(), 2u);
  EXPECT_EQ(out.scheduled[0].num_new_tokens, 4);
  EXPECT_EQ(out.scheduled[0].num_draft_tokens, 3);
  EXPECT_EQ(out.scheduled[1].num_new_tokens, 4);
  EXPECT_EQ(out.scheduled[1].num_draft_tokens, 3);
  EXPECT_EQ(out.num_tokens, 8);
  // a at 15 tokens decodes position 15 in its first block; 4 drafts would need a second block,
  // leaving 1 free block for 2 running sequences: it keeps to the block it has.
  a.num_computed = 15;
  a.tokens.assign(16, 1);
  b.draft.clear();
  ASSERT_TRUE(cache.reserve(b.blocks, 20));  // b holds 2 blocks: 1 of the 4 stays free
  a.draft = {5, 5, 5, 5};
  out = sched.schedule();
  EXPECT_EQ(out.scheduled[0].num_draft_tokens, 0) << "no draft slot left in a's block";
  EXPECT_EQ(a.blocks.size(), 1u);
}

// ---- the Engine ----

struct Run {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::string text;
  infer::FinishReason finish = infer::FinishReason::None;
  bool operator==(const Run&) const = default;
};

void PrintTo(const Run& r, std::ostream* os) {
  *os << "tokens";
  for (int32_t t : r.tokens) *os << " " << t;
  *os << ", text '" << r.text << "', finish " << infer::finish_reason_name(r.finish);
}

// A prompt that repeats itself, so its continuation is likely to as well.
std::vector<int32_t> repetitive_prompt(int64_t period, int64_t repeats, int32_t first,
                                       int32_t vocab) {
  std::vector<int32_t> p;
  for (int64_t r = 0; r < repeats; ++r)
    for (int64_t i = 0; i < period; ++i) p.push_back((first + 7 * i) % vocab);
  return p;
}

// Runs every request to the end; each one's tokens, logprobs, text and finish reason by id, and
// how many outputs brought tokens.
std::map<int64_t, Run> run_all(infer::Engine& engine, int64_t& outputs) {
  std::map<int64_t, Run> got;
  outputs = 0;
  while (engine.has_unfinished()) {
    for (const infer::RequestOutput& out : engine.step()) {
      outputs += !out.new_tokens.empty();
      EXPECT_TRUE(out.error.empty()) << out.error;
      Run& r = got[out.request_id];
      r.tokens.insert(r.tokens.end(), out.new_tokens.begin(), out.new_tokens.end());
      EXPECT_EQ(out.completion_tokens, static_cast<int64_t>(r.tokens.size()));
      for (const auto& lp : out.logprobs) r.logprobs.push_back(lp.logprob);
      r.text += out.text;
      if (out.finished()) r.finish = out.finish_reason;
    }
  }
  return got;
}

infer::GenerationParams params(int64_t max_tokens, double temperature, uint64_t seed) {
  infer::GenerationParams p;
  p.sampling.temperature = temperature;
  p.sampling.top_k = temperature > 0 ? 5 : 0;
  p.sampling.seed = seed;
  p.stopping.max_tokens = max_tokens;
  return p;
}

// The requests under config without speculation, with every draft run, and with the drafts the
// policy picks: their runs must be identical. Returns the stats of the run with every draft.
infer::EngineStats check_speculation_changes_nothing(
    const models::CausalLM& model, infer::EngineConfig config,
    const std::vector<std::pair<std::vector<int32_t>, infer::GenerationParams>>& requests,
    std::shared_ptr<const tokenizers::Tokenizer> tok = nullptr) {
  std::map<int64_t, Run> runs[3];
  int64_t outputs[3];
  infer::EngineStats stats[3];
  for (int spec = 0; spec < 3; ++spec) {
    config.speculative = {
        .num_speculative_tokens = spec ? 4 : 0, .prompt_lookup_min = 1, .adaptive = spec == 2};
    infer::Engine engine(model, config, tok);
    for (const auto& [prompt, p] : requests) engine.add_request(prompt, p);
    runs[spec] = run_all(engine, outputs[spec]);
    stats[spec] = engine.stats();
    EXPECT_EQ(stats[spec].blocks_used, 0) << "finished requests free their blocks";
  }
  EXPECT_EQ(runs[1], runs[0]);
  EXPECT_EQ(runs[2], runs[0]) << "the adaptive policy's drafts";
  for (const auto& [id, run] : runs[0]) EXPECT_NE(run.finish, infer::FinishReason::None) << id;
  // Each accepted draft comes in its sequence's output of the step that ran it.
  int64_t tokens = 0;
  for (const auto& [id, run] : runs[0]) tokens += static_cast<int64_t>(run.tokens.size());
  EXPECT_EQ(outputs[0], tokens);
  for (int spec = 1; spec < 3; ++spec) {
    EXPECT_LE(stats[spec].spec_accepted_tokens, stats[spec].spec_draft_tokens);
    EXPECT_EQ(outputs[spec], tokens - stats[spec].spec_accepted_tokens);
  }
  EXPECT_EQ(stats[0].spec_draft_tokens, 0);
  return stats[1];
}

TEST(EngineSpeculative, GreedyAndSeededSamplesEqualThoseWithoutDrafts) {
  auto model = testing::small_llama(/*max_seq_len=*/160);
  std::vector<std::pair<std::vector<int32_t>, infer::GenerationParams>> reqs;
  for (int i = 0; i < 6; ++i) {
    auto p = params(40 + 7 * i, i % 3 == 2 ? 0.8 : 0.0, 100 + i);
    if (i == 1) p.logprobs = 2;
    if (i == 3) {
      p.sampling.repetition_penalty = 1.3;
      p.sampling.frequency_penalty = 0.4;
    }
    if (i == 4) p.sampling.presence_penalty = -0.5;
    reqs.emplace_back(repetitive_prompt(3 + i, 4, i, 61), p);
  }
  const infer::EngineStats s = check_speculation_changes_nothing(*model, {.max_num_seqs = 6}, reqs);
  EXPECT_GT(s.spec_accepted_tokens, 20) << "a random model's text repeats: drafts land";
  EXPECT_GT(s.spec_num_drafts, 0);
}

TEST(EngineSpeculative, PreemptionPrefixCachingAndSmallBudgetsChangeNothing) {
  auto model = testing::small_gpt2(/*block_size=*/120);
  std::vector<std::pair<std::vector<int32_t>, infer::GenerationParams>> reqs;
  const std::vector<int32_t> shared = repetitive_prompt(5, 4, 3, 70);  // 20 tokens: a full block
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> prompt = shared;
    prompt.push_back(static_cast<int32_t>(i));
    reqs.emplace_back(prompt, params(60, i % 2 ? 0.7 : 0.0, 7 + i));
  }
  // 8 blocks of 16 for 6 requests of up to 81 tokens: preemptions; 12 tokens per step.
  const infer::EngineStats s = check_speculation_changes_nothing(
      *model, {.num_blocks = 8, .max_num_seqs = 6, .max_num_batched_tokens = 12}, reqs);
  EXPECT_GT(s.num_preemptions, 0);
  EXPECT_GT(s.prefix_cache_hits, 0);
  EXPECT_GT(s.spec_accepted_tokens, 0);
}

TEST(EngineSpeculative, StopsLengthAndTheContextEndChangeNothing) {
  auto model = testing::small_llama(/*max_seq_len=*/48);
  auto tok = std::make_shared<tokenizers::CharTokenizer>(
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .");
  std::vector<std::pair<std::vector<int32_t>, infer::GenerationParams>> reqs;
  for (int i = 0; i < 8; ++i) {
    auto p = params(i < 4 ? 100 : 3 + i, 0.0, 0);  // up to the context's end, or a few tokens
    if (i % 4 == 1) p.stopping.stop_token_ids = {i == 1 ? 5 : 9};
    if (i % 4 == 2) p.stopping.stop = {tok->decode(std::vector<int32_t>{11, 12})};
    reqs.emplace_back(repetitive_prompt(2 + i % 3, 3, i, 61), p);
  }
  check_speculation_changes_nothing(*model, {.max_num_seqs = 8}, reqs, tok);
}

TEST(EngineSpeculative, StructuredOutputChangesNothing) {
  auto model = testing::small_gpt2(/*block_size=*/300);
  auto tok = std::make_shared<tokenizers::CharTokenizer>(
      "{}[],:\"\\ \n0123456789.-+eEabcdfghijklmnopqrstuvwxyz");
  const auto grammar = infer::JsonGrammar::from_schema(
      Json::parse(R"({"type": "array", "items": {"enum": ["abab", "abba"]}, "maxItems": 12})"));
  std::vector<std::pair<std::vector<int32_t>, infer::GenerationParams>> reqs;
  for (int i = 0; i < 4; ++i) {
    auto p = params(200, i % 2 ? 1.0 : 0.0, 40 + i);
    p.json_grammar = grammar;
    p.logprobs = 1;
    reqs.emplace_back(repetitive_prompt(4, 3, i, 50), p);
  }
  const infer::EngineStats s =
      check_speculation_changes_nothing(*model, {.max_num_seqs = 4}, reqs, tok);
  EXPECT_GT(s.spec_accepted_tokens, 0) << "the array's items repeat";
  // Drafts are cut where the grammar would mask them (148 drafted for the same 35 accepted
  // without that).
  EXPECT_GT(2 * s.spec_accepted_tokens, s.spec_draft_tokens);
}

// A request whose own text offers no drafts takes them from an earlier request's output: the
// same sampled request sent again (a retry with its seed) is drafted almost whole, and its
// tokens are still exactly those decoded without speculation.
TEST(EngineSpeculative, DraftsComeFromEarlierOutputsToo) {
  auto model = testing::small_llama(/*max_seq_len=*/160);
  const std::vector<int32_t> prompt = {3, 17, 29, 41, 5, 52, 11};
  std::vector<int32_t> want;
  int64_t accepted[2];
  for (int64_t history : {0, 1 << 16}) {
    infer::EngineConfig config;
    config.enable_prefix_caching = false;
    config.speculative = {
        .num_speculative_tokens = 4, .adaptive = false, .history_tokens = history};
    infer::Engine engine(*model, config);
    int64_t outputs = 0;
    for (int rep = 0; rep < 2; ++rep) {
      engine.add_request(prompt, params(60, 1.0, 5));  // sampled text hardly repeats itself
      const auto runs = run_all(engine, outputs);
      if (want.empty()) want = runs.begin()->second.tokens;
      EXPECT_EQ(runs.begin()->second.tokens, want) << "history " << history << ", rep " << rep;
    }
    accepted[history > 0] = engine.stats().spec_accepted_tokens;
  }
  // Own text alone: 4 accepted; with the first request's output: 46 (of the second's 59 decode
  // steps, drafts starting once its last 2 tokens are found).
  EXPECT_GE(accepted[1], accepted[0] + 35) << "the second request was drafted from the first";
}

TEST(EngineSpeculative, AnInvalidConfigIsRefused) {
  auto model = testing::small_llama();
  EXPECT_TESSERA_ERROR(
      infer::Engine(*model, {.speculative = {.num_speculative_tokens = 2, .prompt_lookup_min = 0}}),
      ValueError, "prompt_lookup_min");
}

}  // namespace
}  // namespace tessera
