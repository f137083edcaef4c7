#pragma once
// When a generation ends (token budget, stop tokens such as EOS, stop strings), and the
// incremental detokenizer that turns a token stream into text deltas. Text that could still
// turn into a stop string is held back until it cannot, so streamed text never includes the
// stop string (OpenAI's semantics: the stop sequence is not returned); so is a UTF-8 character
// whose bytes have not all arrived, so deltas split text only between characters.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/tokenizers/tokenizer.h"

namespace tessera::infer {

struct StoppingCriteria {
  int64_t max_tokens = 16;              // new tokens at most (>= 1)
  std::vector<int32_t> stop_token_ids;  // e.g. EOS; kept in the output ids, its text left out
  std::vector<std::string> stop;        // stop strings (need a tokenizer), excluded from text
  bool is_stop_token(int32_t token) const {
    return std::find(stop_token_ids.begin(), stop_token_ids.end(), token) != stop_token_ids.end();
  }
  // ValueError "[StoppingCriteria] expected ...".
  void validate() const;
};

enum class FinishReason { None, Stop, Length, Abort };
// "stop", "length", "abort" (OpenAI's finish_reason); "" for None.
std::string_view finish_reason_name(FinishReason r);

// Text of a sequence's generated tokens, with stop-string detection.
class TextStream {
 public:
  // tokenizer may be null: then there is no text and stop strings are ignored.
  TextStream(const tokenizers::Tokenizer* tokenizer, const std::vector<std::string>* stop,
             int32_t prev_token = -1);
  // Adds a token; returns the text that can be emitted now. Sets stopped when a stop string is
  // complete (the text is cut before it, and nothing after it is emitted).
  std::string push(int32_t token);
  // The text held back at the end (nothing if stopped).
  std::string flush();
  bool stopped() const { return stopped_; }
  // All emitted text so far.
  const std::string& text() const { return emitted_; }

 private:
  const tokenizers::Tokenizer* tokenizer_;
  const std::vector<std::string>* stop_;
  int32_t prev_;
  std::string pending_;  // decoded, not yet emitted
  std::string emitted_;
  bool stopped_ = false;
};

}  // namespace tessera::infer
