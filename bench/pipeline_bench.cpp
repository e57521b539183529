// castor-bench pipeline: the pipeline app (two stages on two workers, the
// driver on a third) at 1, 4 and 8 micro-batches per batch, samples/s as the
// median over epochs; beside it the same model, data and batch in this one
// process with libtorch (the faster of 1 thread and the machine's cores), an
// epoch of each after each of the pipeline's. Pipelining pays when samples/s
// rise with micro-batches until the stages overlap.
//
// Two models, in one world:
//  - `pipeline_*`: the app's default model (784-256 | 256-128-10, batch 128).
//    A micro-batch there is a few hundred microseconds of arithmetic, and
//    its stages are unbalanced: four micro-batches cannot pay on it even
//    with messages for free (`pipeline_ideal_mb4_over_mb1` < 1), so these
//    figures show what the messages cost, not whether pipelining pays.
//  - `pipeline_balanced_*`: a model sized for pipelining (784-512 |
//    512-512-10, batch 2048: two stages of about equal work, a micro-batch
//    of four a few milliseconds of arithmetic per stage), where the
//    arithmetic alone lets four micro-batches pay. Issue 21's pipeline
//    targets are read on it (bench/README.md).
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "apps/pipeline/pipeline.hpp"
#include "bench_suites.hpp"

namespace castor::bench {

namespace {

double median_rate(const std::vector<apps::CurvePoint>& points) {
  std::vector<double> rates;
  for (const auto& p : points) rates.push_back(p.samples_per_s);
  return median(rates);
}

// One model's single-process reference: the faster thread count of one epoch
// each, chosen before any worker process shares the cores (on two threads
// the default model trained 30x slower than on one: bench/README.md); it then
// trains an epoch after each of the pipeline's, so that both are timed in
// turns on this VM, whose speed drifts within minutes (measured before the
// world only, the reference read 67 k and 113 k samples/s in two runs of one
// afternoon).
struct Reference {
  Reference(const apps::pipeline::PipelineConfig& cfg, const std::string& prefix, std::vector<Figure>& out) {
    double first_rate = 0;
    best_reference(prefix + "single_process_first_epoch", [&](int threads) {
      auto probe = std::make_unique<apps::pipeline::SingleProcessPipeline>(cfg, threads);
      double rate = probe->next_epoch().samples_per_s;
      if (!model || rate > first_rate) model = std::move(probe), first_rate = rate;
      return rate;
    }, out);
  }
  std::unique_ptr<apps::pipeline::SingleProcessPipeline> model;
  std::vector<double> rates;
};

void run_model(Worker& driver, apps::pipeline::PipelineConfig cfg, Reference& reference, const std::string& prefix,
               std::vector<Figure>& out) {
  auto reference_epoch = [&](const apps::CurvePoint&) {
    reference.rates.push_back(reference.model->next_epoch().samples_per_s);
    let_reference_blas_settle();
  };
  std::map<int64_t, double> rates;
  for (int64_t micro : {1, 4, 8}) {
    cfg.micro_batches = micro;
    auto points = apps::pipeline::run_pipeline(driver, cfg, reference_epoch);
    rates[micro] = median_rate(points);
    out.emplace_back(prefix + "mb" + std::to_string(micro) + "_samples_per_s", rates[micro], Better::higher);
    out.emplace_back(prefix + "mb" + std::to_string(micro) + "_test_accuracy", points.back().accuracy,
                     Better::higher);
  }
  double single = median(reference.rates);
  out.emplace_back(prefix + "single_process_samples_per_s", single, Better::higher);
  out.emplace_back(prefix + "mb4_over_mb1", rates[4] / rates[1], Better::higher);
  // What pipelining can give this model at best, with no message cost: each
  // stage's forward and backward timed alone in this process (a, b), at the
  // whole batch and at a quarter of it. Two stages on their own cores take
  // about a4 + b4 + 3 max(a4, b4) for four micro-batches, against a1 + b1
  // for one: the slower stage bounds the gain, whatever the transport.
  auto whole = apps::pipeline::time_stages(cfg, cfg.batch, 50);
  auto quarter = apps::pipeline::time_stages(cfg, cfg.batch / 4, 50);
  out.emplace_back(prefix + "stage1_share", whole.first / (whole.first + whole.second), Better::higher);
  out.emplace_back(prefix + "ideal_mb4_over_mb1",
                   (whole.first + whole.second) /
                       (quarter.first + quarter.second + 3 * std::max(quarter.first, quarter.second)),
                   Better::higher);
  out.emplace_back(prefix + "mb4_of_single_process", rates[4] / single, Better::higher);
}

}  // namespace

std::vector<Figure> bench_pipeline(const Options& opts) {
  apps::pipeline::PipelineConfig small;
  small.epochs = train_epochs(opts.reps) - 1;
  small.progress = false;
  apps::pipeline::PipelineConfig balanced = small;
  balanced.hidden1 = 512;
  balanced.hidden2 = 512;
  balanced.batch = 2048;
  std::vector<Figure> out;
  Reference small_reference(small, "pipeline_", out);
  Reference balanced_reference(balanced, "pipeline_balanced_", out);
  BenchWorld world(opts, 3);
  std::fprintf(stderr, "pipeline: %s\n", apps::pipeline::bind_stages(world.self(), small).c_str());
  run_model(world.self(), small, small_reference, "pipeline_", out);
  run_model(world.self(), balanced, balanced_reference, "pipeline_balanced_", out);
  return out;
}

}  // namespace castor::bench
