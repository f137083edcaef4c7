// Structured output over HTTP: response_format json_schema and json_object on a random small
// GPT-2 over a character vocabulary (any text is tokens), sampled at temperature 1 so only the
// grammar keeps it in JSON: every choice parses and satisfies the schema, streamed or not. A
// vocabulary none of whose tokens can start the value gets a 400.
#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <nlohmann/json.hpp>

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
  TestServer ts{*model,
                std::make_shared<tokenizers::CharTokenizer>(
                    "{}[],:\"\\ \n0123456789.-+eEabcdfghijklmnopqrstuvwxyz"),
                {.max_num_seqs = 8}};
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

TEST(ServerStructuredOutput, AVocabularyThatCannotWriteJsonIsA400) {
  auto model = testing::small_gpt2();
  TestServer ts(*model, std::make_shared<tokenizers::CharTokenizer>("ab c"), {});
  auto [status, body] = post_json(
      ts, "/v1/completions", {{"prompt", "a"}, {"response_format", {{"type", "json_object"}}}});
  EXPECT_EQ(status, 400);
  EXPECT_NE(body["error"]["message"].get<std::string>().find("tokens that start the JSON value"),
            std::string::npos)
      << body.dump();
}

}  // namespace
}  // namespace tessera
