#pragma once
// Speculative decoding by prompt lookup (vLLM's "ngram" method, llama.cpp's lookup decoding):
// a decoding sequence whose last n tokens (n from prompt_lookup_max down to prompt_lookup_min)
// occurred earlier in its prompt or output proposes the tokens that followed them then as drafts.
// The engine runs the sequence's last token and its drafts in one forward and samples each of
// their rows in turn, exactly as it would have one token per step (same seeded draw, penalties,
// grammar, logprobs); a draft is accepted while it equals the token sampled before it, and the
// first sample that differs ends the step. The output is therefore token for token what the
// engine writes without speculation, in fewer steps when the text repeats itself (code edits,
// quotations, extraction, summaries): a decode step streams the weights once for 1 + k tokens.
//
//   infer::EngineConfig config;
//   config.speculative = {.num_speculative_tokens = 4};
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace tessera::infer {

struct SpeculativeConfig {
  int64_t num_speculative_tokens = 0;  // drafts per sequence and step, at most; 0: off
  int64_t prompt_lookup_min = 2;       // the shortest suffix looked up
  int64_t prompt_lookup_max = 4;       // the longest, tried first
  bool enabled() const { return num_speculative_tokens > 0; }
  // ValueError "[SpeculativeConfig] expected ..." naming the field out of range.
  void validate() const;
  // From vLLM's --speculative-config / speculative_config JSON: {"method": "ngram",
  // "num_speculative_tokens": k, "prompt_lookup_max": n, "prompt_lookup_min": m}. One lookup
  // bound alone sets the other within it (min 4 alone: max 4). ValueError naming op for another
  // method (draft models, EAGLE, MTP are not built), unknown keys or values out of range.
  static SpeculativeConfig from_json(const nlohmann::json& j, const char* op);
  // The same from JSON text (a command-line flag's value); ValueError for text that is not JSON.
  static SpeculativeConfig parse(std::string_view json_text, const char* op);
};

// Replaces draft with the tokens that followed the most recent earlier occurrence of the
// longest suffix of tokens (n in [prompt_lookup_min, prompt_lookup_max], fewer than
// tokens.size()) that occurs earlier, at most max_drafts of them; empty when none occurs.
void propose_ngram_drafts(std::span<const int32_t> tokens, const SpeculativeConfig& config,
                          int64_t max_drafts, std::vector<int32_t>& draft);

}  // namespace tessera::infer
