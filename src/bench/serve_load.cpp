// The serve suite's load runner: planned requests sent at their arrival times from worker
// threads (one per request in flight), as vLLM's benchmark sends them from asyncio tasks.
#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>

#include "tessera/bench/serve.h"
#include "tessera/core/error.h"

namespace tessera::bench {

namespace {
// Beyond this many threads a burst is better served by a real async client; requests past it
// wait for a free worker (the report's duration and TTFT then include that wait).
constexpr int64_t kMaxWorkers = 1024;
}  // namespace

LoadResult run_load(const ClientOptions& client, const std::vector<PlannedRequest>& plan,
                    int64_t max_concurrency, const Progress& progress) {
  TESSERA_CHECK(max_concurrency >= 0, ValueError,
                "[bench.serve] expected a max concurrency >= 0 (0: unlimited), got ",
                max_concurrency);
  using Clock = std::chrono::steady_clock;
  const auto n = static_cast<int64_t>(plan.size());
  LoadResult out;
  out.records.resize(plan.size());
  const int64_t workers = std::min({max_concurrency > 0 ? max_concurrency : n, n, kMaxWorkers});
  std::atomic<int64_t> next{0};
  int64_t done = 0;
  std::mutex progress_mutex;
  const Clock::time_point origin = Clock::now();
  // Requests are taken in plan order; a worker sleeps until its request's time, so with a
  // concurrency cap a request goes at max(arrival, a worker finishing), as vLLM's semaphore does.
  auto work = [&] {
    for (int64_t i; (i = next.fetch_add(1)) < n;) {
      const PlannedRequest& request = plan[static_cast<size_t>(i)];
      std::this_thread::sleep_until(origin + std::chrono::duration_cast<Clock::duration>(
                                                 std::chrono::duration<double>(request.send_at)));
      out.records[static_cast<size_t>(i)] = send_request(client, request, origin);
      std::lock_guard<std::mutex> lock(progress_mutex);
      ++done;
      if (progress) progress("request", done, n);
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(workers));
  for (int64_t w = 0; w < workers; ++w) threads.emplace_back(work);
  for (std::thread& t : threads) t.join();
  out.duration = std::chrono::duration<double>(Clock::now() - origin).count();
  return out;
}

}  // namespace tessera::bench
