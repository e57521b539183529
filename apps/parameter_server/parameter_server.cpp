#include "parameter_server.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include "apps/common/blas_threads.hpp"
#include "apps/common/checkpoint_flags.hpp"
#include "apps/common/progress.hpp"
#include "apps/common/owner_recovery.hpp"
#include "apps/common/rejoin_wait.hpp"
#include "apps/parameter_server/round_step.hpp"
#include "actors/api/shared_memory.hpp"
#include "optimizer/checkpoint.hpp"
#include "rref/class_registry.hpp"
#include "rref/mesh.hpp"
#include "rref/rref.hpp"

namespace castor::apps::ps {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

at::Tensor shard_order(int64_t samples, int64_t rank, int64_t trainers, int64_t epoch, int64_t seed) {
  auto shard = at::arange(rank - 1, samples, trainers, at::kLong);
  auto gen = at::detail::createCPUGenerator(uint64_t(seed * 1000003 + epoch * 101 + rank));
  return shard.index_select(0, at::randperm(shard.numel(), gen, at::kLong));
}

std::pair<at::Tensor, at::Tensor> step_rows(const Dataset& data, const at::Tensor& order, int64_t step, int64_t batch) {
  auto idx = order.slice(0, step * batch, (step + 1) * batch);
  return {data.images.index_select(0, idx), data.labels.index_select(0, idx)};
}

double epoch_learning_rate(const PsConfig& cfg, int64_t epoch) {
  return cfg.lr * std::pow(cfg.lr_decay, double(epoch - 1));
}

int64_t steps_per_epoch(int64_t samples, int64_t trainers, int64_t batch) {
  int64_t steps = samples / (trainers * batch);
  if (steps < 1)
    throw std::invalid_argument("parameter-server: " + std::to_string(samples) + " training samples are too few for " +
                                std::to_string(trainers) + " trainer(s) with --batch-size " + std::to_string(batch));
  return steps;
}

ParameterServer::ParameterServer(int64_t trainers, int64_t hidden, double lr, double momentum, int64_t seed,
                                 bool sync)
    : sync_(sync), momentum_(momentum) {
  if (trainers < 1) throw std::invalid_argument("ParameterServer: needs at least one trainer");
  for (int64_t r = 1; r <= trainers; ++r) trainers_.insert(r);
  if (hidden < 1) throw std::invalid_argument("ParameterServer: hidden size must be positive");
  if (!(lr > 0)) throw std::invalid_argument("ParameterServer: learning rate must be positive");
  params_ = init_mlp(hidden, uint64_t(seed));
  for (auto& p : params_) {
    p.requires_grad_(true);
    pending_grads_.push_back(at::zeros_like(p));
  }
  // Note [Shared parameters]: sync rounds hand trainers on this host a view.
  if (sync_) share_memory(params_);
  for (const auto& p : params_) replies_.push_back(p.detach());
  optimizer_ = std::make_unique<torch::optim::SGD>(params_, torch::optim::SGDOptions(lr).momentum(momentum));
  if (!sync_) set_async_momentum();
}

double async_momentum(double asked, int64_t trainers) {
  return std::max(0.0, asked - (1.0 - 1.0 / double(std::max<int64_t>(trainers, 1))));
}

void ParameterServer::set_async_momentum() {
  for (auto& group : optimizer_->param_groups())
    static_cast<torch::optim::SGDOptions&>(group.options()).momentum(async_momentum(momentum_, int64_t(trainers_.size())));
}

ParameterServer::~ParameterServer() = default;

Params ParameterServer::parameters() {
  std::lock_guard<std::mutex> lock(mutex_);
  Params out;
  for (const auto& p : params_) out.push_back(p.detach().clone());
  return out;
}

Future<Params> ParameterServer::update(Params grads, double loss, int64_t trainer) {
  if (grads.size() != params_.size())
    throw std::invalid_argument("ParameterServer::update: expected " + std::to_string(params_.size()) +
                                " gradients, got " + std::to_string(grads.size()));
  for (size_t i = 0; i < grads.size(); ++i)
    if (!grads[i].defined() || !grads[i].sizes().equals(params_[i].sizes()))
      throw std::invalid_argument("ParameterServer::update: gradient " + std::to_string(i) + " has the wrong shape");
  std::lock_guard<std::mutex> lock(mutex_);
  if (!trainers_.count(trainer))
    throw std::invalid_argument("ParameterServer::update: trainer " + std::to_string(trainer) +
                                " is not one of this server's trainers");
  if (sync_ && pushed_.count(trainer))
    throw std::invalid_argument("ParameterServer::update: trainer " + std::to_string(trainer) +
                                " pushed twice in one round");
  ++updates_;
  loss_sum_ += loss;
  if (!sync_) {
    for (size_t i = 0; i < grads.size(); ++i) pending_grads_[i].copy_(grads[i]);
    apply();
    Params out;
    for (const auto& p : params_) out.push_back(p.detach().clone());
    return make_ready_future(std::move(out));
  }
  // S3 of Note [Shared parameters]: kept as pushed, averaged once the round is full.
  round_grads_.emplace(trainer, std::move(grads));
  pushed_.insert(trainer);
  auto future = round_.future();
  complete_round_if_full();
  return future;
}

void ParameterServer::complete_round_if_full() {
  if (pushed_.empty()) return;
  for (auto r : trainers_)
    if (!pushed_.count(r)) return;
  auto round = round_;
  apply_round_mean();  // a dead trainer's push before it died counts (Note [Trainer failure])
  pushed_.clear();
  round_ = Promise<Params>();
  round.set_value(replies_);  // Note [Shared parameters]: the parameters themselves
}

int64_t ParameterServer::trainer_left(int64_t trainer) {
  std::lock_guard<std::mutex> lock(mutex_);
  trainers_.erase(trainer);
  if (sync_)
    complete_round_if_full();
  else
    set_async_momentum();  // A2
  return int64_t(trainers_.size());
}

void ParameterServer::trainer_back(int64_t trainer) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!pushed_.empty()) throw std::logic_error("ParameterServer: a trainer can come back between rounds only");
  trainers_.insert(trainer);
  if (!sync_) set_async_momentum();  // A2
}

