#include "apps/pipeline/pipeline_checkpoint.hpp"

#include <cstdio>

namespace castor::apps::pipeline {

namespace {

std::string epoch_key(int64_t epoch) { return "epoch." + std::to_string(epoch); }

std::string encode(const CurvePoint& p) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), "%.17g %.17g %.17g %.17g", p.loss, p.accuracy, p.seconds, p.samples_per_s);
  return buf;
}

}  // namespace

std::string settings_of(const PipelineConfig& cfg) {
  char buf[1024];
  std::snprintf(buf, sizeof(buf),
                "hidden1=%lld hidden2=%lld batch=%lld lr=%g momentum=%g seed=%lld limit=%lld test-limit=%lld data=%s",
                (long long)cfg.hidden1, (long long)cfg.hidden2, (long long)cfg.batch, cfg.lr, cfg.momentum,
                (long long)cfg.seed, (long long)cfg.limit, (long long)cfg.test_limit, cfg.data_dir.c_str());
  return buf;
}

std::map<std::string, std::string> checkpoint_meta(const PipelineConfig& cfg, const std::vector<CurvePoint>& points) {
  std::map<std::string, std::string> meta{{"settings", settings_of(cfg)}};
  for (const auto& p : points) meta[epoch_key(int64_t(p.x))] = encode(p);
  return meta;
}

std::vector<CurvePoint> points_of(const CheckpointInfo& restored) {
  std::vector<CurvePoint> points;
  for (int64_t e = 1; e <= restored.step; ++e) {
    auto it = restored.meta.find(epoch_key(e));
    if (it == restored.meta.end())
      throw CheckpointError("pipeline: the checkpoint has no result for epoch " + std::to_string(e));
    CurvePoint p;
    p.x = double(e);
    if (std::sscanf(it->second.c_str(), "%lf %lf %lf %lf", &p.loss, &p.accuracy, &p.seconds, &p.samples_per_s) != 4)
      throw CheckpointError("pipeline: the checkpoint's result of epoch " + std::to_string(e) + " is damaged ('" +
                            it->second + "')");
    points.push_back(p);
  }
  return points;
}

}  // namespace castor::apps::pipeline
