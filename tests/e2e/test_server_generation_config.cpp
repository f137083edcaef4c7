// The model's generation_config.json through the server (ServerConfig::generation_config, what
// `tessera serve --generation-config auto` reads), on stories260K: its sampling settings are the
// defaults of requests that set none (temperature 0 here: every request without one is the
// greedy output), a request's own values win, its eos_token_id ends a reply as the tokenizer's
// EOS does (not with ignore_eos), and max_new_tokens is the default max_tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "testing/server_harness.h"

namespace tessera {
namespace {

using Json = nlohmann::json;
using testing::post_json;
using testing::TestServer;

std::vector<int32_t> ids(const Json& reply) {
  return reply["choices"][0]["token_ids"].get<std::vector<int32_t>>();
}

TEST(ServerGenerationConfig, TheModelsDefaultsAndEndTokensApplyToRequestsThatSetNone) {
  STORIES_OR_SKIP(s);
  const Json greedy_request = {
      {"prompt", "Once upon a time"}, {"max_tokens", 24}, {"temperature", 0}};
  std::vector<int32_t> greedy;
  {
    TestServer plain(*s->model, s->tokenizer, {.max_num_seqs = 4});
    auto [status, reply] = post_json(plain, "/v1/completions", greedy_request);
    ASSERT_EQ(status, 200) << reply.dump();
    greedy = ids(reply);
    ASSERT_EQ(greedy.size(), 24u) << "the greedy story ended early";
  }
  // The end token: the first of the greedy output's tokens after the third not seen before it.
  size_t k = 3;
  while (k < greedy.size() &&
         std::find(greedy.begin(), greedy.begin() + static_cast<std::ptrdiff_t>(k), greedy[k]) !=
             greedy.begin() + static_cast<std::ptrdiff_t>(k))
    ++k;
  ASSERT_LT(k, greedy.size());

  infer::GenerationConfig model;
  model.temperature = 0.0;
  model.top_p = 0.5;
  model.eos_token_ids = {greedy[k], 1 << 30};  // an id past the vocabulary is never sampled
  model.max_new_tokens = 20;
  TestServer ts(*s->model, s->tokenizer, {.max_num_seqs = 4}, {.generation_config = model});

  Json no_sampling = greedy_request;
  no_sampling.erase("temperature");
  auto [status, ended] = post_json(ts, "/v1/completions", no_sampling);
  ASSERT_EQ(status, 200) << ended.dump();
  EXPECT_EQ(ended["choices"][0]["finish_reason"], "stop");
  const std::vector<int32_t> prefix(greedy.begin(), greedy.begin() + k + 1);
  EXPECT_EQ(ids(ended), prefix) << "greedy by default, ended by the model's end token";

  Json through = no_sampling;
  through["ignore_eos"] = true;
  auto [status2, whole] = post_json(ts, "/v1/completions", through);
  ASSERT_EQ(status2, 200) << whole.dump();
  EXPECT_EQ(ids(whole), greedy) << "ignore_eos passes the model's end token too";

  through.erase("max_tokens");
  auto [status3, capped] = post_json(ts, "/v1/completions", through);
  ASSERT_EQ(status3, 200) << capped.dump();
  EXPECT_EQ(ids(capped), std::vector<int32_t>(greedy.begin(), greedy.begin() + 16))
      << "max_new_tokens 20 leaves completions' default of 16";
  auto [status4, chat] =
      post_json(ts, "/v1/chat/completions",
                {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"ignore_eos", true}});
  ASSERT_EQ(status4, 200) << chat.dump();
  EXPECT_EQ(chat["usage"]["completion_tokens"], 20) << "chat's default is max_new_tokens";

  // A request's own temperature wins: sampled at 1.5 with top_p 1, the story leaves the greedy
  // path within 24 tokens for some seed.
  bool differs = false;
  for (int seed = 0; seed < 4 && !differs; ++seed) {
    Json sampled = greedy_request;
    sampled["temperature"] = 1.5;
    sampled["top_p"] = 1.0;
    sampled["seed"] = seed;
    sampled["ignore_eos"] = true;
    auto [code, reply] = post_json(ts, "/v1/completions", sampled);
    ASSERT_EQ(code, 200) << reply.dump();
    differs = ids(reply) != greedy;
  }
  EXPECT_TRUE(differs);
}

}  // namespace
}  // namespace tessera