void ParameterServer::apply() {
  at::NoGradGuard no_grad;
  // In place and not zeroed after: the next push overwrites it. SGD reads a
  // gradient, never writes it.
  for (size_t i = 0; i < params_.size(); ++i) params_[i].mutable_grad() = pending_grads_[i];
  optimizer_->step();
}

// S3 of Note [Shared parameters]: the mean of the pushes as they lie, in
// the trainers' order, not the pushes': a run must repeat itself exactly (a
// resumed run is the undisturbed one, Note [Parameter-server checkpoints]).
// S5: the mean and SGD's step in one pass (round_step.hpp), SGD's momentum
// buffers kept where SGD keeps them (its state, which save() writes); ATen's
// ops for what that pass does not take.
void ParameterServer::apply_round_mean() {
  at::NoGradGuard no_grad;
  std::vector<const Params*> pushes;
  for (const auto& [trainer, grads] : round_grads_) pushes.push_back(&grads);
  auto& options = static_cast<torch::optim::SGDOptions&>(optimizer_->param_groups().front().options());
  bool plain_sgd = options.dampening() == 0 && !options.nesterov() && options.weight_decay() == 0;
  auto buffers = plain_sgd && options.momentum() != 0 ? momentum_buffers() : std::vector<MomentumBuffer>{};
  if (plain_sgd && fits_round_step(params_, pushes, buffers)) {
    step_on_round_mean(params_, pushes, options.lr(), options.momentum(), buffers);
    for (size_t i = 0; i < buffers.size(); ++i)
      if (buffers[i].first) keep_momentum_buffer(params_[i], buffers[i].buffer);
  } else {
    apply_round_mean_with_aten(pushes);
  }
  round_grads_.clear();  // the pushes go back to their trainers with the reply: none is held past it
}

