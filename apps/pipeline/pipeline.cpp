// Note [Pipeline]: the stages are RemoteModules; micro-batch i's stage 1
// output stays on stage 1 as an RRef, stage 2 fetches it straight from there,
// and only stage 2's logits come back to the driver. While stage 2 works on
// micro-batch i, stage 1 already computes i + 1. Backward runs through both
// stages by distributed autograd; one DistributedOptimizer steps both.
//
//  P1 Two stages on one host are bound to a CPU each (bind_stages; the
//     driver is left free). Each stage does its arithmetic on one thread,
//     but its frames are copied in by its link's receiver thread (B7 of Note
//     [Bulk path]), which the scheduler, left alone, may run on the other
//     stage's core while that stage bounds the step (our reading; the cores
//     were not traced). Bound, each stage's copies wait for its own core.
//     Measured with castor-bench pipeline on a 2-core VM, four alternating
//     pairs, bound / free: four micro-batches 1.02-1.15x the samples/s
//     (median 1.13), eight 1.07-1.15x, one 0.96-1.02x; the default model's
//     four 1.19-1.35x (bench/README.md, "The pipeline's stages bound to a
//     CPU each"). Two jobs on one host would bind their stages to the same
//     two CPUs: --no-stage-binding leaves them free.
//
// Note [Pipeline failure]
// ~~~~~~~~~~~~~~~~~~~~~~~
// The stages hold the training's whole state (the layers and the momentum);
// the driver holds only the order of the samples. So a stage's death is
// survived through checkpoints (castor::Checkpoint: both stages' modules and
// the optimizer's state, after every --checkpoint-every epochs).
//  PF1 Under a restart policy (PipelineConfig::rejoin: `--max-restarts`,
//      which starts a dead stage's worker again alone, R2 of Note [Restart
//      policy]) the driver always checkpoints, before the first epoch too:
//      in --checkpoint-dir or the cluster file's checkpoint_dir, else in a
//      folder of its own (castor-out/pipeline-<job>.checkpoint) when every
//      stage runs on its host, which it removes when training ends. With
//      stages on other hosts and no folder given, a stage's death during
//      training ends the job, as without a restart policy, and the driver
//      says so at start.
//  PF2 A stage whose worker dies as training starts (the stages built, the
//      first checkpoint) or during an epoch (in a forward, the backward, the
//      optimizer's step, the test pass or a checkpoint's save) fails one of
//      the driver's calls. The driver finds the death and waits for the
//      stage's new life (Note [Owner recovery], OR1-OR3, in
//      apps/common/owner_recovery.cpp), builds both stages and the optimizer
//      again, restores the last checkpoint into them, and runs again from
//      the epoch after it, in the undisturbed run's order of samples (the
//      generator replays the permutations of the epochs before). The
//      survivor is built again too: the failed step may have stepped its
//      layers and not the dead stage's. Without a checkpoint folder, only a
//      death before the first epoch is taken back (nothing was lost yet).
//  PF3 A stage that is not back within PipelineConfig::rejoin_wait fails the
//      job, naming it (OR2).
//  PF4 The returned points hold each epoch once, from the checkpoint where
//      it covers them; `on_epoch` sees again an epoch that ran after the
//      restored checkpoint and runs again.
//  PF5 With a checkpoint folder (restart policy or not), the driver resumes
//      from the folder's last checkpoint at start: a job that R3 started
//      again whole (rank 0 died) goes on after it. A checkpoint made with
//      other settings (checkpoint_meta's, all but the epochs and the
//      micro-batches) is refused, naming both.
//  PF6 A stage that dies once training is over is excused from the graceful
//      shutdown; its new life finds the job ending (OR4).
#include "apps/pipeline/pipeline.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>
#include <torch/optim/sgd.h>

#include "apps/common/blas_threads.hpp"
#include "apps/common/checkpoint_flags.hpp"
#include "apps/common/cpu_binding.hpp"
#include "apps/common/progress.hpp"
#include "apps/common/owner_recovery.hpp"
#include "apps/pipeline/pipeline_checkpoint.hpp"
#include "engine/context.hpp"
#include "optimizer/dist_optimizer.hpp"
#include "optimizer/remote_module.hpp"

