#include "data_parallel.h"

#include <algorithm>
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

int64_t DataParallel::newest_common_step(const std::vector<int64_t>& steps) const {
  auto all_min = [&](int64_t v) {
    if (!group) return v;
    Tensor t = scalar_tensor(v, TensorOptions(kInt64));
    group->all_reduce(t, dist::ReduceOp::Min)->wait();
    return t.item<int64_t>();
  };
  int64_t candidate = steps.empty() ? -1 : steps.back();
  // Each round every rank proposes its newest step not past the last candidate; the smallest
  // proposal is never below the answer, and it drops until every rank holds it.
  for (;;) {
    candidate = all_min(candidate);
    if (candidate < 0) return -1;
    const bool held = std::binary_search(steps.begin(), steps.end(), candidate);
    if (all_min(held ? 1 : 0) == 1) return candidate;
    auto older = std::lower_bound(steps.begin(), steps.end(), candidate);
    candidate = older == steps.begin() ? -1 : *std::prev(older);
  }
}

void DataParallel::barrier() const {
  if (group) group->barrier()->wait();
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