// SGD's momentum buffer of each parameter, as torch::optim::SGD::step finds
// it (its state, by the parameter's TensorImpl); a fresh one, to be filled
// by the step, where it has none yet.
std::vector<MomentumBuffer> ParameterServer::momentum_buffers() {
  std::vector<MomentumBuffer> out;
  for (const auto& p : params_) {
    auto it = optimizer_->state().find(c10::guts::to_string(p.unsafeGetTensorImpl()));
    if (it == optimizer_->state().end())
      out.push_back({at::empty_like(p, at::MemoryFormat::Contiguous), true});
    else
      out.push_back({static_cast<torch::optim::SGDParamState&>(*it->second).momentum_buffer(), false});
  }
  return out;
}

void ParameterServer::keep_momentum_buffer(const at::Tensor& param, const at::Tensor& buffer) {
  auto state = std::make_unique<torch::optim::SGDParamState>();
  state->momentum_buffer(buffer);
  optimizer_->state()[c10::guts::to_string(param.unsafeGetTensorImpl())] = std::move(state);
}

// The mean as a sum then a product (ATen on one thread, 100 k floats: 18 us,
// where lerp_ took 60 and a division 29), then SGD's own step; a lone push
// is its own mean.
void ParameterServer::apply_round_mean_with_aten(const std::vector<const Params*>& pushes) {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (pushes.size() == 1) {
      params_[i].mutable_grad() = (*pushes[0])[i];
      continue;
    }
    at::add_out(pending_grads_[i], (*pushes[0])[i], (*pushes[1])[i]);
    for (size_t k = 2; k < pushes.size(); ++k) pending_grads_[i].add_((*pushes[k])[i]);
    pending_grads_[i].mul_(1.0 / double(pushes.size()));
    params_[i].mutable_grad() = pending_grads_[i];
  }
  optimizer_->step();
  for (auto& p : params_) p.mutable_grad() = at::Tensor();
}

int64_t ParameterServer::updates() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return updates_;
}

double ParameterServer::take_epoch_loss() {
  std::lock_guard<std::mutex> lock(mutex_);
  double mean = updates_ > 0 ? loss_sum_ / double(updates_) : 0;
  updates_ = 0;
  loss_sum_ = 0;
  return mean;
}

void ParameterServer::set_learning_rate(double lr) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& group : optimizer_->param_groups()) static_cast<torch::optim::SGDOptions&>(group.options()).lr(lr);
}

void ParameterServer::save(torch::serialize::OutputArchive& archive) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!pushed_.empty()) throw std::logic_error("ParameterServer: cannot save in the middle of a sync round");
  torch::serialize::OutputArchive params(archive.compilation_unit()), optimizer(archive.compilation_unit());
  castor::detail::save_tensors(params, params_);
  optimizer_->save(optimizer);
  archive.write("params", params);
  archive.write("optimizer", optimizer);
}

void ParameterServer::load(torch::serialize::InputArchive& archive) {
  std::lock_guard<std::mutex> lock(mutex_);
  torch::serialize::InputArchive params, optimizer;
  archive.read("params", params);
  archive.read("optimizer", optimizer);
  castor::detail::load_tensors(params, params_);  // checks the shapes: another --hidden is refused
  // A fresh optimizer first: SGD::load leaves a momentum buffer that the
  // archive has none for (one saved before the first step) as it was, and
  // a rerun epoch (J1 of Note [Trainer failure]) must not start with the
  // failed attempt's momentum.
  auto options = static_cast<torch::optim::SGDOptions&>(optimizer_->param_groups().front().options());
  optimizer_ = std::make_unique<torch::optim::SGD>(params_, options);
  optimizer_->load(optimizer);
}

Evaluation ParameterServer::evaluate(const Dataset& data) {
  std::lock_guard<std::mutex> lock(mutex_);
  return ps::evaluate(params_, data);
}

}  // namespace castor::apps::ps

using castor::RRef;
using castor::apps::ps::ParameterServer;
using castor::apps::ps::Params;

CASTOR_CLASS(ParameterServer)
    .constructor<int64_t, int64_t, double, double, int64_t, bool>()
    .method("parameters", &ParameterServer::parameters)
    .method("update", &ParameterServer::update)
    .runs_on_arrival("update")  // it stores a push, or runs the round's pass and replies: Note [Methods run on arrival]
    .checkpointed();

