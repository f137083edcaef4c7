#pragma once
// The parallel side of `tessera train`: the processes the launcher (mpirun, srun) started, laid
// out as DP x TP x PP (--dp, --tp, --pp), which rank prints and writes, decisions every rank
// must share, and the failure path.
#include <cstdint>
#include <exception>
#include <memory>
#include <vector>

#include "tessera/dist/process_group.h"
#include "train_options.h"

namespace tessera::cli {

struct DataParallel {
  int rank = 0;
  int size = 1;
  std::shared_ptr<dist::ProcessGroup> group;  // the world; null for a single process
  // This rank's place in the layout and its groups along each axis (null for a single process),
  // plus the first/last pipeline stage's group of a tied embedding (null elsewhere).
  int dp_rank = 0, dp_size = 1, tp = 1, pp = 1, pp_rank = 0;
  std::shared_ptr<dist::ProcessGroup> dp_group, tp_group, pp_group, embedding_group;
  // Tensor or pipeline parallelism: each rank holds a part of the model.
  bool model_parallel() const { return tp * pp > 1; }

  // Rank 0 prints, writes metrics, plots and checkpoints.
  bool is_root() const { return rank == 0; }
  // Rank 0's flag on every rank (stop conditions must agree, or the ranks part ways).
  bool agree(bool flag) const;
  // The newest of `steps` (ascending) that every rank holds too, or -1 when they share none.
  int64_t newest_common_step(const std::vector<int64_t>& steps) const;
  // Blocks until every rank got here.
  void barrier() const;
};

// A single process for --dp 1 (--tp 1, --pp 1) outside a launcher; otherwise initialises MPI,
// checks that the launcher started dp x tp x pp processes and makes the layout's groups.
// ValueError when they disagree or this build has no MPI.
DataParallel start_data_parallel(const TrainOptions& options);
// Releases the group and finalises MPI (after every user of the group is gone).
void stop_data_parallel(DataParallel& dp);
// Reports `error` as this rank's and takes the whole job down (MPI_Abort), so no peer waits
// for a rank that is gone.
[[noreturn]] void abort_data_parallel(const DataParallel& dp, const std::exception& error);

}  // namespace tessera::cli
