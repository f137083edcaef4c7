#pragma once
// The merge loop shared by byte-pair encoders: repeatedly replace the adjacent pair with the
// highest priority (ties: the leftmost) by its merged token until no pair can merge.
//
// GPT-2's reference rescans the word after each merge (O(n^2)); a heap with lazy invalidation
// gives the same result in O(n log n), which matters for long pieces (whitespace runs, whole
// documents in the llama2.c encoder). Positions are the original symbol indices; a merged
// symbol keeps its left index, so index order is sequence order and "leftmost" is well defined.
#include <cstdint>
#include <optional>
#include <queue>
#include <vector>

namespace tessera::detail {

struct PairMerge {
  double priority;  // higher merges first
  int32_t merged;   // the id replacing the pair
};

// pair(left, right) -> the merge of two adjacent ids, or nullopt when they do not merge.
template <class PairFn>
void greedy_merge(std::vector<int32_t>& ids, PairFn&& pair) {
  const int64_t n = static_cast<int64_t>(ids.size());
  if (n < 2) return;
  struct Candidate {
    double priority;
    int64_t left;
    int32_t left_id, right_id, merged;
    bool operator<(const Candidate& o) const {  // max-heap: higher priority, then smaller index
      return priority != o.priority ? priority < o.priority : left > o.left;
    }
  };
  std::vector<int64_t> prev(n), next(n);
  std::vector<bool> alive(n, true);
  for (int64_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  std::priority_queue<Candidate> heap;
  const auto push = [&](int64_t left) {
    if (left < 0 || next[left] < 0) return;
    const int32_t a = ids[left], b = ids[next[left]];
    if (std::optional<PairMerge> m = pair(a, b)) heap.push({m->priority, left, a, b, m->merged});
  };
  for (int64_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    // Stale entries: one side has merged since the entry was pushed.
    const int64_t r = next[c.left];
    if (!alive[c.left] || r < 0 || ids[c.left] != c.left_id || ids[r] != c.right_id) continue;
    ids[c.left] = c.merged;
    alive[r] = false;
    next[c.left] = next[r];
    if (next[r] >= 0) prev[next[r]] = c.left;
    push(prev[c.left]);
    push(c.left);
  }
  int64_t out = 0;
  for (int64_t i = 0; i < n; ++i)
    if (alive[i]) ids[out++] = ids[i];
  ids.resize(out);
}

}  // namespace tessera::detail
