#include "data_parallel.h"

#include <chrono>
#include <cstdio>

#include "tessera/core/error.h"
#include "tessera/dist/environment.h"
#include "tessera/ops/creation.h"
#ifdef TESSERA_WITH_MPI
#include "tessera/dist/process_group_mpi.h"
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
  if (o.dp == 1 && env.world_size == 1) return {};
  TESSERA_CHECK(env.world_size == o.dp, ValueError, "[train] expected ", o.dp,
                " processes for --dp ", o.dp, " (mpirun -np ", o.dp, "), got ", env.world_size,
                env.launcher == "none" ? " (no launcher)" : " from " + env.launcher);
#ifdef TESSERA_WITH_MPI
  dist::init();
  auto world = dist::ProcessGroupMPI::world();
  world->set_timeout(std::chrono::milliseconds(static_cast<int64_t>(o.dist_timeout * 1000)));
  return {world->rank(), world->size(), world};
#else
  throw ValueError(
      "[train] expected a build with MPI for --dp > 1 (install libopenmpi-dev and "
      "rebuild), got one without");
#endif
}

void stop_data_parallel(DataParallel& dp) {
  if (!dp.group) return;
  dp.group.reset();
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
