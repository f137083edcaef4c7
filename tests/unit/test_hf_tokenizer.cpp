// HuggingFaceTokenizer on small hand-written tokenizer.json files: what each BPE option does
// (ignore_merges, byte_fallback, unk_token with fuse_unk), added tokens with lstrip / rstrip,
// BOS / EOS from the post-processor and tokenizer_config.json, streaming decode of a
// SentencePiece-style vocabulary, make_tokenizer finding the file, and typed errors for what it
// does not implement. (Real vocabularies against tokenizers.js: tests/e2e/test_hf_tokenizer_vs_js.)
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "tessera/core/error.h"
#include "tessera/llm/model_files.h"
#include "tessera/tokenizers/hf_tokenizer.h"
#include "testing/expect_error.h"
#include "testing/small_models.h"
#include "testing/temp_dir.h"

namespace tessera::tokenizers {
namespace {

using Json = nlohmann::json;
using Ids = std::vector<int32_t>;

// A SentencePiece-style tokenizer (Llama 2's components) over a tiny vocabulary.
Json metaspace_tokenizer() {
  Json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}, {"\u2581", 3}, {"a", 4},
                {"b", 5},     {"c", 6},   {"ab", 7},   {"abc", 8},    {"\u2581ab", 9}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab[name] = 10 + b;
  }
  return {
      {"model",
       {{"type", "BPE"},
        {"vocab", vocab},
        {"merges", {"a b", "\u2581 ab"}},
        {"byte_fallback", true},
        {"unk_token", "<unk>"}}},
      {"added_tokens",
       {{{"id", 0}, {"content", "<unk>"}, {"special", true}},
        {{"id", 1}, {"content", "<s>"}, {"special", true}},
        {{"id", 2}, {"content", "</s>"}, {"special", true}}}},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         {{{"type", "Prepend"}, {"prepend", "\u2581"}},
          {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}}}}}},
      {"pre_tokenizer", nullptr},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", {{{"SpecialToken", {{"id", "<s>"}}}}, {{"Sequence", {{"id", "A"}}}}}}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         {{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
          {{"type", "ByteFallback"}},
          {{"type", "Fuse"}},
          {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
  };
}

// Writes j as dir/tokenizer.json (and config, when given, as tokenizer_config.json).
std::string write(const testing::TempDir& dir, const Json& j, const Json& config = nullptr) {
  std::ofstream(dir.file("tokenizer.json")) << j.dump();
  if (!config.is_null()) std::ofstream(dir.file("tokenizer_config.json")) << config.dump();
  return dir.file("tokenizer.json");
}

TEST(HuggingFaceTokenizer, MergesByteFallbackAndStreamingDecode) {
  testing::TempDir dir;
  const HuggingFaceTokenizer tok(write(dir, metaspace_tokenizer()));
  // "▁ab" merges from ▁ + ab; "€" is not in the vocabulary: its three bytes.
  EXPECT_EQ(tok.encode("ab abc"), (Ids{9, 9, 6}));
  EXPECT_EQ(tok.encode("\u20ac"), (Ids{3, 10 + 0xE2, 10 + 0x82, 10 + 0xAC}));
  EXPECT_EQ(tok.bos_id(), 1) << "the post-processor puts <s> first";
  EXPECT_EQ(tok.encode("ab", /*add_bos=*/true), (Ids{1, 9}));
  // Added tokens split out first; the normalizer prepends ▁ to each span between them.
  EXPECT_EQ(tok.encode("ab</s>ab"), (Ids{9, 2, 9}));
  EXPECT_EQ(tok.decode(tok.encode("ab abc \u20ac")), "ab abc \u20ac");
  // Streaming: the leading space goes at the start of the text or after a special token.
  EXPECT_EQ(tok.token_to_string(9), "ab");
  EXPECT_EQ(tok.token_to_string(9, 1), "ab");
  EXPECT_EQ(tok.token_to_string(9, 9), " ab");
  EXPECT_EQ(tok.token_to_string(10 + 0xE2, 9), "\xE2") << "a byte token is its raw byte";
  EXPECT_EQ(tok.vocab_size(), 266);
  ASSERT_EQ(tok.special_tokens().size(), 3u);
}

TEST(HuggingFaceTokenizer, IgnoreMergesTakesWholeWordsAndUnknownsFuse) {
  testing::TempDir dir;
  Json j = metaspace_tokenizer();
  j["normalizer"] = nullptr;
  j["model"]["byte_fallback"] = false;
  EXPECT_EQ(HuggingFaceTokenizer(write(dir, j)).encode("abc"), (Ids{7, 6})) << "a b, then c";
  j["model"]["ignore_merges"] = true;
  EXPECT_EQ(HuggingFaceTokenizer(write(dir, j)).encode("abc"), (Ids{8})) << "abc is a token";
  // Without byte fallback unknown characters are <unk>, one per run with fuse_unk.
  EXPECT_EQ(HuggingFaceTokenizer(write(dir, j)).encode("xyza"), (Ids{0, 0, 0, 4}));
  j["model"]["fuse_unk"] = true;
  EXPECT_EQ(HuggingFaceTokenizer(write(dir, j)).encode("xyza"), (Ids{0, 4}));
}

