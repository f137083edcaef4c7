#pragma once
// The process groups of a DP x TP x PP layout (layout.h) over MPI: what a model-parallel run
// needs on each rank. Every rank of `world` must call make_layout_groups (the groups are made
// by collective splits).
#include <memory>

#include "tessera/dist/layout.h"
#include "tessera/dist/process_group_mpi.h"

namespace tessera::dist {

struct LayoutGroups {
  Coords coords;  // this rank's place in the layout
  // This rank's group along each axis (rank in the group = the coordinate on that axis).
  std::shared_ptr<ProcessGroupMPI> dp, tp, pp;
  // The first and last pipeline stage sharing this rank's DP and TP coordinates, where a tied
  // embedding lives twice; null on middle stages and with one stage.
  std::shared_ptr<ProcessGroupMPI> embedding;
};

// ValueError unless layout.world_size() is world's size.
LayoutGroups make_layout_groups(ProcessGroupMPI& world, const Layout& layout);

}  // namespace tessera::dist
