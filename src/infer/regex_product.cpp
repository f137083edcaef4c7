// Products of a RegexDfa with another automaton over bytes: a second DFA (intersection) or a
// counter of code points (length bounds). The pair states reachable from the start are built
// breadth-first over the classes of bytes neither side tells apart, then the pairs that cannot
// reach a match are removed, as for a compiled pattern.
#include <algorithm>
#include <unordered_map>

#include "tessera/core/error.h"
#include "tessera/infer/regex.h"

namespace tessera::infer {

namespace {

// The other side of an intersection: another regular expression's DFA.
struct DfaSide {
  const RegexDfa& dfa;
  uint8_t byte_class(uint8_t c) const { return dfa.byte_class(c); }
  int32_t start() const { return dfa.start(); }
  int32_t step(int32_t state, uint8_t c) const { return dfa.step(state, c); }
  bool accepting(int32_t state) const { return dfa.accepting(state); }
};

// Counts code points (every byte but a UTF-8 continuation byte starts one); its state is the
// count, held at min_chars when there is no maximum, where more no longer matters.
struct LengthSide {
  int64_t min_chars, max_chars;
  static bool continuation(uint8_t c) { return c >= 0x80 && c < 0xC0; }
  uint8_t byte_class(uint8_t c) const { return continuation(c); }
  int32_t start() const { return 0; }
  int32_t step(int32_t count, uint8_t c) const {
    if (continuation(c)) return count;
    if (max_chars < 0) return static_cast<int32_t>(std::min<int64_t>(count + 1, min_chars));
    return count < max_chars ? count + 1 : RegexDfa::kDead;
  }
  bool accepting(int32_t count) const { return count >= min_chars; }
};

}  // namespace

template <class Other>
std::shared_ptr<const RegexDfa> RegexDfa::product(const RegexDfa& a, const Other& b,
                                                  std::string_view what) {
  TESSERA_CHECK(a.calls_.empty(), ValueError, what,
                ": of regular expressions only, not grammar rules");
  auto dfa = std::shared_ptr<RegexDfa>(new RegexDfa());
  std::vector<uint8_t> representative;  // a byte of each class
  std::unordered_map<int32_t, uint8_t> class_of;
  for (int byte = 0; byte < 256; ++byte) {
    const auto c = static_cast<uint8_t>(byte);
    const int32_t key = a.byte_class(c) << 8 | b.byte_class(c);
    const auto [it, added] = class_of.emplace(key, static_cast<uint8_t>(representative.size()));
    if (added) representative.push_back(c);
    dfa->byte_class_[c] = it->second;
  }
  dfa->classes_ = representative.size();

  std::unordered_map<int64_t, int32_t> ids;
  std::vector<std::pair<int32_t, int32_t>> pairs;
  auto id_of = [&](int32_t sa, int32_t sb) {
    const int64_t key = int64_t{sa} << 32 | static_cast<uint32_t>(sb);
    const auto [it, added] = ids.emplace(key, static_cast<int32_t>(pairs.size()));
    if (added) {
      TESSERA_CHECK(
          static_cast<int64_t>((pairs.size() + 1) * representative.size()) <= kMaxProductEntries,
          ValueError, what, " needs more than ", kMaxProductEntries,
          " automaton table entries (states x byte classes)");
      pairs.emplace_back(sa, sb);
    }
    return it->second;
  };
  id_of(a.start(), b.start());
  for (size_t d = 0; d < pairs.size(); ++d) {
    const auto [sa, sb] = pairs[d];
    dfa->accepting_.push_back(a.accepting(sa) && b.accepting(sb));
    dfa->calls_begin_.push_back(0);
    for (const uint8_t c : representative) {
      const int32_t ta = a.step(sa, c), tb = ta == kDead ? kDead : b.step(sb, c);
      dfa->next_.push_back(tb == kDead ? kDead : id_of(ta, tb));
    }
  }
  dfa->remove_dead_states(what);
  return dfa;
}

std::shared_ptr<const RegexDfa> RegexDfa::intersect(const RegexDfa& a, const RegexDfa& b) {
  constexpr std::string_view what = "[Regex] the intersection";
  TESSERA_CHECK(b.calls_.empty(), ValueError, what,
                ": of regular expressions only, not grammar rules");
  return product(a, DfaSide{b}, what);
}

std::shared_ptr<const RegexDfa> RegexDfa::with_length(const RegexDfa& dfa, int64_t min_chars,
                                                      int64_t max_chars) {
  TESSERA_CHECK(min_chars >= 0 && min_chars < INT32_MAX && max_chars < INT32_MAX, ValueError,
                "[Regex] lengths from 0 to ", INT32_MAX - 1, " characters, got ", min_chars, " to ",
                max_chars);
  return product(dfa, LengthSide{min_chars, max_chars},
                 "[Regex] the pattern within " + std::to_string(min_chars) + " to " +
                     (max_chars < 0 ? std::string("any number of") : std::to_string(max_chars)) +
                     " characters");
}

}  // namespace tessera::infer
