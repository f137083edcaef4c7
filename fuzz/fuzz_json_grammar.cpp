// Structured output: a JSON Schema (first part) compiled into a JsonGrammar, and text (second
// part) fed to its matcher byte by byte. A refused schema must be a typed error. Text the matcher
// takes in whole as a complete value must parse as JSON; a byte it refuses must leave it as it
// was (the next bytes go on from there); and the token masker's allowed set for every prefix
// must be exactly the tokens whose bytes the matcher takes, over the synthetic GPT-2 vocabulary.
#include <nlohmann/json.hpp>

#include "fuzz_matcher_check.h"
#include "tessera/core/error.h"

namespace {

using namespace tessera;
using Json = nlohmann::json;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input = fuzz::bytes(data, size);
  const std::vector<std::string_view> parts = fuzz::split_parts(input, 2);
  const Json schema = Json::parse(parts[0], nullptr, /*allow_exceptions=*/false);
  if (schema.is_discarded()) return 0;
  try {
    const auto grammar = schema.is_object() && schema.empty()
                             ? infer::JsonGrammar::any_object()
                             : infer::JsonGrammar::from_schema(schema);
    infer::JsonMatcher m(grammar);
    // The mask check is per byte.
    const std::string taken = fuzz::feed_checked(m, parts[1].substr(0, 256), input);
    if (m.accepting() && Json::parse(taken, nullptr, false).is_discarded())
      fuzz::fail("the matcher took text that is not JSON: " + taken, input);
  } catch (const Error& e) {
    fuzz::rejected(e);
  }
  return 0;
}
