// The OpenAI-compatible server end to end over HTTP (cpp-httplib client), on llama2.c's
// stories260K and its tokenizer: 32 concurrent streaming requests each get exactly the greedy
// output the request gets alone (infer::generate, static cache); a KV cache too small for the
// load forces preemptions and still every request is right; every kind of bad input gets a 4xx
// in OpenAI's error shape and the server then serves a good request; a client that disconnects
// mid-stream, or a stop() with a stream open, has its request aborted and its blocks freed; stop()
// ends run() wherever startup stands.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <future>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <thread>

#include "tessera/infer/generate.h"
#include "tessera/models/llama.h"
#include "tessera/tessera.h"
#include "testing/failing_tokenizer.h"
#include "testing/server_harness.h"

namespace tessera {
namespace {

using Json = nlohmann::json;

using testing::Stories;
using testing::StreamResult;
using testing::TestServer;

StreamResult stream_completion(const TestServer& ts, const Json& body) {
  StreamResult r = testing::stream_completion(ts.port, body);
  EXPECT_TRUE(r.error.empty()) << r.error;
  if (r.events > 0) EXPECT_EQ(r.object, "text_completion");
  return r;
}

// Text as JSON carries it: bytes that are not UTF-8 (byte tokens) become U+FFFD.
std::string valid_utf8(const std::string& s) {
  return Json::parse(Json(s).dump(-1, ' ', false, Json::error_handler_t::replace))
      .get<std::string>();
}

// What the request gets alone: infer::generate with the server's stop tokens (EOS and BOS).
infer::GenerationResult alone(const Stories& s, const std::vector<int32_t>& prompt,
                              int64_t max_tokens) {
  static std::unique_ptr<infer::ModelRunner> runner;
  if (!runner) runner = std::make_unique<infer::ModelRunner>(*s.model);
  infer::GenerationParams p;
  p.sampling.temperature = 0.0;
  p.stopping.max_tokens = max_tokens;
  p.stopping.stop_token_ids = {2, 1};
  infer::GenerateOptions opts;
  opts.tokenizer = s.tokenizer.get();
  return infer::generate(*runner, prompt, p, opts);
}

// Request i: a text prompt or a token id prompt, of varied lengths.
Json request_body(const Stories& s, int i, std::vector<int32_t>& prompt, int64_t max_tokens) {
  Json body = {{"model", "test-model"},
               {"max_tokens", max_tokens},
               {"temperature", 0},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}}};
  if (i % 2 == 0) {
    const std::string text = std::string("Once upon a time ").substr(0, 1 + i % 17);
    body["prompt"] = text;
    prompt = s.tokenizer->encode(text, /*add_bos=*/true);
  } else {
    prompt = {1};
    for (int k = 0; k < 1 + 7 * (i % 9); ++k) prompt.push_back(3 + (i * 37 + k * 11) % 500);
    body["prompt"] = prompt;
  }
  return body;
}

void check_concurrent_streams(const TestServer& ts, const Stories& s, int n, int64_t max_tokens) {
  std::vector<StreamResult> results(n);
  std::vector<std::vector<int32_t>> prompts(n);
  std::vector<Json> bodies;
  for (int i = 0; i < n; ++i) bodies.push_back(request_body(s, i, prompts[i], max_tokens + 7 * i));
  std::vector<std::thread> clients;
  for (int i = 0; i < n; ++i)
    clients.emplace_back([&, i] { results[i] = stream_completion(ts, bodies[i]); });
  for (auto& t : clients) t.join();
  for (int i = 0; i < n; ++i) {
    const infer::GenerationResult want = alone(s, prompts[i], max_tokens + 7 * i);
    const StreamResult& got = results[i];
    EXPECT_EQ(got.status, 200) << "request " << i;
    EXPECT_TRUE(got.done) << "request " << i << " ended without data: [DONE]";
    EXPECT_EQ(got.tokens, want.tokens) << "request " << i;
    EXPECT_EQ(got.text, valid_utf8(want.text)) << "request " << i;
    EXPECT_EQ(got.finish_reason, infer::finish_reason_name(want.finish_reason)) << "request " << i;
    EXPECT_EQ(got.usage.value("completion_tokens", -1), static_cast<int64_t>(want.tokens.size()));
    EXPECT_EQ(got.usage.value("prompt_tokens", -1), static_cast<int64_t>(prompts[i].size()));
  }
}

