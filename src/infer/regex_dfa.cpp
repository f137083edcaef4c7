// regex::Ast -> RegexDfa: code-point ranges become UTF-8 byte-range sequences in a Thompson NFA,
// the subset construction makes it deterministic over classes of bytes the pattern does not tell
// apart, and states from which no match can be reached are removed.
#include <algorithm>
#include <map>
#include <span>

#include "infer/regex_ast.h"
#include "tessera/core/error.h"
#include "tokenizers/utf8.h"

namespace tessera::infer {

namespace {

constexpr size_t kMaxNfaStates = 200000;

struct ByteRange {
  uint8_t lo, hi;
};

// Calls emit(span<const ByteRange>) once per sequence of byte ranges; together their texts are
// the UTF-8 encodings of the code points [lo, hi] but the surrogates, each exactly once.
template <class Emit>
void utf8_sequences(uint32_t lo, uint32_t hi, Emit&& emit) {
  if (lo > hi) return;
  if (lo <= 0xDFFF && hi >= 0xD800) {
    if (lo < 0xD800) utf8_sequences(lo, 0xD7FF, emit);
    if (hi > 0xDFFF) utf8_sequences(0xE000, hi, emit);
    return;
  }
  for (uint32_t last : {0x7Fu, 0x7FFu, 0xFFFFu})  // one encoded length at a time
    if (lo <= last && hi > last) {
      utf8_sequences(lo, last, emit);
      utf8_sequences(last + 1, hi, emit);
      return;
    }
  std::string a, b;
  detail::append_utf8(a, lo);
  detail::append_utf8(b, hi);
  const size_t n = a.size();
  // Split until every byte position ranges independently: below the first differing byte, lo's
  // continuation bytes must be all minimal and hi's all maximal.
  for (size_t i = 1; i < n; ++i) {
    const uint32_t m = (uint32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) == (hi & ~m)) continue;
    if ((lo & m) != 0) {
      utf8_sequences(lo, lo | m, emit);
      utf8_sequences((lo | m) + 1, hi, emit);
      return;
    }
    if ((hi & m) != m) {
      utf8_sequences(lo, (hi & ~m) - 1, emit);
      utf8_sequences(hi & ~m, hi, emit);
      return;
    }
  }
  ByteRange seq[4];
  for (size_t i = 0; i < n; ++i) seq[i] = {static_cast<uint8_t>(a[i]), static_cast<uint8_t>(b[i])};
  emit(std::span<const ByteRange>(seq, n));
}

struct Nfa {
  struct Edge {
    ByteRange bytes;
    int32_t to;
  };
  struct State {
    std::vector<Edge> edges;
    std::vector<int32_t> epsilon;
    std::vector<RegexDfa::Call> calls;  // rule, then state
  };
  std::vector<State> states;
};

}  // namespace

class RegexDfaBuilder {
 public:
  RegexDfaBuilder(const regex::Ast& ast, std::string_view what) : ast_(ast), what_(what) {}

  std::shared_ptr<const RegexDfa> build(int32_t root) {
    const int32_t start = add_state();
    accept_ = fragment(root, start);
    auto dfa = std::shared_ptr<RegexDfa>(new RegexDfa());
    determinize(*dfa);
    dfa->remove_dead_states(what_);
    return dfa;
  }

 private:
  using Kind = regex::Node::Kind;

  [[noreturn]] void fail(const std::string& what) const {
    throw ValueError(std::string(what_) + " " + what);
  }

  int32_t add_state() {
    if (nfa_.states.size() >= kMaxNfaStates)
      fail("is too large once its repeats are expanded (more than " +
           std::to_string(kMaxNfaStates) + " automaton states)");
    nfa_.states.emplace_back();
    return static_cast<int32_t>(nfa_.states.size() - 1);
  }
  void epsilon(int32_t from, int32_t to) {
    nfa_.states[static_cast<size_t>(from)].epsilon.push_back(to);
  }

