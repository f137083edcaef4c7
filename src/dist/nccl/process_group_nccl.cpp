#include "tessera/dist/process_group_nccl.h"

#include <algorithm>
#include <cstring>
#include <functional>

#include "backend/cuda/context.h"
#include "backend/cuda/cuda_check.h"
#include "dist/nccl/nccl_check.h"
#include "dist/nccl/work_nccl.h"
#include "tessera/ops/creation.h"
#include "tessera/runtime/cuda.h"

namespace tessera::dist {
namespace {

// The element type NCCL reduces t as. Bool is a 0/1 byte, so max is a logical or and min a
// logical and; int16 is reduced in an int32 copy (see reduce_wire).
ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::Bool:
    case DType::UInt8:
      return ncclUint8;
    case DType::Int8:
      return ncclInt8;
    case DType::Int32:
      return ncclInt32;
    case DType::Int64:
      return ncclInt64;
    case DType::Float16:
      return ncclFloat16;
    case DType::BFloat16:
      return ncclBfloat16;
    case DType::Float32:
      return ncclFloat32;
    case DType::Float64:
      return ncclFloat64;
    case DType::Int16:
      break;
  }
  TESSERA_ASSERT(false, "no NCCL type for ", t);
  return ncclUint8;
}

DType reduce_wire(DType t) { return t == kInt16 ? kInt32 : t; }

ncclRedOp_t nccl_op(ReduceOp op, DType t) {
  switch (op) {
    case ReduceOp::Sum:
      return t == kBool ? ncclMax : ncclSum;
    case ReduceOp::Avg:
      return ncclAvg;  // floating dtypes only (check_reduce_dtype)
    case ReduceOp::Max:
      return ncclMax;
    case ReduceOp::Min:
      return ncclMin;
  }
  return ncclSum;
}

// Collectives that only move data move bytes: every dtype, no per-dtype NCCL type needed.
size_t nbytes(const Tensor& t) { return static_cast<size_t>(t.numel()) * t.element_size(); }

int pick_device(int device) {
  const int count = cuda::device_count();
  TESSERA_CHECK(count > 0, ValueError,
                "[ProcessGroupNCCL] expected a CUDA device on this rank, got none");
  if (device < 0) {
    const int current = cuda::current_device();
    device = current != 0 ? current : environment_from_env().local_rank % count;
  }
  TESSERA_CHECK(device < count, ValueError, "[ProcessGroupNCCL] expected a device in [0, ", count,
                "), got ", device);
  return device;
}

// Owns comm from here on, also when the stream cannot be created.
std::shared_ptr<detail::NcclComm> wrap(ncclComm_t comm, int device) {
  try {
    return std::make_shared<detail::NcclComm>(comm, device);
  } catch (...) {
    (void)ncclCommDestroy(comm);
    throw;
  }
}

// One operation, from the caller's thread: holds the group's device and lock while it stages
// tensors (on the caller's stream), queues NCCL's call on the group's stream behind the caller's
// stream, copies results back on the group's stream and records the Work's event.
class Launch {
 public:
  Launch(const std::shared_ptr<detail::NcclComm>& comm, std::string name, std::string where)
      : comm_(comm),
        guard_(comm->device),
        lock_(comm->mutex),
        op_(std::make_shared<detail::NcclOp>(std::move(name))),
        where_(std::move(where)) {
    detail::poll_nccl_orphans();
    comm_->check_usable(op_->name, where_);
  }

  // Launches the queued sends and recvs first, so the stream keeps the program's order, then
  // `call` behind the caller's stream.
  void run(const std::function<void(ncclComm_t, cudaStream_t)>& call) {
    comm_->launch_queued();
    after_caller();
    call(comm_->comm, static_cast<cudaStream_t>(comm_->stream.handle()));
  }

  void copy_back(const Tensor& dst, const Tensor& buf) {
    cuda::StreamGuard on_nccl(comm_->stream);
    detail::copy_back(dst, buf);
  }

