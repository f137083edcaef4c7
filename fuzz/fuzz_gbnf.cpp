// Grammars: a GBNF text (first part) compiled into a JsonGrammar, and text (second part) fed to
// its matcher byte by byte. A refused grammar must be a typed error, and compiling and stepping
// must end (left recursion and repetitions of empty-matching rules are refused, so a byte's
// calls and returns are finite). As for JSON: a refused byte leaves the matcher as it was, and
// the token mask for every prefix equals trying every token of the synthetic GPT-2 vocabulary.
#include "fuzz_matcher_check.h"
#include "tessera/core/error.h"

using namespace tessera;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input = fuzz::bytes(data, size);
  const std::vector<std::string_view> parts = fuzz::split_parts(input, 2);
  if (parts[0].size() > 1024) return 0;  // repeats of large grammars take long to expand
  try {
    infer::JsonMatcher m(infer::JsonGrammar::grammar(parts[0]));
    fuzz::feed_checked(m, parts[1].substr(0, 128), input);
  } catch (const Error& e) {
    fuzz::rejected(e);
  }
  return 0;
}
