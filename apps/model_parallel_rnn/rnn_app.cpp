// `castor run rnn`: the distributed-autograd RFC's model-parallel RNN. The
// embedding table and the decoder live on one worker (the "parameter
// server"), the LSTM on another, and the trainer (rank 0) drives forward,
// distributed backward and the DistributedOptimizer step across them.
//
// The task is synthetic on purpose (no download, deterministic): sequences
// of a small vocabulary where each token follows from the one before by a
// fixed rule, so the next-token loss falls from ln(vocab) towards zero as the
// three parts learn together.
#include <cmath>
#include <cstdio>
#include <tuple>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/rnn.h>
#include <torch/nn/pimpl.h>

#include "apps/common/app.hpp"
#include "apps/common/progress.hpp"
#include "apps/common/training_log.hpp"
#include "engine/context.hpp"
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

optim::Spec spec_from(const AppArgs& args) {
  auto name = args.get("optimizer", "adam");
  double lr = args.get_double("lr", name == "sgd" ? 0.5 : 0.01);
  if (name == "adam") return optim::Adam{lr};
  if (name == "sgd") return optim::SGD{lr};
  throw std::invalid_argument("--optimizer must be adam or sgd, got '" + name + "'");
}

int run(Worker& w, const AppArgs& args) {
  auto spec = spec_from(args);
  int64_t steps = args.get_int("steps", 150), batch = args.get_int("batch-size", 32);
  int64_t length = args.get_int("seq-len", 12), vocab = args.get_int("vocab", 16);
  int64_t embed = args.get_int("embed", 16), hidden = args.get_int("hidden", 32);
  if (steps < 1 || batch < 1 || length < 1 || vocab < 2 || embed < 1 || hidden < 1)
    throw std::invalid_argument("--steps, --batch-size, --seq-len, --embed, --hidden must be positive, --vocab >= 2");
  if (w.rank() != 0) return 0;  // the parts' owners serve until the trainer is done
  if (w.world_size() < 2) throw std::invalid_argument("rnn: needs at least 2 workers");
  auto ps = w.get_worker_info(int64_t(1)).name;
  auto lstm_owner = w.get_worker_info(int64_t(w.world_size() >= 3 ? 2 : 1)).name;
  std::printf("model-parallel RNN: embedding + decoder on %s, LSTM on %s, trainer %s\n", ps.c_str(),
              lstm_owner.c_str(), w.name().c_str());
  std::fflush(stdout);

  nn::RemoteModule<EmbeddingTable> embedding(w, ps, vocab, embed);
  nn::RemoteModule<LstmStage> lstm(w, lstm_owner, embed, hidden);
  nn::RemoteModule<Decoder> decoder(w, ps, hidden, vocab);
  std::vector<RRef<at::Tensor>> params;
  for (auto& p : embedding.parameter_rrefs()) params.push_back(p);
  for (auto& p : lstm.parameter_rrefs()) params.push_back(p);
  for (auto& p : decoder.parameter_rrefs()) params.push_back(p);
  optim::DistributedOptimizer optimizer(w, spec, params);

  auto gen = at::detail::createCPUGenerator(uint64_t(args.get_int("seed", 1)));
  TrainingLog log("castor model-parallel RNN (loss per step)", "step");
  ProgressBar bar("training", steps, !args.has("no-progress"));
  int64_t every = args.get_int("log-every", 10);
  for (int64_t step = 1; step <= steps; ++step) {
    auto [x, y] = make_batch(batch, length, vocab, gen);
    double loss_value;
    {
      autograd::Context ctx(w);
      auto logits = decoder.forward(lstm.forward(embedding.forward(x)));
      auto loss = at::nll_loss(at::log_softmax(logits.reshape({-1, vocab}), 1), y.reshape({-1}));
      ctx.backward({loss});
      optimizer.step(ctx.id());
      loss_value = loss.item<double>();
    }
    log.add(CurvePoint{double(step), loss_value, -1, 0, 0});
    char note[48];
    std::snprintf(note, sizeof(note), "loss %.4f", loss_value);
    bar.update(step, note);
    if (every > 0 && (step % every == 0 || step == 1)) {
      std::printf("\rstep %lld/%lld %s\n", (long long)step, (long long)steps, note);
      std::fflush(stdout);
    }
  }
  const auto& pts = log.points();
  std::printf("loss: first step %.4f, last step %.4f (ln %lld = %.4f)\n", pts.front().loss, pts.back().loss,
              (long long)vocab, std::log(double(vocab)));
  auto paths = log.write(curve_prefix(args.get("out", ""), "rnn"));
  std::printf("curves: %s and %s\n", paths[0].c_str(), paths[1].c_str());
  std::fflush(stdout);
  return 0;
}

AppRegistrar registrar{App{
    "rnn",
    "the RFC's model-parallel RNN: embedding + decoder on worker1, LSTM on worker2, trainer on worker0",
    "  --steps N         training steps (default 150)\n"
    "  --batch-size N    sequences per step (default 32)\n"
    "  --seq-len N       tokens per sequence (default 12)\n"
    "  --vocab N         vocabulary size (default 16)\n"
    "  --embed N         embedding size (default 16)\n"
    "  --hidden N        LSTM hidden size (default 32)\n"
    "  --optimizer NAME  adam or sgd (default adam)\n"
    "  --lr X            learning rate (default 0.01 for adam, 0.5 for sgd)\n"
    "  --seed N          data seed (default 1)\n"
    "  --log-every N     print the loss every N steps (default 10; 0: only at the end)\n"
    "  --out PREFIX      write PREFIX.csv and PREFIX.svg (default castor-out/rnn-<job>)\n"
    "  --no-progress     no progress bar\n",
    3,
    {"steps", "batch-size", "seq-len", "vocab", "embed", "hidden", "optimizer", "lr", "seed", "log-every", "out",
     "no-progress"},
    run}};

}  // namespace
}  // namespace castor::apps::rnn
