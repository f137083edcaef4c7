#pragma once
// A parsed regular expression (regex_parser.cpp), which regex_dfa.cpp compiles into a RegexDfa.
#include <cstdint>
#include <string_view>
#include <vector>

#include "tessera/infer/regex.h"

namespace tessera::infer::regex {

struct CodeRange {
  uint32_t lo, hi;  // code points, inclusive
};

struct Node {
  enum class Kind : uint8_t { Empty, Chars, Concat, Alt, Repeat };
  Kind kind = Kind::Empty;
  std::vector<CodeRange> ranges{};  // Chars: sorted, disjoint, not adjacent
  std::vector<int32_t> children{};  // Concat, Alt; Repeat: its one child
  int32_t min = 0, max = -1;        // Repeat; max -1: unbounded
};

struct Ast {
  std::vector<Node> nodes;
  int32_t root = 0;
};

// The pattern as nodes, its anchors resolved for `match` (no anchor nodes remain); ValueError
// "[Regex] ..." for what regex.h does not support.
Ast parse(std::string_view pattern, RegexDfa::Match match);

}  // namespace tessera::infer::regex
