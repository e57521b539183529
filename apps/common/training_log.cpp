// CSV and a dependency-free SVG plot of the training curves.
#include "training_log.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <unistd.h>

namespace castor::apps {
namespace {

std::string num(double v, int digits = 4) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*g", digits, v);
  return buf;
}

struct Panel {
  double left, top, width, height;  // plot area in pixels
  double x0, x1, y0, y1;            // data range
  double px(double x) const { return left + (x1 > x0 ? (x - x0) / (x1 - x0) : 0.5) * width; }
  double py(double y) const { return top + height - (y1 > y0 ? (y - y0) / (y1 - y0) : 0.5) * height; }
};

// Axes with five ticks each, the panel's title and the axis names.
void draw_axes(std::ostringstream& out, const Panel& p, const std::string& title, const std::string& x_name) {
  out << "<rect x='" << p.left << "' y='" << p.top << "' width='" << p.width << "' height='" << p.height
      << "' fill='none' stroke='#444'/>\n";
  out << "<text x='" << p.left + p.width / 2 << "' y='" << p.top - 10 << "' text-anchor='middle' font-size='14'>"
      << title << "</text>\n";
  out << "<text x='" << p.left + p.width / 2 << "' y='" << p.top + p.height + 36
      << "' text-anchor='middle' font-size='12'>" << x_name << "</text>\n";
  // Whole epochs or steps get whole-number ticks, at most about ten.
  bool whole = std::floor(p.x0) == p.x0 && std::floor(p.x1) == p.x1;
  double step = whole ? std::max(1.0, std::ceil((p.x1 - p.x0) / 10)) : (p.x1 - p.x0) / 4;
  for (double x = p.x0; step > 0 && x <= p.x1 + 1e-9; x += step)
    out << "<text x='" << p.px(x) << "' y='" << p.top + p.height + 16 << "' text-anchor='middle' font-size='11'>"
        << num(x, 6) << "</text>\n";
  for (int i = 0; i <= 4; ++i) {
    double y = p.y0 + (p.y1 - p.y0) * i / 4;
    out << "<line x1='" << p.left << "' x2='" << p.left + p.width << "' y1='" << p.py(y) << "' y2='" << p.py(y)
        << "' stroke='#ddd'/>\n";
    out << "<text x='" << p.left - 6 << "' y='" << p.py(y) + 4 << "' text-anchor='end' font-size='11'>" << num(y, 3)
        << "</text>\n";
  }
}

template <class Get>
void draw_series(std::ostringstream& out, const Panel& p, const std::vector<CurvePoint>& pts, Get get,
                 const std::string& color, bool dashed) {
  std::ostringstream line;
  for (const auto& q : pts)
    if (get(q) >= 0) line << p.px(q.x) << "," << p.py(get(q)) << " ";
  out << "<polyline fill='none' stroke='" << color << "' stroke-width='2'" << (dashed ? " stroke-dasharray='6,4'" : "")
      << " points='" << line.str() << "'/>\n";
  for (const auto& q : pts)
    if (get(q) >= 0)
      out << "<circle cx='" << p.px(q.x) << "' cy='" << p.py(get(q)) << "' r='3' fill='" << color << "'/>\n";
}

}  // namespace

std::string TrainingLog::csv() const {
  std::ostringstream out;
  out << x_name_ << ",train_loss,test_accuracy,seconds,samples_per_s\n";
  for (const auto& p : points_)
    out << num(p.x, 10) << "," << num(p.loss, 6) << "," << (p.accuracy >= 0 ? num(p.accuracy, 6) : "") << ","
        << num(p.seconds, 6) << "," << num(p.samples_per_s, 6) << "\n";
  return out.str();
}

