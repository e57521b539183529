#include "apps/model_parallel_rnn/rnn_checkpoint.hpp"

#include <cstdio>
#include <sstream>

namespace castor::apps::rnn {

std::string rnn_settings(const Flags& args, double lr) {
  std::string out;
  for (const char* name : {"batch-size", "seq-len", "vocab", "embed", "hidden", "seed"})
    out += std::string(out.empty() ? "" : " ") + name + "=" + std::to_string(args.get<int64_t>(name));
  char optimizer[96];
  std::snprintf(optimizer, sizeof(optimizer), " optimizer=%s lr=%g", args.get<std::string>("optimizer").c_str(), lr);
  return out + optimizer;
}

std::map<std::string, std::string> rnn_meta(const std::string& settings, const std::vector<CurvePoint>& points) {
  std::string losses;
  char buf[32];
  for (const auto& p : points) {
    std::snprintf(buf, sizeof(buf), "%.17g ", p.loss);
    losses += buf;
  }
  return {{"settings", settings}, {"losses", losses}};
}

std::vector<CurvePoint> rnn_points(const CheckpointInfo& restored) {
  auto it = restored.meta.find("losses");
  std::istringstream in(it == restored.meta.end() ? std::string() : it->second);
  std::vector<CurvePoint> points;
  double loss;
  while (int64_t(points.size()) < restored.step && in >> loss)
    points.push_back(CurvePoint{double(points.size() + 1), loss, -1, 0, 0});
  if (int64_t(points.size()) != restored.step)
    throw CheckpointError("rnn: the checkpoint's losses cover " + std::to_string(points.size()) + " steps, not " +
                          std::to_string(restored.step));
  return points;
}

}  // namespace castor::apps::rnn
