#pragma once
// A one-line progress bar on stderr, redrawn in place, with log lines printed above it on stdout:
//
//   step  41/200 | train loss 2.4810 | ...          <- stdout, scrolls
//    20% |█████░░░░░░░░░░░░░░░░| 41/200 [00:12<00:47, 3.4 it/s] loss 2.48   <- stderr, redrawn
//
// The bar is drawn only when stderr is a terminal; otherwise log() just prints the lines, so
// redirected output stays plain text.
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace tessera::cli {

class ProgressBar {
 public:
  // enabled: draw the bar at all (normally stderr_is_terminal()).
  ProgressBar(int64_t total, bool enabled);
  ~ProgressBar() { clear(); }
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  static bool stderr_is_terminal();

  void set_total(int64_t total) { total_ = total > 0 ? total : 1; }
  // Prints nothing from now on (the data-parallel ranks other than 0).
  void mute() {
    clear();
    muted_ = true;
  }
  // Prints text and a newline on stdout, keeping the bar below it.
  void log(std::string_view text);
  // Redraws the bar at done/total with a short status (e.g. the latest loss).
  void update(int64_t done, std::string_view status = {});
  // The ETA is capped by this many seconds from now (a --time-limit); <= 0: no cap.
  void set_time_limit(double seconds);
  // Erases the bar (it reappears on the next update).
  void clear();

 private:
  using Clock = std::chrono::steady_clock;
  void draw();

  int64_t total_;
  bool enabled_;
  bool drawn_ = false;
  bool muted_ = false;
  int64_t done_ = 0;
  int64_t first_done_ = -1;  // done at the first update: the rate counts only this run's work
  Clock::time_point start_ = Clock::now();
  Clock::time_point first_update_;
  Clock::time_point deadline_{};
  bool has_deadline_ = false;
  std::string status_;
};

}  // namespace tessera::cli
