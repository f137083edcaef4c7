#pragma once
// ProcessGroupMPI: the CPU backend, on OpenMPI's non-blocking calls (MPI_Iallreduce, ...). Only
// in builds with TESSERA_MPI (library tessera_dist; TESSERA_WITH_MPI is defined for its users).
// mpi.h stays out of this header: the communicator lives behind Impl. Thread-safe: launches and
// Work calls may come from several threads (every MPI call takes one process-wide lock).
#include <memory>
#include <string>
#include <vector>

#include "tessera/dist/environment.h"
#include "tessera/dist/process_group.h"

namespace tessera::dist {

class ProcessGroupMPI : public ProcessGroup {
 public:
  struct Impl;
  ProcessGroupMPI(std::unique_ptr<Impl> impl, int rank, int size, std::string name);
  ~ProcessGroupMPI() override;

  // The group of every process (a duplicate of MPI_COMM_WORLD, so tags never collide with other
  // MPI users). Initialises MPI on the first call; see init().
  static std::shared_ptr<ProcessGroupMPI> world();

  // A subgroup of `ranks` (ranks of this group, ascending, no repeats); rank i of the subgroup
  // is ranks[i]. Every rank of this group must call it (like torch.distributed.new_group);
  // ranks outside `ranks` get nullptr. Inherits timeout and debug mode.
  std::shared_ptr<ProcessGroupMPI> new_group(const std::vector<int>& ranks, std::string name = {});
  // One subgroup per distinct color, ranks ordered by key: what Layout's axis groups use.
  // Every rank of this group must call it.
  std::shared_ptr<ProcessGroupMPI> split(int color, int key, std::string name);

  WorkHandle all_reduce(const Tensor& t, ReduceOp op = ReduceOp::Sum) override;
  WorkHandle all_gather(const Tensor& output, const Tensor& input) override;
  WorkHandle reduce_scatter(const Tensor& output, const Tensor& input,
                            ReduceOp op = ReduceOp::Sum) override;
  WorkHandle broadcast(const Tensor& t, int root) override;
  WorkHandle send(const Tensor& t, int dst, int tag = 0) override;
  WorkHandle recv(const Tensor& t, int src, int tag = 0) override;
  WorkHandle barrier() override;

 private:
  // Debug mode: all ranks exchange the fingerprint of the call they are about to make.
  void check_same_call(std::string_view op, const std::string& fingerprint);
  std::unique_ptr<Impl> impl_;
};

// Initialises MPI (MPI_THREAD_SERIALIZED) unless it already is, and checks that MPI's rank and
// size agree with the launcher's environment. Returns that environment. Under OpenMPI it first
// sets OMPI_MCA_coll_libnbc_iallreduce_algorithm=3 (reduce-scatter + all-gather) unless the
// variable is set already.
Environment init();
// Finalises MPI if init() started it. Groups must have been released first.
void finalize();
// The launcher-level failure path: MPI_Abort on every process of the job. The library never
// calls it on its own; the trainer or CLI does, after reporting a DistributedError.
[[noreturn]] void abort(int error_code = 1);

namespace detail {
// The most elements one MPI call moves (MPI counts are int; INT_MAX by default): larger tensors
// go in chunks, all in one Work. Tests lower it to cover the chunking with small tensors; every
// rank must use the same limit. Returns the previous limit; throws ValueError outside
// [1, INT_MAX].
int64_t set_max_chunk_elements(int64_t limit);
int64_t max_chunk_elements();
}  // namespace detail

}  // namespace tessera::dist
