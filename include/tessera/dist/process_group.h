#pragma once
// ProcessGroup: collectives and point-to-point transfers among a fixed set of ranks, each
// returning a Work handle so that communication can overlap compute. Backends: MPI (CPU tensors,
// process_group_mpi.h) and NCCL (CUDA tensors, process_group_nccl.h). Every wait has a deadline
// (timeout()); past it, wait() throws DistributedError naming the operation, the group and the
// rank, so a dead or diverged peer becomes an error, never a hang.
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/core/tensor.h"
#include "tessera/dist/error.h"

namespace tessera::dist {

enum class ReduceOp { Sum, Avg, Max, Min };
std::string_view reduce_op_name(ReduceOp op);

// Handle to an operation in flight. Its tensors hold their results only after is_completed()
// returned true or wait() returned. Dropping a handle before completion is allowed: the backend
// keeps the buffers alive until the transfer is done.
class Work {
 public:
  virtual ~Work() = default;
  // Polls once, without blocking.
  virtual bool is_completed() = 0;
  // Blocks until completion; throws DistributedError once the group's deadline passes.
  virtual void wait() = 0;
};
using WorkHandle = std::shared_ptr<Work>;

// The deadline new groups get: TESSERA_DIST_TIMEOUT (seconds, may be fractional) or 10 minutes.
std::chrono::milliseconds default_timeout();
// Whether new groups check that every rank calls the same collective: TESSERA_DIST_DEBUG=1.
bool default_debug();

class ProcessGroup {
 public:
  ProcessGroup(int rank, int size, std::string name);
  virtual ~ProcessGroup() = default;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& name() const { return name_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }
  // Debug mode: before each collective the ranks compare (op, dtype, shape) and throw
  // DistributedError naming the difference instead of corrupting data or hanging.
  bool debug() const { return debug_; }
  void set_debug(bool debug) { debug_ = debug; }

  // Reduces t over the group in place; every rank ends with the result. Avg is for floating
  // dtypes; on bool, Sum and Max are a logical or, Min a logical and.
  virtual WorkHandle all_reduce(const Tensor& t, ReduceOp op = ReduceOp::Sum) = 0;
  // Writes every rank's input into output, rank-major: output has size() * input.numel()
  // elements (any shape) of input's dtype.
  virtual WorkHandle all_gather(const Tensor& output, const Tensor& input) = 0;
  // Reduces input (size() * output.numel() elements) over the group and leaves block rank() of
  // the result in output.
  virtual WorkHandle reduce_scatter(const Tensor& output, const Tensor& input,
                                    ReduceOp op = ReduceOp::Sum) = 0;
  // Copies root's t into t on every rank.
  virtual WorkHandle broadcast(const Tensor& t, int root) = 0;
  // Point-to-point: t goes to rank dst of this group, which posts a recv with the same tag,
  // dtype and element count.
  virtual WorkHandle send(const Tensor& t, int dst, int tag = 0) = 0;
  virtual WorkHandle recv(const Tensor& t, int src, int tag = 0) = 0;
  virtual WorkHandle barrier() = 0;

 protected:
  // "group 'name' (rank r of n)": the suffix of every error message.
  std::string where() const;

 private:
  int rank_, size_;
  std::string name_;
  std::chrono::milliseconds timeout_;
  bool debug_;
};

namespace detail {
using ::tessera::detail::str;  // so that detail::str reads the same inside tessera::dist
// Argument checks shared by the backends; they throw the typed errors worded [op] expected ...
void check_tensor(std::string_view op, const Tensor& t, const char* what);
void check_reduce_dtype(std::string_view op, DType dtype, ReduceOp reduce);
void check_peer(std::string_view op, const ProcessGroup& pg, int peer, const char* what);
// "float32[2, 3]": the part of a collective's fingerprint that describes a tensor.
std::string describe(const Tensor& t);
// The checks of an operation's arguments that do not depend on the backend (each backend checks
// the tensors' device first), each returning the call's fingerprint for debug mode, as in
// "all_reduce(sum, float32[4])".
std::string check_all_reduce(const Tensor& t, ReduceOp op);
std::string check_all_gather(const ProcessGroup& pg, const Tensor& output, const Tensor& input);
std::string check_reduce_scatter(const ProcessGroup& pg, const Tensor& output, const Tensor& input,
                                 ReduceOp op);
std::string check_broadcast(const ProcessGroup& pg, const Tensor& t, int root);
// op is "send" (peer is dst) or "recv" (peer is src).
void check_p2p(std::string_view op, const ProcessGroup& pg, int peer, int tag);
// Debug mode's message part: ranks grouped by the call they made, given each rank's call,
// "ranks [0, 2]: all_reduce(sum, float32[4]); ranks [1]: broadcast(root 0, float32[4])".
std::string group_by_call(const std::vector<std::string>& calls);

// A contiguous buffer of dtype `wire` on t's device for t: t itself when it already is one, else
// a new tensor, holding t's values (cast to wire) when copy_in.
Tensor staging(const Tensor& t, DType wire, bool copy_in);
// Writes a staging buffer back into the caller's tensor (casting to its dtype); nothing when buf
// is dst itself.
void copy_back(const Tensor& dst, const Tensor& buf);

// Calls done() until it returns true or `deadline` passes: yielding between calls for the first
// 10 ms, then sleeping 50-100 us so that a long wait leaves the core to compute threads. Returns
// whether done() returned true.
bool poll_until(const std::function<bool()>& done, std::chrono::steady_clock::time_point deadline);
// The error of a wait that ran past its deadline, naming the operation and the group.
DistributedError timeout_error(std::string_view op, std::chrono::milliseconds timeout,
                               const std::string& where);
}  // namespace detail

}  // namespace tessera::dist
