#include "dist/mpi/work_mpi.h"

#include <thread>

namespace tessera::dist::detail {
namespace {

std::mutex g_orphans_mutex;  // taken before PendingOp's mutex, which is taken before mpi_lock()
std::vector<std::shared_ptr<PendingOp>>& orphans() {
  static auto* list = new std::vector<std::shared_ptr<PendingOp>>();  // outlives static dtors
  return *list;
}

}  // namespace

std::unique_lock<std::mutex> mpi_lock() {
  static auto* mutex = new std::mutex();  // outlives static dtors, like the orphan list
  return std::unique_lock<std::mutex>(*mutex);
}

bool PendingOp::test() {
  if (done.load(std::memory_order_acquire)) return true;
  std::lock_guard<std::mutex> guard(mutex_);
  if (done.load(std::memory_order_relaxed)) return true;  // another thread completed it meanwhile
  int flag = 0;
  std::vector<MPI_Status> statuses(requests.size());
  std::string error;
  {
    auto lock = mpi_lock();
    TESSERA_MPI_CHECK(
        MPI_Testall(static_cast<int>(requests.size()), requests.data(), &flag, statuses.data()));
    if (!flag) return false;
    for (size_t i = 0; i < recv_counts.size() && error.empty(); ++i) {
      int got = 0;
      TESSERA_MPI_CHECK(MPI_Get_count(&statuses[i], recv_type, &got));
      if (got != recv_counts[i]) {
        const std::string chunk =
            recv_counts.size() > 1 ? str(" (chunk ", i + 1, " of ", recv_counts.size(), ")") : "";
        error = str("[", op, "] expected a message of ", recv_counts[i], " elements from rank ",
                    statuses[i].MPI_SOURCE, chunk, ", got ", got);
      }
    }
  }
  // Finished either way; a wrong length is reported once, to the caller that saw it. done is
  // published last, so a thread that reads it true also sees the results.
  if (error.empty() && finish) finish();
  finish = nullptr;
  keep_alive.clear();
  done.store(true, std::memory_order_release);
  if (!error.empty()) throw DistributedError(error);
  return true;
}

void poll_orphans() {
  std::lock_guard<std::mutex> lock(g_orphans_mutex);
  auto& list = orphans();
  std::erase_if(list, [](const std::shared_ptr<PendingOp>& op) {
    try {
      return op->test();
    } catch (const Error&) {
      return true;  // its owner is gone: nobody is left to report the error to
    }
  });
}

void PendingOp::abandon() {
  std::lock_guard<std::mutex> guard(mutex_);
  finish = nullptr;
}

void GroupHealth::fail(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (failure_.empty()) failure_ = reason;
}

void GroupHealth::check(std::string_view op, const std::string& where) const {
  std::lock_guard<std::mutex> lock(mutex_);
  TESSERA_CHECK(failure_.empty(), DistributedError, "[", op, "] expected a usable MPI group on ",
                where, ", got one that failed after ", failure_,
                " (its ranks no longer agree on which collective comes next): end the job "
                "(dist::abort) or restart it from a checkpoint");
}

WorkMPI::WorkMPI(std::shared_ptr<PendingOp> op, std::shared_ptr<GroupHealth> health,
                 std::string where, std::chrono::milliseconds timeout)
    : op_(std::move(op)),
      health_(std::move(health)),
      where_(std::move(where)),
      timeout_(timeout),
      deadline_(std::chrono::steady_clock::now() + timeout) {}

WorkMPI::~WorkMPI() {
  if (op_->done) return;
  // MPI may still write into the buffers: keep them until the requests complete.
  std::lock_guard<std::mutex> lock(g_orphans_mutex);
  orphans().push_back(std::move(op_));
}

bool WorkMPI::test() {
  try {
    return op_->test();
  } catch (const DistributedError& e) {
    // A message of the wrong length completed every request (done): the order still holds. An
    // MPI error may have left requests pending, which later operations would pair with.
    if (!op_->done.load(std::memory_order_acquire))
      health_->fail(str("an error in ", op_->op, ": ", e.what()));
    throw;
  }
}

bool WorkMPI::is_completed() { return test(); }

void WorkMPI::wait() {
  if (poll_until([this] { return test(); }, deadline_)) return;
  op_->abandon();
  health_->fail(str("a timeout in ", op_->op));
  throw timeout_error(op_->op, timeout_, where_);
}

}  // namespace tessera::dist::detail
