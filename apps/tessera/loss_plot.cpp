#include "loss_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "metrics_log.h"
#include "tessera/bench/svg_chart.h"
#include "tessera/io/atomic_file.h"

namespace tessera::cli {

namespace {

using Points = std::vector<std::pair<double, double>>;

constexpr double kWidth = 800, kHeight = 480;
constexpr double kLeft = 64, kRight = 24, kTop = 44, kBottom = 52;  // plot-area margins

// Averages consecutive runs of points so that at most max_points remain.
Points downsample(const Points& points, size_t max_points) {
  if (points.size() <= max_points) return points;
  const size_t per = (points.size() + max_points - 1) / max_points;
  Points out;
  for (size_t i = 0; i < points.size(); i += per) {
    const size_t end = std::min(points.size(), i + per);
    double x = 0, y = 0;
    for (size_t j = i; j < end; ++j) x += points[j].first, y += points[j].second;
    out.emplace_back(x / double(end - i), y / double(end - i));
  }
  return out;
}

// A "nice" tick spacing (1, 2 or 5 times a power of ten) giving about `target` ticks.
double tick_step(double range, int target) {
  const double raw = range / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / mag;
  return (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
}

std::string fmt(const char* format, double a, double b = 0, double c = 0, double d = 0) {
  char buf[160];
  std::snprintf(buf, sizeof buf, format, a, b, c, d);
  return buf;
}

// A tick label: integers as such, other values with as many decimals as the step needs.
std::string tick_label(double v, double step) {
  const int decimals = step >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(step) - 1e-9));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

}  // namespace

LossCurves loss_curves(const std::vector<nlohmann::json>& records) {
  LossCurves curves;
  for (const nlohmann::json& r : records) {
    if (!r.contains("step")) continue;
    const double step = r["step"].get<double>();
    if (r.contains("train_loss") && r["train_loss"].is_number())
      curves.train.emplace_back(step, r["train_loss"].get<double>());
    if (r.contains("val_loss") && r["val_loss"].is_number())
      curves.val.emplace_back(step, r["val_loss"].get<double>());
  }
  return curves;
}

std::string render_loss_svg(const LossCurves& curves, const std::string& title, double x_max) {
  const Points train = downsample(curves.train, 1000);
  const Points& val = curves.val;
  double x0 = 0, x1 = std::max(x_max, 1.0), y0 = INFINITY, y1 = -INFINITY;
  for (const Points* series : {&train, &val}) {
    for (const auto& [x, y] : *series) {
      x1 = std::max(x1, x);
      y0 = std::min(y0, y);
      y1 = std::max(y1, y);
    }
  }
  if (!(y0 <= y1)) y0 = 0, y1 = 1;  // no points yet
  if (y1 - y0 < 1e-6) y0 -= 0.5, y1 += 0.5;
  const double pad = 0.05 * (y1 - y0);
  y0 -= pad, y1 += pad;
  const double pw = kWidth - kLeft - kRight, ph = kHeight - kTop - kBottom;
  auto px = [&](double x) { return kLeft + (x - x0) / (x1 - x0) * pw; };
  auto py = [&](double y) { return kTop + (y1 - y) / (y1 - y0) * ph; };

  std::string svg =
      fmt("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
          "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"12\">\n",
          kWidth, kHeight, kWidth, kHeight);
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg += fmt("<text x=\"%.1f\" y=\"26\" text-anchor=\"middle\" font-size=\"15\">", kWidth / 2) +
         bench::xml_escape(title) + "</text>\n";
  // Grid and tick labels.
  const double ys = tick_step(y1 - y0, 6),
               xs = std::max(1.0, tick_step(x1 - x0, 8));  // whole steps
  for (double y = std::ceil(y0 / ys) * ys; y <= y1; y += ys) {
    svg += fmt("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>\n",
               kLeft, py(y), kLeft + pw, py(y));
    svg += fmt("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">", kLeft - 6, py(y) + 4) +
           tick_label(y, ys) + "</text>\n";
  }
  for (double x = std::ceil(x0 / xs) * xs; x <= x1; x += xs) {
    svg += fmt("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>\n",
               px(x), kTop, px(x), kTop + ph);
    svg += fmt("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", px(x), kTop + ph + 18) +
           tick_label(x, xs) + "</text>\n";
  }
  svg +=
      fmt("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
          "stroke=\"#444\"/>\n",
          kLeft, kTop, pw, ph);
  svg += fmt("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">step</text>\n", kLeft + pw / 2,
             kHeight - 14);
  svg +=
      fmt("<text transform=\"translate(16 %.1f) rotate(-90)\" text-anchor=\"middle\">loss"
          "</text>\n",
          kTop + ph / 2);
  // Curves, then the legend.
  auto polyline = [&](const Points& points, const char* color, double stroke_width) {
    std::string s = "<polyline fill=\"none\" stroke=\"" + std::string(color) +
                    "\" stroke-width=\"" + fmt("%.1f", stroke_width) + "\" points=\"";
    for (const auto& [x, y] : points) s += fmt("%.1f,%.1f ", px(x), py(y));
    return s + "\"/>\n";
  };
  const char* train_color = "#1f77b4";
  const char* val_color = "#ff7f0e";
  if (train.size() > 1) svg += polyline(train, train_color, 1.2);
  if (val.size() > 1) svg += polyline(val, val_color, 2.0);
  for (const auto& [x, y] : val)
    svg += fmt("<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" ", px(x), py(y)) + "fill=\"" + val_color +
           "\"/>\n";
  const double lx = kLeft + pw - 150, ly = kTop + 14;
  svg +=
      fmt("<rect x=\"%.1f\" y=\"%.1f\" width=\"140\" height=\"40\" fill=\"white\" "
          "fill-opacity=\"0.85\"/>\n",
          lx - 8, ly - 12);
  svg += fmt("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke-width=\"2\" ", lx, ly,
             lx + 24, ly) +
         "stroke=\"" + train_color + "\"/>\n";
  svg += fmt("<text x=\"%.1f\" y=\"%.1f\">train loss</text>\n", lx + 30, ly + 4);
  svg += fmt("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke-width=\"2\" ", lx,
             ly + 18, lx + 24, ly + 18) +
         "stroke=\"" + val_color + "\"/>\n";
  svg += fmt("<text x=\"%.1f\" y=\"%.1f\">val loss</text>\n", lx + 30, ly + 22);
  return svg + "</svg>\n";
}

void write_loss_plot(const std::string& path, const LossCurves& curves, const std::string& title,
                     double x_max) {
  io::write_file_atomic(path, render_loss_svg(curves, title, x_max), "train");
}

}  // namespace tessera::cli