  WorkHandle finish(std::vector<Tensor> keep_alive, std::chrono::milliseconds timeout) {
    op_->keep_alive = std::move(keep_alive);
    comm_->record(op_);
    return std::make_shared<detail::WorkNCCL>(comm_, op_, where_, timeout);
  }

  // A send or recv waits in the queue for its batch (see process_group_nccl.h).
  WorkHandle queue(detail::QueuedP2P q, std::chrono::milliseconds timeout) {
    after_caller();
    op_->keep_alive = {q.buf, q.dst};
    q.op = op_;
    comm_->queued.push_back(std::move(q));
    return std::make_shared<detail::WorkNCCL>(comm_, op_, where_, timeout);
  }

 private:
  // The group's stream waits for what the caller queued so far: the inputs and staging copies.
  void after_caller() {
    cuda::Event ready;
    ready.record();
    ready.wait(comm_->stream);
  }

  std::shared_ptr<detail::NcclComm> comm_;
  cuda::DeviceGuard guard_;
  std::unique_lock<std::mutex> lock_;
  std::shared_ptr<detail::NcclOp> op_;
  std::string where_;
};

}  // namespace

// ---- setup ----

std::shared_ptr<ProcessGroupNCCL> ProcessGroupNCCL::create(std::shared_ptr<ProcessGroupMPI> mpi,
                                                           int device) {
  TESSERA_CHECK(mpi != nullptr, ValueError,
                "[ProcessGroupNCCL] expected an MPI group to bootstrap from, got nullptr");
  device = pick_device(device);
  // Rank 0's id reaches the other ranks over MPI, never through the file system.
  ncclUniqueId id{};
  if (mpi->rank() == 0) TESSERA_NCCL_CHECK(ncclGetUniqueId(&id));
  Tensor bytes = empty({int64_t{sizeof id}}, TensorOptions(kUInt8));
  std::memcpy(bytes.data_ptr(), &id, sizeof id);
  mpi->broadcast(bytes, 0)->wait();
  std::memcpy(&id, bytes.data_ptr(), sizeof id);

  // Current from here on, so that the caller's CUDA tensors land on it.
  cuda::set_device(device);
  ncclComm_t comm = nullptr;
  TESSERA_NCCL_CHECK(ncclCommInitRank(&comm, mpi->size(), id, mpi->rank()));
  return std::make_shared<ProcessGroupNCCL>(std::move(mpi), wrap(comm, device));
}

ProcessGroupNCCL::ProcessGroupNCCL(std::shared_ptr<ProcessGroupMPI> mpi,
                                   std::shared_ptr<detail::NcclComm> comm)
    : ProcessGroup(mpi->rank(), mpi->size(), mpi->name()),
      mpi_(std::move(mpi)),
      comm_(std::move(comm)) {
  set_timeout(mpi_->timeout());
  set_debug(mpi_->debug());
}

ProcessGroupNCCL::~ProcessGroupNCCL() = default;

int ProcessGroupNCCL::device() const { return comm_->device; }

std::shared_ptr<ProcessGroupNCCL> ProcessGroupNCCL::new_group(const std::vector<int>& ranks,
                                                              std::string name) {
  if (name.empty()) name = detail::str(this->name(), ranks);
  auto mpi = mpi_->new_group(ranks, std::move(name));  // checks ranks; nullptr outside them
  const int color = mpi ? 0 : NCCL_SPLIT_NOCOLOR;
  const int key = mpi ? mpi->rank() : 0;
  return split_comm("new_group", std::move(mpi), color, key);
}

std::shared_ptr<ProcessGroupNCCL> ProcessGroupNCCL::split(int color, int key, std::string name) {
  auto mpi = mpi_->split(color, key, std::move(name));  // checks color
  return split_comm("split", std::move(mpi), color, key);
}

