// Per-epoch (or per-step) training curves: kept in memory, written as CSV
// and drawn as an SVG picture (loss on the left panel, accuracy on the right).
#pragma once

#include <string>
#include <vector>

namespace castor::apps {

struct CurvePoint {
  double x = 0;         // epoch or step
  double loss = 0;      // training loss
  double accuracy = -1; // test accuracy in [0, 1]; < 0: not measured
  double seconds = 0;
  double samples_per_s = 0;
};

/// Note [Curve files] (training_log.cpp): the prefix an app writes its
/// curves to -- `out` (its --out flag) when given, else a per-job name.
std::string curve_prefix(const std::string& out, const std::string& app);

/// A name for a new job: its start time and the launcher's process id,
/// "20261125-231502-4711".
std::string new_job_id();

class TrainingLog {
 public:
  explicit TrainingLog(std::string title, std::string x_name = "epoch")
      : title_(std::move(title)), x_name_(std::move(x_name)) {}
  void add(const CurvePoint& p) { points_.push_back(p); }
  /// A second series drawn beside the first (e.g. the single-process run).
  void add_reference(const std::string& name, const std::vector<CurvePoint>& points) {
    reference_name_ = name;
    reference_ = points;
  }
  const std::vector<CurvePoint>& points() const { return points_; }

  /// Writes `<prefix>.csv` and `<prefix>.svg`, creating the folder; returns
  /// the two paths. Throws std::runtime_error naming a path it cannot write.
  std::vector<std::string> write(const std::string& prefix) const;

  std::string csv() const;
  std::string svg() const;

 private:
  std::string title_, x_name_;
  std::vector<CurvePoint> points_;
  std::string reference_name_;
  std::vector<CurvePoint> reference_;
};

}  // namespace castor::apps
