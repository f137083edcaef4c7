#pragma once
// When a generation ends (token budget, stop tokens such as EOS, stop strings), and the
// incremental detokenizer that turns a token stream into text deltas. Text that could still
// turn into a stop string is held back until it cannot, so streamed text never includes the
// stop string (OpenAI's semantics: the stop sequence is not returned, unless
// include_stop_str_in_output asks for it); so is a UTF-8 character
// whose bytes have not all arrived, so deltas split text only between characters.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/tokenizers/tokenizer.h"

namespace tessera::infer {

struct StoppingCriteria {
  int64_t max_tokens = 16;              // new tokens at most (>= 1)
  std::vector<int32_t> stop_token_ids;  // e.g. EOS; kept in the output ids, its text left out
  std::vector<std::string> stop;        // stop strings (need a tokenizer), excluded from text
  // Before this many new tokens the stop tokens cannot be drawn and stop strings do not end the
  // text (vLLM's min_tokens; at most max_tokens).
  int64_t min_tokens = 0;
  // Whether the stop string that ends the text stays in it (vLLM's include_stop_str_in_output).
  bool include_stop_str_in_output = false;
  bool is_stop_token(int32_t token) const {
    return std::find(stop_token_ids.begin(), stop_token_ids.end(), token) != stop_token_ids.end();
  }
  // Sets the stop tokens' logits to -inf while fewer than min_tokens new tokens were drawn.
  void mask_early_stops(std::span<float> logits, int64_t num_output) const;
  // ValueError "[StoppingCriteria] expected ...".
  void validate() const;
};

enum class FinishReason { None, Stop, Length, Abort };
// "stop", "length", "abort" (OpenAI's finish_reason); "" for None.
std::string_view finish_reason_name(FinishReason r);

// Text of a sequence's generated tokens, with stop-string detection.
class TextStream {
 public:
  // tokenizer may be null: then there is no text and stop strings are ignored; so they are when
  // stopping is.
  TextStream(const tokenizers::Tokenizer* tokenizer, const StoppingCriteria* stopping,
             int32_t prev_token = -1);
  // Adds a token; returns the text that can be emitted now. Sets stopped when a stop string is
  // complete from the min_tokens-th token on (the text is cut before it, or after it with
  // include_stop_str_in_output, and nothing after it is emitted).
  std::string push(int32_t token);
  // The text held back at the end (nothing if stopped).
  std::string flush();
  bool stopped() const { return stopped_; }
  // All emitted text so far.
  const std::string& text() const { return emitted_; }

 private:
  const tokenizers::Tokenizer* tokenizer_;
  const StoppingCriteria* stopping_;
  int32_t prev_;
  int64_t pushed_ = 0;
  std::string pending_;  // decoded, not yet emitted
  std::string emitted_;
  bool stopped_ = false;
};

}  // namespace tessera::infer