namespace castor::apps::pipeline {

// Each stage's forward sets its intra-op threads on the thread that runs it
// (OpenMP's setting is per thread): one where three processes share the
// host's cores, more in the single-process reference.
//
// A stage on a worker of its own also keeps OpenBLAS, whose pool
// at::set_num_threads does not reach (apps/common/blas_threads.hpp), to one
// thread (`one_blas_thread`): with a pool on every core, each stage's pool
// takes the other stage's core exactly when micro-batches overlap, and its
// idle threads spin there. Measured with castor-bench pipeline, two
// alternating pairs: 4 micro-batches 23.1-25.4 k samples/s against
// 17.7-19.2 k, 8 micro-batches 13.6-14.9 k against 9.6-10.4 k, 1 micro-batch
// within the spread (bench/README.md). The single-process reference leaves
// the pool as it is: on one ATen thread, OpenBLAS's second thread uses the
// otherwise idle core, its fastest setting.
struct FirstStageImpl : torch::nn::Module {
  FirstStageImpl(int64_t in, int64_t out) : fc(register_module("fc", torch::nn::Linear(in, out))) {}
  at::Tensor forward(const at::Tensor& x) {
    at::set_num_threads(threads);
    if (one_blas_thread) keep_openblas_to_one_thread();
    return at::relu(fc(x));
  }
  torch::nn::Linear fc;
  int threads = 1;
  bool one_blas_thread = true;
};
TORCH_MODULE(FirstStage);

struct SecondStageImpl : torch::nn::Module {
  SecondStageImpl(int64_t in, int64_t hidden)
      : fc1(register_module("fc1", torch::nn::Linear(in, hidden))),
        fc2(register_module("fc2", torch::nn::Linear(hidden, 10))) {}
  at::Tensor forward(const at::Tensor& x) {
    at::set_num_threads(threads);
    if (one_blas_thread) keep_openblas_to_one_thread();
    return fc2(at::relu(fc1(x)));
  }
  torch::nn::Linear fc1, fc2;
  int threads = 1;
  bool one_blas_thread = true;
};
TORCH_MODULE(SecondStage);

}  // namespace castor::apps::pipeline

CASTOR_REMOTE_MODULE(castor::apps::pipeline::FirstStage, int64_t, int64_t);
CASTOR_REMOTE_MODULE(castor::apps::pipeline::SecondStage, int64_t, int64_t);

namespace castor::apps::pipeline {
namespace {
// Where this worker runs: "<host> <pid>", the host as host_identity names it.
std::string where_this_runs() { return host_identity() + " " + std::to_string(::getpid()); }
}  // namespace
}  // namespace castor::apps::pipeline

// What the driver asks of a stage's worker before the stages are made
// (bind_stages): where it runs, and to bind itself to a CPU.
CASTOR_FUNCTION(pipeline_where, []() { return castor::apps::pipeline::where_this_runs(); });
CASTOR_FUNCTION(pipeline_bind_to_cpu_slot, [](int64_t slot) {
  std::string why;
  return castor::apps::bind_process_to_cpu_slot(int(slot), why) ? std::string() : why;
});

namespace castor::apps::pipeline {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Pipeline {
  nn::RemoteModule<FirstStage> first;
  nn::RemoteModule<SecondStage> second;

