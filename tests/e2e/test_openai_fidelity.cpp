// OpenAI API fidelity of `tessera serve` (issue #18), in C++: request parsing of n / best_of /
// logprobs / stop lists / response_format / model names with their bad values, the engine's
// logprobs against a log-softmax computed here, and over HTTP on stories260K: 404
// model_not_found, n choices (own index, distinct seeds, streamed), best_of's ranking,
// logprobs in both shapes, /v1/embeddings (checked through lm_head against the model's logits)
// and /tokenize /detokenize. tests/openai_client drives the same
// through the official client library.
#include <gtest/gtest.h>
#include <httplib.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "tessera/infer/engine.h"
#include "tessera/infer/logprobs.h"
#include "tessera/ops/creation.h"
#include "tessera/serve/openai.h"
#include "testing/server_harness.h"
#include "testing/temp_dir.h"

namespace tessera {
namespace {

using Json = nlohmann::json;
using serve::Endpoint;
using testing::post_json;
using testing::Stories;
using testing::TestServer;

serve::ModelLimits limits(const Stories& s) {
  return {256, s.tokenizer->vocab_size(), {"test-model", "alias"}};
}

serve::CompletionRequest parse(const Stories& s, Endpoint ep, const Json& body) {
  return serve::parse_request(ep, body.dump(), *s.tokenizer, limits(s));
}

// The ApiError a body gets (status 0 when it parses).
serve::ApiError rejection(const Stories& s, Endpoint ep, const Json& body) {
  try {
    parse(s, ep, body);
  } catch (const serve::ApiError& e) {
    return e;
  }
  return serve::ApiError(0, "accepted");
}

const Json kChat = Json::array({{{"role", "user"}, {"content", "hi"}}});

TEST(OpenAIParse, NewFields) {
  STORIES_OR_SKIP(s);
  serve::CompletionRequest r = parse(*s, Endpoint::Completions,
                                     {{"model", "alias"},
                                      {"prompt", "Once"},
                                      {"n", 2},
                                      {"best_of", 3},
                                      {"logprobs", 4},
                                      {"seed", 9},
                                      {"stop", {"a", "b", "c", "d"}},
                                      {"response_format", {{"type", "text"}}}});
  EXPECT_EQ(r.model, "alias");
  EXPECT_EQ(r.n, 2);
  EXPECT_EQ(r.best_of, 3);
  EXPECT_EQ(r.logprobs, 4);
  EXPECT_EQ(r.params.logprobs, 4);
  EXPECT_EQ(r.params.stopping.stop.size(), 4u);
  EXPECT_EQ(*r.choice_params(0).sampling.seed, 9u);
  EXPECT_EQ(*r.choice_params(2).sampling.seed, 11u);

  r = parse(*s, Endpoint::ChatCompletions,
            {{"messages", kChat},
             {"logprobs", true},
             {"top_logprobs", 20},
             {"max_completion_tokens", 7},
             {"max_tokens", 3}});
  EXPECT_EQ(r.model, "test-model") << "no model: the first served name";
  EXPECT_EQ(r.logprobs, 20);
  EXPECT_EQ(r.params.stopping.max_tokens, 7) << "max_completion_tokens wins over max_tokens";
  EXPECT_EQ(r.n, 1);
  EXPECT_EQ(r.best_of, 1);

  r = parse(*s, Endpoint::ChatCompletions, {{"messages", kChat}, {"logprobs", false}});
  // Without max_tokens chat may use the rest of the context (OpenAI, vLLM); completions get 16.
  EXPECT_EQ(r.params.stopping.max_tokens, 256 - static_cast<int64_t>(r.prompt.size()));
  EXPECT_EQ(parse(*s, Endpoint::Completions, {{"prompt", "Once"}}).params.stopping.max_tokens, 16);
  EXPECT_EQ(r.logprobs, -1);
  EXPECT_EQ(r.params.logprobs, -1) << "no logprobs computed when not asked";
  // best_of ranks by logprob: the engine computes them even when the reply shows none.
  r = parse(*s, Endpoint::Completions, {{"prompt", "a"}, {"best_of", 2}});
  EXPECT_EQ(r.logprobs, -1);
  EXPECT_EQ(r.params.logprobs, 0);
}

TEST(OpenAIParse, BadValuesName400sAnd404) {
  STORIES_OR_SKIP(s);
  struct Case {
    Endpoint ep;
    Json body;
    int status;
    std::string param, code;
  };
  const Json p = "Once";
  const std::vector<Case> cases{
      {Endpoint::Completions, {{"prompt", p}, {"n", 0}}, 400, "n", ""},
      {Endpoint::Completions, {{"prompt", p}, {"n", 3}, {"best_of", 2}}, 400, "best_of", ""},
      {Endpoint::Completions,
       {{"prompt", p}, {"n", 1}, {"best_of", 2}, {"stream", true}},
       400,
       "best_of",
       ""},
      {Endpoint::ChatCompletions,
       {{"messages", kChat}, {"logprobs", true}, {"top_logprobs", 21}},
       400,
       "top_logprobs",
       ""},
      {Endpoint::ChatCompletions,
       {{"messages", kChat}, {"top_logprobs", 2}},
       400,
       "top_logprobs",
       ""},
      {Endpoint::Completions, {{"prompt", p}, {"logprobs", 21}}, 400, "logprobs", ""},
      {Endpoint::Completions,
       {{"prompt", p}, {"stop", {"a", "b", "c", "d", "e"}}},
       400,
       "stop",
       ""},
      {Endpoint::Completions, {{"prompt", p}, {"model", "gpt-4"}}, 404, "model", "model_not_found"},
      {Endpoint::ChatCompletions,
       {{"messages", kChat}, {"response_format", {{"type", "json_schema"}}}},
       400,
       "response_format",
       ""},
      {Endpoint::ChatCompletions,
       {{"messages", kChat}, {"response_format", {{"type", "yaml"}}}},
       400,
       "response_format",
       ""},
      {Endpoint::Completions, {{"prompt", p}, {"logit_bias", {{"x", 1}}}}, 400, "logit_bias", ""},
      {Endpoint::Completions,
       {{"prompt", p}, {"guided_choice", {"a", "b"}}, {"guided_json", {{"type", "integer"}}}},
       400,
       "guided_choice",
       ""},
      {Endpoint::Completions,
       {{"prompt", p}, {"guided_choice", {"a", "a"}}},
       400,
       "guided_choice",
       ""},
      {Endpoint::Completions,
       {{"prompt", p}, {"guided_json", "{not json"}},
       400,
       "guided_json",
       ""},
      {Endpoint::Completions,
       {{"prompt", p}, {"structured_outputs", {{"regex", "a(?=b)"}}}},
       400,
       "structured_outputs",
       ""},
      {Endpoint::Completions, {{"prompt", p}, {"guided_regex", 7}}, 400, "guided_regex", ""},
      {Endpoint::Completions,
       {{"prompt", p}, {"guided_grammar", "root ::= x"}},
       400,
       "guided_grammar",
       ""},
      {Endpoint::Completions,
       {{"prompt", p}, {"structured_outputs", {{"lark", "start: \"a\""}}}},
       400,
       "structured_outputs",
       ""},
      {Endpoint::Completions,
       {{"prompt", p}, {"structured_outputs", {{"choice", {"a"}}, {"json", {{"type", "null"}}}}}},
       400,
       "structured_outputs",
       ""},
      {Endpoint::Completions, {{"prompt", p}, {"logit_bias", {{"512", 1}}}}, 400, "logit_bias", ""},
      {Endpoint::Completions, {{"prompt", p}, {"logit_bias", {{"5", 101}}}}, 400, "logit_bias", ""},
      {Endpoint::Completions, {{"prompt", p}, {"logit_bias", {{"5", "1"}}}}, 400, "logit_bias", ""},
      {Endpoint::Completions,
       {{"prompt", p}, {"logit_bias", Json::array()}},
       400,
       "logit_bias",
       ""},
      {Endpoint::Completions, {{"prompt", p}, {"max_tokens", 300}}, 400, "max_tokens", ""},
  };
  for (const Case& c : cases) {
    const serve::ApiError e = rejection(*s, c.ep, c.body);
    EXPECT_EQ(e.status, c.status) << c.body.dump() << ": " << e.message;
    EXPECT_EQ(e.param, c.param) << c.body.dump();
    EXPECT_EQ(e.code, c.code) << c.body.dump();
    if (c.status == 404) EXPECT_EQ(e.type, "invalid_request_error");
  }
  const Json pattern = {
      {"type", "json_schema"},
      {"json_schema", {{"name", "x"}, {"schema", {{"type", "string"}, {"pattern", "(a)\\1"}}}}}};
  const std::string refused =
      rejection(*s, Endpoint::ChatCompletions, {{"messages", kChat}, {"response_format", pattern}})
          .message;
  EXPECT_NE(refused.find("backreferences are not supported at position 3 of '(a)\\1' at #/pattern"),
            std::string::npos)
      << refused;
  // Accepted: the grammar and the biases reach the engine's parameters.
  const serve::CompletionRequest r = parse(*s, Endpoint::ChatCompletions,
                                           {{"messages", kChat},
                                            {"response_format", {{"type", "json_object"}}},
                                            {"logit_bias", {{"5", -100}, {"7", 2.5}}}});
  EXPECT_NE(r.params.json_grammar, nullptr);
  EXPECT_EQ(r.choice_params(1).json_grammar, r.params.json_grammar) << "every choice's";
  // vLLM's fields: structured_outputs (>= 0.10.2) and the older guided_json / guided_regex /
  // guided_choice.
  for (const Json& extra :
       {Json{{"structured_outputs", {{"choice", {"a", "b"}}}}},
        Json{{"structured_outputs", {{"regex", "[ab]+"}}}}, Json{{"guided_regex", "\\d+"}},
        Json{{"structured_outputs", {{"grammar", "root ::= [ab]+"}}}},
        Json{{"guided_grammar", "root ::= \"x\" root?"}},
        Json{{"structured_outputs", {{"json", R"({"type": "integer"})"}}}},
        Json{{"guided_json", {{"type", "boolean"}}}}, Json{{"guided_choice", {"x", "y"}}}}) {
    Json body = {{"prompt", "Once"}};
    body.update(extra);
    EXPECT_NE(parse(*s, Endpoint::Completions, body).params.json_grammar, nullptr) << body.dump();
  }
  EXPECT_EQ(r.params.sampling.logit_bias,
            (std::vector<std::pair<int32_t, float>>{{5, -100.0f}, {7, 2.5f}}));
}

// log_softmax in double, written out here.
std::vector<double> log_softmax(const std::vector<float>& x) {
  double m = -INFINITY, sum = 0.0;
  for (float v : x) m = std::max(m, static_cast<double>(v));
  for (float v : x) sum += std::exp(v - m);
  std::vector<double> out;
  for (float v : x) out.push_back(v - m - std::log(sum));
  return out;
}

TEST(OpenAILogprobs, TokenLogprobsAreLogSoftmaxAndTopKInOrder) {
  const std::vector<float> logits{1.0f, 3.0f, -2.0f, 3.0f, 0.5f};
  const std::vector<double> want = log_softmax(logits);
  const infer::TokenLogprob t = infer::token_logprobs(logits, 4, 3);
  EXPECT_NEAR(t.logprob, want[4], 1e-6);
  ASSERT_EQ(t.top.size(), 3u);
  EXPECT_EQ(t.top[0].first, 1) << "ties: the lower id first";
  EXPECT_EQ(t.top[1].first, 3);
  EXPECT_EQ(t.top[2].first, 0);
  for (const auto& [id, lp] : t.top) EXPECT_NEAR(lp, want[id], 1e-6);
  EXPECT_TRUE(infer::token_logprobs(logits, 0, 0).top.empty());
  EXPECT_THROW(infer::token_logprobs(logits, 5, 1), ValueError);
}

// The engine's logprobs for a greedy request equal log_softmax of the model's own logits.
TEST(OpenAILogprobs, EngineReportsRawLogSoftmaxOfTheModel) {
  STORIES_OR_SKIP(s);
  infer::Engine engine(*s->model, {}, s->tokenizer);
  infer::GenerationParams p;
  p.sampling.temperature = 0.7;  // logprobs ignore temperature (raw model distribution)
  p.sampling.seed = 3;
  p.stopping.max_tokens = 4;
  p.logprobs = 2;
  const std::vector<int32_t> prompt{1, 403, 407};
  engine.add_request(prompt, p);
  std::vector<infer::TokenLogprob> got;
  std::vector<int32_t> tokens;
  while (engine.has_unfinished())
    for (const infer::RequestOutput& out : engine.step()) {
      ASSERT_EQ(out.logprobs.size(), out.new_tokens.size());
      got.insert(got.end(), out.logprobs.begin(), out.logprobs.end());
      tokens.insert(tokens.end(), out.new_tokens.begin(), out.new_tokens.end());
    }
  ASSERT_EQ(got.size(), 4u);
  std::vector<int32_t> seq = prompt;
  for (size_t i = 0; i < got.size(); ++i) {
    // The model's composite forward over the whole sequence: the last row's logits.
    const Tensor ids = tensor(std::vector<int64_t>(seq.begin(), seq.end()))
                           .reshape({1, static_cast<int64_t>(seq.size())});
    const Tensor logits = s->model->forward(ids, /*last_only=*/true).contiguous();
    const int64_t V = logits.size(-1);
    const float* last = logits.data_ptr<float>();
    const std::vector<double> want = log_softmax(std::vector<float>(last, last + V));
    EXPECT_EQ(got[i].token, tokens[i]);
    EXPECT_NEAR(got[i].logprob, want[tokens[i]], 1e-4) << "token " << i;
    ASSERT_EQ(got[i].top.size(), 2u);
    for (const auto& [id, lp] : got[i].top) EXPECT_NEAR(lp, want[id], 1e-4);
    seq.push_back(tokens[i]);
  }
  // Without asking, nothing is computed.
  p.logprobs = -1;
  engine.add_request(prompt, p);
  while (engine.has_unfinished())
    for (const infer::RequestOutput& out : engine.step()) EXPECT_TRUE(out.logprobs.empty());
}

TEST(OpenAIServer, UnknownModelIs404ModelNotFound) {
  STORIES_OR_SKIP(s);
  TestServer ts(*s->model, s->tokenizer, {});
  auto [status, body] = post_json(ts, "/v1/completions", {{"model", "nope"}, {"prompt", "a"}});
  EXPECT_EQ(status, 404);
  EXPECT_EQ(body["error"]["code"], "model_not_found");
  EXPECT_EQ(body["error"]["type"], "invalid_request_error");
  auto [ok, good] = post_json(ts, "/v1/completions",
                              {{"model", "test-model"}, {"prompt", "a"}, {"max_tokens", 2}});
  EXPECT_EQ(ok, 200);
  EXPECT_EQ(good["model"], "test-model");
}

TEST(OpenAIServer, NChoicesHaveOwnIndexAndSeedsAndBestOfRanksByLogprob) {
  STORIES_OR_SKIP(s);
  TestServer ts(*s->model, s->tokenizer, {});
  const Json base = {{"prompt", "Once upon"},
                     {"max_tokens", 12},
                     {"temperature", 1.0},
                     {"seed", 5},
                     {"ignore_eos", true}};
  Json body = base;
  body["n"] = 3;
  auto [status, r] = post_json(ts, "/v1/completions", body);
  ASSERT_EQ(status, 200) << r.dump();
  ASSERT_EQ(r["choices"].size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(r["choices"][i]["index"], i);
  EXPECT_NE(r["choices"][0]["token_ids"], r["choices"][1]["token_ids"]) << "seeds differ";
  EXPECT_EQ(r["usage"]["completion_tokens"], 36);
  // Reproducible: the same request again, and choice 1 is the seed + 1 single request.
  EXPECT_EQ(post_json(ts, "/v1/completions", body).second["choices"], r["choices"]);
  Json one = base;
  one["seed"] = 6;
  EXPECT_EQ(post_json(ts, "/v1/completions", one).second["choices"][0]["token_ids"],
            r["choices"][1]["token_ids"]);

  // Streamed: every choice's chunks carry its index and end with its own finish reason.
  body["stream"] = true;
  std::map<int, std::vector<int32_t>> streamed;
  std::map<int, int> finished;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = body.dump();
  std::string buffer;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    buffer.append(data, n);
    for (size_t end; (end = buffer.find("\n\n")) != std::string::npos; buffer.erase(0, end + 2)) {
      const std::string payload = buffer.substr(6, end - 6);
      if (payload == "[DONE]") continue;
      const Json event = Json::parse(payload);  // outlives the loop over its choices
      for (const Json& ch : event["choices"]) {
        for (const Json& t : ch["token_ids"]) streamed[ch["index"]].push_back(t);
        if (!ch["finish_reason"].is_null()) ++finished[ch["index"]];
      }
    }
    return true;
  };
  req.set_header("Content-Type", "application/json");
  auto sent = ts.client().send(req);
  ASSERT_TRUE(sent);
  EXPECT_EQ(sent->status, 200) << buffer;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(Json(streamed[i]), r["choices"][i]["token_ids"]) << "choice " << i;
    EXPECT_EQ(finished[i], 1) << "choice " << i;
  }

