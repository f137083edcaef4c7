#include "tessera/bench/compare.h"

#include <algorithm>
#include <cstdio>

#include "tessera/bench/format.h"
#include "tessera/bench/stats.h"

namespace tessera::bench {

std::vector<Change> compare(const Result& old_result, const Result& new_result) {
  std::vector<Change> changes;
  for (const auto& f : new_result.figures) {
    const auto old = std::find_if(old_result.figures.begin(), old_result.figures.end(),
                                  [&](const Figure& o) { return o.same_measurement(f); });
    if (old == old_result.figures.end() || old->samples.empty() || f.samples.empty()) continue;
    Change c;
    c.label = f.label();
    c.unit = f.unit;
    c.old_median = old->median();
    c.new_median = f.median();
    if (c.old_median == 0.0 || c.new_median == 0.0) continue;
    // Signed so that positive is better: a faster rate, or a shorter time.
    c.change = f.better == Better::Higher ? c.new_median / c.old_median - 1.0
                                          : c.old_median / c.new_median - 1.0;
    // A spread needs 3 samples to mean anything: below that (serve's single runs, quick mode)
    // the noise is unmeasured and a change must exceed a wide floor.
    c.noise_measured = old->samples.size() >= 3 && f.samples.size() >= 3;
    c.noise = std::max({relative_spread(old->samples), relative_spread(f.samples),
                        c.noise_measured ? kNoiseFloor : kUnmeasuredNoiseFloor});
    c.regression = c.change < -c.noise;
    c.improvement = c.change > c.noise;
    changes.push_back(c);
  }
  return changes;
}

std::string format_changes(const Result& old_result, const Result& new_result,
                           const std::vector<Change>& changes) {
  std::string out = "old: " + short_commit(old_result.commit) + " " + old_result.date + " (" +
                    old_result.machine.summary() + ")\nnew: " + short_commit(new_result.commit) +
                    " " + new_result.date + " (" + new_result.machine.summary() + ")\n";
  if (old_result.machine.cpu_model != new_result.machine.cpu_model ||
      old_result.machine.cpu_flags != new_result.machine.cpu_flags)
    out += "warning: the machines differ; changes say as much about them as about the code\n";
  out += "\n| figure | old | new | change | noise | |\n|---|---|---|---|---|---|\n";
  int regressions = 0;
  for (const auto& c : changes) {
    char change[32], noise[32];
    std::snprintf(change, sizeof change, "%+.1f%%", 100.0 * c.change);
    std::snprintf(noise, sizeof noise, c.noise_measured ? "%.1f%%" : "%.1f%% (n < 3)",
                  100.0 * c.noise);
    out += "| " + c.label + " | " + format_value(c.old_median, c.unit) + " | " +
           format_value(c.new_median, c.unit) + " | " + change + " | " + noise + " | " +
           (c.regression    ? "REGRESSION"
            : c.improvement ? "better"
                            : "") +
           " |\n";
    regressions += c.regression;
  }
  out += "\n" + std::to_string(changes.size()) + " figures compared, " +
         std::to_string(regressions) + " regressions beyond the noise\n";
  return out;
}

}  // namespace tessera::bench
