// Parameter-server training on Fashion-MNIST: the server (a remote object on
// rank 0) holds the MLP and its optimizer; trainers (ranks 1..N) fetch the
// parameters, compute gradients on their shard and push them.
//
// Note [Parameter-server modes]
// sync  (batch-updating, as in PyTorch's tutorial): update() returns a Future
//       that completes when every trainer has pushed its gradients for this
//       round; the server then applies their average once and all trainers
//       continue from the same parameters. Every trainer runs the same number
//       of steps per epoch, or the last round would never complete.
// async: every push is applied at once; trainers run at their own pace on
//       parameters that may be a few updates old.
//   A1. Asynchrony is momentum already: with N trainers each gradient is
//       computed on parameters about N-1 updates old, which acts like a
//       momentum of 1 - 1/N (Mitliagkas et al., "Asynchrony begets
//       momentum", 2016). The server's SGD momentum is therefore the asked
//       one less that, never below 0: 0.9 becomes 0.4 with 2 trainers.
//       Without A1, 2 trainers at momentum 0.9 ended 3 epochs at 64 % test
//       accuracy (loss 1.07) where sync mode reached 86 %; with it, within
//       a point of sync mode (seeds 1-3; 1.2 points with 4 trainers).
//       Scaling each push by 1/N as well (so that N pushes move the model
//       as far as one sync round) cost another 1-2 points: not done.
//   A2. N is the number of trainers still in the job (Note [Trainer
//       failure]), so the momentum follows departures. With one trainer,
//       async mode is sync mode, update for update.
// Either way the server object is only touched through its owner actor, one
// call at a time, so no update is lost and no lock guards the model itself;
// the mutex lets the driver read progress and evaluate between epochs, and
// take a dead trainer out of the round.
//
// Note [Shared parameters]
// In sync mode the server's parameters and each trainer's pushed gradients
// are shared tensors (castor::share_memory, Note [Shared tensors]): a
// trainer on the server's host trains on a view of the server's parameters
// and the server sums the gradients where the trainer wrote them, so a
// round copies nothing between processes (castor-bench train: the copies
// and the reply's clone were most of what a round cost above its floor).
//   S1. No one writes what another reads: the server steps the parameters
//       only once every trainer of the round has pushed, so none is
//       computing on them; a trainer writes its gradients again only after
//       the round's reply, by which time the server has summed them.
//   S2. A trainer on another host gets copies, as before; so does every
//       trainer in async mode, where the server steps while others compute
//       (its replies are clones there).
//   S3. The server keeps each push as it came until its round is full, and
//       averages them then where they lie (on this host, where the trainers
//       wrote them: no copy at the first push); S1 keeps them unwritten
//       until then. A trainer that died in
//       the round leaves its push readable (the server maps its segment).
//   S4. A trainer picks its next batch's rows while its push is out, as a
//       data loader prefetches: the round's wait is the server's, and the
//       rows are the trainer's own.
//   S5. The round's mean and SGD's step are one pass over the model
//       (round_step.hpp), with SGD's momentum buffers where SGD keeps them,
//       so a checkpoint and a resumed run see SGD's own state. On the
//       server, 2 trainers: 62 us a round against 168-177 us for ATen's
//       five ops, which remain for what the pass does not take (tensors
//       not float or contiguous, SGD options the app never sets). A round
//       replies with aliases of the parameters made once (detach() is a
//       dispatched op and an autograd view each time).
//   S6. update() runs on arrival (Note [Methods run on arrival]): the
//       server's link reader stores a push, and on a round's last push runs
//       the pass and sends the replies, with no executor thread woken. It
//       waits on no Future; the mutex is held only briefly by others
//       during a round (the driver's progress, a trainer's departure).
//
// Note [Trainer failure]
// --on-trainer-failure stop (the default): the server's call to a dead
//       trainer fails, naming it, and so does the job.
// --on-trainer-failure continue: the driver registers a failure handler
//       (Worker::on_worker_failure), which takes the trainer out of the
//       sync round (trainer_left): a round completes once every trainer
//       still alive has pushed, and averages the pushes it got (a push the
//       dead trainer made before dying counts). Later epochs run on the
//       trainers left, each on its own shard; the dead trainer's shard is
//       not trained on any more. The job ends with exit 0 while one
//       trainer is left.
// Under a restart policy (PsConfig::rejoin: the launcher starts a dead
// trainer again, Note [Restart policy] R2):
//   J1. A trainer's death loses neither the job nor its shard: the epoch it
//       died in runs again from the server state it started with (kept in
//       memory), once the trainer has rejoined under its new incarnation
//       (Note [Rejoin]); its Trainer is built again on the new life
//       (trainer_back). The result is the undisturbed run's.
//   J2. The attempt's other trainers finish it first (trainer_left lets
//       their rounds complete), so no call is left running when the server
//       is restored; what they pushed is undone by the restore.
//   J3. A trainer that has not rejoined within PsConfig::rejoin_wait is left
//       out, as with --on-trainer-failure continue.
//   J4. A trainer that dies once training is over is excused from the
//       graceful shutdown; its new life is told the job is ending.
//
// Note [Parameter-server checkpoints]
// With --checkpoint-dir D, the driver saves the server (its parameters and
// SGD momentum) with castor::Checkpoint after every --checkpoint-every
// epochs, with the results so far and the run's settings in the manifest's
// meta. At start it restores the last checkpoint of D, if there is one, and
// goes on from the epoch after it: a job that `castor run --max-restarts`
// started again after a death resumes where the checkpoint left it. The
// trainers' shards depend only on the seed, the epoch and their rank, so a
// resumed sync run repeats the epochs the undisturbed run would have run. A
// checkpoint of other settings (model, seed, trainers, batch, mode, data)
// is refused, naming both.
// Under a restart policy with no folder given, `castor run parameter-server`
// checkpoints in a folder of the job's own (castor-out/parameter-server-
// <job>.checkpoint, one name for every restart of the job), removed once
// training has ended: a server's death never sends the job back to epoch 1.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "actors/api/future.hpp"
#include "actors/api/worker.hpp"
#include "apps/parameter_server/mlp.hpp"