namespace castor::apps::ps {
/// What every trainer is given once, as it is built (Note [User structs]).
struct TrainerSetup {
  RRef<ParameterServer> server;
  int64_t trainers = 0;  // how many there are (the shards)
  int64_t batch = 0;
  int64_t seed = 0;
  std::string data_dir;
  int64_t limit = -1;
};
CASTOR_STRUCT(TrainerSetup, server, trainers, batch, seed, data_dir, limit);

/// A trainer: one member of the driver's mesh (Note [Mesh]), on its worker.
class Trainer {
 public:
  explicit Trainer(TrainerSetup setup) : setup_(std::move(setup)), rank_(current_worker().rank()) {}

  /// Which shard it trains (its rank): a call that shows it is built.
  int64_t shard_rank() const { return rank_; }

  /// One epoch: `steps` steps on its shard, each pushing gradients and
  /// continuing from the parameters the server returns. Returns its mean loss.
  double train_epoch(int64_t epoch, int64_t steps) {
    // Several workers share this host's cores: one ATen thread, and
    // OpenBLAS's own pool (which that setting does not reach) at one thread
    // too, as the pipeline's stages do. `castor-bench train` on a 2-core
    // Intel VM, six alternating pairs of builds without and with it: 1.01-
    // 1.18x the samples/s (median 1.14). An AMD VM had read the other way
    // on 2026-11-27 (bench/README.md, "OpenBLAS's own threads").
    at::set_num_threads(1);
    keep_openblas_to_one_thread();
    const auto& data = cached_fashion_mnist("train", setup_.data_dir, setup_.limit);
    auto order = shard_order(data.size(), rank_, setup_.trainers, epoch, setup_.seed);
    auto& server = setup_.server;
    auto params = trainable_copy(server.rpc_sync(&ParameterServer::parameters));
    // Note [Shared parameters]: a same-host server reads the pushed gradients
    // where they are; this trainer writes them again only after the round.
    Params pushed;
    for (const auto& p : params) pushed.push_back(at::empty_like(p));
    share_memory(pushed);
    auto next = step_rows(data, order, 0, setup_.batch);
    double loss_sum = 0;
    for (int64_t s = 0; s < steps; ++s) {
      auto [images, labels] = std::move(next);
      for (auto& p : params) p.mutable_grad() = at::Tensor();
      auto loss = mlp_loss(params, images, labels);
      loss.backward();
      double l = loss.item<double>();
      loss_sum += l;
      {
        at::NoGradGuard no_grad;
        for (size_t i = 0; i < params.size(); ++i) pushed[i].copy_(params[i].grad());
      }
      auto round = server.rpc_async(&ParameterServer::update, pushed, l, rank_);
      if (s + 1 < steps) next = step_rows(data, order, s + 1, setup_.batch);  // S4 of Note [Shared parameters]
      // The reply: on the server's host a view of its parameters (Note
      // [Shared parameters]), elsewhere this trainer's own copy. Either way
      // it is trained on as it came.
      params = round.wait();
      for (auto& p : params) p.requires_grad_(true);
    }
    return loss_sum / double(steps);
  }

 private:
  TrainerSetup setup_;
  int64_t rank_;  // the shard's
};
}  // namespace castor::apps::ps

CASTOR_CLASS(castor::apps::ps::Trainer)
    .constructor<castor::apps::ps::TrainerSetup>()
    .method("train_epoch", &castor::apps::ps::Trainer::train_epoch)
    .method("shard_rank", &castor::apps::ps::Trainer::shard_rank);

