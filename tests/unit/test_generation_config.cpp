// generation_config.json: read as vLLM reads it (eos_token_id as an id or a list, the sampling
// keys it takes, do_sample and the rest ignored), refused with the file's name when malformed,
// and picked up from a Hugging Face model folder by llm::load_model.
#include <gtest/gtest.h>

#include <fstream>

#include "tessera/infer/generation_config.h"
#include "tessera/llm/model_files.h"
#include "testing/expect_error.h"
#include "testing/small_models.h"
#include "testing/temp_dir.h"

namespace tessera {
namespace {

void write(const testing::TempDir& dir, const std::string& json) {
  std::ofstream(dir.file("generation_config.json")) << json;
}

TEST(GenerationConfig, ReadsTheKeysVllmTakes) {
  testing::TempDir dir;
  EXPECT_TRUE(infer::read_generation_config(dir.path).eos_token_ids.empty()) << "no file";
  EXPECT_EQ(infer::read_generation_config(dir.path).describe_sampling(), "");
  // Llama 3.1 8B Instruct's.
  write(dir, R"({"bos_token_id": 128000, "do_sample": true,
                 "eos_token_id": [128001, 128008, 128009], "temperature": 0.6, "top_p": 0.9,
                 "transformers_version": "4.42.3"})");
  infer::GenerationConfig c = infer::read_generation_config(dir.path);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{128001, 128008, 128009}));
  EXPECT_EQ(c.temperature, 0.6);
  EXPECT_EQ(c.top_p, 0.9);
  EXPECT_FALSE(c.top_k || c.min_p || c.repetition_penalty || c.max_new_tokens);
  EXPECT_EQ(c.describe_sampling(), "temperature=0.6, top_p=0.9");
  // Qwen2.5 7B Instruct's, with one eos id and max_new_tokens.
  write(dir, R"({"eos_token_id": 151645, "repetition_penalty": 1.05, "temperature": 0.7,
                 "top_p": 0.8, "top_k": 20, "min_p": null, "max_new_tokens": 512})");
  c = infer::read_generation_config(dir.path);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{151645}));
  EXPECT_EQ(c.top_k, 20);
  EXPECT_FALSE(c.min_p.has_value());
  EXPECT_EQ(c.describe_sampling(),
            "temperature=0.7, top_p=0.8, top_k=20, repetition_penalty=1.05, max_new_tokens=512");
}

TEST(GenerationConfig, MalformedFilesAreTypedErrors) {
  testing::TempDir dir;
  for (const auto& [json, text] : std::vector<std::pair<std::string, std::string>>{
           {"{not json", "expected a JSON object in"},
           {"[1]", "expected a JSON object in"},
           {R"({"eos_token_id": [1, -2]})", "expected eos_token_id to be token ids"},
           {R"({"eos_token_id": "</s>"})", "expected eos_token_id to be token ids"},
           {R"({"temperature": -1})", "expected temperature in [0, 100]"},
           {R"({"top_p": 0})", "expected top_p in (0, 1]"},
           {R"({"top_k": 2.5})", "expected top_k to be an integer >= 0"},
           {R"({"max_new_tokens": 0})", "expected max_new_tokens to be an integer >= 1"},
       }) {
    write(dir, json);
    EXPECT_TESSERA_ERROR(infer::read_generation_config(dir.path), ValueError, text);
    EXPECT_TESSERA_ERROR(infer::read_generation_config(dir.path), ValueError,
                         "generation_config.json");
  }
}

TEST(GenerationConfig, AModelFolderLoadsWithIt) {
  testing::TempDir dir;
  const std::string weights = testing::save_hf_llama(dir.path, 32, 16);
  EXPECT_TRUE(llm::load_model(weights).generation.eos_token_ids.empty());
  write(dir, R"({"eos_token_id": [2, 7], "temperature": 0.5})");
  const llm::LoadedModel loaded = llm::load_model(weights);
  EXPECT_EQ(loaded.generation.eos_token_ids, (std::vector<int32_t>{2, 7}));
  EXPECT_EQ(loaded.generation.temperature, 0.5);
}

}  // namespace
}  // namespace tessera