namespace torch::optim {
class Optimizer;
}
namespace torch::serialize {
class OutputArchive;
class InputArchive;
}  // namespace torch::serialize

namespace castor::apps::ps {

struct MomentumBuffer;

struct PsConfig {
  int64_t epochs = 6;
  int64_t batch = 64;      // per trainer and step
  double lr = 0.1;
  double momentum = 0.9;   // SGD momentum on the server
  double lr_decay = 0.7;   // the learning rate of epoch e is lr * lr_decay^(e-1)
  int64_t hidden = 128;
  int64_t seed = 1;
  bool sync = true;
  int64_t limit = -1;      // training samples used (all when <= 0)
  int64_t test_limit = -1; // test samples used (all when <= 0)
  std::string data_dir = default_fashion_mnist_dir();
  bool progress = true;    // draw a progress bar per epoch
  bool continue_on_trainer_failure = false;  // Note [Trainer failure]
  bool rejoin = false;  // J1 of Note [Trainer failure]: dead trainers come back (CASTOR_MAX_RESTARTS > 0)
  std::chrono::milliseconds rejoin_wait{60000};  // J3
  std::string checkpoint_dir;  // Note [Parameter-server checkpoints]; empty: none
  int64_t checkpoint_every = 1;  // epochs between checkpoints
};

struct EpochResult {
  int64_t epoch = 0;  // from 1
  double train_loss = 0;
  Evaluation test;
  double seconds = 0;        // training time of the epoch, evaluation excluded
  double samples_per_s = 0;
};

class ParameterServer {
 public:
  ParameterServer(int64_t trainers, int64_t hidden, double lr, double momentum, int64_t seed, bool sync);
  ~ParameterServer();

  /// The current parameters (copies: the caller may keep them).
  Params parameters();

  /// Trainer `trainer` (its rank) pushes one step's gradients (and its
  /// loss, for the progress line); completes with the parameters to
  /// continue from (see the Note).
  Future<Params> update(Params grads, double loss, int64_t trainer);

  /// Note [Trainer failure]: `trainer` (a rank) is gone; a sync round no
  /// longer waits for it. Returns the number of trainers left.
  int64_t trainer_left(int64_t trainer);
  /// J1 of Note [Trainer failure]: `trainer` rejoined; between epochs only.
  void trainer_back(int64_t trainer);

