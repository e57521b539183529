// `castor run parameter-server`: rank 0 is the server and drives the epochs,
// the other ranks are trainers. With --compare, rank 0 then trains the same
// model in one process with plain libtorch and prints both accuracies.
#include <cstdio>
#include <cstdlib>

#include "apps/common/app.hpp"
#include "apps/common/checkpoint_flags.hpp"
#include "apps/common/training_log.hpp"
#include "apps/parameter_server/parameter_server.hpp"
#include "config/cluster_file.hpp"

namespace castor::apps::ps {
namespace {

CurvePoint to_point(const EpochResult& r) {
  return CurvePoint{double(r.epoch), r.train_loss, r.test.accuracy, r.seconds, r.samples_per_s};
}

// Note [Flags], F1: every flag once, its default from PsConfig's.
void declare_flags(po::options_description& flags) {
  const PsConfig c;
  flags.add_options()
      ("epochs", po::value<int64_t>()->default_value(c.epochs)->value_name("N"), "epochs")
      ("batch-size", po::value<int64_t>()->default_value(c.batch)->value_name("N"), "samples per trainer and step")
      ("lr", po::value<double>()->default_value(c.lr, shown(c.lr))->value_name("X"), "SGD learning rate on the server")
      ("momentum", po::value<double>()->default_value(c.momentum, shown(c.momentum))->value_name("X"), "SGD momentum on the server")
      ("lr-decay", po::value<double>()->default_value(c.lr_decay, shown(c.lr_decay))->value_name("X"),
       "multiply the learning rate by X after each epoch")
      ("hidden", po::value<int64_t>()->default_value(c.hidden)->value_name("N"), "hidden units of the MLP 784-N-10")
      ("mode", po::value<std::string>()->default_value("sync")->value_name("sync|async"),
       "sync: average every trainer's gradients per round; async: apply each push at once, with the momentum less "
       "the 1 - 1/N that N asynchronous trainers add")
      ("on-trainer-failure", po::value<std::string>()->default_value("stop")->value_name("stop|continue"),
       "when a trainer dies: fail the job, or go on with the trainers left")
      ("seed", po::value<int64_t>()->default_value(c.seed)->value_name("N"), "initialisation and shuffling seed")
      ("limit", po::value<int64_t>()->default_value(c.limit)->value_name("N"),
       "use the first N training samples (-1: all 60000)")
      ("test-limit", po::value<int64_t>()->default_value(c.test_limit)->value_name("N"),
       "use the first N test samples (-1: all 10000)")
      ("data", po::value<std::string>()->default_value(c.data_dir)->value_name("DIR"), "Fashion-MNIST folder")
      ("out", po::value<std::string>()->value_name("PREFIX"),
       "write PREFIX.csv and PREFIX.svg (default castor-out/parameter-server-<job>)")
      ("compare", po::bool_switch(), "then train the same model in one process with libtorch and compare")
      ("min-accuracy", po::value<double>()->value_name("X"), "exit with 3 if the final test accuracy is below X")
      ("no-progress", po::bool_switch(), "no progress bar");
  declare_checkpoint_flags(flags, "the server (its parameters and momentum)", c.checkpoint_every, "epochs");
}

PsConfig config_from(const Flags& flags) {
  PsConfig c;
  c.epochs = flags.get<int64_t>("epochs");
  c.batch = flags.get<int64_t>("batch-size");
  c.lr = flags.get<double>("lr");
  c.momentum = flags.get<double>("momentum");
  c.lr_decay = flags.get<double>("lr-decay");
  c.hidden = flags.get<int64_t>("hidden");
  c.seed = flags.get<int64_t>("seed");
  c.limit = flags.get<int64_t>("limit");
  c.test_limit = flags.get<int64_t>("test-limit");
  c.data_dir = flags.get<std::string>("data");
  c.progress = !flags.get<bool>("no-progress");
  auto mode = flags.get<std::string>("mode");
  if (mode != "sync" && mode != "async")
    throw std::invalid_argument("--mode must be sync or async, got '" + mode + "'");
  c.sync = mode == "sync";
  auto on_failure = flags.get<std::string>("on-trainer-failure");
  if (on_failure != "stop" && on_failure != "continue")
    throw std::invalid_argument("--on-trainer-failure must be stop or continue, got '" + on_failure + "'");
  c.continue_on_trainer_failure = on_failure == "continue";
  // J1 of Note [Trainer failure]: under `--max-restarts` the launcher starts a
  // dead trainer again (Note [Restart policy]) and says so to every worker.
  // A job that restarts whole after the server's death (R3) resumes from a
  // checkpoint: with no folder given, one of the job's own.
  auto checkpoints = checkpoint_settings(flags, "parameter-server");
  c.rejoin = checkpoints.restart_policy;
  c.checkpoint_dir = checkpoints.given.empty() && c.rejoin ? checkpoints.own : checkpoints.given;
  c.checkpoint_every = checkpoints.every;
  if (!(c.lr_decay > 0) || c.lr_decay > 1) throw std::invalid_argument("--lr-decay must be in (0, 1]");
  if (c.epochs < 1 || c.batch < 1) throw std::invalid_argument("--epochs and --batch-size must be at least 1");
  return c;
}

int run(Worker& w, const Flags& args) {
  auto cfg = config_from(args);
  if (w.rank() != 0) return 0;    // trainers serve until the server is done
  int64_t trainers = w.world_size() - 1;
  std::printf("parameter server on %s, %lld trainer(s), %s mode, MLP 784-%lld-10, SGD lr %g (x%g per epoch) momentum %g, batch %lld\n",
              w.name().c_str(), (long long)trainers, cfg.sync ? "sync" : "async", (long long)cfg.hidden, cfg.lr,
              cfg.lr_decay, cfg.momentum, (long long)cfg.batch);
  if (!cfg.sync)  // A1 of Note [Parameter-server modes]
    std::printf("async mode: the server applies momentum %g (%g less the %g that %lld asynchronous trainers add)\n",
                async_momentum(cfg.momentum, trainers), cfg.momentum, 1.0 - 1.0 / double(trainers), (long long)trainers);
  std::fflush(stdout);
  TrainingLog log("castor parameter server on Fashion-MNIST (" + std::to_string(trainers) + " trainers, " +
                  (cfg.sync ? "sync" : "async") + ")");
  auto results = run_parameter_server(w, cfg, [&](const EpochResult& r) { log.add(to_point(r)); });
  remove_own_checkpoint_folder(checkpoint_settings(args, "parameter-server").given, cfg.checkpoint_dir);
  double accuracy = results.back().test.accuracy;
  if (args.get<bool>("compare")) {
    std::printf("single-process libtorch, same model, data and seed (batch %lld):\n",
                (long long)(cfg.batch * trainers));
    std::fflush(stdout);
    std::vector<CurvePoint> reference;
    auto local = train_single_process(cfg, trainers, [&](const EpochResult& r) {
      std::printf("  epoch %lld/%lld loss %.4f  test accuracy %.4f  %.0f samples/s\n", (long long)r.epoch,
                  (long long)cfg.epochs, r.train_loss, r.test.accuracy, r.samples_per_s);
      std::fflush(stdout);
      reference.push_back(to_point(r));
    });
    log.add_reference("single-process libtorch", reference);
    std::printf("test accuracy: castor %.2f%% | single-process libtorch %.2f%%\n", accuracy * 100,
                local.back().test.accuracy * 100);
  } else {
    std::printf("test accuracy: %.2f%%\n", accuracy * 100);
  }
  auto paths = log.write(curve_prefix(args.find<std::string>("out").value_or(""), "parameter-server"));
  std::printf("curves: %s and %s\n", paths[0].c_str(), paths[1].c_str());
  std::fflush(stdout);
  double floor = args.find<double>("min-accuracy").value_or(0);
  if (accuracy < floor) {
    std::fprintf(stderr, "test accuracy %.4f is below --min-accuracy %.4f\n", accuracy, floor);
    return 3;
  }
  return 0;
}

AppRegistrar registrar{App{"parameter-server", "Fashion-MNIST MLP on a parameter server (rank 0) and N-1 trainers",
                            3, declare_flags, run, [](const Flags& flags) { config_from(flags); }}};

}  // namespace
}  // namespace castor::apps::ps
