#include "dist/mpi/work_mpi.h"

#include <mutex>
#include <thread>

namespace tessera::dist::detail {
namespace {

std::mutex g_orphans_mutex;
std::vector<std::shared_ptr<PendingOp>>& orphans() {
  static auto* list = new std::vector<std::shared_ptr<PendingOp>>();  // outlives static dtors
  return *list;
}

}  // namespace

bool PendingOp::test() {
  if (done) return true;
  int flag = 0;
  std::vector<MPI_Status> statuses(requests.size());
  TESSERA_MPI_CHECK(
      MPI_Testall(static_cast<int>(requests.size()), requests.data(), &flag, statuses.data()));
  if (!flag) return false;
  done = true;
  if (recv_count >= 0) {
    int got = 0;
    TESSERA_MPI_CHECK(MPI_Get_count(&statuses[0], recv_type, &got));
    TESSERA_CHECK(got == recv_count, DistributedError, "[", op, "] expected a message of ",
                  recv_count, " elements from rank ", statuses[0].MPI_SOURCE, ", got ", got);
  }
  if (finish) finish();
  finish = nullptr;
  keep_alive.clear();
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

WorkMPI::WorkMPI(std::shared_ptr<PendingOp> op, std::string where,
                 std::chrono::milliseconds timeout)
    : op_(std::move(op)),
      where_(std::move(where)),
      timeout_(timeout),
      deadline_(std::chrono::steady_clock::now() + timeout) {}

WorkMPI::~WorkMPI() {
  if (op_->done) return;
  // MPI may still write into the buffers: keep them until the requests complete.
  std::lock_guard<std::mutex> lock(g_orphans_mutex);
  orphans().push_back(std::move(op_));
}

void WorkMPI::wait() {
  // Spin briefly for short collectives, then back off to sleeps so a long wait leaves the core
  // to the compute threads.
  auto pause = std::chrono::microseconds(0);
  for (int polls = 0;; ++polls) {
    if (op_->test()) return;
    if (std::chrono::steady_clock::now() > deadline_) {
      const double seconds = timeout_.count() / 1000.0;
      throw DistributedError(
          str("[", op_->op, "] expected completion within ", seconds, " s on ", where_,
              ", got a timeout: a peer died, hangs or called another operation"));
    }
    if (polls < 1000) {
      std::this_thread::yield();
    } else {
      pause = std::min(std::max(pause * 2, std::chrono::microseconds(50)),
                       std::chrono::microseconds(1000));
      std::this_thread::sleep_for(pause);
    }
  }
}

}  // namespace tessera::dist::detail
