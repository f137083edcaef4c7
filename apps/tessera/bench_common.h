#pragma once
// What every `tessera bench` suite command shares: its common options, the progress bar, and
// finishing a run (table, JSON, charts, comparison).
#include <CLI/CLI.hpp>

#include <memory>
#include <string>
#include <vector>

#include "progress_bar.h"
#include "tessera/bench/comm.h"
#include "tessera/bench/progress.h"
#include "tessera/bench/result.h"

namespace tessera::cli {

// bench/ of the source tree this binary was built from.
std::string default_torch_dir();

struct BenchCommon {
  std::string json, compare, svg_dir, hardware;
  std::string torch_dir = default_torch_dir();
  std::string python = "/usr/bin/python3";
  bool quick = false, no_torch = false;
  int threads = 0;
};

// Adds the common options to a suite's command; peers: also those of suites with a PyTorch side.
void add_bench_common(CLI::App* cmd, BenchCommon& c, bool peers);
// A result for suite stamped with the machine, commit, date and this process's command line
// (after applying --threads).
bench::Result start_bench(const std::string& suite, const BenchCommon& c);
// The PyTorch peer script `name`, or "" (saying why on stderr) when it or torch is missing.
std::string torch_script(const BenchCommon& c, const char* name);
// This program's path (what /proc/self/exe links to), for relaunching it.
std::string self_exe();
// The --hardware result, or null.
std::unique_ptr<bench::Result> load_hardware(const BenchCommon& c);
// A progress callback drawing bar (created here) on a terminal.
bench::Progress progress_bar(std::shared_ptr<ProgressBar>& bar);
// Prints the table; writes JSON, charts and the comparison as asked. Returns the exit code.
int finish_bench(const bench::Result& r, const BenchCommon& c);

// `tessera bench comm`: under mpirun, every rank runs the suite and rank 0 reports; otherwise one
// mpirun per entry of ranks launches this program again and the results are merged.
int run_comm_command(const BenchCommon& c, bench::CommOptions options,
                     const std::vector<int>& ranks, const std::vector<std::string>& collectives);

}  // namespace tessera::cli
