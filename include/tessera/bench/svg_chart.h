#pragma once
// Line charts of benchmark sweeps as standalone SVG (no script, no external fonts): axes with
// ticks (log2/log10 or linear), one coloured line with markers per series, a legend.
#include <string>
#include <utility>
#include <vector>

#include "tessera/bench/result.h"

namespace tessera::bench {

struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y), drawn in x order
};

struct Chart {
  std::string file;  // file name the CLI writes it to, e.g. "hardware_latency.svg"
  std::string title;
  std::string x_label, y_label;
  std::string x_unit, y_unit;  // units format_value understands ("B" prints bytes)
  bool log_x = false, log_y = false;
  std::vector<Series> series;
};

std::string render_svg(const Chart& chart);
// Text made safe inside SVG/XML elements and attributes.
std::string xml_escape(const std::string& s);
// The charts a result has: hardware latency sweep, comm busbw vs size, serve latency vs load.
std::vector<Chart> charts_for(const Result& result);

}  // namespace tessera::bench
