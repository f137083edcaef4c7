// Inference engine benchmarks: single-stream decode (infer::generate, static KV cache) and
// continuous-batching throughput with 1, 4, 16 and 32 concurrent streams (64 too on a GPU;
// infer::Engine, paged KV cache), with time to first token and time between tokens, for
// llama2.c's stories260K and a GPT-2 small-sized model (124M parameters, random weights: speed
// does not depend on them). Greedy decoding without stop tokens, so every stream generates its
// full budget. Prints one markdown table row per measurement; each number is the median over
// --reps runs. --device cuda runs the models on the GPU. bench/torch_decode.py is the PyTorch
// peer of the GPT-2 rows (--device cuda or cpu), with the same prompt length and token budget.
// These runs keep prefix caching off: they measure prefill and decode. --only prefix measures it
// instead: chat turns on the GPT-2-sized model, one after another, each a shared prompt of
// --prompt-len tokens and 16 of its own, with the cache on and off in alternating rounds. --only
// kv-dtype compares a float32 and a bfloat16 KV cache (alternating rounds) on the GPT-2-sized
// model: --streams streams (default 16) decoding after prompts of --prompt-len tokens, where
// attention reads the long contexts. --only structured measures what structured output costs a
// decode step on the GPT-2-sized model with the GPT-2 vocabulary (--gpt2-dir): free text against
// an object whose one property is a string of at least 10,000 characters (string content: the
// masker's wholesale path) and an array of at least 10,000 integers (digits and commas: the trie
// walk every step), a regex of prose characters (most of the vocabulary: the largest walk) and
// two GBNF grammars (an integer list, words), alternating; neither JSON value can end within the
// token budget and the others only at an end of text greedy random weights never pick, so every
// stream generates all of it, as free text does. --only speculative compares plain decoding,
// prompt-lookup speculation running every draft and the adaptive draft policy (alternating
// rounds) on stories260K (real text) and the GPT-2-sized model (whose random weights loop, so
// its drafts land); --only speculative-gpt2 runs the latter alone; --only speculative-history
// compares looking in a request's own text with looking in earlier outputs too (stories260K).
// --only lora measures serving LoRA adapters (rank 16 on every projection, random weights) on
// the GPT-2-sized model: the base alone, every request through one adapter, and requests
// spread over four adapters (neighbours in the batch never share one: the branches run per
// sequence), in alternating rounds.
//
//   engine_bench [--stories PATH] [--reps N]
//                [--only stories|gpt2|prefix|kv-dtype|structured|speculative|speculative-gpt2|
//                        speculative-history|lora]
//                [--streams N] [--gpt2-dir DIR]
//                [--device cpu|cuda[:N]] [--prompt-len N] [--new-tokens N]
//                [--dtype float32|bfloat16] [--quantization int8]   (the CPU runner's weights)
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tessera/core/device.h"
#include "tessera/infer/engine.h"
#include "tessera/infer/generate.h"
#include "tessera/infer/model_loader.h"
#include "tessera/infer/structured_output.h"
#include "tessera/models/gpt2.h"
#include "tessera/nn/lora.h"
#include "tessera/ops/creation.h"
#include "tessera/tokenizers/gpt2_tokenizer.h"

using namespace tessera;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

infer::GenerationParams greedy(int64_t n) {
  infer::GenerationParams p;
  p.sampling.temperature = 0.0;
  p.stopping.max_tokens = n;
  return p;
}

// A deterministic prompt of n tokens (BOS-like first token 1, then spread ids).
std::vector<int32_t> prompt_of(int64_t n, int64_t vocab, int64_t salt) {
  std::vector<int32_t> p{1};
  for (int64_t i = 1; i < n; ++i)
    p.push_back(static_cast<int32_t>(3 + (i * 97 + salt * 31) % (vocab - 3)));
  return p;
}

// Tokens per second of one stream generating n tokens after prompt (prefill included).
double single_stream(infer::ModelRunner& runner, const std::vector<int32_t>& prompt, int64_t n,
                     int reps) {
  std::vector<double> rates;
  for (int r = 0; r < reps + 1; ++r) {
    const Clock::time_point t0 = Clock::now();
    const infer::GenerationResult res = infer::generate(runner, prompt, greedy(n));
    const double s = seconds_since(t0);
    if (r > 0) rates.push_back(static_cast<double>(res.tokens.size()) / s);  // first: warm-up
  }
  return median(rates);
}

