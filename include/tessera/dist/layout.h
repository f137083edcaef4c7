#pragma once
// World = DP x TP x PP in Megatron order: TP varies fastest, then DP, then PP, so the ranks of a
// TP group are neighbours (one node) and PP stages are the largest strides apart.
//   rank = (pp * dp_size + dp) * tp_size + tp
#include <array>
#include <vector>

namespace tessera::dist {

enum class Axis { DP, TP, PP };
const char* axis_name(Axis axis);

struct Coords {
  int dp = 0;
  int tp = 0;
  int pp = 0;
  bool operator==(const Coords&) const = default;
};

class Layout {
 public:
  // Throws ValueError unless every size is >= 1.
  Layout(int dp, int tp, int pp);
  // dp = world_size / (tp * pp); throws ValueError unless tp * pp divides world_size.
  static Layout from_world(int world_size, int tp, int pp);

  int size(Axis axis) const;
  int world_size() const { return dp_ * tp_ * pp_; }
  // Throws IndexError for coordinates or ranks out of range.
  int rank_of(const Coords& c) const;
  Coords coords_of(int rank) const;
  // The ranks that share every coordinate of `rank` except `axis`, ordered by that axis: the
  // group `rank` belongs to along `axis` (its index in the list is its rank in the group).
  std::vector<int> group_ranks(Axis axis, int rank) const;
  // Every group along `axis`: a partition of the world into world_size / size(axis) groups,
  // ordered by their smallest rank.
  std::vector<std::vector<int>> groups(Axis axis) const;
  // Index of `rank`'s group in groups(axis): the color to split a communicator by.
  int group_index(Axis axis, int rank) const;

 private:
  int dp_, tp_, pp_;
};

}  // namespace tessera::dist
