#pragma once
// Summary statistics of benchmark samples, defined as the tools users compare against define
// them: percentiles interpolate linearly between order statistics (numpy's default, which
// vLLM's serving benchmark uses), the standard deviation is the sample one (n - 1, llama-bench).
#include <vector>

namespace tessera::bench {

double mean(const std::vector<double>& v);
// Sample standard deviation; 0 for fewer than two values.
double stddev(const std::vector<double>& v);
double median(std::vector<double> v);
// The p-th percentile (0..100) with linear interpolation: rank p/100 * (n - 1). ValueError on an
// empty input or p outside [0, 100].
double percentile(std::vector<double> v, double p);

// The relative spread of a figure's samples, (max - min) / median: the noise --compare uses.
double relative_spread(const std::vector<double>& v);

}  // namespace tessera::bench