std::shared_ptr<ProcessGroupNCCL> ProcessGroupNCCL::split_comm(std::string_view op,
                                                               std::shared_ptr<ProcessGroupMPI> mpi,
                                                               int color, int key) {
  ncclComm_t child = nullptr;
  // The child's stream is made on the current device, which must be the group's.
  cuda::DeviceGuard guard(comm_->device);
  {
    std::lock_guard<std::mutex> lock(comm_->mutex);
    comm_->check_usable(op, where());
    comm_->launch_queued();
    // Ties in key are broken by rank, as MPI_Comm_split does: both orders agree.
    TESSERA_NCCL_CHECK(ncclCommSplit(comm_->comm, color, key, &child, nullptr));
  }
  if (!mpi) return nullptr;
  auto group = std::make_shared<ProcessGroupNCCL>(std::move(mpi), wrap(child, comm_->device));
  int nccl_rank = -1;
  TESSERA_NCCL_CHECK(ncclCommUserRank(child, &nccl_rank));
  TESSERA_ASSERT(nccl_rank == group->rank(), "NCCL rank ", nccl_rank, ", MPI rank ", group->rank());
  group->set_timeout(timeout());
  group->set_debug(debug());
  return group;
}

void ProcessGroupNCCL::abort() {
  cuda::DeviceGuard guard(comm_->device);
  std::lock_guard<std::mutex> lock(comm_->mutex);
  comm_->abort_locked("ProcessGroupNCCL::abort() was called");
}

// ---- checks ----

void ProcessGroupNCCL::check_tensor(std::string_view op, const Tensor& t, const char* what) const {
  TESSERA_CHECK(t.defined(), ValueError, "[", op, "] expected a defined ", what,
                " tensor, got an undefined handle");
  TESSERA_CHECK(t.device() == Device(DeviceType::CUDA, device()), ValueError, "[", op,
                "] expected an ", what, " tensor on the group's device cuda:", device(),
                " (the NCCL backend), got one on ", t.device());
}

void ProcessGroupNCCL::check_same_call(std::string_view op, const std::string& fingerprint) {
  // Fixed-size texts, gathered on the CPU over the MPI group of the same ranks.
  constexpr int64_t kLen = 256;
  Tensor mine = zeros({kLen}, TensorOptions(kUInt8));
  std::memcpy(mine.data_ptr(), fingerprint.data(), std::min<size_t>(fingerprint.size(), kLen - 1));
  Tensor all = empty({size(), kLen}, TensorOptions(kUInt8));
  mpi_->all_gather(all, mine)->wait();
  const char* base = static_cast<const char*>(all.data_ptr());
  std::vector<std::string> calls;
  for (int r = 0; r < size(); ++r) calls.emplace_back(base + r * kLen);
  if (std::all_of(calls.begin(), calls.end(), [&](const std::string& c) { return c == calls[0]; }))
    return;
  throw DistributedError(detail::str("[", op, "] expected every rank of ", where(),
                                     " to make the same call, got ", detail::group_by_call(calls)));
}

// ---- operations ----

WorkHandle ProcessGroupNCCL::all_reduce(const Tensor& t, ReduceOp op) {
  check_tensor("all_reduce", t, "input");
  const std::string call = detail::check_all_reduce(t, op);
  if (debug()) check_same_call("all_reduce", call);
  Launch l(comm_, "all_reduce", where());
  const DType wire = reduce_wire(t.dtype());
  Tensor buf = detail::staging(t, wire, /*copy_in=*/true);
  l.run([&](ncclComm_t comm, cudaStream_t s) {
    if (buf.numel() == 0) return;
    TESSERA_NCCL_CHECK(ncclAllReduce(buf.data_ptr(), buf.data_ptr(), buf.numel(), nccl_type(wire),
                                     nccl_op(op, wire), comm, s));
  });
  l.copy_back(t, buf);
  return l.finish({t, buf}, timeout());
}

