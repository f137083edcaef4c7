#pragma once
// The comm suite: collectives over a process group across a size sweep, reported exactly as
// nccl-tests defines them (doc/PERFORMANCE.md there):
//   time  = the median over calls of the slowest rank's time (a collective ends when the last
//           rank has its result);
//   algbw = size / time, size being the bytes of the whole buffer: all_gather's output,
//           reduce_scatter's input, the others' one buffer;
//   busbw = algbw x factor, the bytes each rank moves relative to the optimum:
//           all_reduce 2(n-1)/n, all_gather and reduce_scatter (n-1)/n, broadcast and send/recv 1.
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/bench/progress.h"
#include "tessera/bench/result.h"
#include "tessera/dist/process_group.h"

namespace tessera::bench {

enum class Collective { AllReduce, AllGather, ReduceScatter, Broadcast, SendRecv };
const char* collective_name(Collective c);
// ValueError naming the accepted names otherwise.
Collective parse_collective(const std::string& name);
double busbw_factor(Collective c, int ranks);

struct CommOptions {
  bool quick = false;  // 4 B to 64 KiB, few calls
  std::vector<Collective> collectives = {Collective::AllReduce, Collective::AllGather,
                                         Collective::ReduceScatter, Collective::Broadcast,
                                         Collective::SendRecv};
  int64_t min_bytes = 8;
  int64_t max_bytes = int64_t(64) << 20;  // powers of 4 between
  Progress progress;                      // rank 0's
};

// Every rank of pg calls this; figures "time" (s), "algbw" and "busbw" (B/s) with params
// collective, ranks, bytes, dtype go into result on every rank (identical values: each sample
// is the slowest rank's).
void run_comm_suite(Result& result, dist::ProcessGroup& pg, const CommOptions& options);

}  // namespace tessera::bench