  // best_of 3, n 1 with logprobs: the choice with the highest sum among the three samples.
  body = base;
  body["n"] = 3;
  body["logprobs"] = 0;
  auto [s3, all] = post_json(ts, "/v1/completions", body);
  ASSERT_EQ(s3, 200);
  double best = -INFINITY;
  for (const Json& ch : all["choices"]) {
    double sum = 0;
    for (const Json& lp : ch["logprobs"]["token_logprobs"]) sum += lp.get<double>();
    best = std::max(best, sum);
  }
  body["n"] = 1;
  body["best_of"] = 3;
  auto [s1, top] = post_json(ts, "/v1/completions", body);
  ASSERT_EQ(s1, 200) << top.dump();
  ASSERT_EQ(top["choices"].size(), 1u);
  double sum = 0;
  for (const Json& lp : top["choices"][0]["logprobs"]["token_logprobs"]) sum += lp.get<double>();
  EXPECT_NEAR(sum, best, 1e-4);
  EXPECT_EQ(top["choices"][0]["index"], 0);
}

TEST(OpenAIServer, LogprobsInChatAndLegacyShapes) {
  STORIES_OR_SKIP(s);
  TestServer ts(*s->model, s->tokenizer, {});
  auto [cs, chat] = post_json(ts, "/v1/chat/completions",
                              {{"messages", kChat},
                               {"max_tokens", 5},
                               {"temperature", 0},
                               {"logprobs", true},
                               {"top_logprobs", 3},
                               {"ignore_eos", true}});
  ASSERT_EQ(cs, 200) << chat.dump();
  const Json& content = chat["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 5u);
  std::string text;
  for (const Json& e : content) {
    text += e["token"].get<std::string>();
    ASSERT_EQ(e["top_logprobs"].size(), 3u);
    // Greedy: the chosen token is the most likely one.
    EXPECT_EQ(e["top_logprobs"][0]["token"], e["token"]);
    EXPECT_NEAR(e["top_logprobs"][0]["logprob"].get<double>(), e["logprob"].get<double>(), 1e-6);
    EXPECT_LE(e["logprob"].get<double>(), 0.0);
    EXPECT_EQ(e["bytes"].size(), e["token"].get<std::string>().size());
  }
  EXPECT_EQ(text, chat["choices"][0]["message"]["content"]);

  auto [ps, legacy] = post_json(ts, "/v1/completions",
                                {{"prompt", "Once"},
                                 {"max_tokens", 4},
                                 {"temperature", 0},
                                 {"logprobs", 2},
                                 {"ignore_eos", true}});
  ASSERT_EQ(ps, 200) << legacy.dump();
  const Json& lp = legacy["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 4u);
  ASSERT_EQ(lp["token_logprobs"].size(), 4u);
  ASSERT_EQ(lp["top_logprobs"].size(), 4u);
  EXPECT_EQ(lp["text_offset"][0], 0);
  EXPECT_EQ(lp["text_offset"][1], lp["tokens"][0].get<std::string>().size());
  EXPECT_EQ(lp["top_logprobs"][0].size(), 2u);
  EXPECT_TRUE(lp["top_logprobs"][0].contains(lp["tokens"][0].get<std::string>()));
  // Not asked: null.
  auto [ns, plain] = post_json(ts, "/v1/completions", {{"prompt", "Once"}, {"max_tokens", 2}});
  EXPECT_TRUE(plain["choices"][0]["logprobs"].is_null());
}

// Embeddings are the mean final-normed hidden state: through lm_head (linear) they give the mean
// of the model's own logits over the prompt's positions.
TEST(OpenAIEmbeddings, MeanPooledHiddenStateMatchesTheModelsLogits) {
  STORIES_OR_SKIP(s);
  infer::Engine engine(*s->model, {}, s->tokenizer);
  const std::vector<int32_t> prompt{1, 403, 407, 261};
  const std::vector<float> e = engine.embed(prompt);
  const Tensor W = s->model->inference_layout().lm_head.contiguous();  // [V, C]
  const int64_t V = W.size(0), C = W.size(1), T = static_cast<int64_t>(prompt.size());
  ASSERT_EQ(static_cast<int64_t>(e.size()), C);
  const Tensor logits =
      s->model->forward(tensor(std::vector<int64_t>(prompt.begin(), prompt.end())).reshape({1, T}))
          .contiguous();
  const float* l = logits.data_ptr<float>();
  const float* w = W.data_ptr<float>();
  for (int64_t v = 0; v < V; v += 37) {
    double want = 0.0, got = 0.0;
    for (int64_t t = 0; t < T; ++t) want += l[t * V + v] / static_cast<double>(T);
    for (int64_t c = 0; c < C; ++c) got += static_cast<double>(e[c]) * w[v * C + c];
    EXPECT_NEAR(got, want, 1e-3) << "vocab row " << v;
  }
  EXPECT_THROW(engine.embed(std::vector<int32_t>{}), ValueError);
}

// base64 of little-endian float32, decoded here.
std::vector<float> from_base64(const std::string& text) {
  const std::string alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes;
  uint32_t v = 0;
  int bits = 0;
  for (char ch : text) {
    if (ch == '=') break;
    v = v << 6 | static_cast<uint32_t>(alphabet.find(ch));
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      bytes += static_cast<char>((v >> bits) & 0xFF);
    }
  }
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

TEST(OpenAIServer, EmbeddingsFloatAndBase64) {
  STORIES_OR_SKIP(s);
  TestServer ts(*s->model, s->tokenizer, {});
  auto [st, r] =
      post_json(ts, "/v1/embeddings", {{"model", "test-model"}, {"input", {"Once", "upon a"}}});
  ASSERT_EQ(st, 200) << r.dump();
  ASSERT_EQ(r["data"].size(), 2u);
  EXPECT_EQ(r["data"][1]["index"], 1);
  EXPECT_EQ(r["object"], "list");
  const int64_t tokens = static_cast<int64_t>(s->tokenizer->encode("Once", true).size() +
                                              s->tokenizer->encode("upon a", true).size());
  EXPECT_EQ(r["usage"]["prompt_tokens"], tokens);
  infer::Engine engine(*s->model, {}, s->tokenizer);
  const std::vector<float> want = engine.embed(s->tokenizer->encode("Once", true));
  EXPECT_EQ(r["data"][0]["embedding"].get<std::vector<float>>(), want);
  auto [sb, b] =
      post_json(ts, "/v1/embeddings", {{"input", {1, 403}}, {"encoding_format", "base64"}});
  ASSERT_EQ(sb, 200) << b.dump();
  EXPECT_EQ(from_base64(b["data"][0]["embedding"]), engine.embed(std::vector<int32_t>{1, 403}));
  EXPECT_EQ(post_json(ts, "/v1/embeddings", {{"input", 5}}).first, 400);
  EXPECT_EQ(post_json(ts, "/v1/embeddings", {{"input", "a"}, {"encoding_format", "int8"}}).first,
            400);
  EXPECT_EQ(post_json(ts, "/v1/embeddings", {{"input", "a"}, {"model", "x"}}).first, 404);
}

// A Hugging Face tokenizer_config.json beside the model: its chat_template (ChatML here, with
// a raise_exception for a role it refuses) makes chat prompts; --chat-template takes a file.
TEST(OpenAIChatTemplate, TokenizerConfigTemplateMakesChatPrompts) {
  STORIES_OR_SKIP(s);
  testing::TempDir dir;
  const std::string chatml =
      "{% for message in messages %}{% if message['role'] == 'tool' %}{{ raise_exception('no "
      "tools') }}{% endif %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + "
      "'<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' "
      "}}{% endif %}";
  std::ofstream(dir.file("tokenizer_config.json")) << Json{
      {"chat_template", chatml},
      {"bos_token", {{"content", "<s>"}}},
      {"eos_token", "</s>"}}.dump();
  serve::ServerConfig sc;
  sc.chat_template = serve::load_chat_template("", dir.path.string());
  ASSERT_TRUE(sc.chat_template);
  EXPECT_EQ(sc.chat_template->bos_token, "<s>");
  EXPECT_EQ(sc.chat_template->eos_token, "</s>");
  TestServer ts(*s->model, s->tokenizer, {}, sc);
  const std::string text = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n";
  auto [st, tok] = post_json(ts, "/tokenize", {{"messages", kChat}});
  ASSERT_EQ(st, 200) << tok.dump();
  EXPECT_EQ(tok["tokens"], Json(s->tokenizer->encode(text, /*add_bos=*/false)))
      << "the template decides about BOS";
  auto [cs, chat] = post_json(ts, "/v1/chat/completions", {{"messages", kChat}, {"max_tokens", 2}});
  ASSERT_EQ(cs, 200) << chat.dump();
  EXPECT_EQ(chat["usage"]["prompt_tokens"], tok["count"]);
  auto [rs, refused] =
      post_json(ts, "/v1/chat/completions", {{"messages", {{{"role", "tool"}, {"content", "x"}}}}});
  EXPECT_EQ(rs, 400);
  EXPECT_EQ(refused["error"]["param"], "messages");
  EXPECT_NE(refused["error"]["message"].get<std::string>().find("no tools"), std::string::npos);

  // --chat-template FILE (raw Jinja) wins over the folder's; bos_token and eos_token become their
  // ids wherever the template writes them (they were text, "<", "/", "s", ">", between turns).
  std::ofstream(dir.file("t.jinja")) << "{{ bos_token }}{% for m in messages %}{{ m.content }}"
                                        "{{ eos_token }}{% endfor %}";
  const auto file = serve::load_chat_template(dir.file("t.jinja"), dir.path.string());
  serve::ModelLimits lim = limits(*s);
  lim.chat_template = file;
  const serve::CompletionRequest r = serve::parse_request(
      Endpoint::ChatCompletions, Json{{"messages", kChat}}.dump(), *s->tokenizer, lim);
  std::vector<int32_t> want = s->tokenizer->encode("hi", /*add_bos=*/true);
  want.push_back(*s->tokenizer->eos_id());
  EXPECT_EQ(r.prompt, want);
  // The template sees the request's tools and the messages as vLLM hands them over: tool calls
  // with parsed arguments, null content, the tool message's tool_call_id.
  std::ofstream(dir.file("tools.jinja"))
      << "{% for t in tools %}{{ t.function.name }};{% endfor %}{% for m in messages %}"
         "{{ m.role }}:{{ m.content if m.content is not none else '-' }}"
         "{% for c in m.tool_calls or [] %}[{{ c.function.name }}({{ c.function.arguments.x }})]"
         "{% endfor %}{{ m.tool_call_id or '' }}|{% endfor %}";
  lim.chat_template = serve::load_chat_template(dir.file("tools.jinja"), "");
  const Json tool_chat = Json::parse(R"({"tool_choice": "none", "tools": [{"type": "function",
      "function": {"name": "add", "parameters": {"type": "object"}}}], "messages": [
      {"role": "user", "content": "hi"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
       "function": {"name": "add", "arguments": "{\"x\": 5}"}}]},
      {"role": "tool", "content": "7", "tool_call_id": "c1"}]})");
  EXPECT_EQ(
      serve::parse_request(Endpoint::ChatCompletions, tool_chat.dump(), *s->tokenizer, lim).prompt,
      s->tokenizer->encode("add;user:hi|assistant:-[add(5)]|tool:7c1|"));
  // No config and no file: the plain template.
  EXPECT_EQ(serve::load_chat_template("", dir.file("missing")), nullptr);
  EXPECT_THROW(serve::load_chat_template(dir.file("nope.jinja"), ""), ValueError);
}

