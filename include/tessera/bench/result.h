#pragma once
// The one result shape of every `tessera bench` suite ("tessera-bench/1"): the machine it ran on,
// the commit, date and exact command, and a list of figures. A figure is one named measurement
// at given parameters with all its samples, so readers (--compare, reports, the studio) can
// judge noise themselves. Figures are identified by name + params.
//
//   {"format": "tessera-bench/1", "suite": "hardware", "machine": {...}, "commit": "f601658...",
//    "date": "2026-11-23T22:10:00Z", "command": "tessera bench hardware --quick",
//    "figures": [{"name": "gemm", "unit": "FLOP/s", "better": "higher",
//                 "params": {"dtype": "fp32", "m": 1024, ...}, "samples": [...],
//                 "median": ..., "min": ..., "max": ...}]}
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tessera/bench/machine.h"

namespace tessera::bench {

inline constexpr const char* kResultFormat = "tessera-bench/1";

enum class Better { Higher, Lower };

struct Figure {
  std::string name;  // "gemm", "stream", "ttft", ...
  std::string unit;  // "FLOP/s", "B/s", "s", "tok/s", ...
  Better better = Better::Higher;
  nlohmann::json params = nlohmann::json::object();  // what was measured: dtype, sizes, peer
  std::vector<double> samples;                       // one per repetition, in run order
  std::string definition;  // how the figure is computed, e.g. "2*m*n*k / time"

  double median() const;
  double min() const;
  double max() const;
  // "gemm dtype=fp32 m=1024": the name with its params, for tables and --compare.
  std::string label() const;
  // name and params equal (the identity --compare matches on).
  bool same_measurement(const Figure& other) const;
};

struct Result {
  std::string suite;
  Machine machine;
  std::string commit;   // git commit of the build ("unknown" when built outside git)
  std::string date;     // ISO 8601 UTC
  std::string command;  // the exact command line
  std::vector<Figure> figures;

  // A result for suite stamped with this machine, build commit, the current time and command.
  static Result start(std::string suite, std::string command);
  Figure& add(Figure figure);
  // The first figure named name whose params contain every key/value of match; null if none.
  const Figure* find(const std::string& name, const nlohmann::json& match = {}) const;

  nlohmann::json to_json() const;
  // ValueError "[bench] ..." when j is not a tessera-bench/1 result.
  static Result from_json(const nlohmann::json& j);
  // Written atomically (temp file, fsync, rename).
  void save(const std::string& path) const;
  static Result load(const std::string& path);
};

}  // namespace tessera::bench
