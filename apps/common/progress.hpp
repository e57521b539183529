// A one-line progress bar, redrawn with '\r' at most ~8 times a second.
// `castor run` shows the redraws on a terminal and keeps only the final line
// in a log (see local_launch.cpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace castor::apps {

class ProgressBar {
 public:
  ProgressBar(std::string label, int64_t total, bool enabled = true);
  /// A bar left unfinished (an error ended its work) ends its line, so
  /// that what is printed next starts on a line of its own.
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;
  /// `done` of `total` units; `note` goes after the bar (loss, speed...).
  void update(int64_t done, const std::string& note = "");
  /// Draws the full bar with `note` and ends the line.
  void finish(const std::string& note);

 private:
  void draw(int64_t done, const std::string& note, bool final);
  std::string label_;
  int64_t total_;
  bool enabled_;
  std::chrono::steady_clock::time_point last_draw_{};
  bool line_open_ = false;  // drawn, and not finished
};

}  // namespace castor::apps
