// The Engine with structured output and logit biases: a random small GPT-2 over a character
// vocabulary (so any text is tokens) sampled freely, which only the grammar keeps in JSON; every
// finished text parses and satisfies its schema, and a bias moves the argmax.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>

#include "tessera/core/error.h"
#include "tessera/infer/engine.h"
#include "tessera/tokenizers/char_tokenizer.h"
#include "testing/expect_error.h"
#include "testing/small_models.h"

namespace tessera {
namespace {

using Json = nlohmann::json;

const char* kChars = "{}[],:\"\\ \n0123456789.-+eEabcdfghijklmnopqrstuvwxyz";

struct Fixture {
  std::shared_ptr<models::CausalLM> model = testing::small_gpt2(/*block_size=*/700);
  std::shared_ptr<tokenizers::CharTokenizer> tok =
      std::make_shared<tokenizers::CharTokenizer>(kChars);
  infer::Engine engine{*model, {.max_num_seqs = 8}, tok};

  // Runs the requests to the end; the text and finish reason of each, by id.
  std::map<int64_t, std::pair<std::string, infer::FinishReason>> run() {
    std::map<int64_t, std::pair<std::string, infer::FinishReason>> out;
    while (engine.has_unfinished())
      for (const infer::RequestOutput& o : engine.step()) {
        EXPECT_TRUE(o.error.empty()) << o.error;
        out[o.request_id].first += o.text;
        out[o.request_id].second = o.finish_reason;
      }
    return out;
  }
};

infer::GenerationParams sampled(uint64_t seed, std::shared_ptr<const infer::JsonGrammar> g) {
  infer::GenerationParams p;
  p.sampling.temperature = 1.0;
  p.sampling.seed = seed;
  p.stopping.max_tokens = 600;
  p.json_grammar = std::move(g);
  return p;
}

TEST(EngineStructuredOutput, EverySampleOfARandomModelSatisfiesTheSchema) {
  ASSERT_LE(std::string_view(kChars).size(), 70u) << "the model's vocabulary";
  const Json schema = Json::parse(R"({
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 4},
                   "age": {"type": "integer", "minimum": 18, "maximum": 120},
                   "ok": {"type": "boolean"}, "tag": {"enum": ["x", "yz", 7]},
                   "list": {"type": "array", "items": {"type": "number"}, "maxItems": 2}},
    "required": ["name", "age", "ok", "tag"]})");
  Fixture f;
  const auto g = infer::JsonGrammar::from_schema(schema);
  for (uint64_t seed = 0; seed < 8; ++seed) f.engine.add_request({1, 2}, sampled(seed, g));
  const auto outputs = f.run();
  ASSERT_EQ(outputs.size(), 8u);
  std::set<std::string> distinct;
  for (const auto& [id, result] : outputs) {
    const auto& [text, reason] = result;
    SCOPED_TRACE(text);
    EXPECT_EQ(reason, infer::FinishReason::Stop) << "the object closed";
    const Json v = Json::parse(text);  // throws on invalid JSON
    ASSERT_TRUE(v.is_object());
    for (const char* key : {"name", "age", "ok", "tag"}) EXPECT_TRUE(v.contains(key)) << key;
    for (const auto& [key, value] : v.items())
      EXPECT_TRUE(schema["properties"].contains(key)) << key;
    EXPECT_TRUE(v["name"].is_string() && v["name"].get<std::string>().size() <= 4);
    EXPECT_TRUE(v["age"].is_number_integer() && v["age"] >= 18 && v["age"] <= 120);
    EXPECT_TRUE(v["ok"].is_boolean());
    EXPECT_TRUE(v["tag"] == "x" || v["tag"] == "yz" || v["tag"] == 7);
    if (v.contains("list")) EXPECT_TRUE(v["list"].is_array() && v["list"].size() <= 2);
    distinct.insert(text);
  }
  EXPECT_GT(distinct.size(), 4u) << "the samples differ: the grammar masks, it does not choose";
}

TEST(EngineStructuredOutput, GreedyAnyObjectKeepsAValidPrefixAndStopsWhenItCloses) {
  Fixture f;
  infer::GenerationParams p = sampled(0, infer::JsonGrammar::any_object());
  p.sampling.temperature = 0.0;
  p.stopping.max_tokens = 300;
  f.engine.add_request({3}, p);
  const auto [text, reason] = f.run().begin()->second;
  infer::JsonMatcher m(infer::JsonGrammar::any_object());
  EXPECT_TRUE(m.advance(text)) << text;
  if (reason == infer::FinishReason::Stop) {
    EXPECT_TRUE(Json::parse(text).is_object()) << text;
  } else {
    EXPECT_EQ(reason, infer::FinishReason::Length) << text;
  }
}

TEST(EngineStructuredOutput, AChoiceEndsTheRequestWithOneOfItsTexts) {
  Fixture f;
  const std::vector<std::string> texts = {"yes", "no", "maybe"};
  for (uint64_t seed = 0; seed < 6; ++seed)
    f.engine.add_request({2, 3}, sampled(seed, infer::JsonGrammar::choice(texts)));
  for (const auto& [id, result] : f.run()) {
    EXPECT_EQ(result.second, infer::FinishReason::Stop);
    EXPECT_NE(std::find(texts.begin(), texts.end(), result.first), texts.end()) << result.first;
  }
}