  // Starts every micro-batch at once; each flows stage 1 -> stage 2 as soon
  // as the stage is free. Returns the logits of the whole batch.
  at::Tensor forward(const at::Tensor& batch, int64_t micro_batches) const {
    std::vector<Future<at::Tensor>> outputs;
    for (const auto& part : batch.chunk(micro_batches)) {
      auto hidden = first.module_rref().remote(&nn::ModuleHost<FirstStage>::forward, part);
      outputs.push_back(second.module_rref().rpc_async(&nn::ModuleHost<SecondStage>::forward, hidden));
    }
    std::vector<at::Tensor> logits;
    for (auto& f : outputs) logits.push_back(f.wait());
    return at::cat(logits);
  }
};

using LogitsOf = std::function<at::Tensor(const at::Tensor&)>;

// Test accuracy, 1000 samples at a time through `logits_of`.
double accuracy(const Dataset& test, const LogitsOf& logits_of) {
  int64_t correct = 0;
  for (int64_t at = 0; at < test.size(); at += 1000) {
    auto images = test.images.slice(0, at, at + 1000);
    auto labels = test.labels.slice(0, at, at + 1000);
    correct += logits_of(images).argmax(1).eq(labels).sum().item<int64_t>();
  }
  return double(correct) / double(test.size());
}

int64_t steps_per_epoch(const Dataset& train, const PipelineConfig& cfg) {
  int64_t steps = train.size() / cfg.batch;
  if (steps < 1) throw std::invalid_argument("pipeline: fewer training samples than --batch-size");
  return steps;
}

at::Tensor loss_of(const at::Tensor& logits, const at::Tensor& labels) {
  return at::nll_loss(at::log_softmax(logits, 1), labels);
}

// One epoch over `train` in the order of the generator: `step(images,
// labels)` trains on one batch and returns its loss; then the test accuracy
// through `logits_of`.
CurvePoint run_epoch(const PipelineConfig& cfg, int64_t epoch, const Dataset& train, const Dataset& test,
                     at::Generator& gen, const std::function<double(const at::Tensor&, const at::Tensor&)>& step,
                     const LogitsOf& logits_of) {
  int64_t steps = steps_per_epoch(train, cfg);
  ProgressBar bar("epoch " + std::to_string(epoch) + "/" + std::to_string(cfg.epochs), steps, cfg.progress);
  auto order = at::randperm(train.size(), gen, at::kLong);
  auto start = Clock::now();
  double loss_sum = 0;
  for (int64_t s = 0; s < steps; ++s) {
    auto idx = order.slice(0, s * cfg.batch, (s + 1) * cfg.batch);
    loss_sum += step(train.images.index_select(0, idx), train.labels.index_select(0, idx));
    char note[48];
    std::snprintf(note, sizeof(note), "loss %.4f", loss_sum / double(s + 1));
    bar.update(s + 1, note);
  }
  double seconds = seconds_since(start);
  CurvePoint point{double(epoch), loss_sum / double(steps), accuracy(test, logits_of), seconds,
                   double(steps * cfg.batch) / seconds};
  char note[128];
  std::snprintf(note, sizeof(note), "loss %.4f  test accuracy %.4f  %.0f samples/s", point.loss, point.accuracy,
                point.samples_per_s);
  bar.finish(note);
  return point;
}

}  // namespace

std::string bind_stages(Worker& w, const PipelineConfig& cfg) {
  if (!cfg.bind_stages) return "stages not bound to CPUs (--no-stage-binding)";
  auto first = w.get_worker_info(cfg.stage1_rank).name, second = w.get_worker_info(cfg.stage2_rank).name;
  if (cfg.stage1_rank == cfg.stage2_rank) return "stages not bound to CPUs: both are on " + first;
  // A process is bound whole: a stage that shares its process with the
  // driver or the other stage (workers started in one program) stays free.
  auto at1 = w.rpc_sync<std::string>(first, "pipeline_where"), at2 = w.rpc_sync<std::string>(second, "pipeline_where");
  if (at1 == where_this_runs() || at2 == where_this_runs())
    return "stages not bound to CPUs: a stage runs in the driver's process";
  if (at1 == at2) return "stages not bound to CPUs: both run in one process";
  auto host_of = [](const std::string& where) { return where.substr(0, where.find(' ')); };
  if (host_of(at1).empty() || host_of(at1) != host_of(at2)) return "stages not bound to CPUs: they do not share a host";
  for (auto [name, slot] : {std::pair{first, 0}, std::pair{second, 1}}) {
    auto why = w.rpc_sync<std::string>(name, "pipeline_bind_to_cpu_slot", int64_t(slot));
    if (!why.empty()) return "stages not bound to CPUs: on " + name + ", " + why;
  }
  return "stages bound to a CPU each (they share a host): " + first + " to the first it may use, " + second +
         " to the second";
}