namespace castor::apps::ps {
namespace {

// Note [Parameter-server checkpoints]: what a checkpoint must have been made
// with to be resumed by this run (all but the number of epochs).
std::string settings_of(const PsConfig& cfg, int64_t trainers) {
  char buf[1024];
  std::snprintf(buf, sizeof(buf),
                "trainers=%lld hidden=%lld seed=%lld batch=%lld mode=%s lr=%g momentum=%g lr-decay=%g limit=%lld "
                "test-limit=%lld data=%s",
                (long long)trainers, (long long)cfg.hidden, (long long)cfg.seed, (long long)cfg.batch,
                cfg.sync ? "sync" : "async", cfg.lr, cfg.momentum, cfg.lr_decay, (long long)cfg.limit,
                (long long)cfg.test_limit, cfg.data_dir.c_str());
  return buf;
}

std::string encode(const EpochResult& r) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), "%.17g %.17g %.17g %.17g %.17g", r.train_loss, r.test.loss, r.test.accuracy,
                r.seconds, r.samples_per_s);
  return buf;
}

EpochResult decode(int64_t epoch, const std::string& s) {
  EpochResult r;
  r.epoch = epoch;
  if (std::sscanf(s.c_str(), "%lf %lf %lf %lf %lf", &r.train_loss, &r.test.loss, &r.test.accuracy, &r.seconds,
                  &r.samples_per_s) != 5)
    throw CheckpointError("parameter-server: the checkpoint's result of epoch " + std::to_string(epoch) +
                          " is damaged ('" + s + "')");
  return r;
}

// Restores the last checkpoint, if any, into the server; returns the
// results of the epochs it covers.
std::vector<EpochResult> resume(Checkpoint& checkpoint, const std::string& settings) {
  auto saved = checkpoint.latest();
  if (!saved) return {};
  check_checkpoint_settings(*saved, settings, "parameter-server", checkpoint.directory(), "epoch");
  auto restored = checkpoint.restore();
  std::vector<EpochResult> results;
  for (int64_t e = 1; e <= restored->step; ++e) {
    auto it = restored->meta.find("epoch." + std::to_string(e));
    if (it == restored->meta.end())
      throw CheckpointError("parameter-server: the checkpoint has no result for epoch " + std::to_string(e));
    results.push_back(decode(e, it->second));
  }
  std::printf("resuming after epoch %lld from the checkpoint in %s\n", (long long)restored->step,
              checkpoint.directory().c_str());
  std::fflush(stdout);
  return results;
}

// J1 of Note [Trainer failure]: the server's state in memory, and back.
std::string snapshot_of(const ParameterServer& ps) {
  torch::serialize::OutputArchive archive;
  ps.save(archive);
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

void restore(ParameterServer& ps, const std::string& snapshot) {
  torch::serialize::InputArchive archive;
  std::istringstream in(snapshot);
  archive.load_from(in);
  ps.load(archive);
}

// How many of an epoch's trainer calls have completed (their callbacks run
// on executor threads).
struct Ended {
  std::mutex mtx;
  std::condition_variable cv;
  size_t count = 0;
};

}  // namespace