  // Adds the states of node's texts starting from state `from`; returns their end state.
  int32_t fragment(int32_t node, int32_t from) {
    const regex::Node& n = ast_.nodes[static_cast<size_t>(node)];
    switch (n.kind) {
      case Kind::Empty:
        return from;
      case Kind::Chars: {
        const int32_t end = add_state();
        for (const regex::CodeRange r : n.ranges)
          utf8_sequences(r.lo, r.hi, [&](std::span<const ByteRange> seq) {
            int32_t at = from;
            for (size_t i = 0; i < seq.size(); ++i) {
              const int32_t to = i + 1 == seq.size() ? end : add_state();
              nfa_.states[static_cast<size_t>(at)].edges.push_back({seq[i], to});
              at = to;
            }
          });
        return end;
      }
      case Kind::Concat:
        for (int32_t child : n.children) from = fragment(child, from);
        return from;
      case Kind::Alt: {
        const int32_t end = add_state();
        for (int32_t child : n.children) {
          const int32_t begin = add_state();
          epsilon(from, begin);
          epsilon(fragment(child, begin), end);
        }
        return end;
      }
      case Kind::Call: {
        const int32_t end = add_state();
        nfa_.states[static_cast<size_t>(from)].calls.push_back({n.rule, end});
        return end;
      }
      case Kind::Repeat: {
        const int32_t child = n.children[0];
        for (int32_t i = 0; i < n.min; ++i) from = fragment(child, from);
        if (n.max < 0) {  // a loop through one more copy
          const int32_t loop = add_state();
          epsilon(from, loop);
          epsilon(fragment(child, loop), loop);
          return loop;
        }
        const int32_t end = add_state();
        for (int32_t i = n.min; i < n.max; ++i) {
          epsilon(from, end);
          from = fragment(child, from);
        }
        epsilon(from, end);
        return end;
      }
    }
    return from;
  }

  // The states reachable from `set` by epsilon moves, sorted, into `set`.
  void close(std::vector<int32_t>& set) {
    if (seen_.size() < nfa_.states.size()) seen_.resize(nfa_.states.size(), 0);
    ++mark_;
    std::vector<int32_t> stack = set;
    set.clear();
    while (!stack.empty()) {
      const int32_t s = stack.back();
      stack.pop_back();
      if (seen_[static_cast<size_t>(s)] == mark_) continue;
      seen_[static_cast<size_t>(s)] = mark_;
      set.push_back(s);
      for (int32_t t : nfa_.states[static_cast<size_t>(s)].epsilon) stack.push_back(t);
    }
    std::sort(set.begin(), set.end());
  }

  void determinize(RegexDfa& dfa) {
    std::array<bool, 257> boundary{};
    for (const Nfa::State& s : nfa_.states)
      for (const Nfa::Edge& e : s.edges) boundary[e.bytes.lo] = boundary[e.bytes.hi + 1] = true;
    size_t cls = 0;
    for (size_t b = 0; b < 256; ++b)
      dfa.byte_class_[b] = static_cast<uint8_t>(cls += b > 0 && boundary[b]);
    dfa.classes_ = cls + 1;

    std::map<std::vector<int32_t>, int32_t> ids;
    std::vector<std::vector<int32_t>> sets;
    auto id_of = [&](std::vector<int32_t>&& set) {
      const auto [it, added] = ids.emplace(std::move(set), static_cast<int32_t>(sets.size()));
      if (added) {
        if (static_cast<int64_t>(sets.size()) >= RegexDfa::kMaxStates)
          fail("needs more than " + std::to_string(RegexDfa::kMaxStates) + " automaton states");
        sets.push_back(it->first);
      }
      return it->second;
    };
    std::vector<int32_t> start{0};
    close(start);
    id_of(std::move(start));
    std::vector<std::vector<int32_t>> moves(dfa.classes_);
    std::map<int32_t, std::vector<int32_t>> calls;  // rule -> the NFA states after it
    for (size_t d = 0; d < sets.size(); ++d) {
      for (auto& m : moves) m.clear();
      calls.clear();
      for (int32_t s : sets[d]) {
        for (const Nfa::Edge& e : nfa_.states[static_cast<size_t>(s)].edges)
          for (size_t c = dfa.byte_class_[e.bytes.lo]; c <= dfa.byte_class_[e.bytes.hi]; ++c)
            moves[c].push_back(e.to);
        for (const RegexDfa::Call& c : nfa_.states[static_cast<size_t>(s)].calls)
          calls[c.rule].push_back(c.next);
      }
      dfa.accepting_.push_back(std::binary_search(sets[d].begin(), sets[d].end(), accept_));
      dfa.calls_begin_.push_back(dfa.calls_.size());
      for (auto& [rule, next] : calls) {
        close(next);
        dfa.calls_.push_back({rule, id_of(std::move(next))});
      }
      for (auto& m : moves) {
        if (m.empty()) {
          dfa.next_.push_back(RegexDfa::kDead);
          continue;
        }
        close(m);
        dfa.next_.push_back(id_of(std::move(m)));  // m is cleared for the next state
      }
    }
  }