struct BatchResult {
  double tokens_per_s, ttft_ms, tbt_ms;
  double accepted_per_draft = 0.0;  // speculative decoding: accepted / draft tokens
};

// Structured output for batched(): a grammar and the tokenizer its masks need.
struct Constraint {
  std::shared_ptr<const tokenizers::Tokenizer> tokenizer;
  std::shared_ptr<const infer::JsonGrammar> grammar;
};

// streams requests at once through an Engine batching up to streams sequences (base: the
// dtypes).
// fresh_prompts gives request i of rep r prompt salt 1000 r + i (else i), so reps differ.
// With loras, request i runs through adapter i % loras.size().
BatchResult batched(const models::CausalLM& model, int streams, int64_t prompt_len, int64_t n,
                    int reps, const infer::EngineConfig& base = {},
                    const Constraint& constraint = {}, bool fresh_prompts = false,
                    const std::vector<nn::LoraAdapter>& loras = {}) {
  infer::EngineConfig config = base;
  config.max_num_seqs = streams;
  config.num_blocks = streams * ((prompt_len + n + 15) / 16 + 1);
  config.enable_prefix_caching = false;  // each rep sends the same prompts again
  infer::Engine engine(model, config, constraint.tokenizer);
  for (const nn::LoraAdapter& lora : loras) engine.add_lora(lora);
  infer::GenerationParams params = greedy(n);
  params.json_grammar = constraint.grammar;
  std::vector<double> rates, ttfts, tbts;
  infer::EngineStats timed_from;
  for (int r = 0; r < reps + 1; ++r) {
    if (r == 1) timed_from = engine.stats();
    const Clock::time_point t0 = Clock::now();
    std::vector<Clock::time_point> last(streams);
    std::vector<bool> started(streams, false);
    std::vector<double> ttft, tbt;
    int64_t total = 0;
    for (int i = 0; i < streams; ++i) {
      if (!loras.empty()) params.lora_id = static_cast<int32_t>(i % loras.size()) + 1;
      engine.add_request(
          prompt_of(prompt_len, model.vocab_size(), fresh_prompts ? 1000 * r + i : i), params);
    }
    while (engine.has_unfinished()) {
      for (const infer::RequestOutput& out : engine.step()) {
        const int i = static_cast<int>(out.request_id % streams);
        const Clock::time_point now = Clock::now();
        if (!started[i])
          ttft.push_back(std::chrono::duration<double, std::milli>(now - t0).count());
        else
          tbt.push_back(std::chrono::duration<double, std::milli>(now - last[i]).count());
        started[i] = true;
        last[i] = now;
        total += static_cast<int64_t>(out.new_tokens.size());
      }
    }
    if (r == 0) continue;  // warm-up
    rates.push_back(static_cast<double>(total) / seconds_since(t0));
    ttfts.push_back(median(ttft));
    tbts.push_back(median(tbt));
  }
  const infer::EngineStats end = engine.stats();
  const double drafted = static_cast<double>(end.spec_draft_tokens - timed_from.spec_draft_tokens);
  return {
      median(rates), median(ttfts), median(tbts),
      drafted > 0 ? (end.spec_accepted_tokens - timed_from.spec_accepted_tokens) / drafted : 0.0};
}

// Median time to first token (ms) of `turns` requests sent one after another, each the shared
// prompt followed by 16 tokens of its own, and the share of prompt tokens found in the cache.
std::pair<double, double> chat_turns(infer::Engine& engine, const std::vector<int32_t>& shared,
                                     int turns, int64_t n, int64_t salt) {
  std::vector<double> ttft;
  const infer::EngineStats before = engine.stats();
  for (int t = 0; t < turns; ++t) {
    std::vector<int32_t> prompt = shared;
    const std::vector<int32_t> own =
        prompt_of(17, engine.runner().vocab_size(), salt * 1000 + t + 1);
    prompt.insert(prompt.end(), own.begin() + 1, own.end());
    const Clock::time_point t0 = Clock::now();
    engine.add_request(prompt, greedy(n));
    bool first = true;
    while (engine.has_unfinished())
      for (const infer::RequestOutput& out : engine.step())
        if (first && !out.new_tokens.empty()) {
          ttft.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
          first = false;
        }
  }
  const infer::EngineStats after = engine.stats();
  const double queries =
      static_cast<double>(after.prefix_cache_queries - before.prefix_cache_queries);
  return {median(ttft),
          queries > 0 ? (after.prefix_cache_hits - before.prefix_cache_hits) / queries : 0.0};
}

