// `castor run pipeline`: an MLP split into two stages on two workers; the
// driver (rank 0) cuts each batch into micro-batches and chains them through
// the stages without waiting: stage 1's output stays on stage 1 as an RRef,
// stage 2 fetches it straight from there, and only stage 2's logits come
// back. While stage 2 works on micro-batch i, stage 1 already computes i + 1.
// Backward runs through both stages by distributed autograd.
#include <cstdio>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "apps/common/app.hpp"
#include "apps/common/fashion_mnist.hpp"
#include "apps/common/progress.hpp"
#include "apps/common/training_log.hpp"
#include "engine/context.hpp"
#include "optimizer/dist_optimizer.hpp"
#include "optimizer/remote_module.hpp"

namespace castor::apps::pipeline {

struct FirstStageImpl : torch::nn::Module {
  FirstStageImpl(int64_t in, int64_t out) : fc(register_module("fc", torch::nn::Linear(in, out))) {}
  at::Tensor forward(const at::Tensor& x) {
    at::set_num_threads(1);  // three processes share this host's cores
    return at::relu(fc(x));
  }
  torch::nn::Linear fc;
};
TORCH_MODULE(FirstStage);

struct SecondStageImpl : torch::nn::Module {
  SecondStageImpl(int64_t in, int64_t hidden)
      : fc1(register_module("fc1", torch::nn::Linear(in, hidden))),
        fc2(register_module("fc2", torch::nn::Linear(hidden, 10))) {}
  at::Tensor forward(const at::Tensor& x) {
    at::set_num_threads(1);
    return fc2(at::relu(fc1(x)));
  }
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(SecondStage);

}  // namespace castor::apps::pipeline

CASTOR_REMOTE_MODULE(castor::apps::pipeline::FirstStage, int64_t, int64_t);
CASTOR_REMOTE_MODULE(castor::apps::pipeline::SecondStage, int64_t, int64_t);

namespace castor::apps::pipeline {
namespace {

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

double accuracy(const Pipeline& p, const Dataset& test, int64_t micro_batches) {
  int64_t correct = 0;
  for (int64_t at = 0; at < test.size(); at += 1000) {
    auto images = test.images.slice(0, at, at + 1000);
    auto labels = test.labels.slice(0, at, at + 1000);
    correct += p.forward(images, micro_batches).argmax(1).eq(labels).sum().item<int64_t>();
  }
  return double(correct) / double(test.size());
}

// Note [Flags], F1.
void declare_flags(po::options_description& flags) {
  flags.add_options()
      ("epochs", po::value<int64_t>()->default_value(2)->value_name("N"), "epochs")
      ("batch-size", po::value<int64_t>()->default_value(128)->value_name("N"), "samples per step")
      ("micro-batches", po::value<int64_t>()->default_value(4)->value_name("N"),
       "micro-batches per step, in flight together")
      ("hidden1", po::value<int64_t>()->default_value(256)->value_name("N"), "stage 1 width")
      ("hidden2", po::value<int64_t>()->default_value(128)->value_name("N"), "stage 2 hidden width")
      ("lr", po::value<double>()->default_value(0.05, shown(0.05))->value_name("X"), "SGD learning rate")
      ("momentum", po::value<double>()->default_value(0.9, shown(0.9))->value_name("X"), "SGD momentum")
      ("seed", po::value<int64_t>()->default_value(1)->value_name("N"), "shuffling seed")
      ("limit", po::value<int64_t>()->default_value(-1)->value_name("N"),
       "use the first N training samples (-1: all)")
      ("test-limit", po::value<int64_t>()->default_value(-1)->value_name("N"), "use the first N test samples (-1: all)")
      ("data", po::value<std::string>()->default_value(default_fashion_mnist_dir())->value_name("DIR"),
       "Fashion-MNIST folder")
      ("out", po::value<std::string>()->value_name("PREFIX"),
       "write PREFIX.csv and PREFIX.svg (default castor-out/pipeline-<job>)")
      ("no-progress", po::bool_switch(), "no progress bar");
}

int run(Worker& w, const Flags& args) {
  int64_t epochs = args.get<int64_t>("epochs"), batch = args.get<int64_t>("batch-size");
  int64_t micro = args.get<int64_t>("micro-batches"), hidden1 = args.get<int64_t>("hidden1");
  int64_t hidden2 = args.get<int64_t>("hidden2");
  double lr = args.get<double>("lr"), momentum = args.get<double>("momentum");
  if (epochs < 1 || batch < 1 || micro < 1 || micro > batch || hidden1 < 1 || hidden2 < 1)
    throw std::invalid_argument("--epochs, --batch-size, --hidden1, --hidden2 must be positive and "
                                "1 <= --micro-batches <= --batch-size");
  if (w.rank() != 0) return 0;  // the stages' owners serve until the driver is done
  if (w.world_size() < 2) throw std::invalid_argument("pipeline: needs at least 2 workers");
  at::set_num_threads(1);
  auto data_dir = args.get<std::string>("data");
  const auto& train = cached_fashion_mnist("train", data_dir, args.get<int64_t>("limit"));
  const auto& test = cached_fashion_mnist("t10k", data_dir, args.get<int64_t>("test-limit"));
  int64_t steps = train.size() / batch;
  if (steps < 1) throw std::invalid_argument("pipeline: fewer training samples than --batch-size");

  int64_t stage1_owner = 1, stage2_owner = w.world_size() >= 3 ? 2 : 1;  // ranks
  std::printf("pipeline: stage 1 (784-%lld) on %s, stage 2 (%lld-%lld-10) on %s, %lld micro-batches per batch of %lld\n",
              (long long)hidden1, w.get_worker_info(stage1_owner).name.c_str(), (long long)hidden1,
              (long long)hidden2, w.get_worker_info(stage2_owner).name.c_str(), (long long)micro, (long long)batch);
  std::fflush(stdout);
  Pipeline p{nn::RemoteModule<FirstStage>(w, stage1_owner, 784, hidden1),
             nn::RemoteModule<SecondStage>(w, stage2_owner, hidden1, hidden2)};
  std::vector<RRef<at::Tensor>> params = p.first.parameter_rrefs();
  for (auto& r : p.second.parameter_rrefs()) params.push_back(r);
  optim::SGD spec{lr};
  spec.momentum = momentum;
  optim::DistributedOptimizer optimizer(w, spec, params);

  TrainingLog log("castor pipeline (2 stages, " + std::to_string(micro) + " micro-batches) on Fashion-MNIST");
  auto gen = at::detail::createCPUGenerator(uint64_t(args.get<int64_t>("seed")));
  for (int64_t epoch = 1; epoch <= epochs; ++epoch) {
    ProgressBar bar("epoch " + std::to_string(epoch) + "/" + std::to_string(epochs), steps, !args.get<bool>("no-progress"));
    auto order = at::randperm(train.size(), gen, at::kLong);
    auto start = std::chrono::steady_clock::now();
    double loss_sum = 0;
    for (int64_t s = 0; s < steps; ++s) {
      auto idx = order.slice(0, s * batch, (s + 1) * batch);
      autograd::Context ctx(w);
      auto logits = p.forward(train.images.index_select(0, idx), micro);
      auto loss = at::nll_loss(at::log_softmax(logits, 1), train.labels.index_select(0, idx));
      ctx.backward({loss});
      optimizer.step(ctx.id());
      loss_sum += loss.item<double>();
      char note[48];
      std::snprintf(note, sizeof(note), "loss %.4f", loss_sum / double(s + 1));
      bar.update(s + 1, note);
    }
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    CurvePoint point{double(epoch), loss_sum / double(steps), accuracy(p, test, micro), seconds,
                     double(steps * batch) / seconds};
    char note[128];
    std::snprintf(note, sizeof(note), "loss %.4f  test accuracy %.4f  %.0f samples/s", point.loss, point.accuracy,
                  point.samples_per_s);
    bar.finish(note);
    log.add(point);
  }
  std::printf("test accuracy: %.2f%%\n", log.points().back().accuracy * 100);
  auto paths = log.write(curve_prefix(args.find<std::string>("out").value_or(""), "pipeline"));
  std::printf("curves: %s and %s\n", paths[0].c_str(), paths[1].c_str());
  std::fflush(stdout);
  return 0;
}

AppRegistrar registrar{App{
    "pipeline", "Fashion-MNIST MLP split into two stages on worker1 and worker2, micro-batches chained with rpc_async",
    3, declare_flags, run}};

}  // namespace
}  // namespace castor::apps::pipeline