  // For the driver on the server's worker, between or during epochs.
  int64_t updates() const;          // pushes since the last take_epoch_loss()
  double take_epoch_loss();         // mean pushed loss since the last call
  Evaluation evaluate(const Dataset& data);
  void set_learning_rate(double lr);

  /// Note [Parameter-server checkpoints]: the parameters and the optimizer's
  /// momentum, between rounds (CASTOR_CLASS(...).checkpointed()).
  void save(torch::serialize::OutputArchive& archive) const;
  void load(torch::serialize::InputArchive& archive);

 private:
  void apply();                   // async: SGD's step on pending_grads_
  void apply_round_mean();        // sync: S3, S5 of Note [Shared parameters]; mutex_ held
  void apply_round_mean_with_aten(const std::vector<const Params*>& pushes);
  std::vector<MomentumBuffer> momentum_buffers();  // S5: SGD's, as its step finds them
  void keep_momentum_buffer(const at::Tensor& param, const at::Tensor& buffer);
  void complete_round_if_full();  // sync; mutex_ held
  void set_async_momentum();      // A1; mutex_ held

  mutable std::mutex mutex_;
  std::set<int64_t> trainers_;  // ranks still alive
  bool sync_;
  double momentum_;  // as asked; async mode applies less (A1)
  Params params_;
  Params replies_;  // sync: params_ detached, what a round replies (Note [Shared parameters])
  Params pending_grads_;     // the gradient SGD steps on (sync: the round's mean)
  std::map<int64_t, Params> round_grads_;  // sync: the round's pushes by trainer, as they came (S3)
  std::set<int64_t> pushed_; // sync: who pushed this round
  Promise<Params> round_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  int64_t updates_ = 0;
  double loss_sum_ = 0;
};

/// Rank 0's side: builds the server, runs `cfg.epochs` epochs on the
/// trainers (every other worker), evaluates after each, calls `on_epoch`.
std::vector<EpochResult> run_parameter_server(Worker& w, const PsConfig& cfg,
                                              const std::function<void(const EpochResult&)>& on_epoch = {});

/// A1 of Note [Parameter-server modes]: the SGD momentum the server applies
/// in async mode with `trainers` trainers when `asked` was asked for.
double async_momentum(double asked, int64_t trainers);

// What the server, the trainers and the references share (also used by
// castor-bench's floor of a synchronous round):
/// Trainer `rank`'s (1..trainers) sample order in `epoch`: every
/// trainers-th sample from rank-1 on, shuffled with a seed of (seed, epoch,
/// rank), so that every run of the same settings agrees.
at::Tensor shard_order(int64_t samples, int64_t rank, int64_t trainers, int64_t epoch, int64_t seed);
/// The images and labels of step `step`'s `batch` rows of `order`.
std::pair<at::Tensor, at::Tensor> step_rows(const Dataset& data, const at::Tensor& order, int64_t step, int64_t batch);
/// lr * lr_decay^(epoch-1).
double epoch_learning_rate(const PsConfig& cfg, int64_t epoch);
/// Rounds per epoch; throws naming the settings when there are too few samples.
int64_t steps_per_epoch(int64_t samples, int64_t trainers, int64_t batch);

/// The same model, data and seed trained in one process with libtorch's
/// SGD on batches of `batch * trainers` (what a sync round averages), on
/// `threads` intra-op threads, one epoch per call: castor-bench times an
/// epoch of it between castor's epochs (on 1 thread and on the machine's
/// cores, and keeps the faster): the same arithmetic with no messages is the
/// limit training can reach.
class SingleProcessTraining {
 public:
  SingleProcessTraining(const PsConfig& cfg, int64_t trainers, int threads = 1);
  ~SingleProcessTraining();
  SingleProcessTraining(const SingleProcessTraining&) = delete;
  SingleProcessTraining& operator=(const SingleProcessTraining&) = delete;

  /// Trains the next epoch (from 1) and evaluates; the process's intra-op
  /// thread count is as before afterwards.
  EpochResult next_epoch();

 private:
  struct State;
  std::unique_ptr<State> state_;
  int threads_;
};

/// `cfg.epochs` epochs of SingleProcessTraining, `on_epoch` after each.
std::vector<EpochResult> train_single_process(const PsConfig& cfg, int64_t trainers,
                                              const std::function<void(const EpochResult&)>& on_epoch = {},
                                              int threads = 1);

}  // namespace castor::apps::ps
