// `castor run rnn`: the distributed-autograd RFC's model-parallel RNN. The
// embedding table and the decoder live on one worker (the "parameter
// server"), the LSTM on another, and the trainer (rank 0) drives forward,
// distributed backward and the DistributedOptimizer step across them.
//
// The task is synthetic on purpose (no download, deterministic): sequences
// of a small vocabulary where each token follows from the one before by a
// fixed rule, so the next-token loss falls from ln(vocab) towards zero as the
// three parts learn together.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <tuple>
#include <variant>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/rnn.h>
#include <torch/nn/pimpl.h>

#include "apps/common/app.hpp"
#include "apps/common/checkpoint_flags.hpp"
#include "apps/common/owner_recovery.hpp"
#include "apps/common/progress.hpp"
#include "apps/common/training_log.hpp"
#include "apps/model_parallel_rnn/rnn_checkpoint.hpp"
#include "engine/context.hpp"
#include "optimizer/checkpoint.hpp"
#include "optimizer/dist_optimizer.hpp"
#include "optimizer/remote_module.hpp"

namespace castor::apps::rnn {

struct EmbeddingTableImpl : torch::nn::Module {
  EmbeddingTableImpl(int64_t vocab, int64_t dim) : table(register_module("table", torch::nn::Embedding(vocab, dim))) {}
  at::Tensor forward(const at::Tensor& tokens) { return table(tokens); }
  torch::nn::Embedding table;
};
TORCH_MODULE(EmbeddingTable);

// The LSTM's output sequence only: every batch starts from a zero state.
struct LstmStageImpl : torch::nn::Module {
  LstmStageImpl(int64_t in, int64_t hidden)
      : lstm(register_module("lstm", torch::nn::LSTM(torch::nn::LSTMOptions(in, hidden).batch_first(true)))) {}
  at::Tensor forward(const at::Tensor& x) { return std::get<0>(lstm->forward(x)); }
  torch::nn::LSTM lstm;
};
TORCH_MODULE(LstmStage);

struct DecoderImpl : torch::nn::Module {
  DecoderImpl(int64_t hidden, int64_t vocab) : linear(register_module("linear", torch::nn::Linear(hidden, vocab))) {}
  at::Tensor forward(const at::Tensor& h) { return linear(h); }
  torch::nn::Linear linear;
};
TORCH_MODULE(Decoder);

}  // namespace castor::apps::rnn

CASTOR_REMOTE_MODULE(castor::apps::rnn::EmbeddingTable, int64_t, int64_t);
CASTOR_REMOTE_MODULE(castor::apps::rnn::LstmStage, int64_t, int64_t);
CASTOR_REMOTE_MODULE(castor::apps::rnn::Decoder, int64_t, int64_t);

