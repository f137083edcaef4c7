#pragma once
// --compare: each figure of a new result against the same measurement (name + params) of an
// older one. A change counts as a regression or an improvement only beyond the measured noise:
// the larger relative spread, (max - min) / median, of the two figures' samples (at least 1%).
#include <string>
#include <vector>

#include "tessera/bench/result.h"

namespace tessera::bench {

struct Change {
  std::string label;
  std::string unit;
  double old_median = 0.0;
  double new_median = 0.0;
  double change = 0.0;  // new / old - 1, signed so that > 0 is better (latencies inverted)
  double noise = 0.0;   // the relative spread a change must exceed
  bool noise_measured = false;  // both sides had 3 or more samples
  bool regression = false;
  bool improvement = false;
};

// The least noise a change must exceed: 1% when both sides' spreads were measured (3 or more
// samples each), 10% when not.
inline constexpr double kNoiseFloor = 0.01;
inline constexpr double kUnmeasuredNoiseFloor = 0.10;
// Changes of the figures both results measured, in the new result's order.
std::vector<Change> compare(const Result& old_result, const Result& new_result);
// A markdown table of the changes, regressions flagged, with a line naming both results' machine
// and commit (and a warning when the machines differ).
std::string format_changes(const Result& old_result, const Result& new_result,
                           const std::vector<Change>& changes);

}  // namespace tessera::bench
