// Grammar-constrained output: GBNF parsing, the matcher over rule frames (recursion, ambiguity,
// completion), agreement with the JSON grammar on JSON texts, and the errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "tessera/core/error.h"
#include "tessera/infer/cfg_grammar.h"
#include "tessera/infer/structured_output.h"
#include "testing/constrained_text.h"
#include "testing/expect_error.h"

namespace tessera {
namespace {

using infer::CfgGrammar;
using infer::JsonGrammar;
using infer::JsonMatcher;
using infer::RegexDfa;

using testing::matches;
using testing::prefix;

const char* kArithmetic = R"g(
# integer arithmetic
root   ::= expr
expr   ::= term (("+" | "-") term)*
term   ::= factor (("*" | "/") factor)*
factor ::= [0-9]+ | "(" expr ")"
)g";

// JSON after llama.cpp's json.gbnf, with its whitespace bounded as our JSON grammar's is not:
// only texts without whitespace are compared below.
const char* kJson = R"g(
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null")
object ::=
  "{" (
            string ":" value
    ("," string ":" value)*
  )? "}"
array  ::= "[" ( value ("," value)* )? "]"
string ::= "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})
  )* "\""
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9]{1,2})?
)g";

TEST(CfgGrammar, RecursiveRulesMatchNestedText) {
  const auto g = JsonGrammar::grammar(kArithmetic);
  for (const char* ok : {"1", "12+3", "1+2*(3-4)", "((7))", "(1+(2*3))/4-5"})
    EXPECT_TRUE(matches(g, ok)) << ok;
  for (const char* bad : {"", "1+", "(1", "1)", "+1", "1 + 2", "()"})
    EXPECT_FALSE(matches(g, bad)) << bad;
  EXPECT_TRUE(prefix(g, "((1+"));
  EXPECT_FALSE(prefix(g, "(1+)"));
  JsonMatcher m(g);
  ASSERT_TRUE(m.advance("(1)"));
  EXPECT_TRUE(m.accepting());
  EXPECT_FALSE(m.terminated()) << "an operator may follow";
}

TEST(CfgGrammar, AgreesWithTheJsonGrammarOnJsonTexts) {
  const auto gbnf = JsonGrammar::grammar(kJson);
  const auto json = JsonGrammar::any_object();
  std::mt19937 rng(3);
  // Random texts from JSON's pieces: both must take the same prefixes and complete values.
  const std::vector<std::string> pieces = {"{",     "}",       "[",           "]", ",",    ":",
                                           "\"a\"", "\"\\n\"", "\"\\u00e9\"", "1", "-0.5", "2e10",
                                           "true",  "null",    "\"",          "x", "\\"};
  // A JSON value of the pieces above, as text.
  auto value = [&](auto&& self, int depth) -> std::string {
    const unsigned k = depth > 2 ? 2 + rng() % 6 : rng() % 8;
    if (k == 0 || k == 1) {
      const bool object = k == 0;
      std::string out = object ? "{" : "[";
      for (int n = static_cast<int>(rng() % 3); n > 0; --n)
        out += (out.size() > 1 ? "," : "") + (object ? "\"k\":" : std::string()) +
               self(self, depth + 1);
      return out + (object ? "}" : "]");
    }
    return pieces[6 + rng() % 8];
  };
  int complete = 0;
  for (int i = 0; i < 3000; ++i) {
    // A value, cut short or with a random piece inserted or not.
    std::string text = "{\"v\":" + value(value, 0) + "}";
    if (rng() % 2) text.insert(rng() % text.size(), pieces[rng() % pieces.size()]);
    if (rng() % 3 == 0) text.resize(rng() % text.size());
    EXPECT_EQ(prefix(gbnf, text), prefix(json, text)) << text;
    EXPECT_EQ(matches(gbnf, text), matches(json, text)) << text;
    complete += matches(json, text);
  }
  EXPECT_GT(complete, 1000);
  EXPECT_TRUE(matches(gbnf, R"g({"a":[1,{"b":null}],"c":"\u00e9"})g"));
}

