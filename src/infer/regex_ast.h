#pragma once
// A parsed regular expression (regex_parser.cpp), which regex_dfa.cpp compiles into a RegexDfa.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/infer/regex.h"

namespace tessera::infer::regex {

struct CodeRange {
  uint32_t lo, hi;  // code points, inclusive
};

struct Node {
  enum class Kind : uint8_t { Empty, Chars, Concat, Alt, Repeat, Call };
  Kind kind = Kind::Empty;
  std::vector<CodeRange> ranges{};  // Chars: sorted, disjoint, not adjacent
  std::vector<int32_t> children{};  // Concat, Alt; Repeat: its one child
  int32_t min = 0, max = -1;        // Repeat; max -1: unbounded
  int32_t rule = -1;                // Call: a grammar rule's index
};

struct Ast {
  std::vector<Node> nodes;
  int32_t root = 0;
};

// The pattern as nodes, its anchors resolved for `match` (no anchor nodes remain); ValueError
// "[Regex] ..." for what regex.h does not support.
Ast parse(std::string_view pattern, RegexDfa::Match match);

// A grammar's rules (gbnf_parser.cpp): rule r's body is node roots[r] of ast; its Call nodes
// name rules by index.
struct Rules {
  Ast ast;
  std::vector<std::string> names;
  std::vector<int32_t> roots;
};
// ValueError "[Grammar] ..." naming what is wrong and where.
Rules parse_gbnf(std::string_view text);

// The DFA of the texts of ast's node `root` (Call nodes become calls); ValueError naming `what`
// when it matches nothing or is too large.
std::shared_ptr<const RegexDfa> compile(const Ast& ast, int32_t root, std::string_view what);

}  // namespace tessera::infer::regex
