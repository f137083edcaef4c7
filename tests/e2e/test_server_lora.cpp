// Serving LoRA adapters beside the base model (vLLM's --lora-modules): /v1/models lists them
// with the base as parent, a request naming one runs through it (its greedy tokens are the
// engine's for that adapter alone, and differ from the base's), concurrent streams of the base
// and two adapters batch together and each equals its request alone, the prefix cache never
// serves one adapter's blocks to another, and embeddings of an adapter are refused.
#include <gtest/gtest.h>

#include <future>
#include <nlohmann/json.hpp>

#include "tessera/tessera.h"
#include "testing/lora_adapters.h"
#include "testing/server_harness.h"

namespace tessera {
namespace {

using Json = nlohmann::json;
using testing::TestServer;

TEST(ServerLora, AdaptersAreListedRoutedByNameAndBatchedWithTheBase) {
  STORIES_OR_SKIP(s);
  const std::vector<nn::LoraAdapter> loras = {
      testing::random_lora_adapter(*s->model, {"q_proj", "v_proj"}, 4, 1, 0.3),
      testing::random_lora_adapter(*s->model, {"all-linear"}, 8, 2, 0.3)};
  serve::ServerConfig sc;
  sc.lora_modules = {{"tales", "/adapters/tales", 1}, {"poems", "/adapters/poems", 2}};
  TestServer ts(*s->model, s->tokenizer, {.max_num_seqs = 16}, sc, loras);

  auto res = ts.client().Get("/v1/models");
  ASSERT_TRUE(res && res->status == 200);
  const Json models = Json::parse(res->body);
  ASSERT_EQ(models["data"].size(), 3u);
  EXPECT_EQ(models["data"][0]["id"], "test-model");
  EXPECT_TRUE(models["data"][0]["parent"].is_null());
  EXPECT_EQ(models["data"][1]["id"], "tales");
  EXPECT_EQ(models["data"][1]["parent"], "test-model");
  EXPECT_EQ(models["data"][1]["root"], "/adapters/tales");
  EXPECT_EQ(models["data"][2]["id"], "poems");

  // Streams of the three models at once, prompts sharing full blocks (the prefix cache must keep
  // each model's apart), each equal to its request alone.
  const std::vector<int32_t> prompt = {1,   403, 407, 429, 381, 408, 410, 384, 260, 272, 383,
                                       391, 403, 407, 429, 381, 408, 410, 384, 260, 272, 383};
  const std::vector<std::string> names = {"test-model", "tales", "poems"};
  constexpr int64_t kTokens = 24;
  std::vector<std::future<testing::StreamResult>> streams;
  for (int i = 0; i < 12; ++i)
    streams.push_back(std::async(std::launch::async, [&, i] {
      return testing::stream_completion(ts.port, {{"model", names[i % 3]},
                                                  {"prompt", prompt},
                                                  {"max_tokens", kTokens},
                                                  {"temperature", 0},
                                                  {"ignore_eos", true},
                                                  {"stream", true}});
    }));
  std::vector<std::vector<int32_t>> want;
  for (int32_t id = 0; id < 3; ++id)
    want.push_back(testing::greedy_alone(*s->model, loras, prompt, id, kTokens, s->tokenizer));
  EXPECT_NE(want[1], want[0]) << "an adapter changes the text";
  EXPECT_NE(want[2], want[0]);
  for (int i = 0; i < 12; ++i) {
    const testing::StreamResult r = streams[i].get();
    EXPECT_EQ(r.status, 200) << r.error;
    EXPECT_EQ(r.tokens, want[i % 3]) << "stream " << i << " of " << names[i % 3];
  }
  // A non-streamed request by name; an unknown name is 404; embeddings are the base model's.
  auto [status, body] = testing::post_json(
      ts, "/v1/completions",
      {{"model", "poems"}, {"prompt", prompt}, {"max_tokens", 5}, {"temperature", 0}});
  EXPECT_EQ(status, 200);
  EXPECT_EQ(body["model"], "poems");
  auto [missing, err] =
      testing::post_json(ts, "/v1/completions", {{"model", "sonnets"}, {"prompt", "a"}});
  EXPECT_EQ(missing, 404);
  EXPECT_EQ(err["error"]["code"], "model_not_found");
  auto [embed, embed_err] =
      testing::post_json(ts, "/v1/embeddings", {{"model", "tales"}, {"input", "once"}});
  EXPECT_EQ(embed, 400);
  EXPECT_NE(embed_err.dump().find("LoRA adapter"), std::string::npos) << embed_err.dump();
  EXPECT_EQ(ts.metric("tessera_kv_blocks_used"), 0);
}

}  // namespace
}  // namespace tessera
