// SyncRoundFloor (ps_floor.hpp): the parameter-server job with no framework.
// The server's arithmetic is the app's (the round's mean where the pushes
// lie, S3 of Note [Shared parameters], and SGD without momentum, castor-bench
// train's settings, in the same pass, S5); the trainers' is the app's too
// (mlp_loss, backward, on the rows of their shard, the next rows picked
// while the push is out: S4).
#include "ps_floor.hpp"

#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>

#include "apps/common/blas_threads.hpp"
#include "apps/parameter_server/round_step.hpp"
#include "floors.hpp"

namespace castor::bench {

namespace ps = apps::ps;

namespace {

using Clock = std::chrono::steady_clock;

bool send_word(int fd, int64_t v) { return send_all(fd, reinterpret_cast<const char*>(&v), sizeof v); }

// Sleeps in recv. Watching the socket first (non-blocking reads for 2 ms,
// as castor's waits watch) read 32 k samples/s against 181-193 k in two
// pairs: on two cores, three processes that watch take the core from the
// one that computes.
bool recv_word(int fd, int64_t& v) { return recv_all(fd, reinterpret_cast<char*>(&v), sizeof v); }

// Tensors shaped as `like`, laid one after another from `at`.
ps::Params views_at(float* at, const ps::Params& like) {
  ps::Params out;
  for (const auto& p : like) {
    out.push_back(at::from_blob(at, p.sizes(), at::kFloat));
    at += p.numel();
  }
  return out;
}

}  // namespace

struct SyncRoundFloor::Shared {
  size_t floats = 0, bytes = 0;
  void* base = nullptr;
  ps::Params shapes;  // the model as init_mlp makes it
  float* slot(int64_t i) const { return static_cast<float*>(base) + size_t(i) * floats; }  // 0: the parameters
};

namespace {

[[noreturn]] void serve(const ps::PsConfig& cfg, int control, const std::vector<int>& to_trainer,
                        const ps::Params& params, const std::vector<ps::Params>& grads, int64_t samples) {
  at::set_num_threads(1);
  apps::keep_openblas_to_one_thread();
  at::NoGradGuard no_grad;
  int64_t trainers = int64_t(to_trainer.size());
  int64_t steps = ps::steps_per_epoch(samples, trainers, cfg.batch);
  std::vector<const ps::Params*> pushes;
  for (const auto& g : grads) pushes.push_back(&g);
  int64_t epoch = 0, word = 0;
  while (recv_word(control, epoch) && epoch > 0) {
    double lr = ps::epoch_learning_rate(cfg, epoch);
    for (int fd : to_trainer) send_word(fd, epoch);
    bool ok = true;
    for (int64_t s = 0; s < steps && ok; ++s) {
      for (int fd : to_trainer) ok = ok && recv_word(fd, word);
      if (!ok) break;
      ps::step_on_round_mean(params, pushes, lr, 0, {});
      for (int fd : to_trainer) ok = ok && send_word(fd, s);
    }
    if (!ok || !send_word(control, steps)) break;
  }
  for (int fd : to_trainer) send_word(fd, 0);  // the end
  ::_exit(0);
}

[[noreturn]] void train(const ps::PsConfig& cfg, int64_t rank, int64_t trainers, int server, const ps::Params& shared,
                        const ps::Params& slot, const apps::Dataset& data) {
  at::set_num_threads(1);
  apps::keep_openblas_to_one_thread();
  int64_t steps = ps::steps_per_epoch(data.size(), trainers, cfg.batch);
  ps::Params params;
  for (const auto& p : shared) params.push_back(p.detach().requires_grad_(true));  // leaves on the shared memory
  int64_t epoch = 0, word = 0;
  while (recv_word(server, epoch) && epoch > 0) {
    auto order = ps::shard_order(data.size(), rank, trainers, epoch, cfg.seed);
    auto next = ps::step_rows(data, order, 0, cfg.batch);
    bool ok = true;
    for (int64_t s = 0; s < steps && ok; ++s) {
      auto [images, labels] = std::move(next);
      for (auto& p : params) p.mutable_grad() = at::Tensor();
      auto loss = ps::mlp_loss(params, images, labels);
      loss.backward();
      (void)loss.item<double>();  // the app's trainer reads its loss too
      {
        at::NoGradGuard no_grad;
        for (size_t i = 0; i < params.size(); ++i) slot[i].copy_(params[i].grad());
      }
      ok = send_word(server, s);
      if (ok && s + 1 < steps) next = ps::step_rows(data, order, s + 1, cfg.batch);
      ok = ok && recv_word(server, word);
    }
    if (!ok) break;
  }
  ::_exit(0);
}

}  // namespace

SyncRoundFloor::SyncRoundFloor(const ps::PsConfig& cfg, int64_t trainers)
    : cfg_(cfg), trainers_(trainers), shared_(std::make_unique<Shared>()) {
  if (trainers < 2) throw std::invalid_argument("SyncRoundFloor: a round needs at least two trainers");
  const auto& data = apps::cached_fashion_mnist("train", cfg.data_dir, cfg.limit);  // before the forks: shared
  auto& sh = *shared_;
  sh.shapes = ps::init_mlp(cfg.hidden, uint64_t(cfg.seed));
  for (const auto& p : sh.shapes) sh.floats += size_t(p.numel());
  sh.bytes = sh.floats * sizeof(float) * size_t(1 + trainers);
  sh.base = ::mmap(nullptr, sh.bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh.base == MAP_FAILED) throw std::runtime_error("SyncRoundFloor: cannot map " + std::to_string(sh.bytes) + " bytes");
  auto params = views_at(sh.slot(0), sh.shapes);
  for (size_t i = 0; i < params.size(); ++i) params[i].copy_(sh.shapes[i]);
  std::vector<ps::Params> grads;
  for (int64_t t = 0; t < trainers; ++t) grads.push_back(views_at(sh.slot(1 + t), sh.shapes));

  auto pair = [] {
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
      throw std::runtime_error("SyncRoundFloor: socketpair failed");
    return std::pair<int, int>{fds[0], fds[1]};
  };
  auto control = pair();
  std::vector<std::pair<int, int>> links;
  for (int64_t t = 0; t < trainers; ++t) links.push_back(pair());
  auto fork_or_throw = [this] {
    pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("SyncRoundFloor: fork failed");
    if (pid > 0) children_.push_back(pid);
    return pid;
  };
  // Each process keeps its own ends only (the others would hold a link open).
  if (fork_or_throw() == 0) {
    std::vector<int> to_trainer;
    ::close(control.first);
    for (auto& l : links) to_trainer.push_back(l.first), ::close(l.second);
    serve(cfg, control.second, to_trainer, params, grads, data.size());
  }
  ::close(control.second);
  for (auto& l : links) ::close(l.first);
  for (int64_t t = 0; t < trainers; ++t)
    if (fork_or_throw() == 0) {
      ::close(control.first);
      for (size_t other = 0; other < links.size(); ++other)
        if (other != size_t(t)) ::close(links[other].second);
      train(cfg, t + 1, trainers, links[size_t(t)].second, params, grads[size_t(t)], data);
    }
  control_ = control.first;
  for (auto& l : links) ::close(l.second);
}

SyncRoundFloor::~SyncRoundFloor() {
  if (control_ >= 0) {  // the end: the server tells the trainers (workers forked since hold this socket too)
    send_word(control_, 0);
    ::close(control_);
  }
  for (pid_t pid : children_) ::waitpid(pid, nullptr, 0);
  if (shared_->base && shared_->base != MAP_FAILED) ::munmap(shared_->base, shared_->bytes);
}

ps::EpochResult SyncRoundFloor::next_epoch() {
  ps::EpochResult r;
  r.epoch = ++epoch_;
  int64_t steps = 0;
  auto start = Clock::now();
  if (!send_word(control_, r.epoch) || !recv_word(control_, steps))
    throw std::runtime_error("SyncRoundFloor: its server went away in epoch " + std::to_string(r.epoch));
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  r.samples_per_s = double(steps * trainers_ * cfg_.batch) / r.seconds;
  r.test = ps::evaluate(views_at(shared_->slot(0), shared_->shapes),
                        apps::cached_fashion_mnist("t10k", cfg_.data_dir, cfg_.test_limit));
  return r;
}

}  // namespace castor::bench
