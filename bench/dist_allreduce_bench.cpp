// All-reduce (sum, float32) over ProcessGroupMPI, measured the way nccl-tests does: for each size
// from 4 B to 256 MB (powers of 4), warm-up calls, then timed calls, each waited for. A call's time
// is that of the slowest rank (the all-reduce ends when the last rank has the result); the table
// gives the median over calls, algbw = bytes / time and busbw = algbw * 2(n-1)/n, the bytes each
// rank moves in a ring all-reduce. The peer in PyTorch is bench/torch_dist_allreduce.py;
// bench/dist_allreduce_compare.sh alternates the two.
// Usage: mpirun -np N dist_allreduce_bench [--min-bytes B] [--max-bytes B] [--csv]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "tessera/dist/process_group_mpi.h"
#include "tessera/ops/creation.h"

namespace {

using namespace tessera;

// Fewer calls for larger messages: about 1 GiB through each rank per size, 5 to 200 calls.
int timed_calls(int64_t bytes) {
  return static_cast<int>(std::clamp<int64_t>((1 << 30) / bytes, 5, 200));
}
int warmup_calls(int64_t bytes) { return bytes >= (16 << 20) ? 2 : 5; }

// The median over calls of the slowest rank's time, in seconds.
double median_time(dist::ProcessGroupMPI& pg, const Tensor& buf, int warmup, int calls) {
  for (int i = 0; i < warmup; ++i) pg.all_reduce(buf)->wait();
  Tensor times = zeros({calls}, TensorOptions(kFloat64));
  double* t = static_cast<double*>(times.data_ptr());
  pg.barrier()->wait();
  for (int i = 0; i < calls; ++i) {
    const auto start = std::chrono::steady_clock::now();
    pg.all_reduce(buf)->wait();
    t[i] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  pg.all_reduce(times, dist::ReduceOp::Max)->wait();
  std::vector<double> v(t, t + calls);
  std::nth_element(v.begin(), v.begin() + calls / 2, v.end());
  return v[calls / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int64_t min_bytes = 4, max_bytes = int64_t(256) << 20;
  bool csv = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--min-bytes") && i + 1 < argc) {
      min_bytes = std::atoll(argv[++i]);
    } else if (!std::strcmp(argv[i], "--max-bytes") && i + 1 < argc) {
      max_bytes = std::atoll(argv[++i]);
    } else if (!std::strcmp(argv[i], "--csv")) {
      csv = true;
    } else {
      std::fprintf(stderr, "usage: %s [--min-bytes B] [--max-bytes B] [--csv]\n", argv[0]);
      return 2;
    }
  }
  dist::init();
  {
    auto pg = dist::ProcessGroupMPI::world();
    const int n = pg->size();
    if (pg->rank() == 0 && !csv) {
      std::printf("all_reduce sum float32, %d ranks; median of the slowest rank's time per call\n",
                  n);
      std::printf("| bytes | calls | time us | algbw GB/s | busbw GB/s |\n|---|---|---|---|---|\n");
    }
    for (int64_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
      // Zeros: the sums stay finite however many calls run, and float adds cost the same.
      Tensor buf = zeros({bytes / 4});
      const int calls = timed_calls(bytes);
      const double seconds = median_time(*pg, buf, warmup_calls(bytes), calls);
      const double algbw = bytes / seconds / 1e9;
      const double busbw = algbw * 2.0 * (n - 1) / n;
      if (pg->rank() != 0) continue;
      if (csv) {
        std::printf("tessera,%d,%lld,%.3f\n", n, static_cast<long long>(bytes), seconds * 1e6);
      } else {
        std::printf("| %lld | %d | %.1f | %.3f | %.3f |\n", static_cast<long long>(bytes), calls,
                    seconds * 1e6, algbw, busbw);
      }
      std::fflush(stdout);
    }
  }
  dist::finalize();
  return 0;
}
