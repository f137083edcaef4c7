// llm::SamplingParams' mapping onto the engine's params, the plain chat template, a model
// folder's chat template as the server applies it, and
// llm::LLM's RequestStream on stories260K: close() ends on_output calls and frees the blocks, a
// refused sequence leaves nothing submitted, generate equals submit + take, and prompt logprobs
// come with a request's first sequence.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <thread>

#include "tessera/core/error.h"
#include "tessera/llm/llm.h"
#include "tessera/tokenizers/chat_template.h"
#include "tessera/tokenizers/llama2c_tokenizer.h"
#include "testing/expect_error.h"
#include "testing/failing_tokenizer.h"
#include "testing/shared_data.h"
#include "testing/small_models.h"
#include "testing/temp_dir.h"

namespace tessera::llm {
namespace {

TEST(LLMSamplingParams, MapsOntoTheEnginesParams) {
  SamplingParams p;
  p.top_k = -1;
  p.seed = 10;
  p.stop = {"x"};
  p.stop_token_ids = {1};
  const infer::GenerationParams second = p.generation_params(nullptr, 1);
  EXPECT_EQ(second.sampling.top_k, 0);  // -1: every token
  EXPECT_EQ(second.sampling.seed, std::optional<uint64_t>(11));
  EXPECT_EQ(second.stopping.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(second.logprobs, 0);  // the sampled tokens' logprobs, for cumulative_logprob
  p.seed.reset();
  EXPECT_FALSE(p.generation_params(nullptr, 3).sampling.seed.has_value());
  p.logprobs = 5;
  EXPECT_EQ(p.generation_params(nullptr).logprobs, 5);
  EXPECT_EQ(p.generation_params(nullptr).prompt_logprobs, -1);  // unset: none
  p.prompt_logprobs = 2;
  EXPECT_EQ(p.generation_params(nullptr, 0).prompt_logprobs, 2);
  EXPECT_EQ(p.generation_params(nullptr, 1).prompt_logprobs, -1)
      << "the request's first sequence alone computes the shared prompt's logprobs";

  p.n = 0;
  EXPECT_THROW(
      {
        try {
          p.validate();
        } catch (const ValueError& e) {
          EXPECT_NE(std::string(e.what()).find("[SamplingParams] expected n >= 1"),
                    std::string::npos);
          throw;
        }
      },
      ValueError);
}

TEST(LLMChatTemplate, PlainTemplateAndRoles) {
  const std::vector<tokenizers::ChatMessage> messages{{"system", "Be brief."}, {"user", "Hi"}};
  EXPECT_EQ(tokenizers::plain_chat_prompt(messages), "system: Be brief.\nuser: Hi\nassistant:");
  EXPECT_TRUE(tokenizers::is_chat_role("tool"));
  EXPECT_FALSE(tokenizers::is_chat_role("narrator"));
  EXPECT_THROW(tokenizers::plain_chat_prompt({}), ValueError);
  const std::vector<tokenizers::ChatMessage> bad{{"narrator", "x"}};
  EXPECT_THROW(tokenizers::plain_chat_prompt(bad), ValueError);
}

// A model folder's tokenizer_config.json template makes LLM::encode_chat's prompts as it makes
// the server's: its BOS text becomes the BOS id, the request's options reach it, and what the
// server refuses with a 400 is a ValueError naming LLM.chat.
TEST(LLMChatTemplate, TheModelFoldersTemplateMakesThePromptAsTheServers) {
  TESSERA_SHARED_DATA_OR_SKIP(tokenizer, "stories260K_idtok.bin");
  testing::TempDir dir;
  const std::string weights = testing::save_hf_llama(dir.path, 512);
  std::ofstream(dir.file("tokenizer_config.json")) << R"({"bos_token": "<s>", "chat_template":
      "{{ bos_token }}{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}[assistant]{% if brief %} briefly{% endif %}{% endif %}"})";
  LLMConfig config;
  config.model = dir.path.string();
  config.tokenizer = tokenizer;
  LLM llm(config);
  const auto with_bos = [&](const std::string& text) {
    std::vector<int32_t> ids = llm.tokenizer().encode(text);
    ids.insert(ids.begin(), *llm.tokenizer().bos_id());
    return ids;
  };
  const std::string user = R"("messages": [{"role": "user", "content": "A cat"}])";
  EXPECT_EQ(llm.encode_chat("{" + user + "}"), with_bos("[user] A cat\n[assistant]"));
  EXPECT_EQ(llm.encode_chat("{" + user + R"(, "chat_template_kwargs": {"brief": true}})"),
            with_bos("[user] A cat\n[assistant] briefly"));
  const std::string reply = R"("messages": [{"role": "user", "content": "A cat"},)"
                            R"({"role": "assistant", "content": "It sat"}])";
  EXPECT_EQ(llm.encode_chat("{" + reply +
                            R"(, "add_generation_prompt": false, "continue_final_message": true})"),
            with_bos("[user] A cat\n[assistant] It sat"));
  EXPECT_TESSERA_ERROR(llm.encode_chat("{" + reply + R"(, "continue_final_message": true})"),
                       ValueError, "[LLM.chat] 'continue_final_message' needs");
  EXPECT_TESSERA_ERROR(llm.encode_chat(R"({"messages": []})"), ValueError,
                       "[LLM.chat] 'messages' must be a non-empty array");
  EXPECT_TESSERA_ERROR(llm.encode_chat("[]"), ValueError, "[LLM.chat] expected a JSON object");