WorkHandle ProcessGroupNCCL::all_gather(const Tensor& output, const Tensor& input) {
  check_tensor("all_gather", input, "input");
  check_tensor("all_gather", output, "output");
  const std::string call = detail::check_all_gather(*this, output, input);
  if (debug()) check_same_call("all_gather", call);
  Launch l(comm_, "all_gather", where());
  Tensor in = detail::staging(input, input.dtype(), true);
  Tensor out = detail::staging(output, output.dtype(), false);
  l.run([&](ncclComm_t comm, cudaStream_t s) {
    if (in.numel() == 0) return;
    TESSERA_NCCL_CHECK(
        ncclAllGather(in.data_ptr(), out.data_ptr(), nbytes(in), ncclUint8, comm, s));
  });
  l.copy_back(output, out);
  return l.finish({in, out, input, output}, timeout());
}

WorkHandle ProcessGroupNCCL::reduce_scatter(const Tensor& output, const Tensor& input,
                                            ReduceOp op) {
  check_tensor("reduce_scatter", input, "input");
  check_tensor("reduce_scatter", output, "output");
  const std::string call = detail::check_reduce_scatter(*this, output, input, op);
  if (debug()) check_same_call("reduce_scatter", call);
  Launch l(comm_, "reduce_scatter", where());
  const DType wire = reduce_wire(input.dtype());
  Tensor in = detail::staging(input, wire, true);
  Tensor out = detail::staging(output, wire, false);
  l.run([&](ncclComm_t comm, cudaStream_t s) {
    if (out.numel() == 0) return;
    TESSERA_NCCL_CHECK(ncclReduceScatter(in.data_ptr(), out.data_ptr(), out.numel(),
                                         nccl_type(wire), nccl_op(op, wire), comm, s));
  });
  l.copy_back(output, out);
  return l.finish({in, out, input, output}, timeout());
}

WorkHandle ProcessGroupNCCL::broadcast(const Tensor& t, int root) {
  check_tensor("broadcast", t, "input");
  const std::string call = detail::check_broadcast(*this, t, root);
  if (debug()) check_same_call("broadcast", call);
  Launch l(comm_, "broadcast", where());
  Tensor buf = detail::staging(t, t.dtype(), /*copy_in=*/rank() == root);
  l.run([&](ncclComm_t comm, cudaStream_t s) {
    if (buf.numel() == 0) return;
    TESSERA_NCCL_CHECK(
        ncclBroadcast(buf.data_ptr(), buf.data_ptr(), nbytes(buf), ncclUint8, root, comm, s));
  });
  l.copy_back(t, buf);
  return l.finish({t, buf}, timeout());
}

WorkHandle ProcessGroupNCCL::send(const Tensor& t, int dst, int tag) {
  return queue_p2p("send", t, dst, tag, /*is_send=*/true);
}

WorkHandle ProcessGroupNCCL::recv(const Tensor& t, int src, int tag) {
  return queue_p2p("recv", t, src, tag, /*is_send=*/false);
}

WorkHandle ProcessGroupNCCL::queue_p2p(std::string_view op, const Tensor& t, int peer, int tag,
                                       bool is_send) {
  check_tensor(op, t, is_send ? "input" : "output");
  detail::check_p2p(op, *this, peer, tag);
  Launch l(comm_, detail::str(op, is_send ? " to rank " : " from rank ", peer), where());
  detail::QueuedP2P q;
  q.is_send = is_send;
  q.peer = peer;
  q.buf = detail::staging(t, t.dtype(), /*copy_in=*/is_send);
  q.dst = t;
  return l.queue(std::move(q), timeout());
}

WorkHandle ProcessGroupNCCL::barrier() {
  if (debug()) check_same_call("barrier", "barrier()");
  Launch l(comm_, "barrier", where());
  // The value is never read: any byte will do.
  Tensor buf = empty({1}, TensorOptions(kUInt8).with_device(Device(DeviceType::CUDA, device())));
  l.run([&](ncclComm_t comm, cudaStream_t s) {
    TESSERA_NCCL_CHECK(
        ncclAllReduce(buf.data_ptr(), buf.data_ptr(), 1, ncclUint8, ncclMax, comm, s));
  });
  return l.finish({buf}, timeout());
}

}  // namespace tessera::dist
