// The pipeline app's training, callable from the app and from castor-bench:
// an MLP 784-H1-H2-10 split into two stages on two workers (stage 1 the first
// layer, stage 2 the rest); the driver (rank 0) cuts each batch into
// micro-batches and chains them through the stages without waiting.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "actors/api/worker.hpp"
#include "apps/common/fashion_mnist.hpp"
#include "apps/common/training_log.hpp"

namespace castor::apps::pipeline {

struct PipelineConfig {
  int64_t epochs = 2;
  int64_t batch = 128;        // samples per step
  int64_t micro_batches = 4;  // per step, in flight together
  int64_t hidden1 = 256;      // stage 1 width
  int64_t hidden2 = 128;      // stage 2 hidden width
  double lr = 0.05;
  double momentum = 0.9;
  int64_t seed = 1;           // the order of the samples
  int64_t limit = -1;         // training samples used (all when <= 0)
  int64_t test_limit = -1;    // test samples used (all when <= 0)
  std::string data_dir = default_fashion_mnist_dir();
  bool progress = true;
  int64_t stage1_rank = 1;
  int64_t stage2_rank = 2;
  bool bind_stages = true;    // bind_stages: a CPU each when they share a host
  // Note [Pipeline failure] (pipeline.cpp)
  bool rejoin = false;  // PF2: dead stages come back (CASTOR_MAX_RESTARTS > 0)
  std::chrono::milliseconds rejoin_wait{60000};  // PF3
  std::string checkpoint_dir;     // PF1, PF5: given (--checkpoint-dir, a cluster file's); empty: none
  int64_t checkpoint_every = 1;   // epochs between checkpoints
  std::string own_checkpoint_dir; // PF1: used under rejoin when none is given and the stages share the driver's host
};

/// Refuses settings out of range (std::invalid_argument naming the flags).
void check(const PipelineConfig& cfg);

/// Note [Pipeline], P1: two stages in two processes of one host, neither
/// the driver's, are bound to a CPU each (the first and the second of those
/// each may use), unless `cfg.bind_stages` is off. Returns a line that says
/// what was done or why not; a stage that could not be bound leaves the
/// other one bound.
std::string bind_stages(Worker& w, const PipelineConfig& cfg);

/// Trains on the driver `w` (rank 0) through the stages' owners; one point
/// per epoch (training loss, test accuracy, seconds, samples/s), those a
/// checkpoint covered included. `on_epoch` sees each epoch as it ends (and
/// again an epoch that runs again after a stage's death, PF2).
std::vector<CurvePoint> run_pipeline(Worker& w, const PipelineConfig& cfg,
                                     const std::function<void(const CurvePoint&)>& on_epoch = {});

/// Seconds one forward and backward pass of each stage takes alone on
/// `rows` random samples in this process, on one intra-op thread (the median
/// of `reps`): what bounds the gain of pipelining the two stages.
struct StageSeconds {
  double first = 0, second = 0;
};
StageSeconds time_stages(const PipelineConfig& cfg, int64_t rows, int reps);

/// The same model, data, order and batch in this one process with libtorch
/// on `threads` intra-op threads (micro-batches do not apply), one epoch per
/// call: castor-bench times an epoch of it after each of the pipeline's, so
/// that both are timed in turns on a machine whose speed drifts.
class SingleProcessPipeline {
 public:
  SingleProcessPipeline(const PipelineConfig& cfg, int threads);
  ~SingleProcessPipeline();
  SingleProcessPipeline(const SingleProcessPipeline&) = delete;
  SingleProcessPipeline& operator=(const SingleProcessPipeline&) = delete;

  /// Trains the next epoch (from 1) and evaluates; the process's intra-op
  /// thread count is as before afterwards.
  CurvePoint next_epoch();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace castor::apps::pipeline
