// castor-bench train: the parameter-server app with the anchor's settings
// (1 server + 2 trainers, MLP 784-128-10, plain SGD lr 0.1, batch 64 per
// trainer, sync rounds), samples/s as the median over epochs.
#include "apps/parameter_server/parameter_server.hpp"
#include "bench_suites.hpp"

namespace castor::bench {

std::vector<Figure> bench_train(const Options& opts) {
  BenchWorld world(opts, 3);
  apps::ps::PsConfig cfg;
  cfg.epochs = train_epochs(opts.reps);
  cfg.batch = 64;
  cfg.lr = 0.1;
  cfg.momentum = 0;
  cfg.hidden = 128;
  cfg.sync = true;
  cfg.progress = false;
  auto results = apps::ps::run_parameter_server(world.self(), cfg);
  std::vector<double> rates;
  for (const auto& r : results) rates.push_back(r.samples_per_s);
  return {Figure("train_ps_samples_per_s", median(rates), Better::higher),
          Figure("train_ps_test_accuracy", results.back().test.accuracy, Better::higher)};
}

}  // namespace castor::bench
