// `castor run parameter-server`: rank 0 is the server and drives the epochs,
// the other ranks are trainers. With --compare, rank 0 then trains the same
// model in one process with plain libtorch and prints both accuracies.
#include <cstdio>

#include "apps/common/app.hpp"
#include "apps/common/training_log.hpp"
#include "apps/parameter_server/parameter_server.hpp"

namespace castor::apps::ps {
namespace {

CurvePoint to_point(const EpochResult& r) {
  return CurvePoint{double(r.epoch), r.train_loss, r.test.accuracy, r.seconds, r.samples_per_s};
}

PsConfig config_from(const AppArgs& args) {
  PsConfig c;
  c.epochs = args.get_int("epochs", c.epochs);
  c.batch = args.get_int("batch-size", c.batch);
  c.lr = args.get_double("lr", c.lr);
  c.momentum = args.get_double("momentum", c.momentum);
  c.lr_decay = args.get_double("lr-decay", c.lr_decay);
  c.hidden = args.get_int("hidden", c.hidden);
  c.seed = args.get_int("seed", c.seed);
  c.limit = args.get_int("limit", c.limit);
  c.test_limit = args.get_int("test-limit", c.test_limit);
  c.data_dir = args.get("data", c.data_dir);
  c.progress = !args.has("no-progress");
  auto mode = args.get("mode", "sync");
  if (mode != "sync" && mode != "async")
    throw std::invalid_argument("--mode must be sync or async, got '" + mode + "'");
  c.sync = mode == "sync";
  auto on_failure = args.get("on-trainer-failure", "stop");
  if (on_failure != "stop" && on_failure != "continue")
    throw std::invalid_argument("--on-trainer-failure must be stop or continue, got '" + on_failure + "'");
  c.continue_on_trainer_failure = on_failure == "continue";
  c.checkpoint_dir = args.get("checkpoint-dir", "");
  c.checkpoint_every = args.get_int("checkpoint-every", c.checkpoint_every);
  if (c.checkpoint_every < 1) throw std::invalid_argument("--checkpoint-every must be at least 1");
  if (!(c.lr_decay > 0) || c.lr_decay > 1) throw std::invalid_argument("--lr-decay must be in (0, 1]");
  if (c.epochs < 1 || c.batch < 1) throw std::invalid_argument("--epochs and --batch-size must be at least 1");
  return c;
}

int run(Worker& w, const AppArgs& args) {
  auto cfg = config_from(args);  // every rank checks its flags
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
  double accuracy = results.back().test.accuracy;
  if (args.has("compare")) {
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
  auto paths = log.write(curve_prefix(args.get("out", ""), "parameter-server"));
  std::printf("curves: %s and %s\n", paths[0].c_str(), paths[1].c_str());
  std::fflush(stdout);
  double floor = args.get_double("min-accuracy", 0);
  if (accuracy < floor) {
    std::fprintf(stderr, "test accuracy %.4f is below --min-accuracy %.4f\n", accuracy, floor);
    return 3;
  }
  return 0;
}

AppRegistrar registrar{App{
    "parameter-server",
    "Fashion-MNIST MLP on a parameter server (rank 0) and N-1 trainers",
    "  --epochs N        epochs (default 6)\n"
    "  --batch-size N    samples per trainer and step (default 64)\n"
    "  --lr X            SGD learning rate on the server (default 0.1)\n"
    "  --momentum X      SGD momentum on the server (default 0.9)\n"
    "  --lr-decay X      multiply the learning rate by X after each epoch (default 0.7)\n"
    "  --hidden N        hidden units of the MLP 784-N-10 (default 128)\n"
    "  --mode sync|async sync: average every trainer's gradients per round; async: apply each push at once,\n"
    "                    with the momentum less the 1 - 1/N that N asynchronous trainers add (default sync)\n"
    "  --on-trainer-failure stop|continue\n"
    "                    when a trainer dies: fail the job, or go on with the trainers left (default stop)\n"
    "  --checkpoint-dir D  save the server to D after each epoch, and resume from D's last checkpoint at start\n"
    "  --checkpoint-every N  epochs between checkpoints (default 1)\n"
    "  --seed N          initialisation and shuffling seed (default 1)\n"
    "  --limit N         use the first N training samples (default all 60000)\n"
    "  --test-limit N    use the first N test samples (default all 10000)\n"
    "  --data DIR        Fashion-MNIST folder (default /usr/share/datasets/fashion-mnist)\n"
    "  --out PREFIX      write PREFIX.csv and PREFIX.svg (default castor-out/parameter-server-<job>)\n"
    "  --compare         then train the same model in one process with libtorch and compare\n"
    "  --min-accuracy X  exit with 3 if the final test accuracy is below X\n"
    "  --no-progress     no progress bar\n",
    3,
    {"epochs", "batch-size", "lr", "lr-decay", "momentum", "hidden", "mode", "seed", "limit", "test-limit", "data", "out",
     "compare", "min-accuracy", "no-progress", "on-trainer-failure", "checkpoint-dir", "checkpoint-every"},
    run}};

}  // namespace
}  // namespace castor::apps::ps