std::vector<EpochResult> run_parameter_server(Worker& w, const PsConfig& cfg,
                                              const std::function<void(const EpochResult&)>& on_epoch) {
  int64_t trainers = w.world_size() - 1;
  if (trainers < 1) throw std::invalid_argument("parameter-server: needs at least 2 workers (a server and a trainer)");
  // The server shares the host's cores with its trainers, as they share
  // them with each other (Trainer::train_epoch): one ATen thread, and
  // OpenBLAS's pool at one thread. With the pool at the cores, each epoch's
  // evaluation left an OpenBLAS thread spinning in sched_yield for about
  // 0.1 s into the next epoch: 190 ms of CPU in 2 s of training on this
  // 2-core VM (castor run -n 3 parameter-server, the thread's own counts).
  at::set_num_threads(1);
  keep_openblas_to_one_thread();
  const auto& train = cached_fashion_mnist("train", cfg.data_dir, cfg.limit);
  const auto& test = cached_fashion_mnist("t10k", cfg.data_dir, cfg.test_limit);
  int64_t steps = steps_per_epoch(train.size(), trainers, cfg.batch);
  auto server = w.remote<ParameterServer>(w.rank(), trainers, cfg.hidden, cfg.lr, cfg.momentum, cfg.seed, cfg.sync);
  server.rpc_sync(&ParameterServer::parameters);  // built (or its constructor's error thrown) before the epochs start
  auto& ps = server.local_value();
  // Note [Trainer failure]: the handler holds the server (an RRef copy), so
  // it stays valid while a handler runs; it is removed when training ends.
  std::optional<FailureHandlerId> on_failure;
  if (cfg.rejoin) {  // J1: the trainer comes back; the driver reruns its epoch
    // The driver takes it out of the rounds itself (J2), when its call
    // fails: a late handler must not take out its new life.
    on_failure = w.on_worker_failure([](const WorkerFailure& f) {
      std::printf("\n%s; its epoch runs again once it rejoins\n", f.message().c_str());
      std::fflush(stdout);
    });
  }
  else if (cfg.continue_on_trainer_failure)
    on_failure = w.on_worker_failure([server](const WorkerFailure& f) {
      auto left = server.local_value().trainer_left(f.worker.id);
      std::printf("\n%s; the server carries on with %lld trainer(s)\n", f.message().c_str(), (long long)left);
      std::fflush(stdout);
    });
  struct RemoveHandler {
    Worker& w;
    std::optional<FailureHandlerId>& id;
    ~RemoveHandler() {
      if (id) w.remove_failure_handler(*id);
    }
  } remove_handler{w, on_failure};
  // The trainers, one per other worker, held as one mesh.
  std::vector<int64_t> trainer_ranks;
  for (int64_t r = 1; r <= trainers; ++r) trainer_ranks.push_back(r);
  const TrainerSetup setup{server, trainers, cfg.batch, cfg.seed, cfg.data_dir, cfg.limit};
  auto mesh = w.spawn_mesh<Trainer>(trainer_ranks, setup);
  // J1 of Note [Trainer failure]: a trainer built again on a rejoined worker
  // replaces its mesh member; J3: one that did not come back is left out.
  std::vector<std::optional<RRef<Trainer>>> reborn(mesh.size());
  std::vector<bool> left_out(mesh.size(), false);
  std::vector<EpochResult> results;
  // Note [Parameter-server checkpoints]
  auto settings = settings_of(cfg, trainers);
  std::optional<Checkpoint> checkpoint;
  if (!cfg.checkpoint_dir.empty()) {
    checkpoint.emplace(w, cfg.checkpoint_dir);
    checkpoint->add("server", server);
    results = resume(*checkpoint, settings);
    if (int64_t(results.size()) > cfg.epochs) results.resize(size_t(cfg.epochs));  // asked for fewer: report those
    if (on_epoch)
      for (const auto& r : results) on_epoch(r);  // the curves include the epochs before the restart
  }
  const auto epoch_timeout = castor::Timeout{std::chrono::minutes(30)};
  auto train_epoch = [&](size_t i, int64_t epoch) {
    if (reborn[i]) return reborn[i]->rpc_async(&Trainer::train_epoch, epoch, steps, epoch_timeout);
    return mesh.call_one(i, &Trainer::train_epoch, epoch, steps, epoch_timeout);
  };
  // J1: trainer `i` again on its worker's new life (waiting for it to
  // rejoin), or J3: left out. Between epoch attempts only.
  auto rebuild = [&](size_t i, int64_t epoch, bool again) {
    auto rank = trainer_ranks[i];
    auto name = w.get_worker_info(rank).name;
    if (!await_rejoin(w, rank, cfg.rejoin_wait)) {
      left_out[i] = true;
      ps.trainer_left(rank);
      std::printf("trainer %s did not rejoin within %lld s: the epochs go on without it\n", name.c_str(),
                  (long long)std::chrono::duration_cast<std::chrono::seconds>(cfg.rejoin_wait).count());
      return;
    }
    reborn[i] = w.remote<Trainer>(rank, setup);
    reborn[i]->rpc_sync(&Trainer::shard_rank);  // built (or its error thrown) before the epoch runs
    ps.trainer_back(rank);
    if (again)
      std::printf("trainer %s rejoined: epoch %lld runs again from its start\n", name.c_str(), (long long)epoch);
    else
      std::printf("trainer %s rejoined: it trains from epoch %lld on\n", name.c_str(), (long long)epoch);
  };
  // J1: a trainer whose worker died (and maybe rejoined already) since the
  // last epoch is built again before this one starts: its old life's
  // object answers nothing.
  auto check_trainers = [&](int64_t epoch) {
    for (size_t i = 0; i < mesh.size(); ++i) {
      if (left_out[i]) continue;
      if (w.is_alive(trainer_ranks[i])) {
        try {
          if (reborn[i])
            reborn[i]->rpc_sync(&Trainer::shard_rank);
          else
            mesh.call_one(i, &Trainer::shard_rank).wait();
          continue;
        } catch (const UnreachableError&) {  // its life died: build it again on the new one
        }
      }
      rebuild(i, epoch, false);
    }
    std::fflush(stdout);
  };
  std::string epoch_start;  // J1: the server as the epoch began
  for (int64_t epoch = int64_t(results.size()) + 1; epoch <= cfg.epochs; ++epoch) {
    if (cfg.rejoin) {
      check_trainers(epoch);
      epoch_start = snapshot_of(ps);
    }
    std::vector<size_t> died;  // J1: the members whose calls failed in this attempt
    std::vector<size_t> active;  // the mesh members alive as the epoch starts
    for (size_t i = 0; i < mesh.size(); ++i)
      if (w.is_alive(trainer_ranks[i]) && !left_out[i]) active.push_back(i);
    if (active.empty())
      throw std::runtime_error("parameter-server: every trainer has died; epoch " + std::to_string(epoch) +
                               " cannot run");
    ProgressBar bar("epoch " + std::to_string(epoch) + "/" + std::to_string(cfg.epochs),
                    steps * int64_t(active.size()), cfg.progress);
    ps.set_learning_rate(epoch_learning_rate(cfg, epoch));  // between epochs: no update is running
    auto start = Clock::now();
    std::vector<Future<double>> running;
    for (auto i : active) running.push_back(train_epoch(i, epoch));
    // Each trainer's end as it comes: a failure is seen at once, not after
    // the trainers before it (who may wait in a round for the failed one).
    // A completion wakes the driver at once (the epoch's time stops then),
    // else the progress bar is redrawn every 50 ms.
    auto ended = std::make_shared<Ended>();
    for (auto& f : running)
      f.on_complete([ended] {
        std::lock_guard<std::mutex> lock(ended->mtx);
        ++ended->count;
        ended->cv.notify_all();
      });
    size_t seen = 0;
    std::vector<bool> settled(running.size(), false);
    for (size_t open = running.size(); open > 0;) {
      for (size_t i = 0; i < running.size(); ++i) {
        if (settled[i] || !running[i].is_done()) continue;
        settled[i] = true;
        --open;
        try {
          running[i].wait();  // throws the trainer's error, naming it
        } catch (const UnreachableError&) {
          if (cfg.rejoin) {  // J2: the others finish this attempt without it
            ps.trainer_left(trainer_ranks[active[i]]);
            died.push_back(active[i]);
            continue;
          }
          if (!cfg.continue_on_trainer_failure || w.is_alive(trainer_ranks[active[i]])) throw;
          // Note [Trainer failure]: its death is the handler's to take.
        }
      }
      if (open == 0) break;
      {
        std::unique_lock<std::mutex> lock(ended->mtx);
        ended->cv.wait_for(lock, std::chrono::milliseconds(50), [&] { return ended->count > seen; });
        seen = ended->count;
      }
      auto done = ps.updates();
      char note[64];
      std::snprintf(note, sizeof(note), "%.0f samples/s", double(done * cfg.batch) / seconds_since(start));
      bar.update(done, note);
    }
    if (!died.empty()) {  // J1: back to the epoch's start, with the trainers that rejoin
      bar.finish("interrupted: a trainer died");
      restore(ps, epoch_start);
      ps.take_epoch_loss();
      for (auto i : died) rebuild(i, epoch, true);
      std::fflush(stdout);
      --epoch;
      continue;
    }
    EpochResult r;
    r.epoch = epoch;
    r.seconds = seconds_since(start);
    r.samples_per_s = double(ps.updates() * cfg.batch) / r.seconds;
    r.train_loss = ps.take_epoch_loss();
    r.test = ps.evaluate(test);
    char note[128];
    std::snprintf(note, sizeof(note), "loss %.4f  test accuracy %.4f  %.0f samples/s", r.train_loss, r.test.accuracy,
                  r.samples_per_s);
    bar.finish(note);
    results.push_back(r);
    if (on_epoch) on_epoch(r);
    if (checkpoint && (epoch % cfg.checkpoint_every == 0 || epoch == cfg.epochs)) {
      std::map<std::string, std::string> meta{{"settings", settings}};
      for (const auto& done : results) meta["epoch." + std::to_string(done.epoch)] = encode(done);
      checkpoint->save(epoch, std::move(meta));
      std::printf("checkpoint: epoch %lld saved in %s\n", (long long)epoch, checkpoint->directory().c_str());
      std::fflush(stdout);
    }
  }
  // J4: a trainer that dies after training (while the job shuts down) is
  // excused from the shutdown; its new life finds the job ending.
  if (cfg.rejoin) excuse_deaths_after_training(w);
  return results;
}

