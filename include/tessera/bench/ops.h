#pragma once
// The ops suite: a fixed list of op workloads (the same ones bench/torch_ops.py runs in PyTorch),
// each timed as the median of repeated calls after warm-up, in rounds that alternate Tessera and
// PyTorch (when python3 with torch is present) so both see the same machine state. Each figure's
// samples are the per-round medians. Compute-bound ops also report FLOP/s, memory-bound ones
// bytes/s, each as a fraction of this machine's GEMM peak or STREAM triad bandwidth.
#include <string>
#include <vector>

#include "tessera/bench/progress.h"
#include "tessera/bench/result.h"

namespace tessera::bench {

struct OpWorkloadInfo {
  std::string name;   // "matmul_f32_1024", as torch_ops.py prints it
  double flops = 0;   // multiply-adds counted twice; 0 for memory-bound ops
  double bytes = 0;   // bytes read and written once each; used when flops is 0
  std::string dtype;  // the dtype whose peak it is held against
};
// Every workload of the suite, in run order.
std::vector<OpWorkloadInfo> op_workloads();

struct OpsOptions {
  bool quick = false;  // 1 round, 2 timed calls per op, no peak measurement
  int rounds = 5;
  std::string filter;  // only workloads whose name contains it
  // PyTorch's side: the script and interpreter; empty script: Tessera alone.
  std::string torch_script;
  std::string python = "/usr/bin/python3";
  // Peaks to hold rates against (a hardware result); null: measured briefly in the run.
  const Result* hardware = nullptr;
  Progress progress;
};

// Figures "time" (s; params op, framework), "rate" (FLOP/s or B/s) and "fraction_of_peak"
// (params op, peak) for Tessera.
void run_ops_suite(Result& result, const OpsOptions& options);

}  // namespace tessera::bench