std::string TrainingLog::svg() const {
  std::vector<CurvePoint> all = points_;
  all.insert(all.end(), reference_.begin(), reference_.end());
  double x0 = 0, x1 = 1, l1 = 0, a0 = 1, a1 = 0;
  bool any_accuracy = false;
  if (!all.empty()) {
    x0 = x1 = all.front().x;
    for (const auto& p : all) {
      x0 = std::min(x0, p.x);
      x1 = std::max(x1, p.x);
      l1 = std::max(l1, p.loss);
      if (p.accuracy >= 0) {
        any_accuracy = true;
        a0 = std::min(a0, p.accuracy);
        a1 = std::max(a1, p.accuracy);
      }
    }
  }
  if (!any_accuracy) a0 = 0, a1 = 1;
  a0 = std::max(0.0, a0 - 0.02);
  a1 = std::min(1.0, a1 + 0.02);
  std::ostringstream out;
  out << "<svg xmlns='http://www.w3.org/2000/svg' width='960' height='390' font-family='sans-serif'>\n"
      << "<rect width='100%' height='100%' fill='white'/>\n"
      << "<text x='480' y='22' text-anchor='middle' font-size='16' font-weight='bold'>" << title_ << "</text>\n";
  Panel loss{70, 60, 370, 260, x0, x1, 0, l1 > 0 ? l1 * 1.05 : 1};
  Panel acc{550, 60, 370, 260, x0, x1, a0, a1};
  draw_axes(out, loss, "training loss", x_name_);
  draw_axes(out, acc, "test accuracy", x_name_);
  auto get_loss = [](const CurvePoint& p) { return p.loss; };
  auto get_acc = [](const CurvePoint& p) { return p.accuracy; };
  draw_series(out, loss, points_, get_loss, "#1f77b4", false);
  draw_series(out, acc, points_, get_acc, "#1f77b4", false);
  out << "<text x='70' y='382' font-size='12' fill='#1f77b4'>&#9632; castor</text>\n";
  if (!reference_.empty()) {
    draw_series(out, loss, reference_, get_loss, "#ff7f0e", true);
    draw_series(out, acc, reference_, get_acc, "#ff7f0e", true);
    out << "<text x='160' y='382' font-size='12' fill='#ff7f0e'>&#9632; " << reference_name_ << "</text>\n";
  }
  out << "</svg>\n";
  return out.str();
}

// Note [Curve files]
// ~~~~~~~~~~~~~~~~~~
//  C1. An explicit --out PREFIX is the user's choice: PREFIX.csv and
//      PREFIX.svg, overwritten if they exist.
//  C2. Without it, the files are castor-out/<app>-<job>.{csv,svg}. <job> is
//      CASTOR_JOB_ID, which castor run and castor launch set once per job
//      (the same for every restart of it, whose curves replace the earlier
//      ones), else new_job_id() of this process. So two jobs started in the
//      same folder never write the same files, and each prints its paths.
std::string curve_prefix(const std::string& out, const std::string& app) {
  if (!out.empty()) return out;  // C1
  const char* job = std::getenv("CASTOR_JOB_ID");
  return "castor-out/" + app + "-" + (job && *job ? std::string(job) : new_job_id());  // C2
}

std::string new_job_id() {
  std::time_t now = std::time(nullptr);
  std::tm local{};
  ::localtime_r(&now, &local);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &local);
  return std::string(stamp) + "-" + std::to_string(::getpid());
}

std::vector<std::string> TrainingLog::write(const std::string& prefix) const {
  std::filesystem::path base(prefix);
  if (base.has_parent_path()) {
    std::error_code ec;
    std::filesystem::create_directories(base.parent_path(), ec);
    if (ec) throw std::runtime_error("cannot create folder " + base.parent_path().string() + ": " + ec.message());
  }
  std::vector<std::string> paths{prefix + ".csv", prefix + ".svg"};
  const std::string contents[] = {csv(), svg()};
  for (size_t i = 0; i < 2; ++i) {
    std::ofstream f(paths[i]);
    f << contents[i];
    if (!f) throw std::runtime_error("cannot write " + paths[i]);
  }
  return paths;
}

}  // namespace castor::apps
