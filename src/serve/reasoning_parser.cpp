// The reasoning formats of reasoning_parser.h, each a stateless split of the text so far (as the
// tool-call parsers): a stream cannot drift from the whole response.
#include "tessera/serve/reasoning_parser.h"

#include "serve/output_markers.h"
#include "tessera/core/error.h"

namespace tessera::serve {

namespace {

using detail::marker_start_held;
using detail::skip_space;

constexpr std::string_view kStart = "<think>", kEnd = "</think>";

// Whether text so far (its leading spaces aside) may still become "<think>".
bool may_open(std::string_view text) {
  const std::string_view rest = text.substr(skip_space(text));
  return rest.size() < kStart.size() && kStart.starts_with(rest);
}

// body is reasoning up to "</think>", the answer after it.
ReasoningSplit split_thought(std::string_view body, bool finished) {
  const size_t end = body.find(kEnd);
  if (end == std::string_view::npos)
    return {
        std::string(body.substr(0, body.size() - (finished ? 0 : marker_start_held(body, kEnd)))),
        ""};
  return {std::string(body.substr(0, end)), std::string(body.substr(end + kEnd.size()))};
}

// text after its leading spaces and "<think>", when it opens with them.
std::string_view after_open(std::string_view text) {
  const size_t i = skip_space(text);
  return text.substr(i).starts_with(kStart) ? text.substr(i + kStart.size()) : std::string_view();
}

}  // namespace

ReasoningFormat reasoning_format(std::string_view name) {
  if (name == "deepseek_r1") return ReasoningFormat::DeepSeekR1;
  if (name == "qwen3") return ReasoningFormat::Qwen3;
  throw ValueError(
      tessera::detail::str("unknown reasoning parser '", name, "' (known: deepseek_r1, qwen3)"));
}

ReasoningSplit split_reasoning(ReasoningFormat format, std::string_view text, bool finished) {
  if (!finished && may_open(text)) return {};  // undecided yet
  const bool opened = text.substr(skip_space(text)).starts_with(kStart);
  if (format == ReasoningFormat::DeepSeekR1)
    return split_thought(opened ? after_open(text) : text, finished);
  if (!opened) return {"", std::string(text)};  // Qwen3 answering without thinking
  return split_thought(after_open(text), finished);
}

}  // namespace tessera::serve
