#include "tessera/bench/stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "tessera/core/error.h"

namespace tessera::bench {

double mean(const std::vector<double>& v) {
  return v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / v.size();
}

double stddev(const std::vector<double>& v) {
  if (v.size() < 2) return 0.0;
  const double m = mean(v);
  double ss = 0.0;
  for (double x : v) ss += (x - m) * (x - m);
  return std::sqrt(ss / (v.size() - 1));
}

double median(std::vector<double> v) { return v.empty() ? 0.0 : percentile(std::move(v), 50.0); }

double percentile(std::vector<double> v, double p) {
  TESSERA_CHECK(!v.empty(), ValueError,
                "[bench.percentile] expected at least one sample, got none");
  TESSERA_CHECK(p >= 0.0 && p <= 100.0, ValueError,
                "[bench.percentile] expected a percentile in [0, 100], got ", p);
  std::sort(v.begin(), v.end());
  const double rank = p / 100.0 * (v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (rank - lo) * (v[hi] - v[lo]);
}

double relative_spread(const std::vector<double>& v) {
  if (v.size() < 2) return 0.0;
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  const double m = median(v);
  return m != 0.0 ? (*hi - *lo) / std::abs(m) : 0.0;
}

}  // namespace tessera::bench
