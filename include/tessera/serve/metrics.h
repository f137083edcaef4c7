#pragma once
// The server's Prometheus metrics (text exposition format 0.0.4): requests by endpoint and
// status, prompt and generated tokens, time to first token and time between tokens (histograms,
// seconds), and the engine's queue, running batch, KV blocks and preemptions. Thread-safe.
#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "tessera/infer/engine.h"

namespace tessera::serve {

// Cumulative histogram over fixed upper bounds (seconds) plus +Inf.
class Histogram {
 public:
  static constexpr std::array<double, 14> kBounds{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                  0.1,    0.25,  0.5,    1.0,   2.5,  5.0,   10.0};
  void observe(double seconds);
  // "<name>_bucket{le=...} n" lines, _sum and _count.
  std::string render(const std::string& name) const;

 private:
  std::array<int64_t, kBounds.size() + 1> counts_{};
  double sum_ = 0.0;
  int64_t count_ = 0;
};

class Metrics {
 public:
  void count_request(const std::string& endpoint, int status);
  void count_tokens(int64_t prompt, int64_t generated);
  void observe_time_to_first_token(double seconds);
  void observe_time_between_tokens(double seconds);
  // The whole exposition, with the engine's gauges as of stats.
  std::string render(const infer::EngineStats& stats) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, int64_t> requests_;
  int64_t prompt_tokens_ = 0, generation_tokens_ = 0;
  Histogram ttft_, tbt_;
};

}  // namespace tessera::serve
