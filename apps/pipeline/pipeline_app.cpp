// `castor run pipeline`: the flags and the report of the pipeline's training
// (apps/pipeline/pipeline.hpp, Note [Pipeline]).
#include <cstdio>

#include "apps/common/app.hpp"
#include "apps/common/checkpoint_flags.hpp"
#include "apps/pipeline/pipeline.hpp"

namespace castor::apps::pipeline {
namespace {

// Note [Flags], F1.
void declare_flags(po::options_description& flags) {
  PipelineConfig d;
  flags.add_options()
      ("epochs", po::value<int64_t>()->default_value(d.epochs)->value_name("N"), "epochs")
      ("batch-size", po::value<int64_t>()->default_value(d.batch)->value_name("N"), "samples per step")
      ("micro-batches", po::value<int64_t>()->default_value(d.micro_batches)->value_name("N"),
       "micro-batches per step, in flight together")
      ("hidden1", po::value<int64_t>()->default_value(d.hidden1)->value_name("N"), "stage 1 width")
      ("hidden2", po::value<int64_t>()->default_value(d.hidden2)->value_name("N"), "stage 2 hidden width")
      ("lr", po::value<double>()->default_value(d.lr, shown(d.lr))->value_name("X"), "SGD learning rate")
      ("momentum", po::value<double>()->default_value(d.momentum, shown(d.momentum))->value_name("X"), "SGD momentum")
      ("seed", po::value<int64_t>()->default_value(d.seed)->value_name("N"), "shuffling seed")
      ("limit", po::value<int64_t>()->default_value(d.limit)->value_name("N"),
       "use the first N training samples (-1: all)")
      ("test-limit", po::value<int64_t>()->default_value(d.test_limit)->value_name("N"),
       "use the first N test samples (-1: all)")
      ("data", po::value<std::string>()->default_value(d.data_dir)->value_name("DIR"), "Fashion-MNIST folder")
      ("out", po::value<std::string>()->value_name("PREFIX"),
       "write PREFIX.csv and PREFIX.svg (default castor-out/pipeline-<job>)")
      ("no-stage-binding", po::bool_switch(), "leave the stages unbound even when they share a host")
      ("no-progress", po::bool_switch(), "no progress bar");
  declare_checkpoint_flags(flags, "both stages and their optimizer", d.checkpoint_every, "epochs");
}

// The settings of the flags; throws std::invalid_argument for values out of
// range (F5).
PipelineConfig config_from(const Flags& args) {
  PipelineConfig cfg;
  cfg.epochs = args.get<int64_t>("epochs");
  cfg.batch = args.get<int64_t>("batch-size");
  cfg.micro_batches = args.get<int64_t>("micro-batches");
  cfg.hidden1 = args.get<int64_t>("hidden1");
  cfg.hidden2 = args.get<int64_t>("hidden2");
  cfg.lr = args.get<double>("lr");
  cfg.momentum = args.get<double>("momentum");
  cfg.seed = args.get<int64_t>("seed");
  cfg.limit = args.get<int64_t>("limit");
  cfg.test_limit = args.get<int64_t>("test-limit");
  cfg.data_dir = args.get<std::string>("data");
  cfg.progress = !args.get<bool>("no-progress");
  cfg.bind_stages = !args.get<bool>("no-stage-binding");
  // Note [Pipeline failure]: under `--max-restarts` the launcher starts a
  // dead stage again (Note [Restart policy]) and says so to every worker.
  auto checkpoints = checkpoint_settings(args, "pipeline");
  cfg.rejoin = checkpoints.restart_policy;
  cfg.checkpoint_dir = checkpoints.given;
  cfg.own_checkpoint_dir = checkpoints.own;  // PF1
  cfg.checkpoint_every = checkpoints.every;
  check(cfg);
  return cfg;
}

int run(Worker& w, const Flags& args) {
  auto cfg = config_from(args);
  if (w.rank() != 0) return 0;  // the stages' owners serve until the driver is done
  if (w.world_size() < 2) throw std::invalid_argument("pipeline: needs at least 2 workers");
  cfg.stage1_rank = 1;
  cfg.stage2_rank = w.world_size() >= 3 ? 2 : 1;
  std::printf("pipeline: stage 1 (784-%lld) on %s, stage 2 (%lld-%lld-10) on %s, %lld micro-batches per batch of %lld\n",
              (long long)cfg.hidden1, w.get_worker_info(cfg.stage1_rank).name.c_str(), (long long)cfg.hidden1,
              (long long)cfg.hidden2, w.get_worker_info(cfg.stage2_rank).name.c_str(), (long long)cfg.micro_batches,
              (long long)cfg.batch);
  try {
    std::printf("pipeline: %s\n", bind_stages(w, cfg).c_str());
  } catch (const RpcError& e) {
    if (!cfg.rejoin || (w.is_alive(cfg.stage1_rank) && w.is_alive(cfg.stage2_rank))) throw;
    // PF2: a stage that died this early is taken back (and bound) as
    // training starts.
    std::printf("pipeline: stages not bound to CPUs yet: %s\n", e.what());
  }
  std::fflush(stdout);
  TrainingLog log("castor pipeline (2 stages, " + std::to_string(cfg.micro_batches) + " micro-batches) on Fashion-MNIST");
  for (const auto& point : run_pipeline(w, cfg)) log.add(point);
  std::printf("test accuracy: %.2f%%\n", log.points().back().accuracy * 100);
  auto paths = log.write(curve_prefix(args.find<std::string>("out").value_or(""), "pipeline"));
  std::printf("curves: %s and %s\n", paths[0].c_str(), paths[1].c_str());
  std::fflush(stdout);
  return 0;
}

AppRegistrar registrar{App{
    "pipeline", "Fashion-MNIST MLP split into two stages on worker1 and worker2, micro-batches chained with rpc_async",
    3, declare_flags, run, [](const Flags& flags) { config_from(flags); }}};

}  // namespace
}  // namespace castor::apps::pipeline
