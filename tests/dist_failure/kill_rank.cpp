// A rank killed in the middle of a step: rank 1 raises SIGKILL on itself while an all_reduce is
// in flight, inside a loop of them. The job must end, non-zero, within seconds: mpirun notices the
// dead process and takes the others down. Should the launcher not, the survivors' deadline
// (TESSERA_DIST_TIMEOUT) turns their wait into a DistributedError, reported here before
// dist::abort() as the trainer does. Run by expect_job_fails.sh (ctest dist.killed_rank_*).
#include <csignal>
#include <iostream>

#include "tessera/dist/process_group_mpi.h"
#include "tessera/ops/creation.h"

int main() {
  using namespace tessera;
  const dist::Environment env = dist::init();
  auto pg = dist::ProcessGroupMPI::world();
  constexpr int kSteps = 200;
  constexpr int kKillAt = 50;
  Tensor grad = ones({1 << 16});
  try {
    for (int step = 0; step < kSteps; ++step) {
      dist::WorkHandle w = pg->all_reduce(grad, dist::ReduceOp::Avg);
      if (pg->rank() == 1 && step == kKillAt) {
        std::cerr << "[kill_rank] rank 1 kills itself at step " << step << std::endl;
        std::raise(SIGKILL);
      }
      w->wait();
    }
  } catch (const DistributedError& e) {
    std::cerr << "[kill_rank] rank " << env.rank << ": " << e.what() << std::endl;
    dist::abort(1);
  }
  pg.reset();
  dist::finalize();
  std::cout << "[kill_rank] rank " << env.rank << " finished every step" << std::endl;
  return 0;
}
