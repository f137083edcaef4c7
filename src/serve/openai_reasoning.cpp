// Chat responses' reasoning_content: a finished choice's thinking split off its text, and a
// streamed choice's as it grows.
#include <algorithm>

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
  c.reasoning = split.reasoning.substr(std::min(reasoning_sent_, split.reasoning.size()));
  c.text = split.content.substr(std::min(content_sent_, split.content.size()));
  reasoning_sent_ = std::max(reasoning_sent_, split.reasoning.size());
  content_sent_ = std::max(content_sent_, split.content.size());
}

}  // namespace tessera::serve
