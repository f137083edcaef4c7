#include "tessera/dist/layout_groups.h"

#include "tessera/core/error.h"

namespace tessera::dist {

LayoutGroups make_layout_groups(ProcessGroupMPI& world, const Layout& layout) {
  TESSERA_CHECK(layout.world_size() == world.size(), ValueError, "[make_layout_groups] expected ",
                "a layout of the world's ", world.size(), " ranks, got dp=", layout.size(Axis::DP),
                " tp=", layout.size(Axis::TP), " pp=", layout.size(Axis::PP));
  LayoutGroups g;
  const int rank = world.rank();
  g.coords = layout.coords_of(rank);
  const int keys[] = {g.coords.dp, g.coords.tp, g.coords.pp};
  std::shared_ptr<ProcessGroupMPI>* slots[] = {&g.dp, &g.tp, &g.pp};
  int i = 0;
  for (Axis axis : {Axis::DP, Axis::TP, Axis::PP}) {
    *slots[i] = world.split(layout.group_index(axis, rank), keys[i], axis_name(axis));
    ++i;
  }
  const int pp = layout.size(Axis::PP);
  if (pp == 1) return g;
  for (int dp = 0; dp < layout.size(Axis::DP); ++dp)
    for (int tp = 0; tp < layout.size(Axis::TP); ++tp) {
      auto group = world.new_group({layout.rank_of({dp, tp, 0}), layout.rank_of({dp, tp, pp - 1})},
                                   "embedding");
      if (group && g.coords.dp == dp && g.coords.tp == tp) g.embedding = group;
    }
  return g;
}

}  // namespace tessera::dist
