// The parsers of a model's output (tool calls in each of the four formats, reasoning in both):
// input = the output. The split of the whole text is what a stream of it ends with, and every
// stream step only appends (checked at a few prefixes per input, not all: quadratic in the
// length); each call's arguments are a JSON object's text. Nothing may throw: model output is
// never the client's error.
#include <nlohmann/json.hpp>

#include "fuzz_util.h"
#include "tessera/serve/reasoning_parser.h"
#include "tessera/serve/tool_call_parser.h"

namespace {

using tessera::serve::ToolCallFormat;
using tessera::serve::ToolCallSplit;

bool extends(const tessera::serve::ReasoningSplit& longer,
             const tessera::serve::ReasoningSplit& shorter) {
  return longer.reasoning.starts_with(shorter.reasoning) &&
         longer.content.starts_with(shorter.content);
}

bool extends(const ToolCallSplit& longer, const ToolCallSplit& shorter) {
  if (!longer.content.starts_with(shorter.content) || longer.calls.size() < shorter.calls.size())
    return false;
  for (size_t k = 0; k < shorter.calls.size(); ++k)
    if (!(longer.calls[k] == shorter.calls[k])) return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  const std::string_view text = fuzz::bytes(data, size);
  for (ToolCallFormat f : {ToolCallFormat::Hermes, ToolCallFormat::Llama3Json,
                           ToolCallFormat::Mistral, ToolCallFormat::Pythonic}) {
    const ToolCallSplit whole = serve::split_tool_calls(f, text, /*finished=*/true);
    for (const serve::ParsedToolCall& c : whole.calls) {
      const nlohmann::json args = nlohmann::json::parse(c.arguments, nullptr, false);
      if (c.name.empty() || !args.is_object()) fuzz::fail("a call without name or object", text);
    }
    ToolCallSplit prev;
    for (size_t n : {size / 4, size / 2, size - size / 4, size}) {
      const ToolCallSplit s = serve::split_tool_calls(f, text.substr(0, n), /*finished=*/false);
      if (!extends(s, prev)) fuzz::fail("a stream step took back content or a call", text);
      if (!extends(whole, s)) fuzz::fail("a stream step is not a prefix of the whole", text);
      prev = s;
    }
  }
  for (serve::ReasoningFormat f :
       {serve::ReasoningFormat::DeepSeekR1, serve::ReasoningFormat::Qwen3}) {
    const serve::ReasoningSplit whole = serve::split_reasoning(f, text, /*finished=*/true);
    serve::ReasoningSplit prev;
    for (size_t n : {size / 4, size / 2, size - size / 4, size}) {
      const serve::ReasoningSplit s = serve::split_reasoning(f, text.substr(0, n), false);
      if (!extends(s, prev)) fuzz::fail("a reasoning step took back text", text);
      if (!extends(whole, s)) fuzz::fail("a reasoning step is not a prefix of the whole", text);
      prev = s;
    }
  }
  return 0;
}
