// The serve suite's workload: arrival times and prompt/output lengths as vLLM's serving
// benchmark draws them (benchmark_serving.py's get_request, the random dataset).
#include <algorithm>
#include <cmath>

#include "tessera/bench/serve.h"
#include "tessera/core/error.h"

namespace tessera::bench {

std::vector<double> arrival_times(int64_t n, double rate, double burstiness, std::mt19937_64& rng) {
  TESSERA_CHECK(n >= 0, ValueError, "[bench.serve] expected a request count >= 0, got ", n);
  TESSERA_CHECK(rate > 0.0, ValueError, "[bench.serve] expected a request rate > 0, got ", rate);
  TESSERA_CHECK(burstiness > 0.0 && std::isfinite(burstiness), ValueError,
                "[bench.serve] expected a burstiness > 0, got ", burstiness);
  std::vector<double> times(static_cast<size_t>(n), 0.0);
  if (std::isinf(rate)) return times;
  // Gamma(k, theta) has mean k * theta = 1 / rate and CV 1 / sqrt(k); k = 1 is exponential.
  std::gamma_distribution<double> gap(burstiness, 1.0 / (rate * burstiness));
  for (size_t i = 1; i < times.size(); ++i) times[i] = times[i - 1] + gap(rng);
  return times;
}

std::vector<int64_t> sample_lengths(int64_t n, int64_t len, double range_ratio,
                                    std::mt19937_64& rng) {
  TESSERA_CHECK(len >= 1, ValueError, "[bench.serve] expected a length >= 1, got ", len);
  TESSERA_CHECK(range_ratio >= 0.0 && range_ratio < 1.0, ValueError,
                "[bench.serve] expected a range ratio in [0, 1), got ", range_ratio);
  std::vector<int64_t> out(static_cast<size_t>(std::max<int64_t>(n, 0)), len);
  if (range_ratio == 0.0) return out;
  // int() truncation of both bounds, the upper one inclusive, as numpy's randint(lo, hi + 1).
  const auto lo = std::max<int64_t>(1, static_cast<int64_t>(len * (1.0 - range_ratio)));
  const auto hi = std::max<int64_t>(lo, static_cast<int64_t>(len * (1.0 + range_ratio)));
  std::uniform_int_distribution<int64_t> dist(lo, hi);
  for (int64_t& l : out) l = dist(rng);
  return out;
}

std::vector<PlannedRequest> plan_workload(const WorkloadOptions& o) {
  TESSERA_CHECK(o.vocab > 3, ValueError,
                "[bench.serve] expected a prompt vocabulary of more than 3 ids, got ", o.vocab);
  std::mt19937_64 rng(o.seed);
  const std::vector<double> times = arrival_times(o.num_prompts, o.rate, o.burstiness, rng);
  const std::vector<int64_t> prompt_lens =
      sample_lengths(o.num_prompts, o.prompt_len, o.range_ratio, rng);
  const std::vector<int64_t> output_lens =
      sample_lengths(o.num_prompts, o.output_len, o.range_ratio, rng);
  std::uniform_int_distribution<int32_t> id(3, static_cast<int32_t>(o.vocab - 1));
  std::vector<PlannedRequest> plan(times.size());
  for (size_t i = 0; i < plan.size(); ++i) {
    plan[i].send_at = times[i];
    plan[i].output_len = output_lens[i];
    plan[i].prompt.resize(static_cast<size_t>(prompt_lens[i]));
    for (int32_t& t : plan[i].prompt) t = id(rng);
  }
  return plan;
}

}  // namespace tessera::bench
