// CfgGrammar: a DFA per GBNF rule, which rules match the empty text, and the checks that keep a
// matcher's step finite (no left recursion, no repetition of an empty-matching rule).
#include "tessera/infer/cfg_grammar.h"

#include <algorithm>

#include "infer/regex_ast.h"
#include "tessera/core/error.h"

namespace tessera::infer {

class CfgGrammarBuilder {
 public:
  static std::shared_ptr<const CfgGrammar> build(std::string_view text) {
    const regex::Rules rules = regex::parse_gbnf(text);
    auto g = std::shared_ptr<CfgGrammar>(new CfgGrammar());
    g->names_ = rules.names;
    for (size_t r = 0; r < rules.names.size(); ++r)
      g->rules_.push_back(
          regex::compile(rules.ast, rules.roots[r], "[Grammar] rule '" + rules.names[r] + "'"));
    g->root_ = static_cast<int32_t>(std::find(g->names_.begin(), g->names_.end(), "root") -
                                    g->names_.begin());
    CfgGrammarBuilder b(*g);
    b.inline_rules(rules);
    b.find_ends();
    b.refuse_left_recursion();
    b.refuse_empty_repetition();
    return g;
  }

 private:
  explicit CfgGrammarBuilder(CfgGrammar& g) : g_(g) {}

  size_t num_rules() const { return g_.rules_.size(); }
  const RegexDfa& dfa(size_t r) const { return *g_.rules_[r]; }
  bool nullable(int32_t r) const { return g_.can_end_[static_cast<size_t>(r)][0] != 0; }

  // Every call of a rule that cannot reach itself becomes a copy of its body, so the DFAs take
  // in one table lookup what would otherwise be a frame pushed, stepped and popped, and threads
  // that a call's alternatives would fork are merged by determinization. Only recursion stays a
  // call. A rule whose copy would be too large keeps its calls.
  void inline_rules(const regex::Rules& rules) {
    std::vector<uint8_t> recursive(num_rules());
    for (size_t r = 0; r < num_rules(); ++r) recursive[r] = reaches(r, r);
    regex::Ast ast = rules.ast;
    bool any = false;
    for (regex::Node& n : ast.nodes)
      if (n.kind == regex::Node::Kind::Call && !recursive[static_cast<size_t>(n.rule)]) {
        n = regex::Node{.kind = regex::Node::Kind::Concat,
                        .children = {rules.roots[static_cast<size_t>(n.rule)]}};
        any = true;
      }
    if (!any) return;
    for (size_t r = 0; r < num_rules(); ++r) {
      if (!dfa(r).has_calls()) continue;
      try {
        g_.rules_[r] = regex::compile(ast, rules.roots[r], "[Grammar] rule '" + g_.names_[r] + "'");
      } catch (const ValueError&) {  // too many states once copied: calls stay
      }
    }
  }

  // Whether rule `to` can be called, directly or through others, from rule `from`.
  bool reaches(size_t from, size_t to) const {
    std::vector<uint8_t> seen(num_rules());
    std::vector<size_t> stack{from};
    while (!stack.empty()) {
      const size_t r = stack.back();
      stack.pop_back();
      for (int32_t s = 0; s < dfa(r).num_states(); ++s)
        for (const RegexDfa::Call& c : dfa(r).calls(s)) {
          const auto callee = static_cast<size_t>(c.rule);
          if (callee == to) return true;
          if (!seen[callee]) {
            seen[callee] = 1;
            stack.push_back(callee);
          }
        }
    }
    return false;
  }

  // can_end: accepting states, then those that reach one through calls of nullable rules, until
  // nothing changes.
  void find_ends() {
    for (size_t r = 0; r < num_rules(); ++r) {
      std::vector<uint8_t> ends(static_cast<size_t>(dfa(r).num_states()));
      for (size_t s = 0; s < ends.size(); ++s) ends[s] = dfa(r).accepting(static_cast<int32_t>(s));
      g_.can_end_.push_back(std::move(ends));
    }
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < num_rules(); ++r)
        for (size_t s = 0; s < g_.can_end_[r].size(); ++s) {
          if (g_.can_end_[r][s]) continue;
          for (const RegexDfa::Call& c : dfa(r).calls(static_cast<int32_t>(s)))
            if (nullable(c.rule) && g_.can_end_[r][static_cast<size_t>(c.next)]) {
              g_.can_end_[r][s] = 1;
              changed = true;
              break;
            }
        }
    }
  }

  // The states of rule r reachable from `from` through calls of nullable rules only.
  std::vector<int32_t> empty_reach(size_t r, int32_t from) const {
    std::vector<int32_t> seen{from}, stack{from};
    while (!stack.empty()) {
      const int32_t s = stack.back();
      stack.pop_back();
      for (const RegexDfa::Call& c : dfa(r).calls(s))
        if (nullable(c.rule) && std::find(seen.begin(), seen.end(), c.next) == seen.end()) {
          seen.push_back(c.next);
          stack.push_back(c.next);
        }
    }
    return seen;
  }

  // A rule that can call itself again before any character (directly or through others) would
  // make a matcher push frames forever.
  void refuse_left_recursion() const {
    std::vector<std::vector<int32_t>> first_calls(num_rules());
    for (size_t r = 0; r < num_rules(); ++r)
      for (int32_t s : empty_reach(r, 0))
        for (const RegexDfa::Call& c : dfa(r).calls(s)) first_calls[r].push_back(c.rule);
    std::vector<uint8_t> state(num_rules(), 0);  // 0 new, 1 on the path, 2 done
    std::vector<int32_t> path;
    auto visit = [&](auto&& self, int32_t r) -> void {
      state[static_cast<size_t>(r)] = 1;
      path.push_back(r);
      for (int32_t next : first_calls[static_cast<size_t>(r)]) {
        if (state[static_cast<size_t>(next)] == 1) {
          std::string cycle;
          for (auto it = std::find(path.begin(), path.end(), next); it != path.end(); ++it)
            cycle += g_.names_[static_cast<size_t>(*it)] + " -> ";
          throw ValueError("[Grammar] rule '" + g_.names_[static_cast<size_t>(next)] +
                           "' is left-recursive (" + cycle + g_.names_[static_cast<size_t>(next)] +
                           " before any character): write it as a repetition");
        }
        if (state[static_cast<size_t>(next)] == 0) self(self, next);
      }
      path.pop_back();
      state[static_cast<size_t>(r)] = 2;
    };
    for (size_t r = 0; r < num_rules(); ++r)
      if (state[r] == 0) visit(visit, static_cast<int32_t>(r));
  }

  // (x)* where x can match the empty text loops without a character: a state of a rule that
  // gets back to itself through calls of nullable rules.
  void refuse_empty_repetition() const {
    for (size_t r = 0; r < num_rules(); ++r)
      for (int32_t s = 0; s < dfa(r).num_states(); ++s)
        for (const RegexDfa::Call& c : dfa(r).calls(s)) {
          if (!nullable(c.rule)) continue;
          const std::vector<int32_t> after = empty_reach(r, c.next);
          if (std::find(after.begin(), after.end(), s) != after.end())
            throw ValueError("[Grammar] rule '" + g_.names_[r] + "' repeats rule '" +
                             g_.names_[static_cast<size_t>(c.rule)] +
                             "', which can match the empty text: make it match at least one "
                             "character");
        }
  }

  CfgGrammar& g_;
};

std::shared_ptr<const CfgGrammar> CfgGrammar::from_gbnf(std::string_view text) {
  return CfgGrammarBuilder::build(text);
}

}  // namespace tessera::infer