void run_prefix(const models::CausalLM& model, int64_t prompt_len, int64_t n, int reps) {
  const std::vector<int32_t> shared = prompt_of(prompt_len, model.vocab_size(), 7);
  std::printf(
      "| model | shared prompt | turns | TTFT ms, cache off | TTFT ms, cache on | "
      "off / on | prompt tokens from the cache |\n|---|---|---|---|---|---|---|\n");
  infer::EngineConfig off_config;
  off_config.enable_prefix_caching = false;
  infer::Engine on(model), off(model, off_config);
  const int turns = 6;
  std::vector<double> on_ms, off_ms, ratios, hits;
  for (int r = 0; r < reps + 1; ++r) {  // alternating; the first round warms both up
    const auto [off_ttft, off_hits] = chat_turns(off, shared, turns, n, r);
    const auto [on_ttft, on_hits] = chat_turns(on, shared, turns, n, r);
    if (r == 0) continue;
    off_ms.push_back(off_ttft);
    on_ms.push_back(on_ttft);
    ratios.push_back(off_ttft / on_ttft);
    hits.push_back(on_hits);
    std::fprintf(stderr, "round %d: off %.1f ms, on %.1f ms\n", r, off_ttft, on_ttft);
  }
  std::printf("| GPT-2 124M | %lld tokens | %d x %d rounds | %.1f | %.1f | %.2fx | %.0f%% |\n",
              static_cast<long long>(prompt_len), turns, reps, median(off_ms), median(on_ms),
              median(ratios), 100.0 * median(hits));
}

// Float32 against bfloat16 KV caches in alternating rounds (one rep each after a warm-up).
void run_kv_dtype(const models::CausalLM& model, int streams, int64_t prompt_len, int64_t n,
                  int reps) {
  std::printf(
      "| model | streams x prompt | TBT ms, float32 cache | TBT ms, bfloat16 cache | "
      "float32 / bfloat16 TBT | tokens/s float32 | tokens/s bfloat16 | KV MB per stream |\n"
      "|---|---|---|---|---|---|---|---|\n");
  std::vector<double> tbt32, tbt16, ratios, rate32, rate16;
  for (int r = 0; r < reps; ++r) {
    infer::EngineConfig bf16;
    bf16.kv_cache_dtype = kBFloat16;
    const BatchResult f = batched(model, streams, prompt_len, n, 1);
    const BatchResult b = batched(model, streams, prompt_len, n, 1, bf16);
    tbt32.push_back(f.tbt_ms);
    tbt16.push_back(b.tbt_ms);
    ratios.push_back(f.tbt_ms / b.tbt_ms);
    rate32.push_back(f.tokens_per_s);
    rate16.push_back(b.tokens_per_s);
    std::fprintf(stderr, "round %d: TBT float32 %.2f ms, bfloat16 %.2f ms (%.3fx)\n", r, f.tbt_ms,
                 b.tbt_ms, f.tbt_ms / b.tbt_ms);
  }
  const infer::KVCacheSpec spec = infer::ModelRunner(model).kv_spec();
  const double mb = static_cast<double>(spec.bytes_per_token() * (prompt_len + n)) / (1 << 20);
  std::printf("| GPT-2 124M | %d x %lld | %.2f | %.2f | %.2fx | %.0f | %.0f | %.0f / %.0f |\n",
              streams, static_cast<long long>(prompt_len), median(tbt32), median(tbt16),
              median(ratios), median(rate32), median(rate16), mb, mb / 2);
}