TEST(OpenAIServer, TokenizeAndDetokenize) {
  STORIES_OR_SKIP(s);
  TestServer ts(*s->model, s->tokenizer, {});
  auto [ts1, tok] = post_json(ts, "/tokenize", {{"model", "test-model"}, {"prompt", "Once upon"}});
  ASSERT_EQ(ts1, 200) << tok.dump();
  EXPECT_EQ(tok["tokens"], Json(s->tokenizer->encode("Once upon", true)));
  EXPECT_EQ(tok["count"], tok["tokens"].size());
  EXPECT_GT(tok["max_model_len"].get<int64_t>(), 0);
  auto [ts2, chat] = post_json(ts, "/tokenize", {{"messages", kChat}});
  ASSERT_EQ(ts2, 200);
  EXPECT_EQ(chat["tokens"], Json(s->tokenizer->encode("user: hi\nassistant:", true)));
  auto [ts3, text] = post_json(ts, "/detokenize", {{"tokens", tok["tokens"]}});
  ASSERT_EQ(ts3, 200) << text.dump();
  EXPECT_EQ(text["prompt"], s->tokenizer->decode(tok["tokens"].get<std::vector<int32_t>>()));
  EXPECT_EQ(post_json(ts, "/detokenize", {{"tokens", {100000}}}).first, 400);
  EXPECT_EQ(post_json(ts, "/tokenize", {{"model", "x"}, {"prompt", "a"}}).first, 404);
  EXPECT_EQ(post_json(ts, "/tokenize", {{"prompt", 3}}).first, 400);
}

}  // namespace
}  // namespace tessera