namespace castor::apps::rnn {
namespace {

// Sequences x[b, t] and their next tokens y[b, t] = x[b, t + 1], where
// x[b, t + 1] = (3 * x[b, t] + 1) mod vocab from a random first token.
std::pair<at::Tensor, at::Tensor> make_batch(int64_t batch, int64_t length, int64_t vocab, at::Generator& gen) {
  auto seq = at::empty({batch, length + 1}, at::kLong);
  seq.select(1, 0).copy_(at::randint(vocab, {batch}, gen, at::kLong));
  for (int64_t t = 1; t <= length; ++t) seq.select(1, t).copy_((seq.select(1, t - 1) * 3 + 1).remainder(vocab));
  return {seq.slice(1, 0, length).contiguous(), seq.slice(1, 1, length + 1).contiguous()};
}

// Note [Flags], F1.
void declare_flags(po::options_description& flags) {
  flags.add_options()
      ("steps", po::value<int64_t>()->default_value(150)->value_name("N"), "training steps")
      ("batch-size", po::value<int64_t>()->default_value(32)->value_name("N"), "sequences per step")
      ("seq-len", po::value<int64_t>()->default_value(12)->value_name("N"), "tokens per sequence")
      ("vocab", po::value<int64_t>()->default_value(16)->value_name("N"), "vocabulary size")
      ("embed", po::value<int64_t>()->default_value(16)->value_name("N"), "embedding size")
      ("hidden", po::value<int64_t>()->default_value(32)->value_name("N"), "LSTM hidden size")
      ("optimizer", po::value<std::string>()->default_value("adam")->value_name("adam|sgd"), "the optimizer")
      ("lr", po::value<double>()->value_name("X"), "learning rate (default 0.01 for adam, 0.5 for sgd)")
      ("seed", po::value<int64_t>()->default_value(1)->value_name("N"), "data seed")
      ("log-every", po::value<int64_t>()->default_value(10)->value_name("N"),
       "print the loss every N steps (0: only at the end)")
      ("out", po::value<std::string>()->value_name("PREFIX"),
       "write PREFIX.csv and PREFIX.svg (default castor-out/rnn-<job>)")

      ("no-progress", po::bool_switch(), "no progress bar");
  declare_checkpoint_flags(flags, "the three parts and the optimizer", 50, "steps");
}

optim::Spec spec_from(const Flags& flags) {
  auto name = flags.get<std::string>("optimizer");
  double lr = flags.find<double>("lr").value_or(name == "sgd" ? 0.5 : 0.01);
  if (name == "adam") return optim::Adam{lr};
  if (name == "sgd") return optim::SGD{lr};
  throw std::invalid_argument("--optimizer must be adam or sgd, got '" + name + "'");
}

// F5 of Note [Flags].
void check_flags(const Flags& args) {
  spec_from(args);
  for (const char* name : {"steps", "batch-size", "seq-len", "embed", "hidden"})
    if (args.get<int64_t>(name) < 1) throw std::invalid_argument("--" + std::string(name) + " must be at least 1");
  checkpoint_settings(args, "rnn");
  if (args.get<int64_t>("vocab") < 2) throw std::invalid_argument("--vocab must be at least 2");
}

// Note [RNN failure]
// ~~~~~~~~~~~~~~~~~~
// The parts' owners hold the training's state (the weights and Adam's
// moments); the trainer holds only the data's generator. As the pipeline's
// stages (Note [Pipeline failure] in apps/pipeline/pipeline.cpp):
//  RF1 Under a restart policy the trainer checkpoints the three parts and
//      the optimizer before the first step and every --checkpoint-every
//      steps: in --checkpoint-dir, the cluster file's checkpoint_dir, or a
//      folder of the job's own (OR5 of Note [Owner recovery]), removed when
//      training ends.
//  RF2 A part's worker that dies is waited for (OR1-OR3); all three parts
//      and the optimizer are built again on the new lives, the last
//      checkpoint is restored, and training goes on after its step, on the
//      batches the undisturbed run would have drawn (the generator replays
//      the batches before).
//  RF3 With a checkpoint folder the trainer resumes from its last checkpoint
//      at start (a whole-job restart, R3); one made with other settings is
//      refused, naming both. The loss curve comes back with it (the meta).
//  RF4 A part's worker that dies after training is excused (OR4).

// The model's shape and where its parts live.
struct Shape {
  int64_t batch, length, vocab, embed, hidden;
  int64_t ps, lstm_owner;  // ranks
};

// The three parts, their optimizer and their checkpoint: built at start and
// again on the owners' new lives (RF2).
struct Parts {
  Parts(Worker& w, const Shape& s, const optim::Spec& spec, const std::string& folder)
      : embedding(w, s.ps, s.vocab, s.embed),
        lstm(w, s.lstm_owner, s.embed, s.hidden),
        decoder(w, s.ps, s.hidden, s.vocab),
        optimizer(w, spec, parameters()) {
    if (folder.empty()) return;
    checkpoint.emplace(w, folder);
    checkpoint->add("embedding", embedding).add("lstm", lstm).add("decoder", decoder).add("optimizer", optimizer);
  }
  std::vector<RRef<at::Tensor>> parameters() const {
    std::vector<RRef<at::Tensor>> params;
    for (const auto& part : {embedding.parameter_rrefs(), lstm.parameter_rrefs(), decoder.parameter_rrefs()})
      params.insert(params.end(), part.begin(), part.end());
    return params;
  }
  nn::RemoteModule<EmbeddingTable> embedding;
  nn::RemoteModule<LstmStage> lstm;
  nn::RemoteModule<Decoder> decoder;
  optim::DistributedOptimizer optimizer;
  std::optional<Checkpoint> checkpoint;
};

// Its flags were checked by parse_app_flags (F5), as every app's.
int run(Worker& w, const Flags& args) {
  auto spec = spec_from(args);
  int64_t steps = args.get<int64_t>("steps");
  Shape shape{args.get<int64_t>("batch-size"), args.get<int64_t>("seq-len"), args.get<int64_t>("vocab"),
              args.get<int64_t>("embed"), args.get<int64_t>("hidden"), 1, 2};
  if (w.rank() != 0) return 0;  // the parts' owners serve until the trainer is done
  if (w.world_size() < 2) throw std::invalid_argument("rnn: needs at least 2 workers");
  if (w.world_size() < 3) shape.lstm_owner = 1;
  std::printf("model-parallel RNN: embedding + decoder on %s, LSTM on %s, trainer %s\n",
              w.get_worker_info(shape.ps).name.c_str(), w.get_worker_info(shape.lstm_owner).name.c_str(),
              w.name().c_str());
  std::fflush(stdout);
  const auto checkpoints = checkpoint_settings(args, "rnn");
  const bool rejoin = checkpoints.restart_policy;
  const auto settings = rnn_settings(args, std::visit([](const auto& o) { return o.lr; }, spec));
  OwnerRecovery recovery(w, {shape.ps, shape.lstm_owner}, rejoin, std::chrono::minutes(1), "rnn",
                         "the parts' workers");  // RF2
  std::optional<std::string> folder;  // RF1 ("": none), once known
  std::unique_ptr<Parts> parts;
  auto gen = at::detail::createCPUGenerator(uint64_t(args.get<int64_t>("seed")));
  std::vector<CurvePoint> points;  // the loss of each step the parts' state holds
  bool trained = false;
  auto save = [&](int64_t step) {
    parts->checkpoint->save(step, rnn_meta(settings, points));
    // From the line's start, as the step lines: over the progress bar.
    if (step > 0) std::printf("\rcheckpoint: step %lld saved in %s\n", (long long)step, folder->c_str());
    std::fflush(stdout);
  };
  // Builds the parts (again, on new lives after a death) and sets them to
  // the folder's last checkpoint (RF3), or saves a first one under rejoin
  // (RF1). Returns the step restored, or -1.
  auto start = [&]() -> int64_t {
    if (!folder)
      folder = !checkpoints.given.empty() ? checkpoints.given
               : rejoin                   ? own_checkpoint_folder(w, {shape.ps, shape.lstm_owner}, checkpoints.own, "rnn")
                                          : "";
    parts.reset();  // the old lives' objects go first
    parts = std::make_unique<Parts>(w, shape, spec, *folder);
    gen = at::detail::createCPUGenerator(uint64_t(args.get<int64_t>("seed")));
    points.clear();
    if (!parts->checkpoint) return -1;
    auto saved = parts->checkpoint->latest();
    if (!saved) {
      if (rejoin) save(0);
      return -1;
    }
    check_checkpoint_settings(*saved, settings, "rnn", *folder, "step");
    auto restored = parts->checkpoint->restore();
    points = rnn_points(*restored);
    for (int64_t s = 0; s < restored->step; ++s) make_batch(shape.batch, shape.length, shape.vocab, gen);
    return restored->step;
  };
  bool reported = false;  // what the first start that got through found, said once
  auto report_start = [&](int64_t step) {
    reported = true;
    if (step >= 0) std::printf("rnn: resuming after step %lld from the checkpoint in %s\n", (long long)step, folder->c_str());
    std::fflush(stdout);
  };
  auto take_back = [&] {
    auto step = start();
    std::printf("rnn: the parts are back\n");
    if (!reported) return report_start(step);
    std::printf("rnn: training goes on from the checkpoint of step %lld\n", (long long)std::max<int64_t>(step, 0));
    std::fflush(stdout);
  };
  auto recoverable = [&] { return !trained || (folder && !folder->empty()); };
  auto survive = [&](const std::function<void()>& attempt) { recovery.run(attempt, recoverable, take_back); };
  survive([&] { report_start(start()); });

  TrainingLog log("castor model-parallel RNN (loss per step)", "step");
  {
    ProgressBar bar("training", steps, !args.get<bool>("no-progress"));
    int64_t log_every = args.get<int64_t>("log-every");
    while (int64_t(points.size()) < steps) {
      survive([&] {
        int64_t step = int64_t(points.size()) + 1;
        auto [x, y] = make_batch(shape.batch, shape.length, shape.vocab, gen);
        trained = true;
        double loss_value;
        {
          autograd::Context ctx(w);
          auto logits = parts->decoder.forward(parts->lstm.forward(parts->embedding.forward(x)));
          auto loss = at::nll_loss(at::log_softmax(logits.reshape({-1, shape.vocab}), 1), y.reshape({-1}));
          ctx.backward({loss});
          parts->optimizer.step(ctx.id());
          loss_value = loss.item<double>();
        }
        points.push_back(CurvePoint{double(step), loss_value, -1, 0, 0});
        if (parts->checkpoint && (step % checkpoints.every == 0 || step == steps)) save(step);
        char note[48];
        std::snprintf(note, sizeof(note), "loss %.4f", loss_value);
        bar.update(step, note);
        if (log_every > 0 && (step % log_every == 0 || step == 1)) {
          std::printf("\rstep %lld/%lld %s\n", (long long)step, (long long)steps, note);
          std::fflush(stdout);
        }
      });
    }
    char note[48];
    std::snprintf(note, sizeof(note), "loss %.4f", points.back().loss);
    bar.finish(note);
  }
  if (rejoin) excuse_deaths_after_training(w);  // RF4
  parts.reset();
  if (folder) remove_own_checkpoint_folder(checkpoints.given, *folder);  // RF1
  for (const auto& p : points) log.add(p);
  const auto& pts = log.points();
  std::printf("loss: first step %.4f, last step %.4f (ln %lld = %.4f)\n", pts.front().loss, pts.back().loss,
              (long long)shape.vocab, std::log(double(shape.vocab)));
  auto paths = log.write(curve_prefix(args.find<std::string>("out").value_or(""), "rnn"));
  std::printf("curves: %s and %s\n", paths[0].c_str(), paths[1].c_str());
  std::fflush(stdout);
  return 0;
}

AppRegistrar registrar{
    App{"rnn", "the RFC's model-parallel RNN: embedding + decoder on worker1, LSTM on worker2, trainer on worker0", 3,
        declare_flags, run, check_flags}};

}  // namespace
}  // namespace castor::apps::rnn
