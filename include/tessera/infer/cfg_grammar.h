#pragma once
// Context-free grammars for constrained generation, written in GBNF (llama.cpp's grammar format;
// vLLM's structured_outputs.grammar and guided_grammar take its EBNF through xgrammar):
//
//   root   ::= answer ("\n" answer)*
//   answer ::= "yes" | "no" | number
//   number ::= [1-9] [0-9]{0,3}       # comments run to the end of the line
//
// A rule is `name ::= body`; a body is alternatives (`|`) of sequences of literals ("..." or
// '...', with \n \r \t \\ \" \xHH \uHHHH \UHHHHHHHH escapes), classes [a-z] / [^...], `.` (any
// character), rule names and groups (...), each optionally followed by * + ? {m} {m,} {m,n}. A
// body may span lines; the next `name ::=` starts the next rule. The text must match rule
// `root`. Each rule compiles into a RegexDfa (regex.h) in which the rules it names are copied,
// but for recursive ones (those that can reach themselves), which stay calls; a matcher follows
// a stack of rule frames (structured_output.h's JsonMatcher: one thread per
// parse, at most 64 at once, so a grammar more ambiguous than that may lose some of its texts,
// never admit others; stacks at most 64 rules deep, calls in tail position not counted). Refused
// with a ValueError "[Grammar] ..." naming the rule or position: syntax errors, undefined or
// duplicate rules, no `root`, a rule that matches nothing, left recursion (a rule that can reach
// itself without a character in between: write it as a repetition), and a repetition of a
// recursive rule that can match the empty text.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/infer/regex.h"

namespace tessera::infer {

class CfgGrammar {
 public:
  static std::shared_ptr<const CfgGrammar> from_gbnf(std::string_view text);

  int32_t root() const { return root_; }
  int64_t num_rules() const { return static_cast<int64_t>(rules_.size()); }
  const RegexDfa& rule(int32_t r) const { return *rules_[static_cast<size_t>(r)]; }
  const std::string& rule_name(int32_t r) const { return names_[static_cast<size_t>(r)]; }
  // Rule r's text may end in state s: its DFA accepts there, or it can call rules that match the
  // empty text and get to such a state.
  bool can_end(int32_t r, int32_t s) const {
    return can_end_[static_cast<size_t>(r)][static_cast<size_t>(s)] != 0;
  }

 private:
  friend class CfgGrammarBuilder;
  std::vector<std::string> names_;
  std::vector<std::shared_ptr<const RegexDfa>> rules_;
  std::vector<std::vector<uint8_t>> can_end_;
  int32_t root_ = 0;
};

}  // namespace tessera::infer
