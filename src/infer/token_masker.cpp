// TokenMasker: the vocabulary as a pre-order byte trie, walked with one matcher state per depth.
#include <algorithm>
#include <numeric>

#include "tessera/core/error.h"
#include "tessera/infer/structured_output.h"
#include "tokenizers/utf8.h"

namespace tessera::infer {

namespace {

// Whole UTF-8 characters that can stand in a JSON string without ending or escaping it.
bool plain_string_bytes(std::string_view b) {
  for (size_t i = 0; i < b.size();) {
    const auto c = static_cast<uint8_t>(b[i]);
    const detail::Utf8Char ch = detail::next_utf8(b, i);
    if (c == '"' || c == '\\' || c < 0x20 || ch.cp == detail::kInvalidCodepoint) return false;
    i += static_cast<size_t>(ch.len);
  }
  return !b.empty();
}

}  // namespace

void TokenMasker::Trie::build(const std::vector<std::string>& bytes,
                              const std::vector<int32_t>& ids) {
  token_order = ids;
  std::stable_sort(token_order.begin(), token_order.end(),
                   [&](int32_t a, int32_t b) { return bytes[a] < bytes[b]; });
  std::vector<uint32_t> path;  // the nodes of the last token's bytes
  auto close_to = [&](size_t depth) {
    for (; path.size() > depth; path.pop_back())
      subtree_end[path.back()] = static_cast<uint32_t>(byte.size());
  };
  for (size_t pos = 0; pos < token_order.size(); ++pos) {
    const std::string& b = bytes[static_cast<size_t>(token_order[pos])];
    size_t common = 0;
    while (common < path.size() && common < b.size() &&
           byte[path[common]] == static_cast<uint8_t>(b[common]))
      ++common;
    close_to(common);
    for (size_t k = common; k < b.size(); ++k) {
      path.push_back(static_cast<uint32_t>(byte.size()));
      byte.push_back(static_cast<uint8_t>(b[k]));
      depth.push_back(static_cast<uint16_t>(k + 1));
      max_depth = std::max(max_depth, depth.back());
      subtree_end.push_back(0);
      tokens_begin.push_back(0);
      tokens_end.push_back(0);
    }
    // Tokens with the same bytes sort together: a node's tokens are one range of token_order.
    const uint32_t node = path.back();
    if (tokens_begin[node] == tokens_end[node]) tokens_begin[node] = static_cast<uint32_t>(pos);
    tokens_end[node] = static_cast<uint32_t>(pos + 1);
  }
  close_to(0);
}

TokenMasker::TokenMasker(const tokenizers::Tokenizer& tokenizer,
                         std::span<const int32_t> excluded) {
  const int64_t V = tokenizer.vocab_size();
  token_bytes_.resize(static_cast<size_t>(V));
  plain_.assign(static_cast<size_t>(V), 0);
  std::vector<int32_t> all, special;
  for (int32_t t = 0; t < V; ++t) {
    if (std::find(excluded.begin(), excluded.end(), t) != excluded.end()) continue;
    std::string b = tokenizer.token_to_string(t);
    if (b.empty() || b.size() > UINT16_MAX) continue;
    plain_[t] = plain_string_bytes(b);
    all.push_back(t);
    if (!plain_[t]) special.push_back(t);
    token_bytes_[static_cast<size_t>(t)] = std::move(b);
  }
  all_.build(token_bytes_, all);
  special_.build(token_bytes_, special);
}

template <class Step>
void TokenMasker::walk(const Trie& trie, std::vector<uint8_t>& allowed, Step&& step) {
  // Node i's parent is the last node visited one level up, whose state is still at depth - 1.
  for (size_t i = 0, n = trie.byte.size(); i < n;) {
    if (!step(i)) {
      i = trie.subtree_end[i];
      continue;
    }
    for (uint32_t k = trie.tokens_begin[i]; k < trie.tokens_end[i]; ++k)
      allowed[static_cast<size_t>(trie.token_order[k])] = 1;
    ++i;
  }
}

void TokenMasker::allowed_tokens(const JsonMatcher& matcher, std::vector<uint8_t>& allowed) const {
  constexpr size_t kMaxCachedMasks = 64;
  if (!matcher.state_key(key_)) return compute(matcher, allowed);
  for (const CachedMask& m : cached_)
    if (m.grammar == matcher.grammar() && m.key == key_) {
      allowed = m.allowed;
      return;
    }
  compute(matcher, allowed);
  if (cached_.size() == kMaxCachedMasks) cached_.erase(cached_.begin());
  cached_.push_back({matcher.grammar(), key_, allowed});
}

void TokenMasker::compute(const JsonMatcher& matcher, std::vector<uint8_t>& allowed) const {
  int32_t state;
  if (const RegexDfa* re = matcher.only_dfa(state)) {
    allowed.assign(plain_.size(), 0);
    return walk_dfa(*re, state, allowed, nullptr);
  }
  if (matcher.rule_tops(tops_)) {  // a grammar: its top rules decide most tokens alone
    allowed.assign(plain_.size(), 0);
    open_.clear();
    for (const auto& [rule, at] : tops_) {
      const RuleMask& m = rule_mask(matcher.grammar(), rule, at);
      for (size_t t = 0; t < allowed.size(); ++t) allowed[t] |= m.taken[t];
      open_.insert(open_.end(), m.open.begin(), m.open.end());
    }
    std::sort(open_.begin(), open_.end());
    open_.erase(std::unique(open_.begin(), open_.end()), open_.end());
    return walk_open(matcher, open_, allowed);
  }
  start_matcher_walk(matcher);
  const Trie& trie = matcher.in_free_string() ? special_ : all_;
  if (&trie == &special_)
    allowed = plain_;
  else
    allowed.assign(plain_.size(), 0);
  walk(trie, allowed, [&](size_t i) { return matcher_step(trie, i); });
}

void TokenMasker::start_matcher_walk(const JsonMatcher& matcher) const {
  if (scratch_.size() < all_.max_depth + 1u) scratch_.resize(all_.max_depth + 1u, matcher);
  scratch_[0] = matcher;
}

bool TokenMasker::matcher_step(const Trie& trie, size_t i) const {
  const uint16_t d = trie.depth[i];
  return scratch_[d - 1].step_into(trie.byte[i], scratch_[d]);
}

void TokenMasker::walk_dfa(const RegexDfa& dfa, int32_t state, std::vector<uint8_t>& allowed,
                           std::vector<uint32_t>* open) const {
  regex_scratch_.resize(all_.max_depth + 1u);
  regex_scratch_[0] = state;
  walk(all_, allowed, [&](size_t i) {  // one table lookup per trie node
    const uint16_t d = all_.depth[i];
    const int32_t from = regex_scratch_[d - 1];
    // A call or, where the rule may end, its caller might take this byte instead.
    if (open != nullptr && (dfa.accepting(from) || !dfa.calls(from).empty())) {
      open->push_back(static_cast<uint32_t>(i));
      return false;
    }
    regex_scratch_[d] = dfa.step(from, all_.byte[i]);
    return regex_scratch_[d] != RegexDfa::kDead;
  });
}

void TokenMasker::walk_open(const JsonMatcher& matcher, std::span<const uint32_t> open,
                            std::vector<uint8_t>& allowed) const {
  if (open.empty()) return;
  start_matcher_walk(matcher);
  size_t next = 0;          // the first open node at or after the one visited
  uint32_t inside_end = 0;  // the end of the open subtree being walked
  walk(all_, allowed, [&](size_t i) {
    while (next < open.size() && open[next] < i) ++next;
    if (i >= inside_end) {
      if (next < open.size() && open[next] == i)
        inside_end = all_.subtree_end[i];
      else if (next == open.size() || open[next] >= all_.subtree_end[i])
        return false;  // nothing open below: the rule masks decided it
    }
    return matcher_step(all_, i);
  });
}

const TokenMasker::RuleMask& TokenMasker::rule_mask(
    const std::shared_ptr<const JsonGrammar>& grammar, int32_t rule, int32_t state) const {
  constexpr size_t kMaxRuleMasks = 128;
  for (const RuleMask& m : rule_masks_)
    if (m.grammar == grammar && m.rule == rule && m.state == state) return m;
  if (rule_masks_.size() == kMaxRuleMasks) rule_masks_.erase(rule_masks_.begin());
  RuleMask& m = rule_masks_.emplace_back(
      RuleMask{grammar, rule, state, std::vector<uint8_t>(plain_.size(), 0), {}});
  walk_dfa(grammar->node(grammar->root()).rules->rule(rule), state, m.taken, &m.open);
  return m;
}

int64_t TokenMasker::grammatical_prefix(const JsonMatcher& matcher,
                                        std::span<const int32_t> tokens) const {
  JsonMatcher m = matcher;
  int64_t n = 0;
  for (int32_t t : tokens) {
    // Excluded and byte-less tokens have no bytes here and are never allowed.
    if (t < 0 || t >= vocab_size() || bytes(t).empty() || !m.advance(bytes(t))) break;
    ++n;
    if (m.terminated()) break;
  }
  return n;
}

}  // namespace tessera::infer
