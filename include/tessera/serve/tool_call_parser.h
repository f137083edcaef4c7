#pragma once
// Tool calls written in a model's own format, for chat requests with tool_choice "auto" (vLLM's
// --enable-auto-tool-choice --tool-call-parser NAME): the model decides between answering and
// calling, and the server splits what it wrote into message.content and message.tool_calls.
//
//   hermes       <tool_call>{"name": ..., "arguments": {...}}</tool_call>, one block per call
//                (Qwen2.5, Qwen3, QwQ, Hermes 2/3); text before the first block is the content.
//   llama3_json  {"name": ..., "parameters": {...}} objects, optionally after <|python_tag|> and
//                separated by ';' (Llama 3.1, 3.2, 3.3 with JSON tools); only when the output
//                starts with one, otherwise it is all content.
//   mistral      [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...] (Mistral 7B v0.3, Mixtral
//                8x22B, NeMo) or [TOOL_CALLS]name[ARGS]{...} per call (Mistral Small 3.2,
//                Magistral, Devstral); text before the first marker is the content. Call ids are
//                9 letters and digits, as Mistral's chat templates demand of earlier calls.
//   pythonic     [name(arg=value, ...), ...]: a Python list of calls with literal arguments
//                (Llama 3.2 1B/3B, Llama 4), optionally between <|python_start|> and
//                <|python_end|>; only when the output is such a list, otherwise all content.
//
// Arguments come back as JSON object text in the order the model wrote them ("arguments" given
// as a string holding a JSON object is taken as that object). Text that looks like a call but is
// not one (malformed JSON, a missing name) stays in the content: nothing the model wrote is lost.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::serve {

enum class ToolCallFormat { Hermes, Llama3Json, Mistral, Pythonic };

// "hermes", "llama3_json", "mistral" or "pythonic"; ValueError listing them otherwise.
ToolCallFormat tool_call_format(std::string_view name);
std::string_view tool_call_format_name(ToolCallFormat format);

struct ParsedToolCall {
  std::string name;
  std::string arguments;  // a JSON object's text
  bool operator==(const ParsedToolCall&) const = default;
};

struct ToolCallSplit {
  std::string content;
  std::vector<ParsedToolCall> calls;
};

// Splits generated text into content and tool calls. While the text may still grow (finished
// false) the split holds only what more text cannot change: content up to where a call may be
// starting, calls that have closed. Each split's content and calls are prefixes of those of any
// longer text's split, so a stream sends the difference as it goes.
ToolCallSplit split_tool_calls(ToolCallFormat format, std::string_view text, bool finished);

}  // namespace tessera::serve
