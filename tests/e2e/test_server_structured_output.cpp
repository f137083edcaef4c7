// Structured output over HTTP: response_format json_schema and json_object, and tool calls
// (tool_choice "required" or a named function), on a random small GPT-2 over a character
// vocabulary (any text is tokens), sampled at temperature 1 so only the grammar keeps it in
// JSON: every choice parses and satisfies the schema, streamed or not. A vocabulary none of whose
// tokens can start the value gets a 400, and so do tool requests the server cannot honour.
#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <regex>

#include "tessera/tokenizers/char_tokenizer.h"
#include "testing/server_harness.h"
#include "testing/small_models.h"

namespace tessera {
namespace {

using Json = nlohmann::json;
using testing::post_json;
using testing::TestServer;

const Json kSchema = Json::parse(R"({
  "type": "object",
  "properties": {"city": {"type": "string", "maxLength": 6},
                 "temps": {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3},
                 "unit": {"enum": ["c", "f"]}},
  "required": ["city", "temps", "unit"]})");

struct CharServer {
  std::shared_ptr<models::CausalLM> model = testing::small_gpt2(/*block_size=*/400);
  std::shared_ptr<tokenizers::CharTokenizer> tok = std::make_shared<tokenizers::CharTokenizer>(
      "{}[],:\"\\ \n0123456789.-+eEabcdfghijklmnopqrstuvwxyz_");
  TestServer ts{*model, tok, {.max_num_seqs = 8}};
  int32_t id(std::string_view c) const { return tok->encode(c).at(0); }
};

void expect_weather(const std::string& text) {
  SCOPED_TRACE(text);
  const Json v = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(v.is_object());
  EXPECT_EQ(v.size(), 3u);
  ASSERT_TRUE(v["city"].is_string());
  const std::string city = v["city"].get<std::string>();
  EXPECT_LE(std::count_if(city.begin(), city.end(), [](char c) { return (c & 0xC0) != 0x80; }), 6)
      << "maxLength counts characters";
  ASSERT_TRUE(v["temps"].is_array());
  EXPECT_TRUE(v["temps"].size() >= 1 && v["temps"].size() <= 3);
  for (const Json& t : v["temps"]) EXPECT_TRUE(t.is_number_integer());
  EXPECT_TRUE(v["unit"] == "c" || v["unit"] == "f");
}

TEST(ServerStructuredOutput, JsonSchemaChoicesSatisfyTheSchema) {
  CharServer s;
  const Json format = {
      {"type", "json_schema"},
      {"json_schema", {{"name", "weather"}, {"strict", true}, {"schema", kSchema}}}};
  auto [status, body] = post_json(s.ts, "/v1/chat/completions",
                                  {{"messages", {{{"role", "user"}, {"content", "weather"}}}},
                                   {"temperature", 1.0},
                                   {"seed", 4},
                                   {"n", 4},
                                   {"max_tokens", 300},
                                   {"response_format", format}});
  ASSERT_EQ(status, 200) << body.dump();
  ASSERT_EQ(body["choices"].size(), 4u);
  for (const Json& c : body["choices"]) {
    EXPECT_EQ(c["finish_reason"], "stop");
    expect_weather(c["message"]["content"].get<std::string>());
  }
  // Streamed, the deltas add up to such an object too.
  testing::StreamResult r = testing::stream_completion(s.ts.port, {{"prompt", "w"},
                                                                   {"temperature", 1.0},
                                                                   {"seed", 9},
                                                                   {"max_tokens", 300},
                                                                   {"stream", true},
                                                                   {"response_format", format}});
  EXPECT_TRUE(r.error.empty()) << r.error;
  EXPECT_EQ(r.finish_reason, "stop");
  expect_weather(r.text);
}

TEST(ServerStructuredOutput, DisableAnyWhitespaceGivesCompactJson) {
  CharServer s;
  auto [status, body] =
      post_json(s.ts, "/v1/completions",
                {{"prompt", "w"},
                 {"temperature", 1.0},
                 {"seed", 6},
                 {"n", 4},
                 {"max_tokens", 300},
                 {"structured_outputs", {{"json", kSchema}, {"disable_any_whitespace", true}}}});
  ASSERT_EQ(status, 200) << body.dump();
  for (const Json& c : body["choices"]) {
    const std::string text = c["text"].get<std::string>();
    expect_weather(text);
    bool in_string = false, escaped = false;  // whitespace only inside the city's string
    for (const char ch : text) {
      if (!in_string) EXPECT_TRUE(ch != ' ' && ch != '\n' && ch != '\t' && ch != '\r') << text;
      if (in_string && !escaped && ch == '\\') {
        escaped = true;
        continue;
      }
      if (ch == '"' && !escaped) in_string = !in_string;
      escaped = false;
    }
  }
  auto [code, reply] =
      post_json(s.ts, "/v1/completions",
                {{"prompt", "w"},
                 {"structured_outputs", {{"json", kSchema}, {"disable_any_whitespace", 1}}}});
  EXPECT_EQ(code, 400);
  EXPECT_EQ(reply["error"]["param"], "structured_outputs") << reply.dump();
}

TEST(ServerStructuredOutput, JsonObjectIsAnObjectOrAValidPrefixAtTheLengthLimit) {
  CharServer s;
  auto [status, body] = post_json(s.ts, "/v1/completions",
                                  {{"prompt", "x"},
                                   {"temperature", 0.7},
                                   {"seed", 1},
                                   {"max_tokens", 200},
                                   {"response_format", {{"type", "json_object"}}}});
  ASSERT_EQ(status, 200) << body.dump();
  const std::string text = body["choices"][0]["text"].get<std::string>();
  infer::JsonMatcher m(infer::JsonGrammar::any_object());
  EXPECT_TRUE(m.advance(text)) << text;
  if (body["choices"][0]["finish_reason"] == "stop")
    EXPECT_TRUE(Json::parse(text).is_object()) << text;
}

TEST(ServerStructuredOutput, GuidedChoiceAnswersWithOneOfTheChoices) {
  CharServer s;
  const std::vector<std::string> choices = {"sunny", "rain", "snow"};
  auto [status, body] = post_json(s.ts, "/v1/completions",
                                  {{"prompt", "x"},
                                   {"temperature", 1.0},
                                   {"seed", 3},
                                   {"n", 5},
                                   {"max_tokens", 20},
                                   {"guided_choice", choices}});
  ASSERT_EQ(status, 200) << body.dump();
  for (const Json& c : body["choices"]) {
    EXPECT_EQ(c["finish_reason"], "stop");
    EXPECT_NE(std::find(choices.begin(), choices.end(), c["text"].get<std::string>()),
              choices.end())
        << c.dump();
  }
}

TEST(ServerStructuredOutput, GuidedRegexAndSchemaPatternsHoldForEveryChoice) {
  CharServer s;
  const std::string expression = R"(\d{3}-[a-f]{2,4}( ok)?)";
  auto [status, body] = post_json(s.ts, "/v1/completions",
                                  {{"prompt", "x"},
                                   {"temperature", 1.0},
                                   {"seed", 5},
                                   {"n", 4},
                                   {"max_tokens", 30},
                                   {"structured_outputs", {{"regex", expression}}}});
  ASSERT_EQ(status, 200) << body.dump();
  for (const Json& c : body["choices"]) {
    EXPECT_EQ(c["finish_reason"], "stop") << c.dump();
    EXPECT_TRUE(std::regex_match(c["text"].get<std::string>(), std::regex(expression))) << c.dump();
  }
  const Json schema = {{"type", "object"},
                       {"properties", {{"zip", {{"type", "string"}, {"pattern", "^\\d{5}$"}}}}},
                       {"required", {"zip"}}};
  std::tie(status, body) = post_json(s.ts, "/v1/chat/completions",
                                     {{"messages", {{{"role", "user"}, {"content", "zip"}}}},
                                      {"temperature", 1.0},
                                      {"seed", 2},
                                      {"n", 3},
                                      {"max_tokens", 60},
                                      {"guided_json", schema}});
  ASSERT_EQ(status, 200) << body.dump();
  for (const Json& c : body["choices"]) {
    const std::string text = c["message"]["content"].get<std::string>();
    const Json v = Json::parse(text, nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(v.is_object()) << text;
    EXPECT_TRUE(std::regex_match(v["zip"].get<std::string>(), std::regex("\\d{5}"))) << text;
  }
}

TEST(ServerStructuredOutput, GuidedGrammarAnswersAreSentencesOfTheGrammar) {
  CharServer s;
  // The character vocabulary has no parentheses: calls are written name[1,2].
  const std::string gbnf =
      "root ::= call (\":\" call)*\ncall ::= [a-z]{1,4} \"[\" args? \"]\"\n"
      "args ::= [0-9]+ (\",\" [0-9]+)*";
  auto [status, body] = post_json(s.ts, "/v1/completions",
                                  {{"prompt", "x"},
                                   {"temperature", 1.0},
                                   {"seed", 9},
                                   {"n", 4},
                                   {"max_tokens", 40},
                                   {"structured_outputs", {{"grammar", gbnf}}}});
  ASSERT_EQ(status, 200) << body.dump();
  const std::regex call(R"([a-z]{1,4}\[([0-9]+(,[0-9]+)*)?\])");
  for (const Json& c : body["choices"]) {
    std::string text = c["text"].get<std::string>();
    if (c["finish_reason"] == "length") {  // a valid prefix: cut at the last complete call
      const size_t colon = text.rfind(':');
      if (colon == std::string::npos) continue;
      text.resize(colon);
    }
    std::string rest = text;
    for (size_t at; (at = rest.find(':')) != std::string::npos; rest.erase(0, at + 1))
      EXPECT_TRUE(std::regex_match(rest.substr(0, at), call)) << text;
    EXPECT_TRUE(std::regex_match(rest, call)) << text;
  }
  std::tie(status, body) = post_json(
      s.ts, "/v1/completions", {{"prompt", "x"}, {"guided_grammar", "root ::= r\nr ::= r \"a\""}});
  EXPECT_EQ(status, 400);
  EXPECT_EQ(body["error"]["param"], "guided_grammar");
  EXPECT_NE(body["error"]["message"].get<std::string>().find("left-recursive"), std::string::npos)
      << body.dump();
}

TEST(ServerStructuredOutput, AVocabularyThatCannotWriteJsonIsA400) {
  auto model = testing::small_gpt2();
  TestServer ts(*model, std::make_shared<tokenizers::CharTokenizer>("ab c"), {});
  auto [status, body] = post_json(
      ts, "/v1/completions", {{"prompt", "a"}, {"response_format", {{"type", "json_object"}}}});
  EXPECT_EQ(status, 400);
  EXPECT_NE(
      body["error"]["message"].get<std::string>().find("tokens that start the constrained output"),
      std::string::npos)
      << body.dump();
}

const Json kTools = Json::array(
    {{{"type", "function"},
      {"function", {{"name", "get_weather"}, {"description", "weather"}, {"parameters", kSchema}}}},
     {{"type", "function"},
      {"function",
       {{"name", "add"},
        {"parameters",
         {{"type", "object"},
          {"properties", {{"a", {{"type", "integer"}}}, {"b", {{"type", "integer"}}}}},
          {"required", {"a", "b"}}}}}}},
     {{"type", "function"}, {"function", {{"name", "now"}}}}});

// Checks one call's arguments against its tool's parameters.
void expect_call(const Json& call) {
  const std::string name = call["function"]["name"];
  const std::string args = call["function"]["arguments"];
  SCOPED_TRACE(name + " " + args);
  EXPECT_EQ(call["type"], "function");
  EXPECT_TRUE(call["id"].is_string() && call["id"].get<std::string>().starts_with("call_"));
  if (name == "get_weather") return expect_weather(args);
  const Json v = Json::parse(args, nullptr, false);
  ASSERT_TRUE(v.is_object());
  if (name == "now") {
    EXPECT_TRUE(v.empty()) << "a function without parameters takes {}";
    return;
  }
  ASSERT_EQ(name, "add");
  EXPECT_EQ(v.size(), 2u);
  EXPECT_TRUE(v["a"].is_number_integer() && v["b"].is_number_integer());
}

// Biased so the random model's calls stay short whatever the machine's rounding: no
// whitespace, and ',' only where the grammar leaves nothing else (an array of calls closes).
Json tool_request(const CharServer& s, const Json& choice, bool stream = false) {
  const Json bias = {{std::to_string(s.id(" ")), -100},
                     {std::to_string(s.id("\n")), -100},
                     {std::to_string(s.id(",")), -8}};
  return {{"messages", {{{"role", "user"}, {"content", "weather"}}}},
          {"temperature", 1.0},
          {"seed", 2},
          {"n", stream ? 1 : 3},
          {"max_tokens", 350},
          {"stream", stream},
          {"tools", kTools},
          {"tool_choice", choice},
          {"logit_bias", bias}};
}

TEST(ServerToolCalls, RequiredAndNamedChoicesCallToolsWithValidArguments) {
  CharServer s;
  auto [status, body] = post_json(s.ts, "/v1/chat/completions", tool_request(s, "required"));
  ASSERT_EQ(status, 200) << body.dump();
  for (const Json& c : body["choices"]) {
    EXPECT_EQ(c["finish_reason"], "tool_calls");
    EXPECT_TRUE(c["message"]["content"].is_null());
    ASSERT_GE(c["message"]["tool_calls"].size(), 1u) << c.dump();
    for (const Json& call : c["message"]["tool_calls"]) expect_call(call);
  }
  Json one = tool_request(s, "required");
  one["parallel_tool_calls"] = false;
  auto [status1, single] = post_json(s.ts, "/v1/chat/completions", one);
  ASSERT_EQ(status1, 200) << single.dump();
  for (const Json& c : single["choices"]) EXPECT_EQ(c["message"]["tool_calls"].size(), 1u);

  const Json named = {{"type", "function"}, {"function", {{"name", "add"}}}};
  auto [status2, forced] = post_json(s.ts, "/v1/chat/completions", tool_request(s, named));
  ASSERT_EQ(status2, 200) << forced.dump();
  for (const Json& c : forced["choices"]) {
    EXPECT_EQ(c["finish_reason"], "stop");
    ASSERT_EQ(c["message"]["tool_calls"].size(), 1u);
    EXPECT_EQ(c["message"]["tool_calls"][0]["function"]["name"], "add");
    expect_call(c["message"]["tool_calls"][0]);
  }
}

TEST(ServerToolCalls, StreamsCarryTheCallsInDeltas) {
  CharServer s;
  const auto chat = [&](const Json& body) {
    return testing::stream_completion(s.ts.port, body, {}, "/v1/chat/completions");
  };
  // A named function's arguments stream as they come; the first delta names the call.
  const testing::StreamResult named =
      chat(tool_request(s, {{"type", "function"}, {"function", {{"name", "get_weather"}}}}, true));
  ASSERT_TRUE(named.error.empty()) << named.error;
  ASSERT_GE(named.deltas.size(), 2u);
  const Json& first = named.deltas[0]["tool_calls"][0];
  EXPECT_EQ(first["function"]["name"], "get_weather");
  std::string args;
  for (const Json& d : named.deltas) {
    EXPECT_TRUE(d["content"].is_null());
    EXPECT_EQ(d["tool_calls"][0]["index"], 0);
    args += d["tool_calls"][0]["function"]["arguments"].get<std::string>();
  }
  expect_call({{"id", first["id"]},
               {"type", "function"},
               {"function", {{"name", "get_weather"}, {"arguments", args}}}});
  // "required": the calls come whole when the array closes.
  const testing::StreamResult required = chat(tool_request(s, "required", true));
  ASSERT_TRUE(required.error.empty()) << required.error;
  ASSERT_EQ(required.deltas.size(), 1u);
  EXPECT_EQ(required.finish_reason, "tool_calls");
  for (const Json& call : required.deltas[0]["tool_calls"]) expect_call(call);
}

TEST(ServerToolCalls, AConversationWithEarlierCallsIsAPromptAndBadToolRequestsAre400s) {
  CharServer s;
  const Json history = {
      {{"role", "user"}, {"content", "add 1 and 2"}},
      {{"role", "assistant"},
       {"content", nullptr},
       {"tool_calls",
        {{{"id", "call_1"},
          {"type", "function"},
          {"function", {{"name", "add"}, {"arguments", R"({"a": 1, "b": 2})"}}}}}}},
      {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "3"}}};
  auto [status, body] = post_json(
      s.ts, "/v1/chat/completions",
      {{"messages", history}, {"max_tokens", 4}, {"tools", kTools}, {"tool_choice", "none"}});
  EXPECT_EQ(status, 200) << body.dump();
  const Json weather = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
  const Json format = {{"type", "json_object"}};
  for (const auto& [body, param] : std::vector<std::pair<Json, std::string>>{
           {{{"tools", kTools}}, "tool_choice"},  // "auto" by default: there is no parser
           {{{"tool_choice", "required"}}, "tool_choice"},
           {{{"tools", kTools},
             {"tool_choice", {{"type", "function"}, {"function", {{"name", "x"}}}}}},
            "tool_choice"},
           {{{"tools", kTools}, {"tool_choice", weather}, {"response_format", format}},
            "tool_choice"},
           {{{"tools", Json::array({{{"type", "function"}, {"function", {{"name", "a b"}}}}})},
             {"tool_choice", "required"}},
            "tools"},
           {{{"tools",
              Json::array({{{"type", "function"},
                            {"function",
                             {{"name", "f"}, {"parameters", {{"not", {{"type", "null"}}}}}}}}})},
             {"tool_choice", "required"}},
            "tools"},
       }) {
    Json request = body;
    request["messages"] = {{{"role", "user"}, {"content", "hi"}}};
    auto [code, reply] = post_json(s.ts, "/v1/chat/completions", request);
    EXPECT_EQ(code, 400) << request.dump();
    EXPECT_EQ(reply["error"]["param"], param) << reply.dump();
  }
  // Text a character vocabulary cannot spell is the client's error too, not a 500.
  auto [code, reply] = post_json(s.ts, "/v1/chat/completions",
                                 {{"messages", {{{"role", "user"}, {"content", "why?"}}}}});
  EXPECT_EQ(code, 400);
  EXPECT_EQ(reply["error"]["param"], "messages") << reply.dump();
}

}  // namespace
}  // namespace tessera
