#include "dist/nccl/work_nccl.h"

#include <algorithm>

#include "backend/cuda/context.h"
#include "backend/cuda/cuda_check.h"
#include "dist/nccl/nccl_check.h"

namespace tessera::dist::detail {
namespace {

std::mutex g_orphans_mutex;
std::vector<std::shared_ptr<NcclOp>>& orphans() {
  static auto* list = new std::vector<std::shared_ptr<NcclOp>>();  // outlives static dtors
  return *list;
}

}  // namespace

// ---- NcclOp ----

NcclOp::NcclOp(std::string name) : name(std::move(name)) {
  TESSERA_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
}

NcclOp::~NcclOp() { (void)cudaEventDestroy(done); }

bool NcclOp::test() {
  if (finished) return true;
  if (!cancelled && (!launched || !cuda::event_completed(done))) return false;
  keep_alive.clear();
  finished = true;
  return true;
}

bool NcclOp::done_on_device() const {
  return finished || (launched && cuda::event_completed(done));
}

void poll_nccl_orphans() {
  std::lock_guard<std::mutex> lock(g_orphans_mutex);
  std::erase_if(orphans(), [](const std::shared_ptr<NcclOp>& op) {
    try {
      return op->test();
    } catch (const Error&) {
      return true;  // its owner is gone: nobody is left to report the error to
    }
  });
}

// ---- NcclComm ----

NcclComm::NcclComm(ncclComm_t comm, int device) : comm(comm), device(device) {}

NcclComm::~NcclComm() {
  std::lock_guard<std::mutex> lock(mutex);
  try {
    cuda::DeviceGuard guard(device);
    launch_queued();
    if (!aborted) TESSERA_NCCL_CHECK(ncclCommDestroy(comm));
  } catch (const Error&) {
    // A destructor has nobody to report to; the ops' handles report their own failures.
  }
}

void NcclComm::check_usable(std::string_view op, const std::string& where) const {
  TESSERA_CHECK(!aborted, DistributedError, "[", op, "] expected a usable NCCL communicator on ",
                where, ", got one aborted after a timeout, an NCCL error or abort()");
}

void NcclComm::launch_queued() {
  if (queued.empty()) return;
  std::vector<QueuedP2P> batch = std::move(queued);
  queued.clear();
  const auto s = static_cast<cudaStream_t>(stream.handle());
  bool enqueued = false;
  try {
    // Grouped, the sends and recvs progress together: their order within the batch is free.
    TESSERA_NCCL_CHECK(ncclGroupStart());
    ncclResult_t rc = ncclSuccess;
    for (const QueuedP2P& q : batch) {
      const size_t bytes = static_cast<size_t>(q.buf.numel()) * q.buf.element_size();
      if (bytes == 0 || rc != ncclSuccess) continue;
      rc = q.is_send ? ncclSend(q.buf.data_ptr(), bytes, ncclUint8, q.peer, comm, s)
                     : ncclRecv(q.buf.data_ptr(), bytes, ncclUint8, q.peer, comm, s);
    }
    const ncclResult_t end = ncclGroupEnd();  // also when a call failed: the group must close
    TESSERA_NCCL_CHECK(rc);
    TESSERA_NCCL_CHECK(end);
    enqueued = true;
    {
      cuda::StreamGuard on_nccl(stream);
      for (const QueuedP2P& q : batch)
        if (!q.is_send) copy_back(q.dst, q.buf);
    }
    for (const QueuedP2P& q : batch) record(q.op);
  } catch (const Error& e) {
    for (const QueuedP2P& q : batch) {
      if (q.op->launched) continue;
      q.op->failure = str("its batch of sends and recvs failed: ", e.what());
      // Once NCCL has the batch, the tensors stay until the stream is past it.
      if (enqueued && cudaEventRecord(q.op->done, s) == cudaSuccess) {
        q.op->launched = true;
      } else {
        q.op->cancelled = true;
      }
    }
    throw;
  }
}

void NcclComm::record(const std::shared_ptr<NcclOp>& op) {
  TESSERA_CUDA_CHECK(cudaEventRecord(op->done, static_cast<cudaStream_t>(stream.handle())));
  op->launched = true;
  std::erase_if(in_flight, [](const std::weak_ptr<NcclOp>& w) {
    auto live = w.lock();
    return !live || live->finished;
  });
  in_flight.push_back(op);
}

void NcclComm::abort_locked(const std::string& reason) {
  if (aborted) return;
  aborted = true;
  for (const std::weak_ptr<NcclOp>& w : in_flight) {
    auto op = w.lock();
    if (op && !op->done_on_device()) op->failure = reason;
  }
  for (const QueuedP2P& q : queued) {
    q.op->failure = reason;
    q.op->cancelled = true;
  }
  queued.clear();
  in_flight.clear();
  // Ends the kernels in flight (their events then complete) and frees the communicator.
  (void)ncclCommAbort(comm);
  comm = nullptr;
}

ncclResult_t NcclComm::async_error() const {
  if (aborted) return ncclSuccess;
  ncclResult_t result = ncclSuccess;
  const ncclResult_t rc = ncclCommGetAsyncError(comm, &result);
  return rc != ncclSuccess ? rc : result;
}

// ---- WorkNCCL ----

WorkNCCL::WorkNCCL(std::shared_ptr<NcclComm> comm, std::shared_ptr<NcclOp> op, std::string where,
                   std::chrono::milliseconds timeout)
    : comm_(std::move(comm)),
      op_(std::move(op)),
      where_(std::move(where)),
      timeout_(timeout),
      deadline_(std::chrono::steady_clock::now() + timeout) {}

WorkNCCL::~WorkNCCL() {
  if (op_->finished) return;
  // The stream may still use the tensors: keep them until the event completes.
  std::lock_guard<std::mutex> lock(g_orphans_mutex);
  orphans().push_back(std::move(op_));
}

void WorkNCCL::launch_if_queued() {
  if (op_->launched || op_->cancelled) return;
  std::lock_guard<std::mutex> lock(comm_->mutex);
  cuda::DeviceGuard guard(comm_->device);
  if (!op_->launched && !op_->cancelled) comm_->launch_queued();
}

bool WorkNCCL::is_completed() {
  launch_if_queued();
  // Polled from threads that never chose a device (the DDP reducer's): without the guard the
  // runtime would open a context on GPU 0 for them.
  cuda::DeviceGuard guard(comm_->device);
  return op_->test();
}

void WorkNCCL::wait() {
  launch_if_queued();
  if (op_->launched) {
    // Stream semantics: the caller's later kernels run after the op, whatever the host does.
    cuda::DeviceGuard guard(comm_->device);
    TESSERA_CUDA_CHECK(cudaStreamWaitEvent(cuda::current_stream(), op_->done, 0));
  }
  ncclResult_t async = ncclSuccess;
  const bool finished = poll_until(
      [&] {
        if (op_->test()) return true;
        std::lock_guard<std::mutex> lock(comm_->mutex);
        async = comm_->async_error();
        return async != ncclSuccess;
      },
      deadline_);
  std::lock_guard<std::mutex> lock(comm_->mutex);
  TESSERA_CHECK(op_->failure.empty(), DistributedError, "[", op_->name, "] expected a result on ",
                where_, ", got none: ", op_->failure);
  if (finished && async == ncclSuccess) return;
  cuda::DeviceGuard guard(comm_->device);
  if (async != ncclSuccess) {
    const std::string why = str(ncclGetErrorString(async), ": ", ncclGetLastError(nullptr));
    comm_->abort_locked(str("the communicator was aborted after an NCCL error in ", op_->name));
    throw DistributedError(str("[", op_->name, "] expected completion on ", where_,
                               ", got an asynchronous NCCL error: ", why));
  }
  comm_->abort_locked(str("the communicator was aborted after a timeout in ", op_->name));
  throw timeout_error(op_->name, timeout_, where_);
}

}  // namespace tessera::dist::detail
