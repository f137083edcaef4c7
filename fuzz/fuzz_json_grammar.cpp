// Structured output: a JSON Schema (first part) compiled into a JsonGrammar, and text (second
// part) fed to its matcher byte by byte. A refused schema must be a typed error. Text the matcher
// takes in whole as a complete value must parse as JSON; a byte it refuses must leave it as it
// was (the next bytes go on from there); and the token masker's allowed set for every prefix
// must be exactly the tokens whose bytes the matcher takes, over the synthetic GPT-2 vocabulary.
#include <nlohmann/json.hpp>

#include "fuzz_util.h"
#include "tessera/core/error.h"
#include "tessera/infer/structured_output.h"

namespace {

using namespace tessera;
using Json = nlohmann::json;

void check_mask(const infer::TokenMasker& masker, const infer::JsonMatcher& m,
                std::string_view input) {
  std::vector<uint8_t> allowed;
  masker.allowed_tokens(m, allowed);
  for (int32_t t = 0; t < masker.vocab_size(); ++t) {
    infer::JsonMatcher copy = m;
    const std::string_view b = masker.bytes(t);
    if ((allowed[static_cast<size_t>(t)] != 0) != (!b.empty() && copy.advance(b)))
      fuzz::fail("the token mask disagrees with the matcher on token " + std::to_string(t), input);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input = fuzz::bytes(data, size);
  const std::vector<std::string_view> parts = fuzz::split_parts(input, 2);
  const Json schema = Json::parse(parts[0], nullptr, /*allow_exceptions=*/false);
  if (schema.is_discarded()) return 0;
  static const infer::TokenMasker masker(fuzz::synthetic_gpt2(), {});
  try {
    const auto grammar = schema.is_object() && schema.empty()
                             ? infer::JsonGrammar::any_object()
                             : infer::JsonGrammar::from_schema(schema);
    infer::JsonMatcher m(grammar);
    const std::string_view text = parts[1].substr(0, 256);  // the mask check is per byte
    std::string taken;
    for (char c : text) {
      if (taken.size() < 64) check_mask(masker, m, input);
      const bool accepting = m.accepting();
      if (m.advance(std::string_view(&c, 1))) {
        taken += c;
      } else if (m.accepting() != accepting) {
        fuzz::fail("a refused byte changed the matcher", input);
      }
    }
    if (m.accepting() && Json::parse(taken, nullptr, false).is_discarded())
      fuzz::fail("the matcher took text that is not JSON: " + taken, input);
  } catch (const Error& e) {
    fuzz::rejected(e);
  }
  return 0;
}
