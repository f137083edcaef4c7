// tool_choice "auto" over HTTP: a server started with a tool-call parser (hermes here) lets the
// model decide between answering and calling. The model is a small GPT-2 trained in the test
// until it writes, greedily, a Qwen-style call after one question and plain text after another:
// a stand-in for a model fine-tuned on tool calling. Checked: the call comes back as tool_calls
// with the text before it as content (finish reason "tool_calls"), streamed as content deltas
// then one delta per call, nothing of the call's markup leaking into the content; the plain
// answer stays content; the conversation with the call and its result is a valid next request.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

#include "tessera/autograd/grad_mode.h"
#include "tessera/ops/creation.h"
#include "tessera/optim/adam.h"
#include "tessera/tokenizers/char_tokenizer.h"
#include "tessera/tokenizers/chat_template.h"
#include "testing/server_harness.h"
#include "testing/small_models.h"

namespace tessera {
namespace {

using Json = nlohmann::json;
using testing::post_json;

constexpr std::string_view kCallReply =
    "let me check.<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"paris\"}}"
    "</tool_call>";
constexpr std::string_view kPlainReply = "hello! how can i help?";
constexpr char kEnd = '#';  // what the model writes after a reply: the requests' stop string

std::string chat_prompt(const std::string& question) {
  const std::vector<tokenizers::ChatMessage> messages = {{"user", question}};
  return tokenizers::plain_chat_prompt(messages);
}

// Trains model (greedy decoding, float32) until it writes each reply and kEnd after its
// question's chat prompt.
void memorise(models::CausalLM& model, const tokenizers::Tokenizer& tok,
              const std::vector<std::pair<std::string, std::string_view>>& pairs) {
  std::vector<std::vector<int32_t>> seqs;
  int64_t T = 0;
  for (const auto& [question, reply] : pairs) {
    seqs.push_back(tok.encode(chat_prompt(question) + std::string(reply) + kEnd));
    T = std::max<int64_t>(T, static_cast<int64_t>(seqs.back().size()) - 1);
  }
  const int64_t B = static_cast<int64_t>(seqs.size());
  std::vector<int64_t> idx(B * T, 0), targets(B * T, -1);
  for (int64_t b = 0; b < B; ++b)
    for (size_t t = 0; t + 1 < seqs[b].size(); ++t) {
      idx[b * T + t] = seqs[b][t];
      targets[b * T + t] = seqs[b][t + 1];
    }
  const Tensor x = tensor(idx, Shape{B, T}), y = tensor(targets, Shape{B, T});
  optim::AdamW opt(model.parameters(), {.lr = 1e-2, .weight_decay = 0.0});
  for (int step = 0; step < 600; ++step) {
    opt.zero_grad();
    Tensor loss = model.loss(x, y);
    loss.backward();
    opt.step();
    if (loss.item<double>() < 2e-3) return;
  }
}

const Json kWeatherTool = {{"type", "function"},
                           {"function",
                            {{"name", "get_weather"},
                             {"description", "the weather in a city"},
                             {"parameters",
                              {{"type", "object"},
                               {"properties", {{"city", {{"type", "string"}}}}},
                               {"required", {"city"}}}}}}};

using Replies = std::vector<std::pair<std::string, std::string_view>>;

// A server of a model trained to write each reply after its question, with the hermes tool-call
// parser and the given server settings.
struct ToolServer {
  explicit ToolServer(const Replies& replies = {{"weather in paris?", kCallReply},
                                                {"hi", kPlainReply}},
                      serve::ServerConfig config = {})
      : model(trained(*tok, replies)),
        ts(*model, tok, {.max_num_seqs = 4}, with_hermes(std::move(config))) {}

  // The model trained on replies, once per test binary (training takes seconds under the
  // sanitizers).
  static std::shared_ptr<models::CausalLM> trained(const tokenizers::Tokenizer& tok,
                                                   const Replies& replies) {
    static std::map<Replies, std::shared_ptr<models::CausalLM>> cache;
    auto& model = cache[replies];
    if (!model) {
      model = testing::small_gpt2(/*block_size=*/160, /*n_embd=*/48);
      memorise(*model, tok, replies);
    }
    return model;
  }

  static serve::ServerConfig with_hermes(serve::ServerConfig c) {
    c.tool_call_parser = serve::ToolCallFormat::Hermes;
    return c;
  }

  std::shared_ptr<tokenizers::CharTokenizer> tok =
      std::make_shared<tokenizers::CharTokenizer>("abcdefghijklmnopqrstuvwxyz {}[]\":,<>/_.!?#\n");
  std::shared_ptr<models::CausalLM> model;
  testing::TestServer ts;

