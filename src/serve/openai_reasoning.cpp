// Chat responses' reasoning_content: a finished choice's thinking split off its text, and a
// streamed choice's as it grows.
#include "serve/openai_json.h"
#include "tessera/serve/openai.h"

namespace tessera::serve {

void extract_reasoning(const CompletionState& s, Choice& c) {
  if (!s.reasoning) return;
  ReasoningSplit split = split_reasoning(*s.reasoning, c.text, /*finished=*/true);
  c.reasoning = std::move(split.reasoning);
  c.text = std::move(split.content);
}

void ReasoningStream::advance(const CompletionState& s, Choice& c, bool finished) {
  text_ += c.text;
  const ReasoningSplit split = split_reasoning(*s.reasoning, text_, finished);
  c.reasoning = detail::unsent(split.reasoning, reasoning_sent_);
  c.text = detail::unsent(split.content, content_sent_);
}

}  // namespace tessera::serve
