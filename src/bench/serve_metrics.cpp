// Request metrics of the serve suite, defined as vLLM's serving benchmark defines them
// (benchmark_serving.py's calculate_metrics), from the timestamps a client recorded.
#include <cmath>
#include <numeric>

#include "tessera/bench/serve.h"
#include "tessera/bench/stats.h"
#include "tessera/core/error.h"

namespace tessera::bench {

double RequestRecord::ttft() const {
  return token_times.empty() ? 0.0 : token_times.front() - send;
}

double RequestRecord::e2el() const { return token_times.empty() ? 0.0 : token_times.back() - send; }

double RequestRecord::tpot() const {
  return output_tokens > 1 ? (e2el() - ttft()) / static_cast<double>(output_tokens - 1) : 0.0;
}

GoodputSlo parse_goodput(const std::vector<std::string>& specs) {
  GoodputSlo slo;
  for (const std::string& spec : specs) {
    const size_t colon = spec.find(':');
    TESSERA_CHECK(colon != std::string::npos, ValueError,
                  "[bench.serve] expected a goodput SLO as KEY:MILLISECONDS, got \"", spec, "\"");
    const std::string key = spec.substr(0, colon);
    double ms = 0.0;
    size_t used = 0;
    try {
      ms = std::stod(spec.substr(colon + 1), &used);
    } catch (const std::exception&) {
      used = 0;
    }
    TESSERA_CHECK(used > 0 && used == spec.size() - colon - 1 && ms > 0.0 && std::isfinite(ms),
                  ValueError, "[bench.serve] expected a positive number of milliseconds in \"",
                  spec, "\"");
    std::optional<double>* field = key == "ttft"   ? &slo.ttft
                                   : key == "tpot" ? &slo.tpot
                                   : key == "e2el" ? &slo.e2el
                                                   : nullptr;
    TESSERA_CHECK(field != nullptr, ValueError,
                  "[bench.serve] expected a goodput SLO on ttft, tpot or e2el, got \"", key, "\"");
    *field = ms / 1000.0;
  }
  return slo;
}

namespace {

LatencyStats stats_of(std::vector<double> values) {
  LatencyStats s;
  if (!values.empty()) {
    s.mean = bench::mean(values);
    // np.std: the population deviation (ddof 0), not stats.h's sample one.
    double ss = 0.0;
    for (double v : values) ss += (v - s.mean) * (v - s.mean);
    s.std = std::sqrt(ss / static_cast<double>(values.size()));
    s.median = percentile(values, 50.0);
    s.p90 = percentile(values, 90.0);
    s.p99 = percentile(values, 99.0);
  }
  s.values = std::move(values);
  return s;
}

bool meets(const GoodputSlo& slo, const RequestRecord& r) {
  // vLLM counts a request good when slo >= its value (inclusive), on every SLO given.
  return (!slo.ttft || *slo.ttft >= r.ttft()) && (!slo.tpot || *slo.tpot >= r.tpot()) &&
         (!slo.e2el || *slo.e2el >= r.e2el());
}

}  // namespace

ServeSummary summarize(const std::vector<RequestRecord>& records, double duration,
                       const GoodputSlo& slo) {
  TESSERA_CHECK(duration > 0.0, ValueError, "[bench.serve] expected a run duration > 0 s, got ",
                duration);
  ServeSummary s;
  s.duration = duration;
  std::vector<double> ttft, tpot, itl, e2el;
  int64_t good = 0;
  for (const RequestRecord& r : records) {
    if (!r.success) {
      ++s.failed;
      continue;
    }
    ++s.completed;
    s.total_input += r.prompt_tokens;
    s.total_output += r.output_tokens;
    ttft.push_back(r.ttft());
    e2el.push_back(r.e2el());
    if (r.output_tokens > 1) tpot.push_back(r.tpot());
    for (size_t i = 1; i < r.token_times.size(); ++i)
      itl.push_back(r.token_times[i] - r.token_times[i - 1]);
    if (!slo.empty() && meets(slo, r)) ++good;
  }
  s.request_throughput = static_cast<double>(s.completed) / duration;
  s.output_throughput = static_cast<double>(s.total_output) / duration;
  s.total_token_throughput = static_cast<double>(s.total_input + s.total_output) / duration;
  s.goodput = static_cast<double>(good) / duration;
  s.ttft = stats_of(std::move(ttft));
  s.tpot = stats_of(std::move(tpot));
  s.itl = stats_of(std::move(itl));
  s.e2el = stats_of(std::move(e2el));
  return s;
}

}  // namespace tessera::bench
