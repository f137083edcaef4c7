// charts_for: which sweeps of each suite are drawn, and how.
#include <functional>
#include <map>

#include "tessera/bench/svg_chart.h"

namespace tessera::bench {
namespace {

std::string param_string(const Figure& f, const char* key) {
  if (!f.params.contains(key)) return "";
  const auto& v = f.params[key];
  return v.is_string() ? v.get<std::string>() : v.dump();
}

double param_number(const Figure& f, const char* key) {
  const auto& v = f.params.contains(key) ? f.params[key] : nlohmann::json();
  if (v.is_number()) return v.get<double>();
  if (v.is_string() && v.get<std::string>() == "inf") return 0.0;  // not drawable on a rate axis
  return 0.0;
}

// Figures named `name` as series keyed by key_of(f) ("" leaves a figure out), x from param x_key,
// y the median.
std::vector<Series> series_of(const Result& r, const std::string& name, const char* x_key,
                              const std::function<std::string(const Figure&)>& key_of) {
  std::map<std::string, Series> by_key;
  std::vector<std::string> order;
  for (const auto& f : r.figures) {
    if (f.name != name || f.samples.empty()) continue;
    const double x = param_number(f, x_key);
    if (x <= 0.0) continue;
    const std::string key = key_of(f);
    if (key.empty()) continue;  // not drawn
    if (!by_key.count(key)) order.push_back(key), by_key[key].name = key;
    by_key[key].points.push_back({x, f.median()});
  }
  std::vector<Series> out;
  for (const auto& k : order) out.push_back(by_key[k]);
  return out;
}

}  // namespace

std::vector<Chart> charts_for(const Result& r) {
  std::vector<Chart> charts;
  auto add = [&](Chart c) {
    if (!c.series.empty()) charts.push_back(std::move(c));
  };
  if (r.suite == "hardware") {
    add({"hardware_bandwidth.svg", "Memory bandwidth (STREAM triad) by working set", "working set",
         "bandwidth", "B", "B/s", true, false,
         series_of(r, "bandwidth", "bytes", [](const Figure&) { return "triad"; })});
    add({"hardware_latency.svg", "Memory latency (pointer chase)", "working set",
         "latency per load", "B", "s", true, true,
         series_of(r, "latency", "bytes", [](const Figure&) { return "latency"; })});
  } else if (r.suite == "comm") {
    add({"comm_busbw.svg", "Bus bandwidth (nccl-tests definition)", "message size", "busbw", "B",
         "B/s", true, false, series_of(r, "busbw", "bytes", [](const Figure& f) {
           return param_string(f, "collective") + " x" + param_string(f, "ranks");
         })});
  } else if (r.suite == "serve") {
    for (const char* metric : {"ttft", "tpot", "itl", "e2el"})
      add({std::string("serve_") + metric + ".svg", std::string("Serving ") + metric + " vs load",
           "request rate (req/s)", metric, "", "s", false, false,
           series_of(r, metric, "rate", [&](const Figure& f) {
             // Percentiles, not the mean/std or the raw "all" samples.
             const std::string stat = param_string(f, "stat");
             return stat == "median" || stat == "p90" || stat == "p99"
                        ? std::string(metric) + " " + stat
                        : "";
           })});
  }
  return charts;
}

}  // namespace tessera::bench
