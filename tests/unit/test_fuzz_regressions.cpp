// Inputs that crashed a fuzz target (fuzz/), fed to the library again: each is kept in the
// target's corpus (fuzz/corpus/<target>/) and must now load cleanly or fail with a typed error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tessera/autograd/grad_mode.h"
#include "tessera/infer/structured_output.h"
#include "tessera/io/importers.h"
#include "tessera/io/lora_adapter.h"
#include "tessera/ops/creation.h"
#include "tessera/serve/openai.h"
#include "tessera/tokenizers/char_tokenizer.h"
#include "tessera/tokenizers/llama2c_tokenizer.h"
#include "tessera/tokenizers/sentencepiece_tokenizer.h"
#include "testing/expect_error.h"
#include "testing/shared_data.h"
#include "testing/temp_dir.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

fs::path corpus_file(const std::string& target, const std::string& name) {
  return testing::repo_root() / "fuzz" / "corpus" / target / name;
}

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << "missing fuzz regression input " << path;
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The first file of a multi-file fuzz input (parts split at "\n=====\n", see fuzz/fuzz_util.h).
std::string first_part(const std::string& input) {
  return input.substr(0, input.find("\n=====\n"));
}

// One forward of token 0 runs and the nan of the weights reaches the logits.
void expect_nan_logits(models::CausalLM& model) {
  autograd::NoGradGuard no_grad;
  const Tensor logits = model.forward(zeros({1, 1}, TensorOptions(kInt64))).contiguous();
  EXPECT_EQ(logits.sizes(), (Shape{1, 1, model.vocab_size()}));
  const float* p = logits.data_ptr<float>();
  EXPECT_TRUE(std::any_of(p, p + logits.numel(), [](float v) { return std::isnan(v); }));
}

// nan weights reached detail::vexp, which cast nan to int (undefined; UBSan aborted): the
// forward now runs and the nan propagates to the logits.
TEST(FuzzRegressions, Llama2cModelWithNanWeightsRunsAndPropagatesNan) {
  expect_nan_logits(
      *io::load_llama2c(corpus_file("fuzz_llama2c", "crash-nan-weights-vexp").string()));
}

TEST(FuzzRegressions, LlmcModelWithNanWeightsRunsAndPropagatesNan) {
  expect_nan_logits(
      *io::load_llmc_gpt2(corpus_file("fuzz_llmc", "crash-nan-weights-vexp").string()));
}

// A legacy header with vocab_size INT32_MIN: std::abs overflowed int (UBSan in the debug build;
// clang's does not check std::abs, so the fuzzer passed it). Now |vocab_size| = 2^31 fails the
// plausibility check.
TEST(FuzzRegressions, Llama2cVocabSizeInt32MinIsAValueError) {
  const auto model = corpus_file("fuzz_llama2c", "review-vocab-int32-min").string();
  EXPECT_TESSERA_ERROR(io::load_llama2c(model), ValueError, "expected plausible sizes");
  EXPECT_TESSERA_ERROR(io::load_llama2c(model), ValueError, "vocab_size 2147483648");
}

// A corrupt max_token_length let a token claim ~2 GB, allocated before the bytes were checked
// (out of memory under the fuzzer): the length is now checked against the file first.
TEST(FuzzRegressions, Llama2cTokenizerTokenLongerThanTheFileIsAValueError) {
  testing::TempDir dir;
  const std::string path = dir.file("tokenizer.bin");
  std::ofstream(path, std::ios::binary)
      << first_part(read_bytes(corpus_file("fuzz_llama2c_tokenizer", "oom-token-length")));
  EXPECT_TESSERA_ERROR(tokenizers::Llama2cTokenizer{path}, ValueError,
                       "expected 1966866470 bytes of token 19 at byte 164");
}

// A SentencePiece model with an empty piece: libsentencepiece's trie builder threw its own
// exception (no status), which escaped the constructor. Now a ValueError like other bad models.
TEST(FuzzRegressions, SentencePieceModelWithEmptyPieceIsAValueError) {
  testing::TempDir dir;
  const std::string path = dir.file("tokenizer.model");
  std::ofstream(path, std::ios::binary)
      << first_part(read_bytes(corpus_file("fuzz_sentencepiece_tokenizer", "crash-empty-piece")));
  EXPECT_TESSERA_ERROR(tokenizers::SentencePieceTokenizer{path}, ValueError, "zero-length key");
}

// A LoRA rank too large for an integer (a float to JSON) was converted to int64 with undefined
// behaviour: it is now a ValueError naming r.
TEST(FuzzRegressions, LoraRankBeyondIntegersIsAValueError) {
  const std::string config =
      first_part(read_bytes(corpus_file("fuzz_lora_adapter", "crash-huge-rank")));
  EXPECT_TESSERA_ERROR(io::parse_lora_config(config), ValueError, "expected r to be an integer");
}

// A chat content part whose "type" is a number made parse_request throw nlohmann's type_error
// (the server answered it as an internal error): it is now a 400 naming "messages".
TEST(FuzzRegressions, ChatContentPartWithNonStringTypeIsAnApiError) {
  const std::string input =
      read_bytes(corpus_file("fuzz_openai_request", "crash-content-part-type-number"));
  ASSERT_EQ(input[0], '1');  // the selector byte: chat endpoint
  const tokenizers::CharTokenizer tok("abcdefghijklmnopqrstuvwxyz :\n");
  try {
    serve::parse_request(serve::Endpoint::ChatCompletions, input.substr(1), tok,
                         {64, tok.vocab_size()});
    ADD_FAILURE() << "parse_request accepted " << input;
  } catch (const serve::ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, "messages");
  }
}

// The matcher took a string key with bytes that are not UTF-8, which JSON parsers refuse: fed
// as the fuzz target feeds it (refused bytes skipped), what it takes must parse.
TEST(FuzzRegressions, JsonMatcherTakesOnlyUtf8Strings) {
  const std::string input =
      read_bytes(corpus_file("fuzz_json_grammar", "crash-invalid-utf8-in-key"));
  const std::string text = input.substr(input.find("\n=====\n") + 7);
  infer::JsonMatcher m(infer::JsonGrammar::any_object());
  std::string taken;
  for (char c : text)
    if (m.advance(std::string_view(&c, 1))) taken += c;
  ASSERT_TRUE(m.accepting()) << taken;
  EXPECT_FALSE(nlohmann::json::parse(taken, nullptr, false).is_discarded()) << taken;
}

}  // namespace
}  // namespace tessera
