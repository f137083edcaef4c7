#pragma once
// loss.svg: train and validation loss against step as a self-contained SVG line chart (no
// plotting dependency), rewritten atomically at every evaluation so a browser or image viewer
// can be left open on it.
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace tessera::cli {

struct LossCurves {
  std::vector<std::pair<double, double>> train;  // (step, loss)
  std::vector<std::pair<double, double>> val;
};

// The "train_loss" and "val_loss" fields of metrics records, by "step" (non-finite losses, logged
// as null, are skipped).
LossCurves loss_curves(const std::vector<nlohmann::json>& records);

// The chart as SVG text. The step axis spans [0, max(x_max, last step)] (x_max: the planned
// steps, so the axis stays put as the run goes). Long train curves are averaged down to at most
// 1000 points (which also smooths the per-step noise); validation points get markers.
std::string render_loss_svg(const LossCurves& curves, const std::string& title, double x_max = 0);

// render_loss_svg written to path atomically.
void write_loss_plot(const std::string& path, const LossCurves& curves, const std::string& title,
                     double x_max = 0);

}  // namespace tessera::cli