  Json request(const std::string& question, bool stream = false) const {
    return {{"messages", {{{"role", "user"}, {"content", question}}}},
            {"temperature", 0.0},
            {"max_tokens", 120},
            {"stop", std::string(1, kEnd)},
            {"stream", stream},
            {"tools", {kWeatherTool}}};
  }
};

void expect_weather_call(const Json& call) {
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(call["function"]["arguments"], R"({"city":"paris"})");
  const std::string id = call["id"];
  EXPECT_TRUE(id.starts_with("call_") && id.size() == 29) << id;
}

TEST(ServerAutoTools, TheModelsOwnCallsBecomeToolCallsAndItsAnswersStayContent) {
  ToolServer s;
  auto [status, body] = post_json(s.ts, "/v1/chat/completions", s.request("weather in paris?"));
  ASSERT_EQ(status, 200) << body.dump();
  const Json& choice = body["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls") << choice.dump();
  EXPECT_EQ(choice["message"]["content"], "let me check.");
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << choice.dump();
  expect_weather_call(choice["message"]["tool_calls"][0]);

  auto [status2, plain] = post_json(s.ts, "/v1/chat/completions", s.request("hi"));
  ASSERT_EQ(status2, 200) << plain.dump();
  EXPECT_EQ(plain["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(plain["choices"][0]["message"]["content"], kPlainReply);
  EXPECT_FALSE(plain["choices"][0]["message"].contains("tool_calls"));

  // The call and its result make the next turn's conversation; tool_choice "none" still works.
  Json next = s.request("weather in paris?");
  next["messages"].push_back(choice["message"]);
  next["messages"].push_back({{"role", "tool"},
                              {"tool_call_id", choice["message"]["tool_calls"][0]["id"]},
                              {"content", "sunny"}});
  next["tool_choice"] = "none";
  next["max_tokens"] = 4;
  auto [status3, reply] = post_json(s.ts, "/v1/chat/completions", next);
  EXPECT_EQ(status3, 200) << reply.dump();
}

TEST(ServerAutoTools, StreamsSendTheContentAsItComesAndEachCallWhole) {
  ToolServer s;
  const testing::StreamResult r = testing::stream_completion(
      s.ts.port, s.request("weather in paris?", /*stream=*/true), {}, "/v1/chat/completions");
  ASSERT_TRUE(r.error.empty()) << r.error;
  EXPECT_EQ(r.finish_reason, "tool_calls");
  std::string content;
  std::vector<Json> calls;
  for (const Json& d : r.deltas) {
    if (d.contains("content") && d["content"].is_string()) content += d["content"];
    if (d.contains("tool_calls"))
      for (const Json& call : d["tool_calls"]) calls.push_back(call);
  }
  EXPECT_EQ(content, "let me check.");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0]["index"], 0);
  expect_weather_call(calls[0]);
  // The content came in more than one delta, before the call.
  EXPECT_GT(r.deltas.size(), 3u);
  EXPECT_TRUE(r.deltas[0]["content"].is_string());

  const testing::StreamResult plain = testing::stream_completion(
      s.ts.port, s.request("hi", /*stream=*/true), {}, "/v1/chat/completions");
  ASSERT_TRUE(plain.error.empty()) << plain.error;
  EXPECT_EQ(plain.finish_reason, "stop");
  std::string text;
  for (const Json& d : plain.deltas) {
    EXPECT_FALSE(d.contains("tool_calls"));
    if (d["content"].is_string()) text += d["content"];
  }
  EXPECT_EQ(text, kPlainReply);
}

// A Qwen3-style model that thinks before calling and before answering, and answers one question
// without thinking, served with --reasoning-parser qwen3 beside the tool-call parser.
constexpr std::string_view kThinkingCall =
    "<think>a tool call.</think><tool_call>{\"name\": \"get_weather\", \"arguments\": "
    "{\"city\": \"paris\"}}</tool_call>";
constexpr std::string_view kThinkingReply = "<think>greet back.</think>\n\nhello!";

struct ReasoningServer : ToolServer {
  ReasoningServer()
      : ToolServer({{"weather in paris?", kThinkingCall},
                    {"hi", kThinkingReply},
                    {"no thinking", "plain answer"}},
                   {.reasoning_parser = serve::ReasoningFormat::Qwen3}) {}
};

TEST(ServerReasoning, ThinkingComesApartFromTheAnswerAndTheCalls) {
  ReasoningServer s;
  auto [status, called] = post_json(s.ts, "/v1/chat/completions", s.request("weather in paris?"));
  ASSERT_EQ(status, 200) << called.dump();
  const Json& m = called["choices"][0]["message"];
  EXPECT_EQ(called["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(m["reasoning_content"], "a tool call.");
  EXPECT_TRUE(m["content"].is_null()) << m.dump();
  ASSERT_EQ(m["tool_calls"].size(), 1u) << m.dump();
  expect_weather_call(m["tool_calls"][0]);

  auto [status2, thought] = post_json(s.ts, "/v1/chat/completions", s.request("hi"));
  ASSERT_EQ(status2, 200) << thought.dump();
  EXPECT_EQ(thought["choices"][0]["message"]["reasoning_content"], "greet back.");
  EXPECT_EQ(thought["choices"][0]["message"]["content"], "\n\nhello!");

  auto [status3, plain] = post_json(s.ts, "/v1/chat/completions", s.request("no thinking"));
  ASSERT_EQ(status3, 200) << plain.dump();
  EXPECT_TRUE(plain["choices"][0]["message"]["reasoning_content"].is_null()) << plain.dump();
  EXPECT_EQ(plain["choices"][0]["message"]["content"], "plain answer");

  // Streamed: the thinking in reasoning_content deltas (no content beside it), then the answer.
  const testing::StreamResult r = testing::stream_completion(
      s.ts.port, s.request("hi", /*stream=*/true), {}, "/v1/chat/completions");
  ASSERT_TRUE(r.error.empty()) << r.error;
  std::string reasoning, content;
  for (const Json& d : r.deltas) {
    if (d.contains("reasoning_content")) {
      reasoning += d["reasoning_content"].get<std::string>();
      EXPECT_TRUE(d["content"].is_null()) << d.dump();
    } else if (d["content"].is_string()) {
      content += d["content"].get<std::string>();
    }
  }
  EXPECT_EQ(reasoning, "greet back.");
  EXPECT_EQ(content, "\n\nhello!");
  const testing::StreamResult call = testing::stream_completion(
      s.ts.port, s.request("weather in paris?", /*stream=*/true), {}, "/v1/chat/completions");
  ASSERT_TRUE(call.error.empty()) << call.error;
  EXPECT_EQ(call.finish_reason, "tool_calls");
  size_t calls = 0;
  for (const Json& d : call.deltas) {
    if (d.contains("tool_calls")) expect_weather_call(d["tool_calls"][calls++]);
    if (d["content"].is_string()) EXPECT_EQ(d["content"], "") << "no markup leaks: " << d.dump();
  }
  EXPECT_EQ(calls, 1u);
}

// chat_template_kwargs reach the model's chat template (Qwen3's enable_thinking); the variables
// the server sets are not theirs to change.
TEST(ServerReasoning, ChatTemplateKwargsReachTheTemplate) {
  // 70 characters: every id the model may sample prints.
  auto tok = std::make_shared<tokenizers::CharTokenizer>(
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789<>/ \n!?#");
  auto model = testing::small_gpt2();
  auto chat_template = std::make_shared<serve::ChatTemplate>(serve::ChatTemplate{
      tokenizers::JinjaTemplate("{% for m in messages %}{{ m.content }}\n{% endfor %}"
                                "{% if enable_thinking is defined and not enable_thinking %}"
                                "<think></think>{% endif %}"),
      "", ""});
  testing::TestServer ts(*model, tok, {.max_num_seqs = 2}, {.chat_template = chat_template});
  const Json messages = {{{"role", "user"}, {"content", "hi"}}};
  auto tokenized = [&](const Json& extra) {
    Json body = {{"messages", messages}};
    body.update(extra);
    auto [status, reply] = post_json(ts, "/tokenize", body);
    EXPECT_EQ(status, 200) << reply.dump();
    return tok->decode(reply["tokens"].get<std::vector<int32_t>>());
  };
  EXPECT_EQ(tokenized(Json::object()), "hi\n");
  EXPECT_EQ(tokenized({{"chat_template_kwargs", {{"enable_thinking", false}}}}),
            "hi\n<think></think>");
  auto [status, reply] = post_json(ts, "/v1/chat/completions",
                                   {{"messages", messages},
                                    {"max_tokens", 2},
                                    {"chat_template_kwargs", {{"enable_thinking", false}}}});
  EXPECT_EQ(status, 200) << reply.dump();
  EXPECT_EQ(reply["usage"]["prompt_tokens"], 18);
  for (const Json& bad : {Json(3), Json({{"messages", Json::array()}})}) {
    auto [code, error] = post_json(ts, "/v1/chat/completions",
                                   {{"messages", messages}, {"chat_template_kwargs", bad}});
    EXPECT_EQ(code, 400) << error.dump();
    EXPECT_EQ(error["error"]["param"], "chat_template_kwargs");
  }
}

TEST(ServerAutoTools, MistralCallIdsAreNineLettersOrDigits) {
  for (int i = 0; i < 20; ++i) {
    const std::string id =
        serve::new_tool_call_id(serve::ToolChoice::Auto, serve::ToolCallFormat::Mistral);
    EXPECT_EQ(id.size(), 9u);
    EXPECT_TRUE(std::all_of(id.begin(), id.end(), [](char c) { return std::isalnum(c); })) << id;
  }
  EXPECT_NE(serve::new_tool_call_id(serve::ToolChoice::Auto, serve::ToolCallFormat::Hermes),
            serve::new_tool_call_id(serve::ToolChoice::Auto, serve::ToolCallFormat::Hermes));
}

}  // namespace
}  // namespace tessera
