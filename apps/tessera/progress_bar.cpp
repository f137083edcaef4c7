#include "progress_bar.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace tessera::cli {

namespace {

// "01:23" or "1:02:03".
std::string format_duration(double seconds) {
  const auto s = static_cast<long long>(std::max(0.0, seconds));
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%02lld:%02lld", s / 60, s % 60);
  return buf;
}

int terminal_columns() {
  winsize w{};
  if (ioctl(STDERR_FILENO, TIOCGWINSZ, &w) == 0 && w.ws_col > 0) return w.ws_col;
  return 80;
}

double seconds_between(std::chrono::steady_clock::time_point a,
                       std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

ProgressBar::ProgressBar(int64_t total, bool enabled)
    : total_(std::max<int64_t>(total, 1)), enabled_(enabled) {}

bool ProgressBar::stderr_is_terminal() { return isatty(STDERR_FILENO) == 1; }

void ProgressBar::log(std::string_view text) {
  if (muted_) return;
  const bool redraw = drawn_;
  clear();
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  if (redraw) draw();
}

void ProgressBar::update(int64_t done, std::string_view status) {
  if (muted_) return;
  const Clock::time_point now = Clock::now();
  if (first_done_ < 0) {
    first_done_ = done;
    first_update_ = now;
  }
  done_ = done;
  status_ = status;
  if (enabled_) draw();
}

void ProgressBar::set_time_limit(double seconds) {
  has_deadline_ = seconds > 0;
  deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                 std::chrono::duration<double>(std::max(seconds, 0.0)));
}

void ProgressBar::clear() {
  if (!drawn_) return;
  std::fputs("\r\033[2K", stderr);  // carriage return, erase the line
  std::fflush(stderr);
  drawn_ = false;
}

void ProgressBar::draw() {
  const Clock::time_point now = Clock::now();
  const double elapsed = seconds_between(start_, now);
  const double window = seconds_between(first_update_, now);
  const double rate = window > 0 ? static_cast<double>(done_ - first_done_) / window : 0.0;
  double eta = rate > 0 ? static_cast<double>(total_ - done_) / rate : -1.0;
  if (has_deadline_) {
    const double left = seconds_between(now, deadline_);
    eta = eta < 0 ? left : std::min(eta, left);
  }
  const double frac =
      std::clamp(static_cast<double>(done_) / static_cast<double>(total_), 0.0, 1.0);

  char head[16], tail[160];
  std::snprintf(head, sizeof head, "%3d%% |", static_cast<int>(frac * 100));
  std::snprintf(tail, sizeof tail, "| %lld/%lld [%s<%s, %.2f it/s]", static_cast<long long>(done_),
                static_cast<long long>(total_), format_duration(elapsed).c_str(),
                eta < 0 ? "?" : format_duration(eta).c_str(), rate);
  std::string right = tail;
  if (!status_.empty()) right += " " + status_;
  // The line must fit the terminal: a wrapped line would not be erased by the next redraw.
  const int cols = terminal_columns() - 1;
  const int fixed = static_cast<int>(std::string_view(head).size() + right.size());
  int width = std::min(cols - fixed, 40);
  std::string line;
  if (width >= 10) {
    const int filled = static_cast<int>(frac * width);
    line = head;
    for (int i = 0; i < width; ++i) line += i < filled ? "\u2588" : "\u2591";  // █ ░
    line += right;
  } else {
    line = std::string(head) + right;
    if (static_cast<int>(line.size()) > cols) line.resize(std::max(cols, 0));
  }
  std::fputs("\r\033[2K", stderr);
  std::fputs(line.c_str(), stderr);
  std::fflush(stderr);
  drawn_ = true;
}

}  // namespace tessera::cli