TEST(Server, ThirtyTwoConcurrentStreamsMatchSingleRequests) {
  STORIES_OR_SKIP(s);
  infer::EngineConfig ec;
  ec.max_num_seqs = 16;  // half of them wait in the queue at first
  TestServer ts(*s->model, s->tokenizer, ec);
  check_concurrent_streams(ts, *s, 32, 60);
  EXPECT_EQ(ts.metric("tessera_kv_blocks_used"), 0);
  EXPECT_EQ(ts.metric("tessera_preemptions_total"), 0);
  EXPECT_GE(ts.metric("tessera_time_to_first_token_seconds_count"), 32);
}

TEST(Server, PreemptionUnderKvPressureKeepsEveryRequestRight) {
  STORIES_OR_SKIP(s);
  infer::EngineConfig ec;
  ec.num_blocks = 40;  // 640 positions for 16 requests of up to ~230 tokens each
  ec.max_num_seqs = 16;
  TestServer ts(*s->model, s->tokenizer, ec);
  check_concurrent_streams(ts, *s, 16, 120);
  EXPECT_GT(ts.metric("tessera_preemptions_total"), 0) << "the cache was meant to run out";
  EXPECT_EQ(ts.metric("tessera_kv_blocks_used"), 0);
}

// Prompt-lookup speculation (vLLM's --speculative-config, every draft run): every stream equals the
// request decoded alone (infer::generate, no drafts), and /metrics counts drafts accepted.
TEST(Server, SpeculativeDecodingKeepsEveryStreamEqualToSingleRequests) {
  STORIES_OR_SKIP(s);
  infer::EngineConfig ec;
  ec.max_num_seqs = 16;
  ec.speculative = infer::SpeculativeConfig::parse(
      R"({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3,
          "adaptive": false})",
      "test");
  TestServer ts(*s->model, s->tokenizer, ec);
  check_concurrent_streams(ts, *s, 16, 100);
  const double drafted = ts.metric("tessera_spec_decode_num_draft_tokens_total");
  const double accepted = ts.metric("tessera_spec_decode_num_accepted_tokens_total");
  EXPECT_GT(accepted, 0) << "stories repeat their names and phrases";
  EXPECT_LE(accepted, drafted);
  EXPECT_GT(ts.metric("tessera_spec_decode_num_drafts_total"), 0);
  EXPECT_EQ(ts.metric("tessera_kv_blocks_used"), 0);
}

// The status and parsed error body of a request.
std::pair<int, Json> post(const TestServer& ts, const std::string& path, const std::string& body,
                          const std::string& key = "secret") {
  httplib::Client c = ts.client();
  httplib::Headers headers;
  if (!key.empty()) headers.emplace("Authorization", "Bearer " + key);
  auto res = c.Post(path, headers, body, "application/json");
  if (!res) return {-1, Json()};
  return {res->status, Json::parse(res->body, nullptr, false)};
}

