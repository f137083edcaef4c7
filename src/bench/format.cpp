#include "tessera/bench/format.h"

#include <cmath>
#include <cstdio>

namespace tessera::bench {

std::string format_value(double value, const std::string& unit) {
  char buf[64];
  if (unit == "s") {
    const double a = std::abs(value);
    if (a < 1e-6)
      std::snprintf(buf, sizeof buf, "%.1f ns", value * 1e9);
    else if (a < 1e-3)
      std::snprintf(buf, sizeof buf, "%.2f us", value * 1e6);
    else if (a < 1.0)
      std::snprintf(buf, sizeof buf, "%.2f ms", value * 1e3);
    else
      std::snprintf(buf, sizeof buf, "%.3f s", value);
    return buf;
  }
  if (unit == "B") return format_bytes(value);
  // Rates (FLOP/s, B/s, OP/s) get SI prefixes; counts per second of tokens or requests do not.
  if (unit == "FLOP/s" || unit == "B/s" || unit == "OP/s") {
    const char* prefixes[] = {"", "K", "M", "G", "T", "P"};
    int i = 0;
    double v = value;
    while (std::abs(v) >= 1000.0 && i < 5) {
      v /= 1000.0;
      ++i;
    }
    std::snprintf(buf, sizeof buf, "%.1f %s%s", v, prefixes[i], unit.c_str());
    return buf;
  }
  if (std::abs(value) >= 100.0)
    std::snprintf(buf, sizeof buf, "%.0f", value);
  else
    std::snprintf(buf, sizeof buf, "%.3g", value);
  return unit.empty() ? buf : std::string(buf) + " " + unit;
}

std::string short_commit(const std::string& commit) {
  const bool dirty = commit.size() > 6 && commit.compare(commit.size() - 6, 6, "-dirty") == 0;
  return commit.substr(0, 12) + (dirty ? "-dirty" : "");
}

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int i = 0;
  while (bytes >= 1024.0 && i < 4) {
    bytes /= 1024.0;
    ++i;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, bytes == std::floor(bytes) ? "%.0f %s" : "%.1f %s", bytes,
                units[i]);
  return buf;
}

}  // namespace tessera::bench
