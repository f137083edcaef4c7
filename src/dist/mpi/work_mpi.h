#pragma once
// An MPI operation in flight (its requests and the buffers they use) and the Work handle on it.
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dist/mpi/mpi_check.h"
#include "tessera/dist/process_group.h"

namespace tessera::dist::detail {

struct PendingOp {
  std::vector<MPI_Request> requests;
  std::vector<Tensor> keep_alive;  // buffers MPI reads or writes until the requests complete
  std::function<void()> finish;    // copies staged results back; runs once, on completion
  MPI_Datatype recv_type = MPI_DATATYPE_NULL;  // recv: checks the message's element count
  int recv_count = -1;
  std::string op;  // for messages
  bool done = false;

  // Polls the requests once; on completion runs finish and releases the buffers.
  bool test();
};

// Polls the operations whose handles were dropped before completion (after a timeout, say) and
// frees those that finished. Called at the start of every operation.
void poll_orphans();

class WorkMPI : public Work {
 public:
  WorkMPI(std::shared_ptr<PendingOp> op, std::string where, std::chrono::milliseconds timeout);
  ~WorkMPI() override;
  bool is_completed() override { return op_->test(); }
  // Polls MPI_Test (MPI progresses non-blocking calls only while polled) until the deadline,
  // counted from the launch of the operation.
  void wait() override;

 private:
  std::shared_ptr<PendingOp> op_;
  std::string where_;
  std::chrono::milliseconds timeout_;
  std::chrono::steady_clock::time_point deadline_;
};

}  // namespace tessera::dist::detail