struct SingleProcessTraining::State {
  State(const PsConfig& c, int64_t trainers)
      : cfg(c),
        train(cached_fashion_mnist("train", c.data_dir, c.limit)),
        test(cached_fashion_mnist("t10k", c.data_dir, c.test_limit)),
        steps(steps_per_epoch(train.size(), trainers, c.batch)),
        batch(c.batch * trainers),
        params(init_mlp(c.hidden, uint64_t(c.seed))) {
    for (auto& p : params) p.requires_grad_(true);
    sgd = std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(c.lr).momentum(c.momentum));
  }
  PsConfig cfg;
  const Dataset& train;
  const Dataset& test;
  int64_t steps, batch;
  Params params;
  std::unique_ptr<torch::optim::SGD> sgd;
  int64_t epoch = 0;
};

SingleProcessTraining::SingleProcessTraining(const PsConfig& cfg, int64_t trainers, int threads)
    : state_(std::make_unique<State>(cfg, trainers)), threads_(threads) {}

SingleProcessTraining::~SingleProcessTraining() = default;

EpochResult SingleProcessTraining::next_epoch() {
  auto& st = *state_;
  int64_t epoch = ++st.epoch;
  int threads_before = at::get_num_threads();
  at::set_num_threads(threads_);
  // The reference multiplies on OpenBLAS's whole pool, as a process of its
  // own would (its fastest), even in a process whose parameter server keeps
  // the pool to one thread (castor-bench's).
  WholeOpenblasPool whole_pool;
  for (auto& group : st.sgd->param_groups())
    static_cast<torch::optim::SGDOptions&>(group.options()).lr(epoch_learning_rate(st.cfg, epoch));
  auto start = Clock::now();
  auto order = shard_order(st.train.size(), 1, 1, epoch, st.cfg.seed);
  double loss_sum = 0;
  for (int64_t s = 0; s < st.steps; ++s) {
    auto [images, labels] = step_rows(st.train, order, s, st.batch);
    st.sgd->zero_grad();
    auto loss = mlp_loss(st.params, images, labels);
    loss.backward();
    st.sgd->step();
    loss_sum += loss.item<double>();
  }
  EpochResult r;
  r.epoch = epoch;
  r.seconds = seconds_since(start);
  r.samples_per_s = double(st.steps * st.batch) / r.seconds;
  r.train_loss = loss_sum / double(st.steps);
  r.test = evaluate(st.params, st.test);
  at::set_num_threads(threads_before);  // a worker of this process may run its ops on fewer
  return r;
}

std::vector<EpochResult> train_single_process(const PsConfig& cfg, int64_t trainers,
                                              const std::function<void(const EpochResult&)>& on_epoch, int threads) {
  SingleProcessTraining training(cfg, trainers, threads);
  std::vector<EpochResult> results;
  for (int64_t epoch = 1; epoch <= cfg.epochs; ++epoch) {
    results.push_back(training.next_epoch());
    if (on_epoch) on_epoch(results.back());
  }
  return results;
}

}  // namespace castor::apps::ps