void check(const PipelineConfig& cfg) {
  if (cfg.epochs < 1 || cfg.batch < 1 || cfg.micro_batches < 1 || cfg.micro_batches > cfg.batch ||
      cfg.hidden1 < 1 || cfg.hidden2 < 1)
    throw std::invalid_argument("--epochs, --batch-size, --hidden1, --hidden2 must be positive and "
                                "1 <= --micro-batches <= --batch-size");
}

namespace {

// The stages, their optimizer and their checkpoint: built as training
// starts, and again on the stages' new lives after a death (PF2).
struct Trainee {
  Trainee(Worker& w, const PipelineConfig& cfg, const std::string& checkpoint_dir)
      : pipeline{nn::RemoteModule<FirstStage>(w, cfg.stage1_rank, 784, cfg.hidden1),
                 nn::RemoteModule<SecondStage>(w, cfg.stage2_rank, cfg.hidden1, cfg.hidden2)},
        optimizer(w, sgd_of(cfg), parameters_of(pipeline)) {
    if (checkpoint_dir.empty()) return;
    checkpoint.emplace(w, checkpoint_dir);
    checkpoint->add("stage1", pipeline.first).add("stage2", pipeline.second).add("optimizer", optimizer);
  }
  static optim::SGD sgd_of(const PipelineConfig& cfg) {
    optim::SGD spec{cfg.lr};
    spec.momentum = cfg.momentum;
    return spec;
  }
  static std::vector<RRef<at::Tensor>> parameters_of(const Pipeline& p) {
    auto params = p.first.parameter_rrefs();
    for (auto& r : p.second.parameter_rrefs()) params.push_back(r);
    return params;
  }
  Pipeline pipeline;
  optim::DistributedOptimizer optimizer;
  std::optional<Checkpoint> checkpoint;
};

// The generator of the samples' order as it stands after `epochs` epochs
// (each draws one permutation): a run resumed there trains in the
// undisturbed run's order.
at::Generator order_after(const PipelineConfig& cfg, int64_t samples, int64_t epochs) {
  auto gen = at::detail::createCPUGenerator(uint64_t(cfg.seed));
  for (int64_t e = 0; e < epochs; ++e) at::randperm(samples, gen, at::kLong);
  return gen;
}

// PF1: the checkpoint folder, if any: the one given, else (under rejoin)
// the driver's own when every stage runs on its host (OR5).
std::string checkpoint_folder(Worker& w, const PipelineConfig& cfg) {
  if (!cfg.checkpoint_dir.empty()) return cfg.checkpoint_dir;
  if (!cfg.rejoin || cfg.own_checkpoint_dir.empty()) return "";
  return own_checkpoint_folder(w, {cfg.stage1_rank, cfg.stage2_rank}, cfg.own_checkpoint_dir, "pipeline");
}

}  // namespace

