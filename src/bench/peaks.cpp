#include "tessera/bench/peaks.h"

#include <algorithm>

#include "tessera/bench/hardware.h"
#include "tessera/bench/machine.h"

namespace tessera::bench {
namespace {

double best_rate(double work, const std::vector<double>& seconds) {
  return seconds.empty() ? 0.0 : work / *std::min_element(seconds.begin(), seconds.end());
}

}  // namespace

double gemm_peak(const Result* hardware, const std::string& dtype, bool measure) {
  if (hardware) {
    double best = 0;
    for (const auto& f : hardware->figures)
      if (f.name == "gemm" && f.params.value("dtype", "") == dtype) best = std::max(best, f.max());
    return best;
  }
  if (!measure) return 0;
  constexpr int64_t size = 1024;
  return best_rate(gemm_flops(size, size, size), time_gemm(dtype, size, 5));
}

double triad_peak(const Result* hardware, bool measure) {
  if (hardware) {
    const Figure* f = hardware->find("stream", {{"kernel", "triad"}});
    return f ? f->max() : 0.0;
  }
  if (!measure) return 0;
  const int64_t n = 4 * Machine::detect().last_level_cache_bytes() / 8;
  return best_rate(stream_bytes(StreamKernel::Triad, n), time_stream(StreamKernel::Triad, n, 5));
}

}  // namespace tessera::bench