  // Given the weights file, the template is still its folder's, as `tessera serve` finds it.
  config.model = weights;
  EXPECT_EQ(LLM(config).encode_chat("{" + user + "}"), with_bos("[user] A cat\n[assistant]"));
}

TEST(LLMStream, CloseEndsCallbacksAndFreesBlocksAndGenerateEqualsTheStream) {
  TESSERA_SHARED_DATA_OR_SKIP(model, "stories260K.bin");
  TESSERA_SHARED_DATA_OR_SKIP(tok, "stories260K_idtok.bin");
  LLM llm({.model = model, .tokenizer = tok});
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 400;
  p.ignore_eos = true;

  std::atomic<int> calls{0};
  auto stream = llm.submit({1, 461, 430}, p, [&] { ++calls; });
  while (calls < 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_GT(llm.stats().blocks_used, 0);
  stream->close();
  const int after_close = calls;
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(calls, after_close);  // no call after close()
  EXPECT_TRUE(stream->finished());
  EXPECT_EQ(llm.stats().blocks_used, 0);
  EXPECT_EQ(llm.stats().num_running, 0);
  std::vector<int32_t> streamed;
  infer::FinishReason last = infer::FinishReason::None;
  for (const RequestStream::Delta& d : stream->take()) {
    streamed.insert(streamed.end(), d.output.new_tokens.begin(), d.output.new_tokens.end());
    last = d.output.finish_reason;
  }
  EXPECT_EQ(last, infer::FinishReason::Abort);

  // The tokens streamed before the abort start the full greedy generation.
  const std::vector<std::vector<int32_t>> prompts{{1, 461, 430}};
  const std::vector<SamplingParams> params{p};
  const auto full = llm.generate(prompts, params);
  ASSERT_EQ(full.size(), 1u);
  ASSERT_EQ(full[0].size(), 1u);
  EXPECT_EQ(full[0][0].token_ids.size(), 400u);
  EXPECT_EQ(full[0][0].finish_reason, infer::FinishReason::Length);
  ASSERT_LE(streamed.size(), full[0][0].token_ids.size());
  EXPECT_TRUE(std::equal(streamed.begin(), streamed.end(), full[0][0].token_ids.begin()));

  // A prompt the engine refuses (a token outside the vocabulary) leaves nothing submitted.
  p.n = 3;
  EXPECT_THROW(llm.submit({1, 100000}, p), ValueError);
  EXPECT_EQ(llm.stats().num_waiting + llm.stats().num_running, 0);
}

// A sequence the engine failed (its detokenising threw) ended like a client's abort: generate
// now says why, and the engine serves on.
TEST(LLMGenerate, ASequenceTheEngineFailedCarriesItsError) {
  TESSERA_SHARED_DATA_OR_SKIP(model, "stories260K.bin");
  TESSERA_SHARED_DATA_OR_SKIP(tok, "stories260K_idtok.bin");
  auto failing = std::make_shared<testing::FailingTokenizer>(
      std::make_shared<tokenizers::Llama2cTokenizer>(tok));
  LLM llm({.model = model, .tokenizer_object = failing});
  SamplingParams p;
  p.max_tokens = 4;
  p.n = 2;
  const std::vector<std::vector<int32_t>> prompts{{1, 461, 430}};
  const std::vector<SamplingParams> params{p};
  failing->armed = true;
  const auto failed = llm.generate(prompts, params);
  ASSERT_EQ(failed[0].size(), 2u);
  for (const Sequence& seq : failed[0]) {
    EXPECT_EQ(seq.finish_reason, infer::FinishReason::Abort);
    EXPECT_NE(seq.error.find("[FailingTokenizer] armed to fail"), std::string::npos) << seq.error;
  }
  failing->armed = false;
  const auto served = llm.generate(prompts, params);
  for (const Sequence& seq : served[0]) {
    EXPECT_EQ(seq.finish_reason, infer::FinishReason::Length);
    EXPECT_EQ(seq.token_ids.size(), 4u);
    EXPECT_TRUE(seq.error.empty()) << seq.error;
  }
}

// prompt_logprobs reach the request's first sequence, one per prompt token after the first
// (their values are checked against a numpy model in python/tests/test_llm.py).
TEST(LLMGenerate, PromptLogprobsComeWithTheFirstSequence) {
  TESSERA_SHARED_DATA_OR_SKIP(model, "stories260K.bin");
  TESSERA_SHARED_DATA_OR_SKIP(tok, "stories260K_idtok.bin");
  LLM llm({.model = model, .tokenizer = tok});
  SamplingParams p;
  p.max_tokens = 2;
  p.n = 2;
  p.prompt_logprobs = 1;
  const std::vector<std::vector<int32_t>> prompts{{1, 461, 430, 309}};
  const std::vector<SamplingParams> params{p};
  const auto got = llm.generate(prompts, params);
  ASSERT_EQ(got[0].size(), 2u);
  ASSERT_EQ(got[0][0].prompt_logprobs.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(got[0][0].prompt_logprobs[i].token, prompts[0][i + 1]);
    EXPECT_LT(got[0][0].prompt_logprobs[i].logprob, 0.0f);
    EXPECT_EQ(got[0][0].prompt_logprobs[i].top.size(), 1u);
  }
  EXPECT_TRUE(got[0][1].prompt_logprobs.empty());
}

}  // namespace
}  // namespace tessera::llm
