#include "progress.hpp"

#include <algorithm>
#include <cstdio>

namespace castor::apps {

ProgressBar::ProgressBar(std::string label, int64_t total, bool enabled)
    : label_(std::move(label)), total_(std::max<int64_t>(total, 1)), enabled_(enabled) {}

ProgressBar::~ProgressBar() {
  if (!line_open_) return;
  std::printf("\n");
  std::fflush(stdout);
}

void ProgressBar::update(int64_t done, const std::string& note) {
  auto now = std::chrono::steady_clock::now();
  if (now - last_draw_ < std::chrono::milliseconds(125)) return;
  last_draw_ = now;
  draw(done, note, false);
}

void ProgressBar::finish(const std::string& note) { draw(total_, note, true); }

void ProgressBar::draw(int64_t done, const std::string& note, bool final) {
  if (!enabled_) return;
  constexpr int kWidth = 30;
  done = std::clamp<int64_t>(done, 0, total_);
  int filled = int(done * kWidth / total_);
  std::string bar(size_t(filled), '#');
  bar.append(size_t(kWidth - filled), '.');
  std::printf("\r%s [%s] %3d%% %s%s", label_.c_str(), bar.c_str(), int(done * 100 / total_), note.c_str(),
              final ? "\n" : "");
  std::fflush(stdout);
  line_open_ = !final;
}

}  // namespace castor::apps