TEST(CfgGrammar, AlternativesEndTheTextWhenNothingCanFollow) {
  const auto g = JsonGrammar::grammar(R"g(root ::= "yes" | "no" | "n" [0-9])g");
  JsonMatcher yes(g);
  ASSERT_TRUE(yes.advance("yes"));
  EXPECT_TRUE(yes.terminated());
  JsonMatcher n(g);
  ASSERT_TRUE(n.advance("n"));
  EXPECT_FALSE(n.accepting());
  EXPECT_TRUE(n.advance("o"));
  EXPECT_TRUE(n.terminated());
  // Rules that may match nothing, and right recursion as deep as the text.
  const auto list = JsonGrammar::grammar(R"g(
root ::= item rest
rest ::= ("," item rest)?
item ::= 'a' [0-9]? | "\x62\u00e9"
)g");
  EXPECT_TRUE(matches(list, "a"));
  EXPECT_TRUE(matches(list, "a1,b\xc3\xa9,a"));
  std::string long_list = "a";
  for (int i = 0; i < 200; ++i) long_list += ",a";
  EXPECT_TRUE(matches(list, long_list)) << "tail calls do not grow the stack";
  EXPECT_FALSE(matches(list, "a,"));
}

TEST(CfgGrammar, RulesThatDoNotRecurseAreCopiedIntoTheirCallers) {
  // Only expr recurses: the root's DFA holds all of num, op and ws, and calls expr alone.
  const auto g = CfgGrammar::from_gbnf(R"g(
root ::= ws expr ws
expr ::= num (op num)* | "(" expr ")"
num  ::= [0-9]+
op   ::= ws [+*] ws
ws   ::= " "*
)g");
  std::vector<std::string> called;
  for (int64_t r = 0; r < g->num_rules(); ++r)
    for (int32_t s = 0; s < g->rule(static_cast<int32_t>(r)).num_states(); ++s)
      for (const RegexDfa::Call& c : g->rule(static_cast<int32_t>(r)).calls(s))
        called.push_back(g->rule_name(c.rule));
  EXPECT_TRUE(
      std::all_of(called.begin(), called.end(), [](const std::string& n) { return n == "expr"; }));
  EXPECT_FALSE(called.empty());
  // Copies too large for a DFA keep their calls: 4^6 copies of "xyz" in root, 4^5 in a.
  std::string nested = "root ::= a a a a\n";
  for (char r = 'a'; r < 'f'; ++r) {
    const std::string callee(1, static_cast<char>(r + 1));
    nested +=
        std::string(1, r) + " ::= " + callee + " " + callee + " " + callee + " " + callee + "\n";
  }
  nested += "f ::= \"xyz\"\n";
  const auto big = CfgGrammar::from_gbnf(nested);
  for (int32_t r = 0; r < big->num_rules(); ++r)
    EXPECT_EQ(big->rule(r).has_calls(), big->rule_name(r) == "root") << big->rule_name(r);
  std::string text;
  for (int i = 0; i < 4096; ++i) text += "xyz";
  EXPECT_TRUE(matches(JsonGrammar::grammar(nested), text));
  EXPECT_FALSE(matches(JsonGrammar::grammar(nested), text + "x"));
}

TEST(CfgGrammar, RefusesWhatItCannotFollowNamingTheRule) {
  auto refuses = [](const char* text, const char* what) {
    EXPECT_TESSERA_ERROR(JsonGrammar::grammar(text), ValueError, what);
  };
  refuses("expr ::= \"1\"", "a grammar needs a rule named 'root'");
  refuses("root ::= x", "rule 'x' is used but not defined");
  refuses("root ::= \"a\"\nroot ::= \"b\"", "rule 'root' is defined twice");
  refuses("root ::= expr\nexpr ::= expr \"+\" \"1\" | \"1\"",
          "rule 'expr' is left-recursive (expr -> expr before any character)");
  refuses("root ::= a\na ::= b? \"x\"\nb ::= a \"y\"", "left-recursive (a -> b -> a");
  refuses("root ::= x* \"!\"\nx ::= (\"a\" x)?",
          "rule 'root' repeats rule 'x', which can match the empty text");
  refuses("root ::= (\"a\"", "a '(' without its ')'");
  refuses("root ::= \"a\")", "unbalanced ')'");
  refuses("root \"a\"", "expected '::=' after a rule name");
  refuses("root ::= \"abc", "a literal without its closing quote");
  refuses("root ::= [^\\x00-\\U0010FFFF]", "rule 'root' matches no text");
  refuses("root ::= @", "expected a literal, a [class], '.', '(' or a rule name at position 9");
}

}  // namespace
}  // namespace tessera