TEST(Server, BadInputsGet4xxErrorsAndTheServerKeepsServing) {
  STORIES_OR_SKIP(s);
  serve::ServerConfig sc;
  sc.api_key = "secret";
  sc.max_body_bytes = 64 * 1024;
  TestServer ts(*s->model, s->tokenizer, {}, sc);
  const std::string long_prompt = Json(std::vector<int>(600, 5)).dump();
  struct Case {
    std::string what, path, body, key;
    int status;
    std::string param;
  };
  const std::vector<Case> cases{
      {"missing API key", "/v1/completions", R"({"prompt": "a"})", "", 401, ""},
      {"wrong API key", "/v1/completions", R"({"prompt": "a"})", "nope", 401, ""},
      {"malformed JSON", "/v1/completions", R"({"prompt": "a",)", "secret", 400, ""},
      {"not an object", "/v1/completions", R"([1, 2])", "secret", 400, ""},
      {"unknown field", "/v1/completions", R"({"prompt": "a", "foo": 1})", "secret", 400, "foo"},
      {"max_tokens of the wrong type", "/v1/completions", R"({"prompt": "a", "max_tokens": "ten"})",
       "secret", 400, "max_tokens"},
      {"temperature of the wrong type", "/v1/completions",
       R"({"prompt": "a", "temperature": "hot"})", "secret", 400, "temperature"},
      {"stream of the wrong type", "/v1/completions", R"({"prompt": "a", "stream": "yes"})",
       "secret", 400, "stream"},
      {"prompt of the wrong type", "/v1/completions", R"({"prompt": {"text": "a"}})", "secret", 400,
       "prompt"},
      {"messages of the wrong type", "/v1/chat/completions", R"({"messages": "hi"})", "secret", 400,
       "messages"},
      {"missing prompt", "/v1/completions", R"({"max_tokens": 3})", "secret", 400, "prompt"},
      {"token id out of the vocabulary", "/v1/completions", R"({"prompt": [1, 512]})", "secret",
       400, "prompt"},
      {"prompt longer than the context", "/v1/completions", "{\"prompt\": " + long_prompt + "}",
       "secret", 400, "prompt"},
      {"max_tokens 0", "/v1/completions", R"({"prompt": "a", "max_tokens": 0})", "secret", 400,
       "max_tokens"},
      {"max_tokens negative", "/v1/completions", R"({"prompt": "a", "max_tokens": -5})", "secret",
       400, "max_tokens"},
      {"max_tokens beyond the context", "/v1/completions",
       R"({"prompt": "a", "max_tokens": 100000})", "secret", 400, "max_tokens"},
      {"top_p out of range", "/v1/completions", R"({"prompt": "a", "top_p": 1.5})", "secret", 400,
       "top_p"},
      {"n 0", "/v1/completions", R"({"prompt": "a", "n": 0})", "secret", 400, "n"},
      {"unknown model", "/v1/completions", R"({"prompt": "a", "model": "x"})", "secret", 404,
       "model"},
      {"oversized body", "/v1/completions",
       "{\"prompt\": \"" + std::string(100 * 1024, 'a') + "\"}", "secret", 413, ""},
      {"unknown route", "/v1/nope", R"({"input": "a"})", "secret", 404, ""},
      {"JSON nested 30000 deep", "/v1/completions",
       "{\"prompt\": " + std::string(30000, '[') + std::string(30000, ']') + "}", "secret", 400,
       ""},
  };
  for (const Case& c : cases) {
    auto [status, body] = post(ts, c.path, c.body, c.key);
    EXPECT_EQ(status, c.status) << c.what;
    ASSERT_TRUE(body.is_object() && body.contains("error")) << c.what << ": " << body.dump();
    const Json& e = body["error"];
    EXPECT_TRUE(e["message"].is_string() && !e["message"].get<std::string>().empty()) << c.what;
    EXPECT_TRUE(e["type"].is_string()) << c.what;
    EXPECT_TRUE(e.contains("code")) << c.what;
    if (!c.param.empty()) EXPECT_EQ(e["param"], c.param) << c.what;
  }
  // A form-encoded body over httplib's own 8 KiB cap for them is told to come as JSON (not that
  // it exceeds max_body_bytes, which it does not).
  auto form = ts.client().Post("/v1/completions", {{"Authorization", "Bearer secret"}},
                               std::string(10 * 1024, 'a'), "application/x-www-form-urlencoded");
  ASSERT_TRUE(form);
  EXPECT_EQ(form->status, 413);
  EXPECT_NE(form->body.find("application/json"), std::string::npos) << form->body;
  // Over --max-body-bytes too: that limit is the one to name.
  form = ts.client().Post("/v1/completions", {{"Authorization", "Bearer secret"}},
                          std::string(100 * 1024, 'a'), "application/x-www-form-urlencoded");
  ASSERT_TRUE(form);
  EXPECT_EQ(form->status, 413);
  EXPECT_NE(form->body.find("larger than 65536 bytes"), std::string::npos) << form->body;
  // Still serving: a good completion and a good chat completion.
  auto [status, body] =
      post(ts, "/v1/completions", R"({"prompt": "", "max_tokens": 5, "temperature": 0})");
  EXPECT_EQ(status, 200) << body.dump();
  EXPECT_EQ(body["choices"][0]["token_ids"].size(), 5u) << body.dump();
  EXPECT_EQ(body["usage"]["total_tokens"], 6);
  auto [chat_status, chat] =
      post(ts, "/v1/chat/completions",
           R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})");
  EXPECT_EQ(chat_status, 200) << chat.dump();
  EXPECT_EQ(chat["object"], "chat.completion");
  EXPECT_EQ(chat["choices"][0]["message"]["role"], "assistant");
  auto models = ts.client().Get("/v1/models", {{"Authorization", "Bearer secret"}});
  ASSERT_TRUE(models);
  EXPECT_EQ(Json::parse(models->body)["data"][0]["id"], "test-model");
  EXPECT_EQ(ts.client().Get("/health")->status, 200) << "/health needs no key";
}

