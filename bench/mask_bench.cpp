// What one structured-output token mask costs over the GPT-2 vocabulary (50,257 tokens) when no
// mask of the same state is kept: each constraint's matcher is advanced along a text, and the
// mask at its end is computed by a TokenMasker built afresh ("cold": no state or rule mask
// kept), then, for grammars, at a second text that ends in the same rule state under a different
// stack ("rule masks warm": the whole-state cache misses, the per-rule-state masks hit), as deep
// JSON grammars see when their stacks do not recur. Median of --reps repetitions, in
// microseconds.
//
//   mask_bench [--gpt2-dir DIR] [--reps N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tessera/infer/structured_output.h"
#include "tessera/tokenizers/gpt2_tokenizer.h"

using namespace tessera;
using Clock = std::chrono::steady_clock;

namespace {

constexpr const char* kJsonGbnf = R"g(
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null")
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array  ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) )* "\""
number ::= "-"? ([0-9] | [1-9] [0-9]*) ("." [0-9]+)? ([eE] [-+]? [0-9]+)?
ws     ::= [ \t\n]*
)g";

struct Case {
  const char* name;
  std::shared_ptr<const infer::JsonGrammar> grammar;
  const char* text;
  const char* same_rule_state;  // or null: a second text, for the warm rule-mask timing
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

infer::JsonMatcher advanced(const std::shared_ptr<const infer::JsonGrammar>& g, const char* text) {
  infer::JsonMatcher m(g);
  if (!m.advance(text)) {
    std::fprintf(stderr, "mask_bench: the constraint refuses '%s'\n", text);
    std::exit(1);
  }
  return m;
}

double micros(const infer::TokenMasker& masker, const infer::JsonMatcher& m,
              std::vector<uint8_t>& allowed) {
  const Clock::time_point t0 = Clock::now();
  masker.allowed_tokens(m, allowed);
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::string gpt2_dir = "../shared/data/gpt2";
  int reps = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--gpt2-dir"))
      gpt2_dir = argv[i + 1];
    else if (!std::strcmp(argv[i], "--reps"))
      reps = std::max(1, std::atoi(argv[i + 1]));
  }
  const auto tok = tokenizers::GPT2Tokenizer::from_directory(gpt2_dir);
  const int32_t eos = *tok->eos_id();
  const auto json_gbnf = infer::JsonGrammar::grammar(kJsonGbnf);
  const auto prose =
      infer::JsonGrammar::grammar("root ::= word (\" \" word)*\nword ::= [A-Za-z0-9,.']+\n");
  const std::vector<Case> cases = {
      {"GBNF prose, mid-word", prose, "Hello wor", nullptr},
      {"GBNF JSON, in a string", json_gbnf, R"({"a": [{"b": "hello wor)",
       R"({"a": [{"b": [{"c": "hello wor)"},
      {"GBNF JSON, after a comma", json_gbnf, R"({"a": [{"b": 1, )", R"({"a": [[{"b": 1, )"},
      {"GBNF integer list",
       infer::JsonGrammar::grammar("root ::= \"[\" int (\",\" \" \"? int)*\n"
                                   "int  ::= \"-\"? [0-9]+\n"),
       "[1, 23", nullptr},
      {"regex prose", infer::JsonGrammar::regex(R"([A-Za-z0-9 ,.'\n]*)"), "Hello wor", nullptr},
      {"JSON Schema object, in a string", infer::JsonGrammar::any_object(),
       R"({"a": [{"b": "hello wor)", nullptr},
  };
  std::printf(
      "| constraint | at | tokens allowed | cold us | rule masks warm us |\n"
      "|---|---|---|---|---|\n");
  for (const Case& c : cases) {
    const infer::JsonMatcher m = advanced(c.grammar, c.text);
    std::vector<double> cold, warm;
    std::vector<uint8_t> allowed;
    size_t n = 0;
    for (int r = 0; r < reps; ++r) {
      const infer::TokenMasker masker(*tok, std::span(&eos, 1));
      cold.push_back(micros(masker, m, allowed));
      n = static_cast<size_t>(std::count(allowed.begin(), allowed.end(), 1));
      if (c.same_rule_state != nullptr)
        warm.push_back(micros(masker, advanced(c.grammar, c.same_rule_state), allowed));
    }
    std::printf("| %s | `%s` | %zu | %.0f | %s |\n", c.name, c.text, n, median(cold),
                warm.empty() ? "" : std::to_string(static_cast<int>(median(warm))).c_str());
  }
}
