#include "tessera/bench/comm.h"

#include <algorithm>
#include <chrono>

#include "tessera/core/error.h"
#include "tessera/ops/creation.h"

namespace tessera::bench {
namespace {

constexpr Collective kAll[] = {Collective::AllReduce, Collective::AllGather,
                               Collective::ReduceScatter, Collective::Broadcast,
                               Collective::SendRecv};

// Fewer calls for larger messages: about 256 MiB through each rank per size, 5 to 100 calls.
int timed_calls(int64_t bytes, bool quick) {
  return quick ? 3 : static_cast<int>(std::clamp<int64_t>((int64_t(256) << 20) / bytes, 5, 100));
}

// One call of c over float32 buffers of `bytes` bytes in all (nccl-tests' size), waited for.
struct Buffers {
  Buffers(Collective c, int64_t bytes, int ranks) {
    const int64_t n = std::max<int64_t>(bytes / 4, ranks);
    const int64_t per_rank = std::max<int64_t>(n / ranks, 1);
    switch (c) {
      case Collective::AllGather:
        input = zeros({per_rank}), output = zeros({per_rank * ranks});
        break;
      case Collective::ReduceScatter:
        input = zeros({per_rank * ranks}), output = zeros({per_rank});
        break;
      default:
        input = zeros({n}), output = zeros({n});
    }
  }
  Tensor input, output;
};

void call(Collective c, dist::ProcessGroup& pg, Buffers& b) {
  const int rank = pg.rank(), n = pg.size();
  switch (c) {
    case Collective::AllReduce:
      pg.all_reduce(b.input)->wait();
      break;
    case Collective::AllGather:
      pg.all_gather(b.output, b.input)->wait();
      break;
    case Collective::ReduceScatter:
      pg.reduce_scatter(b.output, b.input)->wait();
      break;
    case Collective::Broadcast:
      pg.broadcast(b.input, 0)->wait();
      break;
    case Collective::SendRecv: {
      // A ring: every rank sends to the next and receives from the previous at once.
      if (n == 1) return;
      auto recv = pg.recv(b.output, (rank + n - 1) % n);
      auto send = pg.send(b.input, (rank + 1) % n);
      send->wait();
      recv->wait();
      break;
    }
  }
}

// Each call's slowest-rank time in seconds.
std::vector<double> time_calls(Collective c, dist::ProcessGroup& pg, Buffers& b, int calls) {
  for (int i = 0; i < 2; ++i) call(c, pg, b);  // warm-up
  Tensor times = zeros({calls}, TensorOptions(kFloat64));
  double* t = static_cast<double*>(times.data_ptr());
  pg.barrier()->wait();
  for (int i = 0; i < calls; ++i) {
    const auto start = std::chrono::steady_clock::now();
    call(c, pg, b);
    t[i] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  pg.all_reduce(times, dist::ReduceOp::Max)->wait();
  return std::vector<double>(t, t + calls);
}

}  // namespace

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::AllReduce:
      return "all_reduce";
    case Collective::AllGather:
      return "all_gather";
    case Collective::ReduceScatter:
      return "reduce_scatter";
    case Collective::Broadcast:
      return "broadcast";
    case Collective::SendRecv:
      return "sendrecv";
  }
  return "?";
}

Collective parse_collective(const std::string& name) {
  for (Collective c : kAll)
    if (name == collective_name(c)) return c;
  throw ValueError(
      detail::str("[bench.comm] expected a collective all_reduce, all_gather, "
                  "reduce_scatter, broadcast or sendrecv, got \"",
                  name, "\""));
}

double busbw_factor(Collective c, int ranks) {
  TESSERA_CHECK(ranks > 0, ValueError, "[bench.comm] expected a positive rank count, got ", ranks);
  switch (c) {
    case Collective::AllReduce:
      return 2.0 * (ranks - 1) / ranks;
    case Collective::AllGather:
    case Collective::ReduceScatter:
      return static_cast<double>(ranks - 1) / ranks;
    case Collective::Broadcast:
    case Collective::SendRecv:
      return 1.0;
  }
  return 1.0;
}

void run_comm_suite(Result& result, dist::ProcessGroup& pg, const CommOptions& options) {
  const int64_t max_bytes = options.quick ? int64_t(64) << 10 : options.max_bytes;
  std::vector<int64_t> sizes;
  for (int64_t b = std::max<int64_t>(options.min_bytes, 4); b <= max_bytes; b *= 4)
    sizes.push_back(b);
  const int n = pg.size();
  const int64_t total = static_cast<int64_t>(options.collectives.size() * sizes.size());
  int64_t done = 0;
  for (Collective c : options.collectives) {
    for (int64_t bytes : sizes) {
      if (options.progress && pg.rank() == 0)
        options.progress(std::string(collective_name(c)) + " " + std::to_string(bytes) + " B", done,
                         total);
      ++done;
      Buffers b(c, bytes, n);
      const int64_t size = 4 * std::max(b.input.numel(), b.output.numel());
      const auto seconds = time_calls(c, pg, b, timed_calls(bytes, options.quick));
      std::vector<double> algbw, busbw;
      for (double s : seconds) {
        algbw.push_back(size / s);
        busbw.push_back(size / s * busbw_factor(c, n));
      }
      const nlohmann::json params = {
          {"collective", collective_name(c)}, {"ranks", n}, {"bytes", size}, {"dtype", "float32"}};
      result.add({"time", "s", Better::Lower, params, seconds,
                  "per call, the slowest rank's; median over calls"});
      result.add({"algbw", "B/s", Better::Higher, params, algbw, "size / time"});
      result.add({"busbw", "B/s", Better::Higher, params, busbw,
                  "algbw x nccl-tests' factor (all_reduce 2(n-1)/n, gather/scatter (n-1)/n)"});
    }
  }
  if (options.progress && pg.rank() == 0) options.progress("done", total, total);
}

}  // namespace tessera::bench