// A prompt sent again finds its two full blocks in the prefix cache: usage says so (OpenAI's
// prompt_tokens_details.cached_tokens), /metrics counts it, and the completion is the same.
TEST(Server, ARepeatedPromptReportsItsCachedTokens) {
  STORIES_OR_SKIP(s);
  TestServer ts(*s->model, s->tokenizer, {});
  Json prompt = Json::array({1});
  for (int i = 0; i < 39; ++i) prompt.push_back(300 + 5 * i);  // 40 tokens: 2 full blocks + 8
  const std::string body = Json{{"prompt", prompt}, {"max_tokens", 6}, {"temperature", 0}}.dump();
  auto [first_status, first] = post(ts, "/v1/completions", body);
  auto [second_status, second] = post(ts, "/v1/completions", body);
  ASSERT_EQ(first_status, 200) << first.dump();
  ASSERT_EQ(second_status, 200) << second.dump();
  EXPECT_EQ(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_EQ(second["usage"]["prompt_tokens_details"]["cached_tokens"], 32);
  EXPECT_EQ(second["choices"][0]["token_ids"], first["choices"][0]["token_ids"]);
  EXPECT_EQ(ts.metric("tessera_prefix_cache_hits_total"), 32);
  EXPECT_EQ(ts.metric("tessera_prefix_cache_queries_total"), 80);
}

// echo with logprobs (how lm-evaluation-harness scores text over the completions API): the
// prompt leads the text and the logprobs, its first token's logprob null and the others the
// model's log_softmax at the position before (the model's own forward is the oracle).
TEST(Server, EchoWithLogprobsScoresEveryPromptToken) {
  STORIES_OR_SKIP(s);
  TestServer ts(*s->model, s->tokenizer, {});
  const std::vector<int32_t> prompt = {1, 461, 430, 309, 295, 446, 306, 473, 283, 330};
  const int64_t P = static_cast<int64_t>(prompt.size());
  auto [status, body] = post(ts, "/v1/completions",
                             Json{{"prompt", {prompt}},
                                  {"max_tokens", 1},
                                  {"temperature", 0},
                                  {"logprobs", 1},
                                  {"echo", true}}
                                 .dump());
  ASSERT_EQ(status, 200) << body.dump();
  const Json& choice = body["choices"][0];
  const std::string prompt_text = s->tokenizer->decode(prompt);
  EXPECT_EQ(choice["text"].get<std::string>().substr(0, prompt_text.size()), prompt_text);
  const Json& lp = choice["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), static_cast<size_t>(P + 1)) << lp.dump();
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  EXPECT_EQ(lp["text_offset"][0], 0);
  const Tensor ids = tensor(std::vector<int64_t>(prompt.begin(), prompt.end())).unsqueeze(0);
  const Tensor want =
      log_softmax(s->model->forward(ids).squeeze(0), -1).to(kFloat64).detach().contiguous();
  const int64_t V = s->model->vocab_size();
  for (int64_t i = 1; i < P; ++i) {
    EXPECT_NEAR(lp["token_logprobs"][i].get<double>(),
                want.data_ptr<double>()[(i - 1) * V + prompt[i]], 1e-4)
        << i;
    EXPECT_EQ(lp["top_logprobs"][i].size(), 1u);
    EXPECT_GT(lp["text_offset"][i].get<int64_t>(), lp["text_offset"][i - 1].get<int64_t>() - 1);
  }
  EXPECT_EQ(body["usage"]["prompt_tokens"], P);
  EXPECT_EQ(body["usage"]["completion_tokens"], 1);

  // Without logprobs only the text; streamed it is refused by name.
  auto [plain_status, plain] = post(
      ts, "/v1/completions",
      Json{{"prompt", "Once upon"}, {"max_tokens", 2}, {"temperature", 0}, {"echo", true}}.dump());
  ASSERT_EQ(plain_status, 200) << plain.dump();
  EXPECT_EQ(plain["choices"][0]["text"].get<std::string>().rfind("Once upon", 0), 0u);
  EXPECT_TRUE(plain["choices"][0]["logprobs"].is_null());
  auto [streamed_status, streamed] =
      post(ts, "/v1/completions", R"({"prompt": "a", "echo": true, "stream": true})");
  EXPECT_EQ(streamed_status, 400);
  EXPECT_EQ(streamed["error"]["param"], "echo") << streamed.dump();
}

// vLLM's request extras: continue_final_message (with add_generation_prompt false; also on
// /tokenize), truncate_prompt_tokens, min_tokens and include_stop_str_in_output.
TEST(Server, VllmExtrasContinueTruncateMinTokensAndIncludedStops) {
  STORIES_OR_SKIP(s);
  TestServer ts(*s->model, s->tokenizer, {});
  const Json chat = Json::array(
      {{{"role", "user"}, {"content", "Hi"}}, {{"role", "assistant"}, {"content", "Once"}}});
  auto tokens = [&](const Json& extra) {
    Json body = {{"messages", chat}};
    body.update(extra);
    auto [status, got] = post(ts, "/tokenize", body.dump());
    EXPECT_EQ(status, 200) << got.dump();
    return got["tokens"].get<std::vector<int32_t>>();
  };
  // The plain template: "<role>: <content>\n" per message, "assistant:" to open a reply.
  EXPECT_EQ(tokens({{"add_generation_prompt", false}}),
            s->tokenizer->encode("user: Hi\nassistant: Once\n", true));
  const std::vector<int32_t> continued =
      tokens({{"add_generation_prompt", false}, {"continue_final_message", true}});
  EXPECT_EQ(continued, s->tokenizer->encode("user: Hi\nassistant: Once", true));
  auto [chat_status, reply] = post(ts, "/v1/chat/completions",
                                   Json{{"messages", chat},
                                        {"add_generation_prompt", false},
                                        {"continue_final_message", true},
                                        {"max_tokens", 2}}
                                       .dump());
  ASSERT_EQ(chat_status, 200) << reply.dump();
  EXPECT_EQ(reply["usage"]["prompt_tokens"], continued.size());
  auto [both_status, both] =
      post(ts, "/v1/chat/completions",
           Json{{"messages", chat}, {"continue_final_message", true}}.dump());
  EXPECT_EQ(both_status, 400);
  EXPECT_EQ(both["error"]["param"], "continue_final_message") << both.dump();
  auto [user_status, user_last] = post(ts, "/v1/chat/completions",
                                       Json{{"messages", Json::array({chat[0]})},
                                            {"add_generation_prompt", false},
                                            {"continue_final_message", true}}
                                           .dump());
  EXPECT_EQ(user_status, 400) << user_last.dump();

  // truncate_prompt_tokens keeps the prompt's last tokens: the same reply as sending them.
  const std::vector<int32_t> prompt = {1, 461, 430, 309, 295, 446, 306, 473, 283, 330};
  auto complete = [&](const Json& extra) {
    Json body = {{"max_tokens", 12}, {"temperature", 0}};
    body.update(extra);
    auto [status, got] = post(ts, "/v1/completions", body.dump());
    EXPECT_EQ(status, 200) << got.dump();
    return got;
  };
  const Json cut = complete({{"prompt", prompt}, {"truncate_prompt_tokens", 4}});
  EXPECT_EQ(cut["usage"]["prompt_tokens"], 4);
  EXPECT_EQ(cut["choices"][0]["token_ids"],
            complete({{"prompt", std::vector<int32_t>(prompt.end() - 4,
                                                      prompt.end())}})["choices"][0]["token_ids"]);

  // min_tokens: a stop token cannot come before it.
  const Json free = complete({{"prompt", prompt}, {"ignore_eos", true}});
  const int32_t first = free["choices"][0]["token_ids"][0];
  const Json stopped = complete({{"prompt", prompt}, {"stop_token_ids", {first}}});
  EXPECT_EQ(stopped["usage"]["completion_tokens"], 1);
  const Json held = complete({{"prompt", prompt}, {"stop_token_ids", {first}}, {"min_tokens", 3}});
  EXPECT_GE(held["usage"]["completion_tokens"].get<int64_t>(), 4) << held.dump();
  for (int i = 0; i < 3; ++i) EXPECT_NE(held["choices"][0]["token_ids"][i], first);
  auto [bad_status, bad_min] = post(
      ts, "/v1/completions", Json{{"prompt", prompt}, {"max_tokens", 2}, {"min_tokens", 3}}.dump());
  EXPECT_EQ(bad_status, 400);
  EXPECT_EQ(bad_min["error"]["param"], "min_tokens") << bad_min.dump();

  // include_stop_str_in_output: the text ends with the stop string.
  const std::string text = free["choices"][0]["text"];
  ASSERT_GT(text.size(), 8u) << text;
  const std::string stop = text.substr(5, 3);
  const Json kept = complete({{"prompt", prompt},
                              {"ignore_eos", true},
                              {"stop", stop},
                              {"include_stop_str_in_output", true}});
  EXPECT_EQ(kept["choices"][0]["text"], text.substr(0, text.find(stop) + 3));
  EXPECT_EQ(kept["choices"][0]["finish_reason"], "stop");
}

// A model slow enough that a long request is still running when its client leaves.
std::unique_ptr<models::Llama> slow_model() {
  models::LlamaConfig c;
  c.vocab_size = 512;
  c.dim = 256;
  c.n_layers = 4;
  c.n_heads = 8;
  c.n_kv_heads = 4;
  c.hidden_dim = 512;
  c.max_seq_len = 4096;
  manual_seed(1);
  return std::make_unique<models::Llama>(c);
}

constexpr int64_t kLongRequestTokens = 4000;
const Json kLongStream = {
    {"prompt", "Once"}, {"max_tokens", kLongRequestTokens}, {"ignore_eos", true}, {"stream", true}};

TEST(Server, ClientDisconnectingMidStreamFreesItsBlocks) {
  STORIES_OR_SKIP(s);
  std::unique_ptr<models::Llama> model = slow_model();
  TestServer ts(*model, s->tokenizer, {});
  const int64_t max_tokens = kLongRequestTokens;
  httplib::Client client = ts.client();
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = kLongStream.dump();
  int events = 0;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    for (size_t i = 0; i + 1 < n; ++i) events += data[i] == '\n' && data[i + 1] == '\n';
    return events < 3;  // hang up after a few tokens
  };
  client.send(req);
  EXPECT_GE(events, 3);
  // The server notices at its next write and aborts the request.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (ts.metric("tessera_requests_running") != 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(ts.metric("tessera_requests_running"), 0);
  EXPECT_EQ(ts.metric("tessera_kv_blocks_used"), 0);
  EXPECT_LT(ts.metric("tessera_generation_tokens_total"), max_tokens)
      << "the request was aborted, not run to its end";
}

TEST(Server, StopWithAStreamOpenAbortsItsRequestInTheEngine) {
  STORIES_OR_SKIP(s);
  std::unique_ptr<models::Llama> model = slow_model();
  auto ts = std::make_unique<TestServer>(*model, s->tokenizer, infer::EngineConfig{});
  std::shared_ptr<infer::AsyncEngine> engine = ts->engine;
  std::atomic<int> events{0};
  testing::StreamResult result;
  std::thread client([&] {
    testing::StreamOptions opt;
    opt.on_event = [&] { ++events; };
    result = testing::stream_completion(ts->port, kLongStream, opt);
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (events < 3 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_GE(events, 3) << result.error;
  // httplib ends a stream cut by stop() as if it had succeeded: the request must still be
  // aborted before run() returns, not left generating for an engine that outlives the server.
  ts->stop();
  const infer::EngineStats stats = engine->stats();
  EXPECT_EQ(stats.num_running + stats.num_waiting, 0);
  EXPECT_EQ(stats.blocks_used, 0);
  client.join();
  EXPECT_FALSE(result.done) << "the stream was cut, it cannot have finished";
  ts.reset();
  // The engine lives on: a request straight to it is served (no callback of the gone server runs).
  std::promise<infer::FinishReason> finished;
  infer::GenerationParams p;
  p.stopping.max_tokens = 2;
  engine->submit({1}, p, [&](const infer::RequestOutput& out) {
    if (out.finished()) finished.set_value(out.finish_reason);
    return true;
  });
  EXPECT_EQ(finished.get_future().get(), infer::FinishReason::Length);
}

TEST(Server, StopAtAnyPointOfStartupEndsRun) {
  STORIES_OR_SKIP(s);
  auto engine = std::make_shared<infer::AsyncEngine>(
      std::make_unique<infer::Engine>(*s->model, infer::EngineConfig{}, s->tokenizer));
  serve::ServerConfig sc;
  sc.port = 0;
  sc.model_names = {"test-model"};
  // A signal may arrive before run(), as it starts listening, or once it serves: run() returns.
  for (int i = 0; i < 12; ++i) {
    serve::Server server(engine, sc);
    server.bind();
    if (i == 0) server.stop();
    std::thread runner([&] { server.run(); });
    std::this_thread::sleep_for(std::chrono::microseconds(i * i * 100));
    server.stop();
    runner.join();
  }
}

// A request the engine failed was answered 200 with finish_reason "abort": it is a 500 (vLLM's),
// and a stream gets an error event then [DONE]; the server serves on.
TEST(Server, AnEngineFailureIsA500OrAStreamErrorEvent) {
  STORIES_OR_SKIP(s);
  auto tokenizer = std::make_shared<testing::FailingTokenizer>(s->tokenizer);
  TestServer ts(*s->model, tokenizer, {});
  const std::string body = R"({"prompt": [1, 5], "max_tokens": 4, "temperature": 0})";
  tokenizer->armed = true;
  auto [status, error] = post(ts, "/v1/completions", body);
  EXPECT_EQ(status, 500) << error.dump();
  EXPECT_EQ(error["error"].value("type", ""), "server_error");
  EXPECT_NE(error["error"].value("message", "").find("armed to fail"), std::string::npos);
  Json stream = Json::parse(body);
  stream["stream"] = true;
  const StreamResult r = testing::stream_completion(ts.port, stream);
  EXPECT_EQ(r.status, 200);
  EXPECT_NE(r.api_error.find("armed to fail"), std::string::npos) << r.api_error;
  EXPECT_TRUE(r.done);
  EXPECT_TRUE(r.tokens.empty());
  tokenizer->armed = false;
  auto [ok, answer] = post(ts, "/v1/completions", body);
  EXPECT_EQ(ok, 200) << answer.dump();
  EXPECT_EQ(answer["choices"][0]["token_ids"].size(), 4u);
}

}  // namespace
}  // namespace tessera
