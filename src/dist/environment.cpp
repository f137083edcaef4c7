#include "tessera/dist/environment.h"

#include <cstdlib>
#include <string>

#include "tessera/core/error.h"

namespace tessera::dist {
namespace {

struct Scheme {
  const char* launcher;
  const char* rank;
  const char* size;
  const char* local_rank;
};
// First match wins; see environment.h for why OpenMPI comes before Slurm.
constexpr Scheme kSchemes[] = {
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
};

int parse_int(const char* name, const char* value) {
  std::string s(value);
  size_t used = 0;
  int v = 0;
  try {
    v = std::stoi(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  TESSERA_CHECK(used > 0 && used == s.size(), ValueError,
                "[dist.environment] expected an integer in ", name, ", got '", s, "'");
  return v;
}

}  // namespace

Environment environment_from(const std::function<const char*(const char*)>& getenv) {
  for (const Scheme& s : kSchemes) {
    const char* rank = getenv(s.rank);
    const char* size = getenv(s.size);
    if (rank == nullptr || size == nullptr) continue;
    Environment env;
    env.launcher = s.launcher;
    env.rank = parse_int(s.rank, rank);
    env.world_size = parse_int(s.size, size);
    const char* local = getenv(s.local_rank);
    env.local_rank = local ? parse_int(s.local_rank, local) : 0;
    TESSERA_CHECK(env.world_size >= 1, ValueError, "[dist.environment] expected ", s.size,
                  " >= 1, got ", env.world_size);
    TESSERA_CHECK(env.rank >= 0 && env.rank < env.world_size, ValueError,
                  "[dist.environment] expected ", s.rank, " in [0, ", env.world_size, "), got ",
                  env.rank);
    TESSERA_CHECK(env.local_rank >= 0 && env.local_rank < env.world_size, ValueError,
                  "[dist.environment] expected ", s.local_rank, " in [0, ", env.world_size,
                  "), got ", env.local_rank);
    return env;
  }
  return Environment{};
}

Environment environment_from_env() {
  return environment_from([](const char* name) { return std::getenv(name); });
}

}  // namespace tessera::dist
