// `tessera bench comm`: the comm suite under mpirun, or one mpirun launch per rank count.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "bench_common.h"
#include "tessera/bench/subprocess.h"
#include "tessera/core/error.h"
#include "tessera/dist/environment.h"
#ifdef TESSERA_WITH_MPI
#include "tessera/dist/process_group_mpi.h"
#endif

namespace tessera::cli {
namespace {

#ifdef TESSERA_WITH_MPI
// This rank's part: every rank measures, rank 0 reports.
int run_as_rank(const BenchCommon& c, const bench::CommOptions& options) {
  dist::init();
  int code = 0;
  {
    auto pg = dist::ProcessGroupMPI::world();
    bench::Result r = start_bench("comm", c);
    std::shared_ptr<ProgressBar> bar;
    bench::CommOptions o = options;
    o.quick = c.quick;
    if (pg->rank() == 0) o.progress = progress_bar(bar);
    bench::run_comm_suite(r, *pg, o);
    if (bar) bar->clear();
    if (pg->rank() == 0) code = finish_bench(r, c);
  }
  dist::finalize();
  return code;
}

// Launches `mpirun -np n` of this program for each n, each writing a JSON result; merges them.
int launch_each(const BenchCommon& c, const std::vector<int>& ranks,
                const std::vector<std::string>& collectives, int64_t max_bytes) {
  bench::Result merged = start_bench("comm", c);
  char tmpl[] = "/tmp/tessera-bench-comm-XXXXXX";
  TESSERA_CHECK(mkdtemp(tmpl), RuntimeError, "[bench.comm] expected a temporary folder, got none");
  const std::string dir = tmpl;
  for (int n : ranks) {
    TESSERA_CHECK(n >= 1, ValueError, "[bench.comm] expected rank counts >= 1, got ", n);
    const std::string json = dir + "/np" + std::to_string(n) + ".json";
    std::vector<std::string> argv{TESSERA_MPIEXEC,   "--allow-run-as-root",
                                  "--oversubscribe", "-np",
                                  std::to_string(n), self_exe(),
                                  "bench",           "comm",
                                  "--json",          json,
                                  "--max-bytes",     std::to_string(max_bytes)};
    if (c.quick) argv.push_back("--quick");
    if (!collectives.empty()) {
      std::string list;
      for (const auto& name : collectives) list += (list.empty() ? "" : ",") + name;
      argv.insert(argv.end(), {"--collectives", list});
    }
    // One thread per rank: ranks on a few cores must not fight over OpenMP teams.
    argv.insert(argv.end(), {"--threads", std::to_string(c.threads > 0 ? c.threads : 1)});
    std::fprintf(stderr, "bench comm: %d ranks\n", n);
    const bench::ProcessResult p = bench::run_process(argv);
    TESSERA_CHECK(p.exit_code == 0 && std::filesystem::exists(json), RuntimeError,
                  "[bench.comm] expected mpirun -np ", n, " to succeed, got exit code ",
                  p.exit_code, ": ", p.err.substr(0, 2000));
    for (auto& f : bench::Result::load(json).figures) merged.add(std::move(f));
  }
  std::filesystem::remove_all(dir);
  return finish_bench(merged, c);
}
#endif

}  // namespace

int run_comm_command(const BenchCommon& c, bench::CommOptions options,
                     const std::vector<int>& ranks, const std::vector<std::string>& collectives) {
  if (!collectives.empty()) {
    options.collectives.clear();
    for (const auto& name : collectives)
      options.collectives.push_back(bench::parse_collective(name));
  }
#ifdef TESSERA_WITH_MPI
  if (dist::environment_from_env().launcher != "none") return run_as_rank(c, options);
  return launch_each(c, ranks, collectives, options.max_bytes);
#else
  throw NotImplementedError(
      "[bench.comm] expected a build with MPI (libopenmpi-dev), got one without it");
#endif
}

}  // namespace tessera::cli
