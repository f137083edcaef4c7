// Work handles polled from a second thread while the main thread launches and waits: what DDP's
// communication thread does. MPI runs MPI_THREAD_SERIALIZED, so every MPI call of the backend
// takes one process-wide lock, and a PendingOp is completed by one thread only.
#include <atomic>
#include <mutex>
#include <thread>

#include "dist_test_util.h"

namespace tessera::dist::testing {
namespace {

// One round: kOps all_reduces launched by this thread, polled by another.
void poll_while_launching(int round) {
  auto pg = world();
  constexpr int kOps = 300;
  std::vector<Tensor> tensors;
  std::vector<WorkHandle> handles;
  std::mutex mutex;  // guards handles
  std::atomic<bool> launched{false};
  std::atomic<int64_t> polls{0};

  // Polls the handles launched so far that it has not seen complete, over and over, until the
  // main thread is done.
  std::thread poller([&] {
    size_t first_pending = 0;
    while (true) {
      const bool last_pass = launched.load();
      std::vector<WorkHandle> pending;
      {
        std::lock_guard<std::mutex> lock(mutex);
        pending.assign(handles.begin() + first_pending, handles.end());
      }
      bool all_done = true;
      for (const WorkHandle& w : pending) {
        const bool done = w->is_completed();
        all_done = all_done && done;
        if (all_done) ++first_pending;
        ++polls;
      }
      if (last_pass) break;
      std::this_thread::yield();
    }
  });

  for (int i = 0; i < kOps; ++i) {
    // Sizes from 1 to ~4k elements, so that some complete at once and some need progress.
    const int64_t n = 1 + (i * 37) % 4093;
    const DType dtype = i % 3 == 0 ? kBFloat16 : (i % 3 == 1 ? kFloat32 : kInt32);
    Tensor t = input(pg->rank(), n, dtype, /*offset=*/i + round);
    WorkHandle w = pg->all_reduce(t);
    if (i % 50 == 49) pg->barrier();  // a dropped handle now and then: the orphan list too
    std::lock_guard<std::mutex> lock(mutex);
    tensors.push_back(t);
    handles.push_back(w);
  }
  // Waits race with the poller's is_completed on the same handles.
  for (const WorkHandle& w : handles) w->wait();
  launched = true;
  poller.join();
  EXPECT_GT(polls.load(), 0);

  for (int i = 0; i < kOps; ++i) {
    const int64_t n = tensors[i].numel();
    const DType dtype = tensors[i].dtype();
    std::vector<double> want(n, 0);
    for (int r = 0; r < pg->size(); ++r) {
      auto v = values(input(r, n, dtype, i + round));
      for (int64_t j = 0; j < n; ++j) want[j] += v[j];
    }
    expect_values(tensors[i], values(tensor(want).to(dtype)), dtype,
                  detail::str("round ", round, ": all_reduce ", i, " (", dtype, "[", n, "])"));
  }
  pg->barrier()->wait();
}

// Several rounds: without PendingOp's own lock, two threads completing the same operation
// crashed this test (a double free in PendingOp::test) in half of the runs at 4 ranks.
TEST(Threads, PollingThreadWhileLaunching) {
  for (int round = 0; round < 5; ++round) poll_while_launching(round);
}

}  // namespace
}  // namespace tessera::dist::testing
