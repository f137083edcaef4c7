#pragma once
// An MPI operation in flight (its requests and the buffers they use) and the Work handle on it.
// MPI runs MPI_THREAD_SERIALIZED: every MPI call of the backend holds mpi_lock(), so that DDP's
// communication thread can poll handles while the main thread launches.
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dist/mpi/mpi_check.h"
#include "tessera/dist/process_group.h"

namespace tessera::dist::detail {

// The process-wide lock around every MPI call. Held only for the call itself (never while a
// wait sleeps); the blocking ones (communicator creation, MPI_Init/Finalize) hold it throughout.
std::unique_lock<std::mutex> mpi_lock();

struct PendingOp {
  std::vector<MPI_Request> requests;  // one per chunk (see max_chunk_elements)
  std::vector<Tensor> keep_alive;     // buffers MPI reads or writes until the requests complete
  std::function<void()> finish;       // copies staged results back; runs once, on completion
  MPI_Datatype recv_type = MPI_DATATYPE_NULL;  // recv: checks each message's element count
  std::vector<int> recv_counts;                // recv: the count expected from each request
  std::string op;                              // for messages
  std::atomic<bool> done{false};               // set after finish ran: results are visible

  // Polls the requests once; on completion runs finish and releases the buffers. Safe to call
  // from several threads: one of them completes the operation, the others see done.
  bool test();
  // After a timeout: the results will not be copied into the caller's tensors when late peers
  // complete the operation (the caller has moved on and may be reusing them).
  void abandon();

 private:
  std::mutex mutex_;  // one completing thread at a time; taken before mpi_lock()
};

// Polls the operations whose handles were dropped before completion (after a timeout, say) and
// frees those that finished. Called at the start of every operation.
void poll_orphans();

// Whether a group may still be used. MPI pairs operations by the order they were issued, so after
// a timeout (or an MPI error that left requests pending) its ranks no longer agree on which comes
// next and every later operation would pair with an abandoned one: the group is then refused, as
// NCCL aborts its communicator. Shared by a group and its Work handles.
class GroupHealth {
 public:
  void fail(const std::string& reason);  // the first reason is kept
  // DistributedError naming op and the first failure once the group failed.
  void check(std::string_view op, const std::string& where) const;

 private:
  mutable std::mutex mutex_;
  std::string failure_;
};

class WorkMPI : public Work {
 public:
  WorkMPI(std::shared_ptr<PendingOp> op, std::shared_ptr<GroupHealth> health, std::string where,
          std::chrono::milliseconds timeout);
  ~WorkMPI() override;
  bool is_completed() override;
  // Polls MPI_Test (MPI progresses non-blocking calls only while polled) until the deadline,
  // counted from the launch of the operation. mpi_lock() is held for each poll, never while it
  // sleeps between polls, so another thread's launches go through.
  void wait() override;

 private:
  // Polls once; an error fails the group.
  bool test();

  std::shared_ptr<PendingOp> op_;
  std::shared_ptr<GroupHealth> health_;
  std::string where_;
  std::chrono::milliseconds timeout_;
  std::chrono::steady_clock::time_point deadline_;
};

}  // namespace tessera::dist::detail
