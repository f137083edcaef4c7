#pragma once
// vLLM's SamplingParams, turned into the engine's GenerationParams: n sequences per prompt, top_k
// -1 for "all tokens", stop strings and token ids, ignore_eos, and a seed that sequence i of a
// request moves to seed + i (as the server does for its n choices), so n > 1 sequences differ
// and each is reproducible; logit_bias; and structured output (vLLM's structured_outputs json /
// json_object / choice) as the engine's JSON grammar.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tessera/infer/generate.h"
#include "tessera/tokenizers/tokenizer.h"

namespace tessera::llm {

struct SamplingParams {
  int64_t n = 1;  // sequences per prompt
  double temperature = 1.0;
  double top_p = 1.0;
  int64_t top_k = 0;  // 0 or -1: every token
  double min_p = 0.0;
  double repetition_penalty = 1.0;
  double presence_penalty = 0.0;
  double frequency_penalty = 0.0;
  int64_t max_tokens = 16;
  // Before this many tokens neither stop tokens nor stop strings end a sequence (vLLM's).
  int64_t min_tokens = 0;
  std::vector<std::string> stop;  // excluded from the text, as OpenAI's, unless:
  bool include_stop_str_in_output = false;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;      // else the tokenizer's EOS (and BOS, which starts a new text) stop
  std::optional<int64_t> seed;  // unset: the engine draws one per sequence
  // Top alternatives to report per token (0: the sampled token's alone); unset: none. The
  // sampled tokens' raw logprobs are always computed (for the cumulative logprob).
  std::optional<int64_t> logprobs;
  // Per prompt token after the first: its raw logprob and the top alternatives (vLLM's
  // prompt_logprobs, what lm-evaluation-harness scores text with); unset: none. The engine then
  // computes the whole prompt, not taking it from the prefix cache. A request's first sequence
  // alone asks for them (the n sequences share the prompt).
  std::optional<int64_t> prompt_logprobs;
  std::vector<std::pair<int32_t, float>> logit_bias;  // (token, bias in [-100, 100])
  // Every sequence's text stays in this grammar (infer/structured_output.h); null: free text.
  std::shared_ptr<const infer::JsonGrammar> json_grammar;

  // ValueError "[SamplingParams] expected <field> ..." ("[sample] ..." for temperature, top_p
  // and top_k, checked by the sampler) naming the first field out of range.
  void validate() const;
  // The engine's params for sequence `index` of n; tokenizer (may be null) gives the end-of-text
  // ids unless ignore_eos.
  infer::GenerationParams generation_params(const tokenizers::Tokenizer* tokenizer,
                                            int64_t index = 0) const;
};

}  // namespace tessera::llm