// Free text and each constraint in alternating rounds, at 1 and 16 streams: one row per
// constraint, with its TBT, free text's of the same rounds and the median of their ratios.
void run_structured(const models::CausalLM& model, const std::string& gpt2_dir, int64_t prompt_len,
                    int64_t n, int reps) {
  std::shared_ptr<const tokenizers::Tokenizer> tok =
      tokenizers::GPT2Tokenizer::from_directory(gpt2_dir);
  auto schema = [&](const char* text) {
    return Constraint{tok, infer::JsonGrammar::from_schema(nlohmann::json::parse(text))};
  };
  const std::vector<std::pair<const char*, Constraint>> constraints = {
      {"JSON Schema: string property", schema(R"({"type": "object", "required": ["text"],
          "properties": {"text": {"type": "string", "minLength": 10000}}})")},
      {"JSON Schema: integer array",
       schema(R"({"type": "array", "items": {"type": "integer"}, "minItems": 10000})")},
      {"regex: prose", {tok, infer::JsonGrammar::regex(R"([A-Za-z0-9 ,.'\n]*)")}},
      {"GBNF: integer list", {tok, infer::JsonGrammar::grammar(R"g(
root ::= "[" int ("," " "? int)*
int  ::= "-"? [0-9]+
)g")}},
      {"GBNF: prose", {tok, infer::JsonGrammar::grammar(R"g(
root ::= word (" " word)*
word ::= [A-Za-z0-9,.']+
)g")}},
  };
  std::printf(
      "| model | streams | constraint | TBT ms | TBT ms, free text | constraint / free |\n"
      "|---|---|---|---|---|---|\n");
  for (int streams : {1, 16}) {
    std::vector<double> t_free;
    std::vector<std::vector<double>> t(constraints.size()), ratio(constraints.size());
    for (int r = 0; r < reps; ++r) {
      const double f = batched(model, streams, prompt_len, n, 1, {}, {tok, nullptr}).tbt_ms;
      t_free.push_back(f);
      std::fprintf(stderr, "%d streams, round %d: TBT free %.2f", streams, r, f);
      for (size_t c = 0; c < constraints.size(); ++c) {
        t[c].push_back(batched(model, streams, prompt_len, n, 1, {}, constraints[c].second).tbt_ms);
        ratio[c].push_back(t[c].back() / f);
        std::fprintf(stderr, ", %s %.2f", constraints[c].first, t[c].back());
      }
      std::fprintf(stderr, " ms\n");
    }
    for (size_t c = 0; c < constraints.size(); ++c)
      std::printf("| GPT-2 124M | %d | %s | %.2f | %.2f | %.3fx |\n", streams, constraints[c].first,
                  median(t[c]), median(t_free), median(ratio[c]));
    std::fflush(stdout);
  }
}

// Two speculative variants against plain decoding in alternating rounds: tokens/s of each,
// their ratios to plain (medians of the per-round ratios) and the share of drafts accepted.
struct SpeculativeVariant {
  const char* label;
  infer::SpeculativeConfig config;
};

void compare_speculation(const std::string& name, const models::CausalLM& model, int64_t prompt_len,
                         int64_t n, int reps, const std::vector<int>& streams,
                         const SpeculativeVariant (&variants)[2], bool fresh_prompts) {
  std::printf(
      "| model | streams | tokens/s, plain | %s: tokens/s | vs plain | drafts accepted | %s: "
      "tokens/s | vs plain | drafts accepted |\n|---|---|---|---|---|---|---|---|---|\n",
      variants[0].label, variants[1].label);
  for (int c : streams) {
    std::vector<double> plain_rate, rate[2], ratio[2], accepted[2];
    for (int r = 0; r < reps; ++r) {
      const double p = batched(model, c, prompt_len, n, 1, {}, {}, fresh_prompts).tokens_per_s;
      plain_rate.push_back(p);
      std::fprintf(stderr, "%s, %d streams, round %d: plain %.0f", name.c_str(), c, r, p);
      for (int v = 0; v < 2; ++v) {
        infer::EngineConfig config;
        config.speculative = variants[v].config;
        const BatchResult s = batched(model, c, prompt_len, n, 1, config, {}, fresh_prompts);
        rate[v].push_back(s.tokens_per_s);
        ratio[v].push_back(s.tokens_per_s / p);
        accepted[v].push_back(s.accepted_per_draft);
        std::fprintf(stderr, ", %s %.0f (%.2fx, %.0f%% accepted)", variants[v].label,
                     s.tokens_per_s, ratio[v].back(), 100 * s.accepted_per_draft);
      }
      std::fprintf(stderr, "\n");
    }
    std::printf("| %s | %d | %.0f | %.0f | %.2fx | %.0f%% | %.0f | %.2fx | %.0f%% |\n",
                name.c_str(), c, median(plain_rate), median(rate[0]), median(ratio[0]),
                100.0 * median(accepted[0]), median(rate[1]), median(ratio[1]),
                100.0 * median(accepted[1]));
    std::fflush(stdout);
  }
}

// Every draft run against the drafts the policy picks (4 at most, looked up from 4 tokens down
// to 2). Each rep sends the same prompts again, which the cross-request history would draft
// whole: it stays off here.
void run_speculative(const std::string& name, const models::CausalLM& model, int64_t prompt_len,
                     int64_t n, int reps, const std::vector<int>& streams) {
  compare_speculation(
      name, model, prompt_len, n, reps, streams,
      {{"every draft", {.num_speculative_tokens = 4, .adaptive = false, .history_tokens = 0}},
       {"adaptive", {.num_speculative_tokens = 4, .history_tokens = 0}}},
      false);
}

// Greedy stories from 2-token prompts (BOS and a token, new ones each rep), adaptive
// speculation looking in each request's own text only or in the outputs of earlier requests
// too: stories repeat each other's phrases ("Once upon a time", names).
void run_history(const models::CausalLM& model, int64_t n, int reps,
                 const std::vector<int>& streams) {
  compare_speculation("stories260K", model, 2, n, reps, streams,
                      {{"own text", {.num_speculative_tokens = 4, .history_tokens = 0}},
                       {"with history", {.num_speculative_tokens = 4}}},
                      true);
}

// A rank-r adapter of every attention and MLP projection of model (random weights).
nn::LoraAdapter random_adapter(const models::CausalLM& model, int64_t r, uint64_t seed) {
  Generator gen(seed);
  nn::LoraAdapter out{{.r = r, .lora_alpha = 2.0 * r, .target_modules = {"all-linear"}}, {}};
  for (const auto& [key, w] : model.state_dict()) {
    const std::string layer = key.substr(0, key.rfind('.'));
    if (!key.ends_with(".weight") || w.dim() != 2 || !key.starts_with("transformer.h.")) continue;
    out.weights.insert(layer + ".lora_A.weight", randn({r, w.size(1)}, kFloat32, &gen) * 0.02);
    out.weights.insert(layer + ".lora_B.weight", randn({w.size(0), r}, kFloat32, &gen) * 0.02);
  }
  return out;
}

// The base model, every request through one adapter, requests over four: alternating rounds.
void run_lora(const models::CausalLM& model, int64_t prompt_len, int64_t n, int reps,
              const std::vector<int>& streams) {
  const std::vector<nn::LoraAdapter> four = {
      random_adapter(model, 16, 1), random_adapter(model, 16, 2), random_adapter(model, 16, 3),
      random_adapter(model, 16, 4)};
  const std::vector<nn::LoraAdapter> one = {four[0]};
  std::printf(
      "| model | streams | tokens/s, base | one adapter: tokens/s | vs base | four adapters: "
      "tokens/s | vs base |\n|---|---|---|---|---|---|---|\n");
  for (int c : streams) {
    std::vector<double> base_rate, rate[2], ratio[2];
    for (int r = 0; r < reps; ++r) {
      const double b = batched(model, c, prompt_len, n, 1).tokens_per_s;
      base_rate.push_back(b);
      std::fprintf(stderr, "%d streams, round %d: base %.0f", c, r, b);
      for (int v = 0; v < 2; ++v) {
        rate[v].push_back(
            batched(model, c, prompt_len, n, 1, {}, {}, false, v ? four : one).tokens_per_s);
        ratio[v].push_back(rate[v].back() / b);
        std::fprintf(stderr, ", %s %.0f (%.3fx)", v ? "four" : "one", rate[v].back(),
                     ratio[v].back());
      }
      std::fprintf(stderr, "\n");
    }
    std::printf("| GPT-2 124M | %d | %.0f | %.0f | %.3fx | %.0f | %.3fx |\n", c, median(base_rate),
                median(rate[0]), median(ratio[0]), median(rate[1]), median(ratio[1]));
    std::fflush(stdout);
  }
}

void run_model(const std::string& name, const models::CausalLM& model, int64_t prompt_len,
               int64_t n, int reps, int single_reps, const std::vector<int>& streams,
               const infer::EngineConfig& base) {
  infer::ModelRunner runner(model, base.weight_dtype);
  const double single =
      single_stream(runner, prompt_of(prompt_len, model.vocab_size(), 0), n, single_reps);
  std::printf("| %s | single stream (generate, static cache) | %lld | %.0f | | | |\n", name.c_str(),
              static_cast<long long>(n), single);
  std::fflush(stdout);
  for (int c : streams) {
    const BatchResult b = batched(model, c, prompt_len, n, reps, base);
    std::printf("| %s | %d streams (Engine, paged cache) | %lld | %.0f | %.2fx | %.2f | %.2f |\n",
                name.c_str(), c, static_cast<long long>(n), b.tokens_per_s, b.tokens_per_s / single,
                b.ttft_ms, b.tbt_ms);
    std::fflush(stdout);
  }
}

// GPT-2 small's shape with random weights (speed does not depend on them), in eval mode.
std::unique_ptr<models::GPT2> gpt2_124m(Device device) {
  Generator gen(0);
  auto gpt2 = std::make_unique<models::GPT2>(models::GPT2Config::from_name("gpt2"), &gen);
  gpt2->eval();
  gpt2->to(device);
  return gpt2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string stories = "../shared/data/stories260K.bin", only;
  std::string gpt2_dir = "../shared/data/gpt2";
  int reps = 5;
  std::vector<int> streams;
  Device device = kCPU;
  int64_t gpt2_prompt = 16, gpt2_tokens = 64;
  infer::EngineConfig base;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--stories"))
      stories = argv[i + 1];
    else if (!std::strcmp(argv[i], "--reps"))
      reps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--only"))
      only = argv[i + 1];
    else if (!std::strcmp(argv[i], "--gpt2-dir"))
      gpt2_dir = argv[i + 1];
    else if (!std::strcmp(argv[i], "--streams"))  // one batch size only (for profiling)
      streams = {std::atoi(argv[i + 1])};
    else if (!std::strcmp(argv[i], "--device"))
      device = Device(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--prompt-len"))
      gpt2_prompt = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--new-tokens"))
      gpt2_tokens = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--dtype"))  // the CPU runner's weights
      base.weight_dtype = infer::weight_dtype_from_names(argv[i + 1], "none", "engine_bench");
    else if (!std::strcmp(argv[i], "--quantization"))
      base.weight_dtype = infer::weight_dtype_from_names("auto", argv[i + 1], "engine_bench");
  }
  if (streams.empty() && only != "kv-dtype")
    streams = device.is_cpu() ? std::vector<int>{1, 4, 16, 32} : std::vector<int>{1, 4, 16, 32, 64};
  const std::string suffix =
      base.weight_dtype == kFloat32 ? "" : detail::str(" (", base.weight_dtype, " weights)");
  std::fprintf(stderr, "device: %s\n", device.str().c_str());
  std::fprintf(stderr, "threads: %d\n", omp_get_max_threads());
  if (only == "prefix") {
    run_prefix(*gpt2_124m(device), gpt2_prompt, gpt2_tokens, reps);
    return 0;
  }
  if (only == "structured") {
    run_structured(*gpt2_124m(device), gpt2_dir, gpt2_prompt, gpt2_tokens, reps);
    return 0;
  }
  if (only == "speculative" || only == "speculative-gpt2") {
    if (only == "speculative" && std::filesystem::exists(stories)) {
      auto model = infer::load_model(stories);
      model->to(device);
      run_speculative("stories260K", *model, 1, 200, reps, streams);
    }
    run_speculative("GPT-2 124M", *gpt2_124m(device), gpt2_prompt, gpt2_tokens, reps, streams);
    return 0;
  }
  if (only == "speculative-history") {
    run_history(*infer::load_model(stories), 200, reps, streams);
    return 0;
  }
  if (only == "lora") {
    run_lora(*gpt2_124m(device), gpt2_prompt, gpt2_tokens, reps, streams);
    return 0;
  }
  if (only == "kv-dtype") {
    run_kv_dtype(*gpt2_124m(device), streams.empty() ? 16 : streams[0], gpt2_prompt, gpt2_tokens,
                 reps);
    return 0;
  }
  std::printf(
      "| model | mode | tokens per stream | tokens/s | vs single | TTFT ms (median) | "
      "TBT ms (median) |\n|---|---|---|---|---|---|---|\n");
  if (only.empty() || only == "stories") {
    if (std::filesystem::exists(stories)) {
      auto model = infer::load_model(stories);
      model->to(device);
      // A 200-token run takes milliseconds: many more single-stream runs for a stable median.
      run_model("stories260K" + suffix, *model, /*prompt_len=*/1, /*n=*/200, reps, 8 * reps,
                streams, base);
    } else {
      std::fprintf(stderr, "skipping stories260K: %s not found (--stories PATH)\n",
                   stories.c_str());
    }
  }
  if (only.empty() || only == "gpt2") {
    const int r = std::max(1, reps / 2);
    run_model("GPT-2 124M" + suffix, *gpt2_124m(device), gpt2_prompt, gpt2_tokens, r, r, streams,
              base);
  }
  return 0;
}
