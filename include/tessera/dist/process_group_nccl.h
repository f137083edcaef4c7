#pragma once
// ProcessGroupNCCL: the CUDA backend, on NCCL. Only in builds with both TESSERA_CUDA and
// TESSERA_MPI and an NCCL found beside the CUDA toolkit (library tessera_dist;
// TESSERA_WITH_NCCL is defined for its users). MPI only bootstraps it: rank 0's ncclUniqueId
// travels over the ProcessGroupMPI the group is built from. nccl.h stays out of this header.
//
// Stream semantics, as in torch: every operation runs on the group's own NCCL stream after the
// work queued so far on the caller's current stream; the Work handle records an event behind it.
// wait() makes the caller's current stream wait for that event and blocks the host until the
// event completes or the deadline passes (then the communicator is aborted and wait() throws
// DistributedError). Tensors the operation uses stay alive until the event completes, so the
// caching allocator never hands their blocks out early.
//
// Sends and recvs are queued and launched together, as one NCCL group, at the first wait() or
// is_completed() on any of them or at the next collective of the group: a ring of recv + send
// then cannot deadlock. Like every NCCL operation they run in issue order on one stream, so a
// pair of ranks must post a send and its recv in the same position relative to the group's
// collectives. Tags are accepted for the interface's sake and not matched.
#include <memory>
#include <string>
#include <vector>

#include "tessera/dist/process_group.h"
#include "tessera/dist/process_group_mpi.h"

namespace tessera::dist {

namespace detail {
struct NcclComm;  // a communicator with its device and stream (src/dist/nccl/work_nccl.h)
}  // namespace detail

class ProcessGroupNCCL : public ProcessGroup {
 public:
  // An NCCL communicator over mpi's ranks (rank i is mpi's rank i), named like mpi. Every rank of
  // mpi must call it. device: this rank's CUDA device; -1 takes the current device if one other
  // than 0 was set, else local_rank % device_count() (the launcher's local rank); it becomes the
  // thread's current device. Ranks of one node must end up on different devices. Inherits mpi's
  // timeout and debug mode.
  static std::shared_ptr<ProcessGroupNCCL> create(std::shared_ptr<ProcessGroupMPI> mpi,
                                                  int device = -1);
  // Used by create(), new_group() and split().
  ProcessGroupNCCL(std::shared_ptr<ProcessGroupMPI> mpi, std::shared_ptr<detail::NcclComm> comm);
  ~ProcessGroupNCCL() override;

  int device() const;
  // Subgroups as ProcessGroupMPI's (same arguments, same rank order), split from this
  // communicator with ncclCommSplit. Every rank of this group must call them.
  std::shared_ptr<ProcessGroupNCCL> new_group(const std::vector<int>& ranks, std::string name = {});
  std::shared_ptr<ProcessGroupNCCL> split(int color, int key, std::string name);
  // Aborts the communicator: operations in flight end without results and every later call
  // throws DistributedError. What a rank calls after a peer's failure, before reporting it.
  void abort();

  // All dtypes; int16 reduces through an int32 copy (NCCL has no int16), bool travels as uint8.
  WorkHandle all_reduce(const Tensor& t, ReduceOp op = ReduceOp::Sum) override;
  WorkHandle all_gather(const Tensor& output, const Tensor& input) override;
  WorkHandle reduce_scatter(const Tensor& output, const Tensor& input,
                            ReduceOp op = ReduceOp::Sum) override;
  WorkHandle broadcast(const Tensor& t, int root) override;
  WorkHandle send(const Tensor& t, int dst, int tag = 0) override;
  WorkHandle recv(const Tensor& t, int src, int tag = 0) override;
  // A one-element all_reduce.
  WorkHandle barrier() override;

 private:
  // Debug mode: all ranks exchange the fingerprint of the call they are about to make, over MPI.
  void check_same_call(std::string_view op, const std::string& fingerprint);
  void check_tensor(std::string_view op, const Tensor& t, const char* what) const;
  WorkHandle queue_p2p(std::string_view op, const Tensor& t, int peer, int tag, bool is_send);
  // ncclCommSplit of this communicator; mpi is the matching MPI subgroup (nullptr outside it).
  std::shared_ptr<ProcessGroupNCCL> split_comm(std::string_view op,
                                               std::shared_ptr<ProcessGroupMPI> mpi, int color,
                                               int key);

  std::shared_ptr<ProcessGroupMPI> mpi_;  // the same ranks: bootstrap, subgroups, debug mode
  std::shared_ptr<detail::NcclComm> comm_;
};

}  // namespace tessera::dist