TEST(EngineStructuredOutput, RegexAndPatternSamplesMatchTheirExpressions) {
  Fixture f;
  const std::string expression = R"([a-c]{2,5}-\d{1,3}(\.[xyz])?)";
  const auto schema = infer::JsonGrammar::from_schema(Json::parse(
      R"({"type": "object", "properties": {"id": {"type": "string", "pattern": "^[0-9a-f]{4}$"},
                                           "day": {"type": "string", "format": "date"}},
          "required": ["id", "day"]})"));
  for (uint64_t seed = 0; seed < 4; ++seed) {
    f.engine.add_request({2, 3}, sampled(seed, infer::JsonGrammar::regex(expression)));
    f.engine.add_request({2, 3}, sampled(seed, schema));
  }
  int regexes = 0;
  for (const auto& [id, result] : f.run()) {
    const auto& [text, reason] = result;
    EXPECT_EQ(reason, infer::FinishReason::Stop) << text;
    if (text.find('{') != std::string::npos) {  // the object may start after whitespace
      const Json v = Json::parse(text);
      EXPECT_TRUE(std::regex_match(v["id"].get<std::string>(), std::regex("[0-9a-f]{4}"))) << text;
      EXPECT_TRUE(std::regex_match(v["day"].get<std::string>(),
                                   std::regex(R"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01]))")))
          << text;
    } else {
      ++regexes;
      EXPECT_TRUE(std::regex_match(text, std::regex(expression))) << text;
    }
  }
  EXPECT_EQ(regexes, 4);
}

TEST(EngineStructuredOutput, GrammarSamplesAreSentencesOfTheGrammar) {
  Fixture f;
  // Balanced brackets around words: not a regular language.
  const auto g = infer::JsonGrammar::grammar(R"g(
root  ::= group ("," group){0,3}
group ::= "[" (group | [a-e]{1,3})* "]"
)g");
  for (uint64_t seed = 0; seed < 6; ++seed) f.engine.add_request({2, 3}, sampled(seed, g));
  std::set<std::string> distinct;
  for (const auto& [id, result] : f.run()) {
    const auto& [text, reason] = result;
    SCOPED_TRACE(text);
    if (reason != infer::FinishReason::Stop) {
      EXPECT_EQ(reason, infer::FinishReason::Length);
      continue;  // a sample may nest deeper than the token budget
    }
    int depth = 0, groups = 0;
    for (char c : text) {
      if (c == '[' && depth++ == 0) ++groups;
      if (c == ']') ASSERT_GE(--depth, 0);
      if (c == ',') ASSERT_EQ(depth, 0);
      if (depth == 0) ASSERT_TRUE(c == ']' || c == ',');
    }
    EXPECT_EQ(depth, 0);
    EXPECT_LE(groups, 4);
    distinct.insert(text);
  }
  EXPECT_GE(distinct.size(), 3u);
}

TEST(EngineStructuredOutput, StopTokensWaitForACompleteValue) {
  Fixture f;
  // A stop token the model is pushed to take: masked while the value is incomplete, taken as
  // soon as it is ("1" of enum [12, 1]; 12 would have been possible too).
  const auto z = static_cast<int32_t>(std::string_view(kChars).find('z'));
  infer::GenerationParams p =
      sampled(3, infer::JsonGrammar::from_schema(Json::parse(R"({"enum": [12, 1]})")));
  p.stopping.stop_token_ids = {z};
  p.sampling.logit_bias = {{z, 100.0f}};
  f.engine.add_request({5}, p);
  const auto [text, reason] = f.run().begin()->second;
  EXPECT_EQ(reason, infer::FinishReason::Stop);
  EXPECT_EQ(text, "1");
}

TEST(EngineStructuredOutput, LogitBiasMovesTheArgmax) {
  Fixture f;
  infer::GenerationParams p;
  p.sampling.temperature = 0.0;
  p.stopping.max_tokens = 3;
  p.sampling.logit_bias = {{7, 100.0f}};
  f.engine.add_request({1, 2}, p);
  p.sampling.logit_bias = {{7, 60.0f}, {7, 40.0f}, {9, -100.0f}};
  f.engine.add_request({1, 2}, p);
  std::vector<std::vector<int32_t>> tokens(2);
  while (f.engine.has_unfinished())
    for (const infer::RequestOutput& o : f.engine.step())
      tokens[o.request_id].insert(tokens[o.request_id].end(), o.new_tokens.begin(),
                                  o.new_tokens.end());
  EXPECT_EQ(tokens[0], (std::vector<int32_t>{7, 7, 7}));
  EXPECT_EQ(tokens[1], tokens[0]) << "a token listed twice gets both biases";
}

TEST(EngineStructuredOutput, RefusesWhatItCannotHonour) {
  auto model = testing::small_gpt2();
  infer::Engine no_tokenizer(*model);
  infer::GenerationParams p;
  p.json_grammar = infer::JsonGrammar::any_object();
  EXPECT_TESSERA_ERROR(no_tokenizer.add_request({1}, p), ValueError,
                       "with a tokenizer for a JSON grammar");
  p.json_grammar = nullptr;
  p.sampling.logit_bias = {{70, 1.0f}};
  EXPECT_TESSERA_ERROR(no_tokenizer.add_request({1}, p), ValueError,
                       "logit_bias token ids in [0, 70)");
  p.sampling.logit_bias = {{3, 101.0f}};
  EXPECT_TESSERA_ERROR(no_tokenizer.add_request({1}, p), ValueError,
                       "logit_bias values in [-100, 100]");
}

}  // namespace
}  // namespace tessera