  const regex::Ast& ast_;
  std::string_view what_;
  Nfa nfa_;
  int32_t accept_ = 0;
  std::vector<uint32_t> seen_;
  uint32_t mark_ = 0;
};

void RegexDfa::remove_dead_states(std::string_view what) {
  const size_t n = accepting_.size(), k = classes_;
  calls_begin_.push_back(calls_.size());
  std::vector<std::vector<int32_t>> from(n);
  for (size_t s = 0; s < n; ++s) {
    for (size_t c = 0; c < k; ++c)
      if (const int32_t t = next_[s * k + c]; t != kDead)
        from[static_cast<size_t>(t)].push_back(static_cast<int32_t>(s));
    for (const Call& c : calls(static_cast<int32_t>(s)))
      from[static_cast<size_t>(c.next)].push_back(static_cast<int32_t>(s));
  }
  std::vector<uint8_t> live(accepting_);
  std::vector<int32_t> queue;
  for (size_t s = 0; s < n; ++s)
    if (live[s]) queue.push_back(static_cast<int32_t>(s));
  while (!queue.empty()) {
    const int32_t t = queue.back();
    queue.pop_back();
    for (int32_t s : from[static_cast<size_t>(t)])
      if (!live[static_cast<size_t>(s)]) {
        live[static_cast<size_t>(s)] = 1;
        queue.push_back(s);
      }
  }
  if (!live[0]) throw ValueError(std::string(what) + " matches no text");
  std::vector<int32_t> renumber(n, kDead);
  int32_t kept = 0;
  for (size_t s = 0; s < n; ++s)
    if (live[s]) renumber[s] = kept++;
  std::vector<int32_t> kept_next;
  std::vector<uint8_t> kept_accepting, kept_final;
  std::vector<size_t> kept_calls_begin;
  std::vector<Call> kept_calls;
  for (size_t s = 0; s < n; ++s) {
    if (!live[s]) continue;
    bool any = false;
    for (size_t c = 0; c < k; ++c) {
      const int32_t t = next_[s * k + c];
      kept_next.push_back(t == kDead ? t : renumber[static_cast<size_t>(t)]);
      any |= kept_next.back() != kDead;
    }
    kept_calls_begin.push_back(kept_calls.size());
    for (const Call& c : calls(static_cast<int32_t>(s)))
      if (live[static_cast<size_t>(c.next)])
        kept_calls.push_back({c.rule, renumber[static_cast<size_t>(c.next)]});
    any |= kept_calls.size() > kept_calls_begin.back();
    kept_accepting.push_back(accepting_[s]);
    kept_final.push_back(accepting_[s] && !any);
  }
  kept_calls_begin.push_back(kept_calls.size());
  next_ = std::move(kept_next);
  accepting_ = std::move(kept_accepting);
  final_ = std::move(kept_final);
  calls_begin_ = std::move(kept_calls_begin);
  calls_ = std::move(kept_calls);
}

std::shared_ptr<const RegexDfa> regex::compile(const Ast& ast, int32_t root,
                                               std::string_view what) {
  return RegexDfaBuilder(ast, what).build(root);
}

std::shared_ptr<const RegexDfa> RegexDfa::compile(std::string_view pattern, Match match) {
  const regex::Ast ast = regex::parse(pattern, match);
  return regex::compile(ast, ast.root, "[Regex] '" + std::string(pattern) + "'");
}

}  // namespace tessera::infer
