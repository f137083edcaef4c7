#pragma once
// An NCCL communicator with its device and stream (NcclComm), the operations queued on that
// stream (NcclOp) and the Work handle that waits for one. The group and its handles share the
// NcclComm, so a handle that outlives its group can still abort the communicator.
#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/dist/process_group.h"
#include "tessera/runtime/cuda.h"

namespace tessera::dist::detail {

// One operation on the NCCL stream: the event recorded behind it (and behind the copy of its
// result into the caller's tensor) and the tensors it uses until then.
struct NcclOp {
  explicit NcclOp(std::string name);  // creates the event on the current device
  ~NcclOp();
  NcclOp(const NcclOp&) = delete;
  NcclOp& operator=(const NcclOp&) = delete;

  // Polls the event once; on completion releases the tensors.
  bool test();
  // Whether the device is past the op, without releasing anything (for abort).
  bool done_on_device() const;

  const std::string name;  // for messages: "all_reduce", "send to rank 1"
  cudaEvent_t done = nullptr;
  std::vector<Tensor> keep_alive;
  std::atomic<bool> launched{false};   // false while a send or recv waits for its batch
  std::atomic<bool> cancelled{false};  // aborted before its launch: nothing of it ever ran
  std::atomic<bool> finished{false};
  std::string failure;  // why it has no result (an abort); under NcclComm::mutex
};

// A send or recv waiting for its batch (see process_group_nccl.h).
struct QueuedP2P {
  std::shared_ptr<NcclOp> op;
  bool is_send = false;
  int peer = 0;
  Tensor buf;  // contiguous
  Tensor dst;  // recv: the caller's tensor, which buf's data is copied into unless it is buf
};

struct NcclComm {
  // Takes ownership of comm; the current device must be `device` (the stream is created on it).
  NcclComm(ncclComm_t comm, int device);
  // Launches what is still queued, then ncclCommDestroy (which waits for the operations in
  // flight) unless the communicator was aborted.
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  // The rest expects `mutex` held and `device` current.
  // Throws DistributedError once the communicator was aborted.
  void check_usable(std::string_view op, const std::string& where) const;
  // Launches the queued sends and recvs as one NCCL group and records their events.
  void launch_queued();
  // Records op's event at the end of the stream and tracks op until it finishes.
  void record(const std::shared_ptr<NcclOp>& op);
  // ncclCommAbort; every op in flight or queued gets `reason` as its failure.
  void abort_locked(const std::string& reason);
  // ncclCommGetAsyncError (ncclSuccess once aborted).
  ncclResult_t async_error() const;

  ncclComm_t comm = nullptr;
  const int device;
  cuda::Stream stream;  // the group's NCCL stream
  std::mutex mutex;     // guards what follows and every NCCL call on comm
  bool aborted = false;
  std::vector<QueuedP2P> queued;
  std::vector<std::weak_ptr<NcclOp>> in_flight;
};

// Polls the ops whose handles were dropped before completion and releases the finished ones'
// tensors. Called at the start of every operation.
void poll_nccl_orphans();

class WorkNCCL : public Work {
 public:
  WorkNCCL(std::shared_ptr<NcclComm> comm, std::shared_ptr<NcclOp> op, std::string where,
           std::chrono::milliseconds timeout);
  ~WorkNCCL() override;
  bool is_completed() override;
  // Orders the caller's current stream after the op, then polls its event until the deadline
  // (counted from the call that made the op); past it, or on an NCCL error, aborts the
  // communicator and throws DistributedError.
  void wait() override;

 private:
  void launch_if_queued();

  std::shared_ptr<NcclComm> comm_;
  std::shared_ptr<NcclOp> op_;
  std::string where_;
  std::chrono::milliseconds timeout_;
  std::chrono::steady_clock::time_point deadline_;
};

}  // namespace tessera::dist::detail
