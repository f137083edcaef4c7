#include "tessera/dist/layout.h"

#include "tessera/core/error.h"

namespace tessera::dist {

const char* axis_name(Axis axis) {
  switch (axis) {
    case Axis::DP:
      return "dp";
    case Axis::TP:
      return "tp";
    case Axis::PP:
      return "pp";
  }
  return "?";
}

Layout::Layout(int dp, int tp, int pp) : dp_(dp), tp_(tp), pp_(pp) {
  TESSERA_CHECK(dp >= 1 && tp >= 1 && pp >= 1, ValueError,
                "[Layout] expected dp, tp and pp >= 1, got dp=", dp, " tp=", tp, " pp=", pp);
}

Layout Layout::from_world(int world_size, int tp, int pp) {
  TESSERA_CHECK(tp >= 1 && pp >= 1 && world_size >= 1 && world_size % (tp * pp) == 0, ValueError,
                "[Layout] expected tp * pp to divide the world size ", world_size, ", got tp=", tp,
                " pp=", pp);
  return Layout(world_size / (tp * pp), tp, pp);
}

int Layout::size(Axis axis) const {
  switch (axis) {
    case Axis::DP:
      return dp_;
    case Axis::TP:
      return tp_;
    case Axis::PP:
      return pp_;
  }
  return 0;
}

int Layout::rank_of(const Coords& c) const {
  TESSERA_CHECK(c.dp >= 0 && c.dp < dp_ && c.tp >= 0 && c.tp < tp_ && c.pp >= 0 && c.pp < pp_,
                IndexError, "[Layout.rank_of] expected coordinates within dp=", dp_, " tp=", tp_,
                " pp=", pp_, ", got (dp=", c.dp, ", tp=", c.tp, ", pp=", c.pp, ")");
  return (c.pp * dp_ + c.dp) * tp_ + c.tp;
}

Coords Layout::coords_of(int rank) const {
  TESSERA_CHECK(rank >= 0 && rank < world_size(), IndexError,
                "[Layout.coords_of] expected a rank in [0, ", world_size(), "), got ", rank);
  return Coords{(rank / tp_) % dp_, rank % tp_, rank / (tp_ * dp_)};
}

std::vector<int> Layout::group_ranks(Axis axis, int rank) const {
  Coords c = coords_of(rank);
  std::vector<int> ranks;
  for (int i = 0; i < size(axis); ++i) {
    Coords m = c;
    (axis == Axis::DP ? m.dp : axis == Axis::TP ? m.tp : m.pp) = i;
    ranks.push_back(rank_of(m));
  }
  return ranks;
}

int Layout::group_index(Axis axis, int rank) const {
  // Number the groups by their smallest member, i.e. by the coordinates left once `axis` is 0.
  Coords c = coords_of(rank);
  switch (axis) {
    case Axis::TP:
      return c.pp * dp_ + c.dp;
    case Axis::DP:
      return c.pp * tp_ + c.tp;
    case Axis::PP:
      return c.dp * tp_ + c.tp;
  }
  return 0;
}

std::vector<std::vector<int>> Layout::groups(Axis axis) const {
  std::vector<std::vector<int>> out(world_size() / size(axis));
  for (int r = 0; r < world_size(); ++r) {
    auto& g = out[group_index(axis, r)];
    if (g.empty()) g = group_ranks(axis, r);
  }
  return out;
}

}  // namespace tessera::dist
