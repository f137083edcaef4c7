#include "data_parallel.h"

#include <chrono>
#include <cstdio>

#include "tessera/core/error.h"
#include "tessera/dist/environment.h"
#include "tessera/ops/creation.h"
#ifdef TESSERA_WITH_MPI
#include "tessera/dist/layout_groups.h"
#endif

namespace tessera::cli {

bool DataParallel::agree(bool flag) const {
  if (!group) return flag;
  Tensor t = scalar_tensor(flag ? 1 : 0, TensorOptions(kInt32));
  group->broadcast(t, 0)->wait();
  return t.item<int32_t>() != 0;
}

DataParallel start_data_parallel(const TrainOptions& o) {
  const dist::Environment env = dist::environment_from_env();
  const int world = o.dp * o.tp * o.pp;
  if (world == 1 && env.world_size == 1) return {};
  TESSERA_CHECK(env.world_size == world, ValueError, "[train] expected ", world,
                " processes for --dp ", o.dp, " x --tp ", o.tp, " x --pp ", o.pp, " (mpirun -np ",
                world, "), got ", env.world_size,
                env.launcher == "none" ? " (no launcher)" : " from " + env.launcher);
#ifdef TESSERA_WITH_MPI
  dist::init();
  auto pg = dist::ProcessGroupMPI::world();
  pg->set_timeout(std::chrono::milliseconds(static_cast<int64_t>(o.dist_timeout * 1000)));
  const dist::LayoutGroups groups = dist::make_layout_groups(*pg, dist::Layout(o.dp, o.tp, o.pp));
  DataParallel dp{pg->rank(), pg->size(), pg};
  dp.dp_rank = groups.coords.dp;
  dp.dp_size = o.dp;
  dp.tp = o.tp;
  dp.pp = o.pp;
  dp.pp_rank = groups.coords.pp;
  dp.dp_group = groups.dp;
  dp.tp_group = groups.tp;
  dp.pp_group = groups.pp;
  dp.embedding_group = groups.embedding;
  return dp;
#else
  throw ValueError(
      "[train] expected a build with MPI for more than one process (install libopenmpi-dev and "
      "rebuild), got one without");
#endif
}

void stop_data_parallel(DataParallel& dp) {
  if (!dp.group) return;
  dp = DataParallel{};  // every group released before MPI ends
#ifdef TESSERA_WITH_MPI
  dist::finalize();
#endif
}

void abort_data_parallel(const DataParallel& dp, const std::exception& error) {
  std::fprintf(stderr, "tessera: rank %d of %d: %s\n", dp.rank, dp.size, error.what());
  std::fflush(stderr);
#ifdef TESSERA_WITH_MPI
  dist::abort(1);
#else
  std::exit(1);
#endif
}

}  // namespace tessera::cli