std::vector<CurvePoint> run_pipeline(Worker& w, const PipelineConfig& cfg,
                                     const std::function<void(const CurvePoint&)>& on_epoch) {
  check(cfg);
  at::set_num_threads(1);
  const auto& train = cached_fashion_mnist("train", cfg.data_dir, cfg.limit);
  const auto& test = cached_fashion_mnist("t10k", cfg.data_dir, cfg.test_limit);
  steps_per_epoch(train, cfg);
  OwnerRecovery recovery(w, {cfg.stage1_rank, cfg.stage2_rank}, cfg.rejoin, cfg.rejoin_wait, "pipeline",
                         "the stages' workers");  // PF2, PF3
  std::optional<std::string> folder;  // PF1: the checkpoint folder ("": none), once known
  std::unique_ptr<Trainee> trainee;
  auto gen = order_after(cfg, train.size(), 0);
  std::vector<CurvePoint> points;  // of the epochs the stages' state holds
  bool trained = false;            // an epoch has begun: without a checkpoint, a death loses it
  auto save = [&](int64_t epoch) {
    trainee->checkpoint->save(epoch, checkpoint_meta(cfg, points));
    if (epoch > 0) std::printf("checkpoint: epoch %lld saved in %s\n", (long long)epoch, folder->c_str());
    std::fflush(stdout);
  };
  // Builds the stages (again, on new lives: `again`) and sets them to the
  // folder's last checkpoint (PF5), or saves a first one under rejoin
  // (PF1). Returns the step it restored, or -1.
  auto start = [&](bool again) -> int64_t {
    if (!folder) folder = checkpoint_folder(w, cfg);
    trainee.reset();  // the old lives' objects go first
    trainee = std::make_unique<Trainee>(w, cfg, *folder);
    if (again && cfg.bind_stages) std::printf("pipeline: %s\n", bind_stages(w, cfg).c_str());
    points.clear();
    gen = order_after(cfg, train.size(), 0);
    if (!trainee->checkpoint) return -1;
    auto saved = trainee->checkpoint->latest();
    if (!saved) {
      if (cfg.rejoin) save(0);  // a stage's death in the first epoch has a state to go back to
      return -1;
    }
    check_checkpoint_settings(*saved, settings_of(cfg), "pipeline", *folder, "epoch");
    auto restored = trainee->checkpoint->restore();
    points = points_of(*restored);
    if (int64_t(points.size()) > cfg.epochs) points.resize(size_t(cfg.epochs));  // asked for fewer: report those
    gen = order_after(cfg, train.size(), restored->step);
    return restored->step;
  };
  // PF5: what the first start that got through found, said once (a death
  // during the first restore is taken back by a start that says it).
  bool reported = false;
  auto report_start = [&](int64_t step) {
    reported = true;
    if (step > 0)
      std::printf("resuming after epoch %lld from the checkpoint in %s\n", (long long)step, folder->c_str());
    else if (step == 0)
      std::printf("resuming from the start, as the checkpoint in %s saved it\n", folder->c_str());
    std::fflush(stdout);
    if (on_epoch)
      for (const auto& point : points) on_epoch(point);
  };
  // PF2: the stages built again on their new lives, the last checkpoint
  // restored into them.
  auto take_back = [&] {
    auto step = start(true);
    if (!reported) {
      std::printf("pipeline: the stages are back\n");
      return report_start(step);
    }
    std::printf("pipeline: the stages are back; training goes on from the checkpoint of epoch %lld (epoch %lld "
                "runs again)\n",
                (long long)std::max<int64_t>(step, 0), (long long)std::max<int64_t>(step, 0) + 1);
    std::fflush(stdout);
  };
  // What a death costs can be rebuilt: from a checkpoint, or nothing was
  // trained yet.
  auto recoverable = [&] { return !trained || (folder && !folder->empty()); };
  auto survive = [&](const std::function<void()>& attempt) { recovery.run(attempt, recoverable, take_back); };
  survive([&] { report_start(start(false)); });
  while (int64_t(points.size()) < cfg.epochs) {
    survive([&] {
      int64_t epoch = int64_t(points.size()) + 1;
      auto& p = trainee->pipeline;
      auto train_step = [&](const at::Tensor& images, const at::Tensor& labels) {
        autograd::Context ctx(w);
        auto loss = loss_of(p.forward(images, cfg.micro_batches), labels);
        ctx.backward({loss});
        trainee->optimizer.step(ctx.id());
        return loss.item<double>();
      };
      auto logits_of = [&](const at::Tensor& images) { return p.forward(images, cfg.micro_batches); };
      trained = true;
      points.push_back(run_epoch(cfg, epoch, train, test, gen, train_step, logits_of));
      if (trainee->checkpoint && (epoch % cfg.checkpoint_every == 0 || epoch == cfg.epochs)) save(epoch);
      if (on_epoch) on_epoch(points.back());
    });
  }
  if (cfg.rejoin) excuse_deaths_after_training(w);  // PF6
  trainee.reset();
  if (folder) remove_own_checkpoint_folder(cfg.checkpoint_dir, *folder);  // PF1: the driver's own goes with the job
  return points;
}