TEST(HuggingFaceTokenizer, AddedTokensStripSpacesAndConfigNamesTheEos) {
  testing::TempDir dir;
  Json j = metaspace_tokenizer();
  j["normalizer"] = nullptr;
  j["post_processor"] = nullptr;
  j["added_tokens"].push_back(
      {{"id", 4}, {"content", "<mask>"}, {"special", true}, {"lstrip", true}, {"rstrip", true}});
  const HuggingFaceTokenizer tok(
      write(dir, j, {{"eos_token", {{"content", "</s>"}}}, {"bos_token", "<s>"}}));
  EXPECT_EQ(tok.encode("ab  <mask>  ab"), (Ids{7, 4, 7})) << "the spaces beside <mask> go";
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_FALSE(tok.bos_id().has_value()) << "no post-processor and no add_bos_token";
  const HuggingFaceTokenizer with_bos(
      write(dir, j, {{"bos_token", "<s>"}, {"add_bos_token", true}}));
  EXPECT_EQ(with_bos.bos_id(), 1);
}

TEST(HuggingFaceTokenizer, MakeTokenizerFindsTheFileOrItsFolder) {
  testing::TempDir dir;
  write(dir, metaspace_tokenizer());
  EXPECT_EQ(make_tokenizer(dir.path.string())->name(), "HuggingFaceTokenizer");
  EXPECT_EQ(make_tokenizer(dir.file("tokenizer.json"))->encode("ab"), (Ids{9}));
}

// A Hugging Face model folder (weights, config.json, tokenizer.json) loads with its tokenizer,
// whose post-processor's BOS starts prompts. The model pads its embedding by 4 rows (as Qwen2.5
// pads 151665 ids to 152064): those ids print as nothing; a vocabulary of another size is refused.
TEST(HuggingFaceTokenizer, ModelFolderLoadsWithItsTokenizerJson) {
  testing::TempDir dir;
  write(dir, metaspace_tokenizer());
  const llm::LoadedModel loaded = llm::load_model(testing::save_hf_llama(dir.path, 270));
  ASSERT_TRUE(loaded.tokenizer.has_value());
  const auto tok = llm::model_tokenizer(loaded, "", "", "test");
  EXPECT_EQ(tok->name(), "HuggingFaceTokenizer");
  EXPECT_EQ(llm::prompt_ids(*tok, "ab"), (Ids{1, 9}));
  EXPECT_EQ(tok->vocab_size(), 270);
  EXPECT_EQ(tok->token_to_string(268, 9), "") << "a padding id";
  EXPECT_EQ(tok->decode(Ids{9, 269, 9}), "ab ab");
  EXPECT_TESSERA_ERROR(tok->decode(Ids{270}), IndexError, "expected token ids in [0, 270)");
  testing::TempDir other;
  Json small = metaspace_tokenizer();  // the 10 tokens without the byte-fallback ones
  small["model"]["byte_fallback"] = false;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    small["model"]["vocab"].erase(name);
  }
  EXPECT_TESSERA_ERROR(llm::model_tokenizer(loaded, write(other, small), "", "test"), ValueError,
                       "expected a tokenizer with the model's vocabulary of 270");
}

TEST(HuggingFaceTokenizer, UnsupportedComponentsAreTypedErrors) {
  testing::TempDir dir;
  auto refused = [&](const std::function<void(Json&)>& change, const std::string& text) {
    Json j = metaspace_tokenizer();
    change(j);
    EXPECT_TESSERA_ERROR(HuggingFaceTokenizer{write(dir, j)}, ValueError, text);
  };
  refused([](Json& j) { j["model"]["type"] = "WordPiece"; }, "expected a model of type BPE");
  refused([](Json& j) { j["normalizer"] = {{"type", "Lowercase"}}; }, "got 'Lowercase'");
  refused([](Json& j) { j["pre_tokenizer"] = {{"type", "Whitespace"}}; }, "got 'Whitespace'");
  refused(
      [](Json& j) {
        j["pre_tokenizer"] = {
            {"type", "Split"}, {"pattern", {{"Regex", "\\s+"}}}, {"behavior", "Removed"}};
      },
      "behavior Isolated");
  refused(
      [](Json& j) {
        j["pre_tokenizer"] = {
            {"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
      },
      "expected a Split pattern ICU can compile");
  refused([](Json& j) { j["decoder"] = {{"type", "WordPiece"}}; }, "got 'WordPiece'");
  refused([](Json& j) { j["model"]["merges"] = {"a zz"}; }, "merge part 'zz'");
  refused([](Json& j) { j["model"]["continuing_subword_prefix"] = "##"; },
          "continuing_subword_prefix");
  std::ofstream(dir.file("tokenizer.json")) << "{not json";
  EXPECT_TESSERA_ERROR(HuggingFaceTokenizer{dir.file("tokenizer.json")}, ValueError,
                       "expected a JSON object");
  const HuggingFaceTokenizer tok(write(dir, metaspace_tokenizer()));
  EXPECT_TESSERA_ERROR(tok.decode(Ids{266}), IndexError, "expected token ids in [0, 266)");
}

}  // namespace
}  // namespace tessera::tokenizers
