// castor-bench train: the parameter-server app with the anchor's settings
// (1 server + 2 trainers, MLP 784-128-10, plain SGD lr 0.1, batch 64 per
// trainer, sync rounds), samples/s as the median over epochs; beside it the
// same model, data, seed and total batch (128) trained in this one process
// with libtorch, on 1 thread and on the machine's cores, an epoch of each
// after each of castor's: the faster is the same arithmetic with no
// messages, the limit castor's figure is read against. And the job itself
// with no framework (SyncRoundFloor: shared memory, a byte per hop), what a
// synchronous round on these processes allows.
#include <map>

#include "apps/parameter_server/parameter_server.hpp"
#include "bench_suites.hpp"
#include "ps_floor.hpp"

namespace castor::bench {

namespace {

apps::ps::PsConfig bench_config(const Options& opts) {
  apps::ps::PsConfig cfg;
  cfg.epochs = train_epochs(opts.reps);
  cfg.batch = 64;
  cfg.lr = 0.1;
  cfg.momentum = 0;
  cfg.hidden = 128;
  cfg.sync = true;
  cfg.progress = false;
  return cfg;
}

double median_rate(const std::vector<apps::ps::EpochResult>& results) {
  std::vector<double> rates;
  for (const auto& r : results) rates.push_back(r.samples_per_s);
  return median(rates);
}

}  // namespace

std::vector<Figure> bench_train(const Options& opts) {
  auto cfg = bench_config(opts);
  constexpr int64_t trainers = 2;
  std::vector<Figure> out;
  // The same job with no framework, timed in turns too (ps_floor.hpp).
  SyncRoundFloor floor(cfg, trainers);
  std::vector<double> floor_rates;
  double floor_accuracy = 0;
  BenchWorld world(opts, 1 + int(trainers));
  // The reference trains one epoch on each thread count after each of
  // castor's (while castor's workers wait for the next), so that both are
  // timed in turns on this VM, whose speed drifts within minutes: measured
  // before the world, the reference read 175-213 k samples/s on 1 thread in
  // runs of the same hour.
  std::map<int, apps::ps::SingleProcessTraining> reference;
  std::map<int, std::vector<double>> reference_rates;
  for (int threads : reference_thread_counts())
    reference.try_emplace(threads, cfg, trainers, threads);
  double single_accuracy = 0;  // the same on any thread count
  auto results = apps::ps::run_parameter_server(world.self(), cfg, [&](const apps::ps::EpochResult&) {
    auto f = floor.next_epoch();
    floor_rates.push_back(f.samples_per_s);
    floor_accuracy = f.test.accuracy;
    for (auto& [threads, training] : reference) {
      auto r = training.next_epoch();
      reference_rates[threads].push_back(r.samples_per_s);
      single_accuracy = r.test.accuracy;
    }
    let_reference_blas_settle();
  });
  double single = best_reference("train_single_process", [&](int threads) { return median(reference_rates[threads]); },
                                 out);
  double rate = median_rate(results);
  out.emplace_back("train_single_process_test_accuracy", single_accuracy, Better::higher);
  out.emplace_back("train_ps_samples_per_s", rate, Better::higher);
  out.emplace_back("train_ps_test_accuracy", results.back().test.accuracy, Better::higher);
  out.emplace_back("train_ps_of_single_process", rate / single, Better::higher);
  out.emplace_back("train_sync_round_floor_samples_per_s", median(floor_rates), Better::higher);
  out.emplace_back("train_sync_round_floor_test_accuracy", floor_accuracy, Better::higher);
  out.emplace_back("train_sync_round_floor_of_single_process", median(floor_rates) / single, Better::higher);
  out.emplace_back("train_ps_of_sync_round_floor", rate / median(floor_rates), Better::higher);
  return out;
}

}  // namespace castor::bench