struct SingleProcessPipeline::State {
  State(const PipelineConfig& c, int t)
      : cfg(c),
        threads(t),
        train(cached_fashion_mnist("train", cfg.data_dir, cfg.limit)),
        test(cached_fashion_mnist("t10k", cfg.data_dir, cfg.test_limit)),
        first(784, cfg.hidden1),
        second(cfg.hidden1, cfg.hidden2),
        sgd(parameters_of(first, second), torch::optim::SGDOptions(cfg.lr).momentum(cfg.momentum)),
        gen(at::detail::createCPUGenerator(uint64_t(cfg.seed))) {
    first->threads = second->threads = threads;
    first->one_blas_thread = second->one_blas_thread = false;
  }
  static std::vector<at::Tensor> parameters_of(FirstStage& a, SecondStage& b) {
    auto params = a->parameters();
    for (auto& t : b->parameters()) params.push_back(t);
    return params;
  }
  PipelineConfig cfg;
  int threads;
  const Dataset& train;
  const Dataset& test;
  FirstStage first;
  SecondStage second;
  torch::optim::SGD sgd;
  at::Generator gen;
  int64_t epoch = 0;
};

SingleProcessPipeline::SingleProcessPipeline(const PipelineConfig& cfg, int threads) {
  check(cfg);
  state_ = std::make_unique<State>(cfg, threads);
}

SingleProcessPipeline::~SingleProcessPipeline() = default;

CurvePoint SingleProcessPipeline::next_epoch() {
  auto& s = *state_;
  int before = at::get_num_threads();
  at::set_num_threads(s.threads);
  // As the parameter server's reference: OpenBLAS's whole pool, even where
  // castor-bench's rank 0 kept it to one thread for a server before.
  WholeOpenblasPool whole_pool;
  auto train_step = [&](const at::Tensor& images, const at::Tensor& labels) {
    s.sgd.zero_grad();
    auto loss = loss_of(s.second(s.first(images)), labels);
    loss.backward();
    s.sgd.step();
    return loss.item<double>();
  };
  auto logits_of = [&](const at::Tensor& images) {
    at::NoGradGuard no_grad;
    return s.second(s.first(images));
  };
  auto point = run_epoch(s.cfg, ++s.epoch, s.train, s.test, s.gen, train_step, logits_of);
  at::set_num_threads(before);
  return point;
}

StageSeconds time_stages(const PipelineConfig& cfg, int64_t rows, int reps) {
  check(cfg);
  at::set_num_threads(1);
  FirstStage first(784, cfg.hidden1);
  SecondStage second(cfg.hidden1, cfg.hidden2);
  first->one_blas_thread = second->one_blas_thread = false;  // this process runs other figures after
  auto images = at::rand({rows, 784});
  auto labels = at::randint(10, {rows}, at::kLong);
  std::vector<double> firsts, seconds;
  for (int r = 0; r < reps; ++r) {
    auto start = Clock::now();
    auto hidden = first(images);
    double forward = seconds_since(start);
    // Stage 2 sees a leaf, as on its own worker: its time ends with the
    // gradient it sends back.
    auto received = hidden.detach().requires_grad_(true);
    start = Clock::now();
    loss_of(second(received), labels).backward();
    seconds.push_back(seconds_since(start));
    start = Clock::now();
    hidden.backward(received.grad());
    firsts.push_back(forward + seconds_since(start));
  }
  auto median_of = [](std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(v.size() / 2), v.end());
    return v[v.size() / 2];
  };
  return {median_of(firsts), median_of(seconds)};
}

}  // namespace castor::apps::pipeline
