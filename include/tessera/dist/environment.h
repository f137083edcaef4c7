#pragma once
// Rank, world size and local rank as the launcher tells them: mpirun (OpenMPI), torchrun-style
// launchers, or srun (Slurm). A process started on its own is rank 0 of 1.
#include <functional>
#include <string>

namespace tessera::dist {

struct Environment {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;             // index among the processes on this node
  std::string launcher = "none";  // "openmpi", "torchrun", "slurm" or "none"
};

// Reads the launcher's variables, first match wins: OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK},
// then RANK/WORLD_SIZE/LOCAL_RANK, then SLURM_{PROCID,NTASKS,LOCALID}. mpirun inside a Slurm
// allocation sets both OpenMPI's and Slurm's; OpenMPI's describe this process, so they come
// first. Throws ValueError on values that are not integers or a rank outside [0, world_size).
Environment environment_from_env();
// The same, reading variables through `getenv` (tests pass a map).
Environment environment_from(const std::function<const char*(const char*)>& getenv);

}  // namespace tessera::dist
