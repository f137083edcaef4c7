// The tool-call formats of serve/tool_call_parser.h on outputs as the models write them (Qwen2.5
// and Qwen3 for hermes, Llama 3.1 for llama3_json, Mistral's two shapes, Llama 3.2's pythonic),
// text that only looks like calls staying content, and every output split one byte at a time
// growing only by appending (what a stream sends) to the split of the whole.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/serve/tool_call_parser.h"
#include "testing/expect_error.h"

namespace tessera::serve {
namespace {

using Calls = std::vector<ParsedToolCall>;

// The split of text as a stream sees it, one byte more each step: content and calls only grow,
// and the last step (finished) is the split of the whole text.
ToolCallSplit split_streamed(ToolCallFormat f, const std::string& text) {
  ToolCallSplit prev;
  for (size_t n = 0; n <= text.size(); ++n) {
    ToolCallSplit s = split_tool_calls(f, std::string_view(text).substr(0, n), n == text.size());
    EXPECT_TRUE(s.content.starts_with(prev.content))
        << "content shrank at byte " << n << ": '" << prev.content << "' -> '" << s.content << "'";
    EXPECT_GE(s.calls.size(), prev.calls.size()) << "a call vanished at byte " << n;
    for (size_t k = 0; k < prev.calls.size() && k < s.calls.size(); ++k)
      EXPECT_EQ(s.calls[k], prev.calls[k]) << "call " << k << " changed at byte " << n;
    prev = std::move(s);
  }
  return prev;
}

// The whole text's split, checked to be what a stream of it ends with.
ToolCallSplit split(ToolCallFormat f, const std::string& text) {
  const ToolCallSplit whole = split_tool_calls(f, text, /*finished=*/true);
  const ToolCallSplit streamed = split_streamed(f, text);
  EXPECT_EQ(streamed.content, whole.content);
  EXPECT_EQ(streamed.calls, whole.calls);
  return whole;
}

void expect_content_only(ToolCallFormat f, const std::string& text) {
  SCOPED_TRACE(text);
  const ToolCallSplit s = split(f, text);
  EXPECT_EQ(s.content, text);
  EXPECT_TRUE(s.calls.empty());
}

TEST(ToolCallParser, HermesBlocksAreCallsAndTheTextBeforeThemContent) {
  const ToolCallFormat f = ToolCallFormat::Hermes;
  // Qwen2.5's parallel calls.
  ToolCallSplit s = split(f,
                          "<tool_call>\n{\"name\": \"get_current_temperature\", \"arguments\": "
                          "{\"location\": \"San Francisco, CA, USA\"}}\n</tool_call>\n<tool_call>\n"
                          "{\"name\": \"get_temperature_date\", \"arguments\": {\"location\": "
                          "\"San Francisco, CA, USA\", \"date\": \"2024-10-01\"}}\n</tool_call>");
  EXPECT_EQ(s.content, "");
  EXPECT_EQ(s.calls, (Calls{{"get_current_temperature", R"({"location":"San Francisco, CA, USA"})"},
                            {"get_temperature_date",
                             R"({"location":"San Francisco, CA, USA","date":"2024-10-01"})"}}));
  // Qwen3 thinks first; the arguments keep the model's key order and non-ASCII text.
  s = split(
      f,
      "<think>\nThe user wants the weather.\n</think>\n\n<tool_call>\n{\"name\": \"weather\", "
      "\"arguments\": {\"zone\": \"Zürich\", \"days\": 3, \"alerts\": true}}\n</tool_call>");
  EXPECT_EQ(s.content, "<think>\nThe user wants the weather.\n</think>\n\n");
  EXPECT_EQ(s.calls, (Calls{{"weather", R"({"zone":"Zürich","days":3,"alerts":true})"}}));
  // The last block may end with the text (a stop string took its close); arguments written as a
  // JSON string are the object it holds; none are {}.
  s = split(f,
            "Sure.<tool_call>{\"name\": \"a\", \"arguments\": \"{\\\"x\\\": [1, 2]}\"}</tool_call>"
            "<tool_call>{\"name\": \"b\"}");
  EXPECT_EQ(s.content, "Sure.");
  EXPECT_EQ(s.calls, (Calls{{"a", R"({"x":[1,2]})"}, {"b", "{}"}}));
}

TEST(ToolCallParser, HermesTextThatIsNotACallStaysContent) {
  const ToolCallFormat f = ToolCallFormat::Hermes;
  expect_content_only(f, "The weather in Paris is sunny, 24 <degrees>.");
  expect_content_only(f, "<tool_call>{\"name\": \"a\", \"arguments\": {\"x\": 1}");  // cut short
  expect_content_only(f, "<tool_call>\n{name: a}\n</tool_call>\n");
  expect_content_only(f, "<tool_call>{\"arguments\": {}}</tool_call>");  // no name
  expect_content_only(f, "<tool_call>{\"name\": \"a\", \"arguments\": [1]}</tool_call>");
  expect_content_only(f, "<tool_c");
  // Beside a real call, a malformed block and text after the calls join the content.
  const ToolCallSplit s =
      split(f,
            "Let me look.\n<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\n"
            "<tool_call>{oops}</tool_call>\nDone.");
  EXPECT_EQ(s.content, "Let me look.\n<tool_call>{oops}</tool_call>\nDone.");
  EXPECT_EQ(s.calls, (Calls{{"a", "{}"}}));
}

TEST(ToolCallParser, Llama3JsonCallsOnlyWhenTheOutputStartsWithOne) {
  const ToolCallFormat f = ToolCallFormat::Llama3Json;
  ToolCallSplit s =
      split(f,
            "{\"name\": \"get_current_conditions\", \"parameters\": {\"location\": \"Paris\", "
            "\"unit\": \"celsius\"}}");
  EXPECT_EQ(s.content, "");
  EXPECT_EQ(s.calls,
            (Calls{{"get_current_conditions", R"({"location":"Paris","unit":"celsius"})"}}));
  s = split(f,
            "<|python_tag|>{\"type\": \"function\", \"name\": \"a\", \"parameters\": {\"k\": "
            "\"}{\"}}; {\"name\": \"b\", \"arguments\": {}}");
  EXPECT_EQ(s.calls, (Calls{{"a", R"({"k":"}{"})"}, {"b", "{}"}}));
  EXPECT_EQ(s.content, "");
  expect_content_only(f, "The answer is {\"name\": \"a\", \"parameters\": {}}");
  expect_content_only(f, "  \n");
  expect_content_only(f, "{\"answer\": 42}");            // JSON, but no call
  expect_content_only(f, "<|python_tag|>print(2 + 2)");  // the built-in code interpreter's
  expect_content_only(f, "{\"name\": \"a\", \"parameters\": {\"x\": ");
  s = split(f, "{\"name\": \"a\", \"parameters\": {}}\nThat is all.");
  EXPECT_EQ(s.calls, (Calls{{"a", "{}"}}));
  EXPECT_EQ(s.content, "\nThat is all.");
}

TEST(ToolCallParser, MistralArraysAndNamedCalls) {
  const ToolCallFormat f = ToolCallFormat::Mistral;
  // Mistral 7B v0.3 / NeMo: one array.
  ToolCallSplit s = split(f,
                          "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                          "\"Paris\"}}, {\"name\": \"get_time\", \"arguments\": {}}]");
  EXPECT_EQ(s.content, "");
  EXPECT_EQ(s.calls, (Calls{{"get_weather", R"({"city":"Paris"})"}, {"get_time", "{}"}}));
  // Mistral Small 3.2 / Magistral: a marker per call, the name before [ARGS].
  s = split(f,
            "I will check.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]"
            "get_time[ARGS]{}");
  EXPECT_EQ(s.content, "I will check.");
  EXPECT_EQ(s.calls, (Calls{{"get_weather", R"({"city":"Paris"})"}, {"get_time", "{}"}}));
  s = split(f, "[TOOL_CALLS]lookup{\"q\": \"[TOOL_CALLS] in a string\"}");
  EXPECT_EQ(s.calls, (Calls{{"lookup", R"({"q":"[TOOL_CALLS] in a string"})"}}));
  expect_content_only(f, "No tools needed: [1, 2, 3].");
  expect_content_only(f, "[TOOL_CALLS][{\"name\": \"a\"}, 7]");  // one bad item spoils the list
  expect_content_only(f, "[TOOL_CALLS]get_weather[ARGS]{\"city\": ");
  expect_content_only(f, "[TOOL_CALLS]");
}

TEST(ToolCallParser, PythonicListsOfCallsWithLiteralArguments) {
  const ToolCallFormat f = ToolCallFormat::Pythonic;
  ToolCallSplit s = split(f,
                          "[get_weather(city='San Francisco', metric=\"celsius\"), "
                          "get_time(), tools.search(q='it\\'s', n=-2, x=1.5e3, y=.5, z=1_000)]");
  EXPECT_EQ(s.content, "");
  EXPECT_EQ(s.calls,
            (Calls{{"get_weather", R"({"city":"San Francisco","metric":"celsius"})"},
                   {"get_time", "{}"},
                   {"tools.search", R"({"q":"it's","n":-2,"x":1500.0,"y":0.5,"z":1000})"}}));
  s = split(f,
            "<|python_start|>[f(a=[1, (2, 3)], b={'k': None, \"l\": [True, False]}, "
            "c='\\u00e9\\n\\x41', d='''tri\"ple''',)]<|python_end|>");
  EXPECT_EQ(
      s.calls,
      (Calls{
          {"f", R"({"a":[1,[2,3]],"b":{"k":null,"l":[true,false]},"c":"é\nA","d":"tri\"ple"})"}}));
  EXPECT_EQ(s.content, "");
  expect_content_only(f, "Paris is sunny.");
  expect_content_only(f, "[1, 2, 3]");
  expect_content_only(f, "[get_weather('Paris')]");         // positional arguments
  expect_content_only(f, "[get_weather(city=city_name)]");  // not a literal
  expect_content_only(f, "[f(a=1, a=2)]");
  expect_content_only(f, "[f(a={1: 2})]");
  expect_content_only(f, "[f(a='unclosed)]");
  expect_content_only(f, "[f(a=" + std::string(100, '[') + std::string(100, ']') + ")]");
}

TEST(ToolCallParser, NamesTheKnownFormats) {
  EXPECT_EQ(tool_call_format("hermes"), ToolCallFormat::Hermes);
  EXPECT_EQ(tool_call_format("llama3_json"), ToolCallFormat::Llama3Json);
  EXPECT_EQ(tool_call_format_name(tool_call_format("mistral")), "mistral");
  EXPECT_EQ(tool_call_format_name(ToolCallFormat::Pythonic), "pythonic");
  EXPECT_TESSERA_ERROR(tool_call_format("qwen"), ValueError, "hermes, llama3_json");
}

}  // namespace
}  // namespace tessera::serve
