#include "tessera/bench/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "tessera/bench/format.h"

namespace tessera::bench {
namespace {

constexpr double kWidth = 720, kHeight = 420;
constexpr double kLeft = 90, kRight = 190, kTop = 40, kBottom = 60;
constexpr const char* kColours[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                    "#9467bd", "#8c564b", "#e377c2", "#17becf"};

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

// An axis maps data values to pixels, linearly or by log.
struct Axis {
  double lo, hi;
  bool log;
  double px0, px1;
  double t(double v) const { return log ? std::log10(std::max(v, 1e-300)) : v; }
  double map(double v) const {
    const double a = t(lo), b = t(hi);
    return b == a ? (px0 + px1) / 2 : px0 + (t(v) - a) / (b - a) * (px1 - px0);
  }
  // Ticks at powers of 2 (bytes) or 10 for log axes, at 5 even steps for linear ones.
  std::vector<double> ticks(bool bytes) const {
    std::vector<double> out;
    if (log) {
      const double base = bytes ? 4.0 : 10.0;
      double v = std::pow(base, std::floor(std::log(lo) / std::log(base)));
      for (; v <= hi * 1.0001; v *= base)
        if (v >= lo * 0.9999) out.push_back(v);
      if (out.size() < 3) {  // within a decade or two: geometric steps instead
        out.clear();
        for (int i = 0; i <= 4; ++i) out.push_back(lo * std::pow(hi / lo, i / 4.0));
      }
    } else {
      for (int i = 0; i <= 4; ++i) out.push_back(lo + (hi - lo) * i / 4);
    }
    return out;
  }
};

std::string tick_text(double v, const std::string& unit) {
  return unit == "B" ? format_bytes(v) : format_value(v, unit);
}

}  // namespace

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}

std::string render_svg(const Chart& chart) {
  double xlo = std::numeric_limits<double>::infinity(), xhi = -xlo, ylo = xlo, yhi = -xlo;
  for (const auto& s : chart.series)
    for (auto [x, y] : s.points) {
      xlo = std::min(xlo, x), xhi = std::max(xhi, x);
      ylo = std::min(ylo, y), yhi = std::max(yhi, y);
    }
  if (!std::isfinite(xlo)) xlo = 0, xhi = 1, ylo = 0, yhi = 1;
  if (!chart.log_y) ylo = std::min(ylo, 0.0), yhi = yhi > 0 ? yhi * 1.05 : 1.0;
  const Axis x{xlo, xhi, chart.log_x, kLeft, kWidth - kRight};
  const Axis y{ylo, yhi, chart.log_y, kHeight - kBottom, kTop};

  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(kWidth) +
                    "\" height=\"" + num(kHeight) +
                    "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg += "<text x=\"" + num(kWidth / 2 - kRight / 2 + kLeft / 2) +
         "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">" + xml_escape(chart.title) +
         "</text>\n";
  for (double v : x.ticks(chart.x_unit == "B")) {
    const double px = x.map(v);
    svg += "<line x1=\"" + num(px) + "\" y1=\"" + num(kTop) + "\" x2=\"" + num(px) + "\" y2=\"" +
           num(kHeight - kBottom) + "\" stroke=\"#e5e5e5\"/>\n";
    svg += "<text x=\"" + num(px) + "\" y=\"" + num(kHeight - kBottom + 16) +
           "\" text-anchor=\"middle\">" + xml_escape(tick_text(v, chart.x_unit)) + "</text>\n";
  }
  for (double v : y.ticks(chart.y_unit == "B")) {
    const double py = y.map(v);
    svg += "<line x1=\"" + num(kLeft) + "\" y1=\"" + num(py) + "\" x2=\"" + num(kWidth - kRight) +
           "\" y2=\"" + num(py) + "\" stroke=\"#e5e5e5\"/>\n";
    svg += "<text x=\"" + num(kLeft - 6) + "\" y=\"" + num(py + 4) + "\" text-anchor=\"end\">" +
           xml_escape(tick_text(v, chart.y_unit)) + "</text>\n";
  }
  svg += "<rect x=\"" + num(kLeft) + "\" y=\"" + num(kTop) + "\" width=\"" +
         num(kWidth - kLeft - kRight) + "\" height=\"" + num(kHeight - kTop - kBottom) +
         "\" fill=\"none\" stroke=\"#333\"/>\n";
  svg += "<text x=\"" + num((kLeft + kWidth - kRight) / 2) + "\" y=\"" + num(kHeight - 18) +
         "\" text-anchor=\"middle\">" + xml_escape(chart.x_label) + "</text>\n";
  svg += "<text transform=\"translate(18," + num((kTop + kHeight - kBottom) / 2) +
         ") rotate(-90)\" text-anchor=\"middle\">" + xml_escape(chart.y_label) + "</text>\n";
  for (size_t i = 0; i < chart.series.size(); ++i) {
    auto points = chart.series[i].points;
    std::sort(points.begin(), points.end());
    const std::string colour = kColours[i % std::size(kColours)];
    std::string path;
    for (auto [px, py] : points)
      path += (path.empty() ? "M" : " L") + num(x.map(px)) + "," + num(y.map(py));
    svg +=
        "<path d=\"" + path + "\" fill=\"none\" stroke=\"" + colour + "\" stroke-width=\"2\"/>\n";
    for (auto [px, py] : points)
      svg += "<circle cx=\"" + num(x.map(px)) + "\" cy=\"" + num(y.map(py)) + "\" r=\"3\" fill=\"" +
             colour + "\"/>\n";
    const double ly = kTop + 10 + 18 * i;
    svg += "<line x1=\"" + num(kWidth - kRight + 12) + "\" y1=\"" + num(ly) + "\" x2=\"" +
           num(kWidth - kRight + 32) + "\" y2=\"" + num(ly) + "\" stroke=\"" + colour +
           "\" stroke-width=\"2\"/>\n";
    svg += "<text x=\"" + num(kWidth - kRight + 38) + "\" y=\"" + num(ly + 4) + "\">" +
           xml_escape(chart.series[i].name) + "</text>\n";
  }
  return svg + "</svg>\n";
}

}  // namespace tessera::bench
